"""``matmul``: time GEMMs step by step — the smallest workload that shows a knob's effect.

Config (``workload_config``): ``m``, ``n``, ``k`` (default 512), ``dtype`` (``float32``,
``float64``, ``bfloat16``, ``float16``), ``device`` (``auto``: the GPU when there is one),
``iters_per_step`` (GEMMs per timed step, default 4), ``warmup_steps`` (default 2).
With ``collect: [torch_profiler]`` the steps run under :class:`~aorta.run.profiler.StepProfiler`
(one trace per rank per trial in the trial's ``trace/`` folder).
Metrics: ``tflops`` (median step), ``threads``; info: ``device``, ``cpu_capability``.

Under torchrun every rank times its own GEMMs (they start together after a barrier) and the
ranks' median step times are gathered: ``rank_median_min_ms``, ``rank_median_max_ms``,
``straggler_spread`` (max / min) and ``straggler_rank`` (the slowest) go into the metrics.
"""

from __future__ import annotations

import math
import statistics
import time

from aorta.plugins import (
    FailureDetail,
    StepProfiler,
    Workload,
    WorkloadResult,
    destroy_process_group,
    init_process_group,
)

_DTYPES = ("float32", "float64", "bfloat16", "float16")


class MatmulWorkload(Workload):
    name = "matmul"
    description = "time torch GEMMs per step (CPU or GPU)"
    default_steps = 20
    config_keys = frozenset({"m", "n", "k", "dtype", "device", "iters_per_step", "warmup_steps"})
    collectors = frozenset({"torch_profiler"})

    def setup(self) -> None:
        import torch

        cfg = self.config
        self.m, self.n, self.k = (int(cfg.get(x, 512)) for x in ("m", "n", "k"))
        if min(self.m, self.n, self.k) < 1:
            raise ValueError(f"m, n, k must be ≥ 1, got {self.m}, {self.n}, {self.k}")
        dtype = str(cfg.get("dtype", "float32"))
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        device = str(cfg.get("device", "auto"))
        if device == "auto":
            device = f"cuda:{self.context.local_rank}" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.iters = int(cfg.get("iters_per_step", 4))
        self.warmup = int(cfg.get("warmup_steps", 2))
        gen = torch.Generator().manual_seed(self.context.seed)
        dt = getattr(torch, dtype)
        self.a = torch.randn(self.m, self.k, generator=gen).to(self.device, dt)
        self.b = torch.randn(self.k, self.n, generator=gen).to(self.device, dt)
        self._torch = torch
        self._dist = None
        if self.context.world_size > 1:
            self._dist = init_process_group(self.context)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)

    def run(self) -> WorkloadResult:
        torch = self._torch
        total = self.warmup + self.steps
        times: list[float] = []
        start = time.perf_counter()
        out = None
        if self._dist is not None:
            self._dist.barrier()
        # collect: [torch_profiler] profiles these steps (a no-op otherwise).
        with StepProfiler(self.context, total_steps=total) as prof:
            for _ in range(total):
                self._sync()
                t0 = time.perf_counter()
                for _ in range(self.iters):
                    out = torch.matmul(self.a, self.b)
                self._sync()
                times.append((time.perf_counter() - t0) * 1000.0)
                prof.step()
        elapsed = time.perf_counter() - start
        finite = bool(torch.isfinite(out).all()) if out is not None else True
        timed = times[self.warmup :] or times
        median_s = statistics.median(timed) / 1000.0
        flops = 2.0 * self.m * self.n * self.k * self.iters
        details = (
            []
            if finite
            else [
                FailureDetail(
                    "the GEMM produced non-finite values", hint="numerics: try dtype float32"
                )
            ]
        )
        metrics = {
            "tflops": flops / median_s / 1e12 if median_s > 0 else math.nan,
            "threads": float(torch.get_num_threads()),
            **self._spread(median_s * 1000.0),
        }
        return WorkloadResult(
            passed=finite,
            failure_details=details,
            step_times_ms=times,
            warmup_steps=self.warmup,
            elapsed_sec=elapsed,
            total_iterations=total,
            executed_iterations=total,
            configured_iterations=total,
            metrics=metrics,
            info={
                "device": str(self.device),
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            },
        )

    def _spread(self, median_ms: float) -> dict[str, float]:
        """Across ranks: the fastest and slowest median step, their ratio, the slowest rank."""
        if self._dist is None:
            return {}
        torch = self._torch
        mine = torch.tensor([median_ms], dtype=torch.float64, device=self.device)
        every = [torch.zeros_like(mine) for _ in range(self.context.world_size)]
        self._dist.all_gather(every, mine)
        values = [float(t.item()) for t in every]
        slowest = max(range(len(values)), key=values.__getitem__)
        return {
            "rank_median_min_ms": min(values),
            "rank_median_max_ms": max(values),
            "straggler_spread": max(values) / min(values) if min(values) > 0 else math.nan,
            "straggler_rank": float(slowest),
        }

    def cleanup(self) -> None:
        self.a = self.b = None  # type: ignore[assignment]
        if getattr(self, "_dist", None) is not None:
            destroy_process_group()
