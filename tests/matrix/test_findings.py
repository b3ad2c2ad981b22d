"""The findings model (aorta.matrix.findings) and the honest numbers under it: failures and hangs
first, step times and the confound tag from ok trials only, a reason for every undecided band,
and 1-trial screens ranked instead of judged. Datasets are built from real trial records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.matrix import stats
from aorta.matrix.compare import compare
from aorta.matrix.dataset import build_dataset
from aorta.matrix.findings import findings, is_screen, trials_to_decide, undecided_reason
from aorta.matrix.signatures import signature_counts
from aorta.matrix.summary import summarize
from aorta.report.comparison import verdict_text
from aorta.report.findings import findings_markdown, run_findings
from tests.triage_records import BASE, FIX, HANG, rec, triage_dataset


@pytest.fixture(scope="module")
def triage():
    ds = triage_dataset()
    summary = summarize(ds, resamples=500)
    return ds, summary, findings(summary, signature_counts(ds))


def test_the_hang_comes_first_then_the_fix_with_what_would_decide_it(triage):
    _, _, found = triage
    kinds = [(f.kind, f.cell) for f in found]
    assert kinds[:3] == [("failure_kind", HANG), ("failures", FIX), ("no_timing", HANG)]
    hang, fix = found[0], found[1]
    assert (hang.subject, hang.count, hang.ran, hang.baseline_count, hang.significant) == (
        "hang",
        8,
        8,
        0,
        True,
    )
    assert (fix.count, fix.ran, fix.baseline_count, fix.baseline_ran) == (0, 8, 4, 8)
    assert fix.direction == "fewer" and not fix.significant and fix.p_adj > 0.05
    # The projection: at that count per cell the same rates would be significant (Holm factor
    # of the two compared cells), one fewer would not.
    n = fix.trials_to_decide
    assert n is not None and n > 8
    assert stats.failure_p(0, n, round(n / 2), n) * 2 < 0.05
    assert fix.baseline_signatures == {"nccl_error": 4}


def test_markdown_says_it_with_counts_p_and_the_command(triage):
    _, _, found = triage
    text = findings_markdown(found, run="runs/r1")
    lines = text.splitlines()
    assert lines[0] == "## Findings"
    assert lines[2].startswith(f"- `{HANG}`: **hangs in 8/8 trials, baseline 0/8**")
    assert "Boschloo p_adj" in lines[2]
    assert lines[3].startswith(f"- `{FIX}`: fails in 0/8 trials, baseline 4/8")
    assert "not yet significant" in lines[3]
    assert f"`aorta sweep extend runs/r1 --trials {found[1].trials_to_decide} --cells " in lines[3]
    assert "no step time — none of its 8 trials ended ok (8 hang)" in lines[4]


def test_no_step_time_from_trials_that_did_not_end_ok(triage):
    _, summary, _ = triage
    hang = summary.loc[HANG]
    assert math.isnan(hang["mean_step_ms"]) and hang["step_source"] == "no_ok_trial"
    assert hang["confound"] == "n/a"  # not speed (+N%) from the wall clock until the kill
    base = summary.loc[BASE]  # the 4 failed baseline trials' single steps are left out
    assert base["mean_step_ms"] == pytest.approx(
        np.mean([r for r in triage[0].step_time_ms.sel(cell=BASE).values[0::2].ravel() if r == r])
    )


def test_a_cell_failing_instantly_gets_no_speed_confound():
    recs = [rec("base", t, "ok", steps=[10.0, 10.2, 9.9]) for t in range(4)]
    recs += [rec("broken", t, "workload_failed", steps=[14.0], wall=0.01) for t in range(4)]
    ds = build_dataset(
        [{"name": c, "trials": 4} for c in ("base", "broken")], recs, attrs={"baseline": "base"}
    )
    row = summarize(ds, resamples=200).loc["broken"]
    assert row["confound"] == "n/a" and row["step_source"] == "no_ok_trial"


def test_the_verdict_shows_the_ci_the_band_is_judged_on():
    rng = np.random.default_rng(0)
    times = {"base": 10 + rng.random(6), "a": 10.5 + 3 * rng.random(6), "b": 10 + rng.random(6)}
    recs = [rec(c, t, "ok", steps=[v]) for c, vs in times.items() for t, v in enumerate(vs)]
    ds = build_dataset(
        [{"name": c, "trials": 6} for c in times],
        recs,
        attrs={"baseline": "base", "threshold": 1.15},
    )
    df = compare(ds, resamples=2000)
    row = df.loc["a"]
    assert row["band_ci_level"] == pytest.approx(1 - 0.05 / 2)  # Bonferroni over 2 cells
    assert df.attrs["band_ci_level"] == row["band_ci_level"]
    text = verdict_text(row, threshold=1.15)
    lo, hi = ((row[k] - 1) * 100 for k in ("band_ci_low", "band_ci_high"))
    assert f"97.5% CI [{lo:+.0f}, {hi:+.0f}]" in text


@settings(deadline=None, max_examples=40)
@given(
    lo=st.floats(0.5, 1.5),
    width=st.floats(0.0, 1.0),
    ratio=st.floats(0.5, 2.0),
    level=st.sampled_from([0.95, 0.975, 0.9833]),
)
def test_every_undecided_band_says_why(lo, width, ratio, level):
    row = {
        "difference": "no difference detected",
        "band": stats.band_verdict(lo, lo + width, threshold=1.15),
        "ratio": ratio,
        "ratio_ci_low": lo,
        "ratio_ci_high": lo + width,
        "band_ci_low": lo,
        "band_ci_high": lo + width,
        "band_ci_level": level,
        "delta": 0.0,
        "trials_needed": None,
    }
    text = verdict_text(row, threshold=1.15)
    if row["band"] == "undecided":
        reason = text.split("— undecided: ", 1)[1]
        assert reason == undecided_reason(row, 1.15) and f"{level * 100:.4g}% CI" in reason
        assert "band edge" in reason or "whole band" in reason
    else:
        assert text.endswith(f"— {row['band']}")


@settings(deadline=None, max_examples=30)
@given(
    k=st.integers(0, 10),
    n=st.integers(1, 10),
    kb=st.integers(0, 10),
    nb=st.integers(1, 10),
    mult=st.sampled_from([1.0, 2.0, 3.0]),
)
def test_trials_to_decide_is_the_first_count_that_decides(k, n, kb, nb, mult):
    k, kb = min(k, n), min(kb, nb)
    got = trials_to_decide(k, n, kb, nb, multiplier=mult, limit=40)
    if k * nb == kb * n:
        assert got is None
        return
    if got is None:
        return  # nothing up to the limit decides
    assert got > max(n, nb)
    r, rb = k / n, kb / nb
    assert stats.failure_p(round(r * got), got, round(rb * got), got) * mult < 0.05


def test_a_one_trial_sweep_is_a_screen_ranked_by_effect():
    effects = {"base": 10.0, "small": 10.5, "big": 16.0, "mid": 12.0, "gone": 10.1}
    recs = [rec(c, 0, "ok", steps=[v, v, v]) for c, v in effects.items()]
    ds = build_dataset(
        [{"name": c, "trials": 1} for c in effects], recs, attrs={"baseline": "base"}
    )
    summary = summarize(ds, resamples=200)
    assert is_screen(summary)
    found = findings(summary)
    assert [f.kind for f in found] == ["screen"] * 4
    assert [f.cell for f in found] == ["big", "mid", "small", "gone"]
    text = findings_markdown(found)
    assert "undecided" not in text and "verdicts need ≥ 5 trials per cell" in text
    assert text.splitlines()[3].strip() == "- `big`: +60% (1 timed trial(s))"


def test_run_findings_is_the_model_the_pages_render():
    ds = triage_dataset()
    found = run_findings(ds, resamples=300)
    assert [(f.kind, f.cell) for f in found][:2] == [("failure_kind", HANG), ("failures", FIX)]
