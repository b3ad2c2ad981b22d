"""Calls at once under one deadline: :func:`run_parallel` runs ``fn(key, cancel)`` for every
key, each in a daemon thread of its own, and returns :class:`Results`, ``{key: value or the
exception it raised}`` — one slow or failing key never hides the others' results. Standard
library only; a launch's per-node phases (setup, teardown, gathering) fan out through it.

>>> import threading
>>> def work(key: str, cancel: threading.Event) -> int:
...     return 1 // (key == "a")
>>> results = run_parallel(["a", "b"], work, timeout=5)
>>> results.succeeded, type(results.failed["b"]).__name__
({'a': 1}, 'ZeroDivisionError')
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from aorta.errors import AortaError

__all__ = ["Results", "TimedOut", "daemon", "run_parallel"]

K = TypeVar("K", bound=Hashable)


class TimedOut(AortaError):
    """What :func:`run_parallel` holds for a call that had not returned at its deadline."""


class Results(dict[K, Any], Generic[K]):
    """``{key: value or the exception it raised}``, like Fabric's ``GroupResult``: one result
    type for every fan-out (a launch's setup, teardown and gathering, per node)."""

    @property
    def succeeded(self) -> dict[K, Any]:
        return {k: v for k, v in self.items() if not isinstance(v, BaseException)}

    @property
    def failed(self) -> dict[K, BaseException]:
        return {k: v for k, v in self.items() if isinstance(v, BaseException)}


def daemon(target: Callable[[], None], name: str) -> None:
    """Start ``target`` in a daemon thread called ``name`` (never joined: exit does not wait)."""
    threading.Thread(target=target, name=name, daemon=True).start()


def run_parallel(
    keys: Iterable[K],
    fn: Callable[[K, threading.Event], Any],
    *,
    timeout: float,
    name: str = "aorta",
) -> Results[K]:
    """``fn(key, cancel)`` for every key at once, each in a daemon thread (``concurrent.futures``
    would join one stuck in a read at exit); a call still running after ``timeout`` seconds is
    :class:`TimedOut`, and its ``cancel`` event is set. A Ctrl-C caught in a thread is raised."""
    keys = list(keys)
    cancel = threading.Event()
    results: queue.Queue[tuple[K, Any]] = queue.Queue()

    def runner(key: K) -> None:
        try:
            results.put((key, fn(key, cancel)))
        except BaseException as exc:
            results.put((key, exc))

    for i, key in enumerate(keys):
        daemon(functools.partial(runner, key), f"{name}-{i}")
    got: dict[K, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < len(keys) and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(queue.Empty):
                key, value = results.get(timeout=left)
                got[key] = value
    finally:
        if len(got) < len(keys):
            cancel.set()
    what = name.removeprefix("aorta-")
    late = TimedOut(f"{what} not finished after {timeout:g} s")
    out = Results({key: got.get(key, late) for key in keys})
    for exc in out.failed.values():
        if isinstance(exc, KeyboardInterrupt):
            raise exc
    return out
