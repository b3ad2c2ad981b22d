"""A distributed workload for the memory tests (real gloo collectives on CPU; importable, so
process-isolated workers load it): every rank multiplies two matrices and all-reduces the
result each step; rank ``rank`` also holds ``extra_mib`` MiB more during each step, so its
profiled peak (``profile_memory: true``) is that much higher than the others'."""

from __future__ import annotations

import time

from aorta.run.profiler import StepProfiler
from aorta.run.workload import Workload, WorkloadResult


class MemoryHog(Workload):
    name = "memory_hog"
    launch_mode = "distributed"
    default_isolation = "process"
    collectors = frozenset({"torch_profiler"})
    config_keys = frozenset({"rank", "extra_mib"})
    default_steps = 4

    def setup(self) -> None:
        from aorta.run.ranks import init_process_group

        self.dist = init_process_group(self.context)

    def run(self) -> WorkloadResult:
        import torch

        hog = self.context.rank == int(self.config.get("rank", 1))
        extra = int(self.config.get("extra_mib", 0)) << 20 if hog else 0
        a = torch.rand(128, 128)
        times = []
        total = self.steps
        with StepProfiler(self.context, total_steps=total) as prof:
            for _ in range(total):
                t0 = time.perf_counter()
                held = torch.ones(extra // 4) if extra else None  # 4-byte floats
                out = a @ a
                self.dist.all_reduce(out)
                del held
                times.append((time.perf_counter() - t0) * 1000.0)
                prof.step()
        return WorkloadResult(passed=True, step_times_ms=times, executed_iterations=total)
