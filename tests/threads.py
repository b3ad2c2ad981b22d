"""Races made near certain for the tests that reproduce them: the interpreter switches threads
every microsecond instead of every 5 ms, and the racing threads start at one barrier."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def switching_often() -> Iterator[None]:
    """Within the block, a thread switch every microsecond (put back after)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def run_at_once(
    work: Callable[[T], object], args: Sequence[T], *, rounds: int
) -> list[BaseException]:
    """``work(arg)`` ``rounds`` times in one thread per ``arg``, the threads started together
    and switching often; every exception raised, in any thread (a thread's is otherwise lost)."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(args))

    def repeat(arg: T) -> None:
        start.wait()
        for _ in range(rounds):
            try:
                work(arg)
            except BaseException as exc:  # every failure counts, not only the first
                errors.append(exc)

    with switching_often():
        threads = [threading.Thread(target=repeat, args=(a,)) for a in args]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return errors
