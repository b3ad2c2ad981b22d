"""Merge per-rank traces into one Perfetto-loadable trace, written as a stream.

Each rank's events are copied whole (python_function and flow events included) with:

- ``pid``/``tid`` remapped to fresh integers, unique across ranks (GPU ``pid`` 0 of rank 0 and
  of rank 1 no longer collide; string pids such as ``"Spans"`` become integers too);
- flow ``id``\\ s made unique per rank, so arrows never join two ranks;
- process names prefixed ``[rank R]`` and processes sorted by rank;
- ``ts`` shifted onto one clock (``baseTimeNanoseconds``, optionally collective end times).

Memory stays bounded: events are read, rewritten and written one chunk at a time.

The merged file starts with ``{"aorta_merge": {...}`` (ranks, sources, offsets, alignment), so
a later merge that expands the same directory recognises it from its first bytes and skips it
rather than folding it in as another rank; an output that is one of the inputs is refused.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from aorta.errors import TraceError

from .collectives import clock_offsets
from .loader import CacheMode, PathLike, load, trace_paths
from .loader._scan import ScanStats, scan_events

__all__ = ["MERGE_MARKER", "MergeReport", "is_merged_trace", "merge"]

#: The first key of every merged trace (older versions wrote it after the events).
MERGE_MARKER = b'{"aorta_merge":'
_TAIL = 64 << 10

_DECODER = msgspec.json.Decoder()
_ENCODER = msgspec.json.Encoder()
_FLOW_PHASES = frozenset({"s", "t", "f"})
_RENAMED = frozenset(
    {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}
)


@dataclass(frozen=True)
class MergeReport:
    """What :func:`merge` wrote: the output, its ranks (in the order of the inputs), the events
    copied, the clock shift applied to each rank (ns) and the bytes written."""

    output: str
    ranks: tuple[int, ...]
    sources: tuple[str, ...]
    events: int
    offsets_ns: dict[int, int] = field(default_factory=dict)
    bytes_written: int = 0


class _Remap:
    """Fresh pids/tids/flow ids for one rank's events."""

    def __init__(
        self,
        rank: int,
        shift_us: float,
        pids: dict[tuple[int, Any], int],
        tids: dict[tuple[int, Any, Any], int],
    ) -> None:
        self.rank = rank
        self.shift_us = shift_us
        self.pids = pids
        self.tids = tids
        self.named: set[int] = set()

    def pid(self, pid: Any) -> int:
        key = (self.rank, pid)
        if key not in self.pids:
            self.pids[key] = len(self.pids) + 1
        return self.pids[key]

    def tid(self, pid: Any, tid: Any) -> int:
        key = (self.rank, pid, tid)
        if key not in self.tids:
            self.tids[key] = len(self.tids) + 1
        return self.tids[key]

    def event(self, ev: Any) -> dict[str, Any] | None:
        if not isinstance(ev, dict):
            return None
        pid, tid = ev.get("pid", 0), ev.get("tid", 0)
        ev["pid"], ev["tid"] = self.pid(pid), self.tid(pid, tid)
        ts = ev.get("ts")
        if isinstance(ts, int | float) and self.shift_us:
            ev["ts"] = ts + self.shift_us
        if ev.get("ph") in _FLOW_PHASES and "id" in ev:
            fid = ev["id"]
            ev["id"] = (
                (fid << 16) | self.rank
                if isinstance(fid, int) and 0 <= fid < 1 << 36 and self.rank < 1 << 16
                else f"r{self.rank}:{fid}"
            )
        if ev.get("ph") == "M" and ev.get("name") in _RENAMED:
            self._metadata(ev, pid)
        return ev

    def _metadata(self, ev: dict[str, Any], pid: Any) -> None:
        given = ev.get("args")
        args: dict[str, Any] = given if isinstance(given, dict) else {}
        if ev["name"] == "process_name":
            args["name"] = f"[rank {self.rank}] {args.get('name', pid)}"
            self.named.add(ev["pid"])
        elif ev["name"] == "process_sort_index":
            index = args.get("sort_index", 0)
            args["sort_index"] = (
                self.rank * 100_000 + (index if isinstance(index, int) else 0) % 100_000
            )
        ev["args"] = args

    def missing_names(self) -> list[dict[str, Any]]:
        """process_name/sort events for this rank's processes that the file did not name."""
        out = []
        for (rank, pid), new in self.pids.items():
            if rank == self.rank and new not in self.named:
                out.append(
                    {
                        "ph": "M",
                        "name": "process_name",
                        "pid": new,
                        "tid": 0,
                        "args": {"name": f"[rank {rank}] {pid}"},
                    }
                )
                out.append(
                    {
                        "ph": "M",
                        "name": "process_sort_index",
                        "pid": new,
                        "tid": 0,
                        "args": {"sort_index": rank * 100_000},
                    }
                )
        return out


def _offsets(
    paths: list[Path], align: str, cache: CacheMode
) -> tuple[list[int], dict[int, int], int | None]:
    """Ranks (in input order), per-rank shifts (ns) and the merged base time."""
    trace = load(paths, align="none" if align == "none" else "base_time", cache=cache)
    by_path = {trace.info(r).path: r for r in trace.ranks}
    ranks = [by_path[str(p)] for p in paths]
    offsets = {r: trace.info(r).offset_ns for r in ranks}
    if align == "collective_end":
        extra = clock_offsets(trace, method="collective_end")
        offsets = {r: offsets[r] + extra.get(r, 0) for r in ranks}
    bases = [b for b in (trace.info(r).base_time_ns for r in ranks) if b is not None]
    return ranks, offsets, (min(bases) if bases else None)


def _write_rank(out: io.BufferedIOBase, path: Path, remap: _Remap, first: bool) -> tuple[int, bool]:
    """Copy one rank's events; returns (events written, whether nothing has been written yet)."""
    count = 0
    for events in scan_events(path, _DECODER.decode, stats=ScanStats()):
        rewritten = [e for e in map(remap.event, events) if e is not None]
        if not rewritten:
            continue
        try:
            text = _ENCODER.encode(rewritten)
        except RecursionError:  # decodable yet too deep to re-encode here: say which file
            raise TraceError(f"{path}: JSON nested too deeply to rewrite") from None
        out.write((b"" if first else b",\n") + text[1:-1])
        first = False
        count += len(rewritten)
    extra = remap.missing_names()
    if extra:
        out.write((b"" if first else b",\n") + _ENCODER.encode(extra)[1:-1])
        first = False
        count += len(extra)
    return count, first


def is_merged_trace(path: PathLike) -> bool:
    """Whether ``path`` is a trace written by :func:`merge`: it starts with :data:`MERGE_MARKER`
    (or, for a plain file from an older aorta, holds ``"aorta_merge"`` in its last 64 KiB).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "rank0.json").write_bytes(b'{"traceEvents": []}')
    >>> _ = (folder / "m.json").write_bytes(b'{"aorta_merge": {}, "traceEvents": []}')
    >>> is_merged_trace(folder / "rank0.json"), is_merged_trace(folder / "m.json")
    (False, True)
    """
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            if gzipped:
                with gzip.GzipFile(fileobj=raw) as fh:
                    return fh.read(len(MERGE_MARKER)) == MERGE_MARKER
            if raw.read(len(MERGE_MARKER)) == MERGE_MARKER:
                return True
            raw.seek(max(0, os.fstat(raw.fileno()).st_size - _TAIL))
            return b'"aorta_merge"' in raw.read(_TAIL)
    except (OSError, EOFError, gzip.BadGzipFile):
        return False


def _inputs(sources: Sequence[PathLike], output: Path) -> list[Path]:
    """The rank files of ``sources``, without the merged traces found in a directory; the
    output may not be one of them."""
    items = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    paths = []
    for item in items:
        found = trace_paths([item])
        if Path(item).is_dir():
            found = [p for p in found if not is_merged_trace(p)]
            if not found:
                raise TraceError(f"{item}: only merged traces in this directory, no rank files")
        paths.extend(found)
    target = output.resolve()
    for path in paths:
        if path.resolve() == target or (output.exists() and _same_file(path, output)):
            raise TraceError(
                f"{output}: is one of the inputs ({path}); write the merged trace elsewhere"
            )
    return paths


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def merge(
    sources: Sequence[PathLike],
    output: PathLike,
    *,
    align: Literal["base_time", "collective_end", "none"] = "base_time",
    cache: CacheMode = "use",
) -> MergeReport:
    """Write one trace holding every rank of ``sources``, loadable in Perfetto / chrome://tracing.

    Parameters
    ----------
    sources
        Trace files (or directories of them), one per rank.
    output
        The merged file; ``.gz`` compresses. Written to a temporary file first, then renamed.
    align
        ``"base_time"``: shift ranks by their ``baseTimeNanoseconds``; ``"collective_end"``:
        then also make matched collectives end together (see
        :func:`~aorta.trace.collectives.clock_offsets`); ``"none"``: keep timestamps.
    cache
        The parse cache policy of the first pass (ranks, clocks), as for
        :func:`~aorta.trace.load`.

    Returns
    -------
    MergeReport

    Raises
    ------
    TraceError
        An input cannot be read (named, with the byte offset), the output is one of the inputs
        (same resolved path or same file), or the output cannot be written. Traces written by
        ``merge`` (:func:`is_merged_trace`) found in a directory of ``sources`` are skipped.

    Examples
    --------
    >>> import pathlib, tempfile, json
    >>> from aorta.trace.testing import kineto_json
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for r in (0, 1):
    ...     _ = (folder / f"rank{r}.json").write_bytes(
    ...         kineto_json([("kernel", "k", 10, 5)], header={"distributedInfo": {"rank": r}}))
    >>> report = merge([folder / "rank0.json", folder / "rank1.json"], folder / "merged.json")
    >>> report.ranks, report.offsets_ns
    ((0, 1), {0: 0, 1: 0})
    >>> events = json.loads((folder / "merged.json").read_text())["traceEvents"]
    >>> sorted({e["pid"] for e in events if e.get("cat") == "kernel"})
    [2, 4]
    """
    output = Path(output)
    paths = _inputs(sources, output)
    ranks, offsets, base = _offsets(paths, align, cache)
    pids: dict[tuple[int, Any], int] = {}
    tids: dict[tuple[int, Any, Any], int] = {}
    total, first = 0, True
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    except OSError as exc:
        raise TraceError(f"{output}: cannot write: {exc.strerror or exc}") from exc
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            (
                gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=4)
                if output.name.endswith(".gz")
                else contextlib.nullcontext(raw)
            ) as out,
        ):
            marker = {
                "ranks": ranks,
                "sources": [str(p) for p in paths],
                "offsets_ns": {str(r): offsets[r] for r in ranks},
                "align": align,
            }
            out.write(MERGE_MARKER + b" " + _ENCODER.encode(marker) + b', "traceEvents": [\n')
            for path, rank in zip(paths, ranks, strict=True):
                written, first = _write_rank(
                    out, path, _Remap(rank, offsets[rank] / 1e3, pids, tids), first
                )
                total += written
            tail: dict[str, Any] = {"displayTimeUnit": "ms"}
            if base is not None:
                tail["baseTimeNanoseconds"] = base
            out.write(b"\n], " + _ENCODER.encode(tail)[1:])
        os.replace(tmp, output)
    except OSError as exc:
        raise TraceError(f"{output}: cannot write: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return MergeReport(
        output=str(output),
        ranks=tuple(ranks),
        sources=tuple(str(p) for p in paths),
        events=total,
        offsets_ns={r: offsets[r] for r in ranks},
        bytes_written=output.stat().st_size,
    )
