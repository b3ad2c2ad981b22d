"""Ranks and the null distributions of rank statistics, in numpy and exact integers.

What :mod:`aorta.matrix.stats` needs to compare timed cells — mid-ranks and the two-sided
Mann–Whitney U p-value, exact or asymptotic — without ``scipy.stats``, whose import costs
about a second of CPU in every process that compares: a sweep's rank 0 writing its matrix,
each ``aorta report`` and ``compare``, a notebook. (Boschloo's test of failure counts and the
drift check's Kendall tau still import it, where failures differ or a baseline has five timed
trials.) The values are scipy's (``rankdata``, ``mannwhitneyu``); the exact distribution is
counted in Python integers, so its p-values are exact rationals rounded once.

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
import math

import numpy as np

__all__ = ["mann_whitney_asymptotic_p", "mann_whitney_exact_p", "rankdata", "u_statistic"]


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
