"""Hang detection: a trial that is silent and idle for the recipe's ``hang_after`` seconds.

A :class:`HangWatch` is the ``stop_when`` callback of :func:`aorta.run.procs.run_with_deadline`
for one trial's process group. Each sample it reads

* **output**: the size and mtime of the trial's captured logs and of every file under its
  artifact folder (any change is activity: a trial may log to a file of its own);
* **CPU**: ``utime + stime`` (and the reaped children's ``cutime + cstime``) of every process
  of the trial — its process group, its session, the processes carrying its
  ``AORTA_TRIAL_TOKEN`` (a ``setsid`` or double-forked worker), and their descendants —
  from ``/proc/<pid>/stat``. Less than about 2% of one core between samples is idle, so a
  heartbeat thread does not keep a stuck trial alive, a busy loop does;
* **GPU** (a third signal, only where a tool exists): once output and CPU have been idle for
  ``hang_after``, ``amd-smi``, ``rocm-smi`` or ``nvidia-smi`` is asked for utilisation; any
  busy GPU is activity. Without a tool the signal is skipped (and the reason says so).

It returns a reason once output and CPU (and the GPUs, where known) have been idle for
``hang_after`` seconds; the caller kills the process group and records ``failure_kind``
``hang`` (status ``timeout``), long before the trial's deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "GPU_TOOLS",
    "GpuProbe",
    "HangWatch",
    "folder_state",
    "parse_amd_smi",
    "parse_nvidia_smi",
    "parse_rocm_smi",
    "tree_cpu_ticks",
    "trial_processes",
]

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: CPU use below this fraction of one core between two samples counts as idle.
IDLE_CPU_FRACTION = 0.02

#: The GPU tools asked, in this order, with the arguments that print utilisation.
GPU_TOOLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("amd-smi", ("metric", "--usage", "--json")),
    ("rocm-smi", ("--showuse", "--json")),
    ("nvidia-smi", ("--query-gpu=utilization.gpu", "--format=csv,noheader,nounits")),
)


# --- processes ---------------------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, int, int, int]]:
    """pid → (ppid, pgrp, session, CPU ticks incl. reaped children) of every live process."""
    table: dict[int, tuple[int, int, int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) < 15 or fields[0] in (b"Z", b"X"):
            continue
        ticks = sum(int(f) for f in fields[11:15])
        table[int(name)] = (int(fields[1]), int(fields[2]), int(fields[3]), ticks)
    return table


def _carries(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return entry in fh.read().split(b"\0")
    except OSError:
        return False


def _members(
    table: dict[int, tuple[int, int, int, int]], root: int, marker: str | None
) -> set[int]:
    members = {pid for pid, (_, pgrp, sid, _) in table.items() if root in (pgrp, sid)}
    if root in table:
        members.add(root)
    if marker:
        entry, me = marker.encode(), os.getpid()
        members |= {p for p in table if p not in members and p != me and _carries(p, entry)}
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(members)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in members:
                members.add(child)
                todo.append(child)
    return members


def trial_processes(root: int, *, marker: str | None = None) -> dict[int, int]:
    """pid → parent pid of every live process of ``root``'s trial: its process group, its
    session, the processes whose environment holds ``marker`` (``NAME=value``: the trial's
    token, which a ``setsid`` or double-forked worker keeps) and the descendants of all of them.

    >>> os.getpid() in trial_processes(os.getpid())
    True
    """
    table = _proc_table()
    return {pid: table[pid][0] for pid in sorted(_members(table, root, marker))}


def tree_cpu_ticks(root: int, *, marker: str | None = None) -> tuple[int, int] | None:
    """(CPU ticks, process count) of the processes of ``root``'s trial (see
    :func:`trial_processes`); ``None`` when none is alive.

    >>> tree_cpu_ticks(os.getpid())[1] >= 1
    True
    """
    table = _proc_table()
    members = _members(table, root, marker)
    if not members:
        return None
    return sum(table[p][3] for p in members), len(members)


#: Entries :func:`folder_state` looks at, at most (a trial folder of a million trace files
#: must not make every sample a long walk).
FOLDER_SCAN_LIMIT = 10_000


def folder_state(folder: Path, *, limit: int = FOLDER_SCAN_LIMIT) -> tuple[int, int]:
    """(total bytes, newest mtime in ns) of the files under ``folder``, links not followed;
    ``(-1, 0)`` when it does not exist. Any write under it changes one of the two.

    >>> folder_state(Path("/nonexistent-aorta-folder"))
    (-1, 0)
    """
    try:
        top = folder.stat()
    except OSError:
        return (-1, 0)
    size, newest, seen = 0, top.st_mtime_ns, 0
    todo = [folder]
    while todo and seen < limit:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as it:
            for entry in it:
                seen += 1
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    size += st.st_size
                    newest = max(newest, st.st_mtime_ns)
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(Path(entry.path))
    return size, newest


# --- GPUs ----------------------------------------------------------------------------------------


def parse_nvidia_smi(text: str) -> list[float]:
    """Utilisation (%) per GPU from ``nvidia-smi --query-gpu=utilization.gpu
    --format=csv,noheader,nounits``.

    >>> parse_nvidia_smi("0\\n37\\n")
    [0.0, 37.0]
    """
    out = []
    for line in text.splitlines():
        line = line.strip().rstrip("%").strip()
        with contextlib.suppress(ValueError):
            out.append(float(line))
    return out


def _number(v: Any) -> float | None:
    if isinstance(v, dict):
        v = v.get("value")
    if isinstance(v, str):
        v = v.strip().rstrip("%").strip()
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def parse_rocm_smi(text: str) -> list[float]:
    """Utilisation (%) per GPU from ``rocm-smi --showuse --json``.

    >>> parse_rocm_smi('{"card0": {"GPU use (%)": "0"}, "card1": {"GPU use (%)": "99"}}')
    [0.0, 99.0]
    """
    doc = json.loads(text)
    out = []
    for card, fields in sorted(doc.items()):
        if not card.startswith("card") or not isinstance(fields, dict):
            continue
        for key, value in fields.items():
            if "use" in key.lower() and "%" in key and "memory" not in key.lower():
                got = _number(value)
                if got is not None:
                    out.append(got)
                    break
    return out


def _walk(doc: Any) -> Iterable[dict[str, Any]]:
    if isinstance(doc, dict):
        yield doc
        for v in doc.values():
            yield from _walk(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _walk(v)


def parse_amd_smi(text: str) -> list[float]:
    """Graphics activity (%) per GPU from ``amd-smi metric --usage --json`` (the
    ``gfx_activity`` of each GPU, ``gfx_usage`` in older releases).

    >>> parse_amd_smi('[{"gpu": 0, "usage": {"gfx_activity": {"value": 12, "unit": "%"}}}]')
    [12.0]
    """
    doc = json.loads(text)
    out = []
    for node in _walk(doc):
        for key in ("gfx_activity", "gfx_usage", "gfx_busy_percent"):
            if key in node:
                got = _number(node[key])
                if got is not None:
                    out.append(got)
                break
    return out


_PARSERS: dict[str, Callable[[str], list[float]]] = {
    "amd-smi": parse_amd_smi,
    "rocm-smi": parse_rocm_smi,
    "nvidia-smi": parse_nvidia_smi,
}


class GpuProbe:
    """Asks the first GPU tool on ``PATH`` whether any GPU is busy.

    :meth:`busy` is ``None`` when no tool exists or its output cannot be read: the signal is
    then skipped, never guessed. ``tools`` and ``which`` are injectable for tests.
    """

    def __init__(
        self,
        *,
        tools: Sequence[tuple[str, Sequence[str]]] = GPU_TOOLS,
        which: Callable[[str], str | None] = shutil.which,
        timeout_s: float = 10.0,
    ) -> None:
        self.tool: tuple[str, list[str]] | None = None
        for name, args in tools:
            path = which(name)
            if path:
                self.tool = (name, [path, *args])
                break
        self.timeout_s = timeout_s
        self.last_error: str | None = None

    @property
    def name(self) -> str | None:
        return self.tool[0] if self.tool else None

    def utilisation(self) -> list[float] | None:
        """Utilisation (%) per GPU, or ``None`` (no tool, or it failed: see ``last_error``)."""
        if self.tool is None:
            return None
        name, argv = self.tool
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
            values = _PARSERS[name](done.stdout)
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            self.last_error = f"{name}: {exc}"
            return None
        if done.returncode != 0 or not values:
            self.last_error = f"{name} exited {done.returncode} with no utilisation"
            return None
        return values

    def busy(self) -> bool | None:
        values = self.utilisation()
        return None if values is None else any(v > 0 for v in values)


# --- the watch -----------------------------------------------------------------------------------


class HangWatch:
    """``stop_when`` for one trial: a reason once it has been silent and idle for ``hang_after``.

    ``root`` is the trial's first process (its process group leader); ``logs`` the files its
    output goes to; ``folders`` (the trial's artifact folder) hold more files whose writes
    count as output — a trial that logs only to a file of its own is not silent. ``marker``
    (``AORTA_TRIAL_TOKEN=<token>``) finds the trial's processes that left its process group
    and session (``setsid``, a double fork). ``gpu`` is a :class:`GpuProbe` (``None``: do not
    ask). ``clock`` and the sampling period are injectable; samples are taken at most every
    ``sample_s`` however often the watch is called.
    """

    def __init__(
        self,
        root: int,
        logs: Sequence[Path],
        *,
        hang_after: float,
        folders: Sequence[Path] = (),
        marker: str | None = None,
        gpu: GpuProbe | None = None,
        clock: Callable[[], float] = time.monotonic,
        sample_s: float | None = None,
    ) -> None:
        self.root = root
        self.logs = [Path(p) for p in logs]
        self.folders = [Path(p) for p in folders]
        self.marker = marker
        self.hang_after = float(hang_after)
        self.gpu = gpu
        self.clock = clock
        self.sample_s = sample_s if sample_s is not None else min(1.0, self.hang_after / 4)
        now = clock()
        self._last_sample = -float("inf")
        self._quiet_since = now
        self._output: tuple[tuple[int, int], ...] = self._output_state()
        self._cpu: int | None = None
        self._cpu_at = now
        self._gpu_asked = -float("inf")
        self._gpu_note = "" if gpu is not None else "; GPUs not asked"
        self.processes = 0

    def _output_state(self) -> tuple[tuple[int, int], ...]:
        state = []
        for p in self.logs:
            try:
                st = p.stat()
                state.append((st.st_size, st.st_mtime_ns))
            except OSError:
                state.append((-1, 0))
        state.extend(folder_state(f) for f in self.folders)
        return tuple(state)

    def _active(self, now: float) -> bool:
        output = self._output_state()
        active = output != self._output
        self._output = output
        tree = tree_cpu_ticks(self.root, marker=self.marker)
        ticks = tree[0] if tree else 0
        self.processes = tree[1] if tree else 0
        if self._cpu is not None:
            allowed = 1 + IDLE_CPU_FRACTION * CLK_TCK * (now - self._cpu_at)
            active = active or abs(ticks - self._cpu) > allowed
        self._cpu, self._cpu_at = ticks, now
        return active

    def _gpus_busy(self, now: float) -> bool:
        if self.gpu is None:
            return False
        if now - self._gpu_asked < max(2.0, self.hang_after / 2):
            return False
        self._gpu_asked = now
        busy = self.gpu.busy()
        if busy is None:
            why = self.gpu.last_error or "no amd-smi, rocm-smi or nvidia-smi on PATH"
            self._gpu_note = f"; GPU use unknown ({why})"
            return False
        self._gpu_note = f"; GPUs idle ({self.gpu.name})"
        return busy

    def __call__(self) -> str | None:
        now = self.clock()
        if now - self._last_sample < self.sample_s:
            return None
        self._last_sample = now
        if self._active(now):
            self._quiet_since = now
            return None
        quiet = now - self._quiet_since
        if quiet < self.hang_after:
            return None
        if self._gpus_busy(now):
            self._quiet_since = now
            return None
        return (
            f"no output and no CPU use by the trial's {self.processes} process(es) for "
            f"{quiet:.1f} s (hang_after: {self.hang_after:g} s){self._gpu_note}"
        )
