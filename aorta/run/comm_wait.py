"""Each rank's step split into compute and time in collectives, from cheap clocks (no profiler).

In a synchronous step every collective waits for its last rank, so the rank that computes
longest spends the least time in collectives and the others wait for it: the per-rank split
says who is slow in a run without traces. :class:`CommClock` times the spans a workload marks
around its collective calls — a wall clock on the CPU (gloo blocks the calling thread until
the collective is done), CUDA events on a GPU (the calls return at once; the events, read
after the step's synchronise, bracket the collective on the stream that waits for it) — and
gives two metrics per rank and trial, means over the post-warm-up steps:

- ``comm_wait_ms``: the time per step in the collectives (moving the data, and waiting for
  the ranks that come later);
- ``compute_ms``: the rest of the step.

Both are means, so they add up to the mean step. The transfer itself costs every rank the
same; what one rank spends in collectives less than the others is the time the others waited
for it (:mod:`aorta.matrix.stragglers` turns that into a finding).

:func:`straggler_delay` reads the fault-injection knobs ``straggler_rank`` and
``straggler_ms`` that ``race`` and ``training`` accept: that rank sleeps that long in every
step, outside its collectives — a slow rank on demand, to prove the finding.

Examples
--------
>>> import time
>>> clock = CommClock(cuda=False)
>>> for step in range(3):
...     t0 = time.perf_counter()
...     clock.start(); time.sleep(0.002); clock.stop()
...     clock.end_step((time.perf_counter() - t0) * 1000)
>>> m = clock.metrics(warmup=1)
>>> sorted(m), m["comm_wait_ms"] >= 2.0, m["compute_ms"] >= 0.0
(['comm_wait_ms', 'compute_ms'], True, True)
>>> straggler_delay({"straggler_rank": 1, "straggler_ms": 20}, rank=1), straggler_delay({}, rank=1)
(0.02, 0.0)
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["STRAGGLER_KEYS", "CommClock", "straggler_delay"]

#: The fault-injection keys of ``workload_config`` that :func:`straggler_delay` reads.
STRAGGLER_KEYS = frozenset({"straggler_rank", "straggler_ms"})


class CommClock:
    """The time a rank spends in collectives, step by step.

    Call :meth:`start` before and :meth:`stop` after each collective call (or the span in
    which the step waits for its collectives), :meth:`end_step` once the step is done (after
    ``torch.cuda.synchronize`` on a GPU) with the step's time, and :meth:`metrics` at the end.
    ``cuda``: time with CUDA events on the current stream instead of the wall clock.
    """

    def __init__(self, *, cuda: bool) -> None:
        self.cuda = cuda
        self._t0 = 0.0
        self._open = False
        self._in_step = 0.0  # ms of collectives so far in this step (wall clock)
        self._events: list[tuple[Any, Any]] = []  # this step's (start, stop) CUDA events
        self._pool: list[Any] = []  # events to reuse, so a step allocates none
        self.comm_ms: list[float] = []
        self.step_ms: list[float] = []

    def _event(self) -> Any:
        if self._pool:
            return self._pool.pop()
        import torch

        return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]  # torch: unannotated __new__

    def start(self) -> None:
        """A collective (or a wait for one) begins; a second call before :meth:`stop` moves
        the start (the last of several marks counts)."""
        if self.cuda:
            event = self._event()
            event.record()
            if self._open:
                self._pool.append(self._events.pop()[0])
            self._events.append((event, None))
        else:
            self._t0 = time.perf_counter()
        self._open = True

    def stop(self) -> None:
        """The collective that :meth:`start` marked has returned (nothing when none began)."""
        if not self._open:
            return
        self._open = False
        if self.cuda:
            event = self._event()
            event.record()
            self._events[-1] = (self._events[-1][0], event)
        else:
            self._in_step += (time.perf_counter() - self._t0) * 1000.0

    def end_step(self, step_ms: float) -> None:
        """Close the step that took ``step_ms`` (on a GPU: after it was synchronised)."""
        self.stop()
        if self.cuda:
            comm = 0.0
            for begin, end in self._events:
                if end is not None:
                    end.synchronize()  # done already, unless this call closed the span
                    comm += float(begin.elapsed_time(end))
                    self._pool.append(end)
                self._pool.append(begin)
            self._events.clear()
        else:
            comm, self._in_step = self._in_step, 0.0
        self.comm_ms.append(min(comm, step_ms))
        self.step_ms.append(step_ms)

    def metrics(self, *, warmup: int) -> dict[str, float]:
        """``comm_wait_ms`` and ``compute_ms``: means over the steps after the first
        ``warmup`` (over all steps when there are no others; NaN without any step)."""
        comm, steps = self.comm_ms[warmup:] or self.comm_ms, self.step_ms[warmup:] or self.step_ms
        if not steps:
            return {"comm_wait_ms": math.nan, "compute_ms": math.nan}
        mean_comm = sum(comm) / len(comm)
        return {"comm_wait_ms": mean_comm, "compute_ms": sum(steps) / len(steps) - mean_comm}


def straggler_delay(config: Mapping[str, Any], *, rank: int) -> float:
    """Seconds this rank sleeps per step: ``straggler_ms`` / 1000 on ``straggler_rank``, else 0.

    Raises ``ValueError`` when ``straggler_ms`` is negative or either is not a number.
    """
    if "straggler_rank" not in config:
        return 0.0
    try:
        target, ms = int(config["straggler_rank"]), float(config.get("straggler_ms", 0))
    except (TypeError, ValueError):
        raise ValueError(
            "straggler_rank must be an integer and straggler_ms a number, got "
            f"{config.get('straggler_rank')!r} and {config.get('straggler_ms')!r}"
        ) from None
    if not ms >= 0:
        raise ValueError(f"straggler_ms must be ≥ 0, got {ms}")
    return ms / 1000.0 if rank == target else 0.0
