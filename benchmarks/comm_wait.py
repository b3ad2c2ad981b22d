"""What each rank's compute / collective split costs a step: the workloads with their
:class:`~aorta.run.comm_wait.CommClock` against the same workloads with a clock that
does nothing.

    .venv/bin/python benchmarks/comm_wait.py [--runs 8] [--steps 30]

Two ranks (gloo on loopback, one thread each) run each workload — ``race`` (fsdp and ddp
traffic, small shards) and ``training`` (ddp, fsdp) — ``--runs`` times with the real clock
and ``--runs`` times with the peer, alternated run by run in the same processes so both see
the same machine; each run's value is its median post-warm-up step time (rank 0's);
``paired_ratio`` is the median over the pairs of runs of ours / peer. On a shared machine that
ratio is as noisy as the machine, so the cost is also accounted for: the clock's start/stop
calls per step (counted) × what one pair costs alone (``clock_pair_us``, a million pairs), plus
the Python hooks ``training`` adds (:data:`HOOKS`) × what one adds to a backward (``hook_us``),
as a share of the peer's step (``accounted_pct``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torch.multiprocessing.spawn import start_processes

RACE = {"fsdp_shard_size": 4096, "num_layers": 4, "warmup_iterations": 2}
TRAINING = {"model_dim": 128, "num_layers": 4, "warmup_steps": 2}
CASES = {
    "race fsdp": ("race", {**RACE, "mode": "fsdp"}),
    "race default": ("race", {**RACE, "mode": "default"}),
    "training ddp": ("training", {**TRAINING, "mode": "ddp"}),
    "training fsdp": ("training", {**TRAINING, "mode": "fsdp"}),
}


def counting(base: type) -> Any:
    """``base`` with a count of the start/stop calls a step makes (``calls`` / ``steps``)."""

    class Counting(base):  # type: ignore[misc]
        calls = 0

        def start(self) -> None:
            type(self).calls += 1
            super().start()

        def stop(self) -> None:
            type(self).calls += 1
            super().stop()

    return Counting


#: Python hooks per step the training split adds: ddp, one post-accumulate-grad hook per
#: parameter (4 layers + head, weight and bias); fsdp, two forward pre-hooks per unit (5), a
#: forward hook and a tensor hook.
HOOKS = {"training ddp": 10, "training fsdp": 12}


class NullClock:
    """The peer: the clock's interface, doing nothing."""

    def __init__(self, *, cuda: bool) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def end_step(self, step_ms: float) -> None:
        pass

    def metrics(self, *, warmup: int) -> dict[str, float]:
        return {}


def _one_run(
    name: str, config: dict[str, Any], steps: int, rank: int, clock: type, folder: str
) -> float:
    import torch.distributed

    import aorta.workloads.race as race
    import aorta.workloads.training as training
    from aorta.run.workload import TrialContext

    module = race if name == "race" else training
    module.CommClock = clock  # type: ignore[attr-defined]
    # One process group for the whole benchmark (joined in _rank): re-joining per run would
    # time the rendezvous, and the workloads' own join and leave become no-ops.
    module.init_process_group = lambda _ctx: torch.distributed  # type: ignore[attr-defined]
    module.destroy_process_group = lambda: None  # type: ignore[attr-defined]
    cls = race.RaceWorkload if name == "race" else training.TrainingWorkload
    ctx = TrialContext(
        cell="bench", trial=0, steps=steps, rank=rank, world_size=2, backend="gloo",
        artifact_dir=Path(folder),
    )  # fmt: skip
    workload = cls(config, ctx)
    workload.setup()
    try:
        result = workload.run()
    finally:
        workload.cleanup()
    times = result.step_times_ms[result.warmup_steps :]
    return statistics.median(times)


def _rank(rank: int, port: int, runs: int, steps: int, out: str) -> None:
    import torch

    from aorta.plugins import CommClock

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.distributed.init_process_group("gloo", init_method="env://", rank=rank, world_size=2)
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for case, (name, config) in CASES.items():
            mine = results.setdefault(case, {"ours": [], "peer": [], "calls": []})
            for run in range(2 * runs):
                ours = run % 2 == 0
                clock: Any = counting(CommClock) if ours else NullClock
                value = _one_run(name, config, steps, rank, clock, folder)
                mine["ours" if ours else "peer"].append(value)
                if ours:
                    mine["calls"].append(clock.calls / steps)
    torch.distributed.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps(results))


def hook_us(blocks: int = 10, n: int = 300) -> float:
    """What one post-accumulate-grad hook (``training``'s ddp marks) adds to a backward, in µs
    (signed: below the noise it can come out negative): a 64-parameter model's backward with a
    no-op hook on each parameter against without, in alternating blocks of ``n``."""
    import torch

    torch.set_num_threads(1)
    model = torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(32)))
    x = torch.randn(2, 8)
    params = list(model.parameters())
    times: dict[bool, list[float]] = {False: [], True: []}
    for block in range(blocks):
        hooked = block % 2 == 1
        handles = (
            # (torch's own hook method is untyped)
            [p.register_post_accumulate_grad_hook(lambda _p: None) for p in params]  # type: ignore[no-untyped-call]
            if hooked
            else []
        )
        for _ in range(n):
            t0 = time.perf_counter()
            model(x).sum().backward()
            times[hooked].append(time.perf_counter() - t0)
        for handle in handles:
            handle.remove()
    extra = statistics.median(times[True]) - statistics.median(times[False])
    return extra / len(params) * 1e6


def clock_pair_us(n: int = 1_000_000) -> float:
    """One start/stop pair of the CPU clock, in µs."""
    from aorta.plugins import CommClock

    clock = CommClock(cuda=False)
    t0 = time.perf_counter()
    for _ in range(n):
        clock.start()
        clock.stop()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "out.json")
        start_processes(  # type: ignore[no-untyped-call]  # torch's is untyped
            _rank, args=(port, args.runs, args.steps, out), nprocs=2, start_method="spawn"
        )
        results = json.loads(Path(out).read_text())
    pair, hook = clock_pair_us(), hook_us()
    rows = {}
    for case, values in results.items():
        ours, peer = statistics.median(values["ours"]), statistics.median(values["peer"])
        paired = [a / b for a, b in zip(values["ours"], values["peer"], strict=True)]
        calls = statistics.median(values["calls"])
        hooks = HOOKS.get(case, 0)
        cost_us = calls / 2 * pair + hooks * max(hook, 0.0)
        rows[case] = {
            "ours_ms": round(ours, 3),
            "peer_ms": round(peer, 3),
            "paired_ratio": round(statistics.median(paired), 3),
            "clock_calls_per_step": calls,
            "accounted_pct": round(cost_us / 1000 / peer * 100, 4),
        }
    doc = {"runs": args.runs, "steps": args.steps, "clock_pair_us": round(pair, 3),
           "hook_us": round(hook, 3), "cases": rows}  # fmt: skip
    json.dump(doc, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
