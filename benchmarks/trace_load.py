"""Trace loading benchmark: aorta vs HTA 0.5.0 (and optionally json.load + pandas), side by side.

Builds a >= 500 MB uncompressed Kineto trace by replicating a real trace's events with shifted
timestamps and ids, then times "load + GPU time breakdown" in a fresh process per contender,
each pinned to one CPU core, and reports wall time, throughput and peak RSS::

    .venv/bin/python benchmarks/trace_load.py                  # everything, ~2-3 minutes
    .venv/bin/python benchmarks/trace_load.py --size-mb 100 --skip-hta   # quick look

HTA runs in its own virtual environment (``.bench/hta``, created on first use with
``holistictraceanalysis==0.5.0`` and ``pandas<3`` — HTA 0.5.0 fails under pandas 3). The
generated trace lives in a temporary directory and is deleted afterwards (``--keep`` keeps it).
Results are printed as a Markdown table and written as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT / "tests" / "data" / "traces" / "mi300_rccl_resnet_rank0.json.gz"

# Peak RSS of this process image: VmHWM. (ru_maxrss would also count the benchmark process's
# own memory, which a child inherits across fork and keeps across exec.)
PEAK = """
def peak_rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
"""

AORTA_CHILD = """
import json, sys, time
PEAK
path, mode = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
import aorta.trace
t1 = time.perf_counter()
trace = aorta.trace.load(path, cache="off" if mode == "cold" else "use")
t2 = time.perf_counter()
table = trace.gpu_timeline()
t3 = time.perf_counter()
total = float(table.loc[table["type"] == "total_time", "time ms"].iloc[0])
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "analysis_s": t3 - t2, "maxrss": peak_rss(),
                  "events": len(trace.events), "total_ms": total, "cache": trace.info().cache}))
"""

HTA_CHILD = """
import json, logging, sys, time
PEAK
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
table = analysis.get_temporal_breakdown(visualize=False)
t3 = time.perf_counter()
events = sum(len(df) for df in analysis.t.traces.values())
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "analysis_s": t3 - t2, "maxrss": peak_rss(),
                  "events": events, "total_ms": float(table["kernel_time(us)"].iloc[0]) / 1e3, "cache": "n/a"}))
"""

PEER_CHILD = """
import json, sys, time
PEAK
t0 = time.perf_counter()
import numpy as np, pandas as pd
t1 = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    doc = json.load(fh)
frame = pd.DataFrame([e for e in doc["traceEvents"] if e.get("ph") == "X"], columns=["cat", "name", "ts", "dur"])
del doc
t2 = time.perf_counter()
gpu = frame[frame["cat"].isin(["kernel", "gpu_memcpy", "gpu_memset"])]
order = np.argsort(gpu["ts"].to_numpy(), kind="stable")
s = gpu["ts"].to_numpy()[order]; e = np.maximum.accumulate((gpu["ts"] + gpu["dur"]).to_numpy()[order])
new = np.r_[True, s[1:] > e[:-1]]  # the union of the GPU intervals: busy time
busy = float((e[np.r_[np.flatnonzero(new)[1:] - 1, len(e) - 1]] - s[new]).sum())
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "analysis_s": t3 - t2, "maxrss": peak_rss(),
                  "events": len(frame), "total_ms": float(e.max() - s.min()) / 1e3, "cache": "n/a"}))
"""


def generate(source: Path, target: Path, size_mb: float, *, indent: bool = False) -> dict[str, Any]:
    """Write a trace of at least ``size_mb`` MB: ``source``'s events replicated back to back.

    Compact JSON (one event per line), or with ``indent`` the way Kineto writes it: one key
    per line, nested objects indented by two spaces.
    """
    import msgspec

    raw = (
        gzip.decompress(source.read_bytes()) if source.name.endswith(".gz") else source.read_bytes()
    )
    doc = msgspec.json.decode(raw)
    events = doc.pop("traceEvents")
    complete = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), int | float)]
    span = (
        max(e["ts"] + e.get("dur", 0) for e in complete) - min(e["ts"] for e in complete) + 1000.0
    )
    written, copies = 0, 0
    with open(target, "wb") as out:
        out.write(b'{"traceEvents": [\n')
        while written < size_mb * 1e6:
            shift, id_shift = copies * span, copies * 10_000_000
            lines = []
            for event in events:
                if copies and event.get("ph") == "M":
                    continue
                event = dict(event)
                if isinstance(event.get("ts"), int | float):
                    event["ts"] = round(event["ts"] + shift, 3)
                if isinstance(event.get("id"), int):
                    event["id"] += id_shift
                if isinstance(event.get("args"), dict):
                    args = dict(event["args"])
                    for key in ("correlation", "External id", "Sequence number"):
                        if isinstance(args.get(key), int):
                            args[key] += id_shift
                    event["args"] = args
                lines.append(_dumps(event, indent))
            blob = (b",\n" if copies else b"") + b",\n".join(lines)
            out.write(blob)
            written += len(blob)
            copies += 1
        out.write(b"\n], " + msgspec.json.encode(doc)[1:])
    return {
        "source": str(source.relative_to(ROOT) if source.is_relative_to(ROOT) else source),
        "copies": copies,
        "bytes": target.stat().st_size,
    }


def _dumps(event: dict[str, Any], indent: bool) -> bytes:
    import msgspec

    if not indent:
        return msgspec.json.encode(event)
    text = msgspec.json.format(msgspec.json.encode(event), indent=2)
    return b"\n".join(b"    " + line for line in text.split(b"\n"))


def ensure_hta(venv: Path) -> Path:
    """The python of a venv with HTA 0.5.0 (created on first use)."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import hta, pandas; assert pandas.__version__ < '3'"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "holistictraceanalysis==0.5.0", "pandas<3"],
        check=True,
    )
    return python


def run_child(
    python: str,
    code: str,
    args: list[str],
    core: int | None,
    timeout: float,
    *,
    cores: set[int] | None = None,
) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (pinned to ``core``, or to ``cores``); its JSON line
    plus wall time."""
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONWARNINGS="ignore",
    )

    def pin() -> None:
        if (core is not None or cores) and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cores or ({core} if core is not None else set()))

    code = code.replace("PEAK", PEAK)
    start = time.perf_counter()
    proc = subprocess.run(
        [python, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=pin,
        timeout=timeout,
        cwd=ROOT,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1], "process_s": wall}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = wall
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source",
        type=Path,
        default=DEFAULT_SOURCE,
        help="Real trace whose events are replicated.",
    )
    parser.add_argument(
        "--size-mb",
        type=float,
        default=520.0,
        help="Size of the generated trace (uncompressed MB).",
    )
    parser.add_argument("--hta-venv", type=Path, default=ROOT / ".bench" / "hta")
    parser.add_argument("--skip-hta", action="store_true", help="Do not run HTA.")
    parser.add_argument(
        "--peer", action="store_true", help="Also run json.load + pandas (needs several GB of RAM)."
    )
    parser.add_argument(
        "--core",
        type=int,
        default=0,
        help="CPU core every contender is pinned to (-1: no pinning).",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="Seconds allowed per contender."
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="Runs of each aorta contender (median reported)."
    )
    parser.add_argument(
        "--hta-repeat", type=int, default=1, help="Runs of HTA (each takes minutes)."
    )
    parser.add_argument("--out", type=Path, default=ROOT / ".bench" / "trace_load.json")
    parser.add_argument("--keep", action="store_true", help="Keep the generated trace.")
    args = parser.parse_args(argv)
    core = None if args.core < 0 else args.core

    workdir = Path(tempfile.mkdtemp(prefix="aorta-trace-bench-"))
    trace = workdir / "rank0.json"  # HTA wants a directory of rank files: this is the only one
    try:
        t = time.perf_counter()
        made = generate(args.source, trace, args.size_mb)
        print(
            f"generated {trace} ({made['bytes'] / 1e6:.0f} MB, {made['copies']} copies of {made['source']}) in {time.perf_counter() - t:.0f} s",
            flush=True,
        )
        results: dict[str, list[dict[str, Any]]] = {}

        def measure(name: str, python: str, code: str, child_args: list[str], repeat: int) -> None:
            results[name] = [
                run_child(python, code, child_args, core, args.timeout) for _ in range(repeat)
            ]
            print(f"  {name}: {summarize(results[name], made['bytes'])}", flush=True)

        measure(
            "aorta (cold, no cache)", sys.executable, AORTA_CHILD, [str(trace), "cold"], args.repeat
        )
        run_child(sys.executable, AORTA_CHILD, [str(trace), "write-cache"], core, args.timeout)
        measure(
            "aorta (cached reload)", sys.executable, AORTA_CHILD, [str(trace), "warm"], args.repeat
        )
        if not args.skip_hta:
            try:
                hta_python = ensure_hta(args.hta_venv)
            except (OSError, subprocess.CalledProcessError) as exc:
                results["HTA 0.5.0"] = [{"error": f"could not install HTA: {exc}"}]
            else:
                for cache in workdir.glob("*.aorta-cache"):
                    cache.unlink()  # HTA must see a directory with the trace only
                measure("HTA 0.5.0", str(hta_python), HTA_CHILD, [str(workdir)], args.hta_repeat)
        if args.peer:
            measure("json.load + pandas", sys.executable, PEER_CHILD, [str(trace)], 1)
        report = {"machine": machine(core), "trace": made, "results": results}
        print(markdown(report))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
        print(f"\nresults written to {args.out}")
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def machine(core: int | None) -> dict[str, Any]:
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        models = [
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ]
        cpu = models[0] if models else cpu
    return {
        "cpu": cpu,
        "cores_visible": os.cpu_count(),
        "pinned_core": core,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _work(run: dict[str, Any]) -> float:
    return float(run["load_s"] + run["analysis_s"])


def summarize(runs: list[dict[str, Any]], size: int) -> str:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return f"failed: {runs[0]['error']}"
    work = sorted(_work(r) for r in ok)
    median = work[len(work) // 2]
    return f"load + breakdown {median:.2f} s median of {len(ok)} (best {work[0]:.2f} s), {size / 1e6 / median:.0f} MB/s, peak RSS {max(r['maxrss'] for r in ok) / 1e6:.0f} MB"


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = sorted((r for r in runs if "error" not in r), key=_work)
    return ok[len(ok) // 2] if ok else None


def markdown(report: dict[str, Any]) -> str:
    size = report["trace"]["bytes"]
    lines = [
        "| contender | runs | load (s) | GPU breakdown (s) | load + breakdown (s), median (best) | MB/s (median) | whole process (s) | peak RSS (MB) | peak RSS / file size |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in report["results"].items():
        run = _median_run(runs)
        if run is None:
            lines.append(f"| {name} | {len(runs)} | failed: {runs[0]['error']} | | | | | | |")
            continue
        ok = [r for r in runs if "error" not in r]
        best = min(_work(r) for r in ok)
        rss = max(r["maxrss"] for r in ok)
        lines.append(
            f"| {name} | {len(ok)} | {run['load_s']:.2f} | {run['analysis_s']:.3f} | {_work(run):.2f} ({best:.2f}) | "
            f"{size / 1e6 / _work(run):.0f} | {run['process_s']:.2f} | {rss / 1e6:.0f} | {rss / size:.2f} |"
        )
    base, hta = (
        _median_run(report["results"].get("aorta (cold, no cache)", [])),
        _median_run(report["results"].get("HTA 0.5.0", [])),
    )
    if base and hta:
        lines.append("")
        lines.append(
            f"aorta (cold) is {_work(hta) / _work(base):.1f}x faster than HTA 0.5.0 at load + breakdown "
            f"({hta['process_s'] / base['process_s']:.1f}x for the whole process, imports included)."
        )
    m = report["machine"]
    lines.append("")
    lines.append(
        textwrap.fill(
            f"Trace: {size / 1e6:.0f} MB uncompressed, {report['trace']['copies']} copies of {report['trace']['source']}. "
            f"Machine: {m['cpu']}, {m['cores_visible']} cores, each contender pinned to core {m['pinned_core']}, Python {m['python']}.",
            100,
        )
    )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
