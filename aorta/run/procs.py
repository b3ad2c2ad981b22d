"""Child processes: the one place aorta starts, times out and kills them.

Every child runs in its own process group (its own session), so a deadline or a Ctrl-C can
kill the whole tree it started — SIGTERM first, SIGKILL after a grace period — and no
grandchild is left behind. Live groups are remembered so :func:`reap_all` can clean up on an
interrupt.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = [
    "Finished",
    "TrialDeadline",
    "TrialHang",
    "kill_group",
    "reap_all",
    "run_with_deadline",
    "sigterm_as_interrupt",
    "spawn",
]

#: Seconds between SIGTERM and SIGKILL.
DEFAULT_GRACE_S = 5.0


class TrialDeadline(BaseException):
    """The trial's deadline passed (a BaseException so ``except Exception`` cannot swallow it).

    An in-process trial's alarm raises it in the main thread, possibly while
    :func:`run_with_deadline` waits on a child: its type, not the clock, tells that wait it is
    the deadline and not a Ctrl-C."""


class TrialHang(TrialDeadline):
    """The trial hung (silent and idle for the recipe's ``hang_after``) and was killed; the
    message says what was watched. Recorded as ``timeout`` with ``failure_kind`` ``hang``."""


_live: dict[int, subprocess.Popen[Any]] = {}
_lock = threading.Lock()


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stdout: IO[Any] | int | None = None,
    stderr: IO[Any] | int | None = None,
    stdin: IO[Any] | int | None = subprocess.DEVNULL,
    new_session: bool = True,
) -> subprocess.Popen[Any]:
    """Start ``argv`` (no shell) in its own session and remember its process group."""
    proc = subprocess.Popen(
        list(argv),
        env=dict(env) if env is not None else None,
        cwd=cwd,
        stdout=stdout,
        stderr=stderr,
        stdin=stdin,
        start_new_session=new_session,
        close_fds=True,
    )
    if new_session:
        with _lock:
            _live[proc.pid] = proc
    return proc


def _forget(proc: subprocess.Popen[Any]) -> None:
    with _lock:
        _live.pop(proc.pid, None)


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_group(proc: subprocess.Popen[Any], *, grace_s: float = DEFAULT_GRACE_S) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL what is left after ``grace_s``.

    Waits (bounded) until the group is empty, so nothing it started outlives the call.
    """
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_alive(pgid):
            break
        time.sleep(0.02)
    if _group_alive(pgid) or proc.poll() is None:
        _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(grace_s, 5.0))
    # Grandchildren reparented to init die with SIGKILL above; wait briefly for them to go.
    end = time.monotonic() + 2.0
    while _group_alive(pgid) and time.monotonic() < end:
        time.sleep(0.02)
    _forget(proc)


class Finished:
    """How a child ended: ``returncode`` (negative = signal), whether the deadline hit, and
    the reason it was stopped early (``stopped``), if it was."""

    __slots__ = ("returncode", "stopped", "timed_out", "wall_s")

    def __init__(
        self, returncode: int | None, timed_out: bool, wall_s: float, stopped: str | None = None
    ) -> None:
        self.returncode = returncode
        self.timed_out = timed_out
        self.wall_s = wall_s
        self.stopped = stopped

    def __repr__(self) -> str:
        return f"Finished(returncode={self.returncode}, timed_out={self.timed_out}, stopped={self.stopped!r}, wall_s={self.wall_s:.3f})"


def run_with_deadline(
    proc: subprocess.Popen[Any],
    *,
    deadline: float | None,
    grace_s: float = DEFAULT_GRACE_S,
    kill_tree_on_exit: bool = True,
    stop_when: Callable[[], str | None] | None = None,
    poll_s: float = 0.25,
    before_kill: Callable[[int, str], None] | None = None,
) -> Finished:
    """Wait for ``proc`` until ``deadline`` (a ``time.monotonic()`` value).

    On expiry the whole process group is killed (see :func:`kill_group`). When the child
    exits on its own, anything it left running in its group is killed too
    (``kill_tree_on_exit``), so background jobs of a trial never leak into the next one.
    ``stop_when`` is polled every ``poll_s``; a reason it returns stops the child early.
    ``before_kill(pid, why)`` runs before a live child is signalled — ``why`` is ``stopped``
    (``stop_when``), ``deadline`` or ``interrupted`` (Ctrl-C, SIGTERM) — to take what only a
    live process can tell (:class:`aorta.run.forensics.Capture`); it bounds its own time.
    """

    def last_look(why: str) -> None:
        if before_kill is not None and proc.poll() is None:
            # A second Ctrl-C skips the look, never the kill.
            with contextlib.suppress(BaseException):
                before_kill(proc.pid, why)

    start = time.monotonic()
    timed_out = False
    stopped: str | None = None
    try:
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait = (
                remaining
                if stop_when is None
                else (poll_s if remaining is None else min(poll_s, remaining))
            )
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                reason = stop_when() if stop_when is not None else None
                if reason:
                    stopped = reason
                    last_look("stopped")
                    kill_group(proc, grace_s=min(grace_s, 2.0))
                    break
    except subprocess.TimeoutExpired:
        timed_out = True
        last_look("deadline")
        kill_group(proc, grace_s=grace_s)
    except BaseException as exc:
        # Ctrl-C while waiting: take the child down with us. An in-process trial's own alarm
        # (TrialDeadline, from SIGALRM) lands here too, and is a deadline, not a stop.
        last_look("deadline" if isinstance(exc, TrialDeadline) else "interrupted")
        kill_group(proc, grace_s=min(grace_s, 2.0))
        raise
    else:
        if kill_tree_on_exit and _group_alive(proc.pid):
            kill_group(proc, grace_s=min(grace_s, 1.0))
        _forget(proc)
    return Finished(proc.returncode, timed_out, time.monotonic() - start, stopped)


def reap_all(*, grace_s: float = 2.0) -> int:
    """Kill every live child group aorta started (on Ctrl-C/SIGTERM). Returns how many."""
    with _lock:
        procs = list(_live.values())
    for proc in procs:
        _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if _group_alive(proc.pid):
            _signal_group(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2.0)
        _forget(proc)
    return len(procs)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM (a scheduler's stop, ``kill``) raises KeyboardInterrupt like
    Ctrl-C, so children are reaped and the run is left resumable. A no-op off the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
