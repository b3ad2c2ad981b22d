"""Anytime-valid verdicts (aorta.matrix.sequential, compare(sequential=True)): coverage under
continuous monitoring, symmetry, monotone decisions, and the frame."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aorta
from aorta.matrix import sequential as seq

finite = st.floats(-0.5, 0.5, allow_nan=False, allow_infinity=False)
log_ratios = st.lists(finite, min_size=2, max_size=30).map(np.array)
outcomes = st.lists(st.booleans(), min_size=1, max_size=40).map(lambda v: np.array(v, bool))


def _miss_rate(paths: np.ndarray, truth: float, *, alpha: float) -> float:
    """Fraction of paths whose CS ever excludes ``truth`` (checked after every observation)."""
    misses = 0
    for path in paths:
        t = seq.timing_sequence(path, threshold=1.15, alpha=alpha)
        # The running intersection is checked at the end: it excludes the truth iff some
        # prefix's interval did.
        misses += not (t.low <= truth <= t.high)
    return misses / len(paths)


def test_timing_cs_covers_the_truth_under_continuous_monitoring():
    # Gaussian log ratios (the model), small n and an unknown, unequal variance per path;
    # alpha 0.2 so a modest number of paths measures the rate.
    rng = np.random.default_rng(7)
    alpha, sims = 0.2, 300
    sd = rng.uniform(0.01, 0.2, sims)[:, None]
    paths = 0.05 + sd * rng.standard_normal((sims, 30))
    rate = _miss_rate(paths, 0.05, alpha=alpha)
    assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / sims)


@settings(max_examples=60)
@given(log_ratios)
def test_timing_is_mirrored_when_cell_and_baseline_swap(d):
    a = seq.timing_sequence(d, threshold=1.15, family=3)
    b = seq.timing_sequence(-d, threshold=1.15, family=3)
    mirror = {"slower": "faster", "faster": "slower"}
    assert b.difference == mirror.get(a.difference, a.difference)
    assert b.band == a.band and b.settled_at == a.settled_at
    assert b.low == pytest.approx(-a.high) and b.high == pytest.approx(-a.low)
    assert b.p == pytest.approx(a.p)


@settings(max_examples=60, deadline=None)
@given(outcomes, outcomes, st.sampled_from([None, 10, 40]))
def test_failures_are_mirrored_when_cell_and_baseline_swap(fc, fb, look):
    n = min(fc.size, fb.size)
    look = None if look is None or look > n else look
    kw = {"family": 2, "planned": look is not None, "look": look}
    a = seq.failure_sequence(fc, fb, **kw)
    b = seq.failure_sequence(fb, fc, **kw)
    mirror = {"more": "fewer", "fewer": "more"}
    assert b.verdict == mirror.get(a.verdict, a.verdict)
    assert b.how == mirror.get(a.how, a.how) and b.settled_at == a.settled_at
    assert b.difference == pytest.approx(-a.difference)
    assert b.p == pytest.approx(a.p) and b.via == a.via
    if a.n:
        np.testing.assert_allclose(b.path, a.path)


@settings(max_examples=40, deadline=None)
@given(log_ratios, st.integers(0, 2**31 - 1), st.sampled_from([None, 8, 20]))
def test_decisions_are_never_withdrawn_as_trials_come(d, seed, max_trials):
    # Called after every trial, a verdict once reached stays: `decided` is safe to act on —
    # also across the planned look at max_trials.
    rng = np.random.default_rng(seed)
    fc, fb = rng.random(d.size) < 0.3, rng.random(d.size) < 0.1
    base = np.full(d.size, 10.0)
    cell = 10.0 * np.exp(d)
    before = None
    kw = {"threshold": 1.1, "family": 2, "max_trials": max_trials}
    for n in range(2, d.size + 1):
        r = seq.sequential_pair(cell[:n], fc[:n], base[:n], fb[:n], **kw)
        assert np.all(np.diff(r.failures.path) <= 1e-15)  # the failure p only falls
        if before is not None and before.decided:
            assert r.decided
            if before.timing.difference in ("slower", "faster"):
                assert r.timing.difference == before.timing.difference
            if before.failures.verdict in ("more", "fewer"):
                assert r.failures.verdict == before.failures.verdict
            assert r.timing.settled_at == before.timing.settled_at
        if before is not None:
            assert r.failures.p <= before.failures.p + 1e-15
        before = r


@settings(max_examples=40)
@given(st.floats(0.01, 3.0), st.integers(3, 60), st.floats(0.001, 0.3))
def test_the_interval_edge_is_where_the_e_value_reaches_one_over_alpha(sd, n, alpha):
    half = float(seq.t_mixture_halfwidth(np.array(sd), np.array(n), alpha=alpha))
    if math.isinf(half):
        return
    log_e = float(seq.t_mixture_log_e(np.array(half), np.array(sd), np.array(n)))
    assert log_e == pytest.approx(math.log(1 / alpha), rel=1e-6, abs=1e-9)


def test_a_clear_effect_is_found_and_a_null_cell_is_settled_quickly():
    rng = np.random.default_rng(11)
    base = 10 * np.exp(rng.normal(0, 0.03, 12))
    slow = 11 * np.exp(rng.normal(0, 0.03, 12))
    ok = np.zeros(12, bool)
    r = seq.sequential_pair(slow, ok, base, ok, threshold=1.15, family=9)
    assert r.timing.difference == "slower" and r.decided
    assert r.reason.startswith("slower after ")


def test_undecided_cells_say_what_is_open():
    base = np.array([10.0, 10.3, 9.6, 10.2, 9.9])
    cell = np.array([10.6, 9.8, 10.9, 9.7, 10.4])
    r = seq.sequential_pair(cell, np.zeros(5, bool), base, np.zeros(5, bool), threshold=1.02)
    assert not r.decided
    assert r.reason == "timing and failures open after 5 trials (0/5 failed, baseline 0/5)"
    # Timing settled, failures open: the cell keeps running, and the reason says so.
    same = base * np.array([1.004, 0.997, 1.002, 0.999, 1.001])
    r = seq.sequential_pair(same, np.zeros(5, bool), base, np.zeros(5, bool), threshold=1.5)
    assert not r.decided and r.timing.band == "within band"
    assert r.reason.endswith("; failures open after 5 trials (0/5 failed, baseline 0/5)")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"alpha": 1.5}, "alpha must be in (0, 1)"),
        ({"threshold": 0.9}, "threshold must be > 1"),
        ({"failure_margin": 0.0}, "failure_margin must be in (0, 1)"),
        ({"futility": 1.0}, "futility must be in (0, 1) or None"),
    ],
)
def test_bad_options_are_named(kw, message):
    x = np.ones(3)
    opts = {"threshold": 1.15, **kw}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        seq.sequential_pair(x, np.zeros(3, bool), x, np.zeros(3, bool), **opts)


def _frame(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for cell, ratio, fail in (("base", 1.0, 0.0), ("same", 1.0, 0.0), ("slow", 1.3, 0.0)):
        for t in range(12):  # 12: both failure-free cells are settled by futility at 11
            if rng.random() < fail:
                rows.append(
                    {"cell": cell, "trial": t, "status": "workload_failed", "step_times_ms": []}
                )
                continue
            level = 10 * ratio * float(np.exp(rng.normal(0, 0.02)))
            rows.append(
                {
                    "cell": cell,
                    "trial": t,
                    "status": "ok",
                    "step_times_ms": [30.0, 30.0, level, level],
                }
            )
    return pd.DataFrame(rows)


def test_compare_sequential_gives_the_verdict_columns_and_decided():
    ds = aorta.from_trials(_frame(), baseline="base")
    df = aorta.compare(ds, sequential=True)
    assert list(df.columns[-3:]) == ["decided", "decided_after", "reason"]
    assert df.loc["slow", "difference"] == "slower" and df.loc["slow", "band"] == "beyond band"
    assert df.loc["same", "band"] == "within band"
    assert df.loc["same", "failures_vs_baseline"] == "not significant"
    assert bool(df["decided"].all())
    assert df.loc["base", "reason"] == "baseline: every cell decided"
    assert (
        df.attrs["sequential"] is True
        and df.attrs["adjustment"] == "Holm (slower/faster, failures); Bonferroni (band sequences)"
    )
    # Holm over the 2 cells: the smaller p is doubled.
    assert df.loc["slow", "p_adj"] == pytest.approx(min(1.0, 2 * df.loc["slow", "p"]))
    with pytest.raises(ValueError, match="signature"):
        aorta.compare(ds, sequential=True, signature="hang")


def test_compare_sequential_is_the_same_whoever_is_called_what():
    frame = _frame(3)
    a = aorta.compare(aorta.from_trials(frame, baseline="base"), sequential=True)
    renamed = frame.replace({"cell": {"same": "zzz", "slow": "aaa"}})
    b = aorta.compare(aorta.from_trials(renamed, baseline="base"), sequential=True)
    cols = ["difference", "band", "failures_vs_baseline", "decided", "reason"]
    assert a.loc["same", cols].tolist() == b.loc["zzz", cols].tolist()
    assert a.loc["slow", cols].tolist() == b.loc["aaa", cols].tolist()


def test_the_timing_test_keeps_its_level_with_the_planned_look():
    # The anytime sequence (10% of alpha) and Mann–Whitney at max_trials (90%) together:
    # no-effect cells, checked after every pair (the verdict after 20 pairs is the union of
    # every earlier one: p only falls). alpha 0.2 to measure it.
    rng = np.random.default_rng(12)
    alpha, sims, false = 0.2, 300, 0
    ok = np.zeros(20, bool)
    for _ in range(sims):
        sd = rng.uniform(0.01, 0.2)
        cell, base = np.exp(sd * rng.standard_normal((2, 20)))
        r = seq.sequential_pair(cell, ok, base, ok, threshold=1.15, alpha=alpha, max_trials=20)
        false += r.timing.difference in ("slower", "faster")
    assert false / sims <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / sims)


def test_a_noisy_slowdown_the_sequence_misses_is_found_at_the_planned_look():
    # +10% at CV 10%: after 40 pairs the anytime sequence (at a tenth of alpha over 9 cells)
    # has not excluded 1, the fixed-sample Mann–Whitney at max_trials does — as the fixed
    # design would.
    rng = np.random.default_rng(3)
    base = np.exp(0.1 * rng.standard_normal(40))
    cell = 1.1 * np.exp(0.1 * rng.standard_normal(40))
    ok = np.zeros(40, bool)
    kw = {"threshold": 1.15, "family": 9, "futility": None}
    before = seq.sequential_pair(cell[:39], ok[:39], base[:39], ok[:39], max_trials=40, **kw)
    assert before.timing.difference == "no difference detected"
    r = seq.sequential_pair(cell, ok, base, ok, max_trials=40, **kw)
    assert r.timing.difference == "slower" and r.timing.via == "planned look"
    assert r.reason.startswith("slower after 40 trials (the planned look)")
    assert r.timing.p == pytest.approx(r.timing.p_look / 0.9)
    # Without a planned look the sequence has all of alpha, and it is still not enough.
    assert seq.sequential_pair(cell, ok, base, ok, **kw).timing.difference != "slower"


def test_a_difference_found_after_the_band_settled_says_when_it_was_found():
    rng = np.random.default_rng(0)
    base = 10 * np.exp(rng.normal(0, 0.01, 30))
    cell = 10.3 * np.exp(rng.normal(0, 0.01, 30))
    ok = np.zeros(30, bool)
    t = seq.sequential_pair(cell, ok, base, ok, threshold=1.5, family=9).timing
    assert t.band == "within band" and t.difference == "slower"
    assert t.settled_at is not None and t.found_at is not None and t.settled_at <= t.found_at


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-0.2, 0.2), min_size=1, max_size=5), st.integers(0, 2**31 - 1))
def test_holm_on_timing_finds_at_least_what_bonferroni_finds(shifts, seed):
    rng = np.random.default_rng(seed)
    seqs = [
        seq.timing_sequence(s + 0.05 * rng.standard_normal(15), threshold=1.15, family=len(shifts))
        for s in shifts
    ]
    for bonferroni, holm in zip(seqs, seq.holm_timing(seqs, alpha=0.05), strict=True):
        assert holm.p_adj <= bonferroni.p_adj + 1e-12
        if bonferroni.difference in ("slower", "faster"):
            assert holm.difference == bonferroni.difference


def test_a_cell_the_sequence_shows_to_differ_does_not_stop_within_band():
    # Issue 36's check of the timing question: an 8% slowdown lies inside a 15% band, and the
    # band sequence (at alpha / K) put it there after 6 pairs while the cell's own sequence
    # already excluded 0 — it stopped "within band" before the test said "slower" (the +10%
    # cell lost 5 points of power that way). Now it runs on until the test says so.
    rng = np.random.default_rng(0)
    d = np.log(1.08) + rng.normal(0, 0.03, 40)
    six = seq.timing_sequence(d[:6], threshold=1.15, family=9, planned=True)
    assert six.band == "within band" and six.low > 0 and six.difference != "slower"
    assert six.settled_at is None
    whole = seq.timing_sequence(d, threshold=1.15, family=9, planned=True)
    assert whole.difference == "slower" and whole.settled_at == whole.found_at
    # A cell whose sequence holds 0 settles within band as before.
    same = seq.timing_sequence(rng.normal(0, 0.03, 40), threshold=1.15, family=9, planned=True)
    assert same.band == "within band" and same.settled_at is not None
