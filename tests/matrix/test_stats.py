"""aorta.matrix.stats: each building block against a reference or a hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from aorta.matrix import stats


def test_trial_medians_drop_warmup_and_padding():
    steps = np.array([[100.0, 1.0, 2.0, 3.0, np.nan], [50.0, 60.0, 4.0, 6.0, 8.0]])
    assert stats.trial_medians(steps, np.array([1, 2])).tolist() == [2.0, 6.0]
    # Warm-up covering every step leaves nothing to time.
    assert np.isnan(stats.trial_medians(steps, np.array([4, 5]))).all()


def test_trial_medians_match_numpy_on_random_rows():
    rng = np.random.default_rng(3)
    steps = rng.lognormal(size=(7, 5, 40))
    warm = rng.integers(0, 10, size=(7, 5))
    expected = np.array(
        [[np.median(steps[i, j, warm[i, j] :]) for j in range(5)] for i in range(7)]
    )
    np.testing.assert_array_equal(stats.trial_medians(steps, warm), expected)


@pytest.mark.parametrize(
    "k, n, lo, hi",
    [
        # Reference values: Wilson (1927) score interval, z = 1.959964.
        (0, 10, 0.0, 0.27753),
        (5, 10, 0.23659, 0.76341),
        (10, 10, 0.72247, 1.0),
        (1, 20, 0.00889, 0.23612),
    ],
)
def test_wilson_interval(k, n, lo, hi):
    got = stats.wilson_interval(k, n)
    assert got == pytest.approx((lo, hi), abs=5e-5)


def test_wilson_interval_of_nothing_is_nan():
    assert all(math.isnan(v) for v in stats.wilson_interval(0, 0))


@pytest.mark.parametrize("alpha", [1e-6, 0.001, 0.01, 0.05, 0.1, 0.5, 0.99])
def test_wilson_interval_matches_scipys_normal_quantile(alpha):
    # z comes from the standard library (no scipy.stats import when writing a matrix)
    from scipy.stats import norm

    k, n, z = 3, 17, float(norm.ppf(1 - alpha / 2))
    p, denom = k / n, 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    assert stats.wilson_interval(k, n, alpha=alpha) == pytest.approx(
        (centre - half, centre + half), rel=1e-12
    )


def test_holm_matches_the_textbook_step_down():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert stats.holm(p).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([]).tolist() == []
    assert stats.holm([0.9, 0.8]).tolist() == [1.0, 1.0]  # 0.8 * 2 capped at 1
    assert stats.holm([0.01, np.nan]).tolist()[0] == 0.01  # NaN is not in the family


def test_min_exact_p_and_trials_for_level():
    assert stats.min_exact_p(3, 3) == 0.1  # 3 trials can never give p < 0.05
    assert stats.min_exact_p(0, 5) == 1.0
    assert stats.trials_for_level(0.05) == 4
    assert stats.trials_for_level(0.1) == 4  # 0.1 is not < 0.1
    with pytest.raises(ValueError):
        stats.trials_for_level(0)


def test_exact_mann_whitney_is_scipys_exact():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=7), rng.normal(0.5, size=9)
    p, method = stats.mann_whitney(x, y)
    assert method == "exact"
    # Counted in integers here, in floats by scipy: equal to the last bits or so.
    assert p == pytest.approx(sps.mannwhitneyu(x, y, method="exact").pvalue, rel=1e-12)


def test_permutation_with_ties_enumerates_every_split():
    # 2 vs 2 with one tie: 6 relabellings, each equally likely under the null.
    p, method = stats.mann_whitney(np.array([1.0, 2.0]), np.array([2.0, 3.0]))
    assert method == "permutation"
    assert p == pytest.approx(4 / 6)


def test_permutation_with_ties_is_seeded_when_large():
    x = np.repeat([1.0, 2.0, 3.0], 8)
    y = np.repeat([2.0, 3.0, 4.0], 8)
    a = stats.mann_whitney(x, y, rng=np.random.default_rng(5))
    b = stats.mann_whitney(x, y, rng=np.random.default_rng(5))
    assert a == b and a[1] == "permutation"
    assert a[0] == pytest.approx(sps.mannwhitneyu(x, y, method="asymptotic").pvalue, abs=0.01)


def test_bootstrap_is_deterministic_and_order_free():
    x = np.array([5.0, 1.0, 3.0, 2.0])
    a = stats.bootstrap_medians(x, resamples=500, rng=np.random.default_rng(9))
    b = stats.bootstrap_medians(x[::-1], resamples=500, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)
    idx = np.random.default_rng(9).integers(0, 4, size=(500, 4), dtype=np.int16)
    np.testing.assert_array_equal(a, np.median(np.sort(x)[idx], axis=1))


def test_percentile_interval_is_symmetric_under_reciprocal():
    s = np.random.default_rng(2).lognormal(size=1001)
    lo, hi = stats.percentile_interval(s, alpha=0.05)
    rlo, rhi = stats.percentile_interval(1 / s, alpha=0.05)
    assert (rlo, rhi) == (1 / hi, 1 / lo)


def _group(key, values, failures=0, ran=None):
    values = np.asarray(values, dtype=float)
    return stats.Group(key, values, failures, len(values) if ran is None else ran)


def test_compare_groups_verdicts():
    rng = np.random.default_rng(11)
    base = _group("base", rng.normal(100, 1, 10))
    slow = _group("slow", rng.normal(130, 1, 10))
    fast = _group("fast", rng.normal(70, 1, 10))
    same = _group("same", rng.normal(100, 1, 10))
    noisy = _group("noisy", rng.normal(110, 30, 10))
    rows = stats.compare_groups(
        [base, slow, fast, same, noisy], [(i, 0) for i in range(1, 5)], threshold=1.15
    )
    assert [r.difference for r in rows] == [
        "slower",
        "faster",
        "no difference detected",
        "no difference detected",
    ]
    assert [r.band for r in rows] == ["beyond band", "beyond band", "within band", "undecided"]
    assert rows[0].ci_low > 1.15 and rows[0].p_adj < 0.05
    # The band verdicts use the CI adjusted for the 4 cells: wider than the 95% one.
    assert rows[0].band_ci_low <= rows[0].ci_low and rows[0].band_ci_high >= rows[0].ci_high
    assert rows[3].trials_needed is None and "more trials narrow" in rows[3].note


def test_three_trials_detect_nothing_and_say_how_many():
    base = _group("base", [10.0, 10.1, 9.9])
    slow = _group("slow", [20.0, 20.1, 19.9])
    (row,) = stats.compare_groups([base, slow], [(1, 0)], threshold=1.15)
    assert (row.difference, row.band) == ("no difference detected", "undecided")
    assert (row.p, row.min_p, row.attainable, row.trials_needed) == (0.1, 0.1, False, 4)
    assert "the smallest p is 0.1" in row.note and "≥ 4 trials per cell" in row.note
    # Below MIN_TIMED trials per group: no CI, hence no band verdict.
    assert math.isnan(row.ci_low) and "no CI below 5 timed trials" in row.note


def test_trials_needed_accounts_for_holm():
    groups = [_group(f"c{i}", [10.0 + i, 10.1 + i, 9.9 + i]) for i in range(3)]
    rows = stats.compare_groups(groups, [(1, 0), (2, 0)], threshold=1.15)
    assert {r.trials_needed for r in rows} == {5}  # needs p < 0.05 / 2


def test_failures_are_a_finding_without_timing():
    base = _group("base", np.arange(10.0), failures=0)
    flaky = _group("flaky", [1.0], failures=9, ran=10)
    (row,) = stats.compare_groups([base, flaky], [(1, 0)], threshold=1.15)
    assert row.failures_vs_baseline == "more"
    assert row.difference == "no difference detected" and row.band == "undecided"
    assert row.failure_p_adj == pytest.approx(
        sps.boschloo_exact([[9, 0], [1, 10]], alternative="two-sided").pvalue
    )


def test_no_data_when_a_group_has_no_value():
    rows = stats.compare_groups(
        [_group("a", [1.0, 2.0]), _group("b", [], ran=0)], [(1, 0)], threshold=1.15
    )
    assert (rows[0].difference, rows[0].band, rows[0].failures_vs_baseline) == ("no data",) * 3


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.0}, "alpha"),
        ({"threshold": 1.0}, "threshold"),
        ({"resamples": 0}, "resamples"),
    ],
)
def test_compare_groups_rejects_bad_options(kw, match):
    args = {"threshold": 1.15, **kw}
    with pytest.raises(ValueError, match=match):
        stats.compare_groups([_group("a", [1.0])], [], **args)
