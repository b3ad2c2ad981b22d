"""One large trace file decoded by several processes at once, giving the serial parse's table.

The ``traceEvents`` array of a plain (not gzip) file is cut into byte ranges at event
boundaries (a ``}`` followed by ``,`` and ``{``, found near evenly spaced offsets); each range
is read as an array of its own (``[`` + range + ``]``) by the same scanner and builder as a
serial parse, in a worker process (the calling process takes the first, shorter range), and
the parts are merged in file order by :func:`~aorta.trace.loader._parse.merge_parts`, whose
dictionaries grow in order of first occurrence — so the result is the serial table, bit for bit.

A boundary found inside a string or a nested object cannot decode (the range would start or
end inside a value), so a wrong cut is an error in a worker, never a wrong table; on any error
the caller parses serially, which also reports a corrupt file precisely. The calling process
parses the first range itself. Workers are forked when this process runs a single thread (no
imports to repeat), else started by a forkserver.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, BinaryIO

from aorta.errors import TraceError

from ._parse import AmbiguousLabels, Part, RankTable, _Builder, merge_parts
from ._scan import RangeReader, Scanner, ScanStats

__all__ = [
    "CALLER_SHARE",
    "PARALLEL_MIN_BYTES",
    "available_workers",
    "event_ranges",
    "parse_file_parallel",
]

#: Plain files at least this large are decoded by several processes (``load(workers=...)``).
PARALLEL_MIN_BYTES = 64 << 20
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_WINDOW = 1 << 20
#: The calling process's range is this fraction of a worker's: it also reads the header,
#: starts the workers, unpickles and merges their parts. Measured on 200 MB traces with two
#: processes: with equal ranges the caller used ~0.03 s more CPU than the worker; with 0.7 the
#: worker ~0.1 s more.
CALLER_SHARE = 0.9


def available_workers() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` elsewhere);
    1 in a process started by :mod:`multiprocessing` (a pool of trial analyses, say), which is
    parallel already."""
    if multiprocessing.parent_process() is not None:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def event_ranges(
    path: Path, start: int, end: int, parts: int, *, first_share: float = 1.0
) -> list[tuple[int, int]]:
    """Up to ``parts`` byte ranges covering ``[start, end)``, each cut just after an event's
    ``}`` (the next starting at the following ``{``); fewer when boundaries coincide. The first
    range is ``first_share`` times as long as each of the others."""
    cuts: list[tuple[int, int]] = []
    unit = (end - start) / (parts - 1 + first_share)
    with open(path, "rb") as fh:
        for k in range(1, parts):
            guess = start + int(unit * (first_share + k - 1))
            if cuts and guess <= cuts[-1][1]:
                continue
            found = _boundary(fh, guess, end)
            if found is not None and (not cuts or found[0] > cuts[-1][1]):
                cuts.append(found)
    edges = [start, *(x for cut in cuts for x in cut), end]
    return list(zip(edges[::2], edges[1::2], strict=True))


def _boundary(fh: BinaryIO, guess: int, end: int) -> tuple[int, int] | None:
    """``(just after the "}", at the "{")`` of the first event boundary at or after ``guess``."""
    window = _WINDOW
    while guess < end:
        fh.seek(guess)
        data = fh.read(min(window, end - guess))
        match = _BOUNDARY.search(data)
        if match:
            return guess + match.start() + 1, guess + match.end() - 1
        if len(data) < window:
            return None
        guess += window - 64  # overlap: a boundary may straddle the window's end
        window *= 2
    return None


def _parse_range(
    path: Path, lo: int, hi: int, *, last: bool, bare: bool, python_functions: bool, block_size: int
) -> tuple[Part, dict[str, Any]]:
    """The :class:`Part` of the events in ``[lo, hi)`` and, for the last range of an object,
    the top-level keys after the array."""
    stats = ScanStats()
    reader = RangeReader(path, lo, hi, prefix=b"[", suffix=b"" if last else b"]")
    builder = _Builder(python_functions=python_functions)
    scanner = Scanner(path, builder.decode, stats, block_size, reader=reader)
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = scanner.find_events()
        scanner.bare = bare or not last  # our own "]" ends a middle range; the file's ends the last
        for events in scanner.events(start):
            builder.add(events)
            del events
    finally:
        scanner.close()
        if enabled:
            gc.enable()
    return builder.part(stats), stats.header


def parse_file_parallel(
    path: Path, *, workers: int, python_functions: bool, block_size: int
) -> RankTable | None:
    """The serial parse of ``path`` done by ``workers`` processes, or ``None`` when it cannot be
    (a gzip file, a single range, an error in any range): then parse serially."""
    head = ScanStats()
    scanner = Scanner(path, _Builder(python_functions=python_functions).decode, head, block_size)
    try:
        if scanner.reader.gzipped:
            return None
        start = scanner.base + scanner.find_events()
        bare = scanner.bare
    finally:
        scanner.close()
    size = path.stat().st_size
    ranges = event_ranges(path, start, size, workers, first_share=CALLER_SHARE)
    if len(ranges) < 2:
        return None
    jobs: list[dict[str, Any]] = [
        {
            "lo": lo,
            "hi": hi,
            "last": i == len(ranges) - 1,
            "bare": bare,
            "python_functions": python_functions,
            "block_size": block_size,
        }
        for i, (lo, hi) in enumerate(ranges)
    ]
    method = "fork" if threading.active_count() == 1 and "fork" in _methods() else "forkserver"
    try:
        with ProcessPoolExecutor(
            len(jobs) - 1, mp_context=multiprocessing.get_context(method)
        ) as pool:
            futures = [pool.submit(_parse_range, path, **job) for job in jobs[1:]]
            results = [_parse_range(path, **jobs[0])]
            results += [future.result() for future in futures]
        header = head.header | results[-1][1]
        return merge_parts([part for part, _ in results], header, nbytes=size, gzipped=False)
    except (TraceError, AmbiguousLabels, BrokenProcessPool, OSError):
        return None


def _methods() -> list[str]:
    return multiprocessing.get_all_start_methods()
