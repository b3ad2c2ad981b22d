"""Vectorised joins on (rank, id) keys and interval containment — the trace's plumbing."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["contained_ranges", "lookup"]

_SHIFT = 1 << 44  # ids below 2**44 and ranks below 2**19 pack into one int64


def _pack(rank: np.ndarray, key: np.ndarray) -> np.ndarray | None:
    if key.size and (key.max() >= _SHIFT or key.min() < 0):
        return None
    return rank.astype(np.int64) * _SHIFT + key


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
    order = np.lexsort((inner_start, inner_group))
    g, s = inner_group[order], inner_start[order]
    lo = np.empty(start.size, dtype=np.int64)
    hi = np.empty(start.size, dtype=np.int64)
    for value in np.unique(group):
        outer = np.flatnonzero(group == value)
        a, b = np.searchsorted(g, value, side="left"), np.searchsorted(g, value, side="right")
        lo[outer] = a + np.searchsorted(s[a:b], start[outer], side="left")
        hi[outer] = a + np.searchsorted(s[a:b], end[outer], side="right")
    return order, lo, hi
