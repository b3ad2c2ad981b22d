"""Statistics at sizes and edges the small-sample paths never meet (issue "Hardening")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aorta.matrix import stats

# --- Mann–Whitney at hundreds of trials per cell ------------------------------------------------


def _values(n: int, *, shift: float = 0.0, seed: int = 0, decimals: int | None = None):
    x = np.random.default_rng(seed).normal(100.0 + shift, 5.0, n)
    return np.round(x, decimals) if decimals is not None else x


def test_min_exact_p_does_not_overflow_at_600_trials():
    # C(1200, 600) is past the largest float: 2.0 / C overflowed.
    assert stats.min_exact_p(600, 600) == 0.0
    assert 0.0 <= stats.min_exact_p(516, 516) < 1e-300


@pytest.mark.timeout(60)
def test_compare_groups_600_vs_600_trials_with_ties():
    # Millisecond timings rounded to 0.1 tie: the old path permuted, then overflowed.
    base = stats.Group("base", _values(600, decimals=1), failures=0, ran=600)
    slow = stats.Group("slow", _values(600, shift=3.0, seed=1, decimals=1), failures=0, ran=600)
    (row,) = stats.compare_groups([base, slow], [(1, 0)], threshold=1.01, resamples=200)
    assert row.p_method == "asymptotic"
    assert 0.0 <= row.p < 1e-6
    assert row.difference == "slower"
    assert row.attainable and row.min_p == 0.0


@pytest.mark.timeout(60)
def test_mann_whitney_600_vs_600_distinct_values_is_fast_and_finite():
    # scipy's exact distribution at 600 vs 600 ran for minutes and returned nan.
    p, method = stats.mann_whitney(_values(600), _values(600, seed=1))
    assert method == "asymptotic"
    assert math.isfinite(p) and 0.0 <= p <= 1.0


def test_mann_whitney_large_agrees_with_scipy_asymptotic():
    from scipy.stats import mannwhitneyu

    x, y = _values(200, decimals=0), _values(300, shift=1.0, seed=2, decimals=0)
    p, method = stats.mann_whitney(x, y)
    expected = mannwhitneyu(x, y, alternative="two-sided", method="asymptotic").pvalue
    assert method == "asymptotic" and p == pytest.approx(expected)
    # symmetric in its two groups
    assert stats.mann_whitney(y, x)[0] == pytest.approx(p)


def test_mann_whitney_small_sizes_unchanged():
    # Up to 50 trials a group the exact / permutation paths stay.
    assert stats.mann_whitney(_values(50), _values(50, seed=1))[1] == "exact"
    assert stats.mann_whitney(_values(50, decimals=0), _values(3, decimals=0))[1] == "permutation"
    assert stats.mann_whitney(_values(51), _values(3, seed=1))[1] == "asymptotic"


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 1000),
    m=st.integers(1, 1000),
    decimals=st.sampled_from([None, 0, 1]),
    shift=st.floats(-20.0, 20.0),
    seed=st.integers(0, 2**16),
)
def test_mann_whitney_p_is_a_probability_at_any_size(n, m, decimals, shift, seed):
    x = _values(n, seed=seed, decimals=decimals)
    y = _values(m, shift=shift, seed=seed + 1, decimals=decimals)
    p, method = stats.mann_whitney(x, y)
    assert math.isfinite(p) and 0.0 <= p <= 1.0
    assert method in {"exact", "permutation", "asymptotic"}
    assert 0.0 <= stats.min_exact_p(n, m) <= 1.0


# --- Wilson interval at 0/n and n/n -------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 6, 7, 12, 14, 24, 25])
def test_wilson_interval_is_exactly_closed_at_the_ends(n):
    lo, hi = stats.wilson_interval(0, n)
    assert lo == 0.0 and hi > 0.0
    lo, hi = stats.wilson_interval(n, n)
    assert hi == 1.0 and lo < 1.0


@st.composite
def counts(draw):
    n = draw(st.integers(1, 10_000))
    return draw(st.integers(0, n)), n


@settings(max_examples=500, deadline=None)
@given(kn=counts(), alpha=st.sampled_from([0.05, 0.01, 0.1, 0.2]))
def test_wilson_interval_brackets_the_rate_inside_0_1(kn, alpha):
    k, n = kn
    lo, hi = stats.wilson_interval(k, n, alpha=alpha)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert (lo == 0.0) == (k == 0)
    assert (hi == 1.0) == (k == n)
    # what a plot's error bars are made of
    assert k / n - lo >= 0.0 and hi - k / n >= 0.0
