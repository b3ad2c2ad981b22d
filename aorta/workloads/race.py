"""``race``: collective-integrity stress — does every element arrive as sent?

Each iteration moves FSDP-like and/or DDP-like traffic for ``num_layers`` layers of a small
transformer-like model: ``all_gather`` of parameter shards on the way forward,
``reduce_scatter`` of gradient shards (FSDP) or ``all_reduce`` of whole gradients (DDP) on the
way back. The data are integer-valued and a deterministic function of (layer, iteration,
rank), so every rank knows exactly what it must receive: each verified collective is checked
element by element and by a position-weighted checksum, and any corrupted element is a
failure naming the iteration, layer, collective and rank.

Config (upstream AORTA's keys are accepted; unknown keys are recorded as warnings):

``mode``
    ``fsdp`` (all_gather + reduce_scatter), ``ddp`` (all_reduce) or ``default`` (all three).
``fsdp_shard_size``
    Elements per rank per layer (default 65536).
``num_layers``, ``model_dim``
    Model shape (defaults 4, 256).
``dtype``
    ``float32``, ``bfloat16``, ``float16`` (values stay exactly representable after summing).
``warmup_iterations``, ``verify_iterations``
    The first iterations are warm-up (timed, not verified); ``verify_iterations`` of the rest,
    evenly spaced and always including the last, are verified (default: all).
``simulate_compute``, ``compute_type``, ``include_backward_compute``, ``real_backward``
    GEMM work between collectives (``transformer``: attention + MLP matmuls; ``gemm``: one);
    ``real_backward`` runs autograd through it (timed, not verified).
``shared_layer_weights``
    Every layer moves the same parameter data.
``stop_on_first_corruption``
    Stop once any rank saw corruption (agreed by all ranks, so none is left waiting).
``log_interval``
    Print a progress line every N iterations.
``fault_injection``
    ``{rank, iteration, layer: 0, collective: all_gather|reduce_scatter|all_reduce, index: 0}``:
    corrupt one received element on one rank — proves the detector works.
``straggler_rank``, ``straggler_ms``
    Fault injection: that rank sleeps that long in every iteration, outside its collectives —
    a slow rank, to prove the straggler finding (:mod:`aorta.run.comm_wait`).

Each rank also records its own split of the iteration (:class:`~aorta.run.comm_wait.CommClock`
around every collective call): ``comm_wait_ms`` and ``compute_ms``, means per iteration.
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

_DTYPES = {"float32": 2**24, "bfloat16": 2**8, "float16": 2**11}
_MODES = ("fsdp", "ddp", "default")
_HINT = (
    "silent data corruption in a collective: compare cells with NCCL/RCCL mitigations "
    "(nccl_proto_simple, nccl_algo_ring, rccl_gfx942_cheap_fence_off) and check the fabric"
)
_MAX_DETAILS = 20


def _collective(dist: Any, name: str) -> Any:
    # torch ≥ 2.12 renamed the tensor variants; keep older releases working.
    new = {"all_gather": "all_gather_single", "reduce_scatter": "reduce_scatter_single"}[name]
    old = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor"}[name]
    return getattr(dist, new, None) or getattr(dist, old)


class RaceWorkload(Workload):
    name = "race"
    description = "collective integrity: FSDP/DDP-like traffic over checksummed deterministic data"
    launch_mode = "distributed"
    min_world_size = 2
    default_isolation = "process"
    required_isolation = "process"
    default_steps = 10
    collectors = frozenset({"torch_profiler"})
    #: The first iteration whose gathered data did not match (set by :meth:`run`).
    first_bad: int | None = None
    config_keys = frozenset(
        {
            "mode",
            "warmup_iterations",
            "verify_iterations",
            "stop_on_first_corruption",
            "log_interval",
            "dtype",
            "fsdp_shard_size",
            "simulate_compute",
            "compute_type",
            "model_dim",
            "num_layers",
            "include_backward_compute",
            "shared_layer_weights",
            "real_backward",
            "fault_injection",
        }
        | STRAGGLER_KEYS
    )

    # -- setup ----------------------------------------------------------------------------

    def setup(self) -> None:
        import torch

        c = self.config
        self.mode = str(c.get("mode", "default"))
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {self.mode!r}")
        dtype = str(c.get("dtype", "float32"))
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        self.shard = int(c.get("fsdp_shard_size", 65536))
        self.layers = int(c.get("num_layers", 4))
        self.model_dim = int(c.get("model_dim", 256))
        self.warmup = int(c.get("warmup_iterations", 0))
        if self.shard < 1 or self.layers < 1 or self.model_dim < 1:
            raise ValueError("fsdp_shard_size, num_layers and model_dim must be ≥ 1")
        if self.warmup >= self.steps:
            raise ValueError(
                f"warmup_iterations ({self.warmup}) must be below steps ({self.steps})"
            )
        self.simulate = bool(c.get("simulate_compute", False))
        self.compute_type = str(c.get("compute_type", "transformer"))
        self.backward_compute = bool(c.get("include_backward_compute", True))
        self.real_backward = bool(c.get("real_backward", False))
        self.shared = bool(c.get("shared_layer_weights", False))
        self.stop_first = bool(c.get("stop_on_first_corruption", False))
        self.log_interval = int(c.get("log_interval", 0))
        self.fault = dict(c.get("fault_injection") or {})
        measured = self.steps - self.warmup
        n_verify = int(c.get("verify_iterations", measured))
        picks = {
            self.warmup + round(k * (measured - 1) / max(1, n_verify - 1))
            for k in range(min(n_verify, measured))
        }
        self.verify_at = picks if n_verify > 0 else set()

        self.torch = torch
        self.dist = init_process_group(self.context)
        self.rank, self.world = self.dist.get_rank(), self.dist.get_world_size()
        self.device = (
            torch.device(f"cuda:{self.context.local_rank}")
            if self.context.backend == "nccl"
            else torch.device("cpu")
        )
        self.delay = straggler_delay(c, rank=self.rank)
        self.dtype = getattr(torch, dtype)
        self.modulus = max(2, min(65536, _DTYPES[dtype] // self.world))
        self.index = torch.arange(self.shard * self.world, device=self.device, dtype=torch.float64)
        self.weights = 1.0 + torch.remainder(self.index, 97.0)
        if self.simulate:
            gen = torch.Generator().manual_seed(self.context.seed)
            self.act = torch.randn(16, self.model_dim, generator=gen).to(self.device, torch.float32)

    def cleanup(self) -> None:
        destroy_process_group()

    # -- deterministic data ----------------------------------------------------------------

    def _data(self, kind: int, layer: int, it: int, rank: int, n: int) -> Any:
        torch = self.torch
        layer = 0 if self.shared and kind == 0 else layer
        offset = (layer * 1_000_003 + it * 7_919 + rank * 31 + kind * 104_729) % self.modulus
        idx = torch.arange(n, device=self.device, dtype=torch.int64)
        return torch.remainder(idx * 7 + offset, self.modulus).to(self.dtype)

    def _expected_gather(self, layer: int, it: int) -> Any:
        return self.torch.cat([self._data(0, layer, it, r, self.shard) for r in range(self.world)])

    def _expected_sum(self, layer: int, it: int, n: int) -> Any:
        total = self._data(1, layer, it, 0, n).to(self.torch.float64)
        for r in range(1, self.world):
            total += self._data(1, layer, it, r, n).to(self.torch.float64)
        return total

    # -- checking --------------------------------------------------------------------------

    def _maybe_corrupt(self, tensor: Any, collective: str, layer: int, it: int) -> None:
        f = self.fault
        if (
            f
            and int(f.get("rank", -1)) == self.rank
            and int(f.get("iteration", -1)) == it
            and int(f.get("layer", 0)) == layer
            and f.get("collective", "all_gather") == collective
        ):
            tensor.view(-1)[int(f.get("index", 0)) % tensor.numel()] += 1

    def _check(self, got: Any, expected: Any, collective: str, layer: int, it: int) -> None:
        torch = self.torch
        g = got.to(torch.float64).view(-1)
        e = expected.to(torch.float64).view(-1)
        w = self.weights[: g.numel()]
        self.checked += 1
        if torch.equal(g, e) and float((g * w).sum()) == float((e * w).sum()):
            return
        bad = (g != e).nonzero().view(-1)
        self.mismatches += 1
        self.corrupted += int(bad.numel())
        if self.first_bad is None:
            self.first_bad = it
        if len(self.details) < _MAX_DETAILS:
            first = int(bad[0]) if bad.numel() else 0
            self.details.append(
                FailureDetail(
                    f"iteration {it} layer {layer} {collective}: {bad.numel()} element(s) differ on rank {self.rank} "
                    f"(first at index {first}: got {float(g[first])}, expected {float(e[first])})",
                    hint=_HINT,
                    iteration=it,
                    rank=self.rank,
                )
            )

    # -- the iteration ---------------------------------------------------------------------

    def _compute(self, full: Any, backward: bool) -> None:
        if not self.simulate or (backward and not self.backward_compute):
            return
        torch = self.torch
        d = self.model_dim
        need = d * d
        flat = full.to(torch.float32)
        if flat.numel() < need:
            flat = flat.repeat(math.ceil(need / flat.numel()))
        weight = (flat[:need].view(d, d) / self.modulus).requires_grad_(self.real_backward)
        x = self.act
        if self.compute_type == "transformer":
            q, k, v = x @ weight, x @ weight.T, x @ weight
            attn = torch.softmax(q @ k.T / math.sqrt(d), dim=-1) @ v
            out = torch.relu(attn @ weight) @ weight.T
        else:
            out = x @ weight
        if self.real_backward:
            out.sum().backward()

    def _iteration(self, it: int) -> None:
        torch, dist = self.torch, self.dist
        verify = it in self.verify_at
        n_full = self.shard * self.world
        for layer in range(self.layers):
            if self.mode in ("fsdp", "default"):
                full = torch.empty(n_full, dtype=self.dtype, device=self.device)
                shard = self._data(0, layer, it, self.rank, self.shard)
                self.clock.start()
                _collective(dist, "all_gather")(full, shard)
                self.clock.stop()
                self._maybe_corrupt(full, "all_gather", layer, it)
                if verify:
                    self._check(full, self._expected_gather(layer, it), "all_gather", layer, it)
                self._compute(full, backward=False)
        for layer in reversed(range(self.layers)):
            if self.mode in ("fsdp", "default"):
                out = torch.empty(self.shard, dtype=self.dtype, device=self.device)
                grads = self._data(1, layer, it, self.rank, n_full)
                self.clock.start()
                _collective(dist, "reduce_scatter")(out, grads)
                self.clock.stop()
                self._maybe_corrupt(out, "reduce_scatter", layer, it)
                if verify:
                    lo = self.rank * self.shard
                    self._check(
                        out,
                        self._expected_sum(layer, it, n_full)[lo : lo + self.shard],
                        "reduce_scatter",
                        layer,
                        it,
                    )
            if self.mode in ("ddp", "default"):
                grad = self._data(1, layer, it, self.rank, self.shard)
                self.clock.start()
                dist.all_reduce(grad)
                self.clock.stop()
                self._maybe_corrupt(grad, "all_reduce", layer, it)
                if verify:
                    self._check(
                        grad, self._expected_sum(layer, it, self.shard), "all_reduce", layer, it
                    )
            if self.simulate:
                self._compute(self._data(0, layer, it, self.rank, self.shard), backward=True)

    def run(self) -> WorkloadResult:
        torch, dist = self.torch, self.dist
        self.checked = self.mismatches = self.corrupted = 0
        self.first_bad = None
        self.details: list[FailureDetail] = []
        times: list[float] = []
        self.clock = CommClock(cuda=self.device.type == "cuda")
        start = time.perf_counter()
        executed = 0
        with StepProfiler(self.context, total_steps=self.steps) as prof:
            for it in range(self.steps):
                t0 = time.perf_counter()
                if self.delay:
                    time.sleep(self.delay)  # fault injection: a slow rank
                self._iteration(it)
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                times.append((time.perf_counter() - t0) * 1000.0)
                self.clock.end_step(times[-1])
                executed += 1
                prof.step()
                if self.log_interval and (it + 1) % self.log_interval == 0:
                    print(
                        f"race rank {self.rank}: iteration {it + 1}/{self.steps}, {self.mismatches} mismatch(es)",
                        flush=True,
                    )
                if self.stop_first:
                    # Every rank must agree to stop, or the others would wait in a collective.
                    flag = torch.tensor([float(self.mismatches > 0)], device=self.device)
                    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                    if flag.item() > 0:
                        break
        passed = self.mismatches == 0
        return WorkloadResult(
            passed=passed,
            failure_count=self.mismatches,
            failure_details=self.details,
            step_times_ms=times,
            warmup_steps=min(self.warmup, len(times)),
            elapsed_sec=time.perf_counter() - start,
            total_iterations=self.steps,
            executed_iterations=executed,
            configured_iterations=self.steps,
            metrics={
                "layers_verified": float(self.checked),
                "layer_checksum_mismatches": float(self.mismatches),
                "corrupted_elements": float(self.corrupted),
                "first_corrupted_iteration": math.nan
                if self.first_bad is None
                else float(self.first_bad),
                "verified_iterations": float(len([i for i in self.verify_at if i < executed])),
                **self.clock.metrics(warmup=min(self.warmup, len(times))),
            },
            info={
                "mode": self.mode,
                "backend": str(self.context.backend),
                "world_size": str(self.world),
            },
        )
