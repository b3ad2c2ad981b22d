"""Who hung, and where, per cell: each hung trial's incident (:mod:`aorta.hang`, taken before
the kill) aggregated over the cell's trials (pure).

Reads the Dataset's ``hang_*`` variables (cell × trial: each trial's
:class:`~aorta.hang.HangReport` fields; ``hang_kind`` ``""`` where nothing was captured).
Each hung trial is a :class:`HangPattern` of one trial; trials whose incidents name the same
culprit ranks, kind, collective and group, and the same culprit frame, are one *pattern*; a
cell's :class:`HangIncidents` lists its patterns, the most frequent first, and says the first in one line ("in 7/8 hung trials rank 5
(node gpu-r3) never reached all_to_all #4027 (ep_group, ranks 0-7) — at moe.py:212 in
dispatch"), which the findings append to the cell's hang finding.

Examples
--------
>>> from aorta.matrix.dataset import build_dataset
>>> from aorta.store.record import TrialRecord
>>> inc = {"summary": "…", "kind": "missing", "culprit_ranks": [2], "culprit_hosts": ["gpu-r3"],
...        "op": "all_reduce", "seq": 5, "process_group": "default_pg, ranks 0-3",
...        "frames": [{"rank": 2, "where": "train.py:41 in step", "source": "stacks"}]}
>>> recs = [TrialRecord(cell="a", cell_id="", trial=t, status="timeout", passed=False,
...                     main_work_started=True, forensics=inc if t < 2 else None) for t in range(3)]
>>> ds = build_dataset([{"name": "a", "trials": 3}], recs)
>>> print(hang_incidents(ds)["a"].line())
in 2/3 hung trials rank 2 (node gpu-r3) never reached all_reduce #5 (default_pg, ranks 0-3) — at train.py:41 in step
>>> ds.hang_culprit_ranks.sel(cell="a").values.tolist()
[[2], [2], [-1]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import xarray as xr

from aorta.hang.render import device_fault, node_fault, node_host

__all__ = ["HangIncidents", "HangPattern", "NodeCite", "hang_incidents", "pattern_text"]


@dataclass(frozen=True)
class NodeCite:
    """A node whose device line a trial's summary cites (``hang_node_cited``): its host, the
    line, and the hosts of the culprits on it, as the ranks named them."""

    host: str
    line: str
    culprit_hosts: tuple[str, ...]

    def text(self) -> str:
        """The summary's words for it (:func:`aorta.hang.render.node_fault`).

        >>> NodeCite("gpu-r3", "NVRM: Xid 79", ("gpu-r3",)).text()
        'a device fault on its node: NVRM: Xid 79'
        """
        return node_fault(self.culprit_hosts, self.host, self.line)


@dataclass(frozen=True)
class HangPattern:
    """Trials of one cell whose incidents agree: the same culprits, kind, op, group, frame."""

    kind: str
    culprit_ranks: tuple[int, ...]
    culprit_hosts: tuple[str, ...]
    op: str | None
    process_group: str | None
    where: str | None
    trials: tuple[int, ...]
    #: The sequence numbers of the collective, over the pattern's trials (lowest, highest).
    seq: tuple[int, int] | None = None
    #: One trial's whole summary (the first's), for a reader who wants every rank named.
    summary: str = ""
    #: The nodes whose device lines the first trial's summary cites (trials of one pattern
    #: cite the same nodes; their lines' timestamps differ).
    nodes: tuple[NodeCite, ...] = ()
    #: Each culprit's own device line that the first trial's summary cites (by position, as
    #: ``culprit_ranks``; ``""``: none): ``hang_device_line``.
    device_lines: tuple[str, ...] = ()

    def faults(self) -> tuple[str, ...]:
        """The summary's words for the culprits' own device lines, one sentence per line
        (:func:`aorta.hang.render.device_fault`; culprits that share a line, as a group's
        do, are one sentence), then the nodes' (:meth:`NodeCite.text`).

        >>> HangPattern("device", (1, 2), (), "broadcast", None, None, (0,),
        ...             device_lines=("CUDA error: x", "CUDA error: x")).faults()
        ('device faults: CUDA error: x',)
        """
        shared: dict[str, int] = {}
        for line in self.device_lines:
            if line:
                shared[line] = shared.get(line, 0) + 1
        own = tuple(device_fault(n, line) for line, n in shared.items())
        return own + tuple(n.text() for n in self.nodes)


@dataclass(frozen=True)
class HangIncidents:
    """A cell's hung trials and what their evidence says (``hung``: trials that hung or hit
    the deadline; ``captured``: those with an incident; ``patterns``: most frequent first)."""

    cell: str
    hung: int
    captured: int
    patterns: tuple[HangPattern, ...] = field(default=())

    def line(self) -> str:
        """The first pattern in one line, with how many of the hung trials it covers; ``""``
        when none gave evidence (a run recorded before forensics, or with them off)."""
        if not self.patterns:
            return ""
        p = self.patterns[0]
        return f"in {len(p.trials)}/{self.hung} hung trials {pattern_text(p)}"


#: How each kind of incident reads: the words before the collective, and after it.
_VERBS = {
    "device": ("never finished", " its peers completed (a device fault?)"),
    "missing": ("never reached", ""),
    "behind": ("was behind when the others waited in", ""),
    "extra": ("issued an extra", " the others never did"),
    "mismatch": ("entered", " with other sizes or dtypes than the others"),
    "exited": ("had exited before", ""),
    "gil": ("held the GIL (no dump) while the others waited in", ""),
    "no_dump": ("gave no dump while the others waited in", ""),
    "p2p": ("never posted its side of", ""),
    "stuck": ("waited with every other rank in", ""),
    "cycle": ("waited in a cycle with another group at", ""),
}


def _ranks(p: HangPattern) -> str:
    if not p.culprit_ranks:
        return "no rank"
    hosts = [h for h in p.culprit_hosts if h]
    names = ", ".join(str(r) for r in p.culprit_ranks)
    who = f"rank {names}" if len(p.culprit_ranks) == 1 else f"ranks {names}"
    if hosts and len(set(hosts)) == 1:
        who += f" (node {hosts[0]})"
    elif hosts:
        who += f" (nodes {', '.join(dict.fromkeys(hosts))})"
    return who


def pattern_text(p: HangPattern) -> str:
    """One pattern as a phrase: who, what they did, which collective, where.

    >>> pattern_text(HangPattern("gil", (1,), (), "all_reduce", "default_pg", "x.py:3 in f",
    ...                          (0, 1), (4, 6)))
    'rank 1 held the GIL (no dump) while the others waited in all_reduce #4–#6 (default_pg) — at x.py:3 in f'
    """
    if p.kind == "none" or not p.op:
        text = (
            f"{_ranks(p)}: {p.summary}" if p.culprit_ranks else p.summary or "no divergence found"
        )
    else:
        seq = ""
        if p.seq is not None:
            lo, hi = p.seq
            seq = f" #{lo}" if lo == hi else f" #{lo}–#{hi}"
        group = f" ({p.process_group})" if p.process_group else ""
        before, after = _VERBS.get(p.kind, (p.kind, ""))
        if p.kind == "device" and (faults := p.faults()):
            # The summary's own words for the culprits' and the nodes' lines: one sentence
            # wherever it is read.
            after = " its peers completed — " + "; ".join(faults)
        text = f"{_ranks(p)} {before} {p.op}{seq}{group}{after}"
    if p.where:
        text += f" — at {p.where}"
    return text


def _key(p: HangPattern) -> tuple[Any, ...]:
    nodes = tuple(n.host for n in p.nodes)
    # Whether each culprit's own line is cited, not the line: a line's pid, address or time
    # differs between trials of one fault (as a node's line's timestamp does).
    own = tuple(bool(line) for line in p.device_lines)
    return (p.kind, p.culprit_ranks, p.culprit_hosts, p.op, p.process_group, p.where, nodes, own)


def _patterns(found: Sequence[HangPattern]) -> tuple[HangPattern, ...]:
    """Trials' patterns (one trial each) merged where they agree, the most frequent first."""
    groups: dict[tuple[Any, ...], list[HangPattern]] = {}
    for p in found:
        groups.setdefault(_key(p), []).append(p)
    out = []
    for items in groups.values():
        seqs = [s for p in items if p.seq is not None for s in p.seq]
        out.append(
            replace(
                items[0],
                trials=tuple(t for p in items for t in p.trials),
                seq=(min(seqs), max(seqs)) if seqs else None,
            )
        )
    return tuple(sorted(out, key=lambda p: (-len(p.trials), p.trials)))


def _trial_patterns(ds: xr.Dataset) -> list[list[HangPattern | None]]:
    """Per cell, per trial: its incident as a pattern of one trial (``None``: nothing was
    captured), read from the ``hang_*`` variables."""
    ct = ("cell", "trial")

    def text(name: str) -> Any:
        return ds[f"hang_{name}"].transpose(*ct).values.astype(str)

    kind, op, group, frame, summary = (text(k) for k in ("kind", "op", "group", "frame", "summary"))
    seq = ds.hang_seq.transpose(*ct).values
    ranks = ds.hang_culprit_ranks.transpose(*ct, "culprit").values
    hosts = ds.hang_culprit_hosts.transpose(*ct, "culprit").values.astype(str)
    # A Dataset of version 3 or older kept no culprit's own line apart from its summary.
    device = (
        ds.hang_device_line.transpose(*ct, "culprit").values.astype(str)
        if "hang_device_line" in ds
        else np.full(hosts.shape, "", dtype=object)
    )
    nodes = _cites(ds)
    trials = [int(t) for t in ds.trial.values.tolist()]
    out: list[list[HangPattern | None]] = []
    for i in range(kind.shape[0]):
        row: list[HangPattern | None] = []
        for j, t in enumerate(trials):
            n = int((ranks[i, j] >= 0).sum())
            row.append(
                HangPattern(
                    kind=str(kind[i, j]),
                    culprit_ranks=tuple(int(r) for r in ranks[i, j, :n]),
                    culprit_hosts=tuple(str(h) for h in hosts[i, j, :n] if h),
                    op=str(op[i, j]) or None,
                    process_group=str(group[i, j]) or None,
                    where=str(frame[i, j]) or None,
                    trials=(t,),
                    seq=(int(seq[i, j]),) * 2 if seq[i, j] >= 0 else None,
                    summary=str(summary[i, j]),
                    nodes=nodes(i, j, hosts[i, j, :n]),
                    device_lines=tuple(str(line) for line in device[i, j, :n]),
                )
                if kind[i, j]
                else None
            )
        out.append(row)
    return out


_Cites = Callable[[int, int, Sequence[str]], tuple["NodeCite", ...]]


def _cites(ds: xr.Dataset) -> _Cites:
    """A reader of the ``hang_node_*`` variables: (cell index, trial index, the trial's
    culprit hosts) → the nodes its summary cites (none in a Dataset without them)."""
    if "hang_node_cited" not in ds:
        return lambda i, j, culprits: ()  # a Dataset of version 2 or older, read as it is
    dims = ("cell", "trial", "node")
    hosts = ds.hang_node_hosts.transpose(*dims).values.astype(str)
    lines = ds.hang_node_line.transpose(*dims).values.astype(str)
    cited = ds.hang_node_cited.transpose(*dims).values

    def read(i: int, j: int, culprits: Sequence[str]) -> tuple[NodeCite, ...]:
        known = [str(h) for h in hosts[i, j] if h]
        return tuple(
            NodeCite(
                str(hosts[i, j, k]),
                str(lines[i, j, k]),
                tuple(str(h) for h in culprits if node_host(str(h), known) == hosts[i, j, k]),
            )
            for k in range(hosts.shape[2])
            if cited[i, j, k]
        )

    return read


def hang_incidents(ds: xr.Dataset) -> dict[str, HangIncidents]:
    """Per cell with a hung trial (``failure_kind`` hang, or a ``timeout``), its incidents."""
    if "hang_kind" not in ds or "status" not in ds:
        return {}
    cells = [str(c) for c in ds.cell.values.tolist()]
    trials = [int(t) for t in ds.trial.values.tolist()]
    status = ds.status.transpose("cell", "trial").values.astype(str)
    per_trial = _trial_patterns(ds)
    out: dict[str, HangIncidents] = {}
    for i, cell in enumerate(cells):
        hung = [j for j in range(len(trials)) if status[i, j] == "timeout"]
        found = [p for j in hung if (p := per_trial[i][j]) is not None]
        if hung:
            out[cell] = HangIncidents(cell, len(hung), len(found), _patterns(found))
    return out
