"""``aorta trace memory`` on a 243 MB-class trace, against the trace loader alone::

    .venv/bin/python benchmarks/trace_memory.py --size-mb 243 --runs 3

Writes a Kineto trace of ``--size-mb`` MB (uncompressed, Kineto's indented layout) by
replicating ``tests/data/traces/h100_bert_small.json.gz`` (H100, CUDA, ``profile_memory``:
its 236 ``[memory]`` events per copy come along; :func:`trace_load.generate`), then runs, each
in a fresh process, alternated ``--runs`` times: the memory report
(:func:`aorta.trace.memory.memory_report`, what the command and ``load_run(traces=True)`` run)
and the peer, ``aorta.trace.load(path, cache="off")`` (the loader alone, which keeps no
``[memory]`` event). Reported: each one's CPU seconds (user + system of the child, imports
excluded) and wall seconds, medians, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_load import ROOT, generate

SOURCE = ROOT / "tests" / "data" / "traces" / "h100_bert_small.json.gz"
CHILD = """
import json, os, sys, time
path, which = sys.argv[1], sys.argv[2]
import aorta.trace
from aorta.trace.memory import memory_report
c0, t0 = time.process_time(), time.perf_counter()
if which == "memory":
    r = memory_report(path)
    out = {"devices": len(r.devices), "memory_events": int(r.devices["events"].sum()),
           "peak": int(r.devices["peak_allocated_bytes"].max())}
else:
    trace = aorta.trace.load(path, cache="off", workers=1)
    out = {"events": len(trace.events)}
out |= {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0}
print(json.dumps(out))
"""


def _child(path: Path, which: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), which], capture_output=True, text=True, check=True
    )
    got: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=243)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.pt.trace.json"
        made = generate(SOURCE, path, args.size_mb, indent=True)
        results: dict[str, list[dict[str, Any]]] = {"memory": [], "loader": []}
        for _ in range(args.runs):
            for which in ("memory", "loader"):
                results[which].append(_child(path, which))
    med = {
        k: {m: statistics.median(r[m] for r in v) for m in ("cpu_s", "wall_s")}
        for k, v in results.items()
    }
    summary = {
        "file_mb": made["bytes"] / 1e6,
        "copies": made["copies"],
        "memory_events": results["memory"][0]["memory_events"],
        "loader_events": results["loader"][0]["events"],
        "median": med,
        "cpu_ratio": med["memory"]["cpu_s"] / med["loader"]["cpu_s"],
        "runs": results,
    }
    print(
        f"trace: {summary['file_mb']:.0f} MB, {summary['memory_events']:,} [memory] events, "
        f"{summary['loader_events']:,} events kept by the loader"
    )
    print("| contender | CPU s (median) | wall s (median) |")
    print("|---|---:|---:|")
    print(f"| memory_report | {med['memory']['cpu_s']:.2f} | {med['memory']['wall_s']:.2f} |")
    print(
        f"| trace loader alone (cache off) | {med['loader']['cpu_s']:.2f} | {med['loader']['wall_s']:.2f} |"
    )
    print(f"ratio (CPU): {summary['cpu_ratio']:.2f}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
