"""What a test file may change in its worker process and must put back, checked file by file.

`make test` runs the files on xdist workers (`--dist loadfile`), and which files share a worker
changes from machine to machine: state one file leaves in its process reaches whichever file
runs next there. CI once failed that way far from the cause (a doctest's child left in
``aorta.run.procs``' live set made another file's ``reap_all`` count 3 where 2 ran). So after
a file's last test — its module fixtures torn down — the worker's state is compared with what
it was before the file's first test; a difference fails that last test's teardown, naming the
file and what it left, and is put back so no later file inherits it.

Checked: the working directory, ``os.environ``, the umask, ``sys.path``, the handlers of the
signals aorta and the tests handle, the switch interval, whether the process is a child
subreaper, and children aorta started (``aorta.run.procs``) still running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any

from aorta.run import procs

#: Variables that change by design between the start of a file and the end of its last test:
#: pytest names the test and phase it runs in.
_MOVING = frozenset({"PYTEST_CURRENT_TEST"})
#: The signals whose handlers aorta or the tests set (Ctrl-C, a scheduler's stop, a trial's
#: alarm, tests' own), put back by whoever sets them.
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGUSR1, signal.SIGCHLD)


def _umask() -> int | None:
    """The umask, read without setting it (``os.umask`` sets one to read one: a thread that
    creates a file meanwhile gets the wrong mode)."""
    with contextlib.suppress(OSError, ValueError, StopIteration), open("/proc/self/status") as fh:
        return int(next(line for line in fh if line.startswith("Umask:")).split()[1], 8)
    return None


def _subreaper(on: bool | None = None) -> bool:
    """Whether this process is a child subreaper; with ``on``, made one or not first. Here, not
    through aorta.run.orphans: this module loads in every pytest process, and orphans imports
    the store and the hang models (0.25 s)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        if on is not None:
            libc.prctl(36, int(on), 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        flag = ctypes.c_int(0)
        libc.prctl(37, ctypes.byref(flag), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
        return bool(flag.value)
    return False


def _handler(sig: int) -> Any:
    """The handler of ``sig``; pytest-timeout's timer as one name: it sets a new one for every
    test (``timeout = 600``) and takes it down after, so a file's first and last differ. It takes
    it down early, to SIG_DFL, when a test fails: on SIGALRM that is the same name (a failing
    test's file was blamed for a changed handler)."""
    handler = signal.getsignal(sig)
    if getattr(handler, "__module__", None) == "pytest_timeout" or (
        sig == signal.SIGALRM and handler == signal.SIG_DFL
    ):
        return "pytest-timeout's (or none)"
    return handler


def _running_children() -> list[int]:
    return sorted(pid for pid, p in list(procs._live.items()) if p.poll() is None)


@dataclass(frozen=True)
class State:
    """One reading of the process state a test file must leave as it found it."""

    cwd: str
    environ: dict[str, str]
    umask: int | None
    path: list[str]
    handlers: dict[int, Any]
    switch_interval: float
    subreaper: bool
    children: list[int]

    @classmethod
    def now(cls) -> State:
        return cls(
            cwd=os.getcwd(),
            environ={k: v for k, v in os.environ.items() if k not in _MOVING},
            umask=_umask(),
            path=list(sys.path),
            handlers={s: _handler(s) for s in _SIGNALS},
            switch_interval=sys.getswitchinterval(),
            subreaper=_subreaper(),
            children=_running_children(),
        )

    def changes(self, after: State) -> list[str]:
        """What ``after`` has that differs from this reading, one line each."""
        out = []
        if after.cwd != self.cwd:
            out.append(f"the working directory: {self.cwd} -> {after.cwd}")
        for key in sorted(self.environ.keys() | after.environ.keys()):
            was, now = self.environ.get(key), after.environ.get(key)
            if was != now:
                out.append(f"os.environ[{key!r}]: {was!r} -> {now!r}")
        if after.umask != self.umask:
            out.append(f"the umask: {self.umask:#o} -> {after.umask:#o}")
        if after.path != self.path:
            added = [p for p in after.path if p not in self.path]
            gone = [p for p in self.path if p not in after.path]
            out.append(
                f"sys.path: added {added}, removed {gone}" if added or gone else "sys.path's order"
            )
        for sig, handler in self.handlers.items():
            if after.handlers[sig] != handler:
                name = signal.Signals(sig).name
                out.append(f"the {name} handler: {handler!r} -> {after.handlers[sig]!r}")
        if after.switch_interval != self.switch_interval:
            out.append(
                f"sys.getswitchinterval(): {self.switch_interval} -> {after.switch_interval}"
            )
        if after.subreaper != self.subreaper:
            out.append(f"child subreaper: {self.subreaper} -> {after.subreaper}")
        if left := [pid for pid in after.children if pid not in self.children]:
            out.append(f"children aorta started, still running: {left}")
        return out

    def restore(self) -> None:
        """Put this reading back (children the file left running are killed)."""
        with contextlib.suppress(OSError):
            os.chdir(self.cwd)
        moving = {k: v for k, v in os.environ.items() if k in _MOVING}
        os.environ.clear()
        os.environ.update({**self.environ, **moving})
        if self.umask is not None:
            os.umask(self.umask)
        sys.path[:] = self.path
        for sig, handler in self.handlers.items():
            if handler is not None and not isinstance(handler, str):
                signal.signal(sig, handler)
        sys.setswitchinterval(self.switch_interval)
        if _subreaper() != self.subreaper:
            _subreaper(self.subreaper)
        for pid in _running_children():
            if pid not in self.children:
                procs.kill_group(procs._live[pid], grace_s=1.0)
