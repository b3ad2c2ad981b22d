"""Anytime-valid verdicts: statistics that stay valid however often a sweep looks.

A fixed-n test re-run after every round and stopped when it "looks decided" makes false
positives far more likely than its alpha says. The functions here give verdicts that hold at
any stopping time (docs/statistics.md, "Adaptive sweeps"). Pure numpy/scipy, no files.

The unit is a **pair**: trial ``k`` of a cell with trial ``k`` of the baseline. The
interleaved schedule runs them in the same round, so a drift of the machine hits both.

* **Timing** — the log of each pair's ratio, ``d_k = log(cell_k / baseline_k)``, is modelled
  as Gaussian with unknown mean ``θ`` (the log ratio) and unknown variance. For each ``θ₀`` the
  Bayes factor of "mean ``θ₀``" against a normal prior on the standardized effect
  ``(θ - θ₀)/σ ~ N(0, g)``, with the scale-invariant (right-Haar) prior on ``σ``, is a test
  martingale under the null for *every* ``σ`` (Lai 1976; Wang & Ramdas 2023, "Anytime-valid
  t-tests and confidence sequences for Gaussian means with unknown variance"). Its closed
  form is the one-sample normal-prior t Bayes factor (:func:`t_mixture_log_e`), and the
  confidence sequence ``{θ₀ : E_n(θ₀) < 1/α}`` is an interval in closed form
  (:func:`t_mixture_halfwidth`). No variance is plugged in, so small ``n`` needs no
  correction: the CS is simply wide. :func:`timing_sequence` intersects the intervals over
  time (still valid, and never widening), so a verdict once reached is never withdrawn.
  Timing settles only on evidence: ``slower``/``faster`` or the sequence inside the band.
* **Failures: two looks, α split between them** (Bonferroni over the looks). *Anytime*: the
  safe test for 2×2 tables (Turner, Ly & Grünwald 2024) on every pair, two one-sided
  e-processes (:func:`pair_log_e`), with :data:`ANYTIME_SHARE` of α. *The planned look* at
  ``max_trials``: Boschloo's exact test on the first ``max_trials`` pairs, with the rest.
  ``p = min(p_anytime / share, p_look / (1 - share))`` is a p-value valid at any stopping
  time; ``more``/``fewer`` once Holm over the cells (:func:`sequential_cells`; Bonferroni in
  :func:`sequential_pair`) rejects it.
* **Within margin and futility** — the universal-inference e-process against "the rates
  differ by ``δ`` or more" (:func:`difference_log_e`). At ``δ = margin`` and ``K/α`` it is a
  claim, "failure rate within ± margin"; at ``δ =`` :func:`futility_difference` and
  ``1/β`` (:data:`FUTILITY_LEVEL`) the cell stops asking without a claim: a cell whose rates
  differ by that much is stopped as futile with probability at most ``β``. Nothing stops on
  an observed difference.
* **Timing's two looks** — ``slower``/``faster`` the same way: the sequence's anytime p
  (``1 / max E(0)``) with :data:`ANYTIME_SHARE` of α and, at ``max_trials``, Mann–Whitney on
  the first ``max_trials`` trials (the fixed design's test) with the rest.
* **Multiplicity** — ``slower``/``faster`` and ``more``/``fewer``: Holm over the ``K``
  compared cells' p-values; the band and margin sequences: Bonferroni (each at ``α/K``). All
  valid at any stopping time.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(1)
>>> base = 10 * np.exp(rng.normal(0, 0.03, 12))
>>> same = 10 * np.exp(rng.normal(0, 0.03, 12))
>>> r = sequential_pair(same, np.zeros(12, bool), base, np.zeros(12, bool), threshold=1.15)
>>> r.timing.difference, r.timing.band, r.failures.verdict, r.decided
('no difference detected', 'within band', 'not significant', True)
>>> r.reason
'within band after 5 trials; failures: changes of ±0.3 or more ruled out at 50% after 8 trials (futility)'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from aorta.matrix.bootstrap import data_stream
from aorta.matrix.boschloo import boschloo_p
from aorta.matrix.eprocess import (
    DEFAULT_G,
    MIN_PAIRS,
    difference_log_e,
    pair_log_e,
    running_cs,
    t_mixture_halfwidth,
    t_mixture_log_e,
)
from aorta.matrix.rank_tests import rankdata
from aorta.matrix.stats import (
    DEFAULT_ALPHA,
    DEFAULT_SEED,
    Band,
    Difference,
    FailureVerdict,
    mann_whitney_test,
)

__all__ = [
    "ANYTIME_SHARE",
    "DEFAULT_FAILURE_MARGIN",
    "DEFAULT_G",
    "FAILURE_ANYTIME_SHARE",
    "FAILURE_INTERIM_LOOKS",
    "FAILURE_PRIOR",
    "FUTILITY_LEVEL",
    "FUTILITY_MIN_PAIRS",
    "MIN_PAIRS",
    "CellTrials",
    "FailureSequence",
    "SequentialResult",
    "TimingSequence",
    "difference_log_e",
    "failure_looks",
    "failure_sequence",
    "futility_difference",
    "holm_failures",
    "holm_timing",
    "pair_log_e",
    "sequential_cells",
    "sequential_pair",
    "t_mixture_halfwidth",
    "t_mixture_log_e",
    "timing_sequence",
]

#: Failure-rate difference within which a cell's failures "do not matter" (``within margin``).
DEFAULT_FAILURE_MARGIN = 0.15
#: Timing: share of α the anytime sequence spends when a look at ``max_trials`` is planned;
#: Mann–Whitney at the look gets the rest. Without a planned look it gets all of α.
ANYTIME_SHARE = 0.1
#: Failures, when a look at ``max_trials`` is planned: the anytime e-process's share of α …
FAILURE_ANYTIME_SHARE = 0.02
#: … and the interim looks, ``(fraction of max_trials, share of α)``: Boschloo's test on the
#: pairs of the first ``fraction · max_trials`` trials. Large changes are found here, 12 trials
#: before the planned look, which keeps the rest, 0.9 α: nearly all of the fixed design's power.
FAILURE_INTERIM_LOOKS: tuple[tuple[float, float], ...] = ((0.7, 0.08),)
#: Futility: a cell whose failure rates differ by :func:`futility_difference` or more is
#: stopped for futility with probability at most this (it spends power, not error rate; the
#: measured loss is far below it, docs/statistics.md).
FUTILITY_LEVEL = 0.5
#: No futility stop before this many pairs: a cell failing 30% of the time passes 8 in a row
#: 5.8% of the time; before that a clean streak cannot tell it from a 5% cell.
FUTILITY_MIN_PAIRS = 8
#: The Beta prior over the common failure rate in the futility and margin e-processes: rare
#: failures (mean 1/11) are what most cells of a triage matrix show; any prior keeps the
#: guarantee, this one reaches it ~1 pair sooner per cell than Jeffreys' (benchmarks/adaptive.py).
FAILURE_PRIOR = (0.5, 5.0)
#: Relative slack for comparing a p-value with its level (floating-point products).
_TIE = 1e-12


# --- timing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimingSequence:
    """The timing question after ``n`` pairs (:func:`timing_sequence`)."""

    n: int
    #: Mean log ratio of the pairs (NaN below one pair).
    estimate: float
    #: Running intersection of the CSs for the log ratio at ``alpha`` (per cell) …
    low: float
    high: float
    #: … and at ``alpha / family`` (what the band verdicts use).
    band_low: float
    band_high: float
    #: P-value for "no difference", valid at any stopping time: the anytime ``1 / max_{s≤n}
    #: E_s(0)`` and the planned look's Mann–Whitney p combined (Bonferroni over the two
    #: looks); not adjusted.
    p: float
    difference: Difference
    band: Band
    #: Pairs after which timing was first settled (slower/faster or within band); None: not yet.
    settled_at: int | None
    #: ``p`` adjusted over the cells (Bonferroni; Holm in :func:`sequential_cells`).
    p_adj: float = math.nan
    #: The anytime part alone, and the planned look's p (NaN before it, or without one).
    p_anytime: float = math.nan
    p_look: float = math.nan
    #: For ``slower``/``faster``: which look found it, ``anytime`` or ``planned look``, and
    #: after how many pairs.
    via: str = ""
    found_at: int | None = None
    #: After each pair: ``p``, its direction (+1 slower, -1 faster), and the look that gave it
    #: (``anytime`` or ``planned look``).
    path: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    side: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    by: np.ndarray = field(default_factory=lambda: np.zeros(0, object), compare=False, repr=False)


def timing_sequence(
    log_ratios: np.ndarray,
    *,
    threshold: float,
    alpha: float = DEFAULT_ALPHA,
    family: int = 1,
    g: float = DEFAULT_G,
    planned: bool = False,
    look: tuple[int, float, int] | None = None,
) -> TimingSequence:
    """The timing verdict from the paired log ratios ``log(cell_k / baseline_k)``, in trial
    order, valid whenever it is computed.

    ``slower`` / ``faster`` once ``family · p ≤ alpha`` (Bonferroni over the cells), ``p`` the
    two looks combined: the anytime ``1 / max E(0)`` with :data:`ANYTIME_SHARE` of ``alpha``
    when a look is ``planned`` (all of it otherwise) — without a look, exactly when the
    sequence at ``alpha / family`` excludes 0 — and, once it has happened, the planned look
    ``look = (pairs, p, side)``: from pair ``pairs`` on, Mann–Whitney's ``p`` (computed by the
    caller on the trials up to ``max_trials``) with the rest, in direction ``side`` (+1
    slower). The band verdict is the sequence at ``alpha / family`` against ``[-log
    threshold, log threshold]``. Swapping cell and baseline mirrors every answer.

    >>> t = timing_sequence(np.log([1.1, 1.12, 1.09, 1.11, 1.1, 1.1]), threshold=1.05)
    >>> t.difference, t.band, t.settled_at
    ('slower', 'beyond band', 4)
    """
    if look is not None and not planned:
        raise ValueError("a look at max_trials needs planned=True (its share of alpha)")
    d = np.asarray(log_ratios, dtype=float)
    d = d[np.isfinite(d)]
    nan = math.nan
    if d.size == 0:
        return TimingSequence(0, nan, nan, nan, nan, nan, nan, "no data", "no data", None)
    family = max(family, 1)
    lo, hi = running_cs(d, alpha=alpha, g=g)
    blo, bhi = running_cs(d, alpha=alpha / family, g=g)
    edge = math.log(threshold)
    inside = (blo >= -edge) & (bhi <= edge) & (blo <= bhi)
    beyond = (blo > edge) | (bhi < -edge)
    mean, p_any, toward = _anytime_t(d, g=g)
    p_look = nan if look is None else look[1]
    path, side, by = _looks(
        p_any,
        toward,
        share=ANYTIME_SHARE if planned else 1.0,
        looks=[] if look is None else [("planned look", (*look, 1 - ANYTIME_SHARE))],
    )
    rejected = path * family <= alpha * (1 + _TIE)
    crossed = _first(rejected)
    last = d.size - 1
    difference: Difference = "no difference detected"
    via = ""
    if crossed is not None:
        difference = "slower" if side[crossed] > 0 else "faster"
        via = str(by[crossed])
    band: Band = "beyond band" if beyond[last] else "within band" if inside[last] else "undecided"
    if blo[last] > bhi[last]:  # the intervals stopped overlapping: the model does not hold
        band = "undecided"
    # A cell whose sequence already excludes 0 differs: it runs on until the test says which
    # way (or the planned look), rather than stopping as "within band" without the verdict.
    holds_zero = (lo <= 0) & (hi >= 0)
    settled = _first((inside & holds_zero) | rejected)
    return TimingSequence(
        n=int(d.size),
        estimate=float(mean[last]),
        low=float(lo[last]),
        high=float(hi[last]),
        band_low=float(blo[last]),
        band_high=float(bhi[last]),
        p=float(path[last]),
        difference=difference,
        band=band,
        settled_at=None if settled is None else settled + 1,
        p_adj=float(min(1.0, path[last] * family)),
        p_anytime=float(p_any[last]),
        p_look=p_look,
        via=via,
        found_at=None if crossed is None else crossed + 1,
        path=path,
        side=side,
        by=by,
    )


def _anytime_t(d: np.ndarray, *, g: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The running mean of ``d``, the t-mixture e-process's anytime p, and the side of 0 (±1)
    the mean was on when the strongest evidence so far came."""
    n = np.arange(1, d.size + 1)
    mean = np.cumsum(d) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.sqrt(np.maximum(np.cumsum(d**2) - n * mean**2, 0) / np.maximum(n - 1, 1))
    log_e = np.zeros(d.size)
    ok = n >= MIN_PAIRS
    log_e[ok] = np.maximum(0.0, t_mixture_log_e(mean[ok], sd[ok], n[ok], g=g))
    best = np.maximum.accumulate(log_e)
    at = np.maximum.accumulate(np.where(log_e >= best, np.arange(d.size), 0))
    return mean, np.exp(-best), np.where(mean[at] >= 0, 1, -1)


#: A look: from pair ``pairs`` on, its p-value ``p``, direction ``side`` (+1: slower / more)
#: and share of α.
_Look = tuple[int, float, int, float]


def _looks(
    p_anytime: np.ndarray, side: np.ndarray, *, share: float, looks: Sequence[tuple[str, _Look]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """After each pair, the p-value of the looks combined (Bonferroni over them): the anytime
    p with ``share`` of α and, from each named look's pair on, its p with its share; the
    direction of the one that gives it, and its name (``anytime`` or the look's)."""
    path = np.minimum(1.0, p_anytime / share)
    by = np.full(path.size, "anytime", dtype=object)
    for name, (pairs, p_look, look_side, part) in looks:
        if math.isnan(p_look):
            continue
        gives = min(1.0, p_look / part)
        hit = (np.arange(1, path.size + 1) >= max(pairs, 1)) & (gives < path)
        path = np.where(hit, gives, path)
        side = np.where(hit, 1 if look_side >= 0 else -1, side)
        by = np.where(hit, name, by)
    return path, side, by


def failure_looks(max_trials: int) -> list[tuple[int, float]]:
    """The failure question's looks for a cap of ``max_trials``: ``(trials, share of α)``,
    the interim looks (:data:`FAILURE_INTERIM_LOOKS`) and then the planned one, which gets
    what they and the anytime e-process (:data:`FAILURE_ANYTIME_SHARE`) leave.

    >>> failure_looks(40)
    [(28, 0.08), (40, 0.9)]
    """
    interim = [(int(max_trials * f), part) for f, part in FAILURE_INTERIM_LOOKS]
    return [*interim, (max_trials, _planned_failure_share())]


def _planned_failure_share() -> float:
    """What the anytime e-process and the interim looks leave of α to the planned look."""
    return round(1.0 - FAILURE_ANYTIME_SHARE - sum(part for _, part in FAILURE_INTERIM_LOOKS), 12)


def _first(mask: np.ndarray) -> int | None:
    hit = np.flatnonzero(mask)
    return int(hit[0]) if hit.size else None


# --- failures --------------------------------------------------------------------------------


def futility_difference(margin: float) -> float:
    """The failure-rate change futility protects: twice the margin, or halfway from the
    margin to 1 when that is less (a change that large is stopped as futile with probability
    at most :data:`FUTILITY_LEVEL`).

    >>> futility_difference(0.15), futility_difference(0.6)
    (0.3, 0.8)
    """
    return min(2 * margin, (1 + margin) / 2)


@dataclass(frozen=True)
class FailureSequence:
    """The failure question after ``n`` pairs that both ran (:func:`failure_sequence`)."""

    n: int
    #: Failures of the cell and of the baseline over those pairs.
    failed: int
    base_failed: int
    #: Observed cell failure rate minus the baseline's, over the pairs.
    difference: float
    #: P-value for "same failure rate", valid at any stopping time: the anytime e-process's
    #: and the planned look's combined (Bonferroni over the two looks); not adjusted.
    p: float
    #: ``p`` adjusted over the cells (Bonferroni; Holm after :func:`holm_failures`).
    p_adj: float
    #: The anytime e-process's p, ``2 / max_{s≤n} E_s`` (one-sided e-processes, both ways).
    p_anytime: float
    #: Boschloo's p at the planned look (NaN before it, or without one).
    p_look: float
    verdict: FailureVerdict
    #: ``more`` / ``fewer`` / ``within margin`` / ``futility``, or "" while open.
    how: str
    #: For ``more``/``fewer``: which look found it, ``anytime``, ``interim look`` or
    #: ``planned look``.
    via: str
    settled_at: int | None
    #: After each pair: ``p``, its direction (+1 more, -1 fewer), and the look that gave it
    #: (``anytime``, ``interim look`` or ``planned look``): what Holm over the cells replays.
    path: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    side: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    by: np.ndarray = field(default_factory=lambda: np.zeros(0, object), compare=False, repr=False)


def failure_sequence(
    cell_failed: np.ndarray,
    base_failed: np.ndarray,
    *,
    alpha: float = DEFAULT_ALPHA,
    family: int = 1,
    margin: float = DEFAULT_FAILURE_MARGIN,
    planned: bool = False,
    look: int | None = None,
    futility: float | None = FUTILITY_LEVEL,
    interim: Sequence[int | None] = (),
) -> FailureSequence:
    """The failure verdict from paired outcomes (``True`` = the trial failed), in trial
    order, over the pairs where both trials ran.

    ``more`` / ``fewer`` once ``family · p ≤ alpha`` (Bonferroni over the cells), ``p`` the
    looks combined: the anytime e-processes (:func:`pair_log_e`) with
    :data:`FAILURE_ANYTIME_SHARE` of ``alpha`` when a look is ``planned`` (all of it
    otherwise) and — once each has happened — Boschloo's test on the first ``interim[i]``
    pairs with the share :data:`FAILURE_INTERIM_LOOKS` gives it, and on the first ``look``
    pairs with the rest (:func:`failure_looks`). Otherwise settled as ``within margin`` when
    :func:`difference_log_e` (prior :data:`FAILURE_PRIOR`) at ``margin`` reaches ``family /
    alpha``, or for ``futility`` when it reaches ``1 / futility`` at
    :func:`futility_difference`, not before :data:`FUTILITY_MIN_PAIRS` pairs
    (``futility=None``: never). A rejection wins over either.

    >>> f = failure_sequence(np.array([1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1] * 2, bool), np.zeros(30, bool))
    >>> f.verdict, f.how, f.via, f.settled_at
    ('more', 'more', 'anytime', 7)
    """
    fc = np.asarray(cell_failed, dtype=bool)
    fb = np.asarray(base_failed, dtype=bool)
    n = int(min(fc.size, fb.size))
    fc, fb = fc[:n], fb[:n]
    if look is not None and not planned:
        raise ValueError("a look at max_trials needs planned=True (its share of alpha)")
    nan = math.nan
    if n == 0:
        return FailureSequence(0, 0, 0, nan, nan, nan, nan, nan, "no data", "", "", None)
    family = max(family, 1)
    more, fewer = pair_log_e(fc, fb)
    up, down = np.maximum.accumulate(more), np.maximum.accumulate(fewer)
    p_any = np.minimum(1.0, 2 * np.exp(-np.maximum(up, down)))
    sc, sb = np.cumsum(fc), np.cumsum(fb)
    looks, p_look = _failure_looks(sc, sb, interim=interim, look=look)
    path, side, by = _looks(
        p_any,
        np.where(up >= down, 1, -1),
        share=FAILURE_ANYTIME_SHARE if planned else 1.0,
        looks=looks,
    )
    verdict, how, via, at = _failure_settled(
        path, side, by, sc, sb, alpha=alpha, family=family, margin=margin, futility=futility
    )
    return FailureSequence(
        n=n,
        failed=int(sc[-1]),
        base_failed=int(sb[-1]),
        difference=float((sc[-1] - sb[-1]) / n),
        p=float(path[-1]),
        p_adj=float(min(1.0, path[-1] * family)),
        p_anytime=float(p_any[-1]),
        p_look=p_look,
        verdict=verdict,
        how=how,
        via=via,
        settled_at=at,
        path=path,
        side=side,
        by=by,
    )


def _failure_looks(
    sc: np.ndarray, sb: np.ndarray, *, interim: Sequence[int | None], look: int | None
) -> tuple[list[tuple[str, _Look]], float]:
    """Boschloo's test at the interim looks and the planned one, and the planned one's p."""
    n = sc.size

    def boschloo(pairs: int | None) -> tuple[int, float, int] | None:
        if pairs is None or not 0 < pairs <= n:
            return None
        x, y = int(sc[pairs - 1]), int(sb[pairs - 1])
        return pairs, boschloo_p(x, pairs, y, pairs), 1 if x > y else -1

    looks: list[tuple[str, _Look]] = []
    for (_, part), pairs in zip(FAILURE_INTERIM_LOOKS, interim, strict=False):
        if (found := boschloo(pairs)) is not None:
            looks.append(("interim look", (*found, part)))
    final = boschloo(look)
    if final is not None:
        looks.append(("planned look", (*final, _planned_failure_share())))
    return looks, math.nan if final is None else final[1]


def _failure_settled(
    path: np.ndarray,
    side: np.ndarray,
    by: np.ndarray,
    sc: np.ndarray,
    sb: np.ndarray,
    *,
    alpha: float,
    family: int,
    margin: float,
    futility: float | None,
) -> tuple[FailureVerdict, str, str, int | None]:
    """Whether and how the failure question settled: a difference, within margin, futility."""
    k = np.arange(1, sc.size + 1)
    rejected = _first(path * family <= alpha * (1 + _TIE))
    # "Within margin" (a claim, at family / alpha) and futility (a stop, at 1 / futility):
    # the same e-process at two differences, computed together.
    deltas = np.array([[margin], [futility_difference(margin)]])
    log_e = difference_log_e(
        sc[None, :], sb[None, :], k[None, :], delta=deltas, prior=FAILURE_PRIOR
    )
    within = _first(log_e[0] >= math.log(family / alpha))
    futile = None
    if futility is not None:
        futile = _first((log_e[1] >= math.log(1 / futility)) & (k >= FUTILITY_MIN_PAIRS))
    if rejected is not None:
        verdict: FailureVerdict = "more" if side[rejected] > 0 else "fewer"
        return verdict, verdict, str(by[rejected]), rejected + 1
    if within is not None:
        return "not significant", "within margin", "", within + 1
    if futile is not None:
        return "not significant", "futility", "", futile + 1
    return "not significant", "", "", None


def _holm(paths: Sequence[np.ndarray], alpha: float) -> tuple[list[int | None], np.ndarray]:
    """Holm's step-down over the cells' p after each pair (each path held at its last value
    once it ends): per cell the first pair index at which it is rejected (None: never), and
    the Holm-adjusted p of the last values."""
    k = len(paths)
    width = max(1, *(p.size for p in paths))
    grid = np.ones((k, width))
    for i, p in enumerate(paths):
        if p.size:
            grid[i, : p.size] = p
            grid[i, p.size :] = p[-1]
    order = np.argsort(grid, axis=0, kind="stable")
    ranked = np.take_along_axis(grid, order, axis=0)
    levels = alpha / (k - np.arange(k))[:, None]
    passed = np.cumprod(ranked <= levels * (1 + _TIE), axis=0).astype(bool)
    rejected = np.zeros_like(passed)
    np.put_along_axis(rejected, order, passed, axis=0)
    adjusted = np.empty(k)
    adjusted[order[:, -1]] = np.minimum(
        1.0, np.maximum.accumulate(ranked[:, -1] * (k - np.arange(k)))
    )
    return [_first(r) for r in rejected], adjusted


_Seq = TypeVar("_Seq", TimingSequence, FailureSequence)


def _with_holm(
    seqs: Sequence[_Seq], alpha: float, found: Callable[[_Seq, int, str], _Seq]
) -> list[_Seq]:
    """``seqs`` with Holm's adjusted p, and ``found(seq, j, via)`` applied to each that Holm
    rejects: ``j`` the first pair index it does, ``via`` the look that gave the p then."""
    if not seqs:
        return []
    first, adjusted = _holm([s.path for s in seqs], alpha)
    out = []
    for s, t, adj in zip(seqs, first, adjusted, strict=True):
        if s.n:
            s = replace(s, p_adj=float(adj))
            if t is not None:
                j = min(t, s.n - 1)
                s = found(s, j, str(s.by[j]))
        out.append(s)
    return out


def holm_failures(seqs: Sequence[FailureSequence], *, alpha: float) -> list[FailureSequence]:
    """The cells' failure verdicts with Holm's step-down over their ``p`` instead of
    Bonferroni: valid at any stopping time because each ``p`` is, and monotone because each
    ``p`` only falls as pairs come (a rejection stays). A cell's ``settled_at`` is the first
    pair count at which Holm over every cell's ``p`` so far rejects it.

    >>> a = failure_sequence(np.ones(12, bool), np.zeros(12, bool), family=2)
    >>> b = failure_sequence(np.ones(6, bool), np.zeros(6, bool), family=2)
    >>> [(s.verdict, s.settled_at) for s in holm_failures([a, b], alpha=0.05)]
    [('more', 6), ('more', 6)]
    """

    def found(s: FailureSequence, j: int, via: str) -> FailureSequence:
        verdict: FailureVerdict = "more" if s.side[j] > 0 else "fewer"
        return replace(s, verdict=verdict, how=verdict, via=via, settled_at=j + 1)

    return _with_holm(seqs, alpha, found)


def holm_timing(seqs: Sequence[TimingSequence], *, alpha: float) -> list[TimingSequence]:
    """The cells' ``slower``/``faster`` with Holm's step-down over their timing ``p``, as
    :func:`holm_failures` does for failures (the band verdicts keep their Bonferroni
    sequence).

    >>> a = timing_sequence(np.log([1.2, 1.21, 1.19, 1.2, 1.2]), threshold=1.5, family=2)
    >>> b = timing_sequence(np.log([1.2, 0.8, 1.3, 0.9, 1.0]), threshold=1.5, family=2)
    >>> [t.difference for t in holm_timing([a, b], alpha=0.05)]
    ['slower', 'no difference detected']
    """

    def found(s: TimingSequence, j: int, via: str) -> TimingSequence:
        difference: Difference = "slower" if s.side[j] > 0 else "faster"
        settled = j + 1 if s.settled_at is None else min(s.settled_at, j + 1)
        return replace(s, difference=difference, via=via, settled_at=settled, found_at=j + 1)

    return _with_holm(seqs, alpha, found)


# --- one cell, and a matrix -------------------------------------------------------------------


@dataclass(frozen=True)
class SequentialResult:
    """A cell against the baseline under continuous monitoring (:func:`sequential_pair`)."""

    timing: TimingSequence
    failures: FailureSequence
    #: Both questions settled: the cell may stop.
    decided: bool
    #: When and why, in words ("within band after 6 trials; failures: …"), or what is open.
    reason: str


@dataclass(frozen=True)
class CellTrials:
    """One cell's trials, in trial order (index = trial): what :func:`sequential_cells`
    pairs."""

    #: The timing value (NaN when the trial has none).
    values: np.ndarray
    #: Did it fail?
    failed: np.ndarray
    #: Did it run (passed or failed; None: every trial)?
    ran: np.ndarray | None = None
    #: Has it a record (passed, failed or errored; None: ``ran``)? The planned look happens
    #: once the cell and the baseline have a record of trial ``max_trials - 1``.
    recorded: np.ndarray | None = None


def _timing_words(t: TimingSequence) -> str:
    if t.settled_at is None:
        return ""
    if t.difference in ("slower", "faster"):
        where = f" (the {t.via})" if t.via != "anytime" else ""
        return f"{t.difference} after {t.found_at} trials{where}"
    return f"{t.band} after {t.settled_at} trials"


def _failure_words(f: FailureSequence, margin: float, futility: float | None) -> str:
    if f.how in ("more", "fewer"):
        where = f" (the {f.via})" if f.via != "anytime" else ""
        return f"{f.how} failures after {f.settled_at} trials{where}"
    if f.how == "within margin":
        return f"failure rate within ±{margin:g} after {f.settled_at} trials"
    if f.how == "futility" and futility is not None:
        return (
            f"failures: changes of ±{futility_difference(margin):g} or more ruled out at "
            f"{1 - futility:.0%} after {f.settled_at} trials (futility)"
        )
    return ""


def _result(
    timing: TimingSequence, failures: FailureSequence, margin: float, futility: float | None
) -> SequentialResult:
    decided = timing.settled_at is not None and failures.settled_at is not None
    words = [w for w in (_timing_words(timing), _failure_words(failures, margin, futility)) if w]
    if not decided:
        open_ = []
        if timing.settled_at is None:
            open_.append("timing")
        if failures.settled_at is None:
            open_.append("failures")
        text = f"{' and '.join(open_)} open after {max(timing.n, failures.n)} trials"
        if failures.settled_at is None and failures.n:
            f = failures
            text += f" ({f.failed}/{f.n} failed, baseline {f.base_failed}/{f.n})"
        words.append(text)
    return SequentialResult(timing, failures, decided, "; ".join(words))


def _check(alpha: float, threshold: float, margin: float, futility: float | None) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not threshold > 1:
        raise ValueError(f"threshold must be > 1, got {threshold}")
    if not 0 < margin < 1:
        raise ValueError(f"failure_margin must be in (0, 1), got {margin}")
    if futility is not None and not 0 < futility < 1:
        raise ValueError(f"futility must be in (0, 1) or None, got {futility}")


def _looked(cell: CellTrials, base: CellTrials, max_trials: int | None) -> bool:
    """Whether the planned look has happened: both have a record of trial ``max_trials - 1``."""
    if max_trials is None:
        return False
    at = max_trials - 1
    seen = [
        np.asarray(t.ran if t.recorded is None else t.recorded, dtype=bool)
        if t.ran is not None or t.recorded is not None
        else np.ones(np.asarray(t.failed).size, bool)
        for t in (cell, base)
    ]
    return all(s.size > at and bool(s[at]) for s in seen)


def _timing_look(
    x: np.ndarray, y: np.ndarray, d: np.ndarray, max_trials: int
) -> tuple[int, float, int] | None:
    """The planned look at timing: Mann–Whitney (as the fixed design tests) on the cell's and
    the baseline's trial values of the first ``max_trials`` trials, from the pair that ends
    them on; its direction from the rank sum."""
    xv, yv = x[:max_trials], y[:max_trials]
    xv, yv = xv[np.isfinite(xv)], yv[np.isfinite(yv)]
    if not (xv.size and yv.size):
        return None
    pooled = rankdata(np.concatenate([xv, yv]))
    p, _ = mann_whitney_test(xv, yv, rng=data_stream(DEFAULT_SEED, pooled))
    side = 1 if pooled[: xv.size].sum() >= xv.size * (xv.size + yv.size + 1) / 2 else -1
    return int(np.isfinite(d[:max_trials]).sum()), float(p), side


def _parts(
    cell: CellTrials,
    base: CellTrials,
    *,
    threshold: float,
    alpha: float,
    family: int,
    margin: float,
    max_trials: int | None,
    futility: float | None,
    g: float,
) -> tuple[TimingSequence, FailureSequence]:
    x = np.asarray(cell.values, dtype=float)
    y = np.asarray(base.values, dtype=float)
    n = min(x.size, y.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(x[:n]) - np.log(y[:n])
    looked = _looked(cell, base, max_trials)
    timing = timing_sequence(
        d,
        threshold=threshold,
        alpha=alpha,
        family=family,
        g=g,
        planned=max_trials is not None,
        look=_timing_look(x, y, d, max_trials) if looked and max_trials else None,
    )
    fc = np.asarray(cell.failed, dtype=bool)
    fb = np.asarray(base.failed, dtype=bool)
    rc = np.ones(fc.size, bool) if cell.ran is None else np.asarray(cell.ran, dtype=bool)
    rb = np.ones(fb.size, bool) if base.ran is None else np.asarray(base.ran, dtype=bool)
    m = min(fc.size, fb.size, rc.size, rb.size)
    both = rc[:m] & rb[:m]
    # The look covers the pairs of the first max_trials trials where both ran.
    look = int(both[:max_trials].sum()) if looked else 0
    # Each interim look likewise, once both have a record of its last trial.
    interim = [
        int(both[:at].sum()) if _looked(cell, base, at) else None
        for at, _ in (failure_looks(max_trials)[:-1] if max_trials else [])
    ]
    failures = failure_sequence(
        fc[:m][both],
        fb[:m][both],
        alpha=alpha,
        family=family,
        margin=margin,
        planned=max_trials is not None,
        look=look or None,
        futility=futility,
        interim=interim,
    )
    return timing, failures


def sequential_pair(
    cell_values: np.ndarray,
    cell_failed: np.ndarray,
    base_values: np.ndarray,
    base_failed: np.ndarray,
    *,
    threshold: float,
    alpha: float = DEFAULT_ALPHA,
    family: int = 1,
    failure_margin: float = DEFAULT_FAILURE_MARGIN,
    cell_ran: np.ndarray | None = None,
    base_ran: np.ndarray | None = None,
    max_trials: int | None = None,
    cell_recorded: np.ndarray | None = None,
    base_recorded: np.ndarray | None = None,
    futility: float | None = FUTILITY_LEVEL,
    g: float = DEFAULT_G,
) -> SequentialResult:
    """One cell against the baseline, trial ``k`` paired with trial ``k`` (Bonferroni over
    ``family`` cells; :func:`sequential_cells` does every cell of a matrix, Holm on failures).

    Parameters
    ----------
    cell_values, base_values
        Per trial, in trial order: the timing value (NaN when the trial has none).
    cell_failed, base_failed
        Per trial: did it fail?
    cell_ran, base_ran
        Per trial: did it run (passed or failed; default: every trial)? Pairs where either
        did not are left out of the failure question.
    threshold
        The band ``[1/threshold, threshold]`` of the ratio.
    alpha, family
        Level, and the number of cells compared (Bonferroni).
    failure_margin
        The failure-rate difference that does not matter (``within margin``); futility
        protects :func:`futility_difference` of it.
    max_trials, cell_recorded, base_recorded
        The planned look: Boschloo's test on the pairs of the first ``max_trials`` trials,
        once both have a record (default ``*_ran``) of trial ``max_trials - 1``; ``None``: no
        look planned, the anytime e-process gets all of ``alpha``. Fix it before looking.
    futility
        The futility rule's level β (None: no futility stop).

    Returns
    -------
    SequentialResult
        ``decided`` when timing is ``slower``/``faster`` or ``within band`` **and** failures
        are ``more``/``fewer``, within the margin, or stopped for futility.

    Raises
    ------
    ValueError
        ``alpha`` outside (0, 1), ``threshold`` ≤ 1, ``failure_margin`` or ``futility``
        outside (0, 1).
    """
    _check(alpha, threshold, failure_margin, futility)
    timing, failures = _parts(
        CellTrials(cell_values, cell_failed, cell_ran, cell_recorded),
        CellTrials(base_values, base_failed, base_ran, base_recorded),
        threshold=threshold,
        alpha=alpha,
        family=family,
        margin=failure_margin,
        max_trials=max_trials,
        futility=futility,
        g=g,
    )
    return _result(timing, failures, failure_margin, futility)


def sequential_cells(
    cells: Mapping[str, CellTrials],
    baseline: CellTrials,
    *,
    threshold: float,
    alpha: float = DEFAULT_ALPHA,
    failure_margin: float = DEFAULT_FAILURE_MARGIN,
    max_trials: int | None = None,
    futility: float | None = FUTILITY_LEVEL,
    g: float = DEFAULT_G,
) -> dict[str, SequentialResult]:
    """Every cell against the baseline, as :func:`sequential_pair` with ``family`` the
    number of cells, and Holm over the cells' timing and failure p-values
    (:func:`holm_timing`, :func:`holm_failures`) —
    what :func:`aorta.compare` ``(sequential=True)`` and so an adaptive sweep decide on.

    >>> ok = np.zeros(20, bool)
    >>> base = CellTrials(np.full(20, 10.0), ok)
    >>> cells = {"same": CellTrials(np.full(20, 10.0), ok), "flaky": CellTrials(np.full(20, 10.0), np.arange(20) % 2 == 0)}
    >>> {c: r.failures.verdict for c, r in sequential_cells(cells, base, threshold=1.15).items()}
    {'same': 'not significant', 'flaky': 'more'}
    """
    _check(alpha, threshold, failure_margin, futility)
    family = max(len(cells), 1)
    parts = {
        c: _parts(
            t,
            baseline,
            threshold=threshold,
            alpha=alpha,
            family=family,
            margin=failure_margin,
            max_trials=max_trials,
            futility=futility,
            g=g,
        )
        for c, t in cells.items()
    }
    timing = holm_timing([t for t, _ in parts.values()], alpha=alpha)
    failures = holm_failures([f for _, f in parts.values()], alpha=alpha)
    return {
        c: _result(t, f, failure_margin, futility)
        for c, t, f in zip(parts, timing, failures, strict=True)
    }
