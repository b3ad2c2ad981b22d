"""Child processes: the one place aorta starts, times out and kills them.

Every child runs in its own process group (its own session), so a deadline or a Ctrl-C can
kill the whole tree it started — SIGTERM first, SIGKILL after a grace period — and no
grandchild is left behind. Live groups are remembered so :func:`reap_all` can clean up on an
interrupt, each until it was waited for and its group is empty (a long sweep or a notebook's
kernel is one process: the set must not grow with every child it ever started). A child
started in its parent's group (``spawn(new_session=False)``: a process-isolated worker's
command, whose group is the worker's) is no group leader, so :func:`kill_group` signals its
process tree instead.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
import weakref
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
    "wait_exit",
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
#: When each child was started (``time.monotonic()`` just before the fork): its wall clock's zero.
_started: weakref.WeakKeyDictionary[subprocess.Popen[Any], float] = weakref.WeakKeyDictionary()
#: Children started in this process's group: no group of their own to ``killpg``.
_in_our_group: weakref.WeakSet[subprocess.Popen[Any]] = weakref.WeakSet()


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
    t0 = time.monotonic()
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
    _started[proc] = t0
    if new_session:
        _prune()
        with _lock:
            _live[proc.pid] = proc
    else:
        _in_our_group.add(proc)
    return proc


def _forget(proc: subprocess.Popen[Any]) -> None:
    with _lock:
        _live.pop(proc.pid, None)


def _forget_if_done(proc: subprocess.Popen[Any]) -> None:
    """Forget ``proc`` once it has been waited for and its group is empty.

    Its pid (the group's id) is free for the kernel to give again from then on: an entry kept
    past that point would have :func:`reap_all` signal, and reap the zombies of, whichever
    group took the number next. A group that still has members keeps its id, and its entry.
    """
    if proc.returncode is not None and not _group_running(proc, proc.pid):
        _forget(proc)


def _prune() -> None:
    """Forget every child its caller waited for itself (``Popen.wait``, ``poll``) whose group
    has emptied, so the live set holds only what runs, over a long sweep or a notebook's
    session as over one trial."""
    with _lock:
        known = list(_live.values())
    for proc in known:
        if proc.returncode is not None:
            _forget_if_done(proc)


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


def _group_running(proc: subprocess.Popen[Any], pgid: int) -> bool:
    """Whether ``pgid`` has a process that has not ended, once ``proc`` (its leader) is reaped.

    A sweep is a child subreaper (:mod:`aorta.run.orphans`): the trial's processes whose parent
    died first become its children, and once dead they stay in the group as its zombies until
    it waits for them — ``killpg(pgid, 0)`` counts them, so the group never looked empty and
    every kill waited out its grace. Those zombies are reaped here (only children in ``pgid``:
    ``proc``, the one child aorta started in it, has been waited for already).
    """
    if proc.returncode is not None:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-pgid, os.WNOHANG)[0] > 0:
                pass
    return _group_alive(pgid)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its parent's wait is missing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc``'s parent links), parents first; ``[pid]`` where
    ``/proc`` cannot tell."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                ppid = int(fh.read().rpartition(b")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry.name))
    tree = [pid]
    for parent in tree:  # grows as it goes: breadth first
        tree.extend(children.get(parent, []))
    return tree


def _signal_pids(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _kill_tree(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """:func:`kill_group` for a child in this process's group: SIGTERM its tree, SIGKILL what
    is left after ``grace_s`` (the tree read again, less anything that left it since)."""
    tree = _tree(proc.pid) if proc.poll() is None else []
    _signal_pids(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not any(_alive(p) for p in tree[1:]):
            break
        time.sleep(0.02)
    left = [p for p in tree[1:] if _alive(p)]
    if proc.poll() is None:
        left = [*_tree(proc.pid), *left]
    _signal_pids(left, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(grace_s, 5.0))
    # SIGKILL lands asynchronously: wait briefly for the rest of the tree to go.
    end = time.monotonic() + 2.0
    while any(_alive(p) for p in left) and time.monotonic() < end:
        time.sleep(0.02)


def kill_group(proc: subprocess.Popen[Any], *, grace_s: float = DEFAULT_GRACE_S) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL what is left after ``grace_s``.

    Waits (bounded) until the group is empty, so nothing it started outlives the call. A
    child :func:`spawn` started in this process's group (``new_session=False``) has no group
    of its own — ``killpg`` on its pid reaches nothing —, so its process tree is signalled.

    >>> import sys, time
    >>> p = spawn([sys.executable, "-c", "import time; time.sleep(60)"], new_session=False)
    >>> t0 = time.monotonic(); kill_group(p, grace_s=5.0)
    >>> p.returncode == -signal.SIGTERM, time.monotonic() - t0 < 5.0
    (True, True)
    """
    if proc in _in_our_group:
        _kill_tree(proc, grace_s)
        return
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_running(proc, pgid):
            break
        time.sleep(0.02)
    if proc.poll() is None or _group_running(proc, pgid):
        _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(grace_s, 5.0))
    # Grandchildren reparented to init die with SIGKILL above; wait briefly for them to go.
    end = time.monotonic() + 2.0
    while _group_running(proc, pgid) and time.monotonic() < end:
        time.sleep(0.02)
    _forget(proc)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux ≥ 5.3, or the pid is already gone
        return None


def wait_exit(proc: subprocess.Popen[Any], timeout: float | None) -> float | None:
    """Wait up to ``timeout`` seconds (``None``: for ever) for ``proc`` to exit, and return
    the ``time.monotonic()`` at which it did — within microseconds, not at the next poll.

    ``Popen.wait(timeout=...)`` sleeps in steps of up to 50 ms, so a trial timed with it
    is quantised to the poll; here the kernel wakes us: a pidfd that becomes readable when
    the process exits (Linux), else a thread blocked in ``waitpid``. Returns ``None`` if the
    process still runs at the timeout. A child that exited with its group empty is forgotten
    (:func:`reap_all` no longer counts it); one that left processes in its group is not.

    >>> import subprocess, sys, time
    >>> p = spawn([sys.executable, "-c", "pass"])
    >>> t = wait_exit(p, 30.0)
    >>> t is not None and p.returncode == 0 and t <= time.monotonic()
    True
    """
    if proc.returncode is not None:
        _forget_if_done(proc)
        return time.monotonic()
    fd = _pidfd(proc.pid)
    if fd is not None:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            ready = poller.poll(None if timeout is None else max(0.0, timeout) * 1000.0)
            at = time.monotonic()
        finally:
            os.close(fd)
        if not ready:
            return None
        proc.wait()  # exited: reaps at once
        _forget_if_done(proc)
        return at
    with _lock:
        waiter = _waiters.get(proc)
        if waiter is None:  # one thread per child, however many times we wait on it
            waiter = _waiters[proc] = _Waiter(proc)
    exited = waiter.wait(timeout)
    if exited is not None:
        _forget_if_done(proc)
    return exited


class _Waiter:
    """A thread blocked in ``waitpid`` for one child: the exit time without pidfd."""

    def __init__(self, proc: subprocess.Popen[Any]) -> None:
        self.done = threading.Event()
        self.at = 0.0
        threading.Thread(target=self._reap, args=(proc,), daemon=True).start()

    def _reap(self, proc: subprocess.Popen[Any]) -> None:
        with contextlib.suppress(Exception):
            proc.wait()
        self.at = time.monotonic()
        self.done.set()

    def wait(self, timeout: float | None) -> float | None:
        return self.at if self.done.wait(timeout) else None


_waiters: weakref.WeakKeyDictionary[subprocess.Popen[Any], _Waiter] = weakref.WeakKeyDictionary()


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

    start = _started.get(proc, time.monotonic())
    timed_out = False
    stopped: str | None = None
    exited: float | None = None
    try:
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait = (
                remaining
                if stop_when is None
                else (poll_s if remaining is None else min(poll_s, remaining))
            )
            exited = wait_exit(proc, wait)
            if exited is None:
                if deadline is not None and time.monotonic() >= deadline:
                    raise subprocess.TimeoutExpired(proc.args, wait or 0.0)
                reason = stop_when() if stop_when is not None else None
                if reason:
                    stopped = reason
                    last_look("stopped")
                    kill_group(proc, grace_s=min(grace_s, 2.0))
                    break
            else:
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
        if kill_tree_on_exit and _group_running(proc, proc.pid):
            kill_group(proc, grace_s=min(grace_s, 1.0))
        _forget(proc)
    # The child's own start-to-exit time when it exited by itself; a killed child's runs to now.
    end = exited if exited is not None else time.monotonic()
    return Finished(proc.returncode, timed_out, end - start, stopped)


def reap_all(*, grace_s: float = 2.0) -> int:
    """Kill every live child group aorta started (on Ctrl-C/SIGTERM). Returns how many.
    A child whose caller already waited for it, its group empty, is forgotten, not counted.

    Every group is sent SIGTERM at once and shares one ``grace_s``; what still runs then is
    sent SIGKILL, and the call returns once each group is empty (bounded), as
    :func:`kill_group` does for one. A group counts as empty once only zombies are left in it:
    the sweep is a subreaper, so the dead children of a trial whose leader went first are its
    own, and are reaped here (:func:`_group_running`) — ``killpg(pgid, 0)`` counts them, so
    waiting on it would spend the whole grace on every such group, and returning without
    waiting left them, and processes still on their way out, behind.
    """

    def running(group: list[subprocess.Popen[Any]]) -> list[subprocess.Popen[Any]]:
        # poll() first: _group_running reaps the group's zombies only once the leader is.
        return [p for p in group if p.poll() is None or _group_running(p, p.pid)]

    with _lock:
        known = list(_live.values())
    procs = running(known)
    for proc in procs:
        _signal_group(proc.pid, signal.SIGTERM)
    left = running(procs)
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = running(left)
    for proc in left:
        _signal_group(proc.pid, signal.SIGKILL)
    # SIGKILL lands asynchronously: wait briefly for the groups to go.
    end = time.monotonic() + 2.0
    while left and time.monotonic() < end:
        time.sleep(0.02)
        left = running(left)
    for proc in known:
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
