"""Ranks and the null distributions of rank statistics, in numpy and exact integers.

What :mod:`aorta.matrix.stats` needs to compare timed cells — mid-ranks and the two-sided
Mann–Whitney U p-value, exact or asymptotic — and the drift check's Kendall tau, without
``scipy.stats``, whose import costs about a second of CPU in every process that compares: a
sweep's rank 0 writing its matrix, each ``aorta report`` and ``compare``, a notebook (Boschloo's
test of failure counts is :mod:`aorta.matrix.boschloo`). The values are scipy's (``rankdata``,
``mannwhitneyu``, ``kendalltau``); the exact distributions are counted in Python integers, so
their p-values are exact rationals rounded once.

Examples
--------
>>> import numpy as np
>>> rankdata(np.array([3.0, 1.0, 3.0, 2.0])).tolist()
[3.5, 1.0, 3.5, 2.0]
>>> mann_whitney_exact_p(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]))
0.1
>>> round(mann_whitney_asymptotic_p(np.arange(40.0), np.arange(40.0) + 5), 4)
0.0719
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

__all__ = [
    "kendall_tau_p",
    "mann_whitney_asymptotic_p",
    "mann_whitney_exact_p",
    "rankdata",
    "u_statistic",
]


def rankdata(values: np.ndarray) -> np.ndarray:
    """Ranks of ``values`` (1 for the smallest), ties given the mean of the ranks they span;
    all NaN when a value is NaN. ``scipy.stats.rankdata(values)``, flattened.

    >>> rankdata(np.array([10.0, 20.0, 10.0])).tolist()
    [1.5, 3.0, 1.5]
    """
    a = np.asarray(values, dtype=float).ravel()
    if np.isnan(a).any():
        return np.full(a.shape, np.nan)
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return (ends - (counts - 1) / 2)[inverse.ravel()]


def u_statistic(x: np.ndarray, y: np.ndarray) -> float:
    """Mann–Whitney's U of ``x``: how many ``(x_i, y_j)`` pairs have ``x_i > y_j``, ties
    counting one half.

    >>> u_statistic(np.array([2.0, 3.0]), np.array([1.0, 2.0]))
    3.5
    """
    ranks = rankdata(np.concatenate([x, y]))
    n = len(x)
    return float(ranks[:n].sum() - n * (n + 1) / 2)


@functools.lru_cache(maxsize=128)
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """How many of the ``C(n + m, n)`` splits of distinct values give each U in ``0..n*m``.

    They are the coefficients of the Gaussian binomial ``[n + m choose n]_q``, built as the
    product over ``i`` of ``(1 - q^(m+i)) / (1 - q^i)``; each step is exact in integers.
    """
    n, m = sorted((n, m))
    counts = [1] + [0] * (n * m + n)
    degree = 0
    for i in range(1, n + 1):
        a = m + i
        for k in range(degree + a, a - 1, -1):  # times (1 - q^a)
            counts[k] -= counts[k - a]
        degree += m
        for k in range(i, degree + 1):  # over (1 - q^i), which divides exactly
            counts[k] += counts[k - i]
        counts[degree + 1 :] = [0] * (len(counts) - degree - 1)
    return tuple(counts[: n * m + 1])


def mann_whitney_exact_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p of Mann–Whitney's U from its exact null distribution, which assumes no
    ties: ``scipy.stats.mannwhitneyu(x, y, method="exact").pvalue``. NaN when a value is NaN.

    >>> mann_whitney_exact_p(np.array([1.0, 4.0]), np.array([2.0, 3.0]))
    1.0
    """
    n, m = len(x), len(y)
    u = u_statistic(x, y)
    if math.isnan(u):
        return math.nan
    # The distribution is symmetric about n*m/2: P(U >= max(u, n*m - u)) is the lower tail
    # up to min(u, n*m - u).
    low = round(min(u, n * m - u))
    counts = _u_counts(n, m)
    return min(1.0, 2 * sum(counts[: low + 1]) / math.comb(n + m, n))


def mann_whitney_asymptotic_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p of Mann–Whitney's U from the normal approximation, with the tie correction
    of the variance and a continuity correction:
    ``scipy.stats.mannwhitneyu(x, y, method="asymptotic").pvalue``. NaN when a value is NaN.

    >>> mann_whitney_asymptotic_p(np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    1.0
    """
    pooled = np.concatenate([x, y]).astype(float)
    if np.isnan(pooled).any():
        return math.nan
    n, m = len(x), len(y)
    u = u_statistic(x, y)
    total = n + m
    _, ties = np.unique(pooled, return_counts=True)
    tie_term = float(np.sum(ties.astype(float) ** 3 - ties))
    sd = math.sqrt(n * m / 12 * ((total + 1) - tie_term / (total * (total - 1))))
    # The continuity correction always shrinks |U - mean| by one half: the tail then keeps
    # the mass at U itself.
    excess = max(u, n * m - u) - n * m / 2 - 0.5
    if sd == 0:
        return 1.0 if excess <= 0 else 0.0
    return min(1.0, max(0.0, math.erfc(excess / sd / math.sqrt(2))))


#: Up to this many pairs without ties, Kendall's p-value is exact (scipy's ``method="auto"``).
KENDALL_EXACT_MAX_N = 33
#: Above this many values, scipy counts the pairs (in O(n log n); here it is O(n^2)).
KENDALL_PAIRS_MAX_N = 5_000


@functools.lru_cache(maxsize=64)
def _inversion_counts(n: int, up_to: int) -> tuple[int, ...]:
    """How many of the ``n!`` orders of ``n`` distinct values have ``k`` inversions (discordant
    pairs), for ``k`` in ``0..up_to``: Mahonian numbers, the coefficients of
    ``prod over j of (1 + q + ... + q^(j-1))``, in exact integers."""
    counts = [1] + [0] * up_to
    for j in range(2, n + 1):
        # times (1 - q^j) / (1 - q): a running sum, less the sum j places back
        running = list(itertools.accumulate(counts))
        counts = [running[k] - (running[k - j] if k >= j else 0) for k in range(up_to + 1)]
    return tuple(counts)


def kendall_tau_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p of Kendall's tau between ``x`` and ``y``:
    ``scipy.stats.kendalltau(x, y).pvalue`` — exact (from the inversion counts) without ties
    and up to 33 values or one discordant pair, else the normal approximation with the tie
    corrections of the variance. NaN when either is constant or holds a NaN.

    >>> kendall_tau_p(np.arange(6.0), np.array([1.0, 2.0, 3.0, 4.0, 6.0, 5.0]))
    0.016666666666666666
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    size = x.size
    if np.isnan(x).any() or np.isnan(y).any():
        return math.nan
    if size > KENDALL_PAIRS_MAX_N:
        # Pairs are counted in O(n^2); scipy counts them in O(n log n).
        from scipy.stats import kendalltau

        return float(kendalltau(x, y).pvalue)
    con_minus_dis = discordant = 0
    for i in range(size - 1):  # a row of pairs at a time: memory stays O(n) for long runs
        agree = np.sign(x[i + 1 :] - x[i]) * np.sign(y[i + 1 :] - y[i])
        con_minus_dis += int(agree.sum())
        discordant += int((agree < 0).sum())
    total = size * (size - 1) // 2
    x_ties, x0, x1 = _tie_terms(x)
    y_ties, y0, y1 = _tie_terms(y)
    if x_ties == total or y_ties == total:
        return math.nan
    if (
        x_ties == 0
        and y_ties == 0
        and (size <= KENDALL_EXACT_MAX_N or min(discordant, total - discordant) <= 1)
    ):
        # Symmetric about total/2: twice the lower tail up to the smaller of the two counts.
        low = min(discordant, total - discordant)
        tail = sum(_inversion_counts(size, low))
        return min(1.0, 2 * tail / math.factorial(size))
    m = size * (size - 1.0)
    var = (m * (2 * size + 5) - x1 - y1) / 18 + 2 * x_ties * y_ties / m
    var += x0 * y0 / (9 * m * (size - 2))
    return min(1.0, math.erfc(abs(con_minus_dis) / math.sqrt(var) / math.sqrt(2)))


def _tie_terms(values: np.ndarray) -> tuple[int, int, int]:
    """Tied pairs, and the sums of ``t(t-1)(t-2)`` and ``t(t-1)(2t+5)`` over tie groups."""
    _, counts = np.unique(values, return_counts=True)
    t = [int(c) for c in counts if c > 1]
    return (
        sum(c * (c - 1) // 2 for c in t),
        sum(c * (c - 1) * (c - 2) for c in t),
        sum(c * (c - 1) * (2 * c + 5) for c in t),
    )
