"""Decoded event chunks → growing numpy columns (one :class:`RankTable` per trace file).

Only the fields the analyses need are decoded (``msgspec`` skips the rest without building
objects); each chunk's Python objects are dropped once its columns are appended. Names, input
shapes and input types are dictionary-encoded (codes + the list of unique values).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np

from aorta.text import whole_number

from ._scan import BLOCK_SIZE, RAW_EVENTS, ScanStats, scan_events

__all__ = [
    "COLUMNS",
    "COMM_COLUMNS",
    "COMM_INT_COLUMNS",
    "AmbiguousLabels",
    "Part",
    "RankTable",
    "merge_parts",
    "note_problem",
    "parse_events",
    "parse_file",
]

#: Integer columns of a :class:`RankTable` and their dtypes (-1 means "absent").
COLUMNS: dict[str, type] = {
    "ts": np.int64,  # start, ns (as in the file: Kineto µs × 1000, rounded)
    "dur": np.int64,  # duration, ns
    "cat": np.int32,  # code into RankTable.cats
    "name": np.int32,  # code into RankTable.names
    "pid": np.int64,  # negative: code into RankTable.labels (a string pid such as "Spans")
    "tid": np.int64,
    "correlation": np.int64,
    "external_id": np.int64,
    "stream": np.int64,
    "device": np.int64,
    "input_dims": np.int32,  # code into RankTable.input_dims (the JSON text), -1 if absent
    "input_type": np.int32,  # code into RankTable.input_types
    "concrete": np.int32,  # code into RankTable.concrete ("Concrete Inputs" JSON text), -1 if absent
    "input_strides": np.int32,  # code into RankTable.input_strides ("Input Strides" JSON text)
    "seq": np.int64,  # autograd "Sequence number", -1 if absent
}

_NO_RAW = msgspec.Raw()
#: An integer that fits the int64 columns: a larger one (``1e23``) fails the typed decode, and
#: the lenient path reads it as absent and counts it (``stats["problems"]["out_of_range"]``).
I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
#: ``ts``/``dur`` in µs beyond this do not fit int64 ns (about 106 days).
MAX_US = 9.2e15


class _Args(msgspec.Struct, frozen=True, gc=False):
    # In the order Kineto writes the keys (decoding measured ~3% faster than another order).
    external_id: I64 = msgspec.field(name="External id", default=-1)
    device: I64 = -1
    stream: I64 | str = -1
    correlation: I64 = -1
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=_NO_RAW)
    input_strides: msgspec.Raw = msgspec.field(name="Input Strides", default=_NO_RAW)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NO_RAW)
    concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_NO_RAW)
    seq: I64 = msgspec.field(name="Sequence number", default=-1)
    # collectives (record_param_comms, and NCCL kernels on recent CUDA builds)
    collective: str = msgspec.field(name="Collective name", default="")
    in_nelems: I64 = msgspec.field(name="In msg nelems", default=-1)
    out_nelems: I64 = msgspec.field(name="Out msg nelems", default=-1)
    group_size: I64 = msgspec.field(name="Group size", default=-1)
    dtype: str = ""
    pg_name: str = msgspec.field(name="Process Group Name", default="")
    pg_desc: str = msgspec.field(name="Process Group Description", default="")
    pg_ranks: msgspec.Raw = msgspec.field(name="Process Group Ranks", default=_NO_RAW)
    comm_seq: I64 = msgspec.field(name="Seq", default=-1)
    # metadata events (ph "M")
    label: str | I64 = msgspec.field(name="name", default="")
    labels: str = ""
    sort_index: I64 = -1


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: I64 | str = -1
    tid: I64 | str = -1
    ts: float = math.nan
    dur: float = 0.0
    args: _Args = _NO_ARGS


_DECODER = msgspec.json.Decoder(list[_Event])
_DECODE_EVENT = msgspec.json.Decoder(_Event)
_DECODE_ANY = msgspec.json.Decoder()
_COMM_FIELDS = (
    "collective",
    "in_nelems",
    "out_nelems",
    "group_size",
    "dtype",
    "pg_name",
    "pg_desc",
    "comm_seq",
)
#: Columns of the collective-arguments table (``Trace.comm_args``); the integer ones use -1 for absent.
COMM_COLUMNS: tuple[str, ...] = ("row", *_COMM_FIELDS, "pg_ranks")
COMM_INT_COLUMNS = frozenset({"row", "in_nelems", "out_nelems", "group_size", "comm_seq"})


def _decode(chunk: memoryview, problems: dict[str, dict[str, Any]] | None = None) -> list[_Event]:
    """Typed decode; a chunk with an unexpected value type is decoded event by event: typed
    where the event allows, else converted (the values out of range are counted in
    ``problems``, see :func:`note_problem`).

    Event by event, so how an event decodes never depends on the chunk it shares: the typed
    decode skips the keys it does not read unchecked (invalid UTF-8 there included), while the
    conversion reads them all; a chunk-wide conversion would fail on a neighbour's key.
    """
    try:
        return _DECODER.decode(chunk)
    except msgspec.ValidationError:
        raws = RAW_EVENTS.decode(chunk)
    found: dict[str, dict[str, Any]] = {}  # noted once the whole chunk decoded (else retried)
    out = []
    for raw in raws:
        try:
            out.append(_DECODE_EVENT.decode(raw))
        except msgspec.ValidationError:
            ev = _lenient(_DECODE_ANY.decode(raw), found)
            if ev is not None:
                out.append(ev)
    if problems is not None:
        for kind, entry in found.items():
            note_problem(problems, kind, entry["count"], entry["first"])
    return out


def note_problem(problems: dict[str, dict[str, Any]], kind: str, count: int, first: str) -> None:
    """Count ``count`` more values of ``kind`` read as absent or replaced; keep the first example."""
    entry = problems.setdefault(kind, {"count": 0, "first": first})
    entry["count"] += count


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _out_of_range(value: Any) -> bool:
    """A JSON number that no int64 column can hold (``1e23``, ``10**30``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not (math.isfinite(value) and -(2**63) <= value < 2**63)


def _fits(cls: type, key: str, value: Any, name: Any, problems: dict[str, dict[str, Any]]) -> bool:
    """Whether ``{key: value}`` converts to ``cls``; a number out of range is noted."""
    try:
        msgspec.convert({key: value}, cls, strict=False)
    except msgspec.ValidationError:
        if _out_of_range(value):
            note_problem(
                problems, "out_of_range", 1, f"event {_short(name)}: {key} = {_short(value)}"
            )
        return False
    return True


def _lenient(item: Any, problems: dict[str, dict[str, Any]]) -> _Event | None:
    """One event from a dict, dropping (as absent) the fields whose type is unexpected."""
    if not isinstance(item, dict):
        return None
    args = item.get("args")
    if not isinstance(args, dict):
        item = {k: v for k, v in item.items() if k != "args"}
        args = {}
    try:
        return msgspec.convert(item, _Event, strict=False)
    except msgspec.ValidationError:
        pass
    name = item.get("name", "")
    good_args = {k: v for k, v in args.items() if _fits(_Args, k, v, name, problems)}
    top = {}
    for key, value in item.items():
        if key == "args":
            continue
        if key in ("ph", "cat", "name") and not isinstance(value, str):
            value = str(value)
        elif key in ("ts", "dur") and not isinstance(value, int | float):
            continue
        if _fits(_Event, key, value, name, problems):
            top[key] = value
    try:
        return msgspec.convert({**top, "args": good_args}, _Event, strict=False)
    except msgspec.ValidationError:
        return None


def _bounded(
    us: np.ndarray,
    bad: np.ndarray,
    kept: list[_Event],
    problems: dict[str, dict[str, Any]],
    kind: str,
) -> np.ndarray:
    """``us`` with the ``bad`` values set to 0, counted under ``kind``."""
    if not bad.any():
        return us
    i = int(np.flatnonzero(bad)[0])
    ev = kept[i]
    note_problem(
        problems,
        kind,
        int(bad.sum()),
        f"event {_short(ev.name)} (ts {_short(ev.ts)} us, dur {_short(ev.dur)} us)",
    )
    return np.where(bad, 0.0, us)


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    """Kineto microseconds (floats with fractional ns) → int64 ns, rounded, exact for big ts."""
    us = np.nan_to_num(us, nan=0.0, posinf=0.0, neginf=0.0)  # an event without "ts": 0
    whole = np.floor(us)
    ns: np.ndarray = whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)
    return ns


class _Dictionary:
    """Grows a list of unique values and encodes lists of values as int32 codes."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}

    def encode(self, values: list[Any]) -> np.ndarray:
        """Codes of ``values``; new values get the next codes in order of first occurrence (so
        the dictionary is the same however the values are split into chunks)."""
        index = self.index
        fresh = [value for value in dict.fromkeys(values) if value not in index]
        if fresh:
            index.update(zip(fresh, range(len(index), len(index) + len(fresh)), strict=True))
        return np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))

    def values(self) -> list[Any]:
        return list(self.index)


@dataclass
class RankTable:
    """The columns of one trace file plus its dictionaries, metadata and scan statistics."""

    columns: dict[str, np.ndarray]
    cats: list[str]
    names: list[str]
    labels: list[str]  # string pids/tids: code -1 - i ↔ labels[i]
    input_dims: list[str]
    input_types: list[str]
    #: The unique ``Concrete Inputs`` JSON texts (codes in ``columns["concrete"]``).
    concrete: list[str]
    #: The unique ``Input Strides`` JSON texts (codes in ``columns["input_strides"]``).
    input_strides: list[str]
    #: One dict per event that carries collective arguments: ``row`` plus the fields.
    comms: list[dict[str, Any]]
    #: Metadata events (process_name, thread_name, ...): dicts with name/pid/tid/value.
    meta_events: list[dict[str, Any]]
    header: dict[str, Any]
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.columns["ts"])


class _Builder:
    """Appends decoded chunks to per-column lists of arrays."""

    def __init__(self, *, python_functions: bool) -> None:
        self.python_functions = python_functions
        self.parts: dict[str, list[np.ndarray]] = {key: [] for key in COLUMNS}
        self.cats = _Dictionary()
        self.names = _Dictionary()
        self.dims = _Dictionary()
        self.types = _Dictionary()
        self.concrete = _Dictionary()
        self.strides = _Dictionary()
        self.labels: dict[str, int] = {}
        self.comms: list[dict[str, Any]] = []
        self.meta_events: list[dict[str, Any]] = []
        self.rows = 0
        self.seen = 0
        self.python_skipped = 0
        #: Values read as absent or replaced: kind → ``{"count", "first"}`` (see :func:`note_problem`).
        self.problems: dict[str, dict[str, Any]] = {}

    def decode(self, chunk: memoryview) -> list[_Event]:
        """:func:`_decode`, counting this builder's problems."""
        return _decode(chunk, self.problems)

    def add(self, events: list[_Event]) -> None:
        # Per event only list comprehensions over struct attributes (the fastest attribute
        # access in CPython 3.11+: faster than map(attrgetter)) and C-level passes (count,
        # compress, np.fromiter over a list); rare events (metadata, collectives) get more.
        self.seen += len(events)
        cats = [ev.cat for ev in events]
        if cats.count("") or cats.count("__metadata"):  # Kineto's metadata events have no category
            self.meta_events.extend(_meta(ev) for ev in events if ev.ph == "M")
        skip = 0 if self.python_functions else cats.count("python_function")
        self.python_skipped += skip
        if skip:
            kept = [ev for ev in events if ev.ph == "X" and ev.cat != "python_function"]
        else:
            kept = [ev for ev in events if ev.ph == "X"]
        n = len(kept)
        if not n:
            return
        if n != len(events):
            cats = [ev.cat for ev in kept]
        parts = self.parts
        ts = np.fromiter([ev.ts for ev in kept], np.float64, n)
        dur = np.fromiter([ev.dur for ev in kept], np.float64, n)
        # A missing ts (NaN) reads as 0 silently; one beyond int64 ns is counted. So is a
        # duration that is negative or beyond int64 ns: both become 0.
        ts = _bounded(ts, ~(np.abs(ts) < MAX_US) & ~np.isnan(ts), kept, self.problems, "ts")
        dur = _bounded(dur, ~((dur >= 0) & (dur < MAX_US)), kept, self.problems, "dur")
        parts["ts"].append(_us_to_ns(ts))
        parts["dur"].append(_us_to_ns(dur))
        parts["cat"].append(self.cats.encode(cats))
        parts["name"].append(self.names.encode([ev.name for ev in kept]))
        parts["pid"].append(self._ids([ev.pid for ev in kept]))
        parts["tid"].append(self._ids([ev.tid for ev in kept]))
        args = [ev.args for ev in kept]
        parts["correlation"].append(np.fromiter([a.correlation for a in args], np.int64, n))
        parts["external_id"].append(np.fromiter([a.external_id for a in args], np.int64, n))
        parts["stream"].append(self._ids([a.stream for a in args], strings="absent"))
        parts["device"].append(np.fromiter([a.device for a in args], np.int64, n))
        parts["input_dims"].append(self._raw_codes([a.input_dims for a in args], self.dims))
        parts["input_type"].append(self._raw_codes([a.input_type for a in args], self.types))
        parts["concrete"].append(self._raw_codes([a.concrete for a in args], self.concrete))
        parts["input_strides"].append(
            self._raw_codes([a.input_strides for a in args], self.strides)
        )
        parts["seq"].append(np.fromiter([a.seq for a in args], np.int64, n))
        in_nelems = [a.in_nelems for a in args]
        collective = [a.collective for a in args]
        if collective.count("") != n or in_nelems.count(-1) != n:  # collectives are rare
            has_comm = np.fromiter(map(bool, collective), dtype=bool, count=n)
            has_comm |= np.fromiter(in_nelems, dtype=np.int64, count=n) >= 0
            for i in np.flatnonzero(has_comm).tolist():
                self.comms.append(_comm(self.rows + i, args[i]))
        self.rows += n

    def _ids(self, values: list[int | str], *, strings: str = "label") -> np.ndarray:
        """int pids/tids; strings become negative label codes (or -1 with ``strings="absent"``)."""
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except (TypeError, ValueError, OverflowError):
            pass
        is_str = list(map(str.__instancecheck__, values))
        where, at = [], -1
        for _ in range(is_str.count(True)):  # strings are rare: find them with C-level searches
            at = is_str.index(True, at + 1)
            where.append(at)
        numbers = list(values)
        for i in where:
            numbers[i] = -1
        out = np.fromiter(numbers, dtype=np.int64, count=len(numbers))
        for i in where:
            value = values[i]
            if strings == "absent" or not isinstance(value, str):  # ``where`` holds the strings
                continue
            if (number := whole_number(value)) is not None:
                out[i] = number
            else:
                out[i] = -1 - self.labels.setdefault(value, len(self.labels))
        return out

    @staticmethod
    def _raw_codes(raws: list[msgspec.Raw], dictionary: _Dictionary) -> np.ndarray:
        """Codes of the raw JSON texts (keys are bytes until :meth:`finish` decodes them)."""
        present = np.fromiter([raw is not _NO_RAW for raw in raws], dtype=bool, count=len(raws))
        codes = np.full(len(raws), -1, dtype=np.int32)
        if present.any():
            # One join and one split make all the bytes objects in C (NUL never occurs in JSON text).
            texts = b"\0".join(itertools.compress(raws, present)).split(b"\0")
            codes[present] = dictionary.encode(texts)
        return codes

    def part(self, stats: ScanStats) -> Part:
        """What this builder collected, with its own dictionaries (see :func:`merge_parts`)."""
        columns: dict[str, np.ndarray] = {
            key: (np.concatenate(parts) if parts else np.empty(0, dtype=COLUMNS[key])).astype(
                COLUMNS[key], copy=False
            )
            for key, parts in self.parts.items()
        }
        self.parts = {}
        return Part(
            columns=columns,
            dictionaries={
                "cat": self.cats.values(),
                "name": self.names.values(),
                "input_dims": self.dims.values(),
                "input_type": self.types.values(),
                "concrete": self.concrete.values(),
                "input_strides": self.strides.values(),
            },
            labels=list(self.labels),
            comms=self.comms,
            meta_events=self.meta_events,
            problems=self.problems | _utf8_problem(stats),
            counts={
                "events_seen": self.seen,
                "events_kept": self.rows,
                "python_functions_skipped": self.python_skipped,
                "chunks": stats.chunks,
                "slow_chunks": stats.slow_chunks,
                "sanitized_bytes": stats.sanitized_bytes,
            },
        )


def _utf8_problem(stats: ScanStats) -> dict[str, dict[str, Any]]:
    """The scanner's repairs of invalid UTF-8 as a problem entry (see :func:`note_problem`)."""
    if not stats.lossy_utf8_events:
        return {}
    where = "byte (uncompressed)" if stats.gzipped else "byte"
    return {"utf8": {"count": stats.lossy_utf8_events, "first": f"{where} {stats.lossy_utf8_at}"}}


@dataclass
class Part:
    """The columns of consecutive events (a whole file, or one byte range of it) with their own
    dictionaries: codes index ``dictionaries[column]``; labels as in :class:`RankTable`."""

    columns: dict[str, np.ndarray]
    dictionaries: dict[
        str, list[Any]
    ]  # cat, name (str); input_dims, input_type, concrete, input_strides (JSON bytes)
    labels: list[str]
    comms: list[dict[str, Any]]
    meta_events: list[dict[str, Any]]
    counts: dict[str, int]
    #: Values read as absent or replaced: kind → ``{"count", "first"}``.
    problems: dict[str, dict[str, Any]] = field(default_factory=dict)


class AmbiguousLabels(ValueError):
    """Parts whose string pids cannot be renumbered exactly (label 0 and "absent" share -1)."""


def merge_parts(
    parts: list[Part], header: dict[str, Any], *, nbytes: int, gzipped: bool
) -> RankTable:
    """One :class:`RankTable` from the parts of a file, in order: the same table a single pass
    gives, since dictionaries grow in order of first occurrence.

    Raises
    ------
    AmbiguousLabels
        String pids/tids of a later part would need renumbering of code -1 (rare; parse serially).
    """
    index: dict[str, dict[Any, int]] = {key: {} for key in _DICTIONARY_COLUMNS}
    labels: dict[str, int] = {}
    columns: dict[str, list[np.ndarray]] = {key: [] for key in COLUMNS}
    comms: list[dict[str, Any]] = []
    meta_events: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    problems: dict[str, dict[str, Any]] = {}
    rows = 0
    for part in parts:
        for kind, entry in part.problems.items():
            note_problem(problems, kind, entry["count"], entry["first"])
        for key, values in part.columns.items():
            if key in index:
                values = _recode(values, part.dictionaries[key], index[key])
            columns[key].append(values)
        remap = [labels.setdefault(label, len(labels)) for label in part.labels]
        if remap != list(range(len(remap))):
            if remap[0] != 0:
                raise AmbiguousLabels("string pids/tids first seen in different parts")
            table = -1 - np.asarray(remap, dtype=np.int64)
            for key in ("pid", "tid"):
                values = columns[key][-1]
                negative = values < 0
                columns[key][-1] = np.where(
                    negative, table[np.where(negative, -1 - values, 0)], values
                )
        comms.extend(record | {"row": record["row"] + rows} for record in part.comms)
        meta_events.extend(part.meta_events)
        for key, count in part.counts.items():
            counts[key] = counts.get(key, 0) + count
        rows += len(part.columns["ts"])
    return RankTable(
        columns={
            key: chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
            for key, chunks in columns.items()
        },
        cats=list(index["cat"]),
        names=list(index["name"]),
        labels=list(labels),
        input_dims=[text.decode(errors="replace") for text in index["input_dims"]],
        input_types=[text.decode(errors="replace") for text in index["input_type"]],
        concrete=[text.decode(errors="replace") for text in index["concrete"]],
        input_strides=[text.decode(errors="replace") for text in index["input_strides"]],
        comms=comms,
        meta_events=meta_events,
        header=header,
        stats={"bytes": nbytes, "gzipped": gzipped, **counts, "parts": len(parts)}
        | ({"problems": problems} if problems else {}),
    )


_DICTIONARY_COLUMNS = ("cat", "name", "input_dims", "input_type", "concrete", "input_strides")


def _recode(codes: np.ndarray, values: list[Any], index: dict[Any, int]) -> np.ndarray:
    """``codes`` into ``values`` as codes into the growing ``index`` (-1 stays -1)."""
    remap = np.fromiter(
        (index.setdefault(v, len(index)) for v in values), dtype=np.int32, count=len(values)
    )
    if np.array_equal(remap, np.arange(len(values), dtype=np.int32)):
        return codes
    remapped: np.ndarray = np.append(remap, np.int32(-1))[codes]
    return remapped


def _comm(row: int, a: _Args) -> dict[str, Any]:
    record: dict[str, Any] = {"row": row}
    for key in _COMM_FIELDS:
        record[key] = getattr(a, key)
    ranks = bytes(a.pg_ranks).decode() if len(a.pg_ranks) else ""
    record["pg_ranks"] = ranks[1:-1] if ranks.startswith('"') else ranks  # a JSON string or list
    return record


def _meta(ev: _Event) -> dict[str, Any]:
    a = ev.args
    value: Any = a.label if a.label != "" else (a.labels if a.labels else a.sort_index)
    return {"name": ev.name, "pid": ev.pid, "tid": ev.tid, "value": value}


def parse_file(
    path: str | Path, *, python_functions: bool = False, block_size: int = BLOCK_SIZE
) -> RankTable:
    """Parse one Kineto trace file (``.json`` or gzip) into a :class:`RankTable`, reading
    ``block_size`` bytes at a time.

    Raises
    ------
    TraceError
        Unreadable, truncated or corrupt file (the message names the file and byte offset).
    """
    import gc

    stats = ScanStats()
    builder = _Builder(python_functions=python_functions)
    enabled = gc.isenabled()
    gc.disable()  # millions of short-lived objects per chunk: the cyclic GC only costs time here
    try:
        for events in scan_events(path, builder.decode, stats=stats, block_size=block_size):
            builder.add(events)
            del events
    finally:
        if enabled:
            gc.enable()
    return merge_parts(
        [builder.part(stats)], stats.header, nbytes=stats.nbytes, gzipped=stats.gzipped
    )


def parse_events(
    events: list[dict[str, Any]],
    *,
    header: dict[str, Any] | None = None,
    python_functions: bool = False,
) -> RankTable:
    """Like :func:`parse_file` for events already in memory (tests, synthetic traces)."""
    builder = _Builder(python_functions=python_functions)
    builder.add(builder.decode(memoryview(msgspec.json.encode(events))))
    stats = ScanStats(header=dict(header or {}))
    return merge_parts([builder.part(stats)], stats.header, nbytes=0, gzipped=False)
