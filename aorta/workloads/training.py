"""``training``: a few DDP or FSDP steps of a small model — the smoke test of a real stack.

Config: ``mode`` (``ddp`` or ``fsdp``), ``model_dim`` (128), ``num_layers`` (4),
``batch_size`` (16), ``lr`` (0.01), ``dtype`` (``float32`` or ``bfloat16``),
``warmup_steps`` (1). Every step's time is recorded; a loss that is not finite fails the
trial at that step. FSDP uses ``torch.distributed.fsdp.fully_shard`` (one unit per layer).

With more than one rank, each rank records its own split of the step
(:class:`~aorta.run.comm_wait.CommClock`): ``comm_wait_ms`` and ``compute_ms``, means per
step. The collectives run inside DDP and FSDP, so the clock brackets the spans in which the
step waits for them: ``ddp``, from the last gradient's accumulation (post-accumulate-grad
hooks) to the end of ``backward()`` — the gradient all_reduce; ``fsdp``, each unit's
forward unshard (a forward pre-hook prepended before FSDP's, one after it: its parameter
all_gather) and the end of ``backward()`` from the first layer's output gradient (the last
reduce_scatter). FSDP's unshards during backward count as compute. The fault-injection knobs
``straggler_rank`` / ``straggler_ms`` make that rank sleep that long before each step's
forward.
"""

from __future__ import annotations

import math
import time
from typing import Any

from aorta.plugins import (
    STRAGGLER_KEYS,
    CommClock,
    FailureDetail,
    StepProfiler,
    Workload,
    WorkloadResult,
    destroy_process_group,
    init_process_group,
    straggler_delay,
)


class TrainingWorkload(Workload):
    name = "training"
    description = "DDP or FSDP steps of a small model: step times and a finite-loss check"
    launch_mode = "distributed"
    min_world_size = 1
    default_isolation = "process"
    default_steps = 8
    collectors = frozenset({"torch_profiler"})
    config_keys = (
        frozenset({"mode", "model_dim", "num_layers", "batch_size", "lr", "dtype", "warmup_steps"})
        | STRAGGLER_KEYS
    )

    # torch's modules and optimizer (None between trials: cleanup drops them).
    model: Any = None
    opt: Any = None

    def setup(self) -> None:
        import torch
        from torch import nn

        c = self.config
        self.mode = str(c.get("mode", "ddp"))
        if self.mode not in ("ddp", "fsdp"):
            raise ValueError(f"mode must be ddp or fsdp, got {self.mode!r}")
        dim, layers = int(c.get("model_dim", 128)), int(c.get("num_layers", 4))
        self.batch = int(c.get("batch_size", 16))
        self.warmup = int(c.get("warmup_steps", 1))
        dtype = getattr(torch, str(c.get("dtype", "float32")))
        self.torch = torch
        self.dist = init_process_group(self.context)
        self.device = (
            torch.device(f"cuda:{self.context.local_rank}")
            if self.context.backend == "nccl"
            else torch.device("cpu")
        )
        # Same initial weights on every rank, from the trial's seed; on a generator of the trial's
        # own (an in-process trial reseeded the caller's, a notebook's or the sweep's).
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.context.seed)
            blocks = [nn.Sequential(nn.Linear(dim, dim), nn.GELU()) for _ in range(layers)]
            model = nn.Sequential(*blocks, nn.Linear(dim, 1))
        model = model.to(self.device, dtype)
        if self.mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            self.model: Any = DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        else:
            from torch.distributed.fsdp import fully_shard

            for block in blocks:
                fully_shard(block)
            self.model = fully_shard(model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=float(c.get("lr", 0.01)))
        self.world = self.dist.get_world_size()
        self.delay = straggler_delay(c, rank=self.dist.get_rank())
        self.clock = CommClock(cuda=self.device.type == "cuda")
        if self.world > 1:
            self._time_collectives(blocks)
        gen = torch.Generator().manual_seed(self.context.seed + self.dist.get_rank())
        self.x = torch.randn(self.batch, dim, generator=gen).to(self.device, dtype)
        self.y = torch.randn(self.batch, 1, generator=gen).to(self.device, dtype)

    def _time_collectives(self, blocks: list[Any]) -> None:
        """Hooks that bracket the spans in which a step waits for DDP's or FSDP's collectives
        (see the module docstring); a few clock reads per step."""
        clock = self.clock
        if self.mode == "ddp":
            params = [p for p in self.model.parameters() if p.requires_grad]
            seen = [0]

            def accumulated(_param: Any) -> None:
                seen[0] += 1
                if seen[0] % len(params) == 0:  # the step's last gradient: compute is done
                    clock.start()

            for param in params:
                param.register_post_accumulate_grad_hook(accumulated)
            return
        for unit in [*blocks, self.model]:
            unit.register_forward_pre_hook(lambda *_: clock.start(), prepend=True)
            unit.register_forward_pre_hook(lambda *_: clock.stop())

        def first_output(_module: Any, _args: Any, out: Any) -> None:
            if getattr(out, "requires_grad", False):
                out.register_hook(lambda _grad: clock.start())

        blocks[0].register_forward_hook(first_output)

    def cleanup(self) -> None:
        # DDP and FSDP hold the process group: drop them before the group goes (the helper
        # collects them first), or their destructors talk to a group that is gone — in a
        # long-lived process (in-process isolation) that can hang the next trial.
        self.model = self.opt = None
        destroy_process_group()

    def run(self) -> WorkloadResult:
        torch = self.torch
        total = self.warmup + self.steps
        times: list[float] = []
        losses: list[float] = []
        details: list[FailureDetail] = []
        start = time.perf_counter()
        with StepProfiler(self.context, total_steps=total) as prof:
            for step in range(total):
                t0 = time.perf_counter()
                if self.delay:
                    time.sleep(self.delay)  # fault injection: a slow rank
                loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
                loss.backward()
                self.clock.stop()  # DDP's all_reduce / FSDP's last reduce_scatter is done
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
                value = float(loss.detach().float())
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                times.append((time.perf_counter() - t0) * 1000.0)
                self.clock.end_step(times[-1])
                losses.append(value)
                prof.step()
                if not math.isfinite(value):
                    details.append(
                        FailureDetail(
                            f"loss is {value} at step {step}",
                            hint="numerics: try dtype float32, a lower lr, or the tf32_off mitigations",
                            iteration=step,
                        )
                    )
                    break
        return WorkloadResult(
            passed=not details,
            failure_details=details,
            step_times_ms=times,
            warmup_steps=min(self.warmup, len(times)),
            elapsed_sec=time.perf_counter() - start,
            total_iterations=total,
            executed_iterations=len(times),
            configured_iterations=total,
            metrics={
                "final_loss": losses[-1] if losses else math.nan,
                "first_loss": losses[0] if losses else math.nan,
                **(
                    self.clock.metrics(warmup=min(self.warmup, len(times)))
                    if self.world > 1
                    else {}
                ),
            },
            info={"mode": self.mode, "backend": str(self.context.backend)},
        )
