"""Cost of the perf model against the GPU breakdown on the same loaded trace.

A trace of ``--size-mb`` MB is written into a temporary directory by replicating the MI300X
ResNet trace (shapes, autograd backward links, RCCL; ``trace_load.generate``) and parsed once
into its cache. Then, in a fresh process each, pinned to one core, ``--repeat`` times and
interleaved (so a busy machine disturbs all alike), the trace is loaded from the cache and one
analysis is timed:

- **peer**: ``trace.gpu_timeline()`` (the TraceLens-compatible breakdown, links included);
- **perf_ops**: ``trace.perf_ops()`` (every op family, busy time per call, roofline; rows as
  TraceLens forms them: op × parameters × types and strides);
- **perf_ops_shape**: ``trace.perf_ops(by="shape")`` (the coarser rows);
- **perf_summary**: ``trace.perf_summary()`` (every GPU op once, coverage);
- **perf_ops after the timeline**: ``gpu_timeline()`` first, then ``perf_ops()`` timed alone
  (the links the two share already built: what a notebook calling both pays extra);
- **alternate**: in one process, seven times each and interleaved, ``gpu_timeline()`` and
  ``perf_ops()`` on fresh views of the loaded events (``trace.with_rules``: no cached links) —
  the ratio least disturbed by a busy machine.

Reported: median CPU seconds (``time.process_time``: what a loaded machine disturbs least), the
ratio of the smallest CPU times (another process only ever adds time, so on a busy machine the
minimum over many runs is the truest cost) and
wall seconds of each, and the ratios to the peer (target ≤ 1.5× for perf_ops)::

    .venv/bin/python benchmarks/trace_perf.py                          # 200 MB, repeat 3
    .venv/bin/python benchmarks/trace_perf.py --size-mb 20 --repeat 1  # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_load import DEFAULT_SOURCE, generate, machine, run_child

CHILD = """
import json, sys, time
PEAK
path, what = sys.argv[1], sys.argv[2]
import aorta.trace
trace = aorta.trace.load(path, cache="use")
assert trace.info().cache == "hit", trace.info().cache
clock = time.process_time
if what == "alternate":  # fresh views of the same events (no cached links), interleaved
    import statistics
    peer, mine, peer_cpu, mine_cpu = [], [], [], []
    for _ in range(7):
        view = trace.with_rules(trace.rules)
        t0, c0 = time.perf_counter(), clock(); view.gpu_timeline()
        peer.append(time.perf_counter() - t0); peer_cpu.append(clock() - c0)
        view = trace.with_rules(trace.rules)
        t0, c0 = time.perf_counter(), clock(); view.perf_ops()
        mine.append(time.perf_counter() - t0); mine_cpu.append(clock() - c0)
    m = statistics.median
    print(json.dumps({"analysis_s": m(mine), "peer_s": m(peer), "cpu_s": m(mine_cpu),
                      "peer_cpu_s": m(peer_cpu), "rows": 0, "events": len(trace.events),
                      "maxrss": peak_rss()}))
    raise SystemExit
if what == "warm_perf_ops":
    trace.gpu_timeline()
t0, c0 = time.perf_counter(), clock()
if what == "peer":
    out = trace.gpu_timeline()
elif what == "perf_summary":
    out = trace.perf_summary()
elif what == "perf_ops_shape":
    out = trace.perf_ops(by="shape")
else:
    out = trace.perf_ops()
t1, c1 = time.perf_counter(), clock()
extra = {"coverage": out.attrs["coverage"]} if what == "perf_summary" else {}
print(json.dumps({"analysis_s": t1 - t0, "cpu_s": c1 - c0, "rows": len(out),
                  "events": len(trace.events), "maxrss": peak_rss(), **extra}))
"""
KINDS = ("peer", "perf_ops", "perf_ops_shape", "perf_summary", "warm_perf_ops", "alternate")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="aorta-perf-bench-"))
    try:
        path = tmp / "trace.json"
        info = generate(args.source, path, args.size_mb)
        size = path.stat().st_size
        import aorta.trace

        aorta.trace.load(path, cache="refresh")  # the parse cache the children read
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
        for _ in range(args.repeat):
            for kind in KINDS:
                runs[kind].append(
                    run_child(sys.executable, CHILD, [str(path), kind], args.core, timeout=3600)
                )
        errors = [r["error"] for rs in runs.values() for r in rs if "error" in r]
        if errors:
            raise SystemExit(f"a run failed: {errors[0]}")
        median = {k: statistics.median(r["analysis_s"] for r in rs) for k, rs in runs.items()}
        print(json.dumps({"machine": machine(args.core), "file_mb": size / 1e6, **info}, indent=1))
        print(
            f"events: {runs['peer'][0]['events']:,}; perf_ops rows: {runs['perf_ops'][0]['rows']}; "
            f"coverage: {runs['perf_summary'][0]['coverage']:.1%}"
        )
        cpu = {k: statistics.median(r["cpu_s"] for r in rs) for k, rs in runs.items()}
        least = {k: min(r["cpu_s"] for r in rs) for k, rs in runs.items()}
        print(
            "| analysis | median CPU s | runs CPU (s) | CPU ratio | min CPU ratio "
            "| median wall s | wall ratio |"
        )
        print("|---|---|---|---|---|---|---|")
        for kind in KINDS[:-1]:
            values = ", ".join(f"{r['cpu_s']:.3f}" for r in runs[kind])
            print(
                f"| {kind} | {cpu[kind]:.3f} | {values} | {cpu[kind] / cpu['peer']:.2f}× "
                f"| {least[kind] / least['peer']:.2f}× "
                f"| {median[kind]:.3f} | {median[kind] / median['peer']:.2f}× |"
            )
        alt = runs["alternate"]
        print(
            "alternating in one process (7 fresh views each, medians): perf_ops / gpu_timeline = "
            + ", ".join(f"{r['cpu_s'] / r['peer_cpu_s']:.2f}×" for r in alt)
            + " CPU, "
            + ", ".join(f"{r['analysis_s'] / r['peer_s']:.2f}×" for r in alt)
            + f" wall; CPU gpu_timeline {statistics.median(r['peer_cpu_s'] for r in alt):.3f} s, "
            f"perf_ops {statistics.median(r['cpu_s'] for r in alt):.3f} s"
        )
        print(
            "load average (1, 5, 15 min) at the end:", " ".join(f"{x:.1f}" for x in os.getloadavg())
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
