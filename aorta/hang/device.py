"""Device faults: a rank whose collective stays incomplete at a sequence number its peers
completed, and the lines that say what its device did.

A collective completes on every member or on none: each member's kernel needs the others'.
So when a rank's entry stays ``scheduled`` or ``started`` at a sequence number that a peer
in the same group *completed* — its ``pg_status`` last completed is at or past it, and it
went on to later work — the rank's side ran (its peer could not have finished otherwise)
but the rank never saw it finish: its device stopped (an illegal memory access, an ECC or
XID error, a kernel that never retires), or it never launched the kernel at all. Its other
groups then wait on it. That is a ``device`` culprit, named before any group that merely
waits.

What is read (every field in both spellings a dump uses: ``31`` or ``'31'``, ``None`` or
``'None'``): ``pg_status`` (last enqueued / started / completed), the entry's ``state``,
``time_discovered_started_ns`` / ``time_discovered_completed_ns``, ``timeout_ms``; the
watchdog's ``WorkNCCL(SeqNum=…, OpType=…) ran for … milliseconds`` line; and the rank's own
device lines (:func:`device_lines`): ``CUDA error: an illegal memory access``, ``HIP error``,
``hipErrorLaunchFailure``, ``NCCL WARN Cuda failure``, dmesg ``NVRM: Xid`` and ``amdgpu``
faults, uncorrectable ECC. Such a line turns "a device fault?" into "a device fault: <the
line>".

When nobody completed what the others wait in (everyone waits, nobody is behind),
:func:`suspects` ranks the waiters by what their evidence says and why.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .model import GroupIncident, Position, rank_list
from .recorder import GroupView, number, scalar_text
from .watchdog import MAX_LINE, Signal

__all__ = [
    "NODE_KEEP",
    "EntryFacts",
    "Seen",
    "device_faults",
    "device_lines",
    "entry_facts",
    "node_lines",
    "stalled",
    "suspects",
]

#: Lines that say a device failed (case-insensitive; one search per line).
_DEVICE = re.compile(
    r"illegal memory access|illegal instruction was encountered"
    r"|hipError[A-Z]\w{2,40}|\bHIP error\b|\bCUDA error\b|cudaError[A-Z]\w{2,40}"
    r"|NCCL WARN (?:Cuda|HIP) failure|unspecified launch failure|device-side assert"
    r"|NVRM: Xid|\bXid \(PCI:|fallen off the bus|uncorrectable ECC|\bECC error"
    r"|amdgpu.{0,80}(?:page fault|GPU reset|ring \S+ timeout|hang|RAS|poison)"
    r"|GPU (?:hang|reset) (?:detected|occurred)|Memory access fault by GPU",
    re.IGNORECASE,
)
#: What goes before a log line's message: ``[rank5]:``, ``[E1206 19:01:52.304 x.cpp:12]``,
#: ``[PG ID 3 PG GUID 21(dp) Rank 1]``, dmesg's ``[Sat Dec  6 19:01:51 2026]``.
_PREFIX = re.compile(r"^(?:\s*\[[^\]]{0,200}\]:?)+\s*")
#: A device line kept for the report is shortened to this many characters.
_SHOWN = 160
#: Device lines kept per rank (the first is the cause; the rest follow from it).
_KEEP = 3
#: Device lines kept per node: its last ones (a node's kernel log holds its whole uptime).
NODE_KEEP = 10


def device_lines(lines: Iterable[str]) -> tuple[str, ...]:
    """The lines of a rank's log (or of its node's dmesg / amd-smi / nvidia-smi output) that
    say its device failed, the first :data:`_KEEP` of them, shortened.

    >>> device_lines(["step 4 loss 0.1",
    ...     "[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered",
    ...     "[Sat Dec  6 19:01:51 2026] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."])
    ('RuntimeError: CUDA error: an illegal memory access was encountered', \
'NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.')
    """
    out: list[str] = []
    for line in lines:
        text = line[:MAX_LINE]
        if _DEVICE.search(text):
            shown = " ".join(_PREFIX.sub("", text).split())
            out.append(shown if len(shown) <= _SHOWN else shown[: _SHOWN - 1] + "…")
            if len(out) == _KEEP:
                break
    return tuple(out)


def node_lines(lines: Iterable[str], keep: int = NODE_KEEP) -> tuple[str, ...]:
    """The last ``keep`` lines of a node's GPU evidence (dmesg, nvidia-smi, amd-smi) that say
    a device failed, oldest first, shortened — with their time prefix kept: a node's kernel
    log reaches back to its boot, and only the time tells an Xid of this hang from one of
    last week.

    >>> node_lines(["$ dmesg", "[Sat Dec  6 19:01:51 2026] NVRM: Xid (PCI:0000:3b:00): 79, "
    ...             "GPU has fallen off the bus.", "[Sat Dec  6 19:01:52 2026] nvidia: link up"])
    ('[Sat Dec 6 19:01:51 2026] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.',)
    """
    out: list[str] = []
    for line in lines:
        text = line[:MAX_LINE]
        if _DEVICE.search(text):
            shown = " ".join(text.split())
            out.append(shown if len(shown) <= _SHOWN else shown[: _SHOWN - 1] + "…")
    return tuple(out[-keep:]) if keep > 0 else ()


@dataclass(frozen=True)
class EntryFacts:
    """One entry's state and times, read in either spelling (``None`` where not given)."""

    state: str
    started_ns: int | None
    completed_ns: int | None
    timeout_ms: int | None


def entry_facts(entries: Sequence[Mapping[str, Any]]) -> EntryFacts:
    """The state and times of a collective (its last entry, for a coalesced one).

    >>> entry_facts([{"state": "started", "time_discovered_started_ns": "1700",
    ...               "time_discovered_completed_ns": "None", "timeout_ms": "600000"}])
    EntryFacts(state='started', started_ns=1700, completed_ns=None, timeout_ms=600000)
    """
    e = entries[-1] if entries else {}
    return EntryFacts(
        state=scalar_text(e.get("state"), "?"),
        started_ns=_time(e.get("time_discovered_started_ns")),
        completed_ns=_time(e.get("time_discovered_completed_ns")),
        timeout_ms=_time(e.get("timeout_ms")),
    )


def _time(value: object) -> int | None:
    n = number(value)
    return n if n is not None and n > 0 else None  # JSON writes an unset time as 0


def stalled(
    positions: Sequence[Position],
    *,
    moved_on: Collection[int] = (),
    mismatch_at: int | None = None,
) -> dict[int, tuple[int, tuple[int, ...]]]:
    """The ranks of one group whose collective stays incomplete at a sequence number a peer
    completed: rank → (that sequence number, the peers that completed it).

    A peer counts when it went on — a later collective in this group, or it waits in another
    (``moved_on``): a gloo rank whose collective failed retires it too, but goes nowhere after
    (its logs' later timeouts are not such a failure: they came after the dump). Where the ranks' entries disagree at that number
    (``mismatch_at``), the one that finished is the odd one, not its peers: no stall.

    >>> ps = [Position(4, 1209, 1208, "dump"), Position(5, 1207, 1206, "dump")]
    >>> stalled(ps)
    {5: (1207, (4,))}
    >>> stalled(ps, mismatch_at=1207), stalled([Position(0, 4, 4, "dump"), Position(1, 4, 3, "dump")])
    ({}, {})
    """
    out: dict[int, tuple[int, tuple[int, ...]]] = {}
    top = max((q.completed for q in positions), default=0)
    for p in positions:
        if p.enqueued <= p.completed or p.completed >= top:
            continue  # finished, or nobody completed more than it did (everyone waits)
        seq = p.completed + 1
        if mismatch_at is not None and mismatch_at <= seq:
            continue
        done = [q for q in positions if q.rank != p.rank and q.completed >= seq]
        if any(q.enqueued > seq or q.rank in moved_on for q in done):
            out[p.rank] = (seq, tuple(sorted(q.rank for q in done)))
    return out


def suspects(
    waiting: Sequence[int],
    facts: Mapping[int, EntryFacts],
    lines: Mapping[int, Sequence[str]],
) -> tuple[tuple[int, str], ...]:
    """Everyone waits in one collective and nobody is behind: the waiters whose evidence sets
    them apart, most telling first, each with why.

    A device line (the device failed) ranks first; then a rank whose entry is still
    ``scheduled`` where others ``started`` it (its device never launched the kernel); then
    the rank that started it last, by a second or more (the others waited for it, though
    whether it is stuck now cannot be told).

    >>> facts = {0: EntryFacts("started", 10**9, None, None), 1: EntryFacts("scheduled", None,
    ...          None, None), 2: EntryFacts("started", 4 * 10**9, None, None)}
    >>> suspects([0, 1, 2], facts, {})
    ((1, 'still scheduled where ranks 0,2 started it: its device never launched it'), \
(2, 'started it last, 3.0 s after rank 0'))
    """
    found: list[tuple[int, int, str]] = []
    started = [r for r in waiting if r in facts and facts[r].state == "started"]
    times = {r: t for r in waiting if r in facts and (t := facts[r].started_ns) is not None}
    for rank in waiting:
        if lines.get(rank):
            found.append((0, rank, f"its device: {lines[rank][0]}"))
        elif started and rank in facts and facts[rank].state == "scheduled":
            found.append(
                (
                    1,
                    rank,
                    f"still scheduled where {_ranks(started)} started it: its device never "
                    "launched it",
                )
            )
    if len(times) > 1:
        first = min(times, key=lambda r: (times[r], r))
        last = max(times, key=lambda r: (times[r], -r))
        gap = (times[last] - times[first]) / 1e9
        if gap >= 1.0 and last not in {r for _, r, _ in found}:
            found.append((2, last, f"started it last, {gap:.1f} s after rank {first}"))
    found.sort()
    return tuple((rank, why) for _, rank, why in found)


@dataclass(frozen=True)
class Seen:
    """What the device rule reads of one rank: its dump's groups by name, its watchdog
    lines and its device lines."""

    views: Mapping[str, GroupView]
    signals: Sequence[Signal]
    lines: tuple[str, ...]


def device_faults(
    incidents: Sequence[GroupIncident], seen: Mapping[int, Seen]
) -> tuple[list[GroupIncident], dict[int, set[int]]]:
    """Groups where a rank stalled at a sequence number its peers completed become ``device``
    incidents (see :mod:`aorta.hang.device`); so do everyone-waits groups where a waiter's
    own log has device lines; the other everyone-waits groups get their ranked suspects.
    Returns the incidents, each group that waits on a device culprit saying so
    (``waits_on``), and the ranks held by device culprits (rank → the culprits)."""
    pending: dict[int, set[str]] = {}
    for inc in incidents:
        for p in inc.positions:
            if p.enqueued > p.completed:
                pending.setdefault(p.rank, set()).add(inc.name)
    out = []
    for inc in incidents:
        found = {}
        if inc.kind not in ("p2p", "none") and inc.positions:
            moved = {p.rank for p in inc.positions if pending.get(p.rank, set()) - {inc.name}}
            at = inc.diverged_at if inc.mismatch else None
            found = stalled(inc.positions, moved_on=moved, mismatch_at=at)
        out.append(_as_device(inc, found, seen) if found else inc)
    idle = unlaunched(seen)
    for i, inc in enumerate(out):
        if inc.kind in ("stuck", "missing", "behind", "cycle") and inc.seq is not None:
            mine = sorted(
                r for r, (name, seq) in idle.items() if name == inc.name and seq == inc.seq
            )
            started = [
                r
                for r in inc.waiting
                if r not in idle and _state(seen, r, inc.name, inc.seq) == "started"
            ]
            if mine and started:
                out[i] = _as_unlaunched(inc, mine, started, seen)
    held, waits = _held(out)
    for i, inc in enumerate(out):
        if inc.kind == "stuck" and inc.name not in waits and inc.seq is not None:
            out[i] = _stuck(inc, seen)
    if any(inc.kind == "device" and inc.name not in waits for inc in out):
        held, waits = _held(out)
    out = [
        replace(inc, waits_on=tuple(sorted(waits[inc.name]))) if inc.name in waits else inc
        for inc in out
    ]
    return out, held


def unlaunched(seen: Mapping[int, Seen]) -> dict[int, tuple[str, int]]:
    """Ranks whose device is at a collective it never launched: the first collective the rank
    has not finished (in the order it issued them, across its groups) is still ``scheduled``
    and none of its collectives is ``started`` — its device is busy elsewhere (a kernel that
    never retires) or dead. Rank → (group name, sequence number). gloo, whose entries never
    leave ``scheduled``, gives none: its peers never start either.

    >>> from aorta.hang.recorder import read_recorder
    >>> def rank(*states):
    ...     fr = {"entries": [{"collective_seq_id": s, "state": st, "process_group": ["1", "tp"],
    ...           "record_id": s} for s, st in enumerate(states, 1)]}
    ...     return Seen(read_recorder(fr).groups, (), ())
    >>> unlaunched({0: rank("completed", "started"), 1: rank("completed", "scheduled")})
    {1: ('1', 2)}
    """
    out: dict[int, tuple[str, int]] = {}
    for rank, r in seen.items():
        first: tuple[int, str, int, str] | None = None
        for name, view in r.views.items():
            # The entries it holds past its last completed one (never a range of numbers a
            # dump's pg_status may make huge).
            for seq in sorted(s for s in view.ops if s > view.completed):
                entries = view.ops[seq]
                state = scalar_text(entries[-1].get("state"))
                if state == "started":
                    first = None
                    break
                order = number(entries[-1].get("record_id"))
                key = (order if order is not None else seq, name, seq, state)
                if state == "scheduled" and (first is None or key < first):
                    first = key
            else:
                continue
            break
        if first is not None:
            out[rank] = (first[1], first[2])
    return out


def _state(seen: Mapping[int, Seen], rank: int, name: str, seq: int) -> str:
    view = _view(seen, rank, name)
    entries = view.ops.get(seq) if view is not None else None
    return scalar_text(entries[-1].get("state")) if entries else ""


def _as_unlaunched(
    inc: GroupIncident, culprits: Sequence[int], started: Sequence[int], seen: Mapping[int, Seen]
) -> GroupIncident:
    """``inc`` as a ``device`` incident whose culprits never launched the collective that
    ``started`` ranks launched and wait in."""
    proof = []
    for rank in culprits:
        view = _view(seen, rank, inc.name)
        status = ""
        if view is not None:
            status = f"; last enqueued #{view.enqueued}, started #{view.started}, completed #{view.completed}"
        proof.append(
            f"rank {rank}: #{inc.seq} still scheduled, the first collective its device had not "
            f"finished, and none of its collectives started{status}"
        )
        proof += [f"rank {rank}: {line}" for line in (seen[rank].lines if rank in seen else ())]
    waits = "waits" if len(started) == 1 else "wait"
    proof.append(f"{_ranks(started)} started #{inc.seq} and {waits} in it")
    lines = [line for r in culprits if r in seen for line in seen[r].lines]
    return replace(
        inc,
        kind="device",
        waiting=tuple(started),
        culprits=tuple(culprits),
        evidence=tuple(proof),
        device_line=lines[0] if lines else None,
    )


def _held(incidents: Sequence[GroupIncident]) -> tuple[dict[int, set[int]], dict[str, set[int]]]:
    """Which ranks wait on which device culprits, and which groups: a group waits on the
    culprits that hold every rank it blames (for an everyone-waits group, its members that are
    device culprits); its waiters are then held by them too (until nothing changes)."""
    device = {c for inc in incidents if inc.kind == "device" for c in inc.culprits}
    held: dict[int, set[int]] = {c: {c} for c in device}
    for inc in incidents:
        if inc.kind == "device":
            for p in inc.positions:
                if p.enqueued > p.completed and p.rank not in device:
                    held.setdefault(p.rank, set()).update(inc.culprits)
    waits: dict[str, set[int]] = {}
    for _ in range(len(incidents) + 1):
        changed = False
        for inc in incidents:
            if inc.kind in ("device", "none"):
                continue
            # Whom the group waits for: its culprits; else its members that are device
            # culprits; else (everyone waits) its waiters, when each waits on one elsewhere.
            blame = set(inc.culprits) or {r for r in inc.ranks if r in device}
            blame = blame or set(inc.waiting)
            if not blame or not blame <= held.keys():
                continue
            on = set().union(*(held[b] for b in blame))
            if on <= waits.get(inc.name, set()):
                continue
            waits.setdefault(inc.name, set()).update(on)
            changed = True
            stuck = {p.rank for p in inc.positions if p.enqueued > p.completed}
            for rank in stuck | set(inc.waiting):
                if rank not in device:
                    held.setdefault(rank, set()).update(on)
        if not changed:
            break
    return held, waits


def _as_device(
    inc: GroupIncident, found: Mapping[int, tuple[int, tuple[int, ...]]], seen: Mapping[int, Seen]
) -> GroupIncident:
    """``inc`` as a ``device`` incident at the first sequence number a rank stalled at."""
    seq = min(s for s, _ in found.values())
    culprits = sorted(r for r, (s, _) in found.items() if s == seq)
    done = tuple(sorted({q for r in culprits for q in found[r][1]}))
    op, sizes, dtypes = inc.op, inc.sizes, inc.dtypes
    if seq != inc.seq:
        op, sizes, dtypes = _sig_at(inc.name, seq, [*done, *culprits], seen)
    missing = tuple(p.rank for p in inc.positions if p.enqueued == seq - 1)
    behind = tuple((p.rank, p.enqueued) for p in inc.positions if p.enqueued < seq - 1)
    lines = [line for r in culprits if r in seen for line in seen[r].lines]
    return replace(
        inc,
        kind="device",
        seq=seq,
        op=op,
        sizes=sizes,
        dtypes=dtypes,
        waiting=tuple(culprits),
        completed=done,
        failed=(),
        missing=missing,
        behind=behind,
        culprits=tuple(culprits),
        evidence=tuple(_proof(inc, seq, culprits, done, seen)),
        device_line=lines[0] if lines else None,
    )


def _stuck(inc: GroupIncident, seen: Mapping[int, Seen]) -> GroupIncident:
    """An everyone-waits group: a ``device`` incident when a waiter's own log has device
    lines, else the group with its suspects ranked."""
    lines = {r: seen[r].lines for r in inc.waiting if r in seen and seen[r].lines}
    if lines:
        culprits = tuple(sorted(lines))
        proof = [f"every member entered #{inc.seq} and waits; none completed it"]
        proof += [f"rank {r}: {line}" for r in culprits for line in lines[r]]
        return replace(
            inc,
            kind="device",
            culprits=culprits,
            evidence=tuple(proof),
            device_line=lines[culprits[0]][0],
        )
    facts = {}
    for rank in inc.waiting:
        view = _view(seen, rank, inc.name)
        if view is not None and inc.seq in view.ops:
            facts[rank] = entry_facts(view.ops[inc.seq])
    return replace(inc, suspects=suspects(inc.waiting, facts, {}))


def _view(seen: Mapping[int, Seen], rank: int, name: str) -> GroupView | None:
    r = seen.get(rank)
    return r.views.get(name) if r is not None else None


def _sig_at(name: str, seq: int, order: Sequence[int], seen: Mapping[int, Seen]) -> Any:
    for rank in order:
        view = _view(seen, rank, name)
        if view is not None and seq in view.sigs:
            return view.sigs[seq][0]
    for rank in order:
        for s in seen[rank].signals if rank in seen else ():
            if s.kind == "timeout" and s.seq == seq and (s.group or "0") == name:
                return s.op, (), ()
    return None, (), ()


def _proof(
    inc: GroupIncident,
    seq: int,
    culprits: Sequence[int],
    done: Sequence[int],
    seen: Mapping[int, Seen],
) -> list[str]:
    """What shows a device stall: each culprit's entry and position, its watchdog's lines,
    its device lines; the peers' positions."""
    out = []
    where = {p.rank: p for p in inc.positions}
    for rank in culprits:
        view, p = _view(seen, rank, inc.name), where[rank]
        text = f"rank {rank}: #{seq} never completed"
        if view is not None and seq in view.ops:
            facts = entry_facts(view.ops[seq])
            text = f"rank {rank}: #{seq} still {facts.state}"
            if facts.timeout_ms:
                text += f" (timeout {facts.timeout_ms / 1000:g} s)"
        status = f"last enqueued #{p.enqueued}, completed #{p.completed}"
        if view is not None and view.started >= 0:
            status = (
                f"last enqueued #{p.enqueued}, started #{view.started}, completed #{p.completed}"
            )
        out.append(f"{text}; {status} ({p.source})")
        for s in seen[rank].signals if rank in seen else ():
            if s.group not in (None, inc.name):
                continue
            if s.kind == "timeout" and s.seq == seq:
                ran = f" ran for {s.ran_ms} ms" if s.ran_ms is not None else " timed out"
                out.append(f"rank {rank}'s watchdog: {s.op} #{s.seq}{ran}")
            elif s.kind == "position":
                out.append(
                    f"rank {rank}'s watchdog: last enqueued work {s.enqueued}, last completed "
                    f"work {s.completed}"
                )
        out.extend(f"rank {rank}: {line}" for line in (seen[rank].lines if rank in seen else ()))
    for rank in done:
        p = where[rank]
        out.append(
            f"rank {rank} completed it: last completed #{p.completed}, last enqueued "
            f"#{p.enqueued} ({p.source})"
        )
    return out


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"
