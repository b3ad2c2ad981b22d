"""The e-values and confidence sequences behind the anytime-valid verdicts of
:mod:`aorta.matrix.sequential`, in closed form (or one bisection): pure numpy/scipy.

* :func:`t_mixture_log_e`, :func:`t_mixture_halfwidth`, :func:`running_cs` — the
  scale-invariant normal mixture for a Gaussian mean with unknown variance (Lai 1976; Wang &
  Ramdas 2023): the timing question's e-value and confidence sequence.
* :func:`pair_log_e` — the safe test for 2×2 tables (Turner, Ly & Grünwald 2024) on pairs of
  outcomes: the failure question's anytime e-processes.
* :func:`difference_log_e` — universal inference (Wasserman, Ramdas & Balakrishnan 2020)
  against "the failure rates differ by δ or more": the margin's claim and futility.

Each is valid at any stopping time by Ville's inequality; docs/statistics.md says what each
assumes.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "DEFAULT_G",
    "MIN_PAIRS",
    "difference_log_e",
    "log_lik",
    "pair_log_e",
    "running_cs",
    "t_mixture_halfwidth",
    "t_mixture_log_e",
]

#: Prior variance of the standardized effect (θ - θ₀)/σ in the timing mixture: tuned so the
#: CS is tight around 5–15 pairs, where screens stop (benchmarks/adaptive.py).
DEFAULT_G = 4.0
#: Fewest pairs for any timing interval (the t mixture needs two to see a spread).
MIN_PAIRS = 2
#: Bisection steps for the likelihood's maximum on a line p_c - p_b = δ (interval ≤ 1:
#: 2^-48 ≈ 4e-15 in the rate, far below what moves a log-likelihood).
_BISECTIONS = 48


def t_mixture_log_e(
    mean: np.ndarray, sd: np.ndarray, n: np.ndarray, *, g: float = DEFAULT_G
) -> np.ndarray:
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


def running_cs(
    d: np.ndarray, *, alpha: float, g: float = DEFAULT_G
) -> tuple[np.ndarray, np.ndarray]:
    """After each of the observations ``d``: the running intersection of the
    :func:`t_mixture_halfwidth` confidence sequence at ``alpha`` (low, high arrays; ±inf
    before :data:`MIN_PAIRS`).

    >>> lo, hi = running_cs(np.array([0.1, 0.12, 0.09, 0.11, 0.1]), alpha=0.05)
    >>> bool(lo[-1] < 0.104 < hi[-1]), bool(np.all(np.minimum.accumulate(hi) == hi))
    (True, True)
    """
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


def log_lik(s: np.ndarray, n: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Log-likelihood of ``s`` failures in ``n`` Bernoulli trials at rate ``p`` (one given
    sequence, no binomial coefficient), elementwise; ``0 · log 0 = 0``.

    >>> [round(float(v), 3) for v in log_lik(np.array([0, 1, 3]), np.array([3, 3, 3]), np.array(0.0))]
    [0.0, -inf, -inf]
    >>> round(float(log_lik(np.array(1), np.array(4), np.array(0.25))), 4)
    -2.2493
    """
    ll: np.ndarray = _xlogy(s, p) + _xlogy(n - s, 1 - p)
    return ll


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
    sup: np.ndarray = log_lik(sb, n, p) + log_lik(sc, n, p + delta)
    return sup


def difference_log_e(
    cell_failures: np.ndarray,
    base_failures: np.ndarray,
    pairs: np.ndarray,
    *,
    delta: float | np.ndarray,
    prior: tuple[float, float] = (0.5, 0.5),
) -> np.ndarray:
    """Log e-value against "the two failure rates differ by ``delta`` or more" (either way),
    after ``pairs`` pairs with these failure counts (elementwise, broadcast with ``delta``:
    e.g. every prefix of a sequence, at two differences).

    Universal inference (Wasserman, Ramdas & Balakrishnan 2020): the likelihood of the data
    under a Beta``(prior)`` mixture over a *common* rate (Krichevsky–Trofimov's ``(½, ½)`` by
    default) — the sequential bet that the rates are equal — over the largest likelihood any
    pair of rates at least ``delta`` apart gives. For every such pair of rates the ratio is at most the mixture's likelihood ratio
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
    mle = log_lik(sc, n, pc) + log_lik(sb, n, pb)
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
    a, b = prior
    mixture = betaln(s + a, 2 * n - s + b) - betaln(a, b)
    log_e: np.ndarray = mixture - np.maximum(more, fewer)
    return log_e
