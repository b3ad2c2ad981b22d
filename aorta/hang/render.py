"""A hang report in words: the one-line summary and the incident table.

The summary names the culprits (and their nodes), the collective and group where the ranks
diverge, who waits, and where each culprit is::

    rank 2 (node gpu-r3) never reached all_reduce #5 (default_pg, ranks 0-3); ranks 0,1,3
    wait in it — rank 2 at train.py:41 in step
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aorta.text import printable

from .model import (
    UNNAMED_GROUP,
    CulpritFrame,
    EvidenceItem,
    GroupIncident,
    HangReport,
    Kind,
    NodeEvidence,
    Variant,
    rank_list,
)

__all__ = [
    "cited_lines",
    "cited_nodes",
    "device_fault",
    "json_ready",
    "node_fault",
    "node_host",
    "node_line",
    "summary",
    "text",
]


def _who(ranks: Sequence[int], hosts: Sequence[str | None]) -> str:
    words = _words(ranks)
    known = sorted({h for h in hosts if h})
    if known:
        words += f" (node{'s' if len(known) > 1 else ''} {', '.join(known)})"
    return words


def _words(ranks: Sequence[int]) -> str:
    """``rank 0`` / ``ranks 0,1``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"


def _ranks(ranks: Sequence[int], verb: str) -> str:
    """``rank 0 waits`` / ``ranks 0,1 wait``."""
    return f"{_words(ranks)} {verb}{'s' if len(ranks) == 1 else ''}"


def _coll(inc: GroupIncident) -> str:
    if inc.seq is None:
        return f"{inc.op or 'a collective'} (by their stacks)"
    return f"{inc.op or 'collective'} #{inc.seq}"


def _label(inc: GroupIncident) -> str:
    return "" if inc.name == UNNAMED_GROUP else f" ({inc.label})"


def _where(frames: Sequence[CulpritFrame]) -> str:
    if not frames:
        return ""
    parts = [
        f"rank {f.rank} {'at' if f.source == 'stacks' else 'last issued a collective at'} {f.where}"
        for f in frames[:3]
    ]
    more = f" (+{len(frames) - 3} more)" if len(frames) > 3 else ""
    return " — " + "; ".join(parts) + more


def sizes_text(sizes: Sequence[Sequence[int]], dtypes: Sequence[str]) -> str:
    """``[4] Float``; several inputs joined by ``+``.

    >>> sizes_text(((4,), (2, 3)), ("Float", "Float")), sizes_text((), ())
    ('[4]+[2, 3] Float', '-')
    """
    if not sizes and not dtypes:
        return "-"
    shape = "+".join(f"[{', '.join(str(d) for d in s)}]" for s in sizes) or "[]"
    kinds = sorted(set(dtypes))
    return f"{shape} {'/'.join(kinds)}" if kinds else shape


def _variant(v: Variant, *, op: bool = True) -> str:
    has = "has" if len(v.ranks) == 1 else "have"
    op_text = f"{v.op} " if op and v.op else ""
    return f"{_words(v.ranks)} {has} {op_text}{sizes_text(v.sizes, v.dtypes)}"


def _exit_text(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"code {code}"


def _headline(kind: Kind, inc: GroupIncident, who: str, frames: Sequence[CulpritFrame]) -> str:
    coll, label, where = _coll(inc), _label(inc), _where(frames)
    entered = [*inc.waiting, *inc.completed, *inc.failed]
    waits = f"; {_ranks(inc.waiting, 'wait')} in it" if inc.waiting else ""
    if kind == "missing":
        behind = "".join(f"; rank {r} is further behind (its last is #{s})" for r, s in inc.behind)
        return f"{who} never reached {coll}{label}{behind}{waits}{where}"
    if kind == "behind":
        lasts = ", ".join(f"#{s}" for _, s in inc.behind)
        return (
            f"{who} is behind (last entered {lasts}) while {_ranks(inc.waiting, 'wait')} in "
            f"{coll}{label}{where}"
        )
    if kind == "extra":
        others = [r for r in inc.ranks if r not in inc.waiting]
        return (
            f"{who} issued an extra {coll}{label} that {_ranks(others, 'do')} not: they "
            f"completed #{(inc.seq or 1) - 1} and issued nothing more{where}"
        )
    if kind == "mismatch":
        first, *rest = inc.mismatch
        at = inc.diverged_at if inc.diverged_at is not None else inc.seq
        ops = len({v.op for v in inc.mismatch}) > 1  # name the ops only when they differ
        odd = "; ".join(_variant(v, op=ops) for v in rest)
        if inc.seq != at and inc.waiting:
            waits = f"; {_ranks(inc.waiting, 'wait')} in {coll}"
        return f"ranks disagree at {first.op} #{at}{label}: {odd} where {_variant(first, op=ops)}{waits}{where}"
    if kind == "exited":
        codes = ", ".join(f"{_exit_text(c)}" for _, c in inc.exited)
        tail = waits
        if inc.failed:
            why = f" ({printable(inc.failure)})" if inc.failure else ""
            tail = f"; {_words(inc.failed)} entered it and failed{why}"
        elif not inc.waiting and entered:
            tail = f"; {_words(entered)} entered it"
        return f"{who} exited ({codes}) before {coll}{label}{tail}"
    if kind == "gil":
        spot = f" at {frames[0].where}" if frames else ""
        return (
            f"{who} answered no dump and holds the GIL{spot}; {_ranks(inc.waiting, 'wait')} in "
            f"{coll}{label}"
        )
    if kind == "no_dump":
        return (
            f"{who} left no dump while {_ranks(inc.waiting, 'wait')} in {coll}{label}: "
            f"{'it is the suspect' if len(inc.culprits) == 1 else 'they are the suspects'}{where}"
        )
    if kind == "p2p":
        want = "recv" if inc.op == "send" else "send"
        return (
            f"{_ranks(inc.waiting, 'wait')} in {inc.op} #{inc.seq} (p2p, {inc.label}) for "
            f"{who}, which never posted the matching {want}{where}"
        )
    if who:
        started = [r for r in inc.waiting if r not in inc.culprits]
        return (
            f"{who} never started {coll}{label} (still scheduled) while "
            f"{_ranks(started, 'wait')} in it: every rank entered it"
        )
    # Ranks that left nothing to place them (members without a position, or ranks of the job
    # an inferred group may be missing): "none is missing" would be a claim about ranks nobody
    # heard from.
    silent = sorted({*inc.unknown, *(r for r, _ in inc.suspects if r not in inc.ranks)})
    if silent:
        line = (
            f"every rank of {inc.label} entered {coll} and waits; {_words(silent)} left no "
            "evidence, so the group may be missing "
            f"{'it' if len(silent) == 1 else 'them'}"
        )
    else:
        line = (
            f"every rank of {inc.label} entered {coll} and waits; none is missing or disagrees "
            "(the transport, a device or the library?)"
        )
    if inc.suspects:
        shown = "; ".join(f"rank {r}: {why}" for r, why in inc.suspects[:3])
        line += f" — suspects, most telling first: {shown}"
    return line


def _is_address(name: str) -> bool:
    """Whether ``name`` is an IP address (v4 or v6), not a host name."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def node_host(host: str | None, hosts: Iterable[str]) -> str | None:
    """The one of the nodes' ``hosts`` that ``host`` (a rank's) names, or ``None``.

    The rule: the same name; else the same name but for case or a trailing dot (DNS names
    are case-insensitive); else a short name and a full one whose first label it is
    (``node1`` and ``node1.cluster.local``: a capture may write either). Each step must name
    exactly one node: two candidates are a guess, and a guess would cite one node's device
    line against another's rank. An IP address matches only itself: which name it had at
    the capture would take a DNS lookup, here or now, that need not give the same answer.
    Two full names never match each other (``node1.a`` is not ``node1.b``).

    >>> nodes = ["gpu-r1", "gpu-r3.cluster.local", "10.0.0.7"]
    >>> [node_host(h, nodes) for h in ("gpu-r1", "GPU-R1", "gpu-r1.cluster.local",
    ...                                "gpu-r3", "gpu-r3.other.local", "gpu-r31", "10.0.0.7")]
    ['gpu-r1', 'gpu-r1', 'gpu-r1', 'gpu-r3.cluster.local', None, None, '10.0.0.7']
    >>> node_host("gpu-r3", ["gpu-r3.a.local", "gpu-r3.b.local"]) is None  # two: no guess
    True
    """
    if not host:
        return None
    known = sorted(set(hosts))
    if host in known:
        return host

    def fold(name: str) -> str:
        return name.rstrip(".").casefold()

    same = [h for h in known if fold(h) == fold(host)]
    if same:
        return same[0] if len(same) == 1 else None
    if _is_address(host):
        return None
    name = fold(host)

    def short_of(bare: str, full: str) -> bool:
        return "." not in bare and "." in full and full.split(".")[0] == bare

    found = [
        h
        for h in known
        if not _is_address(h) and (short_of(name, fold(h)) or short_of(fold(h), name))
    ]
    return found[0] if len(found) == 1 else None


def node_line(nodes: Sequence[NodeEvidence], host: str) -> str | None:
    """The latest device line of the node ``host`` (over each of its files, in order): the
    node's log reaches back to its boot, and the capture's moment is its end.

    >>> node_line([NodeEvidence("n1", "a.txt", ("x", "y")), NodeEvidence("n1", "b.txt")], "n1")
    'y'
    """
    lines = [line for n in nodes if n.host == host for line in n.device_lines]
    return lines[-1] if lines else None


def _node_cite(
    culprits: Sequence[int], host: Mapping[int, str | None], nodes: Sequence[NodeEvidence]
) -> tuple[str, str] | None:
    """(node host, its latest device line) when the culprits are all on one node
    (:func:`node_host`) that has device lines; ``None`` otherwise."""
    on = {node_host(host.get(r), [n.host for n in nodes]) for r in culprits}
    name = next(iter(on)) if len(on) == 1 else None
    line = node_line(nodes, name) if name is not None else None
    return (name, line) if name is not None and line is not None else None


def node_fault(culprit_hosts: Sequence[str | None], node: str, line: str) -> str:
    """The words that cite a node's device line for culprits on it — the one sentence the
    summary, the page, ``matrix.md`` and ``aorta compare`` say: ``a device fault on its
    node: <line>``; the node's name is added when the culprits' hosts name it otherwise
    (``node1`` for the file of ``node1.cluster.local``), so that a reader sees whose line it is.

    >>> node_fault(["gpu-r3"], "gpu-r3", "NVRM: Xid 79")
    'a device fault on its node: NVRM: Xid 79'
    >>> node_fault(["gpu-r3", "gpu-r3"], "gpu-r3.local", "NVRM: Xid 79")
    'device faults on their node (gpu-r3.local): NVRM: Xid 79'
    """
    one = len(culprit_hosts) <= 1
    fault, its = ("a device fault", "its") if one else ("device faults", "their")
    named = f" ({printable(node)})" if any(h != node for h in culprit_hosts) else ""
    return f"{fault} on {its} node{named}: {printable(line)}"


def device_fault(culprits: int, line: str) -> str:
    """The words that cite the culprits' own device line (their logs' first: a CUDA or HIP
    error, an Xid, an amdgpu line) — the one sentence the summary, the page, ``matrix.md``
    and ``aorta compare`` say: ``a device fault: <line>``, ``device faults: <line>`` for
    ``culprits`` (how many share it) above one. :func:`node_fault` words a node's line.

    >>> device_fault(1, "CUDA error: an illegal memory access was encountered")
    'a device fault: CUDA error: an illegal memory access was encountered'
    >>> device_fault(2, "HIP error: hipErrorLaunchFailure")
    'device faults: HIP error: hipErrorLaunchFailure'
    """
    fault = "a device fault" if culprits <= 1 else "device faults"
    return f"{fault}: {printable(line)}"


def cited_lines(report: HangReport) -> dict[int, str]:
    """Each ``device`` culprit whose own device line ``report.summary`` cites, with that line
    (the line of its group, :attr:`GroupIncident.device_line`, by rank): what the Dataset's
    ``hang_device_line`` holds, so that every output cites the same. A summary that does not
    say the line (a hand-made record, or one an aorta wrote before the rule) cites none.

    >>> g = GroupIncident("0", "default_pg", (0, 1), "world", "device", 5, "all_reduce",
    ...                   culprits=(1,), completed=(0,), device_line="CUDA error: x")
    >>> r = HangReport(summary="rank 1 … — a device fault: CUDA error: x", kind="device",
    ...                culprit_ranks=(1,), groups=(g,))
    >>> cited_lines(r)
    {1: 'CUDA error: x'}
    """
    return {
        rank: inc.device_line
        for inc in report.groups
        if inc.kind == "device" and inc.device_line
        if device_fault(len(inc.culprits), inc.device_line) in report.summary
        for rank in inc.culprits
    }


def _citations(
    culprits: Sequence[int],
    hosts: Sequence[str | None],
    groups: Sequence[GroupIncident],
    nodes: Sequence[NodeEvidence],
) -> list[tuple[GroupIncident, tuple[str, str] | None]]:
    """Each ``device`` group with the node line its clause cites (``None``: none — its
    culprits' own device line comes first, or no one node of theirs has one)."""
    host = dict(zip(culprits, hosts, strict=True))
    return [
        (inc, None if inc.device_line else _node_cite(inc.culprits, host, nodes))
        for inc in groups
        if inc.kind == "device"
    ]


def cited_nodes(report: HangReport) -> dict[str, str]:
    """The nodes whose device line ``report.summary`` cites, each with that line (by host):
    what the Dataset's ``hang_node_cited`` marks, so that every output cites the same. A
    summary that does not say the line (written by an aorta before the rule cited it) cites
    nothing: it is what the page shows.

    >>> g = GroupIncident("0", "default_pg", (0, 1), "world", "device", 5, "all_reduce",
    ...                   culprits=(1,), completed=(0,))
    >>> r = HangReport(summary="rank 1 … — a device fault on its node: Xid 79", kind="device",
    ...                culprit_ranks=(1,), culprit_hosts=("n1",), groups=(g,),
    ...                nodes=(NodeEvidence("n1", "gpu_n1.txt", ("Xid 79",)),))
    >>> cited_nodes(r)
    {'n1': 'Xid 79'}
    """
    if len(report.culprit_hosts) != len(report.culprit_ranks):
        return {}  # a hand-made record: no host of its culprits is known for sure
    cites = _citations(report.culprit_ranks, report.culprit_hosts, report.groups, report.nodes)
    # Only what the summary says: a record an older aorta wrote (before a rule cited this
    # node) keeps its summary on the page, and the other outputs must not cite beside it.
    return {c[0]: c[1] for _, c in cites if c and printable(c[1]) in report.summary}


def _device(
    culprits: Sequence[int],
    hosts: Sequence[str | None],
    shown: Sequence[GroupIncident],
    nodes: Sequence[NodeEvidence] = (),
) -> str:
    """The ``device`` summary: each stalled rank, what it never finished and who did, and
    the groups that wait on them."""
    host = dict(zip(culprits, hosts, strict=True))
    cites = _citations(culprits, hosts, shown, nodes)
    faulted = [inc for inc, _ in cites]
    waiting = [i for i in shown if i.kind != "device" and i.waits_on]
    parts = []
    for inc, cite in cites:
        who = _who(inc.culprits, [host.get(r) for r in inc.culprits])
        if inc.completed:
            verb, peers = "never finished", f" while {_words(inc.completed)} completed it"
        elif not set(inc.culprits) & set(inc.waiting):
            verb = "never launched"
            peers = f" while {_ranks(inc.waiting, 'wait')} in it (its device is busy or dead)"
        else:
            others = [r for r in inc.waiting if r not in inc.culprits]
            verb = "entered and never finished"
            peers = f" ({_ranks(others, 'wait')} in it too)" if others else ""
        clause = f"{who} {verb} {_coll(inc)}{_label(inc)}{peers}"
        if len(faulted) == 1 and waiting:
            # Its own other groups, then every group that waits on it through them.
            mine = [i for i in waiting if set(i.ranks) & set(inc.culprits)]
            it = "it" if len(inc.culprits) == 1 else "them"
            its = "its" if len(inc.culprits) == 1 else "their"
            n = len(mine)
            clause += f"; {its} other {n} group{'s' if n != 1 else ''} wait{'s' if n == 1 else ''} on {it}"
            if len(waiting) > n:
                clause += f" ({len(waiting)} groups in all)"
        if inc.device_line:
            clause += f" — {device_fault(len(inc.culprits), inc.device_line)}"
        elif cite:
            clause += f" — {node_fault([host.get(r) for r in inc.culprits], *cite)}"
        else:
            clause += f" — {'a device fault' if len(inc.culprits) == 1 else 'device faults'}?"
        parts.append(clause)
    line = "; ".join(parts)
    if len(faulted) > 1 and waiting:
        on = sorted({r for i in waiting for r in i.waits_on})
        n = len(waiting)
        line += f"; {_waiting_groups(n, on)}"
    return line


def _waiting_groups(n: int, on: Sequence[int]) -> str:
    """``28 groups wait on ranks 5, 11``.

    >>> _waiting_groups(28, [5, 11]), _waiting_groups(1, [5])
    ('28 groups wait on ranks 5, 11', '1 group waits on rank 5')
    """
    who = f"rank {on[0]}" if len(on) == 1 else f"ranks {', '.join(str(r) for r in on)}"
    if len(on) > 4:
        who = f"ranks {rank_list(on)}"
    return f"{n} group{'s' if n != 1 else ''} wait{'s' if n == 1 else ''} on {who}"


def summary(
    kind: Kind,
    culprits: Sequence[int],
    hosts: Sequence[str | None],
    frames: Sequence[CulpritFrame],
    primary: GroupIncident | None,
    shown: Sequence[GroupIncident],
    *,
    ranks: int,
    nodes: Sequence[NodeEvidence] = (),
) -> str:
    """The report's one line (see the module's docstring)."""
    if primary is None:
        return f"no divergence found in the evidence of {ranks} rank{'s' if ranks != 1 else ''}"
    who = _who(culprits, hosts) if culprits else ""
    if kind == "device":
        return _device(culprits, hosts, shown, nodes)
    if kind == "cycle":
        parts = [f"{_ranks(i.waiting, 'wait')} in {_coll(i)}{_label(i)}" for i in shown[:3]]
        return (
            f"{who} wait for each other across groups: "
            + "; ".join(parts)
            + (" (collectives issued in a different order?)")
        )
    line = _headline(kind, primary, who, frames)
    others = [i for i in shown if i is not primary and i.waiting]
    if others:
        first = others[0]
        blamed = f" for {_words(first.culprits)}" if first.culprits else ""
        more = (
            f" (+{len(others) - 1} more group{'s' if len(others) > 2 else ''})"
            if len(others) > 1
            else ""
        )
        line += f"; {_ranks(first.waiting, 'wait')} in {_coll(first)}{_label(first)}{blamed}{more}"
    return line


def _row(inc: GroupIncident) -> list[str]:
    behind = ",".join(f"{r}(#{s})" for r, s in inc.behind)
    exited = ",".join(f"{r}({_exit_text(c)})" for r, c in inc.exited)
    seq = "-" if inc.seq is None else f"{inc.seq}{' p2p' if inc.p2p else ''}"
    return [
        inc.label if inc.name != UNNAMED_GROUP else "(stacks)",
        seq,
        inc.op or "-",
        sizes_text(inc.sizes, inc.dtypes),
        rank_list(inc.waiting) or "-",
        rank_list(inc.missing) or "-",
        behind or "-",
        exited or "-",
        rank_list(inc.unknown) or "-",
        inc.kind,
        rank_list(inc.culprits) or "-",
    ]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def text(report: HangReport) -> str:
    """The incident table, the culprits' frames, the evidence per rank and the notes.

    >>> print(text(HangReport(summary="no divergence found", kind="none")))
    hang: no divergence found
    """
    lines = [f"hang: {printable(report.summary)}"]
    device = any(inc.kind == "device" for inc in report.groups)
    # Groups that merely wait on a device culprit are one line, not one row each.
    rows = [inc for inc in report.groups if not (device and inc.waits_on and inc.kind != "device")]
    collapsed = [inc for inc in report.groups if inc not in rows]
    if report.groups:
        head = ["group", "seq", "op", "sizes/dtypes", "waiting", "missing", "behind"]
        head += ["exited", "no position", "kind", "culprits"]
        lines += ["", *_table([head, *(_row(inc) for inc in rows)])]
        if collapsed:
            on = sorted({r for inc in collapsed for r in inc.waits_on})
            lines.append(f"({_waiting_groups(len(collapsed), on)})")
        for inc in report.groups:
            for v in inc.mismatch:
                lines.append(f"  {inc.label} #{inc.diverged_at}: {_variant(v)}")
        # The nodes' own words, beside the table: no rank's, so in no row.
        lines += _node_lines(report.nodes)
        for inc in report.groups:
            if inc.evidence:
                lines += ["", f"device evidence, {inc.label} #{inc.seq}"]
                lines += [f"  {printable(e)}" for e in inc.evidence]
            if inc.suspects:
                lines += ["", f"suspects, {inc.label} #{inc.seq} (most telling first)"]
                lines += [f"  rank {r}: {printable(why)}" for r, why in inc.suspects]
    else:
        lines += _node_lines(report.nodes)
    if report.frames:
        lines += ["", "culprit frames"]
        for f in report.frames:
            extra = [f.thread, f.source] + (["holds the GIL"] if f.owns_gil else [])
            extra += [f"in {f.in_collective}"] if f.in_collective else []
            lines.append(
                f"  rank {f.rank}  {printable(f.where)}  ({'; '.join(e for e in extra if e)})"
            )
    if report.evidence:
        lines += ["", "evidence"]
        for run in _runs(report.evidence):
            e = run[0]
            if _nothing(e):  # a run of ranks with nothing is one line: 999 ranks, not 999 lines
                lines.append(f"  {_words([r.rank for r in run])}  none")
                continue
            who = " ".join(x for x in (e.host or "", f"pid {e.pid}" if e.pid else "") if x)
            gone = f"  exited ({_exit_text(e.exited)})" if e.exited is not None else ""
            lines.append(f"  rank {e.rank}  {', '.join(e.kinds)}{'  ' + who if who else ''}{gone}")
    if report.notes:
        lines += ["", "notes"]
        lines += [f"  {printable(n)}" for n in report.notes]
    return "\n".join(lines)


def _node_lines(nodes: Sequence[NodeEvidence]) -> list[str]:
    """``node <host>: <line>`` for each device line of each node (nodes without any: none).

    >>> _node_lines([NodeEvidence("gpu-r3", "gpu_gpu-r3.txt", ("NVRM: Xid 79",)),
    ...              NodeEvidence("gpu-r4", "gpu_gpu-r4.txt")])
    ['', 'node gpu-r3: NVRM: Xid 79']
    """
    out = [f"node {printable(n.host)}: {printable(line)}" for n in nodes for line in n.device_lines]
    return ["", *out] if out else []


def _nothing(item: EvidenceItem) -> bool:
    """A rank the analysis had nothing of (the world size counts it; no file named it)."""
    return item.kinds == ("none",) and not (item.host or item.pid or item.files or item.notes)


def _runs(items: Sequence[EvidenceItem]) -> list[list[EvidenceItem]]:
    """The items in order, each rank with evidence alone and consecutive ranks with nothing
    together."""
    runs: list[list[EvidenceItem]] = []
    for item in items:
        last = runs[-1][-1] if runs else None
        if last and _nothing(item) and _nothing(last) and item.rank == last.rank + 1:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def json_ready(report: HangReport) -> dict[str, Any]:
    """The report as ``aorta hang analyze --json`` prints it: :meth:`HangReport.to_dict`, with
    the ranks the analysis had nothing of out of ``evidence`` and in ``no_evidence``, as
    ranges (``"1-999"``; ``""`` for none): a job of 1,000 ranks with two dumps is two items,
    not 1,000. :meth:`HangReport.from_dict` reads it back (without those ranks' items).

    >>> from aorta.hang import RankEvidence, analyze
    >>> report = analyze([RankEvidence(r, log_lines=("step 1",)) for r in (0, 5, 9)])
    >>> data = json_ready(report)
    >>> [e["rank"] for e in data["evidence"]], data["no_evidence"]
    ([0, 5, 9], '1-4,6-8')
    >>> print(text(report).split("\\nevidence\\n")[1])
      rank 0  logs
      ranks 1-4  none
      rank 5  logs
      ranks 6-8  none
      rank 9  logs
    """
    data = report.to_dict()
    nothing = [e.rank for e in report.evidence if _nothing(e)]
    data["evidence"] = [
        d for e, d in zip(report.evidence, data["evidence"], strict=True) if not _nothing(e)
    ]
    data["no_evidence"] = rank_list(nothing)
    return data
