"""Traces in the matrix benchmark: trace metrics of 50 trials × 2 ranks vs loading the traces.

Builds a run directory of ``--trials`` trials × 2 ranks whose traces are a real profiled 2-rank
CPU sweep's (gloo, torch.profiler; made by a 1-trial torchrun sweep unless ``--source`` names a
trial's ``trace/`` folder), each rank's events replicated with shifted times and ids up to
``--size-mb`` of JSON per rank, written gzipped as a sweep writes them. Then, each in a fresh
process, ``--repeat`` times:

- (a) the peer: ``aorta.trace.load`` of every trace file once, one after the other, no cache;
- (b) ``aorta.load_run(run, traces=True)`` cold (no parse or metrics cache), default workers,
  and (b1) the same with ``trace_workers=1`` (analysis in the calling process);
- (c) ``aorta.load_run(run, traces=True)`` again: warm (caches written by (b));
- (d) ``aorta.explain(run, "b", "a", by="op")`` with those warm caches (every trial's per-step
  op table from its metrics cache, the bootstrap over trials, 10,000 resamples).

Targets: (b) ≤ 2 × (a), (c) ≥ 10× faster than (b), (d) ≤ 1 s. Prints a Markdown table and writes JSON
(``--out``); the generated run directory (traces and caches) is deleted unless ``--keep``::

    .venv/bin/python benchmarks/trace_matrix.py              # 50 trials × 2 ranks × 5 MB, ~2 min
    .venv/bin/python benchmarks/trace_matrix.py --trials 10 --size-mb 1 --repeat 1   # quick look
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

SWEEP = """
ticket: BENCH
workload: race
trials: 1
steps: 4
timeout_per_trial: 120
workload_config: {mode: fsdp, fsdp_shard_size: 4096, num_layers: 2, dtype: float32,
                  model_dim: 64, simulate_compute: true}
collect: [{torch_profiler: {wait: 0, warmup: 1, active: 3}}]
cells: [{name: fsdp, mitigations: [none]}]
"""

RUN = """
trials: {trials}
collect: [torch_profiler]
cells: [{{name: a, mitigations: [none]}}, {{name: b, mitigations: [none], extra_env: {{B: "1"}}}}]
"""

CHILD = """
import json, sys, time
import aorta, aorta.trace, aorta.matrix.dataset, aorta.matrix.trace_metrics, aorta.trace.metrics, xarray
import aorta.matrix.explain
from pathlib import Path
mode, run = sys.argv[1], Path(sys.argv[2])
t0 = time.perf_counter()
if mode == "peer":
    files = sorted(run.glob("cells/*/trial_*/trace/rank*.pt.trace.json.gz"))
    events = sum(len(aorta.trace.load(f, cache="off").events) for f in files)
elif mode == "explain":
    d = aorta.explain(run, "b", "a", by="op")
    events = len(d)
else:
    workers = None if mode in ("cold", "warm") else 1
    ds = aorta.load_run(run, traces=True, trace_workers=workers)
    events = int(ds.trace_source.isin(["host", "gpu"]).sum())
print(json.dumps({"seconds": time.perf_counter() - t0, "count": events}))
"""


def source_traces(given: Path | None, work: Path) -> dict[int, Path]:
    """The two rank traces to replicate: ``given`` (a trial's trace folder) or a fresh sweep's."""
    if given is None:
        recipe = work / "sweep.yaml"
        recipe.write_text(SWEEP)
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
        cmd = [str(BIN / "torchrun"), "--nproc-per-node=2", "--standalone", str(BIN / "aorta")]
        cmd += ["sweep", "run", "--recipe", str(recipe), "-o", str(work / "sweep")]
        subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=600)
        (given,) = work.glob("sweep/*/*/*/cells/fsdp/trial_0000/trace")
    files = {int(p.name[4:].split(".")[0]): p for p in given.glob("rank*.pt.trace.json*")}
    if sorted(files) != [0, 1]:
        raise SystemExit(f"{given}: need rank0 and rank1 traces, found {sorted(files)}")
    return files


def _shift(event: dict[str, Any], offset: float, ids: int) -> dict[str, Any]:
    event = dict(event)
    if isinstance(event.get("ts"), int | float):
        event["ts"] = event["ts"] + offset
    args = event.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ("External id", "correlation", "Ev Idx"):
            if isinstance(args.get(key), int):
                args[key] += ids
        event["args"] = args
    if isinstance(event.get("id"), int):
        event["id"] += ids
    return event


def replicate(path: Path, size_mb: float) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
    """The trace's header, its events repeated (shifted in time and ids) to ~size_mb of JSON."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    timed = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), int | float)]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    per_copy = len(json.dumps(events))
    copies = max(1, round(size_mb * 1e6 / per_copy))
    out = [e for e in events if e.get("ph") == "M"]
    for k in range(copies):
        out += [_shift(e, k * span, k * 10_000_000) for e in events if e.get("ph") != "M"]
    return doc, out, span * copies


def build_run(work: Path, sources: dict[int, Path], *, trials: int, size_mb: float) -> Path:
    """A run directory (2 cells × trials/2) whose every trial holds the replicated traces."""
    sys.path.insert(0, str(ROOT))
    from aorta.recipe import load_recipe_text
    from aorta.run.sweep import sweep

    recipe = load_recipe_text(RUN.format(trials=max(1, trials // 2)), command=["true"])
    run_dir = sweep(recipe, output=work / "runs", progress="none").run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps(manifest | {"world_size": 2}))
    copies = {rank: replicate(path, size_mb) for rank, path in sources.items()}
    for n, folder in enumerate(sorted(run_dir.glob("cells/*/trial_*[0-9]"))):
        trace_dir = folder / "trace"
        trace_dir.mkdir(exist_ok=True)
        for rank, (header, events, _) in copies.items():
            jitter = 137.0 * n  # every trial's files differ (times), as real trials' do
            doc = header | {"traceEvents": [_shift(e, jitter, 0) for e in events]}
            data = json.dumps(doc).encode()
            (trace_dir / f"rank{rank}.pt.trace.json.gz").write_bytes(gzip.compress(data, 1))
    return run_dir


def clear_caches(run_dir: Path) -> None:
    for path in run_dir.rglob("*.aorta-cache"):
        path.unlink()


def child(mode: str, run_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(run_dir)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    got: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--size-mb", type=float, default=5.0, help="JSON per rank trace")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--source", type=Path, help="a trial's trace/ folder (rank0, rank1)")
    parser.add_argument("--out", type=Path, default=ROOT / ".bench" / "trace_matrix.json")
    parser.add_argument("--keep", action="store_true", help="keep the generated run directory")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="aorta-trace-matrix-"))
    try:
        t0 = time.perf_counter()
        run_dir = build_run(
            work, source_traces(args.source, work), trials=args.trials, size_mb=args.size_mb
        )
        files = sorted(run_dir.glob("cells/*/trial_*/trace/rank*.pt.trace.json.gz"))
        on_disk = sum(f.stat().st_size for f in files)
        json_bytes = len(gzip.decompress(files[0].read_bytes())) * len(files)  # all alike
        print(f"built {len(files)} traces in {time.perf_counter() - t0:.0f} s: {run_dir}")
        runs: dict[str, list[float]] = {
            "peer": [],
            "cold": [],
            "cold_serial": [],
            "warm": [],
            "explain": [],
        }
        for _ in range(args.repeat):
            runs["peer"].append(child("peer", run_dir)["seconds"])
            clear_caches(run_dir)
            runs["cold_serial"].append(child("cold_serial", run_dir)["seconds"])
            clear_caches(run_dir)
            runs["cold"].append(child("cold", run_dir)["seconds"])
            runs["warm"].append(child("warm", run_dir)["seconds"])
            runs["explain"].append(child("explain", run_dir)["seconds"])
        med = {k: statistics.median(v) for k, v in runs.items()}
        result = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "trials": len(files) // 2,
            "ranks": 2,
            "files": len(files),
            "json_mb_per_file": json_bytes / len(files) / 1e6,
            "gz_mb_per_file": on_disk / len(files) / 1e6,
            "seconds": runs,
            "median": med,
            "cold_over_peer": med["cold"] / med["peer"],
            "cold_serial_over_peer": med["cold_serial"] / med["peer"],
            "cold_over_warm": med["cold"] / med["warm"],
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        print(
            f"\n{result['trials']} trials × 2 ranks, {result['json_mb_per_file']:.1f} MB JSON "
            f"({result['gz_mb_per_file']:.2f} MB gzipped) per trace; median of {args.repeat}\n"
        )
        print("| what | seconds (median) | all runs |")
        print("|---|---|---|")
        labels = {
            "peer": "(a) aorta.trace.load of every file once, serial, no cache",
            "cold": "(b) load_run(traces=True), cold, default workers",
            "cold_serial": "(b1) load_run(traces=True), cold, trace_workers=1",
            "warm": "(c) load_run(traces=True), warm (caches)",
            "explain": "(d) explain(run, 'b', 'a', by='op'), warm caches",
        }
        for key, label in labels.items():
            print(f"| {label} | {med[key]:.2f} | {', '.join(f'{s:.2f}' for s in runs[key])} |")
        print(
            f"\n(b)/(a) = {result['cold_over_peer']:.2f}× (target ≤ 2), "
            f"(b1)/(a) = {result['cold_serial_over_peer']:.2f}×, "
            f"(b)/(c) = {result['cold_over_warm']:.1f}× (target ≥ 10), "
            f"(d) = {med['explain']:.2f} s (target ≤ 1)"
        )
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
