"""Boschloo's exact unconditional test of two failure rates, in numpy and exact integers.

What :func:`aorta.matrix.stats.failure_p` needs where two cells' failure counts differ — the
normal triage case — without ``scipy.stats``, whose import costs about a second of CPU in every
process that compares (a sweep's rank 0, each ``aorta report`` and ``compare``).

The test, as scipy's ``boschloo_exact`` defines it: every table with the observed group sizes
gets Fisher's one-sided p-value as its statistic; the one-sided p-value is the largest, over
the failure probability ``π`` the two groups would share under the null, of the probability of
a table whose statistic is at most the observed one; the two-sided p-value is twice the
smaller one-sided one, at most 1. Fisher's p-values are hypergeometric tails counted in Python
integers (each rounded once) up to :data:`EXACT_MAX_TOTAL` trials, so which tables are "as
extreme" is decided exactly; above that, in floats. The largest probability over ``π`` is
searched on a grid and refined by golden-section search at each of the grid's local maxima,
where scipy runs an optimiser (``shgo``) from 32 points. The two mostly agree to 1e-12; where
scipy's optimiser stops short of the supremum (0 of 25 failures against 6 of 25: 0.0132724,
where the supremum is 0.0132735), this module gives the supremum, the larger p.

Examples
--------
>>> round(boschloo_p(10, 20, 2, 20), 4)
0.0066
>>> boschloo_p(0, 5, 0, 5)
1.0
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

__all__ = ["EXACT_MAX_TOTAL", "FLOAT_MAX_TOTAL", "boschloo_p"]

#: Up to this many trials in the two groups together, Fisher's p-values are exact fractions.
EXACT_MAX_TOTAL = 600
#: Above this many trials together, scipy's ``boschloo_exact`` computes the p-value.
FLOAT_MAX_TOTAL = 4_000
#: Points of the grid over the shared failure probability; each local maximum is refined.
GRID_POINTS = 513
#: At most this many of the grid's local maxima are refined (the highest).
MAX_PEAKS = 4
#: Scipy's tolerance for tables whose statistic ties the observed one (its gh-14178).
TIE_TOLERANCE = 1e-13


@functools.lru_cache(maxsize=4096)  # adaptive sweeps ask the same small tables every round
def boschloo_p(failures_a: int, ran_a: int, failures_b: int, ran_b: int) -> float:
    """Two-sided Boschloo p-value of ``failures_a`` of ``ran_a`` against ``failures_b`` of
    ``ran_b``, as ``scipy.stats.boschloo_exact([[fa, fb], [ra - fa, rb - fb]])`` defines it.

    NaN when a group ran no trial; 1 when no trial or every trial failed.
    """
    if ran_a <= 0 or ran_b <= 0:
        return math.nan
    if not (0 <= failures_a <= ran_a and 0 <= failures_b <= ran_b):
        raise ValueError("failures must lie between 0 and the trials that ran")
    if failures_a + failures_b in (0, ran_a + ran_b):
        return 1.0
    if ran_a + ran_b > FLOAT_MAX_TOTAL:
        # Every table is visited, (ran_a + 1)(ran_b + 1) of them: scipy's vectorised
        # hypergeometric tails are faster there than this module's loop over the totals.
        from scipy.stats import boschloo_exact

        table = [[failures_a, failures_b], [ran_a - failures_a, ran_b - failures_b]]
        return float(min(1.0, boschloo_exact(table, alternative="two-sided").pvalue))
    less = _one_sided(failures_a, ran_a, failures_b, ran_b)
    greater = _one_sided(failures_b, ran_b, failures_a, ran_a)
    return float(min(1.0, 2.0 * min(less, greater)))


def _one_sided(x: int, n: int, y: int, m: int) -> float:
    """P-value of "group 1 fails less": the supremum over ``π`` of the probability of a table
    whose Fisher statistic P(X ≤ x1 | x1 + x2) is at most the observed one."""
    fisher = _hypergeom_cdf(n, m)  # [x1, x2]
    extreme = fisher <= fisher[x, y] * (1 + TIE_TOLERANCE)
    log_cn, log_cm = _log_comb(n), _log_comb(m)
    # The tables in the region, grouped by their total failures s: the probability of the
    # region at π is sum over s of W[s] π^s (1 - π)^(n + m - s).
    x1, x2 = np.nonzero(extreme)
    total = n + m
    log_w = np.full(total + 1, -np.inf)
    np.logaddexp.at(log_w, x1 + x2, log_cn[x1] + log_cm[x2])
    s = np.flatnonzero(np.isfinite(log_w))
    log_w = log_w[s]

    def log_p(pi: np.ndarray) -> np.ndarray:
        pi = np.atleast_1d(pi)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            # 0 * log(0) is 0: s = 0 at π = 0, s = total at π = 1.
            a = np.where(s == 0, 0.0, s * np.log(pi))
            b = np.where(s == total, 0.0, (total - s) * np.log1p(-pi))
        terms = log_w + a + b
        top = terms.max(axis=1)
        safe = np.where(np.isfinite(top), top, 0.0)  # a π where no table of the region can occur
        with np.errstate(divide="ignore"):
            at_pi: np.ndarray = top + np.log(np.exp(terms - safe[:, None]).sum(axis=1))
        return at_pi

    grid = np.linspace(0.0, 1.0, GRID_POINTS)
    values = log_p(grid)
    best = float(values.max())
    # Refine the grid's local maxima that could hold the supremum: between grid points the
    # curve rises by far less than 5% (its peaks are ~1/sqrt(n + m) wide, the grid 1/512).
    peaks = np.flatnonzero((values[1:-1] >= values[:-2]) & (values[1:-1] > values[2:])) + 1
    peaks = peaks[values[peaks] >= best - 0.05]
    for i in peaks[np.argsort(values[peaks])[::-1][:MAX_PEAKS]]:
        best = max(best, _golden_max(log_p, grid[i - 1], grid[i + 1]))
    return float(min(1.0, math.exp(best)))


def _golden_max(
    f: Callable[[np.ndarray], np.ndarray], lo: float, hi: float, iterations: int = 50
) -> float:
    """The largest value of ``f`` on ``[lo, hi]`` (one peak there), by golden-section search."""
    ratio = (math.sqrt(5) - 1) / 2
    c, d = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fc, fd = float(f(np.array([c]))[0]), float(f(np.array([d]))[0])
    for _ in range(iterations):
        if fc >= fd:
            hi, d, fd = d, c, fc
            c = hi - ratio * (hi - lo)
            fc = float(f(np.array([c]))[0])
        else:
            lo, c, fc = c, d, fd
            d = lo + ratio * (hi - lo)
            fd = float(f(np.array([d]))[0])
    return max(fc, fd)


def _log_comb(n: int) -> np.ndarray:
    """log C(n, k) for k = 0..n."""
    k = np.arange(n + 1)
    lg = np.array([math.lgamma(i + 1.0) for i in range(n + 1)])
    log_c: np.ndarray = math.lgamma(n + 1.0) - lg[k] - lg[n - k]
    return log_c


@functools.lru_cache(maxsize=16)  # the cells of a matrix mostly share their trial counts
def _hypergeom_cdf(n: int, m: int) -> np.ndarray:
    """P(X ≤ x1) for X the failures among group 1's ``n`` trials when ``s = x1 + x2`` of all
    ``n + m`` failed (hypergeometric), for every x1 in 0..n and x2 in 0..m: ``[x1, x2]``."""
    total = n + m
    out = np.empty((n + 1, m + 1))
    if total <= EXACT_MAX_TOTAL:
        cn = [math.comb(n, k) for k in range(n + 1)]
        cm = [math.comb(m, k) for k in range(m + 1)]
        for s in range(total + 1):
            lo, hi = max(0, s - m), min(n, s)
            whole = math.comb(total, s)
            running = 0
            for x1 in range(lo, hi + 1):
                running += cn[x1] * cm[s - x1]
                out[x1, s - x1] = running / whole  # an exact fraction, rounded once
        out.flags.writeable = False
        return out
    log_cn, log_cm = _log_comb(n), _log_comb(m)
    log_ct = _log_comb(total)
    for s in range(total + 1):
        lo, hi = max(0, s - m), min(n, s)
        k = np.arange(lo, hi + 1)
        pmf = np.exp(log_cn[k] + log_cm[s - k] - log_ct[s])
        out[k, s - k] = np.minimum(1.0, np.cumsum(pmf))
    out.flags.writeable = False
    return out
