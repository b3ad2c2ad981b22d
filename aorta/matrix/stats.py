"""Statistics of a matrix: what "cell B changed something" means, in numbers.

Pure numpy/scipy — arrays in, numbers out; no files, no printing. The unit is the trial:
each trial is reduced to one value (by default the median of its post-warm-up step times,
:func:`trial_medians`), and cells are compared on those values.

Per group of trials (:func:`summarize_values`, :func:`wilson_interval`):
median, IQR, coefficient of variation, Wilson interval on the failure rate.

Against a reference group (:func:`compare_groups`):

* **ratio** of medians, with a percentile bootstrap CI that resamples trials within each
  group (:func:`bootstrap_medians`). Each group's resamples come from its own stream,
  ``numpy.random.default_rng([seed, crc32(key)])``, so a cell's resamples do not depend on
  which other cells are in the run, and swapping the two groups inverts the ratio and its CI;
* **p**: two-sided Mann–Whitney U, exact (:func:`mann_whitney`). The exact null distribution
  assumes no ties; when a value occurs twice, a permutation test of the same statistic on
  mid-ranks is used instead (every relabelling of the trials when there are at most 9,999,
  otherwise 9,999 seeded random ones), and ``p_method`` says ``permutation``. Beyond
  :data:`EXACT_MAX_TRIALS` trials in a group both would cost minutes (or overflow), and the
  normal approximation with tie correction is accurate there: ``p_method`` says ``asymptotic``;
* **p_adj**: Holm's step-down adjustment across all compared cells (:func:`holm`);
* **fisher_p** / **fisher_p_adj**: Fisher's exact test on failures vs passes, Holm-adjusted;
* **verdict** (:func:`timing_verdict`): ``slower`` / ``faster`` when ``p_adj < alpha`` and the
  ratio lies beyond the band ``[1/threshold, threshold]``; ``no change`` when the whole CI
  lies inside the band; otherwise ``inconclusive``. No verdict but ``inconclusive`` is given
  while the exact test cannot reach Holm's first level ``alpha / m`` at the trial counts at
  hand (with 3 trials against 3 the smallest two-sided p is 0.1): :func:`trials_for_level`
  says how many trials per cell it takes.

Examples
--------
>>> import numpy as np
>>> base = Group("base", np.array([10.0, 10.2, 9.9, 10.1, 10.03, 9.8]), failures=0, ran=6)
>>> slow = Group("slow", np.array([13.0, 13.4, 12.9, 13.1, 13.2, 13.3]), failures=0, ran=6)
>>> same = Group("same", np.array([10.05, 9.95, 9.85, 10.15, 10.02, 9.97]), failures=0, ran=6)
>>> rows = compare_groups([base, slow, same], [(1, 0), (2, 0)], threshold=1.15)
>>> [(r.verdict, round(r.ratio, 2)) for r in rows]
[('slower', 1.31), ('no change', 1.0)]
>>> rows[0].p, rows[0].p_method
(0.0021645021645021645, 'exact')
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "EXACT_MAX_TRIALS",
    "PERMUTATION_RESAMPLES",
    "FailureVerdict",
    "Group",
    "PairResult",
    "Summary",
    "Verdict",
    "bootstrap_medians",
    "compare_groups",
    "fisher_p",
    "holm",
    "mann_whitney",
    "min_exact_p",
    "percentile_interval",
    "summarize_values",
    "timing_verdict",
    "trial_medians",
    "trials_for_level",
    "wilson_interval",
]

#: Bootstrap resamples per group unless told otherwise.
DEFAULT_RESAMPLES = 10_000
#: Bootstrap seed unless told otherwise (recorded beside every result).
DEFAULT_SEED = 0
#: Permutations of the tie-aware Mann–Whitney fallback.
PERMUTATION_RESAMPLES = 9_999
#: Largest group for the exact / permutation Mann–Whitney; larger groups use the normal
#: approximation (scipy's exact distribution takes minutes at 600 vs 600, and returns NaN).
EXACT_MAX_TRIALS = 50

Verdict = Literal["baseline", "slower", "faster", "no change", "inconclusive", "no data"]
FailureVerdict = Literal["baseline", "more", "fewer", "not significant", "no data"]


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
    from scipy.stats import norm

    return float(norm.ppf(1 - alpha / 2))


def wilson_interval(k: int, n: int, *, alpha: float = 0.05) -> tuple[float, float]:
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


def _stream(seed: int, key: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(key.encode())])


def bootstrap_medians(
    values: np.ndarray, *, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Medians of ``resamples`` bootstrap resamples (with replacement) of ``values``.

    Each resample draws ``len(values)`` indices from ``rng``; the result does not depend on
    the order of ``values``.

    Examples
    --------
    >>> m = bootstrap_medians(np.array([3.0, 1.0, 2.0]), resamples=5, rng=np.random.default_rng(0))
    >>> m.shape, bool(np.all((m >= 1) & (m <= 3)))
    ((5,), True)
    """
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    if n == 0:
        return np.full(resamples, np.nan)
    dtype = np.int16 if n < 2**15 else np.int64
    idx = rng.integers(0, n, size=(resamples, n), dtype=dtype)
    # x is sorted, so sorting the indices sorts each resample.
    idx.sort(axis=1)
    return (x[idx[:, (n - 1) // 2]] + x[idx[:, n // 2]]) / 2


def percentile_interval(samples: np.ndarray, *, alpha: float) -> tuple[float, float]:
    """The central ``1 - alpha`` interval of ``samples`` as order statistics.

    The lower end is the ``k``-th smallest and the upper the ``k``-th largest sample
    (``k = floor(alpha / 2 * (B - 1))``), so the interval of ``1 / samples`` is exactly the
    reciprocal of this one, reversed.

    Examples
    --------
    >>> percentile_interval(np.arange(101.0), alpha=0.1)
    (5.0, 95.0)
    """
    s = np.asarray(samples, dtype=float)
    s = s[~np.isnan(s)]
    if s.size == 0:
        return (math.nan, math.nan)
    k = math.floor(alpha / 2 * (s.size - 1))
    part = np.partition(s, [k, s.size - 1 - k])
    return (float(part[k]), float(part[s.size - 1 - k]))


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

    from scipy.stats import rankdata

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

    ``method`` is ``exact`` (scipy's exact null distribution, valid without ties) or, when a
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
    from scipy import stats

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size == 0 or y.size == 0:
        return (math.nan, "")
    if max(x.size, y.size) > EXACT_MAX_TRIALS:
        res = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic")
        return (min(1.0, max(0.0, float(res.pvalue))), "asymptotic")
    both = np.concatenate([x, y])
    if np.unique(both).size == both.size:
        res = stats.mannwhitneyu(x, y, alternative="two-sided", method="exact")
        return (float(res.pvalue), "exact")
    return (_permutation_p(x, y, rng or np.random.default_rng(DEFAULT_SEED)), "permutation")


def fisher_p(failures_a: int, ran_a: int, failures_b: int, ran_b: int) -> float:
    """Two-sided Fisher's exact test of failures/passes in ``a`` against ``b``.

    NaN when either group ran no trial.

    Examples
    --------
    >>> round(fisher_p(8, 10, 0, 10), 5)
    0.00071
    """
    if ran_a <= 0 or ran_b <= 0:
        return math.nan
    from scipy.stats import fisher_exact

    table = [[failures_a, ran_a - failures_a], [failures_b, ran_b - failures_b]]
    return float(fisher_exact(table, alternative="two-sided").pvalue)


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


def timing_verdict(
    *,
    ratio: float,
    ci_low: float,
    ci_high: float,
    p_adj: float,
    alpha: float,
    threshold: float,
    attainable: bool,
) -> Verdict:
    """The verdict on one cell's timing against the reference.

    * ``slower`` / ``faster``: ``p_adj < alpha`` and the ratio beyond ``threshold`` /
      below ``1 / threshold``;
    * ``no change``: the test is attainable at these trial counts and the whole CI lies in
      ``[1/threshold, threshold]``;
    * ``no data``: no ratio (a group has no timed trial);
    * ``inconclusive``: anything else.

    Examples
    --------
    >>> kw = dict(alpha=0.05, threshold=1.15, attainable=True)
    >>> timing_verdict(ratio=1.3, ci_low=1.2, ci_high=1.4, p_adj=0.01, **kw)
    'slower'
    >>> timing_verdict(ratio=1.02, ci_low=0.95, ci_high=1.08, p_adj=0.4, **kw)
    'no change'
    >>> timing_verdict(ratio=1.3, ci_low=1.2, ci_high=1.4, p_adj=0.1, **kw)
    'inconclusive'
    """
    if not math.isfinite(ratio):
        return "no data"
    significant = p_adj < alpha  # False for NaN
    if significant and ratio > threshold:
        return "slower"
    if significant and ratio < 1 / threshold:
        return "faster"
    if attainable and 1 / threshold <= ci_low and ci_high <= threshold:
        return "no change"
    return "inconclusive"


@dataclass(frozen=True)
class Group:
    """The trials of one cell, as :func:`compare_groups` sees them.

    ``key`` names the group's bootstrap stream (use the cell's name, prefixed by the run
    when comparing two runs); ``values`` are the trial values that count for timing
    (non-finite ones are dropped); ``failures`` of ``ran`` trials failed.
    """

    key: str
    values: np.ndarray
    failures: int = 0
    ran: int = 0

    def finite(self) -> np.ndarray:
        v = np.asarray(self.values, dtype=float)
        return v[np.isfinite(v)]


@dataclass(frozen=True)
class PairResult:
    """A cell against its reference (one row of a comparison)."""

    ratio: float
    ci_low: float
    ci_high: float
    p: float
    p_method: str
    p_adj: float
    fisher_p: float
    fisher_p_adj: float
    verdict: Verdict
    failures_vs_baseline: FailureVerdict
    #: The smallest p the exact test could give at these trial counts.
    min_p: float
    #: Whether ``min_p`` is below Holm's first level ``alpha / m``.
    attainable: bool
    #: Trials per cell at which the test becomes attainable; None when it already is.
    trials_needed: int | None
    #: Why an ``inconclusive`` verdict is one, in words.
    note: str


def _failure_verdict(cell: Group, ref: Group, p_adj: float, alpha: float) -> FailureVerdict:
    if cell.ran <= 0 or ref.ran <= 0:
        return "no data"
    if not p_adj < alpha:
        return "not significant"
    return "more" if cell.failures / cell.ran > ref.failures / ref.ran else "fewer"


class _Bootstraps:
    """Each group's bootstrap medians, drawn once from the group's own stream."""

    def __init__(
        self, groups: Sequence[Group], values: list[np.ndarray], *, seed: int, resamples: int
    ):
        self.groups, self.values, self.seed, self.resamples = groups, values, seed, resamples
        self.cache: dict[int, np.ndarray] = {}

    def __getitem__(self, i: int) -> np.ndarray:
        if i not in self.cache:
            rng = _stream(self.seed, self.groups[i].key)
            self.cache[i] = bootstrap_medians(self.values[i], resamples=self.resamples, rng=rng)
        return self.cache[i]


def _raw_pair(
    c: int,
    r: int,
    groups: Sequence[Group],
    values: list[np.ndarray],
    boots: _Bootstraps,
    *,
    seed: int,
    alpha: float,
) -> tuple[float, float, float, float, str, float]:
    """``(ratio, ci_low, ci_high, p, p_method, fisher_p)`` of cell ``c`` against ``r``."""
    x, y = values[c], values[r]
    pair_key = "\x1f".join(sorted((groups[c].key, groups[r].key)))
    p, method = mann_whitney(x, y, rng=_stream(seed, pair_key))
    fp = fisher_p(groups[c].failures, groups[c].ran, groups[r].failures, groups[r].ran)
    ratio = lo = hi = math.nan
    if x.size and y.size:
        mx, my = float(np.median(x)), float(np.median(y))
        if my > 0:
            ratio = mx / my
        if x.size >= 2 and y.size >= 2:
            with np.errstate(divide="ignore", invalid="ignore"):
                lo, hi = percentile_interval(boots[c] / boots[r], alpha=alpha)
    return ratio, lo, hi, p, method, fp


def _note(
    verdict: str,
    *,
    attainable: bool,
    n: tuple[int, int],
    min_p: float,
    level: float,
    family: int,
    needed: int,
    lo: float,
    hi: float,
    p_adj: float,
    alpha: float,
    threshold: float,
) -> str:
    """Why an inconclusive (or no-data) verdict is one, in words."""
    if verdict == "no data":
        return "a group has no timed trial"
    if verdict != "inconclusive":
        return ""
    if not attainable:
        return (
            f"{n[0]} vs {n[1]} trials: the smallest exact p is {min_p:.3g}, not below "
            f"{level:.3g} (alpha {alpha:g} / {family} Holm comparisons); "
            f"run ≥ {needed} trials per cell"
        )
    if math.isnan(lo):
        return "no CI: a group has fewer than 2 timed trials"
    why = "significant, but" if p_adj < alpha else f"p_adj {p_adj:.3g} ≥ {alpha:g} and"
    return (
        f"{why} the CI [{lo:.3g}, {hi:.3g}] is not inside "
        f"[{1 / threshold:.3g}, {threshold:.3g}]: more trials narrow it"
    )


def compare_groups(
    groups: Sequence[Group],
    pairs: Sequence[tuple[int, int]],
    *,
    threshold: float,
    alpha: float = 0.05,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
) -> list[PairResult]:
    """Compare each ``(cell, reference)`` pair of indices into ``groups``.

    The pairs form one family: Mann–Whitney p-values are Holm-adjusted across the pairs that
    have a p-value, and so are Fisher's. See the module docstring for every rule.

    Raises ``ValueError`` for ``alpha`` outside (0, 1), ``threshold`` ≤ 1 or ``resamples`` < 1.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not threshold > 1:
        raise ValueError(f"threshold must be > 1, got {threshold}")
    if resamples < 1:
        raise ValueError(f"resamples must be ≥ 1, got {resamples}")
    values = [g.finite() for g in groups]
    boots = _Bootstraps(groups, values, seed=seed, resamples=resamples)
    raw = [_raw_pair(c, r, groups, values, boots, seed=seed, alpha=alpha) for c, r in pairs]
    p_adj = holm([row[3] for row in raw])
    f_adj = holm([row[5] for row in raw])
    family = max(int(np.sum(~np.isnan([row[3] for row in raw]))), 1)
    level = alpha / family
    needed = trials_for_level(level)
    out = []
    for (c, r), (ratio, lo, hi, p, method, fp), pa, fa in zip(
        pairs, raw, p_adj, f_adj, strict=True
    ):
        n = (values[c].size, values[r].size)
        min_p = min_exact_p(*n)
        attainable = min_p < level
        verdict = timing_verdict(
            ratio=ratio,
            ci_low=lo,
            ci_high=hi,
            p_adj=float(pa),
            alpha=alpha,
            threshold=threshold,
            attainable=attainable,
        )
        out.append(
            PairResult(
                ratio=ratio,
                ci_low=lo,
                ci_high=hi,
                p=p,
                p_method=method,
                p_adj=float(pa),
                fisher_p=fp,
                fisher_p_adj=float(fa),
                verdict=verdict,
                failures_vs_baseline=_failure_verdict(groups[c], groups[r], float(fa), alpha),
                min_p=min_p,
                attainable=attainable,
                trials_needed=needed if verdict == "inconclusive" and not attainable else None,
                note=_note(
                    verdict,
                    attainable=attainable,
                    n=n,
                    min_p=min_p,
                    level=level,
                    family=family,
                    needed=needed,
                    lo=lo,
                    hi=hi,
                    p_adj=float(pa),
                    alpha=alpha,
                    threshold=threshold,
                ),
            )
        )
    return out
