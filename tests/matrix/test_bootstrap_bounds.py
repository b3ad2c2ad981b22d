"""The bootstrap in bounded memory at any trial count, and the comparison's inputs that must
not size or sway it: negative times, job-id-like trial ids, ``cells=`` (issue 24)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aorta
from aorta.matrix import bootstrap, stats


def _one_matrix(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The bootstrap as it was before it was blocked: the whole index matrix at once."""
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    idx = rng.integers(0, n, size=(resamples, n), dtype=np.int16 if n < 2**15 else np.int64)
    idx.sort(axis=1)
    return (x[idx[:, (n - 1) // 2]] + x[idx[:, n // 2]]) / 2


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.floats(0.1, 1e3, allow_nan=False), min_size=1, max_size=60),
    resamples=st.integers(1, 500),
    seed=st.integers(0, 2**32 - 1),
)
def test_small_groups_resample_exactly_as_before(values, resamples, seed):
    got = stats.bootstrap_medians(
        np.array(values), resamples=resamples, rng=np.random.default_rng(seed)
    )
    want = _one_matrix(np.array(values), resamples, np.random.default_rng(seed))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [bootstrap.RADIX_SORT_MIN, bootstrap.RADIX_SORT_MIN + 1, 5_001])
def test_long_rows_sorted_by_radix_resample_exactly_as_before(n):
    # Above RADIX_SORT_MIN values a row's indices are radix-sorted: the same order statistics.
    values = np.random.default_rng(n).lognormal(size=n)
    got = stats.bootstrap_medians(values, resamples=300, rng=np.random.default_rng(n))
    np.testing.assert_array_equal(got, _one_matrix(values, 300, np.random.default_rng(n)))


@pytest.mark.parametrize("n", [2**15, 2**15 + 1])  # even and odd: two middles or one
def test_large_groups_draw_the_same_distribution_from_order_statistics(n):
    # From 2**15 trials on the resample's middle order statistics are drawn directly; their
    # distribution is the index matrix's (two-sample Kolmogorov–Smirnov, fixed seeds).
    from scipy.stats import ks_2samp

    values = np.random.default_rng(1).lognormal(size=n)
    got = stats.bootstrap_medians(values, resamples=4000, rng=np.random.default_rng(5))
    want = _one_matrix(values, 400, np.random.default_rng(6))
    assert ks_2samp(got, want).pvalue > 0.01
    assert np.all((got >= values.min()) & (got <= values.max()))
    same = stats.bootstrap_medians(values[::-1], resamples=4000, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(got, same)


@pytest.mark.parametrize("n", [20, 101])
def test_order_statistics_match_the_index_matrix_where_both_are_cheap(n):
    # A small group gives the test power: 20,000 resamples of each way of drawing.
    from scipy.stats import ks_2samp

    x = np.sort(np.random.default_rng(2).normal(size=n))
    direct = bootstrap._order_statistic_medians(
        x, (n - 1) // 2, n // 2, 20_000, np.random.default_rng(3)
    )
    matrix = _one_matrix(x, 20_000, np.random.default_rng(4))
    assert ks_2samp(direct, matrix).pvalue > 0.01
    assert abs(np.quantile(direct, 0.025) - np.quantile(matrix, 0.025)) < 0.1


@pytest.mark.parametrize("n", [2**14, 2**16])
def test_the_index_matrix_is_never_held_whole(monkeypatch, n):
    # 2,000 resamples: 64 MiB (16-bit) or 1 GiB (64-bit) of indices in one piece before; in
    # 2 MiB blocks below 2**15 trials here (2**24 indices, 32 MiB, by default), none above.
    monkeypatch.setattr(bootstrap, "BOOTSTRAP_BLOCK", 1 << 20)
    values = np.random.default_rng(0).normal(10.0, 1.0, size=n)
    tracemalloc.start()
    try:
        stats.bootstrap_medians(values, resamples=2000, rng=np.random.default_rng(0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def _table(cells: dict[str, list[list[float]]], trial_ids=None) -> pd.DataFrame:
    rows = []
    for cell, trials in cells.items():
        ids = trial_ids.get(cell) if trial_ids else None
        for t, steps in enumerate(trials):
            tid = ids[t] if ids else t
            rows.append({"cell": cell, "trial": tid, "status": "ok", "step_times_ms": steps})
    return pd.DataFrame(rows)


def test_negative_step_times_are_left_out_and_said_never_faster():
    base = [[9.0, 9.0, 10.0 + t * 0.01] for t in range(8)]
    broken = [[9.0, 9.0, -50.0 - t] for t in range(8)]  # a clock that ran backwards
    ds = aorta.from_trials(_table({"base": base, "fix": broken}), baseline="base", warmup_steps=2)
    row = aorta.compare(ds).loc["fix"]
    assert row.difference != "faster" and row.band != "beyond band"
    assert row.n_negative == 8 and row.n_timed == 0
    assert "negative times left out" in row.note


def test_a_job_id_like_trial_id_does_not_size_the_matrix():
    table = _table(
        {"base": [[1.0, 1.0, 10.0]] * 6, "fix": [[1.0, 1.0, 12.0]] * 6},
        trial_ids={"fix": [0, 1, 2, 3, 4, 987654321]},
    )
    tracemalloc.start()
    try:
        ds = aorta.from_trials(table, baseline="base")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ds.sizes["trial"] == 6, dict(ds.sizes)
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    ids = ds["info"].sel(cell="fix", info_key="trial_id").values.tolist()
    assert ids == ["0", "1", "2", "3", "4", "987654321"]
    assert ds.attrs["trial_ids"] == "renumbered"
    assert int(aorta.compare(ds).loc["fix", "n_ok"]) == 6


def test_cells_chooses_the_cells_and_their_order():
    table = _table({c: [[1.0, 1.0, v]] * 5 for c, v in (("a", 10.0), ("b", 20.0), ("c", 11.0))})
    ds = aorta.from_trials(table, baseline="c", cells=["c", "a"])
    assert ds.cell.values.tolist() == ["c", "a"]
    assert aorta.compare(ds).index.tolist() == ["c", "a"]
    with pytest.raises(ValueError, match="'zz'"):
        aorta.from_trials(table, baseline="a", cells=["a", "zz"])
