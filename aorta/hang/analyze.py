"""One incident's evidence, matched across ranks: who the others wait for, and where.

Per process group (by its name, which every rank shares, and its members), each rank's
position is its last enqueued and last completed collective — from its flight-recorder dump
(``pg_status`` and the entries), else from its watchdog lines. The collective the group
diverges at is the earliest one some rank waits in (enqueued, not completed); then every
member either entered it (``waiting``, or ``completed``/``failed`` its part), stopped one
short (``missing``), is further back (``behind``), had exited, or left no position
(``unknown``). Where ranks still hold the same sequence numbers in their ring buffers, their
ops, sizes and dtypes must agree; the first that do not is a ``mismatch``.

Culprits of a group, in order: the minority of a mismatch (when no rank is missing, or the
mismatch came earlier); the missing and behind ranks — unless they are the idle majority
while a minority ran ahead into a collective they never issue (``extra``: the minority is
the culprit); exited ranks; ranks without a dump that are not in a collective by their stack
(``gil`` when they hold the GIL). Across groups, a culprit that itself waits in another
group, as a victim there, is explained by it: the incident's culprits are the ranks the
others wait for that wait for nobody; the group that shows them first is the one with the
fewest members.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from . import render
from .device import Seen, device_faults, device_lines
from .dumps import paused_gc
from .model import (
    MAX_RANK,
    UNNAMED_GROUP,
    CulpritFrame,
    EvidenceItem,
    GroupIncident,
    HangReport,
    Kind,
    NodeEvidence,
    Position,
    RankEvidence,
    Variant,
    describe_group,
    rank_list,
)
from .recorder import GroupView, RankRecorder, read_recorder, scalar_text
from .stacks import Frame, frame_text, position, read_stacks, user_frame
from .stacks import Position as StackPosition
from .watchdog import Signal, read_log

__all__ = ["analyze"]

#: The default group's name on every backend (``init_process_group``'s group).
DEFAULT_NAME = "0"


@dataclass
class _Rank:
    """One rank's evidence, read."""

    rank: int
    host: str | None
    pid: int | None
    exited: int | None
    files: tuple[str, ...]
    notes: list[str]
    kinds: tuple[str, ...]
    recorder: RankRecorder | None
    stack: StackPosition | None
    stack_file: str | None  # the file its stacks came from, when the evidence says
    signals: list[Signal]
    failed: str | None  # what its logs say failed (gloo), if anything
    device: tuple[str, ...] = ()  # its device lines (device.device_lines)


@dataclass
class _Group:
    name: str
    desc: str = ""
    views: dict[int, GroupView] = field(default_factory=dict)
    logged: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank → (enq, done)
    timeout_op: str | None = None
    config: dict[tuple[int, ...], int] = field(default_factory=dict)  # ranks → how many say so


def _merge(evidence: Sequence[RankEvidence]) -> dict[int, _Rank]:
    by_rank: dict[int, list[RankEvidence]] = {}
    for item in evidence:
        by_rank.setdefault(int(item.rank), []).append(item)
    out = {}
    for rank in sorted(by_rank):
        # Several items for one rank (a dump file, a stacks file, a log): the order they came
        # in must not matter, so they are combined in an order of their own.
        items = sorted(by_rank[rank], key=lambda e: (tuple(e.files), e.host or "", e.pid or 0))
        out[rank] = _read_rank(rank, items)
    return out


def _first(items: Iterable[Any]) -> Any:
    return next((i for i in items if i is not None), None)


def _read_rank(rank: int, items: Sequence[RankEvidence]) -> _Rank:
    notes = [n for item in items for n in item.notes]
    dumps = [item.fr for item in items if item.fr is not None]
    if len(dumps) > 1:
        notes.append(f"{len(dumps)} dumps given; the one with the most entries was used")
        dumps.sort(key=lambda d: -len(d.get("entries") or ()))
    recorder = read_recorder(dumps[0]) if dumps else None
    if recorder is not None:
        notes.extend(recorder.notes)
    threads = [t for item in items for t in read_stacks(item.stacks)]
    pid = _first(item.pid for item in items)
    lines = [line for item in items for line in item.log_lines]
    signals = read_log(lines)
    # The first failure is the cause; the later ones (a timeout after a reset) follow from it.
    failed = next((s.text for s in signals if s.kind == "failed"), None)
    kinds = tuple(
        k for k, have in (("dump", recorder), ("stacks", threads), ("logs", lines)) if have
    ) or ("none",)
    return _Rank(
        rank=rank,
        host=_first(item.host for item in items),
        pid=pid,
        exited=_first(item.exited for item in items),
        files=tuple(sorted({f for item in items for f in item.files})),
        notes=notes,
        kinds=kinds,
        recorder=recorder,
        stack=position(threads, pid=pid) if threads else None,
        stack_file=_first(item.stacks_file for item in items if item.stacks),
        signals=signals,
        failed=failed,
        device=device_lines(lines),
    )


def _world(ranks: Mapping[int, _Rank], world_size: int | None) -> int:
    """``world_size``, or more where the evidence names more ranks: one aorta rank may launch
    a whole job (a command workload running torchrun), and a world smaller than its ranks
    would leave those past it out of the default group, a culprit among them hidden."""
    top = max(ranks, default=-1)
    for r in ranks.values():
        if r.recorder is not None:
            listed = [
                *r.recorder.loose_ranks,
                *(x for _, rs in r.recorder.config.values() for x in rs),
            ]
            top = max(top, *listed, -1)
    return max(world_size or 0, top + 1)


def _groups(ranks: Mapping[int, _Rank]) -> dict[str, _Group]:
    groups: dict[str, _Group] = {}
    for rank, r in ranks.items():
        if r.recorder is not None:
            for name, view in r.recorder.groups.items():
                g = groups.setdefault(name, _Group(name))
                g.views[rank] = view
                g.desc = g.desc or (view.desc if view.desc != "undefined" else "")
            for name, (desc, members) in r.recorder.config.items():
                g = groups.setdefault(name, _Group(name))
                g.config[members] = g.config.get(members, 0) + 1
                g.desc = g.desc or desc
        for s in r.signals:
            if s.kind == "failed":
                continue
            g = groups.setdefault(s.group or DEFAULT_NAME, _Group(s.group or DEFAULT_NAME))
            g.desc = g.desc or (s.desc or "")
            enq, done = g.logged.get(rank, (-1, -1))
            if s.kind == "timeout" and s.seq is not None:
                enq, done = max(enq, s.seq), s.seq - 1
                g.timeout_op = g.timeout_op or s.op
            elif s.enqueued is not None and s.completed is not None:
                enq, done = s.enqueued, s.completed
            g.logged[rank] = (enq, done)
    return groups


def _members(g: _Group, world: int) -> tuple[tuple[int, ...], Any]:
    if g.name == DEFAULT_NAME or g.desc == "default_pg":
        return tuple(range(world)), "world"
    if g.config:
        best = max(g.config.items(), key=lambda kv: (kv[1], [-x for x in kv[0]]))[0]
        return best, "dump"
    return tuple(sorted({*g.views, *g.logged})), "inferred"


def _positions(g: _Group, members: Sequence[int], ranks: Mapping[int, _Rank]) -> list[Position]:
    out = []
    for rank in members:
        view, logged = g.views.get(rank), g.logged.get(rank)
        r = ranks.get(rank)
        if view is not None:
            enq, done = view.enqueued, view.completed
            if logged is not None:
                enq, done = max(enq, logged[0]), max(done, logged[1])
            out.append(Position(rank, enq, done, "dump"))
        elif logged is not None:
            out.append(Position(rank, max(logged[0], 0), max(logged[1], 0), "log"))
        elif r is not None and r.recorder is not None and not r.recorder.unnamed_status:
            # Its dump holds no entry of this group and no status of an unnamed one: the
            # rank never issued a collective in it.
            out.append(Position(rank, 0, 0, "dump"))
    return out


def _divergence(positions: Sequence[Position], unknown: bool) -> int | None:
    """The sequence number where the group diverges: the earliest one a rank waits in; else
    the earliest one a rank lacks; else, with members of unknown position, the last one."""
    if not positions:
        return None
    top = max(p.enqueued for p in positions)
    pending = [p.completed + 1 for p in positions if p.enqueued > p.completed]
    if pending:
        return min(pending)
    lagging = [p.enqueued + 1 for p in positions if p.enqueued < top]
    if lagging:
        return min(lagging)
    return top if unknown and top > 0 else None


def _first_mismatch(g: _Group, upto: int | None) -> tuple[int, tuple[Variant, ...]] | None:
    """The first sequence number (up to ``upto``) where two ranks' entries disagree."""
    views = sorted(g.views.items())
    if len(views) < 2:
        return None
    seqs = sorted({s for _, v in views for s in v.sigs if upto is None or s <= upto})
    for seq in seqs:
        held = [(rank, v.sigs[seq]) for rank, v in views if seq in v.sigs]
        ref = held[0][1]
        if all(sig == ref for _, sig in held[1:]):
            continue
        by_sig: dict[Any, list[int]] = {}
        for rank, sig in held:
            by_sig.setdefault(sig, []).append(rank)
        variants = [
            Variant(tuple(rs), "+".join(op for op, _, _ in sig), _join(sig, 1), _join(sig, 2))
            for sig, rs in by_sig.items()
        ]
        # Most ranks first; a tie goes to the variant of the lowest rank.
        variants.sort(key=lambda v: (-len(v.ranks), v.ranks))
        return seq, tuple(variants)
    return None


def _join(sig: Sequence[tuple[str, Any, Any]], i: int) -> Any:
    return tuple(x for part in sig for x in part[i])


def _collective_at(g: _Group, seq: int, order: Sequence[int]) -> tuple[str | None, Any, Any]:
    for rank in order:
        view = g.views.get(rank)
        if view is not None and seq in view.sigs:
            return view.sigs[seq][0]
    return g.timeout_op, (), ()


def _incident(g: _Group, ranks: Mapping[int, _Rank], world: int) -> GroupIncident | None:
    """A group's positions and classes at its divergence (culprits come later)."""
    members, membership = _members(g, world)
    positions = _positions(g, members, ranks)
    known = {p.rank: p for p in positions}
    unknown_members = [r for r in members if r not in known]
    seq = _divergence(positions, bool(unknown_members))
    found = _first_mismatch(g, seq)
    p2p = _p2p(g, members, ranks)
    if seq is None and found is None:
        return p2p
    if seq is None and found is not None:
        seq = found[0]
    assert seq is not None
    waiting, completed, failed, missing, behind, exited, unknown = [], [], [], [], [], [], []
    for rank in members:
        p, r = known.get(rank), ranks.get(rank)
        if p is None:
            if r is not None and r.exited is not None:
                exited.append((rank, r.exited))
            else:
                unknown.append(rank)
        elif p.enqueued >= seq:
            if p.completed < seq:
                waiting.append(rank)
            elif r is not None and r.failed:
                failed.append(rank)
            else:
                completed.append(rank)
        elif p.enqueued == seq - 1:
            missing.append(rank)
        else:
            behind.append((rank, p.enqueued))
    op, sizes, dtypes = _collective_at(g, seq, [*waiting, *completed, *failed])
    failure = next((ranks[r].failed for r in failed if ranks[r].failed), None)
    return GroupIncident(
        name=g.name,
        desc=g.desc,
        ranks=tuple(members),
        membership=membership,
        kind="none",
        seq=seq,
        op=op,
        sizes=sizes,
        dtypes=dtypes,
        waiting=tuple(waiting),
        completed=tuple(completed),
        failed=tuple(failed),
        failure=failure,
        missing=tuple(missing),
        behind=tuple(behind),
        exited=tuple(exited),
        unknown=tuple(unknown),
        mismatch=found[1] if found else (),
        diverged_at=found[0] if found else None,
        positions=tuple(positions),
        notes=tuple(_group_notes(g, membership, members)),
    )


def _group_notes(g: _Group, membership: str, members: Sequence[int]) -> list[str]:
    notes = []
    # The group's name without its members: these notes say which members, and how known.
    label = describe_group(g.desc, g.name)
    if membership == "inferred":
        notes.append(
            f"{label}: members {rank_list(members)} inferred from the evidence that names the "
            "group (the dumps do not list its ranks); a member without a dump may be missing"
        )
    wrapped = {rank: v.first for rank, v in g.views.items() if v.first is not None and v.first > 1}
    if wrapped:
        lo, hi = min(wrapped.values()), max(wrapped.values())
        span = f"#{lo}" if lo == hi else f"#{lo}..#{hi}"
        notes.append(
            f"{label}: ring buffers of ranks {rank_list(list(wrapped))} wrapped (their entries "
            f"start at {span}); entries are compared only where ranks still hold them"
        )
    return notes


def _p2p(g: _Group, members: Sequence[int], ranks: Mapping[int, _Rank]) -> GroupIncident | None:
    """A send or recv whose peer has not posted the matching op."""
    local = {i: rank for i, rank in enumerate(sorted(members))}
    pending = {rank: v.pending_p2p for rank, v in sorted(g.views.items()) if v.pending_p2p}
    for rank, ops in pending.items():
        for op in ops:
            peer_local = op.dst if op.op == "send" else op.src
            peer = local.get(peer_local)
            if peer is None or peer == rank:
                continue
            want = "recv" if op.op == "send" else "send"
            matched = any(
                o.op == want and local.get(o.src if want == "recv" else o.dst) == rank
                for o in pending.get(peer, ())
            )
            if matched:
                continue
            return GroupIncident(
                name=g.name,
                desc=g.desc,
                ranks=tuple(members),
                membership="dump",
                kind="p2p",
                seq=op.seq,
                op=op.op,
                p2p=True,
                sizes=op.sizes,
                dtypes=op.dtypes,
                waiting=(rank,),
                missing=(peer,),
                culprits=(peer,),
            )
    return None


def _busy(
    rank: int, incidents: Sequence[GroupIncident], ranks: Mapping[int, _Rank], here: GroupIncident
) -> bool:
    """Whether ``rank`` waits in a collective elsewhere than in ``here``: in another group's
    incident where it is not a culprit, or — when it does not wait in ``here`` — by its
    stack, in some ``torch.distributed`` call."""
    for inc in incidents:
        if inc.name != here.name and rank in inc.waiting and rank not in inc.culprits:
            return True
    r = ranks.get(rank)
    return rank not in here.waiting and bool(r and r.stack and r.stack.in_collective)


def _culprits(
    inc: GroupIncident, incidents: Sequence[GroupIncident], ranks: Mapping[int, _Rank]
) -> GroupIncident:
    """A group's kind and culprits (see the module's docstring for the order of the rules)."""
    if inc.kind == "p2p":
        return inc
    entered = [*inc.waiting, *inc.completed, *inc.failed]
    short = [*inc.missing, *(r for r, _ in inc.behind)]
    exited = [r for r, _ in inc.exited]
    suspects = [r for r in inc.unknown if not _busy(r, incidents, ranks, inc)]
    minority = tuple(r for v in inc.mismatch[1:] for r in v.ranks)
    earlier = inc.diverged_at is not None and inc.seq is not None and inc.diverged_at < inc.seq
    kind: Kind
    if minority and (earlier or not (short or exited or suspects)):
        kind, culprits = "mismatch", minority
    elif short:
        idle = not any(_busy(r, incidents, ranks, inc) for r in short)
        if inc.waiting and len(entered) < len(short) and idle and not exited:
            kind, culprits = "extra", tuple(inc.waiting)
        else:
            kind = "missing" if inc.missing else "behind"
            culprits = tuple(sorted({*short, *exited}))
    elif exited:
        kind, culprits = "exited", tuple(exited)
    elif suspects:
        gil = any((s := ranks[r].stack) and s.owns_gil for r in suspects if r in ranks)
        kind, culprits = ("gil" if gil else "no_dump"), tuple(suspects)
    elif minority:
        kind, culprits = "mismatch", minority
    else:
        kind, culprits = "stuck", _not_started(inc, ranks)
    return replace(inc, kind=kind, culprits=tuple(sorted(culprits)))


def _not_started(inc: GroupIncident, ranks: Mapping[int, _Rank]) -> tuple[int, ...]:
    """NCCL: ranks whose collective is still ``scheduled`` where others ``started`` it (their
    device never got to it)."""
    states: dict[int, set[str]] = {}
    for rank in inc.waiting:
        r = ranks.get(rank)
        view = r.recorder.groups.get(inc.name) if r and r.recorder else None
        if view is not None and inc.seq in view.ops:
            states[rank] = {scalar_text(e.get("state")) for e in view.ops[inc.seq]}
    if not any("started" in s for s in states.values()):
        return ()
    return tuple(rank for rank, s in states.items() if s == {"scheduled"})


def _line(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _frame(r: _Rank, group: str | None) -> CulpritFrame | None:
    s = r.stack
    if s is not None and s.where is not None:
        # The frames go with it: a page shows them from the record, never from the files.
        return CulpritFrame(
            r.rank, s.where, "stacks", s.thread, s.owns_gil, s.in_collective, s.stack, r.stack_file
        )
    if r.recorder is None:
        return None
    views = [r.recorder.groups[group]] if group in r.recorder.groups else []
    views += [v for name, v in sorted(r.recorder.groups.items()) if name != group]
    for view in views:
        for seq in sorted(view.ops, reverse=True):
            frames = view.ops[seq][-1].get("frames")
            if isinstance(frames, list | tuple) and frames:
                stack = [
                    Frame(
                        scalar_text(f.get("name"), "?"),
                        scalar_text(f.get("filename"), "?"),
                        _line(f.get("line")),
                    )
                    for f in frames
                    if isinstance(f, Mapping)
                ]
                top = user_frame(stack)
                if top is not None:
                    return CulpritFrame(r.rank, frame_text(top), "dump")
    return None


def _stack_only(ranks: Mapping[int, _Rank], world: int) -> GroupIncident | None:
    """No group position at all (stacks and logs only): ranks inside a ``torch.distributed``
    call wait; the others (and exited ranks, and ranks of the world that left no evidence at
    all: nothing says they ever came) are the suspects."""
    stacks = {rank: r.stack for rank, r in ranks.items() if r.stack is not None}
    calls = {rank: s.in_collective for rank, s in stacks.items() if s.in_collective}
    inside = sorted(calls)
    absent = [rank for rank in range(world) if rank not in ranks]
    outside = [rank for rank in stacks if rank not in calls] + absent
    exited = [(rank, r.exited) for rank, r in ranks.items() if r.exited is not None]
    if not inside or not (outside or exited):
        return None
    gil = any(stacks[rank].owns_gil for rank in outside if rank in stacks)
    kind: Kind = "exited" if exited and not outside else ("gil" if gil else "no_dump")
    return GroupIncident(
        name=UNNAMED_GROUP,
        desc="",
        ranks=tuple(sorted({*ranks, *absent})),
        membership="inferred",
        kind=kind,
        seq=None,
        op="/".join(sorted(set(calls.values()))),
        waiting=tuple(inside),
        exited=tuple(exited),
        unknown=tuple(sorted(outside)),
        culprits=tuple(sorted({*outside, *(r for r, _ in exited)})),
        notes=("no dump gave a position: ranks are matched by their stacks alone",),
    )


def _absent_suspects(inc: GroupIncident, ranks: Mapping[int, _Rank], world: int) -> GroupIncident:
    """An everyone-waits group whose members are inferred (no dump lists them) may lack a
    member that left no evidence at all: each rank of the world without any is its first
    suspect (a member that never came would be the one the others wait for)."""
    if inc.kind != "stuck" or inc.membership != "inferred":
        return inc
    absent = [r for r in range(world) if r not in ranks]
    if not absent:
        return inc
    why = (
        "left no evidence at all; the group's members are inferred from the others' evidence, "
        "so it may be the member they wait for"
    )
    shown = [(r, why) for r in absent[:8]]
    return replace(inc, suspects=(*shown, *inc.suspects))


def _resolve(
    incidents: Sequence[GroupIncident], ranks: Mapping[int, _Rank]
) -> tuple[tuple[int, ...], GroupIncident | None, bool]:
    """The incident's culprits (the ranks waited for that wait for nobody), the group that
    shows them first, and whether the waits form a cycle."""
    unexplained: dict[str, list[int]] = {}
    for inc in incidents:
        unexplained[inc.name] = [c for c in inc.culprits if not _busy(c, incidents, ranks, inc)]
    roots = sorted({c for cs in unexplained.values() for c in cs})
    with_roots = [inc for inc in incidents if unexplained[inc.name]]
    if with_roots:
        primary = min(with_roots, key=lambda i: (len(i.ranks), i.seq or 0, i.name))
        return tuple(roots), primary, False
    blamed = [inc for inc in incidents if inc.culprits]
    if blamed:
        primary = min(blamed, key=lambda i: (len(i.ranks), i.seq or 0, i.name))
        return tuple(sorted({c for inc in blamed for c in inc.culprits})), primary, True
    stuck = [inc for inc in incidents if inc.kind != "none"]
    return (), min(stuck, key=lambda i: (len(i.ranks), i.name)) if stuck else None, False


def _evidence(ranks: Mapping[int, _Rank], world: int) -> tuple[EvidenceItem, ...]:
    items = []
    for rank in sorted({*ranks, *range(world)}):
        r = ranks.get(rank)
        if r is None:
            items.append(EvidenceItem(rank, ("none",)))
            continue
        items.append(
            EvidenceItem(
                rank=rank,
                kinds=r.kinds,
                host=r.host,
                pid=r.pid,
                exited=r.exited,
                files=r.files,
                notes=tuple(r.notes),
            )
        )
    return tuple(items)


def analyze(
    evidence: Sequence[RankEvidence],
    *,
    world_size: int | None = None,
    nodes: Sequence[NodeEvidence] = (),
) -> HangReport:
    """Match one incident's evidence across ranks: who the others wait for, and where.

    Parameters
    ----------
    evidence
        What was taken from each rank (several items for one rank are combined; their order
        does not matter).
    world_size
        The job's number of ranks; default (and at least): one more than the highest rank
        any evidence names. Ranks without evidence are listed as such (and, when the others
        wait for them, are the suspects).
    nodes
        Each node's GPU evidence (``load_incident``'s); with those the evidence items carry
        (``RankEvidence.node``), the report's ``nodes``. They make no culprit: a ``device``
        culprit whose own logs have no device line is said to have "a device fault on its
        node: <line>" when its host is exactly a node's with device lines.

    Returns
    -------
    HangReport
        ``culprit_ranks`` (with ``culprit_hosts``), the ``op``, ``seq`` and
        ``process_group`` where the ranks diverge, the culprits' ``frames``, every diverging
        group in ``groups``, and a one-line ``summary``. The same evidence always gives the
        same report.

    Examples
    --------
    Rank 2 never reaches the fourth ``all_reduce``; ranks 0 and 1 wait in it:

    >>> def dump(enqueued, completed):
    ...     entries = [{"pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": s,
    ...                 "profiling_name": "gloo:all_reduce", "input_sizes": [[4]],
    ...                 "input_dtypes": ["Float"], "state": "scheduled",
    ...                 "retired": s <= completed, "is_p2p": False}
    ...                for s in range(1, enqueued + 1)]
    ...     return {"pg_config": {}, "entries": entries, "pg_status": {"0": {
    ...         "last_enqueued_collective": str(enqueued),
    ...         "last_completed_collective": str(completed)}}}
    >>> report = analyze([RankEvidence(0, fr=dump(4, 3)), RankEvidence(1, fr=dump(4, 3)),
    ...                   RankEvidence(2, host="gpu-r3", fr=dump(3, 3))])
    >>> report.culprit_ranks, report.op, report.seq, report.process_group
    ((2,), 'all_reduce', 4, 'default_pg')
    >>> print(report.summary)
    rank 2 (node gpu-r3) never reached all_reduce #4 (default_pg, ranks 0-2); ranks 0,1 wait in it
    """
    if world_size is not None and not 1 <= world_size <= MAX_RANK + 1:
        raise ValueError(f"world_size {world_size}: must be from 1 to {MAX_RANK + 1}")
    with paused_gc():  # ~100,000 acyclic objects per 2,000-entry dump: no cycles to find
        return _analyze(evidence, world_size, nodes)


def _nodes(
    evidence: Sequence[RankEvidence], given: Sequence[NodeEvidence]
) -> tuple[NodeEvidence, ...]:
    """The nodes given and those the evidence carries, once each (every rank a node's capture
    wrote may carry it), by host."""
    found = {(n.host, n.file): n for n in (*given, *(e.node for e in evidence if e.node))}
    return tuple(found[k] for k in sorted(found))


def _analyze(
    evidence: Sequence[RankEvidence], world_size: int | None, given: Sequence[NodeEvidence]
) -> HangReport:
    ranks = _merge(evidence)
    nodes = _nodes(evidence, given)
    world = _world(ranks, world_size)
    notes: list[str] = []
    found = [_incident(g, ranks, world) for _, g in sorted(_groups(ranks).items())]
    incidents = [inc for inc in found if inc is not None]
    # Culprits need every group's waiters (a rank missing here may wait there): two passes.
    incidents = [_culprits(inc, incidents, ranks) for inc in incidents]
    incidents = [_culprits(inc, incidents, ranks) for inc in incidents]
    if not any(inc.kind != "none" for inc in incidents):
        fallback = _stack_only(ranks, world)
        incidents = [fallback] if fallback else incidents
    seen = {
        rank: Seen(r.recorder.groups if r.recorder else {}, r.signals, r.device)
        for rank, r in ranks.items()
    }
    incidents, held = device_faults(incidents, seen)
    incidents = [_absent_suspects(inc, ranks, world) for inc in incidents]
    roots, primary, cycle = _resolve(incidents, ranks)
    faulted = [inc for inc in incidents if inc.kind == "device"]
    if faulted:
        # A device culprit is a root whatever else it waits in; ranks that wait on one are not.
        first = tuple(sorted({c for inc in faulted for c in inc.culprits}))
        roots = first + tuple(r for r in roots if r not in held and r not in first)
        primary, cycle = faulted[0], False
        incidents = faulted + [inc for inc in incidents if inc.kind != "device"]
    frames = tuple(
        f
        for rank in roots
        if rank in ranks and (f := _frame(ranks[rank], primary.name if primary else None))
    )
    hosts = tuple(ranks[r].host if r in ranks else None for r in roots)
    for rank, r in ranks.items():
        notes.extend(f"rank {rank}: {n}" for n in r.notes)
    for inc in incidents:
        notes.extend(inc.notes)
    kind: Kind = "cycle" if cycle else (primary.kind if primary else "none")
    shown = [inc for inc in incidents if inc.kind != "none"]
    return HangReport(
        summary=render.summary(
            kind, roots, hosts, frames, primary, shown, ranks=len(ranks), nodes=nodes
        ),
        kind=kind,
        culprit_ranks=roots,
        culprit_hosts=hosts,
        op=primary.op if primary else None,
        seq=primary.seq if primary else None,
        # The group's own description; its members are group_ranks (group_label says both).
        process_group=describe_group(primary.desc, primary.name) if primary else None,
        group_name=primary.name if primary else None,
        group_ranks=primary.ranks if primary else (),
        frames=frames,
        groups=tuple(shown),
        evidence=_evidence(ranks, world),
        world_size=world,
        notes=tuple(notes),
        nodes=nodes,
    )
