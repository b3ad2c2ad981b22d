"""``aorta history`` over a year of nightly runs, and ``aorta bisect``'s trials against a sweep
of every value.

    .venv/bin/python benchmarks/history.py history [--runs 365] [--cells 20] [--trials 40] [--peer-runs 40] [--keep DIR]
    .venv/bin/python benchmarks/history.py bisect [--values 16] [--first-bad 11] [--remeasure]
    .venv/bin/python benchmarks/history.py bisect-vs --other OTHER/aorta/run/bisect.py [--values 6] [--first-bad 3] [--rounds 3]
    .venv/bin/python benchmarks/history.py changepoints [--series 1500] [--steps 1000]

**history**: ``--runs`` complete run directories (``results.nc`` from real trial records,
manifest, ``host_env.json``) written under a temporary folder (not timed), one night each;
cell 0 gets 8% slower at two thirds of the year with a torch upgrade, cell 1 starts failing
10% of its trials a month later. Timed, in a fresh process: :func:`aorta.history` —
finding the runs, reading them, change points of every series × cell × metric (run-order
permutations), the environment diff around each, the gate — with the process's peak RSS
(and its RSS before the call). **Peer**, same process tree: the obvious way to read the same
runs, :func:`aorta.load_run` on each (xarray opens ``results.nc``), on ``--peer-runs`` of them,
against the same runs read by :func:`aorta.load_history`.

**bisect**: a probe whose step time doubles from ``--first-bad`` on; ``aorta bisect`` over
``--values`` values (the endpoints measured once and reused; ``--remeasure``: both again beside
every midpoint), against one adaptive sweep of every value as a cell against the first (the
same engine and stopping rule, every value screened), and the fixed design's count (every
value × ``max_trials``).

**bisect-vs**: this checkout's :func:`aorta.run.bisect.bisect` against another version of the
module (``--other``: its file, say a checkout of ``main``, imported under another name beside
this aorta), alternated ``--rounds`` times in one process on the probe of
``tests/cli/test_bisect_sweep.py`` (15 → 40 ms from ``--first-bad``); each round's wall time,
CPU seconds (this process and its children) and trials, one JSON line each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _write(root: Path, runs: int, cells: int, trials: int) -> None:
    from tests.history_runs import snapshot, write_night

    change, failing = int(runs * 2 / 3), min(runs - 5, int(runs * 2 / 3) + 30)
    for night in range(runs):
        write_night(
            root,
            night,
            cells=cells,
            trials=trials,
            level=lambda n, c: 100.0 * (1 + c / 50) * (1.08 if c == 0 and n >= change else 1.0),
            fail=lambda n, c: 0.1 if c == 1 and n >= failing else 0.0,
            snap=snapshot("2.13.0" if night >= change else "2.12.0"),
        )


def _timed(code: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


ANALYZE = """
import json, resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import aorta.matrix.series, h5py  # what the command imports before it reads anything
imports = (time.perf_counter() - t0, time.process_time() - c0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start, cpu = time.perf_counter(), time.process_time()
h = aorta.matrix.series.analyze([{root!r}])
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
doc = h.to_json()
print(json.dumps({{"seconds": seconds, "cpu": cpu, "imports": imports,
    "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "rss_before_mib": before, "runs": len(doc["runs"]), "series": len(doc["series"]),
    "changes": [(c["cell"], c["metric"], c["after"][-19:], sorted(c["environment_changes"])) for c in doc["change_points"]],
    "regressed": doc["gate"]["regressed"]}}))
"""

PEER = """
import json, time
import aorta
from aorta.store.history import find_runs
runs = [r.path for r in find_runs([{root!r}])][:{n}]
aorta.load_history(runs[:1]); aorta.load_run(runs[0])  # imports and first-call costs, both
start, cpu = time.perf_counter(), time.process_time()
[aorta.load_run(r) for r in runs]
peer, peer_cpu = time.perf_counter() - start, time.process_time() - cpu
start, cpu = time.perf_counter(), time.process_time()
aorta.load_history(runs)
ours, ours_cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({{"peer_s": peer, "ours_s": ours, "peer_cpu": peer_cpu, "ours_cpu": ours_cpu, "n": len(runs)}}))
"""


def history(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp) / "nightly"
        start = time.perf_counter()
        if not root.is_dir():
            _write(root, args.runs, args.cells, args.trials)
        print(
            f"wrote {args.runs} runs × {args.cells} cells × {args.trials} trials in {time.perf_counter() - start:.0f} s (not timed)"
        )
        got = _timed(ANALYZE.format(root=str(root)))
        print(
            f"aorta.history: {got['seconds']:.2f} s wall, {got['cpu']:.2f} s CPU, peak RSS "
            f"{got['peak_mib']:.0f} MiB (after imports {got['rss_before_mib']:.0f} MiB); imports "
            f"before it {got['imports'][0]:.2f} s wall, {got['imports'][1]:.2f} s CPU"
        )
        print(
            f"  {got['runs']} runs, {got['series']} series × cells, regressed: {got['regressed']}"
        )
        for c in got["changes"]:
            print(f"  change point: {c}")
        peer = _timed(PEER.format(root=str(root), n=args.peer_runs))
        print(
            f"reading {peer['n']:.0f} runs: aorta.load_history {peer['ours_s']:.2f} s wall "
            f"({peer['ours_cpu']:.2f} s CPU), aorta.load_run each (peer) {peer['peer_s']:.2f} s "
            f"({peer['peer_cpu']:.2f} s CPU) — ×{peer['peer_cpu'] / peer['ours_cpu']:.1f} in CPU"
        )
        print(f"load average: {Path('/proc/loadavg').read_text().split()[:3]}")


BISECT_PROBE = (
    "import os, time\n"
    "d = 0.04 if int(os.environ['PROBE_BUILD'][1:]) >= {bad} else 0.015\n"
    "for _ in range(3):\n"
    "    t = time.perf_counter(); time.sleep(d)\n"
    "    print(f'step time: {{(time.perf_counter() - t) * 1000:.3f}} ms', flush=True)\n"
)
SETTINGS = """
step_time_regex: 'step time: ([0-9.]+) ms'
adaptive: {min_trials: 5, max_trials: 20}
"""


def bisect(args: argparse.Namespace) -> None:
    from aorta.cli import main

    values = [f"b{i}" for i in range(args.values)]
    probe = BISECT_PROBE.format(bad=args.first_bad)
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "bisect.yaml"
        recipe.write_text(
            SETTINGS
            + "confound: {threshold: 1.3}\n"
            + "cells: [{name: base, mitigations: [none]}]\n"
            + f"bisect: {{variable: PROBE_BUILD, values: [{', '.join(values)}]}}\n"
        )
        start = time.perf_counter()
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = main(
                [
                    "bisect",
                    "--recipe",
                    str(recipe),
                    "-o",
                    tmp,
                    "--json",
                    *(["--remeasure"] if args.remeasure else []),
                    "--",
                    "python3",
                    "-c",
                    probe,
                ]
            )
        doc = json.loads(buf.getvalue())
        took = time.perf_counter() - start
        print(
            f"bisect: exit {code}, first bad {doc['first_bad']} (truth b{args.first_bad}), {len(doc['steps'])} steps, {doc['trials']} trials, {took:.0f} s"
        )
        cells = "\n".join(
            f"  - {{name: {v}, mitigations: [none], extra_env: {{PROBE_BUILD: {v}}}}}"
            for v in values
        )
        sweep = Path(tmp) / "sweep.yaml"
        sweep.write_text(
            SETTINGS
            + "schedule: adaptive\nconfound: {threshold: 1.3, baseline_cell: b0}\ncells:\n"
            + cells
            + "\n"
        )
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            main(
                [
                    "sweep",
                    "run",
                    "--recipe",
                    str(sweep),
                    "-o",
                    str(Path(tmp) / "full"),
                    "--",
                    "python3",
                    "-c",
                    probe,
                ]
            )
        took = time.perf_counter() - start
        full = sum(1 for _ in (Path(tmp) / "full").glob("*/*/*/cells/*/trial_*.json"))
        print(
            f"adaptive sweep of all {args.values} values: {full} trials, {took:.0f} s; fixed design: {args.values * 20} trials"
        )
        print(
            f"bisect / adaptive sweep: {doc['trials'] / full:.2f}; bisect / fixed: {doc['trials'] / (args.values * 20):.2f}"
        )


def bisect_vs(args: argparse.Namespace) -> None:
    import importlib.util
    import resource

    import aorta.run.bisect as ours
    from aorta.recipe import load_recipe_text
    from aorta.run.options import RunOptions
    from tests.cli.test_bisect_sweep import PROBE, RECIPE

    spec = importlib.util.spec_from_file_location("other_bisect", args.other)
    assert spec is not None and spec.loader is not None
    other = importlib.util.module_from_spec(spec)
    sys.modules["other_bisect"] = other  # dataclasses look their module up by name
    spec.loader.exec_module(other)

    def cpu() -> float:
        own, kids = (
            resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        )
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    values = ", ".join(f"b{i}" for i in range(args.values))
    probe = PROBE.replace(">= 3", f">= {args.first_bad}")
    text = RECIPE.replace("[b0, b1, b2, b3, b4, b5]", f"[{values}]")
    recipe = load_recipe_text(text, command=["python3", "-c", probe])
    for i in range(args.rounds):
        for who, run in (("other", other.bisect), ("this", ours.bisect)):
            with tempfile.TemporaryDirectory() as tmp:
                start, used = time.perf_counter(), cpu()
                r = run(recipe, options=RunOptions(output=tmp, progress="none"))
                print(json.dumps({
                    "who": who, "round": i, "wall_s": round(time.perf_counter() - start, 1),
                    "cpu_s": round(cpu() - used, 1), "trials": r.trials, "first_bad": r.first_bad,
                    "steps": [(s.value, s.verdict, s.trials) for s in r.steps],
                    "load1": Path("/proc/loadavg").read_text().split()[0],
                }), flush=True)  # fmt: skip


def changepoints(args: argparse.Namespace) -> None:
    """One change-point test's cost, exact against permutations, per series length; clean
    9-night steps (4 + 5, trials 1% noise, levels 5% apart) missed at level 0.025 each way;
    and the false alarms of ``--series`` stationary series with one outlying night (level
    0.05, as ``test_one_outlying_night_raises_no_false_alarm_beyond_the_level`` draws them)."""
    import numpy as np

    from aorta.matrix import changepoints as cp

    exact_max = cp.EXACT_MAX_RUNS
    rng = np.random.default_rng(0)

    def best(runs: list[Any], exact: bool, reps: int = 7) -> float:
        cp.EXACT_MAX_RUNS = 99 if exact else 0
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            cp._test(runs, resamples=cp.DEFAULT_RESAMPLES, seed=0)
            times.append(time.perf_counter() - start)
        return round(min(times) * 1e3, 2)

    for j in range(8, 17):
        step = [rng.normal(0 if i < j // 2 else 1, 0.05, 8) for i in range(j)]
        null = [rng.normal(0, 1, 8) for _ in range(j)]
        exact, mc_step, mc_null = best(step, True), best(step, False), best(null, False)
        print(json.dumps({"runs": j, "exact_ms": exact, "permutations_ms": mc_step,
                          "permutations_large_p_ms": mc_null}), flush=True)  # fmt: skip
    missed = {"permutations": 0, "exact": 0}
    for i in range(args.steps):
        values = [100 * ((1.05 if n >= 4 else 1.0) + rng.normal(0, 0.001, 8)) for n in range(9)]
        for how, limit in (("permutations", 0), ("exact", 99)):
            cp.EXACT_MAX_RUNS = limit
            missed[how] += [k for k, _ in cp.segment(values, level=0.025, seed=i)] != [4]
    print(json.dumps({"clean_4_5_steps": args.steps, "missed": missed}), flush=True)
    cp.EXACT_MAX_RUNS = exact_max
    alarms = newest = newest_alarms = 0
    start = time.process_time()
    for i in range(args.series):
        runs, trials = int(rng.integers(9, 40)), int(rng.integers(3, 21))
        outlier, noisy, where = rng.uniform(-8, 8), bool(rng.integers(2)), int(rng.integers(runs))
        values = [
            100 * (1 + rng.normal(0, 0.01) + rng.normal(0, 0.01, trials)) for _ in range(runs)
        ]
        if noisy:
            values[where] = 100 * (1 + rng.normal(0, 0.01 * max(abs(outlier), 1), trials))
        else:
            values[where] = values[where] + outlier
        alarm = bool(cp.segment(values, level=0.05, seed=i, resamples=999))
        alarms += alarm
        newest += where == runs - 1
        newest_alarms += alarm and where == runs - 1
    print(json.dumps({
        "stationary_series": args.series, "any_change_point": round(alarms / args.series, 4),
        "newest_night_outlier": newest, "its_alarms": round(newest_alarms / max(newest, 1), 4),
        "cpu_s": round(time.process_time() - start, 1),
    }), flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    h = sub.add_parser("history")
    h.add_argument("--runs", type=int, default=365)
    h.add_argument("--cells", type=int, default=20)
    h.add_argument("--trials", type=int, default=40)
    h.add_argument("--peer-runs", type=int, default=40)
    h.add_argument("--keep", help="write the runs here and keep them (reused when present)")
    b = sub.add_parser("bisect")
    b.add_argument("--values", type=int, default=16)
    b.add_argument("--first-bad", type=int, default=11)
    b.add_argument("--remeasure", action="store_true", help="aorta bisect --remeasure")
    v = sub.add_parser("bisect-vs")
    v.add_argument("--other", required=True, help="another version's aorta/run/bisect.py")
    v.add_argument("--values", type=int, default=6)
    v.add_argument("--first-bad", type=int, default=3)
    v.add_argument("--rounds", type=int, default=3)
    c = sub.add_parser("changepoints")
    c.add_argument("--series", type=int, default=1500)
    c.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    what = {"history": history, "bisect": bisect, "bisect-vs": bisect_vs}
    {**what, "changepoints": changepoints}[args.what](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
