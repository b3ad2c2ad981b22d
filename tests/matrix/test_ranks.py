"""aorta.matrix.ranks against scipy.stats, whose values it replaces without its import."""

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

from aorta.matrix import ranks

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
    np.testing.assert_array_equal(ranks.rankdata(both), sps.rankdata(both))
    assert ranks.mann_whitney_asymptotic_p(x, y) == pytest.approx(
        sps.mannwhitneyu(x, y, method="asymptotic").pvalue, rel=1e-12, abs=1e-300
    )
    if np.unique(both).size == both.size:
        assert ranks.mann_whitney_exact_p(x, y) == pytest.approx(
            sps.mannwhitneyu(x, y, method="exact").pvalue, rel=1e-12
        )


@pytest.mark.parametrize(("n", "m"), [(1, 1), (1, 4), (3, 5), (5, 5), (6, 2)])
def test_the_exact_counts_are_every_split_counted(n, m):
    counts = [0] * (n * m + 1)
    for chosen in itertools.combinations(range(n + m), n):
        counts[sum(chosen) - n * (n - 1) // 2] += 1
    assert ranks._u_counts(n, m) == tuple(counts)


def test_the_exact_tail_keeps_its_precision_where_floats_would_not():
    # 50 vs 50, wholly apart: 2 / C(100, 50), far below float64's epsilon of the total.
    p = ranks.mann_whitney_exact_p(np.arange(50.0), np.arange(50.0) + 100)
    assert p == 2 / math.comb(100, 50)
    assert p == pytest.approx(
        sps.mannwhitneyu(np.arange(50.0), np.arange(50.0) + 100, method="exact").pvalue,
        rel=1e-12,
    )


def test_nan_gives_nan_as_scipy_does():
    x, y = np.array([1.0, np.nan]), np.array([2.0, 3.0])
    assert np.isnan(ranks.rankdata(np.concatenate([x, y]))).all()
    assert math.isnan(ranks.mann_whitney_exact_p(x, y))
    assert math.isnan(ranks.mann_whitney_asymptotic_p(x, y))


def test_comparing_cells_does_not_import_scipy_stats():
    # The point of the module: a process that writes a matrix of timed cells, with no
    # failures to test, never pays scipy.stats' import.
    script = (
        "import sys, numpy as np\n"
        "from aorta.matrix.stats import Group, compare_groups\n"
        "a = Group('a', np.arange(6.0), failures=0, ran=6)\n"
        "b = Group('b', np.arange(6.0) + 2.5, failures=0, ran=6)\n"
        "c = Group('c', np.array([1.0, 1.0, 2.0, 3.0]), failures=0, ran=4)\n"
        "compare_groups([a, b, c], [(1, 0), (2, 0)], threshold=1.15, resamples=50)\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
