"""Properties the statistics must keep whatever the data (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from aorta.matrix import stats
from aorta.matrix.compare import compare
from aorta.matrix.dataset import build_dataset
from aorta.store.record import TrialRecord

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RESAMPLES = 400
#: The two answers of a comparison row.
VERDICT = ["difference", "band"]


def dataset(cells: dict[str, list[float]], *, threshold: float = 1.15):
    """One record per value; the value is the trial's only step (so it is the trial value)."""
    records = [
        TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True, step_times_ms=[v])
        for c, values in cells.items()
        for t, v in enumerate(values)
    ]
    return build_dataset(
        [{"name": c, "trials": len(v)} for c, v in cells.items()],
        records,
        attrs={"baseline": next(iter(cells)), "threshold": threshold},
    )


times = st.floats(min_value=0.5, max_value=500.0, allow_nan=False, allow_infinity=False)


@st.composite
def matrices(draw, *, min_trials: int = 2, max_trials: int = 9, max_cells: int = 4):
    n_cells = draw(st.integers(2, max_cells))
    return {
        f"c{i}": draw(st.lists(times, min_size=min_trials, max_size=max_trials))
        for i in range(n_cells)
    }


@FAST
@given(matrices(), st.integers(-12, 12))
def test_scaling_by_a_power_of_two_changes_nothing(cells, exponent):
    # Multiplying by 2**k is exact in floating point, so every number scales exactly.
    c = 2.0**exponent
    a = compare(dataset(cells), resamples=RESAMPLES)
    b = compare(dataset({k: [v * c for v in vs] for k, vs in cells.items()}), resamples=RESAMPLES)
    assert a[VERDICT].values.tolist() == b[VERDICT].values.tolist()
    for col in (
        "ratio",
        "ratio_ci_low",
        "ratio_ci_high",
        "band_ci_low",
        "band_ci_high",
        "p",
        "p_adj",
    ):
        np.testing.assert_array_equal(a[col].to_numpy(), b[col].to_numpy())
    np.testing.assert_allclose(b["median"].to_numpy(), a["median"].to_numpy() * c)


@FAST
@given(matrices(), st.floats(min_value=1e-3, max_value=1e3))
def test_scaling_by_any_constant_keeps_verdicts(cells, c):
    scaled = {k: [v * c for v in vs] for k, vs in cells.items()}
    # Rounding may merge two neighbouring values into a tie; that is another test.
    assume(
        all(
            len(set(vs)) == len(set(s))
            for vs, s in zip(cells.values(), scaled.values(), strict=True)
        )
    )
    a = compare(dataset(cells), resamples=RESAMPLES)
    b = compare(dataset(scaled), resamples=RESAMPLES)
    edges = np.array([1 / 1.15, 1.15])
    for col in ("ratio", "ratio_ci_low", "ratio_ci_high", "band_ci_low", "band_ci_high"):
        v = a[col].dropna().to_numpy()
        # A verdict may flip only for a ratio within rounding of a band edge.
        assume(not np.any(np.isclose(v[:, None], edges[None, :], rtol=1e-9, atol=0)))
    assert a[VERDICT].values.tolist() == b[VERDICT].values.tolist()
    np.testing.assert_allclose(b["ratio"].to_numpy(), a["ratio"].to_numpy(), rtol=1e-12)


@FAST
@given(matrices(max_trials=12, max_cells=2))
def test_swapping_baseline_and_cell_inverts_ratio_and_ci(cells):
    # Identical data in both groups draws the cell from a salted stream (else the resampled
    # ratio would be exactly 1): the one case where swapping is not exactly reciprocal.
    assume(sorted(cells["c0"]) != sorted(cells["c1"]))
    ds = dataset(cells)
    ab = compare(ds, "c0", resamples=RESAMPLES).loc["c1"]
    ba = compare(ds, "c1", resamples=RESAMPLES).loc["c0"]
    assert ab["p"] == ba["p"] and ab["p_adj"] == ba["p_adj"]
    assert ba["ratio"] == pytest.approx(1 / ab["ratio"], rel=1e-12)
    if math.isnan(ab["ratio_ci_low"]):
        assert math.isnan(ba["ratio_ci_low"])
    else:
        assert ba["ratio_ci_low"] == pytest.approx(1 / ab["ratio_ci_high"], rel=1e-12)
        assert ba["ratio_ci_high"] == pytest.approx(1 / ab["ratio_ci_low"], rel=1e-12)
    flip = {"slower": "faster", "faster": "slower"}
    assert ba["difference"] == flip.get(ab["difference"], ab["difference"])
    assert ba["band"] == ab["band"]


@FAST
@given(matrices(max_cells=4), st.data())
def test_renaming_cells_never_changes_a_verdict(cells, data):
    # The bootstrap and permutation streams come from the data and the seed, never the names.
    names = data.draw(
        st.lists(
            st.text(min_size=1, max_size=12).filter(lambda t: "\x00" not in t),
            min_size=len(cells),
            max_size=len(cells),
            unique=True,
        )
    )
    renamed = dict(zip(names, cells.values(), strict=True))
    a = compare(dataset(cells), resamples=RESAMPLES)
    b = compare(dataset(renamed), resamples=RESAMPLES)
    columns = [*VERDICT, "ratio", "ratio_ci_low", "ratio_ci_high", "p", "p_adj"]
    pd.testing.assert_frame_equal(
        a[columns].reset_index(drop=True), b[columns].reset_index(drop=True)
    )


@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    n_cells=st.integers(2, 5),
    n_trials=st.integers(4, 12),
    sigma=st.floats(0.01, 1.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_identical_distributions_rarely_differ(n_cells, n_trials, sigma, seed):
    # The worst case for false alarms: a band so narrow that only significance decides.
    # Holm keeps the chance of any slower/faster verdict in a run at most alpha.
    alpha, runs = 0.05, 200
    rng = np.random.default_rng(seed)
    alarms = 0
    for _ in range(runs):
        groups = [
            stats.Group(f"c{i}", rng.lognormal(3.0, sigma, n_trials), 0, n_trials)
            for i in range(n_cells)
        ]
        rows = stats.compare_groups(
            groups,
            [(i, 0) for i in range(1, n_cells)],
            threshold=1.0 + 1e-9,
            alpha=alpha,
            resamples=50,
        )
        alarms += any(r.difference in ("slower", "faster") for r in rows)
    # Binomial(200, 0.05): mean 10, sd 3.1; 4 sd above the mean fails by chance < 1e-4.
    assert alarms <= runs * alpha + 4 * math.sqrt(runs * alpha * (1 - alpha))


@FAST
@given(matrices(min_trials=3, max_trials=3), st.sampled_from([0.05, 0.01, 0.1]))
def test_three_trials_detect_nothing_and_say_the_attainable_count(cells, alpha):
    df = compare(dataset(cells), alpha=alpha, resamples=RESAMPLES)
    others = df[df["difference"] != "baseline"]
    m = len(others)
    assert set(others["difference"]) == {"no difference detected"}
    assert set(others["band"]) == {"undecided"}  # no CI below MIN_TIMED trials
    expected = stats.trials_for_level(alpha / m)
    assert expected > 3 and others["trials_needed"].tolist() == [expected] * m
    assert all(f"run ≥ {expected} trials per cell" in note for note in others["note"])
    assert df.attrs["min_trials"] == expected
