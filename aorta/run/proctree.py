"""Processes found by a marker in their environment: find them, signal them with a grace
period, reap them. The one implementation of "stop everything this run started".

Three callers share it: a sweep's trial cleanup and its guard process (:mod:`aorta.run.orphans`)
and the launch's node agent (:mod:`aorta.launch._remote`), which runs on nodes where aorta may
be missing or mid-upgrade — the launcher ships this file's source in the agent's request, and
the sweep's guard runs it with ``python -I -S -c``. So it imports only the standard library,
its syntax runs on Python 3.8, and it holds no state.

A marker is one ``NAME=value`` entry of ``/proc/<pid>/environ`` (as bytes). Zombies are never
found: they are dead, and their parent reaps them.

Examples
--------
>>> import os, signal, subprocess, sys, time, uuid
>>> entry = mark("DOCTEST_MARK", uuid.uuid4().hex)
>>> env = dict(os.environ, DOCTEST_MARK=entry.split(b"=")[1].decode())
>>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
>>> while child.pid not in find([entry]):
...     time.sleep(0.01)
>>> report = stop(lambda: find([entry]), grace_s=5.0)
>>> report["terminated"], report["left"], child.wait() == -signal.SIGTERM
(1, [], True)
"""

from __future__ import annotations

import glob
import os
import select
import shutil
import signal
import sys
import time
from typing import Any, Callable, Iterable  # noqa: UP035 - Python 3.8 on the nodes

__all__ = ["children", "environ", "find", "main", "mark", "stop"]


def mark(name: str, value: str) -> bytes:
    """The marker ``name=value`` as it appears in ``/proc/<pid>/environ``.

    >>> mark("AORTA_RUN_ID", "r1")
    b'AORTA_RUN_ID=r1'
    """
    return f"{name}={value}".encode()


def environ(pid: int) -> set[bytes]:
    """The entries of ``pid``'s environment (empty when unreadable: gone, or not ours)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return set(fh.read().split(b"\0"))
    except OSError:
        return set()


def _stat(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, session, …"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().decode("ascii", "replace").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def children() -> list[int]:
    """This process's children (every thread's), from ``/proc/self/task/*/children``."""
    out: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as fh:
                out += [int(p) for p in fh.read().split()]
        except OSError:
            continue
    return out


def find(
    marks: Iterable[bytes] = (),
    *,
    session: int = 0,
    among: Iterable[int] | None = None,
    spare: Iterable[int] = (),
    unless: bytes | None = None,
) -> list[int]:
    """Live processes whose environment holds every one of ``marks``, or (``session`` > 0)
    that belong to that session.

    ``among`` limits the search to those pids (default: every process); ``spare`` and this
    process are never found, nor a process carrying the ``unless`` marker (a watchdog that
    must outlive the kill it runs). With neither ``marks`` nor ``session`` nothing is found.
    """
    wanted = list(marks)
    if not wanted and session <= 0:
        return []
    skip = set(spare) | {os.getpid()}
    if among is None:
        among = (int(e) for e in os.listdir("/proc") if e.isdigit())
    found = []
    for pid in among:
        if pid in skip:
            continue
        stat = _stat(pid)
        if len(stat) < 4 or stat[0] in ("Z", "X"):
            continue
        env = environ(pid)
        if unless is not None and unless in env:
            continue
        in_session = session > 0 and stat[3] == str(session)
        if in_session or (wanted and all(m in env for m in wanted)):
            found.append(pid)
    return found


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


def _reap(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours, or reaped already
            continue


def stop(
    targets: Callable[[], list[int]],
    *,
    grace_s: float,
    kill_wait_s: float = 5.0,
    settle: int = 1,
    reap: bool = False,
    poll_s: float = 0.05,
) -> dict[str, Any]:
    """SIGTERM whatever ``targets()`` finds, SIGKILL what is still there after ``grace_s``.

    ``targets`` is asked again every ``poll_s``, so a process that appears meanwhile (a
    daemon's child, a wrapper that was just starting) is signalled too. It ends when
    ``targets()`` has found nothing ``settle`` times in a row, or ``kill_wait_s`` after the
    SIGKILLs. With ``reap``, the signalled processes that are this process's children are
    reaped (``waitpid`` on exactly those, so no other child loses its exit status).

    Returns ``{"terminated": n, "killed": n, "left": [pid, …]}``.
    """
    started = time.monotonic()
    termed: set[int] = set()
    killed: set[int] = set()
    quiet = 0
    left: list[int] = []
    while True:
        if reap:
            _reap(termed)
        left = targets()
        now = time.monotonic() - started
        if not left:
            quiet += 1
            if quiet >= settle:
                break
            time.sleep(poll_s)
            continue
        quiet = 0
        for pid in left:
            if pid not in termed and _signal(pid, signal.SIGTERM):
                termed.add(pid)
            if now > grace_s and pid not in killed and _signal(pid, signal.SIGKILL):
                killed.add(pid)
        if now > grace_s + kill_wait_s:
            break
        time.sleep(poll_s)
    if reap:  # the last ones found dead (zombies are never found) are reaped here
        _reap(termed)
    return {"terminated": len(termed), "killed": len(killed), "left": left}


def _wait_for_eof(parent: int) -> None:
    # Until the sweep closes the pipe or dies (EOF), or is gone while a forked child of it
    # still holds the pipe open (this process was reparented).
    while os.getppid() == parent:
        if select.select([0], [], [], 1.0)[0] and not os.read(0, 4096):
            break


def main(argv: list[str]) -> int:
    """``guard NAME=VALUE GRACE [PATTERN...]``: the sweep's guard
    (:class:`aorta.run.orphans.OrphanGuard`). Waits for its stdin to close — the sweep ended,
    however it ended — then stops every process carrying the marker and removes the folders
    matching each glob ``PATTERN`` (the sweep's scratch, left by a ``kill -9``)."""
    if len(argv) < 3 or argv[0] != "guard":
        sys.stderr.write("usage: proctree.py guard NAME=VALUE GRACE_SECONDS [PATTERN...]\n")
        return 2
    entry, grace = argv[1].encode(), float(argv[2])
    _wait_for_eof(os.getppid())
    stop(lambda: find([entry]), grace_s=grace)
    for pattern in argv[3:]:
        for folder in glob.glob(pattern):
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
