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
* **Multiplicity** — timing: Bonferroni over the ``K`` compared cells (each CS at ``α/K``);
  failures: Holm over the cells' p-values; both valid at any stopping time.

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
'within band after 5 trials; failures: changes of ±0.3 or more ruled out at 80% after 11 trials (futility)'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from aorta.matrix.boschloo import boschloo_p
from aorta.matrix.stats import DEFAULT_ALPHA, Band, Difference, FailureVerdict

__all__ = [
    "ANYTIME_SHARE",
    "DEFAULT_FAILURE_MARGIN",
    "DEFAULT_G",
    "FUTILITY_LEVEL",
    "MIN_PAIRS",
    "CellTrials",
    "FailureSequence",
    "SequentialResult",
    "TimingSequence",
    "difference_log_e",
    "failure_sequence",
    "futility_difference",
    "holm_failures",
    "pair_log_e",
    "sequential_cells",
    "sequential_pair",
    "t_mixture_halfwidth",
    "t_mixture_log_e",
    "timing_sequence",
]

#: Prior variance of the standardized effect (θ - θ₀)/σ in the timing mixture: tuned so the
#: CS is tight around 5–15 pairs, where screens stop (benchmarks/adaptive.py).
DEFAULT_G = 4.0
#: Failure-rate difference within which a cell's failures "do not matter" (``within margin``).
DEFAULT_FAILURE_MARGIN = 0.15
#: Fewest pairs for any timing interval (the t mixture needs two to see a spread).
MIN_PAIRS = 2
#: Share of α the anytime failure e-process spends when a look at ``max_trials`` is planned;
#: the look gets the rest (Boschloo at 0.9 α keeps nearly all of the fixed design's power,
#: the e-process stops the large changes early). Without a planned look it gets all of α.
ANYTIME_SHARE = 0.1
#: Futility: a cell whose failure rates differ by :func:`futility_difference` or more is
#: stopped for futility with probability at most this (it spends power, not error rate).
FUTILITY_LEVEL = 0.2
#: Bisection steps for the likelihood's maximum on a line p_c - p_b = δ (interval ≤ 1:
#: 2^-48 ≈ 4e-15 in the rate, far below what moves a log-likelihood).
_BISECTIONS = 48
#: Relative slack for comparing a p-value with its level (floating-point products).
_TIE = 1e-12


# --- timing ----------------------------------------------------------------------------------


def t_mixture_log_e(mean: np.ndarray, sd: np.ndarray, n: np.ndarray, *, g: float = DEFAULT_G):
    """Log of the scale-invariant normal-mixture e-value for "the mean is 0" after ``n``
    Gaussian observations with sample ``mean`` and ``sd`` (ddof 1); ``n ≥ 2``.

    ``E = r^(-1/2) · ((1 + t²/ν) / (1 + t²/(rν)))^((ν+1)/2)`` with ``t = mean·√n/sd``,
    ``ν = n - 1``, ``r = 1 + n·g``. A test martingale under the null whatever the variance.

    >>> round(float(t_mixture_log_e(np.array(0.0), np.array(1.0), np.array(10))), 3)
    -1.857
    >>> round(float(t_mixture_log_e(np.array(1.0), np.array(0.0), np.array(3))), 6) == round(math.log(13.0), 6)
    True
    """
    mean, sd, n = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (mean, sd, n)))
    nu = n - 1
    r = 1 + n * g
    with np.errstate(divide="ignore", invalid="ignore"):
        t2 = np.where(sd > 0, mean**2 * n / sd**2, np.where(mean == 0, 0.0, np.inf))
        u = t2 / nu
        body = np.where(
            np.isinf(u), np.log(r), np.log1p(u) - np.log1p(np.where(np.isinf(u), 0, u) / r)
        )
    return -0.5 * np.log(r) + (nu + 1) / 2 * body


def t_mixture_halfwidth(
    sd: np.ndarray, n: np.ndarray, *, alpha: float, g: float = DEFAULT_G
) -> np.ndarray:
    """Half-width of the confidence sequence ``{θ₀ : E_n(θ₀) < 1/alpha}`` around the sample
    mean (:func:`t_mixture_log_e`); ``inf`` while no ``θ₀`` can be rejected yet.

    >>> [round(float(h), 3) for h in t_mixture_halfwidth(np.array([1.0, 1.0]), np.array([5, 20]), alpha=0.05)]
    [2.396, 0.813]
    >>> float(t_mixture_halfwidth(np.array(1.0), np.array(2), alpha=0.05))
    inf
    """
    sd, n = np.broadcast_arrays(np.asarray(sd, dtype=float), np.asarray(n, dtype=float))
    nu = n - 1
    r = 1 + n * g
    # E < 1/α  ⟺  (1+u)/(1+u/r) < A,  A = (√r/α)^(2/(ν+1)),  u = t²/ν.
    log_a = (2 / (nu + 1)) * (0.5 * np.log(r) - math.log(alpha))
    a = np.exp(log_a)
    with np.errstate(divide="ignore", invalid="ignore"):
        u_max = (a - 1) / (1 - a / r)
        half = sd / np.sqrt(n) * np.sqrt(nu * u_max)
    return np.where(a < r, np.where(sd > 0, half, 0.0), np.inf)


@dataclass(frozen=True)
class TimingSequence:
    """The timing question after ``n`` pairs (:func:`timing_sequence`)."""

    n: int
    #: Mean log ratio of the pairs (NaN below one pair).
    estimate: float
    #: Running intersection of the CSs for the log ratio at ``alpha`` (per cell) …
    low: float
    high: float
    #: … and at ``alpha / family`` (what the verdicts use).
    band_low: float
    band_high: float
    #: Anytime p for "no difference": ``1 / max_{s≤n} E_s(0)`` (not adjusted).
    p: float
    difference: Difference
    band: Band
    #: Pairs after which timing was first settled (slower/faster or within band); None: not yet.
    settled_at: int | None


def _running_cs(d: np.ndarray, *, alpha: float, g: float) -> tuple[np.ndarray, np.ndarray]:
    n = np.arange(1, d.size + 1, dtype=float)
    mean = np.cumsum(d) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        ss = np.cumsum(d**2) - n * mean**2
        sd = np.sqrt(np.maximum(ss, 0) / (n - 1))
    half = np.full(d.size, np.inf)
    ok = n >= MIN_PAIRS
    half[ok] = t_mixture_halfwidth(sd[ok], n[ok], alpha=alpha, g=g)
    lo = np.maximum.accumulate(mean - half)
    hi = np.minimum.accumulate(mean + half)
    return lo, hi


def timing_sequence(
    log_ratios: np.ndarray,
    *,
    threshold: float,
    alpha: float = DEFAULT_ALPHA,
    family: int = 1,
    g: float = DEFAULT_G,
) -> TimingSequence:
    """The timing verdict from the paired log ratios ``log(cell_k / baseline_k)``, in trial
    order, valid whenever it is computed.

    ``slower`` / ``faster`` once the CS at ``alpha / family`` excludes 0 (its running
    intersection lies on one side); the band verdict is that CS against
    ``[-log threshold, log threshold]``. Swapping cell and baseline (negating ``log_ratios``)
    mirrors every answer.

    >>> t = timing_sequence(np.log([1.1, 1.12, 1.09, 1.11, 1.1, 1.1]), threshold=1.05)
    >>> t.difference, t.band, t.settled_at
    ('slower', 'beyond band', 4)
    """
    d = np.asarray(log_ratios, dtype=float)
    d = d[np.isfinite(d)]
    nan = math.nan
    if d.size == 0:
        return TimingSequence(0, nan, nan, nan, nan, nan, nan, "no data", "no data", None)
    lo, hi = _running_cs(d, alpha=alpha, g=g)
    blo, bhi = _running_cs(d, alpha=alpha / max(family, 1), g=g)
    edge = math.log(threshold)
    slower = blo > 0
    faster = bhi < 0
    inside = (blo >= -edge) & (bhi <= edge)
    beyond = (blo > edge) | (bhi < -edge)
    settled = np.flatnonzero((slower | faster | inside) & (blo <= bhi))
    n = np.arange(1, d.size + 1)
    mean = np.cumsum(d) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.sqrt(np.maximum(np.cumsum(d**2) - n * mean**2, 0) / np.maximum(n - 1, 1))
    log_e = np.full(d.size, -np.inf)
    ok = n >= MIN_PAIRS
    log_e[ok] = t_mixture_log_e(mean[ok], sd[ok], n[ok], g=g)
    p = float(min(1.0, math.exp(-max(0.0, float(np.max(log_e))))))
    last = d.size - 1
    difference: Difference = "no difference detected"
    if blo[last] <= bhi[last]:
        difference = "slower" if slower[last] else "faster" if faster[last] else difference
    band: Band = "beyond band" if beyond[last] else "within band" if inside[last] else "undecided"
    if blo[last] > bhi[last]:  # the intervals stopped overlapping: the model does not hold
        band = "undecided"
    return TimingSequence(
        n=int(d.size),
        estimate=float(mean[last]),
        low=float(lo[last]),
        high=float(hi[last]),
        band_low=float(blo[last]),
        band_high=float(bhi[last]),
        p=p,
        difference=difference,
        band=band,
        settled_at=int(settled[0]) + 1 if settled.size else None,
    )


# --- failures --------------------------------------------------------------------------------


def pair_log_e(cell_failed: np.ndarray, base_failed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Logs of the two one-sided e-processes for "same failure rate" after each pair: against
    "the cell fails no more often than the baseline" (``more``) and against "no less often"
    (``fewer``).

    The safe test for 2×2 tables (Turner, Ly & Grünwald 2024), one pair per block: before pair
    ``i`` the rates are estimated from the pairs before it (Krichevsky–Trofimov, ``(s + ½) /
    (i + 1)``), ``a`` for the cell and ``b`` for the baseline, and the pair's e-value is the
    likelihood of its two outcomes under ``(a, b)`` over their likelihood under the common
    rate ``(a + b) / 2``. Its expectation is at most 1 for every common rate (the reverse
    information projection of ``(a, b)`` onto the null), and when ``a > b`` it grows with the
    cell's failures and falls with the baseline's, so the product of the pairs where ``a > b``
    is a test supermartingale whenever the cell fails no more often than the baseline — also
    when the rate drifts from pair to pair, and when the two trials of a pair are positively
    correlated (a shared bad round moves mass to the concordant outcomes, whose e-values are
    below 1). ``fewer`` is the mirror image. Unlike the discordant-pairs sign test, every pair
    counts: two passes lower the estimate of both rates.

    >>> more, fewer = pair_log_e(np.array([1, 1, 1, 1, 0], bool), np.zeros(5, bool))
    >>> [round(float(v), 3) for v in more], [float(v) for v in fewer]
    ([0.0, 0.811, 1.833, 2.952, 1.93], [0.0, 0.0, 0.0, 0.0, 0.0])
    """
    x = np.asarray(cell_failed, dtype=float)
    y = np.asarray(base_failed, dtype=float)
    if x.size == 0:
        return np.zeros(0), np.zeros(0)
    k = np.arange(x.size, dtype=float)
    a = (np.concatenate([[0.0], np.cumsum(x)[:-1]]) + 0.5) / (k + 1)
    b = (np.concatenate([[0.0], np.cumsum(y)[:-1]]) + 0.5) / (k + 1)
    m = (a + b) / 2
    log_f = (
        x * np.log(a)
        + (1 - x) * np.log1p(-a)
        + y * np.log(b)
        + (1 - y) * np.log1p(-b)
        - (x + y) * np.log(m)
        - (2 - x - y) * np.log1p(-m)
    )
    return np.cumsum(np.where(a > b, log_f, 0.0)), np.cumsum(np.where(a < b, log_f, 0.0))


def _xlogy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x · log y`` with ``0 · log 0 = 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x == 0, 0.0, x * np.log(np.where(x == 0, 1.0, y)))


def _log_lik(s: np.ndarray, n: np.ndarray, p: np.ndarray) -> np.ndarray:
    return _xlogy(s, p) + _xlogy(n - s, 1 - p)


def _line_log_sup(sc: np.ndarray, sb: np.ndarray, n: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """The log-likelihood's maximum over the line ``p_c = p_b + delta`` (``0 ≤ p_b ≤ 1 −
    delta``) for ``sc`` cell and ``sb`` baseline failures in ``n`` pairs, elementwise (equal
    shapes): the log-likelihood is concave along the line, so its slope is bisected."""
    lo, hi = np.zeros(sc.shape), 1.0 - delta
    tiny = np.finfo(float).tiny  # the midpoints are interior; this only guards underflow
    for _ in range(_BISECTIONS):
        p = (lo + hi) / 2
        slope = (
            sb / np.maximum(p, tiny)
            - (n - sb) / (1 - p)
            + sc / (p + delta)
            - (n - sc) / np.maximum(1 - p - delta, tiny)
        )
        up = slope > 0
        lo, hi = np.where(up, p, lo), np.where(up, hi, p)
    p = (lo + hi) / 2
    return _log_lik(sb, n, p) + _log_lik(sc, n, p + delta)


def difference_log_e(
    cell_failures: np.ndarray,
    base_failures: np.ndarray,
    pairs: np.ndarray,
    *,
    delta: float | np.ndarray,
) -> np.ndarray:
    """Log e-value against "the two failure rates differ by ``delta`` or more" (either way),
    after ``pairs`` pairs with these failure counts (elementwise, broadcast with ``delta``:
    e.g. every prefix of a sequence, at two differences).

    Universal inference (Wasserman, Ramdas & Balakrishnan 2020): the likelihood of the data
    under the Krichevsky–Trofimov mixture over a *common* rate — the sequential bet that the
    rates are equal — over the largest likelihood any pair of rates at least ``delta`` apart
    gives. For every such pair of rates the ratio is at most the mixture's likelihood ratio
    against it, a test martingale, so by Ville's inequality ``P(ever ≥ 1/β) ≤ β`` whenever
    the rates do differ by ``delta`` or more.

    >>> z = np.zeros(3)
    >>> [round(float(v), 2) for v in difference_log_e(z, z, np.array([5, 10, 20]), delta=0.3)]
    [0.05, 1.49, 4.71]
    """
    from scipy.special import betaln

    sc, sb, n, d = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (cell_failures, base_failures, pairs, delta))
    )
    safe = np.maximum(n, 1)
    pc, pb = sc / safe, sb / safe
    mle = _log_lik(sc, n, pc) + _log_lik(sb, n, pb)
    # The best fit in the region {p_c - p_b ≥ δ} is the unrestricted one if it lies there,
    # else on the region's edge (the log-likelihood is concave); the same for ≤ -δ. Both
    # edges in one bisection.
    edges = _line_log_sup(
        np.concatenate([sc.ravel(), sb.ravel()]),
        np.concatenate([sb.ravel(), sc.ravel()]),
        np.concatenate([n.ravel(), n.ravel()]),
        np.concatenate([d.ravel(), d.ravel()]),
    ).reshape(2, *sc.shape)
    more = np.where(pc - pb >= d, mle, edges[0])
    fewer = np.where(pb - pc >= d, mle, edges[1])
    s = sc + sb
    mixture = betaln(s + 0.5, 2 * n - s + 0.5) - betaln(0.5, 0.5)
    return mixture - np.maximum(more, fewer)


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
    #: For ``more``/``fewer``: which look found it, ``anytime`` or ``planned look``.
    via: str
    settled_at: int | None
    #: After each pair: ``p``, its direction (+1 more, -1 fewer), and whether the planned look
    #: gave it (what Holm over the cells replays).
    path: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    side: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    from_look: np.ndarray = field(
        default_factory=lambda: np.zeros(0, bool), compare=False, repr=False
    )


def _first(mask: np.ndarray) -> int | None:
    hit = np.flatnonzero(mask)
    return int(hit[0]) if hit.size else None


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
) -> FailureSequence:
    """The failure verdict from paired outcomes (``True`` = the trial failed), in trial
    order, over the pairs where both trials ran.

    ``more`` / ``fewer`` once ``family · p ≤ alpha`` (Bonferroni over the cells), ``p`` the
    two looks combined: the anytime e-processes (:func:`pair_log_e`) with
    :data:`ANYTIME_SHARE` of ``alpha`` when a look is ``planned`` (all of it otherwise), and —
    once it has happened — Boschloo's test on the first ``look`` pairs with the rest.
    Otherwise settled as ``within margin`` when :func:`difference_log_e` at ``margin`` reaches
    ``family / alpha``, or for ``futility`` when it reaches ``1 / futility`` at
    :func:`futility_difference` (``futility=None``: never). A rejection wins over either.

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
    share = ANYTIME_SHARE if planned else 1.0
    path = np.minimum(1.0, p_any / share)
    side = np.where(up >= down, 1, -1)
    from_look = np.zeros(n, bool)
    sc, sb = np.cumsum(fc), np.cumsum(fb)
    p_look = nan
    if look is not None and 0 < look <= n:
        x, y = int(sc[look - 1]), int(sb[look - 1])
        p_look = boschloo_p(x, look, y, look)
        from_look = (np.arange(1, n + 1) >= look) & (p_look / (1 - share) < path)
        path = np.where(from_look, min(1.0, p_look / (1 - share)), path)
        side = np.where(from_look, 1 if x > y else -1, side)
    k = np.arange(1, n + 1)
    verdict: FailureVerdict = "not significant"
    how, via, at = "", "", None
    rejected = _first(path * family <= alpha * (1 + _TIE))
    # "Within margin" (a claim, at family / alpha) and futility (a stop, at 1 / futility):
    # the same e-process at two differences, computed together.
    deltas = np.array([[margin], [futility_difference(margin)]])
    log_e = difference_log_e(sc[None, :], sb[None, :], k[None, :], delta=deltas)
    within = _first(log_e[0] >= math.log(family / alpha))
    futile = None if futility is None else _first(log_e[1] >= math.log(1 / futility))
    if rejected is not None:
        verdict = "more" if side[rejected] > 0 else "fewer"
        how, at = verdict, rejected + 1
        via = "planned look" if from_look[rejected] else "anytime"
    elif within is not None:
        how, at = "within margin", within + 1
    elif futile is not None:
        how, at = "futility", futile + 1
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
        from_look=from_look,
    )


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
    k = len(seqs)
    if k == 0:
        return []
    width = max(1, *(s.path.size for s in seqs))
    paths = np.ones((k, width))
    for i, s in enumerate(seqs):
        if s.path.size:
            paths[i, : s.path.size] = s.path
            paths[i, s.path.size :] = s.path[-1]
    order = np.argsort(paths, axis=0, kind="stable")
    ranked = np.take_along_axis(paths, order, axis=0)
    levels = alpha / (k - np.arange(k))[:, None]
    passed = np.cumprod(ranked <= levels * (1 + _TIE), axis=0).astype(bool)
    rejected = np.zeros_like(passed)
    np.put_along_axis(rejected, order, passed, axis=0)
    # Holm's adjusted p of the last column: max over the steps up to each one.
    last = ranked[:, -1] * (k - np.arange(k))
    adjusted = np.empty(k)
    adjusted[order[:, -1]] = np.minimum(1.0, np.maximum.accumulate(last))
    out = []
    for i, s in enumerate(seqs):
        s = replace(s, p_adj=float(adjusted[i]) if s.n else s.p_adj)
        t = _first(rejected[i]) if s.n else None
        if t is not None and s.how not in ("more", "fewer"):
            j = min(t, s.path.size - 1)
            verdict: FailureVerdict = "more" if s.side[j] > 0 else "fewer"
            via = "planned look" if s.from_look[j] else "anytime"
            s = replace(s, verdict=verdict, how=verdict, via=via, settled_at=j + 1)
        out.append(s)
    return out


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
    what = t.difference if t.difference in ("slower", "faster") else t.band
    return f"{what} after {t.settled_at} trials"


def _failure_words(f: FailureSequence, margin: float, futility: float | None) -> str:
    if f.how in ("more", "fewer"):
        where = " (the planned look)" if f.via == "planned look" else ""
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
    timing = timing_sequence(d, threshold=threshold, alpha=alpha, family=family, g=g)
    fc = np.asarray(cell.failed, dtype=bool)
    fb = np.asarray(base.failed, dtype=bool)
    rc = np.ones(fc.size, bool) if cell.ran is None else np.asarray(cell.ran, dtype=bool)
    rb = np.ones(fb.size, bool) if base.ran is None else np.asarray(base.ran, dtype=bool)
    m = min(fc.size, fb.size, rc.size, rb.size)
    both = rc[:m] & rb[:m]
    look = None
    if max_trials is not None:
        seen_c = rc if cell.recorded is None else np.asarray(cell.recorded, dtype=bool)
        seen_b = rb if base.recorded is None else np.asarray(base.recorded, dtype=bool)
        at = max_trials - 1
        if seen_c.size > at and seen_b.size > at and seen_c[at] and seen_b[at]:
            look = int(both[:max_trials].sum())
    failures = failure_sequence(
        fc[:m][both],
        fb[:m][both],
        alpha=alpha,
        family=family,
        margin=margin,
        planned=max_trials is not None,
        look=look or None,
        futility=futility,
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
    number of cells, and Holm over the cells' failure p-values (:func:`holm_failures`) —
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
    failures = holm_failures([f for _, f in parts.values()], alpha=alpha)
    return {
        c: _result(t, f, failure_margin, futility)
        for (c, (t, _)), f in zip(parts.items(), failures, strict=True)
    }
