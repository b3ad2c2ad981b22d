"""Vectorised joins between event rows: (rank, id) keys, threads, interval containment.

The trace's plumbing, shared by :class:`~aorta.trace.model.Trace` (a GPU op to its launching
runtime call, a runtime call to its CPU op) and the analyses (GPU work launched inside a host
op, nested ops on one thread).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from .model import Trace

__all__ = ["contained_ranges", "innermost", "lookup", "segment_argmax", "thread_groups"]

_SHIFT = 1 << 44  # ids below 2**44 and ranks below 2**19 pack into one int64


def _pack(rank: np.ndarray, key: np.ndarray) -> np.ndarray | None:
    if key.size and (key.max() >= _SHIFT or key.min() < 0):
        return None
    packed: np.ndarray = rank.astype(np.int64) * _SHIFT + key
    return packed


def lookup(
    rank: np.ndarray, key: np.ndarray, ref_rank: np.ndarray, ref_key: np.ndarray
) -> np.ndarray:
    """For each ``(rank, key)``, the position of the first equal ``(ref_rank, ref_key)``, or -1.

    Keys below zero never match.

    Examples
    --------
    >>> lookup(np.array([0, 0, 1]), np.array([5, 7, 5]), np.array([1, 0, 0]), np.array([5, 5, 5])).tolist()
    [1, -1, 0]
    """
    out = np.full(key.size, -1, dtype=np.int64)
    valid = key >= 0
    ref_valid = np.flatnonzero(ref_key >= 0)
    if not valid.any() or ref_valid.size == 0:
        return out
    left = _pack(rank[valid], key[valid])
    right = _pack(ref_rank[ref_valid], ref_key[ref_valid])
    if left is None or right is None:  # ids too large to pack: let pandas hash the pairs
        index = pd.MultiIndex.from_arrays([ref_rank[ref_valid], ref_key[ref_valid]])
        first = ~index.duplicated()
        pos = pd.MultiIndex.from_arrays(
            [ref_rank[ref_valid][first], ref_key[ref_valid][first]]
        ).get_indexer(pd.MultiIndex.from_arrays([rank[valid], key[valid]]))
        hit = pos >= 0
        found = np.full(pos.size, -1, dtype=np.int64)
        found[hit] = ref_valid[np.flatnonzero(first)[pos[hit]]]
        out[valid] = found
        return out
    order = np.argsort(right, kind="stable")
    sorted_right = right[order]
    pos = np.searchsorted(sorted_right, left)
    pos_clipped = np.minimum(pos, sorted_right.size - 1)
    hit = (pos < sorted_right.size) & (sorted_right[pos_clipped] == left)
    found = np.full(left.size, -1, dtype=np.int64)
    found[hit] = ref_valid[order[pos_clipped[hit]]]
    out[valid] = found
    return out


def contained_ranges(
    group: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    inner_group: np.ndarray,
    inner_start: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which inner points fall inside each outer interval of the same group.

    Returns ``(order, lo, hi)``: ``order`` sorts the inner points by (group, start); the points
    inside outer interval ``i`` are ``order[lo[i]:hi[i]]`` (``start <= inner_start <= end``).

    Examples
    --------
    >>> order, lo, hi = contained_ranges(np.array([0]), np.array([10]), np.array([20]),
    ...                                  np.array([0, 0, 1]), np.array([15, 25, 12]))
    >>> order[lo[0]:hi[0]].tolist()
    [0]
    """
    groups = np.sort(pd.unique(inner_group))  # few (threads): hashing beats sorting
    if inner_start.size > 1 and not bool(np.all(inner_start[1:] >= inner_start[:-1])):
        order = np.lexsort((inner_start, inner_group))
    elif groups.size <= 32:  # already in time order: gather each group's points
        order = np.concatenate(
            [np.flatnonzero(inner_group == v) for v in groups] or [np.empty(0, np.int64)]
        )
        order = order.astype(np.int64)
    else:
        order = np.argsort(inner_group, kind="stable")
    g, s = inner_group[order], inner_start[order]
    lo = np.empty(start.size, dtype=np.int64)
    hi = np.empty(start.size, dtype=np.int64)
    for value in np.sort(pd.unique(group)):
        outer = np.flatnonzero(group == value)
        a, b = np.searchsorted(g, value, side="left"), np.searchsorted(g, value, side="right")
        lo[outer] = a + np.searchsorted(s[a:b], start[outer], side="left")
        hi[outer] = a + np.searchsorted(s[a:b], end[outer], side="right")
    return order, lo, hi


def innermost(
    group: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    point_group: np.ndarray,
    point: np.ndarray,
) -> np.ndarray:
    """For each point, the index of the innermost interval of its group that contains it
    (``start <= point <= end``; the latest-starting, then the shortest), or -1 for none.

    One :func:`contained_ranges` and one sort over the (interval, point) pairs: as many as
    the points times their nesting depth.

    Examples
    --------
    >>> innermost(np.array([0, 0, 0, 1]), np.array([0, 2, 6, 0]), np.array([10, 5, 8, 10]),
    ...           np.array([0, 0, 0, 1, 2]), np.array([3, 9, 7, 3, 3])).tolist()
    [1, 0, 2, 3, -1]
    """
    out = np.full(point.size, -1, np.int64)
    if start.size == 0 or point.size == 0:
        return out
    order, lo, hi = contained_ranges(group, start, end, point_group, point)
    count = np.maximum(hi - lo, 0)
    interval = np.repeat(np.arange(start.size), count)
    if interval.size == 0:
        return out
    offsets = np.cumsum(count) - count
    inside = order[np.arange(interval.size) - offsets[interval] + lo[interval]]
    pick = np.lexsort((end[interval], -start[interval], inside))  # per point: innermost first
    inside, interval = inside[pick], interval[pick]
    first = np.r_[True, inside[1:] != inside[:-1]]
    out[inside[first]] = interval[first]
    return out


def segment_argmax(
    values: np.ndarray, lo: np.ndarray, hi: np.ndarray, labels: np.ndarray
) -> np.ndarray:
    """``labels`` at the largest of ``values[lo[i]:hi[i]]`` for each i (-1 for empty ranges).

    ``values`` must be non-negative (-1 is allowed too); ties go to the last position. One
    ``maximum.reduceat`` over (value, position) packed into an int64; ``lo``/``hi``
    interleaved so every other result is a wanted range. With :func:`contained_ranges`, the
    longest inner event inside each outer one.

    Examples
    --------
    >>> segment_argmax(np.array([3, 9, 1, 7]), np.array([0, 2, 1]), np.array([4, 4, 1]),
    ...                np.array([10, 11, 12, 13])).tolist()
    [11, 13, -1]
    """
    out = np.full(lo.size, -1, np.int64)
    some = np.flatnonzero(hi > lo)
    if some.size == 0:
        return out
    width = values.size + 1
    packed = np.r_[
        (values + 1) * width + np.arange(values.size), 0
    ]  # the sentinel keeps hi in range
    bounds = np.empty(2 * some.size, np.int64)
    bounds[0::2], bounds[1::2] = lo[some], hi[some]
    position = np.maximum.reduceat(packed, bounds)[0::2] % width
    out[some] = labels[position]
    return out


def thread_groups(trace: Trace, *row_sets: np.ndarray) -> list[np.ndarray]:
    """For each row set, one integer per row naming its (rank, pid, tid), consistent across sets
    (:func:`pack`: equal for the same thread, not compact).

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "a", 0, 5), ("cpu_op", "b", 1, 1, {"tid": 7}), ("cpu_op", "c", 2, 1)])
    >>> ops, other = thread_groups(t, np.array([0, 1]), np.array([2]))
    >>> bool(ops[0] == other[0]), bool(ops[0] != ops[1])  # rows 0 and 2 share a thread
    (True, True)
    """
    rows = np.concatenate(row_sets) if row_sets else np.empty(0, dtype=np.int64)
    # a column constant over these rows (one rank, one process) adds nothing to the key; with
    # one rank in the trace its column is not even gathered
    columns = ("pid", "tid") if len(trace.ranks) == 1 else ("rank", "pid", "tid")
    key = pack(*(trace.column(column)[rows] for column in columns))
    return list(np.split(key, np.cumsum([part.size for part in row_sets])[:-1]))


def pack(*columns: np.ndarray) -> np.ndarray:
    """One int64 per row, equal exactly where all the integer ``columns`` are equal (not
    compact: factorize it for codes 0..k-1).

    The columns are packed by their value ranges — arithmetic, no hashing — and only when the
    ranges are too wide for an int64 each is factorized first.

    Examples
    --------
    >>> pack(np.array([0, 0, 1]), np.array([7, 9, 7])).tolist()
    [0, 2, 3]
    """
    n = columns[0].size if columns else 0
    if n == 0:
        return np.zeros(n, dtype=np.int64)
    lows = [int(c.min()) for c in columns]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(columns, lows, strict=True)]
    if math.prod(spans) < 2**62:
        key = None  # built in place: one new array, the first varying column
        for column, lo, span in zip(columns, lows, spans, strict=True):
            if span == 1:  # a constant column adds nothing
                continue
            part = np.subtract(column, lo, dtype=np.int64)
            if key is None:
                key = part
            else:
                key *= span
                key += part
        return key if key is not None else np.zeros(n, dtype=np.int64)
    key = np.zeros(n, dtype=np.int64)
    for column in columns:  # re-code pairwise to stay small
        sub, uniques = pd.factorize(column)
        key = pd.factorize(key * max(len(uniques), 1) + sub)[0].astype(np.int64)
    return key
