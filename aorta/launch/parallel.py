"""Run one function per key in daemon threads, with one deadline for all of them.

``concurrent.futures`` is not used on purpose: its executor threads are joined at interpreter
exit whatever ``shutdown(wait=False)`` says, so one node stuck in a read would keep the whole
process alive. Daemon threads are abandoned at exit. A thread still running at the deadline is
reported as :class:`TimedOut` and sees its ``cancel`` event set; it should clean up after
itself when it finally returns (a straggler).

Examples
--------
>>> import time
>>> def work(key, cancel):
...     if key == "slow":
...         time.sleep(5)
...     if key == "bad":
...         raise ValueError("no")
...     return key.upper()
>>> out = run_parallel(["a", "bad", "slow"], work, timeout=0.3)
>>> out["a"].value, type(out["bad"].error).__name__, isinstance(out["slow"], TimedOut)
('A', 'ValueError', True)
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["Done", "Failed", "Outcome", "TimedOut", "run_parallel", "start_daemon"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class Done(Generic[V]):
    value: V


@dataclass(frozen=True)
class Failed:
    error: BaseException


@dataclass(frozen=True)
class TimedOut:
    pass


Outcome = Done[Any] | Failed | TimedOut


def start_daemon(target: Callable[[], None], *, name: str) -> threading.Thread:
    """Start ``target`` in a daemon thread (never joined at exit)."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def run_parallel(
    keys: Iterable[K],
    fn: Callable[[K, threading.Event], V],
    *,
    timeout: float,
    cancel: threading.Event | None = None,
    name: str = "aorta",
) -> dict[K, Outcome]:
    """Call ``fn(key, cancel)`` for every key at once; wait at most ``timeout`` seconds.

    Returns ``{key: Done(value) | Failed(error) | TimedOut()}`` in the order of ``keys``.
    ``cancel`` (a new event when not given) is set when the deadline passes, and also when the
    caller is interrupted (``KeyboardInterrupt`` propagates after setting it).
    """
    keys = list(keys)
    cancel = cancel or threading.Event()
    results: queue.Queue[tuple[K, Outcome]] = queue.Queue()

    def runner(key: K) -> None:
        try:
            results.put((key, Done(fn(key, cancel))))
        except BaseException as exc:
            results.put((key, Failed(exc)))

    for i, key in enumerate(keys):
        start_daemon(lambda key=key: runner(key), name=f"{name}-{i}")
    got: dict[K, Outcome] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < len(keys):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                key, outcome = results.get(timeout=remaining)
            except queue.Empty:
                break
            got[key] = outcome
    finally:
        if len(got) < len(keys):
            cancel.set()
    return {key: got.get(key, TimedOut()) for key in keys}
