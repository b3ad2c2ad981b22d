"""A same-node multi-rank sweep of a trivial trial never dies of its own hang forensics.

    .venv/bin/python benchmarks/fr_soak.py [--ranks 4] [--trials 300] [--runs 1]

Before issue 44 the ranks of one node shared each trial's ``hang/`` folder and one rank's
cleanup removed it while another armed it: a 2-rank sweep of ``-- true`` died within a few
hundred trials (``FileNotFoundError: .../trial_0077/hang``) and left ``aorta-fr-*`` folders in
the temp folder. This runs ``torchrun --nproc-per-node N aorta sweep run`` of a recipe whose
trials run ``true``, with a private temp folder, armed (the default) and, as the peer in the
same run, with the flight recorder off (``forensics: {flight_recorder: false}``: nothing
armed, no folder made), alternated. Each run must exit 0 with a record of every trial, all
``ok``, no ``hang/`` folder left in a trial folder and nothing left in the temp folder; the
wall time per trial, armed against the peer, is arming's cost on a trial that does nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _recipe(folder: Path, trials: int, *, armed: bool) -> Path:
    path = folder / ("armed.yaml" if armed else "off.yaml")
    path.write_text(
        f"command: ['true']\ntrials: {trials}\ntimeout_per_trial: 120\n"
        "cells: [{name: probe, mitigations: [none]}]\n"
        + ("" if armed else "forensics: {flight_recorder: false}\n")
    )
    return path


def soak(ranks: int, trials: int, *, armed: bool) -> dict[str, Any]:
    """One sweep; what it left and how long it took."""
    work = Path(tempfile.mkdtemp(prefix="aorta-soak-"))
    tmp = work / "tmp"
    tmp.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")},
        "TMPDIR": str(tmp),
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }
    recipe = _recipe(work, trials, armed=armed)
    argv = [str(BIN / "torchrun"), f"--nproc-per-node={ranks}", "--standalone",
            str(BIN / "aorta"), "sweep", "run", "--recipe", str(recipe), "-o", str(work / "out")]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, cwd=work)
    wall = time.perf_counter() - start
    records = sorted(work.glob("out/*/*/*/cells/*/trial_*.json"))
    statuses = [json.loads(p.read_text())["status"] for p in records]
    hang_left = sorted(work.glob("out/*/*/*/cells/*/trial_*/hang"))
    # aorta's own (torchrun leaves a torchelastic_* folder of its own, not aorta's doing)
    tmp_left = sorted(p.name for p in tmp.iterdir() if p.name.startswith("aorta-"))
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    result = {
        "armed": armed,
        "rc": done.returncode,
        "records": len(records),
        "ok": statuses.count("ok"),
        "hang_left": len(hang_left),
        "tmp_left": tmp_left,
        "wall_s": wall,
        "per_trial_ms": 1000 * wall / max(1, trials),
        "error": errors[0] if errors else None,
    }
    shutil.rmtree(work, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--runs", type=int, default=1, help="sweeps of each kind, alternated")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for _ in range(args.runs):
        for armed in (True, False):
            got = soak(args.ranks, args.trials, armed=armed)
            rows.append(got)
            print(json.dumps(got), flush=True)
    print(
        f"\n{args.ranks} ranks of one node × {args.trials} trials of `true`, {args.runs} run(s) each:\n"
    )
    print(
        "| forensics | complete sweeps | records (ok) | hang/ left | aorta-* left in the temp folder | ms per trial |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    per = {}
    for armed in (True, False):
        mine = [r for r in rows if r["armed"] is armed]
        per[armed] = statistics.median(float(r["per_trial_ms"]) for r in mine)
        print(
            f"| {'armed' if armed else 'flight recorder off'} "
            f"| {sum(r['rc'] == 0 for r in mine)}/{len(mine)} "
            f"| {sum(int(r['records']) for r in mine)} ({sum(int(r['ok']) for r in mine)}) "
            f"| {sum(int(r['hang_left']) for r in mine)} "
            f"| {sum(len(r['tmp_left']) for r in mine)} "
            f"| {per[armed]:.1f} |"
        )
    print(f"\narmed / off, median ms per trial: {per[True] / per[False]:.3f} "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")  # fmt: skip
    failed = [r for r in rows if r["rc"] != 0 or r["records"] != args.trials or r["tmp_left"]]
    if failed:
        print(f"FAILED: {failed}")
        sys.exit(1)


if __name__ == "__main__":
    main()
