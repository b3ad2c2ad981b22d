"""Processes a trial leaves behind: found by a marker in their environment, never left running.

Process groups (:mod:`aorta.run.procs`) cover the usual tree of a trial, but two things
escape them: a child that calls ``setsid`` (a daemon) and everything the sweep started when
the sweep itself is killed with SIGKILL. Both are caught by marking every process a sweep
starts with variables it inherits, and looking for the marks:

* ``AORTA_SWEEP_TOKEN`` — set in the sweep's own environment for its duration, so every
  descendant (workers, commands, their daemons) carries it. An :class:`OrphanGuard` process,
  started per sweep and holding a pipe from it, wakes when the pipe closes — whenever and
  however the sweep ends, ``kill -9`` included — and kills every process still carrying the
  sweep's token.
  The guard also removes the hang forensics' pipes folders this sweep's process made
  (:func:`aorta.run.hangfiles.pipes_prefix`), and entering a guard removes those of processes
  that are gone (:func:`aorta.run.hangfiles.clear_stale_pipes`).
* ``AORTA_TRIAL_TOKEN`` — set in one trial's overlay. While a sweep runs it is a *child
  subreaper* (``PR_SET_CHILD_SUBREAPER``), so a trial's orphans (a ``setsid`` daemon whose
  parent exited) become its children; after the trial, :func:`reap_trial` kills and reaps the
  children that carry the trial's token. Checking costs one read of
  ``/proc/self/task/*/children``: nothing when the trial left nothing.

A process that scrubs its own environment escapes both; nothing short of a cgroup catches it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.resources
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable
from types import TracebackType

from aorta import envvars
from aorta.run import proctree
from aorta.run.hangfiles import clear_stale_pipes, pipes_prefix

__all__ = ["OrphanGuard", "marked_processes", "new_token", "reap_trial", "scratch_prefix"]

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _guard_source() -> str:
    # The guard runs proctree's own source with the system Python's standard library only: it
    # must start fast and must not import aorta (which may be mid-upgrade on disk).
    return importlib.resources.files("aorta.run").joinpath("proctree.py").read_text()


def new_token() -> str:
    """A fresh marker value."""
    return uuid.uuid4().hex


def scratch_prefix(token: str | None = None) -> str:
    """The name prefix of a trial's scratch folder (in the temp folder): the sweep's token
    (default: the running sweep's) in it, so that its guard removes what a ``kill -9`` of the
    sweep left there (the worker's request holds the trial's environment)."""
    return f"aorta-trial-{token or os.environ.get(envvars.SWEEP_TOKEN, 'nosweep')}-"


def marked_processes(name: str, value: str) -> list[int]:
    """Live processes (not zombies) whose environment holds ``name=value``."""
    return proctree.find([proctree.mark(name, value)])


def _set_subreaper(on: bool) -> bool:
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0
    return False


def _is_subreaper() -> bool:
    """Whether this process is a child subreaper now (``False`` where prctl cannot tell)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        flag = ctypes.c_int(0)
        if int(libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)) == 0:
            return bool(flag.value)
    return False


def reap_trial(token: str, *, ignore: Iterable[int] = (), grace_s: float = 2.0) -> int:
    """Kill and reap this process's children that carry the trial ``token``; how many.

    Only children are looked at (orphans come to the sweep because it is a subreaper), and
    only marked ones are waited for, so no ``subprocess.Popen`` loses its exit status. A
    killed daemon's own children become ours and are found on the next look.
    """
    entry = proctree.mark(envvars.TRIAL_TOKEN, token)
    skip = set(ignore)
    report = proctree.stop(
        lambda: proctree.find([entry], among=proctree.children(), spare=skip),
        grace_s=grace_s,
        reap=True,
        poll_s=0.02,
    )
    return int(report["terminated"])


class OrphanGuard:
    """For one sweep: its token in the environment, a subreaper, and a guard process.

    Cheap to build; :meth:`__enter__` starts the guard (one small Python process) and
    :meth:`__exit__` stops it — which, like the sweep dying, makes it kill whatever still
    carries the sweep's token. Use it in a ``with`` around the whole sweep.
    """

    def __init__(self, *, grace_s: float = 2.0) -> None:
        self.token = new_token()
        self.grace_s = grace_s
        self.guard: subprocess.Popen[bytes] | None = None
        self._previous: str | None = None
        self._subreaper = False

    def __enter__(self) -> OrphanGuard:
        # What sweeps that died without their guard (an OOM kill of the whole job) left.
        clear_stale_pipes()
        entry = f"{envvars.SWEEP_TOKEN}={self.token}"
        # The guard itself must not carry the token (it would be its own target).
        env = {k: v for k, v in os.environ.items() if k != envvars.SWEEP_TOKEN}
        with contextlib.suppress(OSError):
            self.guard = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _guard_source(),
                    "guard",
                    entry,
                    str(self.grace_s),
                    os.path.join(tempfile.gettempdir(), scratch_prefix(self.token) + "*"),
                    # the hang forensics' pipes folders of this process's trials
                    os.path.join(tempfile.gettempdir(), pipes_prefix() + "*"),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # not in any group a trial kill reaches
            )
        self._previous = os.environ.get(envvars.SWEEP_TOKEN)
        os.environ[envvars.SWEEP_TOKEN] = self.token
        # Undone on exit only if this guard made the process one: a caller that was a
        # subreaper already (a sweep around this one, a notebook's own) stays one, as the
        # token is put back.
        self._subreaper = not _is_subreaper() and _set_subreaper(True)
        return self

    @property
    def pids(self) -> tuple[int, ...]:
        """The guard's pid (to leave alone when looking at this process's children)."""
        return (self.guard.pid,) if self.guard is not None else ()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._previous is None:
            os.environ.pop(envvars.SWEEP_TOKEN, None)
        else:
            os.environ[envvars.SWEEP_TOKEN] = self._previous
        if self._subreaper:
            _set_subreaper(False)
        if self.guard is not None:
            with contextlib.suppress(OSError):
                self.guard.stdin.close()  # type: ignore[union-attr]
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.guard.wait(timeout=self.grace_s + 10.0)
