"""Python stacks of a rank (``py-spy dump --json``): where each thread is, who holds the GIL.

py-spy writes a list of threads, each with ``thread_name``, ``owns_gil``, ``active`` and
``frames``, innermost first (``name``, ``filename``, ``short_filename``, ``line``). What a
hang report wants from it is the rank's *own* position: the main thread's innermost frame
that is the user's code — not torch's collective wrappers, the standard library
(``threading``, ``<frozen importlib…>``), native frames (``--native``) or a capture thread —
and whether the main thread is inside a ``torch.distributed`` call (it waits in a
collective) or elsewhere (a rank that never reached it).

Examples
--------
>>> threads = read_stacks([{"thread_name": "MainThread", "owns_gil": False, "frames": [
...     {"name": "all_reduce", "filename": "/v/site-packages/torch/distributed/distributed_c10d.py",
...      "line": 3252},
...     {"name": "step", "filename": "/home/u/train.py", "line": 41}]}])
>>> p = position(threads)
>>> p.where, p.thread, p.owns_gil, p.in_collective
('train.py:41 in step', 'MainThread', False, 'all_reduce')
>>> p.stack[-1]  # the main thread's frames, innermost first, for the page
'/home/u/train.py:41 in step'
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .recorder import scalar_text

__all__ = [
    "STACK_FRAMES",
    "Frame",
    "Position",
    "Thread",
    "frame_text",
    "position",
    "read_stacks",
    "stack_lines",
    "user_frame",
]


@dataclass(frozen=True)
class Frame:
    """One frame of a stack: function, file and line."""

    name: str
    filename: str
    line: int
    #: py-spy's ``short_filename`` (the path below ``sys.path``), when it gave one.
    short_filename: str | None = None


@dataclass(frozen=True)
class Thread:
    """One thread of a py-spy dump."""

    name: str
    pid: int | None
    os_thread_id: int | None
    owns_gil: bool
    active: bool
    frames: tuple[Frame, ...]


@dataclass(frozen=True)
class Position:
    """Where a rank's main thread is: its top user frame, and the ``torch.distributed``
    function it is inside when it waits in one."""

    where: str | None
    thread: str
    owns_gil: bool
    in_collective: str | None
    #: The main thread's frames, innermost first, as :func:`stack_lines` shows them.
    stack: tuple[str, ...] = ()


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_stacks(stacks: Sequence[Mapping[str, Any]] | None) -> list[Thread]:
    """py-spy's JSON (a list of threads) as :class:`Thread`\\ s; malformed items are left out.

    >>> [t.name for t in read_stacks([{"thread_name": "MainThread", "frames": []}, 3])]
    ['MainThread']
    """
    threads = []
    for item in stacks or ():
        if not isinstance(item, Mapping) or not isinstance(item.get("frames"), list):
            continue
        frames = tuple(
            Frame(
                scalar_text(f.get("name"), "?"),
                scalar_text(f.get("filename"), "?"),
                _int(f.get("line")) or 0,
                f.get("short_filename") if isinstance(f.get("short_filename"), str) else None,
            )
            for f in item["frames"]
            if isinstance(f, Mapping)
        )
        threads.append(
            Thread(
                name=scalar_text(item.get("thread_name")),
                pid=_int(item.get("pid")),
                os_thread_id=_int(item.get("os_thread_id")),
                owns_gil=item.get("owns_gil") is True,
                active=item.get("active") is True,
                frames=frames,
            )
        )
    return threads


def _internal(filename: str) -> bool:
    """torch's own code, the standard library, frozen modules, native code: not the user's."""
    path = filename.replace("\\", "/")
    if path.startswith("<") or not path.endswith(".py"):
        return True  # <frozen importlib._bootstrap>, native frames (libc.so.6, ...)
    if "/torch/" in path or path.startswith("torch/"):
        return True
    # The standard library: .../lib/python3.11/x.py, not under site-packages.
    parts = path.split("/")
    in_lib = any(p.startswith("python3") for p in parts[:-1]) and "lib" in parts
    return in_lib and "site-packages" not in parts and "dist-packages" not in parts


def frame_text(frame: Frame) -> str:
    """``train.py:41 in step``.

    >>> frame_text(Frame("step", "/home/u/train.py", 41))
    'train.py:41 in step'
    """
    return f"{os.path.basename(frame.filename)}:{frame.line} in {frame.name}"


#: Frames :func:`stack_lines` keeps, and characters per line (a longer one is cut): what a
#: page shows of a culprit (the capture keeps as many frames of each thread).
STACK_FRAMES = 40
_LINE_CHARS = 400


def stack_lines(frames: Sequence[Frame]) -> tuple[str, ...]:
    """The first :data:`STACK_FRAMES` frames as ``file:line in function`` (py-spy's short
    file name where it gave one), each cut at 400 characters.

    >>> stack_lines([Frame("step", "/home/u/train.py", 41, "train.py"), Frame("<module>", "x.py", 3)])
    ('train.py:41 in step', 'x.py:3 in <module>')
    """
    out = []
    for f in frames[:STACK_FRAMES]:
        line = f"{f.short_filename or f.filename}:{f.line} in {f.name}"
        out.append(line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 1] + "…")
    return tuple(out)


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the user's code (``None`` when there are no frames; the
    innermost frame when every frame is internal)."""
    for frame in frames:
        if not _internal(frame.filename):
            return frame
    return frames[0] if frames else None


def _collective(frames: Sequence[Frame]) -> str | None:
    """The ``torch.distributed`` function the innermost frames are in, if any."""
    for frame in frames:
        path = frame.filename.replace("\\", "/")
        if "torch/distributed/" in path:
            if path.endswith(("distributed_c10d.py", "_functional_collectives.py")):
                return frame.name
            continue
        if not _internal(frame.filename):
            return None
    return None


def _main(threads: Sequence[Thread], pid: int | None) -> Thread | None:
    """The rank's main thread: ``MainThread`` (or the thread whose id is the pid) of the rank's
    own process, else the thread holding the GIL, else the first with frames."""
    own = [t for t in threads if pid is None or t.pid in (None, pid)] or list(threads)
    for thread in own:
        if thread.name == "MainThread" or (pid is not None and thread.os_thread_id == pid):
            return thread
    for thread in own:
        if thread.owns_gil:
            return thread
    return next((t for t in own if t.frames), None)


def position(threads: Sequence[Thread], *, pid: int | None = None) -> Position | None:
    """Where the rank is, from its main thread (``None`` without threads).

    ``owns_gil`` tells whether the main thread holds the GIL: one that sits in a C call
    keeping it lets no other thread of the rank run, so the rank answers no dump request.
    """
    main = _main(threads, pid)
    if main is None:
        return None
    frame = user_frame(main.frames)
    return Position(
        where=frame_text(frame) if frame else None,
        thread=main.name or "?",
        owns_gil=main.owns_gil,
        in_collective=_collective(main.frames),
        stack=stack_lines(main.frames),
    )
