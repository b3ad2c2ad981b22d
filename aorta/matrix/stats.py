"""Statistics of a matrix: what "cell B changed something" means, in numbers.

Pure numpy/scipy — arrays in, numbers out; no files, no printing. The unit is the trial:
each trial is reduced to one value (by default the median of its post-warm-up step times,
:func:`trial_medians`), and cells are compared on those values.

Per group of trials (:func:`summarize_values`, :func:`wilson_interval`):
median, IQR, coefficient of variation, Wilson interval on the failure rate.

Against a reference group (:func:`compare_groups`), two questions answered separately:

* **Is there a difference?** Two-sided Mann–Whitney U on the trial values
  (:func:`mann_whitney_test`: exact at small sizes — a permutation test on mid-ranks where
  values tie — and the normal approximation with tie correction above
  :data:`EXACT_MAX_TOTAL` trials), Holm-adjusted across the compared cells (:func:`holm`).
  ``slower`` / ``faster`` when ``p_adj < alpha`` (direction from the ranks), however small the
  effect; ``no difference detected`` otherwise — with ``trials_needed`` when no p at these
  trial counts could reach Holm's first level ``alpha / m`` (:func:`attainable_p`).
* **Does it matter?** The **ratio** of medians with a percentile bootstrap CI that resamples
  trials within each group (:func:`bootstrap_medians`), each group's stream keyed by the run's
  seed and the ranks of its values among the pair's (:func:`data_stream`), so renaming a cell,
  adding another or scaling every time changes nothing. Against the band ``[1/threshold, threshold]``, with the CI at
  ``1 - alpha / m`` (Bonferroni over the cells): ``beyond band`` (wholly outside),
  ``within band`` (wholly inside: an equivalence statement), ``undecided`` (:func:`band_verdict`).
  No CI and no band verdict below :data:`MIN_TIMED` timed trials in either group; no ratio when
  the reference median is 0 (the difference ``delta`` is still reported and tested).
* **failure_p** / **failure_p_adj**: Boschloo's exact unconditional test on failures vs passes
  (:func:`failure_p`), Holm-adjusted.

Examples
--------
>>> import numpy as np
>>> base = Group("base", np.array([10.0, 10.2, 9.9, 10.1, 10.03, 9.8]), failures=0, ran=6)
>>> slow = Group("slow", np.array([13.0, 13.4, 12.9, 13.1, 13.2, 13.3]), failures=0, ran=6)
>>> same = Group("same", np.array([10.05, 9.95, 9.85, 10.15, 10.02, 9.97]), failures=0, ran=6)
>>> rows = compare_groups([base, slow, same], [(1, 0), (2, 0)], threshold=1.15)
>>> [(r.difference, r.band, round(r.ratio, 2)) for r in rows]
[('slower', 'beyond band', 1.31), ('no difference detected', 'within band', 1.0)]
>>> rows[0].p, rows[0].p_method
(0.0021645021645021645, 'exact')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

from aorta.matrix.bootstrap import (
    BOOTSTRAP_BLOCK,
    ORDER_STATISTIC_MIN,
    bootstrap_medians,
    data_stream,
    percentile_interval,
)
from aorta.matrix.boschloo import boschloo_p
from aorta.matrix.rank_tests import (
    kendall_tau_p,
    mann_whitney_asymptotic_p,
    mann_whitney_exact_p,
    rankdata,
)

__all__ = [
    "BOOTSTRAP_BLOCK",
    "DEFAULT_ALPHA",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "EXACT_MAX_TOTAL",
    "EXACT_MAX_TRIALS",
    "MIN_TIMED",
    "ORDER_STATISTIC_MIN",
    "PERMUTATION_RESAMPLES",
    "Band",
    "Difference",
    "FailureVerdict",
    "Group",
    "PairResult",
    "Summary",
    "attainable_p",
    "band_verdict",
    "bootstrap_medians",
    "compare_groups",
    "data_stream",
    "drift_p",
    "failure_p",
    "holm",
    "mann_whitney",
    "mann_whitney_asymptotic",
    "mann_whitney_test",
    "min_exact_p",
    "percentile_interval",
    "summarize_values",
    "trial_medians",
    "trial_stat",
    "trials_for_level",
    "wilson_interval",
]

# The defaults of aorta.matrix.options.StatsOptions (which documents them), here at the
# bottom of the matrix stage so the pure functions below share them.
#: Significance level unless told otherwise.
DEFAULT_ALPHA = 0.05
#: Bootstrap resamples per group unless told otherwise.
DEFAULT_RESAMPLES = 10_000
#: Bootstrap seed unless told otherwise (recorded beside every result).
DEFAULT_SEED = 0
#: Permutations of the tie-aware Mann–Whitney fallback.
PERMUTATION_RESAMPLES = 9_999
#: Largest group for the exact / permutation Mann–Whitney; larger groups use the normal
#: approximation (scipy's exact distribution takes minutes at 600 vs 600, and returns NaN).
EXACT_MAX_TRIALS = 50


# --- per trial -------------------------------------------------------------------------------


def trial_medians(
    step_times: np.ndarray, warmup: np.ndarray | int = 0, *, axis: int = -1
) -> np.ndarray:
    """Median of each trial's post-warm-up steps.

    ``step_times`` holds one row of steps per trial (``NaN`` past the trial's last step);
    ``warmup`` the number of leading warm-up steps of each trial (broadcast against the other
    axes). A trial with no step past its warm-up gets ``NaN``.

    Examples
    --------
    >>> trial_medians(np.array([[9.0, 1.0, 2.0, 3.0], [5.0, 4.0, np.nan, np.nan]]), np.array([1, 0]))
    array([2. , 4.5])
    >>> trial_medians(np.array([[9.0, np.nan]]), 1), trial_medians(np.zeros((2, 0)))
    (array([nan]), array([nan, nan]))
    """
    values = np.moveaxis(np.asarray(step_times, dtype=float), axis, -1)
    if values.shape[-1] == 0:
        return np.full(values.shape[:-1], np.nan)
    steps = np.arange(values.shape[-1])
    masked = np.where(steps >= np.asarray(warmup)[..., None], values, np.nan)
    # NaN sorts last: the k valid values of a row are its first k after sorting.
    ordered = np.sort(masked, axis=-1)
    k = np.sum(~np.isnan(ordered), axis=-1)
    lo = np.take_along_axis(ordered, np.maximum((k - 1) // 2, 0)[..., None], axis=-1)[..., 0]
    hi = np.take_along_axis(ordered, np.maximum(k // 2, 0)[..., None], axis=-1)[..., 0]
    return np.where(k > 0, (lo + hi) / 2, np.nan)


# --- per group -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """Location and spread of one group's trial values."""

    n: int
    median: float
    q1: float
    q3: float
    iqr: float
    mean: float
    #: Coefficient of variation: sample standard deviation / mean (NaN below 2 values).
    cv: float


def summarize_values(values: np.ndarray) -> Summary:
    """Median, quartiles (linear interpolation), IQR, mean and CV of the finite ``values``.

    Examples
    --------
    >>> s = summarize_values(np.array([1.0, 2.0, 3.0, 4.0, np.nan]))
    >>> s.n, s.median, s.iqr, round(s.cv, 3)
    (4, 2.5, 1.5, 0.516)
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan, nan)
    q1, med, q3 = (float(v) for v in np.quantile(x, [0.25, 0.5, 0.75]))
    mean = float(x.mean())
    cv = float(x.std(ddof=1) / mean) if x.size > 1 and mean != 0 else math.nan
    return Summary(int(x.size), med, q1, q3, q3 - q1, mean, cv)


def _z(alpha: float) -> float:
    # The standard library's quantile agrees with scipy's norm.ppf to ~1e-15 and spares every
    # sweep process that writes a matrix the ~1 s import of scipy.stats. Outside (0, 1) it
    # raises where norm.ppf gives inf or NaN: kept as NaN, so the caller's own check of alpha
    # (compare_groups: "alpha must be in (0, 1)") is what a user sees.
    p = 1 - alpha / 2
    return NormalDist().inv_cdf(p) if 0 < p < 1 else math.nan


def wilson_interval(k: int, n: int, *, alpha: float = DEFAULT_ALPHA) -> tuple[float, float]:
    """Wilson score interval for ``k`` events in ``n`` trials, at confidence ``1 - alpha``.

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0/n. The
    lower end is exactly 0 when ``k`` is 0 (and only then), the upper exactly 1 when ``k``
    is ``n``, and ``k / n`` always lies inside. ``(nan, nan)`` when ``n`` is 0.

    Examples
    --------
    >>> [round(v, 3) for v in wilson_interval(0, 10)]
    [0.0, 0.278]
    >>> [round(v, 3) for v in wilson_interval(8, 10)]
    [0.49, 0.943]
    >>> wilson_interval(0, 3)[0], wilson_interval(3, 3)[1]
    (0.0, 1.0)
    """
    if n <= 0:
        return (math.nan, math.nan)
    z = _z(alpha)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0/n and n/n the formula's end is 0 or 1 only up to rounding (2.8e-17 at 0/3), which
    # turns into a negative error bar; pin the ends and keep the rate inside.
    lo = 0.0 if k <= 0 else min(p, max(0.0, centre - half))
    hi = 1.0 if k >= n else max(p, min(1.0, centre + half))
    return (lo, hi)


# --- against a reference ---------------------------------------------------------------------


def min_exact_p(n: int, m: int) -> float:
    """The smallest two-sided p-value an exact Mann–Whitney test of ``n`` vs ``m`` values can
    give: ``2 / C(n + m, n)`` (no ties), or 1 when a group is empty. It underflows to 0 at
    large counts (``C(1032, 516)`` is past the largest float) rather than overflowing.

    Examples
    --------
    >>> min_exact_p(3, 3), round(min_exact_p(4, 4), 4), min_exact_p(600, 600)
    (0.1, 0.0286, 0.0)
    """
    if n <= 0 or m <= 0:
        return 1.0
    # int / int divides exactly and rounds once; 2.0 / int converts the int to a float first.
    return min(1.0, 2 / math.comb(n + m, n))


def trials_for_level(level: float, *, limit: int = 10_000) -> int:
    """The fewest trials per cell (``n`` against ``n``) at which the exact two-sided
    Mann–Whitney test can give ``p < level``.

    Examples
    --------
    >>> trials_for_level(0.05), trials_for_level(0.05 / 2), trials_for_level(0.05 / 99)
    (4, 5, 8)
    """
    if not level > 0:
        raise ValueError(f"level must be > 0, got {level}")
    for n in range(1, limit + 1):
        if min_exact_p(n, n) < level:
            return n
    raise ValueError(f"no trial count up to {limit} reaches p < {level}")


def _permutation_p(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> float:
    # Mann-Whitney's U on mid-ranks, its null distribution from the group labels: every
    # split when there are few enough, else seeded random ones (p = (hits + 1) / (B + 1)).
    import itertools

    # A canonical order of the two groups, so that swapping them (or reordering trials)
    # draws the same relabellings; the two-sided statistic is symmetric.
    x, y = np.sort(x), np.sort(y)
    if (x.size, x.tolist()) > (y.size, y.tolist()):
        x, y = y, x
    n, m = x.size, y.size
    ranks = rankdata(np.concatenate([x, y]))
    centre = n * (n + 1) / 2 + n * m / 2
    observed = abs(ranks[:n].sum() - centre)
    if math.comb(n + m, n) <= PERMUTATION_RESAMPLES:
        splits = np.array(list(itertools.combinations(range(n + m), n)), dtype=np.int64)
        sums = ranks[splits].sum(axis=1)
        return float(np.mean(np.abs(sums - centre) >= observed - 1e-9))
    order = np.argsort(rng.random((PERMUTATION_RESAMPLES, n + m)), axis=1)[:, :n]
    hits = int(np.sum(np.abs(ranks[order].sum(axis=1) - centre) >= observed - 1e-9))
    return (hits + 1) / (PERMUTATION_RESAMPLES + 1)


def mann_whitney(
    x: np.ndarray, y: np.ndarray, *, rng: np.random.Generator | None = None
) -> tuple[float, str]:
    """Two-sided Mann–Whitney U test of ``x`` against ``y``: ``(p, method)``.

    ``method`` is ``exact`` (the exact null distribution, valid without ties) or, when a
    value occurs twice, ``permutation``: the same statistic on mid-ranks against every
    relabelling of the trials when there are at most 9,999, else 9,999 relabellings drawn
    from ``rng``. When a group has more than :data:`EXACT_MAX_TRIALS` values, ``asymptotic``:
    the normal approximation with tie and continuity corrections (scipy,
    ``method="asymptotic"``). ``(nan, "")`` when a group is empty.

    Examples
    --------
    >>> mann_whitney(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]))
    (0.1, 'exact')
    >>> mann_whitney(np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    (1.0, 'permutation')
    >>> mann_whitney(np.array([1.0, 2.0, 2.0]), np.array([2.0, 3.0, 4.0]))
    (0.3, 'permutation')
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size == 0 or y.size == 0:
        return (math.nan, "")
    if max(x.size, y.size) > EXACT_MAX_TRIALS:
        return (mann_whitney_asymptotic(x, y), "asymptotic")
    both = np.concatenate([x, y])
    if np.unique(both).size == both.size:
        return (mann_whitney_exact_p(x, y), "exact")
    return (_permutation_p(x, y, rng or np.random.default_rng(DEFAULT_SEED)), "permutation")


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment (family-wise error); NaN entries stay NaN and do not count.

    Examples
    --------
    >>> holm([0.01, 0.04, np.nan, 0.03]).tolist()
    [0.03, 0.06, nan, 0.06]
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = valid.size
    if m == 0:
        return out
    order = valid[np.argsort(p[valid], kind="stable")]
    scaled = p[order] * (m - np.arange(m))
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out


def trial_stat(
    step_times: np.ndarray,
    warmup: np.ndarray | int = 0,
    *,
    stat: Literal["median", "mean", "p95"] = "median",
    axis: int = -1,
) -> np.ndarray:
    """One statistic of each trial's post-warm-up steps: ``median`` (:func:`trial_medians`),
    ``mean`` or ``p95`` (95th percentile, linear interpolation). NaN for a trial with no step
    past its warm-up.

    Examples
    --------
    >>> x = np.array([[50.0, 1.0, 1.0, 1.0, 10.0]])
    >>> [round(float(trial_stat(x, 1, stat=s)[0]), 3) for s in ("median", "mean", "p95")]
    [1.0, 3.25, 8.65]
    """
    if stat == "median":
        return trial_medians(step_times, warmup, axis=axis)
    values = np.moveaxis(np.asarray(step_times, dtype=float), axis, -1)
    if values.shape[-1] == 0:
        return np.full(values.shape[:-1], np.nan)
    steps = np.arange(values.shape[-1])
    masked = np.where(steps >= np.asarray(warmup)[..., None], values, np.nan)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: trials without steps
        if stat == "mean":
            means: np.ndarray = np.nanmean(masked, axis=-1)
            return means
        if stat == "p95":
            return np.nanpercentile(masked, 95, axis=-1)
    raise ValueError(f"stat must be 'median', 'mean' or 'p95', got {stat!r}")


#: Fewest timed trials *per group* for a ratio CI and a band verdict: below it the percentile
#: bootstrap of a median is too coarse to trust (its CI covers far less than it claims).
MIN_TIMED = 5
#: Mann–Whitney is exact (or a permutation test where values tie) while both groups together
#: have at most this many trials; above, the normal approximation with tie correction.
EXACT_MAX_TOTAL = 50

Difference = Literal["baseline", "slower", "faster", "no difference detected", "no data"]
Band = Literal["baseline", "beyond band", "within band", "undecided", "no data"]
FailureVerdict = Literal["baseline", "more", "fewer", "not significant", "no data"]


def mann_whitney_asymptotic(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided Mann–Whitney U p from the normal approximation, with the tie correction of
    the variance and a continuity correction (scipy ``method="asymptotic"``).

    >>> round(mann_whitney_asymptotic(np.arange(40.0), np.arange(40.0) + 5), 4)
    0.0719
    """
    return mann_whitney_asymptotic_p(np.asarray(x, dtype=float), np.asarray(y, dtype=float))


def mann_whitney_test(
    x: np.ndarray, y: np.ndarray, *, rng: np.random.Generator | None = None
) -> tuple[float, str]:
    """Mann–Whitney U as aorta applies it: :func:`mann_whitney` (exact, or a permutation test
    where values tie) while ``len(x) + len(y) <= EXACT_MAX_TOTAL``, else
    :func:`mann_whitney_asymptotic` (``method`` ``asymptotic``). ``(nan, "")`` when a group is
    empty.

    >>> mann_whitney_test(np.arange(3.0), np.arange(3.0) + 5)
    (0.1, 'exact')
    >>> mann_whitney_test(np.arange(30.0), np.arange(30.0) + 10)[1]
    'asymptotic'
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size == 0 or y.size == 0:
        return (math.nan, "")
    if x.size + y.size <= EXACT_MAX_TOTAL:
        return mann_whitney(x, y, rng=rng)
    return (mann_whitney_asymptotic(x, y), "asymptotic")


def attainable_p(n: int, m: int) -> float:
    """The smallest two-sided p :func:`mann_whitney_test` can give at ``n`` vs ``m`` trials:
    :func:`min_exact_p` where the test is exact, 0 where it is asymptotic.

    >>> attainable_p(3, 3), attainable_p(40, 40)
    (0.1, 0.0)
    """
    if n <= 0 or m <= 0:
        return 1.0
    if n + m > EXACT_MAX_TOTAL:
        return 0.0
    return min_exact_p(n, m)


def failure_p(failures_a: int, ran_a: int, failures_b: int, ran_b: int) -> float:
    """Two-sided **Boschloo exact test** of failures/passes in ``a`` against ``b``.

    Boschloo's test is unconditional (it does not fix both margins as Fisher's does) and
    uniformly more powerful than Fisher's at the same level. NaN when a group ran no trial;
    1 when no trial or every trial failed (nothing to tell the groups apart).

    >>> round(failure_p(10, 20, 2, 20), 4), failure_p(0, 5, 0, 5)
    (0.0066, 1.0)
    """
    return boschloo_p(failures_a, ran_a, failures_b, ran_b)


def band_verdict(lo: float, hi: float, *, threshold: float) -> Band:
    """Where the interval ``[lo, hi]`` of a ratio lies against the band
    ``[1/threshold, threshold]``: ``beyond band`` (wholly outside), ``within band`` (wholly
    inside: an equivalence statement), ``undecided`` (straddles an edge, or no interval).

    >>> band_verdict(1.2, 1.3, threshold=1.15), band_verdict(0.95, 1.1, threshold=1.15)
    ('beyond band', 'within band')
    >>> band_verdict(1.1, 1.2, threshold=1.15), band_verdict(float("nan"), 1.0, threshold=1.15)
    ('undecided', 'undecided')
    """
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "undecided"
    if lo > threshold or hi < 1 / threshold:
        return "beyond band"
    if 1 / threshold <= lo and hi <= threshold:
        return "within band"
    return "undecided"


def drift_p(values: np.ndarray, order: np.ndarray) -> float:
    """Two-sided p of a monotone trend of ``values`` over ``order`` (Kendall's tau), from the
    finite values with a known order (``order >= 0``); NaN below 5 such values.

    >>> drift_p(np.arange(10.0), np.arange(10)) < 1e-5, drift_p(np.ones(3), np.arange(3))
    (True, nan)
    """
    v = np.asarray(values, dtype=float)
    o = np.asarray(order, dtype=float)
    keep = np.isfinite(v) & (o >= 0)
    if keep.sum() < 5 or np.unique(v[keep]).size < 2:
        return math.nan
    return kendall_tau_p(o[keep], v[keep])


@dataclass(frozen=True)
class Group:
    """The trials of one cell, as :func:`compare_groups` sees them.

    ``values`` are the trial values that count for timing (NaN for a trial that counts but has
    no value; ±inf are counted in ``nonfinite`` and left out); ``failures`` of ``ran`` trials
    failed. ``negative`` counts values the caller left out as impossible for the metric
    (negative times), said in the comparison's note. ``key`` names the group in messages
    only: the bootstrap stream comes from the data.
    """

    key: str
    values: np.ndarray
    failures: int = 0
    ran: int = 0
    negative: int = 0

    def finite(self) -> np.ndarray:
        v = np.asarray(self.values, dtype=float)
        return np.asarray(v[np.isfinite(v)])

    @property
    def nonfinite(self) -> int:
        """Values that are ±inf (a trial whose clock overflowed, a division by zero)."""
        return int(np.sum(np.isinf(np.asarray(self.values, dtype=float))))


@dataclass(frozen=True)
class PairResult:
    """A cell against its reference (one row of a comparison): the two questions' answers."""

    #: Cell median / reference median (NaN when the reference median is not > 0).
    ratio: float
    #: The ratio's percentile bootstrap CI at ``1 - alpha`` (NaN below :data:`MIN_TIMED`).
    ci_low: float
    ci_high: float
    #: The same CI at ``1 - alpha / m`` (m compared cells): what the band verdict uses.
    band_ci_low: float
    band_ci_high: float
    #: That CI's level, ``1 - alpha / m`` (NaN without a CI).
    band_ci_level: float
    #: Cell median - reference median, in the metric's units.
    delta: float
    p: float
    p_method: str
    p_adj: float
    failure_p: float
    failure_p_adj: float
    #: Is there a difference? ``slower`` / ``faster`` / ``no difference detected`` / ``no data``.
    difference: Difference
    #: Does it matter? ``beyond band`` / ``within band`` / ``undecided`` / ``no data``.
    band: Band
    failures_vs_baseline: FailureVerdict
    #: The smallest p the test could give at these trial counts.
    min_p: float
    #: Whether ``min_p`` is below Holm's first level ``alpha / m``.
    attainable: bool
    #: Trials per cell at which the test becomes attainable; None when it already is.
    trials_needed: int | None
    #: What keeps an answer from being firmer, in words ("" when nothing does).
    note: str


def _failure_verdict(cell: Group, ref: Group, p_adj: float, alpha: float) -> FailureVerdict:
    if cell.ran <= 0 or ref.ran <= 0:
        return "no data"
    if not p_adj < alpha:
        return "not significant"
    return "more" if cell.failures / cell.ran > ref.failures / ref.ran else "fewer"


def _direction(x: np.ndarray, y: np.ndarray) -> int:
    """+1 when ``x`` tends to be larger than ``y`` (Mann–Whitney's U above its centre), -1 below."""
    ranks = rankdata(np.concatenate([x, y]))
    centre = x.size * (x.size + y.size + 1) / 2
    got = ranks[: x.size].sum()
    return 1 if got > centre else -1 if got < centre else 0


def _pair_ratios(x: np.ndarray, y: np.ndarray, *, seed: int, resamples: int) -> np.ndarray:
    """Bootstrap ratios of medians, ``x`` over ``y``, each group resampled from its own stream
    keyed by its ranks among the pair (:func:`data_stream`)."""
    ranks = rankdata(np.concatenate([x, y]))
    rx, ry = ranks[: x.size], ranks[x.size :]
    # Identical groups would share a stream and their resampled ratio would be exactly 1.
    same = np.array_equal(np.sort(rx), np.sort(ry))
    bx = bootstrap_medians(x, resamples=resamples, rng=data_stream(seed, rx, 1 if same else 0))
    by = bootstrap_medians(y, resamples=resamples, rng=data_stream(seed, ry))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios: np.ndarray = bx / by
    return ratios


@dataclass(frozen=True)
class _Raw:
    ratio: float
    delta: float
    ref_median: float
    ci: tuple[float, float]
    band_ci: tuple[float, float]
    p: float
    method: str
    direction: int
    fp: float


def _raw_pair(
    c: int,
    r: int,
    groups: Sequence[Group],
    values: list[np.ndarray],
    *,
    seed: int,
    resamples: int,
    alpha: float,
    band_alpha: float,
) -> _Raw:
    x, y = values[c], values[r]
    # The pooled ranks key the permutation draws: the same data gives the same p whatever
    # the cells are called, whichever is the reference, and however the times are scaled.
    pooled = rankdata(np.concatenate([x, y])) if x.size and y.size else np.zeros(0)
    p, method = mann_whitney_test(x, y, rng=data_stream(seed, pooled))
    fp = failure_p(groups[c].failures, groups[c].ran, groups[r].failures, groups[r].ran)
    ratio = delta = my = math.nan
    ci = band_ci = (math.nan, math.nan)
    direction = 0
    if x.size and y.size:
        mx, my = float(np.median(x)), float(np.median(y))
        delta = mx - my
        direction = _direction(x, y)
        if my > 0:
            ratio = mx / my
            if x.size >= MIN_TIMED and y.size >= MIN_TIMED:
                boot = _pair_ratios(x, y, seed=seed, resamples=resamples)
                ci = percentile_interval(boot, alpha=alpha)
                band_ci = percentile_interval(boot, alpha=band_alpha)
    return _Raw(ratio, delta, my, ci, band_ci, p, method, direction, fp)


def _notes(
    raw: _Raw,
    *,
    n: tuple[int, int],
    nonfinite: tuple[int, int],
    negative: tuple[int, int] = (0, 0),
    attainable: bool,
    min_p: float,
    level: float,
    family: int,
    needed: int,
    alpha: float,
    band: Band,
) -> str:
    """What keeps the answers from being firmer, in words."""
    notes = []
    if not n[0] or not n[1]:
        notes.append("a group has no timed trial")
    elif not attainable:
        notes.append(
            f"{n[0]} vs {n[1]} trials: the smallest p is {min_p:.3g}, not below {level:.3g} "
            f"(alpha {alpha:g} / {family} Holm comparisons); run ≥ {needed} trials per cell"
        )
    if n[0] and n[1]:
        if not math.isfinite(raw.ratio):
            notes.append(
                f"baseline median {raw.ref_median:g}: no ratio, the band does not apply; "
                f"the difference is {raw.delta:+.3g}"
            )
        elif min(n) < MIN_TIMED:
            notes.append(f"no CI below {MIN_TIMED} timed trials per group")
        elif band == "undecided":
            notes.append("the CI straddles a band edge: more trials narrow it")
    if any(nonfinite):
        notes.append(
            f"non-finite values left out: {nonfinite[0]} (cell), {nonfinite[1]} (baseline)"
        )
    if any(negative):
        notes.append(
            f"negative times left out (not a duration: check the step-time source): "
            f"{negative[0]} (cell), {negative[1]} (baseline)"
        )
    return "; ".join(notes)


def compare_groups(
    groups: Sequence[Group],
    pairs: Sequence[tuple[int, int]],
    *,
    threshold: float,
    alpha: float = DEFAULT_ALPHA,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
) -> list[PairResult]:
    """Compare each ``(cell, reference)`` pair of indices into ``groups``.

    The pairs form one family: Mann–Whitney p-values are Holm-adjusted across the pairs that
    have one, and so are the failure tests'; the band verdicts use CIs at ``1 - alpha / m``
    (Bonferroni over the ``m`` pairs with a ratio). See the module docstring for every rule.

    Raises ``ValueError`` for ``alpha`` outside (0, 1), ``threshold`` ≤ 1 or ``resamples`` < 1.
    """
    _check_family(alpha=alpha, threshold=threshold, resamples=resamples)
    values = [g.finite() for g in groups]
    band_family = max(
        sum(1 for c, r in pairs if values[c].size >= MIN_TIMED and values[r].size >= MIN_TIMED), 1
    )
    raw = [
        _raw_pair(
            c,
            r,
            groups,
            values,
            seed=seed,
            resamples=resamples,
            alpha=alpha,
            band_alpha=alpha / band_family,
        )
        for c, r in pairs
    ]
    p_adj = holm([x.p for x in raw])
    f_adj = holm([x.fp for x in raw])
    family = max(int(np.sum(~np.isnan([x.p for x in raw]))), 1)
    fam = _Family(
        alpha=alpha,
        threshold=threshold,
        band_family=band_family,
        family=family,
        level=alpha / family,
        needed=trials_for_level(alpha / family),
    )
    return [
        _pair_result(groups[c], groups[r], (values[c].size, values[r].size), x, pa, fa, fam)
        for (c, r), x, pa, fa in zip(pairs, raw, p_adj, f_adj, strict=True)
    ]


def _check_family(*, alpha: float, threshold: float, resamples: int) -> None:
    """Raise ``ValueError`` for ``alpha`` outside (0, 1), ``threshold`` ≤ 1, ``resamples`` < 1."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not threshold > 1:
        raise ValueError(f"threshold must be > 1, got {threshold}")
    if resamples < 1:
        raise ValueError(f"resamples must be ≥ 1, got {resamples}")


@dataclass(frozen=True)
class _Family:
    """The levels every pair of one :func:`compare_groups` call is judged at."""

    alpha: float
    threshold: float
    band_family: int  # pairs with a ratio: band CIs at 1 - alpha / band_family
    family: int  # pairs with a p-value
    level: float  # alpha / family: what one p must reach
    needed: int  # trials per cell at which the exact test can reach ``level``


def _pair_result(
    cell: Group,
    ref: Group,
    n: tuple[int, int],
    x: _Raw,
    pa: float,
    fa: float,
    fam: _Family,
) -> PairResult:
    """One pair's verdicts, intervals and note from its raw statistics and Holm-adjusted p's."""
    alpha = fam.alpha
    min_p = attainable_p(*n)
    attainable = min_p < fam.level
    if not n[0] or not n[1]:
        difference: Difference = "no data"
        band: Band = "no data"
    else:
        significant = pa < alpha and x.direction != 0
        difference = (
            ("slower" if x.direction > 0 else "faster") if significant else "no difference detected"
        )
        band = band_verdict(*x.band_ci, threshold=fam.threshold)
    return PairResult(
        ratio=x.ratio,
        ci_low=x.ci[0],
        ci_high=x.ci[1],
        band_ci_low=x.band_ci[0],
        band_ci_high=x.band_ci[1],
        band_ci_level=(1 - alpha / fam.band_family if math.isfinite(x.band_ci[0]) else math.nan),
        delta=x.delta,
        p=x.p,
        p_method=x.method,
        p_adj=float(pa),
        failure_p=x.fp,
        failure_p_adj=float(fa),
        difference=difference,
        band=band,
        failures_vs_baseline=_failure_verdict(cell, ref, float(fa), alpha),
        min_p=min_p,
        attainable=attainable,
        trials_needed=fam.needed if n[0] and n[1] and not attainable else None,
        note=_notes(
            x,
            n=n,
            nonfinite=(cell.nonfinite, ref.nonfinite),
            negative=(cell.negative, ref.negative),
            attainable=attainable,
            min_p=min_p,
            level=fam.level,
            family=fam.family,
            needed=fam.needed,
            alpha=alpha,
            band=band,
        ),
    )
