"""CPU of a profiled trial in a fresh interpreter: aorta's StepProfiler against torch.profiler.

    .venv/bin/python benchmarks/profiled_trial.py [--runs 5] [--steps 6]

Each run starts ``python`` twice, alternated so both see the same machine state: once driving
a few matmul steps through :class:`aorta.run.profiler.StepProfiler` (what a process-isolated
trial with ``collect: [torch_profiler]`` does), once through ``torch.profiler.profile`` with the
same schedule and trace export (the peer: what a workload profiling itself does). Both first
import torch; the CPU after that import (user + system) is what profiling costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from typing import Any

COMMON = """
import json, os, sys, time
import torch
start = os.times()
def cpu():
    t = os.times()
    return t.user + t.system - start.user - start.system
def step():
    torch.ones(64, 64) @ torch.ones(64, 64)
"""

AORTA = (
    COMMON
    + """
from aorta.run.profiler import StepProfiler
from aorta.run.workload import TrialContext
ctx = TrialContext(cell="a", trial=0, artifact_dir=sys.argv[1],
                   collect={"torch_profiler": {"wait": 1, "warmup": 1, "active": 3}})
with StepProfiler(ctx, total_steps=int(sys.argv[2])) as prof:
    for _ in range(int(sys.argv[2])):
        step()
        prof.step()
print(json.dumps({"cpu_s": cpu(), "inductor": "torch._inductor" in sys.modules}))
"""
)

PEER = (
    COMMON
    + """
from torch.profiler import ProfilerActivity, profile, schedule
def ready(p):
    p.export_chrome_trace(os.path.join(sys.argv[1], "rank0.pt.trace.json.gz"))
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, on_trace_ready=ready,
             schedule=schedule(wait=1, warmup=1, active=3, repeat=1)) as prof:
    for _ in range(int(sys.argv[2])):
        step()
        prof.step()
print(json.dumps({"cpu_s": cpu(), "inductor": "torch._inductor" in sys.modules}))
"""
)


def one(code: str, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run(
            [sys.executable, "-c", code, folder, str(steps)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    got: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    ours, peer = [], []
    for _ in range(args.runs):
        ours.append(one(AORTA, args.steps))
        peer.append(one(PEER, args.steps))
    a = statistics.median(r["cpu_s"] for r in ours)
    p = statistics.median(r["cpu_s"] for r in peer)
    print(f"profiled steps after `import torch`, median of {args.runs} fresh interpreters:")
    print(f"  StepProfiler     {a:6.3f} CPU-s  (imports inductor: {ours[0]['inductor']})")
    print(f"  torch.profiler   {p:6.3f} CPU-s  (imports inductor: {peer[0]['inductor']})")
    print(f"  ratio            {a / p:6.3f}")


if __name__ == "__main__":
    main()
