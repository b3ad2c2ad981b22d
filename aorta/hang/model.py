"""The hang analysis' input and answer: :class:`RankEvidence` in, :class:`HangReport` out.

Both are frozen pydantic dataclasses of plain values (tuples, strings, numbers): a report
compares by value, hashes, and goes to JSON and back unchanged (:meth:`HangReport.to_dict` /
:meth:`HangReport.from_dict`), validated on the way in. They are *the* shape of a hang's
evidence from the capture to the page: a trial record's ``forensics`` is a
:class:`HangReport` (``aorta.store.record``), the Dataset's ``hang_*`` variables are its
fields, and the renderers read its attributes.

Why dataclasses and not ``BaseModel``: the analysis builds these by position in its hot
loop and derives one from another with :func:`dataclasses.replace` (which validates again);
pydantic's dataclasses keep both, with the same validation, JSON schema and
``ConfigDict(extra="ignore")`` (a field a later aorta adds is read past, not refused).
Scalars are strict (``"5"`` is no rank, ``true`` no count): the values come from untrusted
files, and a lax reading would let a hand edit pass as evidence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Strict, TypeAdapter, ValidationError, field_validator
from pydantic.dataclasses import dataclass

from aorta.errors import invalid, validation_problems

__all__ = [
    "MAX_RANK",
    "NODE_FILE",
    "SCHEMA",
    "UNNAMED_GROUP",
    "CulpritFrame",
    "EvidenceItem",
    "ForensicsError",
    "GroupIncident",
    "HangReport",
    "Kind",
    "NodeEvidence",
    "Position",
    "RankEvidence",
    "Variant",
    "describe_group",
    "is_evidence_rank_dir",
    "rank_list",
]

#: Version of :meth:`HangReport.to_dict`'s layout (a record written by a later one says so).
SCHEMA = 1

#: The highest rank the analysis takes (jobs of up to 131,072 ranks). Every rank is a number
#: read from untrusted input (a file's name, a dump's ``pg_config``, a log's ``[rankN]:``) and
#: the report lists each rank up to the highest, so a larger one is no rank: a file named
#: ``rank1000000000.log`` must not size a list of a billion.
MAX_RANK = 2**17 - 1


# Strict scalars: a number is no text and a flag no number (see the module's docstring).
Int = Annotated[int, Strict()]
Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]

_CONFIG = ConfigDict(extra="ignore")

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


#: The name of a group no evidence names: an incident's matched by the ranks' stacks alone
#: (no dump gave a position), or a dump entry's without a group id. No output names it.
UNNAMED_GROUP = "?"


def describe_group(desc: str | None, name: str | None, ranks: Sequence[int] = ()) -> str:
    """How every output names a process group: its description (torch's ``desc``; ``pg
    <name>`` when it has none, or says ``undefined``), then its members when they are known.
    The one writer of that phrase, so the hang's summary, its table, the cell's line in
    matrix.md/json, ``aorta compare`` and report.html name one group one way.

    >>> describe_group("default_pg", "0", (0, 1, 2, 3)), describe_group("", "2", (2, 3))
    ('default_pg, ranks 0-3', 'pg 2, ranks 2,3')
    >>> describe_group("undefined", "5")
    'pg 5'
    """
    text = desc if desc and desc != "undefined" else f"pg {name}"
    return f"{text}, ranks {rank_list(ranks)}" if ranks else text


#: A node's GPU evidence file, ``gpu_<host>.txt`` (its host the group): the one pattern the
#: hang loader and the bundle read it by. The name is written by
#: ``aorta.store.rundir.gpu_evidence_name`` (store names files); the pattern lives here
#: because ``hang`` is the lower stage of the two readers and may not import ``store``
#: (docs/architecture.md); ``rundir`` exports it beside the name and a doctest there holds
#: the two together.
#:
#: >>> NODE_FILE.fullmatch("gpu_gpu-r3.cluster.local.txt").group(1)
#: 'gpu-r3.cluster.local'
NODE_FILE = re.compile(r"gpu_(.+)\.txt")


def is_evidence_rank_dir(name: str) -> bool:
    """Whether ``name`` is a rank's own subfolder of a trial's ``hang/`` folder (``rank3``:
    the name ``aorta.store.rundir.evidence_rank_dir`` writes): ``rank`` and ASCII digits,
    nothing else (``rank٣`` is no rank's, whatever a regex's ``\\d`` would say).

    The one rule the hang loader and the run directory's readers (the stacks of an old
    record, the bundle) share: here, as :data:`NODE_FILE`, because ``hang`` is the lower
    stage and may not import ``store``; ``rundir`` exports it beside the name it writes. The
    name says nothing of the entry: a caller still takes only a real folder, never a link.

    >>> [is_evidence_rank_dir(n) for n in ("rank12", "rank", "x3", "rank3.bak", "rank٣")]
    [True, False, False, False, False]
    """
    digits = name[4:]
    return name.startswith("rank") and digits.isascii() and digits.isdigit()


@dataclass(frozen=True, config=_CONFIG)
class NodeEvidence:
    """What one node's GPU tools and kernel log said at the capture (``gpu_<host>.txt``).

    A node's lines are no rank's: an Xid names a PCI bus, not a rank, and a host named
    ``gpu-r3`` holds no rank 3. So they are kept per host, beside the ranks' evidence, and
    the analysis never makes a culprit of them (it may cite them for a culprit on that very
    host whose own logs say nothing).

    Examples
    --------
    >>> NodeEvidence("gpu-r3", "hang/rank0/gpu_gpu-r3.txt", ("NVRM: Xid (PCI:0000:3b:00): 79",)).host
    'gpu-r3'
    """

    host: Str
    #: The file the lines were read from (relative to the trial folder, or as given;
    #: ``""``: the capture could not write it).
    file: Str
    #: Its last device lines (``aorta.hang.device.node_lines``), oldest first; ``()``: none.
    device_lines: tuple[Str, ...] = ()


@dataclass(frozen=True, config=_CONFIG)
class RankEvidence:
    """What was taken from one rank before the kill (or brought by a user).

    Examples
    --------
    >>> RankEvidence(rank=2, host="gpu-r3", notes=("py-spy: ptrace not permitted",)).rank
    2
    """

    #: Global rank.
    rank: Int
    host: Str | None = None
    pid: Int | None = None
    #: One flight-recorder dump, parsed (the dict as torch writes it; see ``parse_dump``).
    fr: Mapping[str, Any] | None = None
    #: ``py-spy dump --json`` output (a list of threads).
    stacks: Sequence[Mapping[str, Any]] | None = None
    #: The last lines of the rank's stdout/stderr (watchdog lines among them).
    log_lines: Sequence[Str] = ()
    #: What could not be taken and why ("py-spy: ptrace not permitted", "no dump within 5 s").
    notes: Sequence[Str] = ()
    #: The process had already exited before the capture: its exit code (or -signal).
    exited: Int | None = None
    #: The evidence files (relative to the trial folder), for the record.
    files: Sequence[Str] = ()
    #: The one of ``files`` that ``stacks`` were read from (a culprit's frame names it).
    stacks_file: Str | None = None
    #: The node evidence the capture took on this rank's host (its node's first rank takes
    #: it), carried along to the analysis, which puts it in :attr:`HangReport.nodes` and never
    #: among this rank's lines.
    node: NodeEvidence | None = None

    @field_validator("rank")
    @classmethod
    def _rank(cls, rank: int) -> int:
        """Refuse a rank no job has (see :data:`MAX_RANK`).

        >>> RankEvidence(rank=MAX_RANK + 1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for RankEvidence
        rank
          rank 131072: must be a whole number from 0 to 131071 ...
        """
        if not 0 <= rank <= MAX_RANK:
            shown = f"{rank}" if rank.bit_length() < 64 else "?"
            raise invalid("rank", f"rank {shown}: must be a whole number from 0 to {MAX_RANK}")
        return rank


@dataclass(frozen=True, config=_CONFIG)
class Position:
    """A rank's place in one group: last collective enqueued and completed, and where from
    (``dump``: the flight recorder; ``log``: watchdog lines)."""

    rank: Int
    enqueued: Int
    completed: Int
    source: Literal["dump", "log"]


@dataclass(frozen=True, config=_CONFIG)
class Variant:
    """One of the signatures ranks disagree on at a sequence number."""

    ranks: tuple[Int, ...]
    op: Str
    sizes: tuple[tuple[Int, ...], ...]
    dtypes: tuple[Str, ...]


@dataclass(frozen=True, config=_CONFIG)
class GroupIncident:
    """One process group (by membership) where the ranks diverge."""

    #: The group's name (``PG GUID``, the same on every rank) and description.
    name: Str
    desc: Str
    #: Members (global ranks); ``membership`` says where they come from: ``dump``
    #: (``pg_config``), ``world`` (the default group), ``inferred`` (the ranks whose
    #: evidence names the group: gloo's dumps do not list a group's ranks).
    ranks: tuple[Int, ...]
    membership: Literal["dump", "world", "inferred"]
    kind: Kind
    #: The sequence number where ranks diverge (the collective the waiters are in), its op,
    #: input sizes and dtypes (from a waiting rank's dump), and whether it is point-to-point.
    seq: Int | None
    op: Str | None
    p2p: Bool = False
    sizes: tuple[tuple[Int, ...], ...] = ()
    dtypes: tuple[Str, ...] = ()
    #: Entered it and wait / entered it and finished their part / entered it and failed.
    waiting: tuple[Int, ...] = ()
    completed: tuple[Int, ...] = ()
    failed: tuple[Int, ...] = ()
    #: What a failed rank's log says failed (gloo: ``Connection reset by peer``).
    failure: Str | None = None
    #: Never entered it (their last is the one before) / further back: (rank, last enqueued).
    missing: tuple[Int, ...] = ()
    behind: tuple[tuple[Int, Int], ...] = ()
    #: Members that had exited: (rank, exit code).
    exited: tuple[tuple[Int, Int], ...] = ()
    #: Members with no position in this group (no dump, or a dump without it).
    unknown: tuple[Int, ...] = ()
    culprits: tuple[Int, ...] = ()
    #: The signatures ranks disagree on, at ``diverged_at`` (the first such sequence number
    #: in the part of the ring buffers every rank still holds).
    mismatch: tuple[Variant, ...] = ()
    diverged_at: Int | None = None
    positions: tuple[Position, ...] = ()
    notes: tuple[Str, ...] = ()
    #: ``device``: what proves it (the peers' positions, the culprit's entry, its watchdog
    #: and device lines), and the culprits' first device line (``None``: none in the logs).
    evidence: tuple[Str, ...] = ()
    device_line: Str | None = None
    #: The ``device`` culprits this group waits on (directly or through a rank that does).
    waits_on: tuple[Int, ...] = ()
    #: ``stuck`` (everyone waits): the waiters whose evidence sets them apart, with why.
    suspects: tuple[tuple[Int, Str], ...] = ()

    @property
    def label(self) -> str:
        """How the report names the group: ``default_pg, ranks 0-3`` (:func:`describe_group`).

        >>> GroupIncident("2", "", (2, 3), "inferred", "missing", 3, "all_to_all").label
        'pg 2, ranks 2,3'
        """
        return describe_group(self.desc, self.name, self.ranks)


@dataclass(frozen=True, config=_CONFIG)
class CulpritFrame:
    """Where a culprit is: its main thread's top user frame (``stacks``: py-spy), or where it
    issued its last collective (``dump``: the recorder's stack trace of that entry)."""

    rank: Int
    where: Str
    source: Literal["stacks", "dump"]
    thread: Str = ""
    owns_gil: Bool = False
    #: The ``torch.distributed`` call the main thread is in (``None``: not in one).
    in_collective: Str | None = None
    #: ``stacks``: the main thread's frames, innermost first (``file:line in function``, at
    #: most 40: ``aorta.hang.stacks.stack_lines``), and the stacks file they were read from, relative to the
    #: trial folder (``None``: not known): what a page shows of the culprit, so that no
    #: renderer opens the raw evidence again. Empty in reports written before aorta kept them.
    stack: tuple[Str, ...] = ()
    stack_file: Str | None = None


@dataclass(frozen=True, config=_CONFIG)
class EvidenceItem:
    """What the analysis had of one rank."""

    rank: Int
    #: ``dump``, ``stacks``, ``logs`` (what it had), or ``none``.
    kinds: tuple[Str, ...]
    host: Str | None = None
    pid: Int | None = None
    exited: Int | None = None
    files: tuple[Str, ...] = ()
    notes: tuple[Str, ...] = ()


@dataclass(frozen=True, config=_CONFIG)
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

    summary: Str
    kind: Kind
    culprit_ranks: tuple[Int, ...] = ()
    culprit_hosts: tuple[Str | None, ...] = ()
    op: Str | None = None
    seq: Int | None = None
    process_group: Str | None = None
    group_name: Str | None = None
    group_ranks: tuple[Int, ...] = ()
    frames: tuple[CulpritFrame, ...] = ()
    groups: tuple[GroupIncident, ...] = ()
    evidence: tuple[EvidenceItem, ...] = ()
    world_size: Int | None = None
    notes: tuple[Str, ...] = field(default=())
    #: Each node's GPU evidence, by host (empty in reports written before aorta kept it).
    nodes: tuple[NodeEvidence, ...] = ()

    @property
    def group_label(self) -> str | None:
        """How every output names the incident's process group (:func:`describe_group`):
        ``default_pg, ranks 0-3`` as the summary says it; ``None`` when no evidence names one.
        A report written before ``group_ranks`` was kept says what its ``process_group`` says.

        >>> HangReport(summary="s", kind="missing", process_group="default_pg", group_name="0",
        ...            group_ranks=(0, 1, 2, 3)).group_label
        'default_pg, ranks 0-3'
        """
        # No group to name: none diverged, or the ranks were matched by their stacks alone
        # (the summary names none either).
        if self.group_name == UNNAMED_GROUP or (not self.process_group and not self.group_name):
            return None
        return describe_group(self.process_group, self.group_name, self.group_ranks)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (lists for tuples), with ``schema``.

        >>> HangReport(summary="s", kind="none", culprit_ranks=(2,)).to_dict()["culprit_ranks"]
        [2]
        """
        return {"schema": SCHEMA, **_REPORT.dump_python(self, mode="json")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HangReport:
        """The report :meth:`to_dict` wrote (keys it does not know are ignored).

        >>> HangReport.from_dict({"summary": "s", "kind": "none", "culprit_ranks": 5})
        Traceback (most recent call last):
        ...
        aorta.hang.model.ForensicsError: report.culprit_ranks: must be a list, got integer 5

        Raises
        ------
        ForensicsError
            A required field is missing or a value has the wrong type (the path names it).
        """
        try:
            return _REPORT.validate_python(data)
        except ValidationError as exc:
            raise ForensicsError.of(exc) from None


class ForensicsError(ValueError):
    """A hang report that does not read as a :class:`HangReport`: each problem with its path
    (``report.culprit_ranks: must be a list, got integer 5``), the first one first.

    >>> try:
    ...     HangReport.from_dict({"summary": 7})
    ... except ForensicsError as exc:
    ...     exc.problems
    ('report.summary: must be a string, got integer 7', 'report.kind: required key is missing')
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))

    @classmethod
    def of(cls, exc: ValidationError) -> ForensicsError:
        """The problems of pydantic's ``exc`` in the words of aorta's other readers."""
        return cls([str(p) for p in validation_problems(exc, at="report")])


_REPORT: TypeAdapter[HangReport] = TypeAdapter(HangReport)
