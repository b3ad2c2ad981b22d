"""Trace parse speed on three real trace shapes, compact and indented, serial and parallel.

For each shape — MI300X RCCL with stacks (``python_function`` events, skipped), H100 BERT, and
the CUDA trace with the most shaped ``cpu_op`` events (A100 NCCL, ~2,000 with ``Input Dims``
per 4,800 events) — a trace of ``--size-mb`` MB is written into a temporary directory by
replicating the shipped trace's events (``trace_load.generate``), once compact and once
indented the way Kineto writes it. Then, in a fresh process each, ``--repeat`` times and
interleaved so that a busy machine disturbs all alike:

- **serial**: ``aorta.trace.load(path, cache="off", workers=1)`` + ``gpu_timeline()``, pinned
  to one core;
- **parallel**: the same with ``workers=N`` on N cores (``--workers``, default 2);
- **peer**: ``msgspec.json.decode`` of the whole file on one core — decoding every byte into Python
  objects and nothing else, the floor a Python-object parser cannot beat.

On a machine shared with other work, wall time understates what idle cores give, so the
serial CPU time (MB/s of CPU time) and the parallel run's CPU critical path (serial CPU time /
the larger of the caller's and the busiest worker's CPU time, so fork, pickling and merging
count) are reported too.

Reported: MB/s (file bytes / wall time of load + breakdown, inside the process), the serial
process's CPU time, the parallel speed-up (serial / parallel wall time), and peak memory /
file size: serial ``VmHWM``; parallel the calling process's ``VmHWM`` plus the largest worker's
peak RSS × (N − 1), an upper bound (forked workers share pages with the parent), and the peak
of the processes' summed PSS, sampled in one more run of each::

    .venv/bin/python benchmarks/trace_shapes.py                       # 200 MB each, ~10 min
    .venv/bin/python benchmarks/trace_shapes.py --size-mb 30 --repeat 1   # quick look
"""

from __future__ import annotations

import argparse
import contextlib
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_load import PEAK, ROOT, generate, machine, run_child

DATA = ROOT / "tests" / "data" / "traces"
SHAPES = {
    "mi300_rccl_stacks": DATA / "mi300_rccl_resnet_rank0.json.gz",
    "h100_bert": DATA / "h100_bert_small.json.gz",
    "a100_cuda_cpu_ops": DATA / "a100_nccl_sampled_rank-0.json.gz",
}

AORTA = """
import json, resource, sys, time
PEAK
path, workers, min_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import aorta.trace
t0, c0 = time.perf_counter(), time.process_time()
options = {} if min_bytes < 0 else {"parallel_min_bytes": min_bytes}
trace = aorta.trace.load(path, cache="off", workers=workers, **options)
t1 = time.perf_counter()
trace.gpu_timeline()
t2, c2 = time.perf_counter(), time.process_time()
children = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"load_s": t1 - t0, "analysis_s": t2 - t1, "cpu_s": c2 - c0, "maxrss": peak_rss(),
                  "child_maxrss": children.ru_maxrss * 1024, "child_cpu_s": children.ru_utime + children.ru_stime,
                  "events": len(trace.events), "parts": trace.info().stats["parts"]}))
"""

PEER = """
import json, sys, time
PEAK
import msgspec
t0, c0 = time.perf_counter(), time.process_time()
with open(sys.argv[1], "rb") as fh:
    doc = msgspec.json.decode(fh.read())
n = len(doc["traceEvents"])
t1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"load_s": t1 - t0, "analysis_s": 0.0, "cpu_s": c1 - c0, "maxrss": peak_rss(),
                  "child_maxrss": 0, "child_cpu_s": 0.0, "events": n, "parts": 1}))
"""


def _loadavg() -> float:
    return os.getloadavg()[0]


def measure(
    path: Path, *, workers: int, repeat: int, timeout: float, min_bytes: int
) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {"serial": [], "parallel": [], "peer": []}
    cores = sorted(os.sched_getaffinity(0))
    for _ in range(repeat):
        for name, code, args, pin in (
            ("serial", AORTA, [str(path), "1", "0"], {cores[0]}),
            ("parallel", AORTA, [str(path), str(workers), str(min_bytes)], set(cores[:workers])),
            ("peer", PEER, [str(path)], {cores[0]}),
        ):
            result = run_child(sys.executable, code, args, None, timeout, cores=pin)
            result["loadavg"] = _loadavg()
            runs[name].append(result)
    for name, args, pin in (
        ("serial", [str(path), "1", "0"], {cores[0]}),
        ("parallel", [str(path), str(workers), str(min_bytes)], set(cores[:workers])),
    ):
        runs[f"{name}_pss"] = [pss_peak(AORTA, args, pin, timeout)]
    return runs


def pss_peak(code: str, args: list[str], cores: set[int], timeout: float) -> dict[str, Any]:
    """Peak of the summed PSS of a run's processes (the caller and its workers), sampled every
    20 ms by this process (a separate run: sampling costs the measured processes time). PSS
    splits pages shared between processes (a forked worker's copy of the caller's heap), so
    the sum is the memory the run really used."""
    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-c", code.replace("PEAK", PEAK), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"),
        preexec_fn=lambda: os.sched_setaffinity(0, cores),
    )
    peak, deadline = 0, time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        total = 0
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(proc.pid)
            for each in [root, *root.children(recursive=True)]:
                total += each.memory_full_info().pss
        peak = max(peak, total)
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
    return {"pss_peak": peak}


def summarize(runs: dict[str, list[dict[str, Any]]], size: int, workers: int) -> dict[str, Any]:
    def wall(run: dict[str, Any]) -> float:
        return float(run["load_s"] + run["analysis_s"])

    out: dict[str, Any] = {}
    for name in ("serial", "parallel"):
        pss = runs.pop(f"{name}_pss", [{}])[0].get("pss_peak")
        out[f"{name}_pss_ratio"] = pss / size if pss else float("nan")
    for name, results in runs.items():
        good = [r for r in results if "error" not in r]
        if not good:
            out[name] = {"error": results[0].get("error") if results else "no runs"}
            continue
        walls = sorted(wall(r) for r in good)
        peak = [
            r["maxrss"] + (workers - 1) * r["child_maxrss"] if name == "parallel" else r["maxrss"]
            for r in good
        ]
        out[name] = {
            "runs_s": [round(wall(r), 3) for r in good],
            "best_mb_s": size / 1e6 / walls[0],
            "median_mb_s": size / 1e6 / statistics.median(walls),
            "cpu_mb_s": size / 1e6 / min(r["cpu_s"] for r in good),
            "total_cpu_s": min(r["cpu_s"] + r["child_cpu_s"] for r in good),
            "rss_ratio": max(peak) / size,
            "events": good[0]["events"],
            "parts": good[0]["parts"],
            "loadavg": [round(r["loadavg"], 1) for r in good],
        }
    if "error" not in out.get("serial", {"error": 1}) and "error" not in out.get(
        "parallel", {"error": 1}
    ):
        s = [wall(r) for r in runs["serial"] if "error" not in r]
        p = [wall(r) for r in runs["parallel"] if "error" not in r]
        out["speedup_median"] = statistics.median(s) / statistics.median(p)
        out["speedup_best"] = min(s) / min(p)
        # CPU-time critical path: the caller's CPU vs the busiest worker's (exact for 2 workers,
        # where one worker process runs beside the caller); what idle cores would give.
        serial_cpu = min(r["cpu_s"] for r in runs["serial"] if "error" not in r)
        path_s = min(
            max(r["cpu_s"], r["child_cpu_s"] / max(workers - 1, 1))
            for r in runs["parallel"]
            if "error" not in r
        )
        out["speedup_cpu_path"] = serial_cpu / path_s
    return out


def markdown(rows: list[dict[str, Any]], workers: int) -> str:
    lines = [
        f"| shape | format | MB | events kept | serial MB/s best (median) | serial MB/s of CPU time "
        f"| {workers} workers MB/s best (median) | speed-up median (best) | peak RSS / file serial "
        f"| ... {workers} workers (PSS) | peer `msgspec.json.decode` MB/s best | critical-path speed-up (CPU) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        s, p, q = row["serial"], row["parallel"], row["peer"]
        if "error" in s or "error" in p:
            lines.append(
                f"| {row['shape']} | {row['format']} | error: {s.get('error') or p.get('error')} |"
            )
            continue
        peer = f"{q['best_mb_s']:.0f}" if "error" not in q else q["error"]
        lines.append(
            f"| {row['shape']} | {row['format']} | {row['bytes'] / 1e6:.0f} | {s['events']:,} "
            f"| {s['best_mb_s']:.0f} ({s['median_mb_s']:.0f}) | {s['cpu_mb_s']:.0f} "
            f"| {p['best_mb_s']:.0f} ({p['median_mb_s']:.0f}) "
            f"| {row['speedup_median']:.2f}× ({row['speedup_best']:.2f}×) "
            f"| {s['rss_ratio']:.2f}× | {p['rss_ratio']:.2f}× ({row['parallel_pss_ratio']:.2f}×) | {peer} "
            f"| {row.get('speedup_cpu_path', float('nan')):.2f}× |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size-mb", type=float, default=200.0, help="Size of each generated trace."
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="Runs of each contender (interleaved)."
    )
    parser.add_argument("--workers", type=int, default=2, help="Workers of the parallel runs.")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument(
        "--formats", nargs="+", default=["compact", "indented"], choices=["compact", "indented"]
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="Seconds allowed per run.")
    parser.add_argument(
        "--parallel-min-mb",
        type=float,
        default=None,
        help="load(parallel_min_bytes=) of the parallel runs (default: the library's).",
    )
    parser.add_argument("--out", type=Path, default=ROOT / ".bench" / "trace_shapes.json")
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < args.workers:
        parser.error(f"--workers {args.workers} needs that many usable cores")

    min_bytes = -1 if args.parallel_min_mb is None else int(args.parallel_min_mb * 1e6)
    rows = []
    workdir = Path(tempfile.mkdtemp(prefix="aorta-trace-shapes-"))
    try:
        for shape in args.shapes:
            for fmt in args.formats:
                path = workdir / f"{shape}_{fmt}.json"
                t = time.perf_counter()
                made = generate(SHAPES[shape], path, args.size_mb, indent=fmt == "indented")
                print(
                    f"{shape} {fmt}: {made['bytes'] / 1e6:.0f} MB ({made['copies']} copies) "
                    f"in {time.perf_counter() - t:.0f} s",
                    flush=True,
                )
                runs = measure(
                    path,
                    workers=args.workers,
                    repeat=args.repeat,
                    timeout=args.timeout,
                    min_bytes=min_bytes,
                )
                row = {"shape": shape, "format": fmt, **made}
                row |= summarize(runs, made["bytes"], args.workers)
                rows.append(row)
                print(markdown([row], args.workers).splitlines()[-1], flush=True)
                path.unlink()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {"machine": machine(None), "workers": args.workers, "rows": rows}
    print()
    print(markdown(rows, args.workers))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\nresults written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
