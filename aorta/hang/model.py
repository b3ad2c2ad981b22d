"""The hang analysis' input and answer: :class:`RankEvidence` in, :class:`HangReport` out.

Both are frozen dataclasses of plain values (tuples, strings, numbers), so a report
compares by value, hashes, and goes to JSON and back unchanged
(:meth:`HangReport.to_dict` / :meth:`HangReport.from_dict`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "MAX_RANK",
    "SCHEMA",
    "CulpritFrame",
    "EvidenceItem",
    "GroupIncident",
    "HangReport",
    "Kind",
    "Position",
    "RankEvidence",
    "Variant",
    "rank_list",
]

#: Version of :meth:`HangReport.to_dict`'s layout (a record written by a later one says so).
SCHEMA = 1

#: The highest rank the analysis takes (jobs of up to 131,072 ranks). Every rank is a number
#: read from untrusted input (a file's name, a dump's ``pg_config``, a log's ``[rankN]:``) and
#: the report lists each rank up to the highest, so a larger one is no rank: a file named
#: ``rank1000000000.log`` must not size a list of a billion.
MAX_RANK = 2**17 - 1

#: What kind of divergence a group (or the whole incident) shows:
#: ``missing`` ranks never entered the collective the others wait in; ``behind`` ranks are
#: further back; ``extra``: a minority entered a collective the others never issue;
#: ``mismatch``: ranks entered the same sequence number with different ops, sizes or dtypes;
#: ``exited``: a rank the others wait for had exited; ``gil``/``no_dump``: a rank answered no
#: dump (holding the GIL, or for an unknown reason) while the others wait; ``p2p``: a send or
#: recv whose peer never posted its side; ``stuck``: every rank entered and waits (none is
#: missing); ``cycle``: ranks wait for each other across groups; ``device``: a rank's
#: collective stays incomplete at a sequence number its peers completed (its device stopped);
#: ``none``: no divergence.
Kind = Literal[
    "device",
    "missing",
    "behind",
    "extra",
    "mismatch",
    "exited",
    "gil",
    "no_dump",
    "p2p",
    "stuck",
    "cycle",
    "none",
]


def rank_list(ranks: Sequence[int]) -> str:
    """Ranks as a short list: runs of three or more as ranges.

    >>> rank_list([0, 1, 2, 3, 5, 7, 8, 9]), rank_list([2]), rank_list([0, 1])
    ('0-3,5,7-9', '2', '0,1')
    """
    out: list[str] = []
    values = sorted(set(ranks))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(f"{values[i]}-{values[j]}")
        else:
            out.extend(str(v) for v in values[i : j + 1])
        i = j + 1
    return ",".join(out)


@dataclass(frozen=True)
class RankEvidence:
    """What was taken from one rank before the kill (or brought by a user).

    Examples
    --------
    >>> RankEvidence(rank=2, host="gpu-r3", notes=("py-spy: ptrace not permitted",)).rank
    2
    """

    #: Global rank.
    rank: int
    host: str | None = None
    pid: int | None = None
    #: One flight-recorder dump, parsed (the dict as torch writes it; see ``parse_dump``).
    fr: Mapping[str, Any] | None = None
    #: ``py-spy dump --json`` output (a list of threads).
    stacks: Sequence[Mapping[str, Any]] | None = None
    #: The last lines of the rank's stdout/stderr (watchdog lines among them).
    log_lines: Sequence[str] = ()
    #: What could not be taken and why ("py-spy: ptrace not permitted", "no dump within 5 s").
    notes: Sequence[str] = ()
    #: The process had already exited before the capture: its exit code (or -signal).
    exited: int | None = None
    #: The evidence files (relative to the trial folder), for the record.
    files: Sequence[str] = ()

    def __post_init__(self) -> None:
        """Refuse a rank no job has (see :data:`MAX_RANK`).

        >>> RankEvidence(rank=MAX_RANK + 1)
        Traceback (most recent call last):
        ...
        ValueError: rank 131072: must be a whole number from 0 to 131071
        """
        rank = self.rank
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank <= MAX_RANK:
            shown = f"{rank}" if isinstance(rank, int) and rank.bit_length() < 64 else "?"
            raise ValueError(f"rank {shown}: must be a whole number from 0 to {MAX_RANK}")


@dataclass(frozen=True)
class Position:
    """A rank's place in one group: last collective enqueued and completed, and where from
    (``dump``: the flight recorder; ``log``: watchdog lines)."""

    rank: int
    enqueued: int
    completed: int
    source: Literal["dump", "log"]


@dataclass(frozen=True)
class Variant:
    """One of the signatures ranks disagree on at a sequence number."""

    ranks: tuple[int, ...]
    op: str
    sizes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]


@dataclass(frozen=True)
class GroupIncident:
    """One process group (by membership) where the ranks diverge."""

    #: The group's name (``PG GUID``, the same on every rank) and description.
    name: str
    desc: str
    #: Members (global ranks); ``membership`` says where they come from: ``dump``
    #: (``pg_config``), ``world`` (the default group), ``inferred`` (the ranks whose
    #: evidence names the group: gloo's dumps do not list a group's ranks).
    ranks: tuple[int, ...]
    membership: Literal["dump", "world", "inferred"]
    kind: Kind
    #: The sequence number where ranks diverge (the collective the waiters are in), its op,
    #: input sizes and dtypes (from a waiting rank's dump), and whether it is point-to-point.
    seq: int | None
    op: str | None
    p2p: bool = False
    sizes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    #: Entered it and wait / entered it and finished their part / entered it and failed.
    waiting: tuple[int, ...] = ()
    completed: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    #: What a failed rank's log says failed (gloo: ``Connection reset by peer``).
    failure: str | None = None
    #: Never entered it (their last is the one before) / further back: (rank, last enqueued).
    missing: tuple[int, ...] = ()
    behind: tuple[tuple[int, int], ...] = ()
    #: Members that had exited: (rank, exit code).
    exited: tuple[tuple[int, int], ...] = ()
    #: Members with no position in this group (no dump, or a dump without it).
    unknown: tuple[int, ...] = ()
    culprits: tuple[int, ...] = ()
    #: The signatures ranks disagree on, at ``diverged_at`` (the first such sequence number
    #: in the part of the ring buffers every rank still holds).
    mismatch: tuple[Variant, ...] = ()
    diverged_at: int | None = None
    positions: tuple[Position, ...] = ()
    notes: tuple[str, ...] = ()
    #: ``device``: what proves it (the peers' positions, the culprit's entry, its watchdog
    #: and device lines), and the culprits' first device line (``None``: none in the logs).
    evidence: tuple[str, ...] = ()
    device_line: str | None = None
    #: The ``device`` culprits this group waits on (directly or through a rank that does).
    waits_on: tuple[int, ...] = ()
    #: ``stuck`` (everyone waits): the waiters whose evidence sets them apart, with why.
    suspects: tuple[tuple[int, str], ...] = ()

    @property
    def label(self) -> str:
        """How the report names the group: ``default_pg, ranks 0-3``.

        >>> GroupIncident("2", "", (2, 3), "inferred", "missing", 3, "all_to_all").label
        'pg 2, ranks 2,3'
        """
        desc = self.desc if self.desc and self.desc != "undefined" else f"pg {self.name}"
        return f"{desc}, ranks {rank_list(self.ranks)}" if self.ranks else desc


@dataclass(frozen=True)
class CulpritFrame:
    """Where a culprit is: its main thread's top user frame (``stacks``: py-spy), or where it
    issued its last collective (``dump``: the recorder's stack trace of that entry)."""

    rank: int
    where: str
    source: Literal["stacks", "dump"]
    thread: str = ""
    owns_gil: bool = False
    #: The ``torch.distributed`` call the main thread is in (``None``: not in one).
    in_collective: str | None = None


@dataclass(frozen=True)
class EvidenceItem:
    """What the analysis had of one rank."""

    rank: int
    #: ``dump``, ``stacks``, ``logs`` (what it had), or ``none``.
    kinds: tuple[str, ...]
    host: str | None = None
    pid: int | None = None
    exited: int | None = None
    files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class HangReport:
    """Who hung and where: one incident across the ranks of a job.

    ``culprit_ranks`` are the ranks the others wait for and that wait for nobody themselves
    (``culprit_hosts`` their hosts, in the same order); ``op``, ``seq`` and ``process_group``
    name the collective of the group that shows it first; ``frames`` where each culprit is;
    ``groups`` every group where ranks diverge; ``summary`` says it in one line.

    Examples
    --------
    >>> report = HangReport(summary="no divergence", kind="none")
    >>> HangReport.from_dict(report.to_dict()) == report
    True
    """

    summary: str
    kind: Kind
    culprit_ranks: tuple[int, ...] = ()
    culprit_hosts: tuple[str | None, ...] = ()
    op: str | None = None
    seq: int | None = None
    process_group: str | None = None
    group_name: str | None = None
    group_ranks: tuple[int, ...] = ()
    frames: tuple[CulpritFrame, ...] = ()
    groups: tuple[GroupIncident, ...] = ()
    evidence: tuple[EvidenceItem, ...] = ()
    world_size: int | None = None
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (lists for tuples), with ``schema``.

        >>> HangReport(summary="s", kind="none", culprit_ranks=(2,)).to_dict()["culprit_ranks"]
        [2]
        """
        return {"schema": SCHEMA, **_plain(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HangReport:
        """The report :meth:`to_dict` wrote (keys it does not know are ignored).

        Raises
        ------
        ValueError
            A required field is missing or a value has the wrong type (the path names it).
        """
        return typing.cast(HangReport, _build(cls, data, "report"))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _build(tp: Any, value: Any, path: str) -> Any:
    """``value`` (JSON data) as type ``tp``: dataclasses, tuples, optionals, scalars."""
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ValueError(f"{path}: must be a mapping")
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = _build(hints[f.name], value[f.name], f"{path}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{path}.{f.name}: required")
        return tp(**kwargs)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _build(inner, value, path)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{path}: must be a list")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ValueError(f"{path}: must have {len(args)} items")
        return tuple(
            _build(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ValueError(f"{path}: must be one of {list(typing.get_args(tp))}")
        return value
    if tp is Any:
        return value
    if tp is bool or tp is str:
        if not isinstance(value, tp):
            raise ValueError(f"{path}: must be {tp.__name__}")
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{path}: must be a whole number")
        return value
    raise ValueError(f"{path}: cannot read a {tp}")
