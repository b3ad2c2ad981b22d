"""aorta.matrix.rank_tests against scipy.stats, whose values it replaces without its import."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from aorta.matrix import boschloo, rank_tests

# Few distinct values, so that ties are common; or many, so that they are rare.
VALUES = st.one_of(
    st.lists(st.integers(0, 4).map(float), min_size=1, max_size=25),
    st.lists(st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False), min_size=1, max_size=25),
)


@settings(max_examples=200, deadline=None)
@given(VALUES, VALUES)
def test_ranks_and_p_values_are_scipys(xs, ys):
    x, y = np.array(xs), np.array(ys)
    both = np.concatenate([x, y])
    np.testing.assert_array_equal(rank_tests.rankdata(both), sps.rankdata(both))
    assert rank_tests.mann_whitney_asymptotic_p(x, y) == pytest.approx(
        sps.mannwhitneyu(x, y, method="asymptotic").pvalue, rel=1e-12, abs=1e-300
    )
    if np.unique(both).size == both.size:
        assert rank_tests.mann_whitney_exact_p(x, y) == pytest.approx(
            sps.mannwhitneyu(x, y, method="exact").pvalue, rel=1e-12
        )


@pytest.mark.parametrize(("n", "m"), [(1, 1), (1, 4), (3, 5), (5, 5), (6, 2)])
def test_the_exact_counts_are_every_split_counted(n, m):
    counts = [0] * (n * m + 1)
    for chosen in itertools.combinations(range(n + m), n):
        counts[sum(chosen) - n * (n - 1) // 2] += 1
    assert rank_tests._u_counts(n, m) == tuple(counts)


def test_the_exact_tail_keeps_its_precision_where_floats_would_not():
    # 50 vs 50, wholly apart: 2 / C(100, 50), far below float64's epsilon of the total.
    p = rank_tests.mann_whitney_exact_p(np.arange(50.0), np.arange(50.0) + 100)
    assert p == 2 / math.comb(100, 50)
    assert p == pytest.approx(
        sps.mannwhitneyu(np.arange(50.0), np.arange(50.0) + 100, method="exact").pvalue,
        rel=1e-12,
    )


def test_nan_gives_nan_as_scipy_does():
    x, y = np.array([1.0, np.nan]), np.array([2.0, 3.0])
    assert np.isnan(rank_tests.rankdata(np.concatenate([x, y]))).all()
    assert math.isnan(rank_tests.mann_whitney_exact_p(x, y))
    assert math.isnan(rank_tests.mann_whitney_asymptotic_p(x, y))
    assert math.isnan(rank_tests.kendall_tau_p(np.arange(6.0), np.array([1, 2, np.nan, 4, 5, 6.0])))


def test_comparing_cells_does_not_import_scipy_stats():
    # The point of the module (and of matrix/boschloo.py): a process that writes a matrix —
    # timed cells, failures that differ, a drift check — never pays scipy.stats' import.
    script = (
        "import sys, numpy as np\n"
        "from aorta.matrix.stats import Group, compare_groups, drift_p\n"
        "a = Group('a', np.arange(6.0), failures=2, ran=8)\n"
        "b = Group('b', np.arange(6.0) + 2.5, failures=0, ran=6)\n"
        "c = Group('c', np.array([1.0, 1.0, 2.0, 3.0]), failures=1, ran=5)\n"
        "compare_groups([a, b, c], [(1, 0), (2, 0)], threshold=1.15, resamples=50)\n"
        "assert drift_p(np.arange(8.0), np.arange(8)) < 0.01\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


# Run orders (distinct) against step times with few distinct values (ties common) or many.
ORDERED = st.integers(2, 45).flatmap(
    lambda n: st.tuples(
        st.permutations(list(range(n))),
        st.one_of(
            st.lists(st.integers(0, 3).map(float), min_size=n, max_size=n),
            st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=n, max_size=n),
        ),
    )
)


@settings(max_examples=200, deadline=None)
@given(ORDERED)
def test_kendall_p_is_scipys(pair):
    order, values = (np.array(v, dtype=float) for v in pair)
    expected = sps.kendalltau(order, values).pvalue
    got = rank_tests.kendall_tau_p(order, values)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-300)


def test_kendall_exact_and_asymptotic_branches():
    # 33 distinct values: exact; 34: the normal approximation; one discordant pair: exact.
    for n in (33, 34):
        order = np.arange(float(n))
        values = np.sin(order)
        assert rank_tests.kendall_tau_p(order, values) == pytest.approx(
            sps.kendalltau(order, values).pvalue, rel=1e-12
        )
    values = np.arange(60.0)
    values[[10, 11]] = values[[11, 10]]
    assert rank_tests.kendall_tau_p(np.arange(60.0), values) == pytest.approx(
        sps.kendalltau(np.arange(60.0), values).pvalue, rel=1e-12
    )


# Two groups of 1-40 trials and any number of failures each.
TABLES = st.tuples(st.integers(1, 40), st.integers(1, 40)).flatmap(
    lambda n: st.tuples(st.integers(0, n[0]), st.just(n[0]), st.integers(0, n[1]), st.just(n[1]))
)


@settings(max_examples=150, deadline=None)
@given(TABLES)
def test_boschloo_p_is_scipys(table):
    fa, na, fb, nb = table
    got = boschloo.boschloo_p(fa, na, fb, nb)
    if fa + fb in (0, na + nb):
        assert got == 1.0  # scipy gives NaN or 1 there; a table of all passes tells nothing
        return
    expected = min(1.0, sps.boschloo_exact([[fa, fb], [na - fa, nb - fb]]).pvalue)
    # Both search the supremum over the nuisance parameter and mostly agree to ~1e-12; where
    # scipy's optimiser (shgo) stops short of it, this module's value is the larger one.
    assert expected * (1 - 1e-9) <= got <= expected * (1 + 1e-3)


def _dense_supremum(x: int, n: int, y: int, m: int) -> float:
    """The one-sided Boschloo p-value by brute force: the region's probability on 200,001
    values of the nuisance parameter."""
    fisher = boschloo._hypergeom_cdf(n, m)
    x1, x2 = np.nonzero(fisher <= fisher[x, y] * (1 + 1e-13))
    weights = boschloo._log_comb(n)[x1] + boschloo._log_comb(m)[x2]
    best = -np.inf
    for pi in np.array_split(np.linspace(1e-9, 1 - 1e-9, 200_001), 40):
        terms = weights + np.outer(np.log(pi), x1 + x2) + np.outer(np.log1p(-pi), n + m - x1 - x2)
        top = terms.max(axis=1)
        best = max(best, float((top + np.log(np.exp(terms - top[:, None]).sum(axis=1))).max()))
    return math.exp(best)


def test_boschloo_finds_the_supremum_where_scipy_stops_short():
    # 0 of 25 against 6 of 25: scipy gives 0.0132724, the supremum is 0.0132735.
    dense = 2 * min(_dense_supremum(0, 25, 6, 25), _dense_supremum(6, 25, 0, 25))
    assert boschloo.boschloo_p(0, 25, 6, 25) == pytest.approx(dense, rel=1e-9)
    assert sps.boschloo_exact([[0, 6], [25, 19]]).pvalue < dense * (1 - 1e-5)


@pytest.fixture
def float_tails(monkeypatch):
    """Fisher's tails summed in floats (the path above EXACT_MAX_TOTAL trials), with no tails
    or p-values cached from either path before or after: boschloo_p remembers its answers too,
    so a table an earlier test of the worker asked came back exact (this test then tested
    nothing), and this test's float answers outlived it."""

    def clear() -> None:
        boschloo._hypergeom_cdf.cache_clear()
        boschloo.boschloo_p.cache_clear()

    monkeypatch.setattr(boschloo, "EXACT_MAX_TOTAL", 0)
    clear()
    yield
    clear()


def test_boschloo_in_floats_is_scipys(float_tails):
    # The same tables through the float path (scipy takes seconds at the sizes it serves).
    for fa, na, fb, nb in ((10, 20, 2, 20), (0, 30, 4, 30), (8, 26, 4, 5), (50, 100, 30, 100)):
        expected = sps.boschloo_exact([[fa, fb], [na - fa, nb - fb]]).pvalue
        assert boschloo.boschloo_p(fa, na, fb, nb) == pytest.approx(expected, rel=1e-9)
    assert boschloo.boschloo_p.cache_info().misses == 4  # computed here, none remembered
