"""Which rank ran out of memory, and which layer went non-finite first, per cell (pure).

Reads the Dataset's ``oom`` and ``numerics`` variables (cell × trial, JSON: the record's
``world_size`` and per-rank events, :mod:`aorta.run.oom` and :mod:`aorta.run.numerics`).

*Out of memory*: per cell, the rank that ran out in the most trials, with its figures over
those trials (a range where they differ) and what they suggest: the request would have fit in
the free and the cached-but-unallocated memory together (fragmentation: expandable segments),
or it is larger than the whole device. *Numerics*: per trial the rank whose first non-finite
output came at the earliest step; per cell the commonest (rank, module, class, kind, inputs)
over those trials, with its steps. :func:`with_rank_causes` puts both lines in a comparison
frame (``oom_incident``, ``numerics_incident``), where :func:`aorta.matrix.findings.findings`
turns them into ``oom`` and ``numerics`` findings.

Examples
--------
>>> from aorta.matrix.dataset import build_dataset
>>> from aorta.store.record import OomEvent, NonFinite, TrialRecord
>>> e = OomEvent(rank=3, kind="cuda", requested_bytes=2 << 30, free_bytes=int(1.2 * 2**30),
...              total_bytes=int(79.15 * 2**30), reserved_unallocated_bytes=int(2.11 * 2**30))
>>> recs = [TrialRecord(cell="xnack", cell_id="", trial=t, status="workload_failed", passed=False,
...         world_size=8, oom=[e] if t < 6 else []) for t in range(8)]
>>> ds = build_dataset([{"name": "xnack", "trials": 8}], recs)
>>> print(oom_incidents(ds)["xnack"].line())
out of memory on rank 3 in 6/8 trials (tried to allocate 2.00 GiB with 1.20 GiB free of 79.15 GiB; 2.11 GiB reserved but unallocated — fragmentation: try expandable_segments); the other 7 ranks never
>>> n = NonFinite(rank=5, step=118, module="layers.7.attn.proj", cls="Linear", kind="nan")
>>> recs = [TrialRecord(cell="tf32_off", cell_id="", trial=t, status="ok", passed=True, world_size=8,
...         numerics=[n] if t % 2 else []) for t in range(8)]
>>> ds = build_dataset([{"name": "tf32_off", "trials": 8}], recs)
>>> print(numerics_incidents(ds)["tf32_off"].line())
rank 5's first non-finite output at step 118 in `layers.7.attn.proj` (Linear), nan, inputs finite, in 4/8 trials
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

__all__ = [
    "MemoryOutlier",
    "NumericsIncidents",
    "OomIncidents",
    "format_bytes",
    "memory_outliers",
    "numerics_incidents",
    "oom_incidents",
    "with_rank_causes",
]

_UNITS = (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def format_bytes(n: float) -> str:
    """Bytes as PyTorch's OOM message writes them (``2.00 GiB``, ``512 bytes``).

    >>> format_bytes(2 << 30), format_bytes(3.5 * 2**20), format_bytes(12)
    ('2.00 GiB', '3.50 MiB', '12 bytes')
    """
    for unit, size in _UNITS:
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} bytes"


def _range(values: Sequence[int]) -> str:
    lo, hi = min(values), max(values)
    if lo == hi:
        return format_bytes(lo)
    return f"{format_bytes(lo)}–{format_bytes(hi)}"


def _payloads(ds: xr.Dataset, name: str) -> dict[str, list[dict[str, Any] | None]]:
    """Per cell, each trial's payload (``None`` where the trial has none)."""
    cells = [str(c) for c in ds.cell.values.tolist()]
    if name not in ds:
        return {}
    values = ds[name].transpose("cell", "trial").values
    out: dict[str, list[dict[str, Any] | None]] = {}
    for i, cell in enumerate(cells):
        row: list[dict[str, Any] | None] = []
        for text in values[i]:
            try:
                row.append(json.loads(text) if text else None)
            except (TypeError, ValueError):
                row.append(None)
        out[cell] = row
    return out


def _ran(ds: xr.Dataset) -> dict[str, int]:
    """Trials per cell that ran (passed or failed)."""
    outcome = ds.outcome.transpose("cell", "trial").values.astype(str)
    ran = np.isin(outcome, ["passed", "failed"]).sum(axis=1)
    return {str(c): int(n) for c, n in zip(ds.cell.values.tolist(), ran, strict=True)}


def _world(payloads: Sequence[dict[str, Any] | None]) -> int:
    sizes = [int(p.get("world_size") or 1) for p in payloads if p]
    return max(sizes, default=1)


def _others(world: int, named: int, verb: str) -> str:
    if world > named:
        left = world - named
        return f"; the other {left} rank{'s' if left > 1 else ''} never"
    return "" if world > 1 else f"; no other rank {verb}"


@dataclass(frozen=True)
class OomIncidents:
    """A cell's out-of-memory trials: per rank how many trials it ran out in (``ranks``,
    most first), the top rank's events (``events``), ``ran`` trials, ``world_size``."""

    cell: str
    ran: int
    world_size: int
    ranks: tuple[tuple[int, int], ...]
    events: tuple[dict[str, Any], ...] = field(default=())

    @property
    def rank(self) -> int:
        """The rank that ran out in the most trials (the lowest on a tie)."""
        return self.ranks[0][0]

    @property
    def count(self) -> int:
        return self.ranks[0][1]

    def figures(self) -> str:
        """The top rank's figures over its trials, and what they suggest; ``""`` for none."""
        ev = self.events

        def values(key: str) -> list[int]:
            return [int(e[key]) for e in ev if e.get(key) is not None]

        asked, free, total = values("requested_bytes"), values("free_bytes"), values("total_bytes")
        unalloc = values("reserved_unallocated_bytes")
        parts = []
        if asked:
            head = f"tried to allocate {_range(asked)}"
            if free:
                head += f" with {_range(free)} free"
            if total:
                head += f" of {_range(total)}"
            parts.append(head)
        if unalloc:
            parts.append(f"{_range(unalloc)} reserved but unallocated")
        advice = ""
        if asked and free and unalloc and max(free) + max(unalloc) >= min(asked):
            advice = " — fragmentation: try expandable_segments"
        elif asked and total and min(asked) > max(total):
            advice = " — larger than the whole device"
        kinds = sorted({str(e.get("kind")) for e in ev if e.get("kind")})
        if not parts and kinds:
            parts.append(f"{'/'.join(kinds)}: {ev[0].get('line', '')[:160]}")
        return f"{'; '.join(parts)}{advice}" if parts else ""

    def line(self) -> str:
        """The cell's OOMs in one line (which rank, in how many trials, asking how much)."""
        many = [r for r, n in self.ranks if n == self.count]
        who = f"rank {self.rank}" if len(many) == 1 else f"ranks {', '.join(map(str, many))}"
        figures = self.figures()
        text = f"out of memory on {who} in {self.count}/{self.ran} trials"
        text += f" ({figures})" if figures else ""
        named = len(self.ranks)
        if named > len(many):
            rest = ", ".join(f"rank {r} in {n}" for r, n in self.ranks if n != self.count)
            text += f"; also {rest}"
        return text + _others(self.world_size, named, "ran out")


def oom_incidents(ds: xr.Dataset) -> dict[str, OomIncidents]:
    """Per cell that ran out of memory in any trial, its :class:`OomIncidents`."""
    ran = _ran(ds)
    out: dict[str, OomIncidents] = {}
    for cell, payloads in _payloads(ds, "oom").items():
        per_rank: Counter[int] = Counter()
        events: dict[int, list[dict[str, Any]]] = {}
        for p in payloads:
            for e in (p or {}).get("events", []):
                rank = int(e.get("rank") or 0)
                per_rank[rank] += 1  # a trial's record holds one event per rank at most
                events.setdefault(rank, []).append(e)
        if not per_rank:
            continue
        order = tuple(sorted(per_rank.items(), key=lambda kv: (-kv[1], kv[0])))
        out[cell] = OomIncidents(
            cell,
            max(ran.get(cell, 0), order[0][1]),
            _world(payloads),
            order,
            tuple(events[order[0][0]]),
        )
    return out


@dataclass(frozen=True)
class NumericsIncidents:
    """A cell's first non-finite outputs: per trial the earliest rank's finding, grouped by
    (rank, module, class, kind, inputs finite), the commonest first (``patterns``, each with
    its steps), over ``ran`` trials."""

    cell: str
    ran: int
    world_size: int
    patterns: tuple[tuple[tuple[int, str, str, str, bool], tuple[int, ...]], ...]

    @property
    def rank(self) -> int:
        return self.patterns[0][0][0]

    @property
    def count(self) -> int:
        return len(self.patterns[0][1])

    def line(self) -> str:
        """The commonest pattern in one line (who, at which step, in which module)."""
        (rank, module, cls, kind, finite), steps = self.patterns[0]
        lo, hi = min(steps), max(steps)
        at = f"step {lo}" if lo == hi else f"steps {lo}–{hi}"
        where = f"`{module}` ({cls})" if module else f"the root module ({cls})"
        inputs = "inputs finite" if finite else "inputs already non-finite"
        text = (
            f"rank {rank}'s first non-finite output at {at} in {where}, {kind}, {inputs}, "
            f"in {len(steps)}/{self.ran} trials"
        )
        if len(self.patterns) > 1:
            text += f" ({len(self.patterns) - 1} other pattern(s) in the other trials)"
        return text


def numerics_incidents(ds: xr.Dataset) -> dict[str, NumericsIncidents]:
    """Per cell where a rank's output went non-finite in any trial, its
    :class:`NumericsIncidents`."""
    ran = _ran(ds)
    out: dict[str, NumericsIncidents] = {}
    for cell, payloads in _payloads(ds, "numerics").items():
        groups: dict[tuple[int, str, str, str, bool], list[int]] = {}
        for p in payloads:
            events = (p or {}).get("events", [])
            if not events:
                continue
            e = min(events, key=lambda x: (int(x.get("step", 0)), int(x.get("rank") or 0)))
            key = (
                int(e.get("rank") or 0),
                str(e.get("module", "")),
                str(e.get("cls", "")),
                str(e.get("kind", "nan")),
                bool(e.get("inputs_finite", True)),
            )
            groups.setdefault(key, []).append(int(e.get("step", 0)))
        if not groups:
            continue
        order = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        total = sum(len(v) for v in groups.values())
        out[cell] = NumericsIncidents(
            cell,
            max(ran.get(cell, 0), total),
            _world(payloads),
            tuple((k, tuple(v)) for k, v in order),
        )
    return out


@dataclass(frozen=True)
class MemoryOutlier:
    """A cell whose rank ``rank`` had the largest peak of a memory metric (``metric``) by at
    least the band in ``count`` of its ``of`` trials with traces: ``excess_pct`` (median over
    those trials) above the other ranks' median, ``peak_bytes`` its median peak."""

    cell: str
    metric: str
    rank: int
    count: int
    of: int
    excess_pct: float
    peak_bytes: float
    others_bytes: float

    def line(self) -> str:
        what = "allocated" if self.metric == "peak_allocated_bytes" else "reserved"
        return (
            f"rank {self.rank}'s peak {what} is {self.excess_pct:.0f}% above the other ranks' "
            f"median in {self.count}/{self.of} trials ({format_bytes(self.peak_bytes)} against "
            f"{format_bytes(self.others_bytes)}; traces' [memory] events)"
        )


def memory_outliers(
    ds: xr.Dataset, *, metric: str = "peak_allocated_bytes", band: float = 0.10
) -> dict[str, MemoryOutlier]:
    """Per cell, the rank whose peak memory (``metric``: ``peak_allocated_bytes`` or
    ``peak_reserved_bytes``, from ``load_run(traces=True)``) stood ``band`` or more above the
    other ranks' median in a strict majority of its trials with a peak on every rank (as
    :mod:`aorta.matrix.stragglers` names a rank).

    >>> import numpy as np, xarray as xr
    >>> peaks = np.array([[[1.0, 1.0, 1.2, 1.0]] * 3]) * 2**30
    >>> ds = xr.Dataset({"peak_allocated_bytes": (("cell", "trial", "rank"), peaks)},
    ...                 coords={"cell": ["a"], "trial": [0, 1, 2], "rank": [0, 1, 2, 3]})
    >>> print(memory_outliers(ds)["a"].line())
    rank 2's peak allocated is 20% above the other ranks' median in 3/3 trials (1.20 GiB against 1.00 GiB; traces' [memory] events)
    """
    if metric not in ds or "rank" not in ds[metric].dims:
        return {}
    values = ds[metric].transpose("cell", "trial", "rank").values.astype(float)
    out: dict[str, MemoryOutlier] = {}
    for i, cell in enumerate(str(c) for c in ds.cell.values.tolist()):
        tops: list[tuple[int, float, float, float]] = []
        seen = 0
        for row in values[i]:
            if row.size < 2 or not np.isfinite(row).all() or row.max() <= 0:
                continue
            seen += 1
            top = np.flatnonzero(row == row.max())
            if len(top) != 1:
                continue
            rank = int(top[0])
            others = float(np.median(np.delete(row, rank)))
            if others > 0 and row[rank] / others - 1 >= band:
                tops.append((rank, row[rank] / others - 1, float(row[rank]), others))
        if not tops:
            continue
        counts = Counter(t[0] for t in tops)
        rank, n = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if 2 * n <= seen:
            continue
        mine = [t for t in tops if t[0] == rank]
        out[cell] = MemoryOutlier(
            cell,
            metric,
            rank,
            n,
            seen,
            float(np.median([t[1] for t in mine]) * 100),
            float(np.median([t[2] for t in mine])),
            float(np.median([t[3] for t in mine])),
        )
    return out


def with_rank_causes(df: pd.DataFrame, ds: xr.Dataset) -> pd.DataFrame:
    """``df`` (a frame indexed by cell) with ``oom_incident`` / ``oom_rank`` / ``oom_trials``,
    the same for ``numerics`` and ``memory`` (:func:`memory_outliers`; ``""`` / -1 / 0 where
    none), what makes
    :func:`aorta.matrix.findings.findings` list them; keeps ``df.attrs``."""
    ooms, nums = oom_incidents(ds), numerics_incidents(ds)
    out = df.copy()
    cells = [str(c) for c in out.index]
    out["oom_incident"] = [ooms[c].line() if c in ooms else "" for c in cells]
    out["oom_rank"] = [ooms[c].rank if c in ooms else -1 for c in cells]
    out["oom_trials"] = [ooms[c].count if c in ooms else 0 for c in cells]
    out["numerics_incident"] = [nums[c].line() if c in nums else "" for c in cells]
    out["numerics_rank"] = [nums[c].rank if c in nums else -1 for c in cells]
    out["numerics_trials"] = [nums[c].count if c in nums else 0 for c in cells]
    mem = memory_outliers(ds)
    out["memory_incident"] = [mem[c].line() if c in mem else "" for c in cells]
    out["memory_rank"] = [mem[c].rank if c in mem else -1 for c in cells]
    out["memory_trials"] = [mem[c].count if c in mem else 0 for c in cells]
    out.attrs = dict(df.attrs)
    return out
