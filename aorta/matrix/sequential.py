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
* **Failures** — only discordant pairs (one of the two failed) carry information; under
  "same failure rate" each is on the cell's side with probability ½ (McNemar). The
  Krichevsky–Trofimov mixture (Beta(½, ½)) of the binomial likelihood ratio on those pairs is
  an e-process (:func:`discordant_log_e`); ``more`` / ``fewer`` when its running maximum
  reaches ``K/α``. The rate difference gets a betting confidence sequence on the paired
  differences (:func:`rate_difference_cs`, Waudby-Smith & Ramdas 2023, hedged capital with
  the predictable plug-in bet) for "within ± margin".
* **Futility** — a cell whose observed failure-rate difference is within ``± margin`` after
  :data:`FUTILITY_TRIALS` pairs stops asking the failure question. Stopping for futility only
  spends power: it never makes a false ``more`` / ``fewer`` more likely.
* **Multiplicity** — Bonferroni over the ``K`` compared cells (each CS at ``α/K``), valid at
  any stopping time.

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
'within band after 5 trials; failures: observed difference within ±0.15 after 8 trials (futility)'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from aorta.matrix.stats import DEFAULT_ALPHA, Band, Difference, FailureVerdict

__all__ = [
    "DEFAULT_FAILURE_MARGIN",
    "DEFAULT_G",
    "FUTILITY_TRIALS",
    "MIN_PAIRS",
    "FailureSequence",
    "SequentialResult",
    "TimingSequence",
    "discordant_log_e",
    "failure_sequence",
    "rate_difference_cs",
    "sequential_pair",
    "t_mixture_halfwidth",
    "t_mixture_log_e",
    "timing_sequence",
]

#: Prior variance of the standardized effect (θ - θ₀)/σ in the timing mixture: tuned so the
#: CS is tight around 5–15 pairs, where screens stop (benchmarks/adaptive.py).
DEFAULT_G = 4.0
#: Failure-rate difference within which a cell's failures are "not worth more trials".
DEFAULT_FAILURE_MARGIN = 0.15
#: Pairs before the failure futility rule may stop a cell.
FUTILITY_TRIALS = 8
#: Fewest pairs for any timing interval (the t mixture needs two to see a spread).
MIN_PAIRS = 2


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


def discordant_log_e(cell_side: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Log e-value for "a discordant pair is on the cell's side with probability ½" after
    ``total`` discordant pairs, ``cell_side`` of them cell-failed: the Krichevsky–Trofimov
    (Beta(½, ½)) mixture against the fair coin.

    >>> [round(float(x), 3) for x in discordant_log_e(np.array([0, 10, 5]), np.array([0, 10, 10]))]
    [0.0, 5.195, -1.402]
    """
    from scipy.special import betaln

    s = np.asarray(cell_side, dtype=float)
    m = np.asarray(total, dtype=float)
    return betaln(s + 0.5, m - s + 0.5) - betaln(0.5, 0.5) + m * math.log(2)


def rate_difference_cs(
    diffs: np.ndarray, *, alpha: float, grid: int = 201, c: float = 0.75
) -> tuple[float, float]:
    """Confidence sequence for the mean of paired failure differences ``diffs`` (each
    ``cell_failed - baseline_failed`` ∈ {-1, 0, 1}) at level ``alpha``, after all of them
    (running intersection): the betting CS of Waudby-Smith & Ramdas (2023) with hedged capital
    and the predictable plug-in bet, on a grid of ``grid`` candidate means. ``(-1, 1)`` before
    the first pair.

    >>> lo, hi = rate_difference_cs(np.zeros(200), alpha=0.05)
    >>> -0.1 < lo < 0 < hi < 0.1
    True
    """
    x = (np.asarray(diffs, dtype=float) + 1) / 2  # in [0, 1]
    if x.size == 0:
        return (-1.0, 1.0)
    m = np.linspace(0, 1, grid)[1:-1]
    t = np.arange(1, x.size + 1, dtype=float)
    mu = (0.5 + np.cumsum(x)) / (t + 1)
    prev_mu = np.concatenate([[0.5], mu[:-1]])
    var = (0.25 + np.cumsum((x - prev_mu) ** 2)) / (t + 1)
    prev_var = np.concatenate([[0.25], var[:-1]])
    lam = np.sqrt(2 * math.log(2 / alpha) / (prev_var * t * np.log1p(t)))
    lam_up = np.minimum(lam[:, None], c / m[None, :])
    lam_dn = np.minimum(lam[:, None], c / (1 - m[None, :]))
    dev = x[:, None] - m[None, :]
    log_up = np.cumsum(np.log1p(lam_up * dev), axis=0)
    log_dn = np.cumsum(np.log1p(-lam_dn * dev), axis=0)
    log_k = np.logaddexp(log_up, log_dn) - math.log(2)
    keep = np.max(log_k, axis=0) < math.log(1 / alpha)
    if not keep.any():
        mid = float(2 * mu[-1] - 1)
        return (mid, mid)
    return (float(2 * m[keep].min() - 1), float(2 * m[keep].max() - 1))


@dataclass(frozen=True)
class FailureSequence:
    """The failure question after ``n`` pairs that both ran (:func:`failure_sequence`)."""

    n: int
    #: Observed cell failure rate minus the baseline's, over the pairs.
    difference: float
    #: CS for that difference at ``alpha / family``.
    low: float
    high: float
    #: Anytime p for "same failure rate": ``1 / max_{s≤n} E_s`` (not adjusted).
    p: float
    verdict: FailureVerdict
    #: ``more`` / ``fewer`` / ``within margin`` / ``futility``, or "" while unsettled.
    how: str
    settled_at: int | None


def failure_sequence(
    cell_failed: np.ndarray,
    base_failed: np.ndarray,
    *,
    alpha: float = DEFAULT_ALPHA,
    family: int = 1,
    margin: float = DEFAULT_FAILURE_MARGIN,
) -> FailureSequence:
    """The failure verdict from paired outcomes (``True`` = the trial failed), in trial
    order, over the pairs where both trials ran.

    ``more`` / ``fewer`` when the discordant-pair e-process (:func:`discordant_log_e`) has
    reached ``family / alpha``; otherwise settled as ``within margin`` when the CS of the rate
    difference lies in ``± margin``, or for ``futility`` at the first pair count ≥
    :data:`FUTILITY_TRIALS` where the observed difference is within ``± margin``.

    >>> f = failure_sequence(np.array([1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1] * 2, bool), np.zeros(30, bool))
    >>> f.verdict, f.how, f.settled_at
    ('more', 'more', 8)
    """
    fc = np.asarray(cell_failed, dtype=bool)
    fb = np.asarray(base_failed, dtype=bool)
    n = int(min(fc.size, fb.size))
    fc, fb = fc[:n], fb[:n]
    if n == 0:
        return FailureSequence(0, math.nan, -1.0, 1.0, math.nan, "no data", "", None)
    plus = np.cumsum(fc & ~fb)
    minus = np.cumsum(fb & ~fc)
    log_e = discordant_log_e(plus, plus + minus)
    crossed = np.flatnonzero(log_e >= math.log(max(family, 1) / alpha))
    k = np.arange(1, n + 1)
    observed = (plus - minus) / k
    futile = np.flatnonzero((k >= FUTILITY_TRIALS) & (np.abs(observed) <= margin + 1e-12))
    lo, hi = rate_difference_cs(fc.astype(float) - fb, alpha=alpha / max(family, 1))
    p = float(min(1.0, math.exp(-max(0.0, float(np.max(log_e))))))
    verdict: FailureVerdict = "not significant"
    how, at = "", None
    if crossed.size:
        first = int(crossed[0])
        verdict = "more" if plus[first] > minus[first] else "fewer"
        how, at = verdict, first + 1
    elif -margin <= lo and hi <= margin:
        how, at = "within margin", n
    elif futile.size:
        how, at = "futility", int(futile[0]) + 1
    return FailureSequence(n, float(observed[-1]), lo, hi, p, verdict, how, at)


# --- one cell ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SequentialResult:
    """A cell against the baseline under continuous monitoring (:func:`sequential_pair`)."""

    timing: TimingSequence
    failures: FailureSequence
    #: Both questions settled: the cell may stop.
    decided: bool
    #: When and why, in words ("within band after 6 trials; failures: …"), or what is open.
    reason: str


def _timing_words(t: TimingSequence) -> str:
    if t.settled_at is None:
        return ""
    what = t.difference if t.difference in ("slower", "faster") else t.band
    return f"{what} after {t.settled_at} trials"


def _failure_words(f: FailureSequence, margin: float) -> str:
    if f.how in ("more", "fewer"):
        return f"{f.how} failures after {f.settled_at} trials"
    if f.how == "within margin":
        return f"failure rate within ±{margin:g} after {f.settled_at} trials"
    if f.how == "futility":
        return (
            f"failures: observed difference within ±{margin:g} after {f.settled_at} trials "
            "(futility)"
        )
    return ""


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
    g: float = DEFAULT_G,
) -> SequentialResult:
    """One cell against the baseline, trial ``k`` paired with trial ``k``.

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
        The failure-rate difference that does not matter (``within margin``, futility).

    Returns
    -------
    SequentialResult
        ``decided`` when timing is ``slower``/``faster`` or ``within band`` **and** failures
        are ``more``/``fewer``, within the margin, or futile.

    Raises
    ------
    ValueError
        ``alpha`` outside (0, 1), ``threshold`` ≤ 1, ``failure_margin`` outside (0, 1).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not threshold > 1:
        raise ValueError(f"threshold must be > 1, got {threshold}")
    if not 0 < failure_margin < 1:
        raise ValueError(f"failure_margin must be in (0, 1), got {failure_margin}")
    x = np.asarray(cell_values, dtype=float)
    y = np.asarray(base_values, dtype=float)
    n = min(x.size, y.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(x[:n]) - np.log(y[:n])
    timing = timing_sequence(d, threshold=threshold, alpha=alpha, family=family, g=g)
    fc = np.asarray(cell_failed, dtype=bool)
    fb = np.asarray(base_failed, dtype=bool)
    rc = np.ones(fc.size, bool) if cell_ran is None else np.asarray(cell_ran, dtype=bool)
    rb = np.ones(fb.size, bool) if base_ran is None else np.asarray(base_ran, dtype=bool)
    m = min(fc.size, fb.size, rc.size, rb.size)
    both = rc[:m] & rb[:m]
    failures = failure_sequence(
        fc[:m][both], fb[:m][both], alpha=alpha, family=family, margin=failure_margin
    )
    decided = timing.settled_at is not None and failures.settled_at is not None
    words = [w for w in (_timing_words(timing), _failure_words(failures, failure_margin)) if w]
    if not decided:
        open_ = []
        if timing.settled_at is None:
            open_.append("timing")
        if failures.settled_at is None:
            open_.append("failures")
        words.append(f"{' and '.join(open_)} undecided after {max(timing.n, failures.n)} trials")
    return SequentialResult(timing, failures, decided, "; ".join(words))
