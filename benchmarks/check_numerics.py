"""What ``check_numerics: true`` costs a training step: the training workload (DDP, gloo, one
rank, CPU) with the numerics locator armed (:func:`aorta.run.numerics.armed`, the hooks every
armed rank gets) against the same workload unarmed, alternated run by run in one process::

    .venv/bin/python benchmarks/check_numerics.py --runs 7 --steps 30 --dims 128,512

Per model size: each run's CPU time per step (the process's CPU seconds over the run's steps:
on a shared machine the wall clock mostly measures the other tenants; torch runs one
thread), armed and not, runs alternated; the median of the pairs' ratios with their range,
and the cost per module call (the medians' difference over the module calls of a step). The
locator finds nothing here (the model stays finite), so every module call pays its check —
the steady-state cost; after a finding the hooks are removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _run(dim: int, steps: int, armed: bool, folder: Path) -> tuple[float, int]:
    import torch.distributed

    import aorta.workloads.training as training
    from aorta.run import numerics
    from aorta.run.workload import TrialContext

    # The process group is this process's own (below), not the trial's rendezvous; patched
    # where the workload looks them up (it imports them, so they are not its exports).
    def joined(ctx: TrialContext, *, backend: str | None = None) -> Any:
        return torch.distributed

    training.init_process_group = joined  # type: ignore[attr-defined]
    training.destroy_process_group = lambda: None  # type: ignore[attr-defined]
    ctx = TrialContext(
        cell="bench", trial=0, steps=steps, rank=0, world_size=1, backend="gloo",
        artifact_dir=folder,
    )  # fmt: skip
    workload = training.TrainingWorkload({"mode": "ddp", "model_dim": dim, "num_layers": 4}, ctx)
    workload.setup()
    calls = [0]

    def count(*_: object) -> None:
        calls[0] += 1

    from torch.nn.modules import module as nn_module

    counter = nn_module.register_module_forward_hook(count) if not armed else None
    guard = numerics.armed(folder / "n", rank=0) if armed else contextlib.nullcontext()
    try:
        with guard:
            c0 = time.process_time()
            result = workload.run()
            cpu = time.process_time() - c0
    finally:
        workload.cleanup()
        if counter is not None:
            counter.remove()
    n = max(1, len(result.step_times_ms))
    return cpu * 1000.0 / n, calls[0] // n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--dims", default="128,512")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29613", GLOO_SOCKET_IFNAME="lo")
    torch.distributed.init_process_group("gloo", init_method="env://", rank=0, world_size=1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dim in (int(d) for d in args.dims.split(",")):
            on: list[float] = []
            off: list[float] = []
            per_step = 0
            for run in range(2 * args.runs):
                armed = run % 2 == 1
                value, calls = _run(dim, args.steps, armed, Path(tmp))
                (on if armed else off).append(value)
                per_step = max(per_step, calls)
            a, b = statistics.median(on), statistics.median(off)
            ratios = sorted(x / y for x, y in zip(on, off, strict=True))
            rows.append(
                {
                    "model_dim": dim,
                    "off_ms": b,
                    "armed_ms": a,
                    "ratio": statistics.median(ratios),
                    "ratio_range": [ratios[0], ratios[-1]],
                    "module_calls_per_step": per_step,
                    "us_per_call": (a - b) * 1000 / per_step if per_step else float("nan"),
                    "runs": args.runs,
                    "steps": args.steps,
                }
            )
    torch.distributed.destroy_process_group()
    print(
        "| model_dim | off: CPU ms / step | armed | ratio, median of pairs [range] "
        "| module calls / step | µs per call |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lo, hi = r["ratio_range"]
        print(
            f"| {r['model_dim']} | {r['off_ms']:.2f} | {r['armed_ms']:.2f} | "
            f"{r['ratio']:.3f} [{lo:.3f}, {hi:.3f}] | {r['module_calls_per_step']} | "
            f"{r['us_per_call']:.1f} |"
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
