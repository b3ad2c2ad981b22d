"""What one rank's flight-recorder dump says, per process group.

A dump lists entries (one per collective or point-to-point op the rank issued, the last
``TORCH_FR_BUFFER_SIZE`` of them), each naming its group as ``process_group = (name, desc)``,
and ``pg_status`` (last enqueued/started/completed collective per rank-local group id).
:func:`read_recorder` folds them into one :class:`GroupView` per group name: the last
collective the rank enqueued and completed, its entries by sequence number (to compare
ranks where their buffers overlap), its pending point-to-point ops.

What real dumps do that this copes with:

- gloo (torch 2.13) keys ``pg_config`` by ``''`` and writes ``ranks`` as the string
  ``"[0, 1]"`` (the last group registered wins), and its entries' ``state`` stays
  ``scheduled``: completion shows only in ``retired`` and in ``pg_status``.
- NCCL marks entries ``scheduled``/``started``/``completed`` and keys ``pg_config`` by name.
- ``pg_status`` is keyed by the rank-local group id (``pg_id``): the entries map it to a name.
- A wrapped buffer starts after sequence 1: positions come from ``pg_status``, comparisons
  only from the sequence numbers every rank still holds.
- JSON dumps write numbers in ``pg_status`` as strings, pickles as integers; JSON writes
  ``0`` for an unset time, pickles ``None``. NCCL's own pickles write most entry fields as
  strings too (``'31'``, ``'None'``, ``'False'``, ``"[[1024, 8]]"``, ``"['Float']"``): both
  spellings are read.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aorta.text import whole_number

from .model import MAX_RANK, UNNAMED_GROUP

__all__ = [
    "GroupView",
    "P2POp",
    "RankRecorder",
    "flag",
    "number",
    "op_name",
    "parse_ranks",
    "read_recorder",
    "scalar_text",
    "signature",
]

#: ``nccl:send 1->2`` and ``nccl:recv 3<-0``: a point-to-point op and its group-local peers.
_P2P = re.compile(r"(send|recv) (\d{1,9})(->|<-)(\d{1,9})\b")
#: The largest magnitude a dump's number may have (a signed 64-bit value, as torch writes):
#: a larger one is no number (``str`` of a 5,000-digit int raises, and none is real).
_MAX_INT = 2**63


def scalar_text(value: object, default: str = "") -> str:
    """A field that should be a string (or a number) as text; anything else — a container
    from a hostile dump, whose ``str`` could expand a shared structure — is ``default``.

    >>> scalar_text("nccl:send 0->1"), scalar_text(3), scalar_text([[1]] * 2, "?")
    ('nccl:send 0->1', '3', '?')
    >>> scalar_text(10**5000, "?")  # str() of it raises: an absurd number is no text
    '?'
    """
    if isinstance(value, str):
        return value
    if isinstance(value, float) or (_bounded(value) and not isinstance(value, bool)):
        return str(value)
    return default


def op_name(profiling_name: object) -> str:
    """The op of a ``profiling_name`` without its backend prefix or peers.

    >>> op_name("gloo:all_reduce"), op_name("nccl:send 0->1"), op_name("all_to_all")
    ('all_reduce', 'send', 'all_to_all')
    """
    text = scalar_text(profiling_name)
    return text.partition(":")[2].split(" ")[0] if ":" in text else text.split(" ")[0]


def parse_ranks(value: object) -> tuple[int, ...] | None:
    """``pg_config``'s ``ranks`` (a list, or the string ``"[0, 1]"`` gloo writes) as a tuple;
    ``None`` when it is empty or not a list of whole numbers from 0 to
    :data:`~aorta.hang.model.MAX_RANK` (a larger rank would size the report's list of ranks).

    >>> parse_ranks("[0, 1, 2]"), parse_ranks([3, 1]), parse_ranks("[]"), parse_ranks("x")
    ((0, 1, 2), (1, 3), None, None)
    >>> parse_ranks("[0, 1000000000]"), parse_ranks([0, 10**5000])
    (None, None)
    """
    if isinstance(value, str):
        text = value.strip()
        if not (text.startswith("[") and text.endswith("]")):
            return None
        parts = [p.strip() for p in text[1:-1].split(",") if p.strip()]
        if not all(_decimal(p) for p in parts):
            return None
        ranks = [int(p) for p in parts]
    elif isinstance(value, list | tuple):
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in value):
            return None
        ranks = list(value)
    else:
        return None
    if not all(0 <= r <= MAX_RANK for r in ranks):
        return None
    return tuple(sorted(set(ranks))) or None


@dataclass(frozen=True)
class P2POp:
    """A point-to-point op a rank had not completed: ``send``/``recv`` to or from a peer."""

    op: str
    seq: int
    #: Group-local ranks, as ``profiling_name`` gives them (``send 1->2``: 1 sends to 2).
    src: int
    dst: int
    sizes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]


@dataclass
class GroupView:
    """One process group as one rank's dump sees it."""

    name: str
    desc: str
    #: Global ranks from ``pg_config`` when it is keyed by this group's name.
    ranks: tuple[int, ...] | None = None
    #: Last collective sequence number enqueued / completed (0: none).
    enqueued: int = 0
    completed: int = 0
    #: ``pg_status``' last started collective (NCCL; -1: not given, as gloo writes it).
    started: int = -1
    #: The collective entries by sequence number (several for a coalesced op), and what
    #: must agree across ranks at each (:func:`signature`).
    ops: dict[int, list[Mapping[str, Any]]] = field(default_factory=dict)
    sigs: dict[int, tuple[tuple[str, Any, Any], ...]] = field(default_factory=dict)
    #: Point-to-point ops not completed.
    pending_p2p: list[P2POp] = field(default_factory=list)
    #: Rank-local group ids (``pg_id``) seen.
    pg_ids: set[str] = field(default_factory=set)

    @property
    def first(self) -> int | None:
        """The first sequence number still in the buffer (> 1 when it wrapped)."""
        return min(self.ops) if self.ops else None


@dataclass
class RankRecorder:
    """One rank's dump, by group name, with what could not be used."""

    groups: dict[str, GroupView]
    #: ``pg_status`` ids no entry names (their group is unknown).
    unnamed_status: dict[str, tuple[int, int]]
    #: ``pg_config`` by group name: (desc, global ranks); gloo's ``''`` key is not a name.
    config: dict[str, tuple[str, tuple[int, ...]]]
    #: Global ranks ``pg_config`` lists under ``''`` (gloo): which group they are is unknown.
    loose_ranks: tuple[int, ...]
    version: str
    notes: list[str]


def number(value: object) -> int | None:
    """A whole-number field as an ``int``, whether the dump wrote ``31`` or ``'31'``;
    ``None`` for ``'None'``, a bool, or a number too long to be one.

    >>> number(31), number("31"), number("-1"), number("None"), number(False), number("9" * 40)
    (31, 31, -1, None, None, None)
    """
    return _int(value)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if _bounded(value) else None
    if isinstance(value, str):
        return whole_number(value)
    return None


def _bounded(value: object) -> bool:
    """Whether ``value`` is an int a dump could mean (a pickle holds ints of any size)."""
    return isinstance(value, int) and -_MAX_INT <= value < _MAX_INT


def _decimal(text: str) -> bool:
    """Whether ``int(text)`` reads ``text``: decimal digits only (``str.isdigit`` also passes
    superscripts such as ``'²'``, which ``int`` refuses) and not so many that ``int`` refuses
    them (Python's 4,300-digit limit) — a hostile dump's field must not end in a traceback."""
    return text.isdecimal() and len(text) <= 18


def _done(entry: Mapping[str, Any]) -> bool:
    # gloo never leaves "scheduled"; a retired entry finished (or failed) either way. NCCL's
    # pickles write the flag as the string "True".
    if entry.get("state") == "completed":
        return True
    retired = entry.get("retired")
    return retired is True or (type(retired) is str and retired == "True")


def flag(value: object) -> bool:
    """A dump's boolean field, as ``True`` or as the string NCCL's pickles write.

    >>> flag(True), flag("True"), flag("False"), flag(None), flag(1)
    (True, True, False, False, False)
    """
    return value is True or value == "True"


#: A list of sizes as NCCL's pickles write it: ``"[[1024, 8], [4]]"`` (longer is not read).
_MAX_SIZES_TEXT = 4096
_SIZE_LIST = re.compile(r"\[([0-9,\s]*)\]")
_QUOTED = re.compile(r"'([^']{0,64})'|\"([^\"]{0,64})\"")


@functools.lru_cache(maxsize=512)
def _sizes_text(text: str) -> tuple[tuple[int, ...], ...]:
    inner = text.strip()
    if len(inner) > _MAX_SIZES_TEXT or not (inner.startswith("[") and inner.endswith("]")):
        return ()
    out = []
    for m in _SIZE_LIST.finditer(inner[1:-1]):
        parts = [p.strip() for p in m.group(1).split(",") if p.strip()]
        out.append(tuple(int(p) for p in parts if _decimal(p)))
    return tuple(out)


@functools.lru_cache(maxsize=512)
def _dtypes_text(text: str) -> tuple[str, ...]:
    if len(text) > _MAX_SIZES_TEXT:
        return ()
    return tuple(a or b for a, b in _QUOTED.findall(text))


def _sizes(value: object) -> tuple[tuple[int, ...], ...]:
    if type(value) is str:
        return _sizes_text(value)
    if type(value) not in (list, tuple):
        return ()
    out = []
    for s in value:  # type: ignore[attr-defined]
        if type(s) in (list, tuple):
            dims = tuple(s)
            # The usual case in one pass; a container (or an absurd int) is left out.
            if not all(type(d) is int and -_MAX_INT <= d < _MAX_INT for d in dims):
                dims = tuple(d for d in dims if type(d) is int and -_MAX_INT <= d < _MAX_INT)
            out.append(dims)
    return tuple(out)


def _dtypes(value: object) -> tuple[str, ...]:
    if type(value) is str:
        return _dtypes_text(value)
    if not isinstance(value, list | tuple):
        return ()
    return tuple(d for d in value if isinstance(d, str))


def _group_of(entry: Mapping[str, Any]) -> tuple[str, str]:
    pg = entry.get("process_group")
    if isinstance(pg, list | tuple) and len(pg) == 2:
        return scalar_text(pg[0], UNNAMED_GROUP), scalar_text(pg[1])
    return scalar_text(entry.get("pg_id"), UNNAMED_GROUP), ""


def read_recorder(fr: Mapping[str, Any]) -> RankRecorder:
    """Fold one dump into :class:`GroupView`\\ s by group name.

    Entries that lack a sequence number are left out (counted in ``notes``).

    >>> dump = {"pg_config": {"": {"ranks": "[0, 1]"}}, "pg_status": {"0": {
    ...     "last_enqueued_collective": "2", "last_completed_collective": "1"}},
    ...     "entries": [{"pg_id": 0, "process_group": ["0", "default_pg"],
    ...     "collective_seq_id": s, "profiling_name": "gloo:all_reduce", "state": "scheduled",
    ...     "retired": s == 1, "is_p2p": False} for s in (1, 2)]}
    >>> view = read_recorder(dump).groups["0"]
    >>> view.desc, view.enqueued, view.completed, sorted(view.ops)
    ('default_pg', 2, 1, [1, 2])
    """
    groups: dict[str, GroupView] = {}
    notes: list[str] = []
    pg_names: dict[str, str] = {}
    ops: dict[str, str] = {}  # profiling_name → op
    seen: set[tuple[int | str, str]] = set()  # (pg_id, name) pairs taken
    bad = 0
    entries = fr.get("entries") or ()
    # Thousands of entries: the common forms take the short paths (a few names, ids, ops).
    for entry in entries if isinstance(entries, list | tuple) else ():
        seq = entry.get("collective_seq_id")
        if (type(seq) is not int or not -_MAX_INT <= seq < _MAX_INT) and (seq := _int(seq)) is None:
            bad += 1
            continue
        pg = entry.get("process_group")
        if type(pg) in (list, tuple) and len(pg) == 2 and type(pg[0]) is str and type(pg[1]) is str:
            name, desc = pg
        else:
            name, desc = _group_of(entry)
        view = groups.get(name)
        if view is None:
            view = groups[name] = GroupView(name=name, desc=desc)
        pg_id = entry.get("pg_id")
        if (type(pg_id) is str or _bounded(pg_id)) and (pg_id, name) not in seen:
            seen.add((pg_id, name))
            pg_names[str(pg_id)] = name
            view.pg_ids.add(str(pg_id))
        p2p = entry.get("is_p2p")
        if p2p is True or (type(p2p) is str and p2p == "True"):  # flag(), inline: per entry
            if not _done(entry):
                _add_p2p(view, entry)
            continue
        view.ops.setdefault(seq, []).append(entry)
        name_text = entry.get("profiling_name")
        op = ops.get(name_text, "") if type(name_text) is str else ""
        if type(name_text) is str and name_text not in ops:
            op = ops[name_text] = op_name(name_text)
        sig = (op, _sizes(entry.get("input_sizes")), _dtypes(entry.get("input_dtypes")))
        view.sigs[seq] = (*view.sigs[seq], sig) if seq in view.sigs else (sig,)
        if seq > view.enqueued:
            view.enqueued = seq
        if seq > view.completed and _done(entry):
            view.completed = seq
    if bad:
        notes.append(f"{bad} entries without a collective_seq_id left out")
    unnamed = _apply_status(fr.get("pg_status"), groups, pg_names)
    config, loose = _read_config(fr.get("pg_config"))
    for name, (desc, ranks) in config.items():
        if name in groups:
            groups[name].ranks = ranks
            groups[name].desc = groups[name].desc or desc
    return RankRecorder(
        groups=groups,
        unnamed_status=unnamed,
        config=config,
        loose_ranks=loose,
        version=scalar_text(fr.get("version")),
        notes=notes,
    )


def _add_p2p(view: GroupView, entry: Mapping[str, Any]) -> None:
    text = scalar_text(entry.get("profiling_name"))
    m = _P2P.search(text)
    if m is None:
        return
    op, a, arrow, b = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
    src, dst = (a, b) if arrow == "->" else (b, a)
    seq = _int(entry.get("p2p_seq_id")) or 0
    sizes, dtypes = _sizes(entry.get("input_sizes")), _dtypes(entry.get("input_dtypes"))
    view.pending_p2p.append(P2POp(op, seq, src, dst, sizes, dtypes))


def _apply_status(
    status: object, groups: dict[str, GroupView], pg_names: Mapping[str, str]
) -> dict[str, tuple[int, int]]:
    """Take the positions ``pg_status`` gives (they outlive a wrapped buffer)."""
    unnamed: dict[str, tuple[int, int]] = {}
    if not isinstance(status, Mapping):
        return unnamed
    for pg_id, fields in status.items():
        if not isinstance(fields, Mapping):
            continue
        enq = _int(fields.get("last_enqueued_collective"))
        done = _int(fields.get("last_completed_collective"))
        if enq is None or done is None:
            continue
        name = pg_names.get(scalar_text(pg_id, "?"))
        if name is None:
            if enq > 0:
                unnamed[scalar_text(pg_id, "?")] = (enq, max(done, 0))
            continue
        view = groups[name]
        view.enqueued = max(view.enqueued, enq)
        view.completed = max(view.completed, done)
        started = _int(fields.get("last_started_collective"))
        if started is not None:
            view.started = max(view.started, started)
    return unnamed


def _read_config(
    config: object,
) -> tuple[dict[str, tuple[str, tuple[int, ...]]], tuple[int, ...]]:
    named: dict[str, tuple[str, tuple[int, ...]]] = {}
    loose: set[int] = set()
    if not isinstance(config, Mapping):
        return named, ()
    for key, info in config.items():
        if not isinstance(info, Mapping):
            continue
        ranks = parse_ranks(info.get("ranks"))
        if ranks is None:
            continue
        if not isinstance(key, str):
            continue
        if key == "":
            loose.update(ranks)
        else:
            named[key] = (scalar_text(info.get("desc")), ranks)
    return named, tuple(sorted(loose))


def signature(entries: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, Any, Any], ...]:
    """What must agree across ranks at one sequence number: ops, input sizes and dtypes.

    >>> signature([{"profiling_name": "gloo:all_reduce", "input_sizes": [[4]],
    ...             "input_dtypes": ["Float"]}])
    (('all_reduce', ((4,),), ('Float',)),)
    """
    return tuple(
        (
            op_name(e.get("profiling_name")),
            _sizes(e.get("input_sizes")),
            _dtypes(e.get("input_dtypes")),
        )
        for e in entries
    )
