"""A user's hang evidence from files and folders, classified by content.

What :func:`load_evidence` takes (a file named, or any file in a folder named, and in its
subfolders one level down — a trial folder's ``hang/``, with each rank's ``hang/rank<N>/`` in
it — never through a link to a folder):

- a flight-recorder dump, JSON or pickle (a mapping with ``entries``, ``pg_config`` or
  ``pg_status``), however it is named: PyTorch's ``nccl_trace_rank_3``, ``fr_dump_3.json``,
  aorta's ``hang/fr_3.json``;
- ``py-spy dump --json`` output (a list of threads with ``frames``);
- a capture file (a small JSON mapping with ``rank`` and ``pid``/``host``/``notes``/``exited``,
  as aorta's capture writes ``hang/capture_<rank>.json``);
- any other text: a log, of which the last :data:`LOG_TAIL_BYTES` are read.

A file's rank is the trailing number of its name once the extensions are off
(``nccl_trace_rank_3`` → 3, ``rank3.stderr.log`` → 3, ``gpu-r3.local_rank_5`` → 5: only the
*trailing* number, and none above :data:`~aorta.hang.model.MAX_RANK`: ``train-1733500000.log``
names no rank), a capture's own ``rank`` field, for stacks the rank of the capture with
the same pid, and for log lines torch's ``[rankN]:`` prefix. A log without any (a one-rank
trial's ``stdout.log``) is rank 0's when no other rank is in sight. A node's GPU evidence
(``gpu_<host>.txt``, kept in its first rank's folder) is no rank's: a host named ``gpu-r3``
names no rank 3, and the node's lines (an Xid naming a PCI bus) say no rank's device failed.
It is its host's :class:`~aorta.hang.model.NodeEvidence` (:func:`load_incident`), its last
device lines (:func:`~aorta.hang.device.node_lines`) kept.

In a folder, files that are none of these (a profiler trace, a recipe, binary data) are
passed over; a file named on the command line must be evidence. A dump that cannot be read
(truncated, too large, a pickle naming a global) is an error either way: one
:class:`~aorta.errors.HangEvidenceError` naming it.
A path given that holds nothing at all (an empty file, a folder of empty logs) is named: an
error when no path holds anything, a warning beside evidence. A file reached twice (named
twice, or named and in a folder named) is read once.

Memory is bounded as a whole, not only per file: before a file is read it is charged an
upper bound of what it takes in memory (:func:`~aorta.hang.dumps.read_cost`, up to 72 times
a hostile pickle's size), each dump's entries what the analysis adds per entry
(:data:`ENTRY_COST`), and once the charges pass ``max_memory`` (:data:`MAX_MEMORY`) the
file that would pass it is not read: one error names it, the folder and the limit.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aorta.errors import AortaWarning, HangEvidenceError

from .device import node_lines
from .dumps import (
    DUMP_KEYS,
    MAX_DUMP_BYTES,
    MAX_PICKLE_BYTES,
    Cost,
    JSONProblem,
    decode_json,
    dump_kind,
    parse_dump,
    paused_gc,
    read_cost,
)
from .model import MAX_RANK, NODE_FILE, NodeEvidence, RankEvidence, is_evidence_rank_dir
from .watchdog import rank_prefix

__all__ = [
    "ENTRY_COST",
    "LOG_TAIL_BYTES",
    "MAX_FILES",
    "MAX_MEMORY",
    "load_evidence",
    "load_incident",
]

#: The end of a log that is read (watchdog lines come last; a training log may be GBs).
LOG_TAIL_BYTES = 4 * 2**20
#: Files looked at under one folder.
MAX_FILES = 4096


def _default_max_memory() -> int:
    """Three quarters of this machine's memory, and at least 8 GiB: a charge is an upper bound
    (a real dump takes a third to a sixth of it), so an analysis within it never takes the
    machine; a fixed 8 GiB refused a real 1,024-rank folder (478 MiB of pickles, charged
    ~14.8 GiB, 3.6 GiB at its peak)."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # a platform without these names
        physical = 0
    return max(8 * 2**30, physical * 3 // 4)


#: What one analysis' evidence may take in memory by default (bytes; see the module's
#: docstring): three quarters of the machine's memory, at least 8 GiB.
MAX_MEMORY = _default_max_memory()
#: What the analysis holds per dump entry beyond the parsed dump (its views, signatures).
ENTRY_COST = 400
#: The largest py-spy or capture JSON read.
MAX_SMALL_JSON = 64 * 2**20
#: What a path that holds no evidence says (a file, or a folder and its subfolders).
_NOTHING = "no flight-recorder dump, stacks or log lines found"
#: Bytes read to tell what a file is.
_SNIFF = 4096
#: Extensions taken off a name before its trailing rank number is read.
_EXTENSIONS = {".json", ".pkl", ".pickle", ".log", ".txt", ".out", ".err", ".stdout", ".stderr"}
_TRAILING = re.compile(r"(\d+)$")
_CAPTURE_KEYS = {"pid", "host", "notes", "exited"}

Kind = Literal["dump", "stacks", "capture", "log"]
#: Charges a cost (bytes) to the budget, saying what it is for (refused: an error).
_Charge = Callable[[Cost, str], None]


@dataclass
class _File:
    kind: Kind
    path: Path
    shown: str  # the name the report uses (relative to the folder given)
    rank: int | None
    data: Any = None
    lines: list[str] = field(default_factory=list)
    node: bool = False  # a node's file (``gpu_<host>.txt``): no rank's, whatever its name
    named: bool = False  # named on the command line (not found in a folder named)

    @property
    def evidence(self) -> bool:
        """Whether it holds anything (an empty log, a healthy rank's stderr, holds nothing)."""
        return self.kind != "log" or any(line.strip() for line in self.lines)


def trailing_rank(name: str) -> int | None:
    """The rank a file name ends with, once its extensions are off.

    >>> [trailing_rank(n) for n in ("nccl_trace_rank_3", "rank3.stderr.log", "fr_dump_12.json",
    ...                              "gpu-r3.local_rank_5", "stdout.log", "rank1000000000.log")]
    [3, 3, 12, 5, None, None]
    """
    stem = name
    while (suffix := Path(stem).suffix.lower()) in _EXTENSIONS:
        stem = stem[: -len(suffix)]
    m = _TRAILING.search(stem)
    # A longer number is no rank (and int() may refuse it: a name may be 4,096 bytes).
    rank = int(m.group(1)) if m and len(m.group(1)) <= 12 else None
    return rank if rank is not None and rank <= MAX_RANK else None


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


@dataclass
class _Budget:
    """What the evidence read so far may take in memory, charged before each file is read."""

    limit: int
    used: int = 0

    def charge(self, where: str, shown: str, cost: Cost, what: str) -> None:
        """Take ``cost`` (its peak must fit in what is left; its ``held`` part stays)."""
        if self.used + cost.peak > self.limit:
            inside = f"{where}: " if where != shown else ""
            raise HangEvidenceError(
                f"{inside}{shown}: {what} may take up to {_size(cost.peak)} in memory, which "
                f"would bring this analysis to {_size(self.used + cost.peak)}, above its limit "
                f"of {_size(self.limit)}; not read (analyze fewer ranks at once, or raise "
                "--max-memory)"
            )
        self.used += cost.held


def _inner(folder: Path) -> list[Path]:
    """A folder's entries, with those of each rank's own subfolder (``hang/rank3/``) in their
    place: how a trial's evidence is laid out since its ranks stopped sharing ``hang/``."""
    out: list[Path] = []
    for path in sorted(folder.iterdir()):
        # A rank's own evidence folder (``hang/rank3/``): a real folder, never a link.
        if is_evidence_rank_dir(path.name) and path.is_dir() and not path.is_symlink():
            out.extend(sorted(path.iterdir()))
        else:
            out.append(path)
    return out


def _walk(folder: Path) -> Iterator[Path]:
    count = 0
    for depth_one in _inner(folder):
        inner = [depth_one]
        if depth_one.is_dir() and not depth_one.is_symlink():
            inner = _inner(depth_one)
        for path in inner:
            # Hidden files are half-written or left behind (a capture's temporaries), never
            # a rank's evidence.
            if path.is_file() and not path.name.startswith("."):
                count += 1
                if count > MAX_FILES:
                    raise HangEvidenceError(f"{folder}: more than {MAX_FILES} files to look at")
                yield path


def _read(path: Path, limit: int, shown: str) -> bytes:
    """At most ``limit`` bytes, refusing a file that is larger without reading it."""
    size = path.stat().st_size
    if size > limit:
        raise HangEvidenceError(
            f"{shown}: {size / 2**20:,.0f} MiB is above the {limit // 2**20} MiB limit of "
            "this kind of evidence; not read"
        )
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # the file grew, or stat lied (a pseudo-file)
        raise HangEvidenceError(f"{shown}: more than {limit // 2**20} MiB; not read")
    return data


def _tail(path: Path, charge: _Charge) -> list[str]:
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - LOG_TAIL_BYTES))
        data = f.read(LOG_TAIL_BYTES)
    charge(read_cost(data, "text"), f"the last {_size(len(data))} of a log")
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if size > LOG_TAIL_BYTES else lines  # the first may be cut


def _is_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    try:
        head[:-4].decode("utf-8")  # a multi-byte character may be cut at the end
    except UnicodeDecodeError:
        return False
    return True


def _json_or_none(path: Path, shown: str, charge: _Charge) -> Any:
    """The file as JSON; ``None`` when its first line already is not JSON (a log whose lines
    start with ``[rank0]:``); an error for JSON that breaks later or nests too deep."""
    data = _read(path, MAX_SMALL_JSON, shown)
    charge(read_cost(data, "json"), f"{_size(len(data))} of JSON")
    try:
        return decode_json(data)
    except JSONProblem as exc:
        first_line = data.find(b"\n")
        if exc.deep:
            raise HangEvidenceError(f"{shown}: invalid JSON ({exc.problem})") from None
        if exc.pos is None or first_line == -1 or exc.pos <= first_line:
            return None
        raise HangEvidenceError(f"{shown}: byte {exc.pos}: invalid JSON ({exc.problem})") from None


def _is_stacks(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, dict) and isinstance(t.get("frames"), list) for t in value)
    )


def _is_capture(value: Any) -> bool:
    rank = value.get("rank") if isinstance(value, dict) else None
    return (
        isinstance(rank, int)
        and not isinstance(rank, bool)
        and 0 <= rank <= MAX_RANK
        and bool(_CAPTURE_KEYS & set(value))
        and not (DUMP_KEYS & set(value))
    )


def _dump(path: Path, shown: str, kind: str | None, charge: _Charge) -> dict[str, Any]:
    """A dump, read within the per-kind size limit and charged to the budget (its bytes,
    what they become, and what the analysis adds per entry) before it is parsed."""
    limit = MAX_PICKLE_BYTES if kind == "pickle" else MAX_DUMP_BYTES
    data = _read(path, limit, shown)
    what = f"a {_size(len(data))} {'pickle' if kind == 'pickle' else 'JSON'} dump"
    cost = read_cost(data, kind or "json")
    charge(Cost(len(data) + cost.peak, cost.held), what)
    dump = parse_dump(data, name=shown)
    del data
    entries = dump.get("entries") or ()
    n = len(entries)
    charge(Cost(ENTRY_COST * n, ENTRY_COST * n), f"the analysis of {n:,} entries")
    return dump


def _classify(path: Path, shown: str, *, named: bool, charge: _Charge) -> _File | None:
    """What ``path`` is (``None``: not evidence, in a folder); errors for broken evidence."""
    if not path.is_file():
        raise HangEvidenceError(f"{shown}: not a regular file")
    with open(path, "rb") as f:
        head = f.read(_SNIFF)
    rank = trailing_rank(path.name)
    kind = dump_kind(head)
    stripped = head.lstrip()
    looks_like_dump = kind == "pickle" or (
        kind == "json" and any(f'"{k}"'.encode() in head for k in (*DUMP_KEYS, "collective_seq_id"))
    )
    if looks_like_dump:
        return _File("dump", path, shown, rank, _dump(path, shown, kind, charge))
    if stripped[:1] in (b"{", b"[") and path.stat().st_size <= MAX_SMALL_JSON:
        # py-spy or capture JSON; a log whose lines start with "[rank0]:" is not JSON.
        value = _json_or_none(path, shown, charge)
        if _is_stacks(value):
            return _File("stacks", path, shown, rank, value, named=named)
        if _is_capture(value):
            return _File("capture", path, shown, value["rank"], value)
        if value is not None:
            if named:
                raise HangEvidenceError(
                    f"{shown}: JSON that is neither a flight-recorder dump, py-spy stacks "
                    "nor a capture file"
                )
            return None
    if _is_text(head):
        if NODE_FILE.fullmatch(path.name):
            # A node's GPU evidence (``gpu_<host>.txt``): the number a host name ends with
            # (``gpu-r3``) is no rank, and its lines are no rank's.
            return _File("log", path, shown, None, lines=_tail(path, charge), node=True)
        return _File("log", path, shown, rank, lines=_tail(path, charge), named=named)
    if named:
        raise HangEvidenceError(
            f"{shown}: byte 0: neither a flight-recorder dump (JSON or pickle), py-spy JSON, "
            f"a capture file nor a text log (it starts with {head[:8]!r})"
        )
    return None


def _first_time(path: Path, seen: set[tuple[int, int]]) -> bool:
    """Whether ``path`` is a file not met before (by device and inode: the same file named
    twice, or named and inside a folder named, is one rank's one dump, not two)."""
    st = path.stat()
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return False
    seen.add(key)
    return True


def _files(paths: Sequence[str | Path], budget: _Budget) -> list[_File]:
    """Every file of ``paths`` that is evidence or a log (an empty one too: it is named in its
    rank's files). A path that holds nothing is an error when no other path holds anything,
    else a warning naming it: a user who names the wrong file must hear so."""
    found: list[_File] = []
    barren: list[str] = []
    seen: set[tuple[int, int]] = set()
    for given in paths:
        root = Path(given)
        if not root.exists():
            what = "a link to nothing (a loop, or its target is gone)"
            raise HangEvidenceError(
                f"{given}: {what if root.is_symlink() else 'no such file or folder'}"
            )
        items: list[_File | None] = []
        again = 0  # files met before, under another path given
        if root.is_dir():
            for path in _walk(root):
                if _first_time(path, seen):
                    shown = path.relative_to(root).as_posix()
                    charge = functools.partial(budget.charge, str(given), shown)
                    items.append(_classify(path, shown, named=False, charge=charge))
                else:
                    again += 1
        elif _first_time(root, seen):
            charge = functools.partial(budget.charge, str(given), str(given))
            items.append(_classify(root, str(given), named=True, charge=charge))
        else:
            again += 1
        if again and not items:
            continue  # named again: what it holds is already counted
        kept = [item for item in items if item is not None]
        if not any(item.evidence for item in kept):
            barren.append(str(given))
        found.extend(kept)
    if len(barren) == len(paths):
        raise HangEvidenceError(f"{', '.join(barren)}: {_NOTHING}")
    for where in barren:
        warnings.warn(f"{where}: {_NOTHING}; left out", AortaWarning, stacklevel=3)
    return found


def _log_lines(item: _File, known: set[int]) -> dict[int, list[str]]:
    """A log's lines by rank: its name's rank, else torch's ``[rankN]:`` prefixes, else rank
    0 when no other rank is in sight (a one-rank trial's log; never a node's file)."""
    if item.rank is not None:
        return {item.rank: item.lines}
    out: dict[int, list[str]] = {}
    plain = []
    for line in item.lines:
        rank = rank_prefix(line)
        if rank is None:
            plain.append(line)
        else:
            out.setdefault(rank, []).append(line)
    if plain and not out and known <= {0} and not item.node:
        out[0] = plain
    return out


@dataclass
class _Acc:
    dumps: list[_File] = field(default_factory=list)
    stacks: list[Any] = field(default_factory=list)
    stacks_file: str | None = None  # the first stacks file (a culprit's frame links to it)
    lines: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    capture: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def _rank_of_stacks(item: _File, pids: dict[int, int]) -> int | None:
    if item.rank is not None:
        return item.rank
    found = sorted({pids[t["pid"]] for t in item.data if t.get("pid") in pids})
    return found[0] if len(found) == 1 else None


def _gather(files: Sequence[_File]) -> dict[int, _Acc]:
    captures = {f.rank: f.data for f in files if f.kind == "capture" and f.rank is not None}
    pids = {c["pid"]: r for r, c in captures.items() if isinstance(c.get("pid"), int)}
    known = {f.rank for f in files if f.rank is not None}
    acc: dict[int, _Acc] = {}
    for item in files:
        if item.kind == "log":
            for owner, lines in _log_lines(item, known).items():
                a = acc.setdefault(owner, _Acc())
                a.lines.extend(lines)
                a.files.append(item.shown)
            continue
        rank = _rank_of_stacks(item, pids) if item.kind == "stacks" else item.rank
        if rank is None:
            raise HangEvidenceError(
                f"{item.shown}: cannot tell whose {item.kind} this is: name the file with the "
                "rank as its trailing number, as PyTorch names dumps (nccl_trace_rank_3)"
            )
        a = acc.setdefault(rank, _Acc())
        a.files.append(item.shown)
        if item.kind == "dump":
            a.dumps.append(item)
        elif item.kind == "stacks":
            a.stacks.extend(item.data)
            if a.stacks_file is None:
                # Relative to the folder given (a trial folder's ``hang/rank2/stacks_2.json``,
                # as the capture names it); a file named on its own, by where it is.
                a.stacks_file = str(item.path.resolve()) if item.named else item.shown
        else:
            if a.capture is None:
                a.capture = item.data
            else:  # files are in name order: the first is kept, the others named
                a.notes.append(f"another capture file, {item.shown}, left out")
    return acc


def _evidence(rank: int, a: _Acc) -> RankEvidence:
    cap = a.capture or {}
    notes = [str(n) for n in cap.get("notes") or () if isinstance(n, str)] + a.notes
    fr = None
    if a.dumps:
        best = max(a.dumps, key=lambda d: (len(d.data.get("entries") or ()), d.shown))
        fr = best.data
        if len(a.dumps) > 1:
            notes.append(f"{len(a.dumps)} dumps; used {best.shown} (the most entries)")
    host, pid, exited = cap.get("host"), cap.get("pid"), cap.get("exited")
    return RankEvidence(
        rank=rank,
        host=host if isinstance(host, str) else None,
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        fr=fr,
        stacks=a.stacks or None,
        log_lines=tuple(a.lines),
        notes=tuple(notes),
        exited=exited if isinstance(exited, int) and not isinstance(exited, bool) else None,
        files=tuple(sorted(set(a.files))),
        stacks_file=a.stacks_file if a.stacks else None,
    )


def _nodes(files: Sequence[_File]) -> tuple[NodeEvidence, ...]:
    """Each node's GPU evidence, by host (two files of one host, as in two trials' folders
    given together, are two items: the file says which)."""
    out = []
    for item in files:
        m = NODE_FILE.fullmatch(item.path.name) if item.node else None
        if m is not None:
            out.append(NodeEvidence(m.group(1), item.shown, node_lines(item.lines)))
    return tuple(sorted(out, key=lambda n: (n.host, n.file)))


def load_evidence(
    paths: Sequence[str | Path], *, max_memory: int = MAX_MEMORY
) -> list[RankEvidence]:
    """The hang evidence in ``paths`` (files or folders), one :class:`RankEvidence` per rank.

    Parameters
    ----------
    paths
        Files, or folders of them (looked into one level of subfolders deep): per-rank
        flight-recorder dumps as PyTorch writes them, py-spy JSON, capture files, logs; or an
        aorta trial folder (its ``hang/`` and its rank logs).
    max_memory
        What the evidence may take in memory, in bytes (each file charged an upper bound
        before it is read; see the module's docstring).

    Returns
    -------
    list of RankEvidence
        Sorted by rank; ``files`` name each rank's files as given (relative to a folder).

    Raises
    ------
    HangEvidenceError
        A path does not exist; a file named is not evidence; a dump is truncated, too
        large, or a pickle naming a global; a dump or stacks file has no rank; nothing in
        ``paths`` is evidence; reading the next file would pass ``max_memory``.

    Warns
    -----
    AortaWarning
        A path that holds no dump, stacks or log lines (an empty file, a folder of empty
        logs) while others do: it is left out, named (when none holds any, the error above).

    Examples
    --------
    >>> import json, pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "nccl_trace_rank_1").write_text(json.dumps({"pg_config": {}, "entries": []}))
    >>> _ = (folder / "rank1.stderr.log").write_text("[rank1]: RuntimeError: boom\\n")
    >>> [(e.rank, e.fr is not None, e.files) for e in load_evidence([folder])]
    [(1, True, ('nccl_trace_rank_1', 'rank1.stderr.log'))]
    """
    return load_incident(paths, max_memory=max_memory)[0]


def load_incident(
    paths: Sequence[str | Path], *, max_memory: int = MAX_MEMORY
) -> tuple[list[RankEvidence], tuple[NodeEvidence, ...]]:
    """:func:`load_evidence`'s ranks, and each node's GPU evidence (``gpu_<host>.txt``) in
    ``paths``, by host: what :func:`aorta.hang.analyze` takes as ``nodes``.

    Raises and warns as :func:`load_evidence` does (a node's file alone is no evidence of a
    hang: it names no rank).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "rank1.stderr.log").write_text("[rank1]: RuntimeError: boom\\n")
    >>> _ = (folder / "gpu_gpu-r3.txt").write_text("$ dmesg\\nNVRM: Xid (PCI:0000:3b:00): 79\\n")
    >>> ranks, nodes = load_incident([folder])
    >>> [e.rank for e in ranks], nodes[0].host, nodes[0].device_lines
    ([1], 'gpu-r3', ('NVRM: Xid (PCI:0000:3b:00): 79',))
    """
    if not paths:
        raise HangEvidenceError(f"no files or folders given: {_NOTHING}")
    with paused_gc():  # the dumps already read would be traversed at every collection
        files = sorted(_files(paths, _Budget(max_memory)), key=lambda f: f.shown)
    acc = _gather(files)
    if not any(f.evidence for f in files) or not acc:
        where = ", ".join(str(p) for p in paths)
        raise HangEvidenceError(f"{where}: {_NOTHING}")
    return [_evidence(rank, acc[rank]) for rank in sorted(acc)], _nodes(files)
