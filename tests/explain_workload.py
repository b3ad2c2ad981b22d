"""A tiny 2-rank profiled workload whose cells differ by a known amount in one named block.

Each step multiplies a small matrix, sleeps ``sleep_ms`` inside
``torch.profiler.record_function("injected")`` and all-reduces the product, so a cell with
``sleep_ms: 20`` is slower than one with ``sleep_ms: 0`` by 20 ms per step, all of it in the
``injected`` block — the known answer for :func:`aorta.explain`.
"""

from __future__ import annotations

import time

from aorta.plugins import (
    StepProfiler,
    Workload,
    WorkloadResult,
    destroy_process_group,
    init_process_group,
)


class InjectedSleep(Workload):
    """Matmul, a sleep in a ``record_function("injected")`` block, an all-reduce: per step."""

    name = "injected_sleep"
    launch_mode = "distributed"
    config_keys = frozenset({"sleep_ms", "dim"})

    def setup(self) -> None:
        self.dist = init_process_group(self.context)

    def run(self) -> WorkloadResult:
        import torch

        dim = int(self.config.get("dim", 64))
        pause = float(self.config.get("sleep_ms", 0.0)) / 1000.0
        x = torch.ones(dim, dim) / dim
        times = []
        with StepProfiler(self.context, total_steps=self.steps) as prof:
            for _ in range(self.steps):
                t0 = time.perf_counter()
                y = x @ x
                with torch.profiler.record_function("injected"):
                    if pause:
                        time.sleep(pause)
                self.dist.all_reduce(y)
                times.append((time.perf_counter() - t0) * 1000.0)
                prof.step()
        return WorkloadResult(passed=True, step_times_ms=times)

    def cleanup(self) -> None:
        destroy_process_group()
