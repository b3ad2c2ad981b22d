"""Verdicts a reviewer can trust (issue 12): hangs are failures, a failing baseline is the normal
case, the two questions answered separately, tails, schedules, ``extend`` and ``from_trials``."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import aorta
from aorta.cli import main
from aorta.errors import ExitCode
from aorta.matrix import stats
from aorta.matrix.compare import gate_regressions
from aorta.matrix.summary import summarize
from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep
from tests.launch_fixtures import (  # noqa: F401 - fixtures
    farm_fixture,
    needs_sshd,
    needs_venv,
    ssh_key_fixture,
)


def trials_table(cells: dict[str, list[float]], *, status=None, steps=6, noise=0.0):
    """One row per trial: 2 warm-up steps, then ``steps`` steps at the trial's level."""
    rng = np.random.default_rng(0)
    rows = []
    for cell, levels in cells.items():
        for t, level in enumerate(levels):
            timed = level * (1 + noise * rng.standard_normal(steps))
            rows.append(
                {
                    "cell": cell,
                    "trial": t,
                    "status": (status or {}).get((cell, t), "ok"),
                    "step_times_ms": [level * 5, level * 3, *timed.tolist()],
                }
            )
    return pd.DataFrame(rows)


def levels(center: float, n: int, spread: float = 0.01) -> list[float]:
    return [center * (1 + spread * (i - n / 2) / n) for i in range(n)]


# --- outcomes --------------------------------------------------------------------------------


def test_hangs_count_as_failures():
    # 10 of 20 trials hang (timeout) against a clean baseline: more failures, not "no change".
    hung = {("mit", t): "timeout" for t in range(10)}
    df = trials_table({"base": levels(10, 20), "mit": levels(10, 20)}, status=hung)
    out = aorta.compare(aorta.from_trials(df, baseline="base"))
    row = out.loc["mit"]
    assert (row.n_failed, row.n_failed_hang, row.n_failed_workload, row.n_errors) == (10, 10, 0, 0)
    assert row.failure_rate == 0.5 and row.failures_vs_baseline == "more"
    assert row.failure_p_adj < 0.001


def test_crash_after_start_is_a_failure_and_setup_failure_an_error():
    df = trials_table({"base": levels(10, 6), "x": levels(10, 6)})
    df.loc[(df.cell == "x") & (df.trial == 0), "status"] = "infrastructure_failed"
    df["main_work_started"] = True
    df.loc[(df.cell == "x") & (df.trial == 1), "status"] = "setup_failed"
    ds = aorta.from_trials(df, baseline="base")
    assert ds.failure_kind.sel(cell="x").values.tolist()[:2] == ["crash", ""]
    row = aorta.compare(ds).loc["x"]
    assert (row.n_failed, row.n_failed_crash, row.n_errors) == (1, 1, 1)


def test_a_baseline_that_always_fails_is_usable_for_failures():
    fails = {("base", t): "workload_failed" for t in range(8)}
    df = trials_table({"base": levels(10, 8), "fix": levels(10, 8)}, status=fails)
    out = aorta.compare(aorta.from_trials(df, baseline="base"))
    assert out.loc["fix", "failures_vs_baseline"] == "fewer"
    assert out.loc["fix", "difference"] == "no data"  # no timed baseline trial


# --- the two questions -----------------------------------------------------------------------


def test_a_small_real_slowdown_is_slower_and_within_band():
    df = trials_table({"base": levels(10, 10), "x": levels(10.9, 10)})
    out = aorta.compare(aorta.from_trials(df, baseline="base"))
    row = out.loc["x"]
    assert (row.difference, row.band) == ("slower", "within band")
    assert gate_regressions(out) == []  # within the band: no regression gate


def test_the_gate_trips_only_when_the_whole_ci_is_beyond_the_band():
    df = trials_table({"base": levels(10, 10), "x": levels(13, 10)})
    out = aorta.compare(aorta.from_trials(df, baseline="base"))
    assert out.loc["x", "band"] == "beyond band" and out.loc["x", "band_ci_low"] > 1.15
    assert gate_regressions(out) == ["x"]


def test_zero_baseline_still_tests_and_reports_the_difference():
    df = trials_table({"base": [0.0] * 6, "x": levels(2.0, 6)})
    row = aorta.compare(aorta.from_trials(df, baseline="base")).loc["x"]
    assert row.difference == "slower" and math.isnan(row.ratio)
    assert row.delta == pytest.approx(2.0, rel=0.01) and "baseline median 0" in row.note
    from aorta.report.comparison import verdict_text

    assert verdict_text(row).startswith("slower +2 vs baseline 0")


def test_non_finite_values_are_counted_and_reported():
    df = trials_table({"base": levels(10, 6), "x": levels(10, 6)})
    df.at[df.index[-1], "step_times_ms"] = [1.0, 1.0, math.inf, math.inf, math.inf]
    row = aorta.compare(aorta.from_trials(df, baseline="base")).loc["x"]
    assert row.n_nonfinite == 1 and row.n_timed == 5
    assert "non-finite values left out: 1 (cell)" in row.note


def test_minimum_timed_trials_per_group_before_a_ci():
    # 2 trials against 20 at +20%: no CI, no band verdict (it used to say "no change" 6% of the time).
    df = trials_table({"base": levels(10, 20), "x": levels(12, 2)})
    row = aorta.compare(aorta.from_trials(df, baseline="base")).loc["x"]
    assert math.isnan(row.ratio_ci_low) and row.band == "undecided"
    assert f"no CI below {stats.MIN_TIMED} timed trials" in row.note


def test_large_groups_use_the_asymptotic_test_with_ties():
    x = np.repeat(np.arange(40.0), 10)
    y = x + 0.5
    p, method = stats.mann_whitney_test(x, y)
    assert method == "asymptotic" and 0 < p < 1
    assert stats.mann_whitney_test(x[:20], y[:20])[1] in ("exact", "permutation")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.floats(1.0, 100.0), min_size=5, max_size=8),
    st.lists(st.floats(1.0, 100.0), min_size=5, max_size=8),
    st.floats(1e-3, 1e3),
)
def test_scaling_all_times_keeps_verdicts(a, b, c):
    def verdicts(scale):
        df = trials_table({"base": [v * scale for v in a], "x": [v * scale for v in b]})
        out = aorta.compare(aorta.from_trials(df, baseline="base"), resamples=300)
        ends = out[["band_ci_low", "band_ci_high"]].to_numpy().ravel()
        return out[["difference", "band"]].values.tolist(), ends[~np.isnan(ends)]

    (v1, ends), (v2, _) = verdicts(1.0), verdicts(c)
    # Ratios are scale-free up to rounding: away from a band edge the verdicts are the same.
    assume(all(min(abs(v - 1.15), abs(v - 1 / 1.15)) > 1e-9 for v in ends))
    assert v1 == v2


# --- tails -----------------------------------------------------------------------------------


def test_stalls_show_in_p95_while_the_median_does_not_move():
    rng = np.random.default_rng(3)
    rows = []
    for cell, stall in (("base", False), ("x", True)):
        for t in range(10):
            steps = 10 * (1 + 0.01 * rng.standard_normal(40))
            if stall:
                steps[rng.choice(40, 4, replace=False)] *= 10  # 10% of steps 10× slower
            rows.append({"cell": cell, "trial": t, "status": "ok", "step_times_ms": steps.tolist()})
    ds = aorta.from_trials(pd.DataFrame(rows), baseline="base", warmup_steps=0)
    assert aorta.compare(ds).loc["x", "difference"] == "no difference detected"
    tail = aorta.compare(ds, stat="p95").loc["x"]
    assert tail.difference == "slower" and tail.ratio > 3
    summary = summarize(ds)
    assert bool(summary.loc["x", "stalls"]) and not bool(summary.loc["base", "stalls"])


# --- from_trials ------------------------------------------------------------------------------


def test_from_trials_per_step_rows_equal_per_trial_lists():
    wide = trials_table({"base": levels(10, 6), "x": levels(12, 6)}, noise=0.01)
    long = wide.explode("step_times_ms").rename(columns={"step_times_ms": "step_time_ms"})
    long["step"] = long.groupby(["cell", "trial"]).cumcount()
    long["step_time_ms"] = long["step_time_ms"].astype(float)
    a = aorta.compare(aorta.from_trials(wide, baseline="base"))
    b = aorta.compare(aorta.from_trials(long.sample(frac=1, random_state=1), baseline="base"))
    pd.testing.assert_frame_equal(a, b)


def test_from_trials_drops_the_warmup_steps():
    df = trials_table({"base": [10.0] * 5})
    ds = aorta.from_trials(df, baseline="base", warmup_steps=2)
    assert aorta.compare(ds).loc["base", "median"] == pytest.approx(10.0)
    assert ds.warmup_steps.values.ravel().tolist() == [2] * 5


@pytest.mark.parametrize(
    "change, match",
    [
        ({"status": "exploded"}, "unknown status 'exploded'"),
        ({"trial": -1}, "negative"),
    ],
)
def test_from_trials_names_what_is_wrong(change, match):
    df = trials_table({"base": [10.0]})
    for k, v in change.items():
        df[k] = v
    with pytest.raises(ValueError, match=match):
        aorta.from_trials(df, baseline="base")
    with pytest.raises(ValueError, match="baseline cell 'nope'"):
        aorta.from_trials(trials_table({"base": [10.0]}), baseline="nope")


# --- drift -----------------------------------------------------------------------------------


def test_a_trend_of_the_baseline_over_the_run_order_is_flagged():
    df = trials_table({"base": levels(10, 12, spread=0.3), "x": levels(10, 12)})
    df["run_order"] = df["trial"] * 2 + (df["cell"] == "x")
    out = aorta.compare(aorta.from_trials(df, baseline="base"))
    assert out.attrs["drift"] and out.attrs["drift_p"] < 0.001
    df["run_order"] = np.random.default_rng(0).permutation(len(df))
    shuffled = aorta.compare(aorta.from_trials(df, baseline="base"))
    assert not shuffled.attrs["drift"]


# --- sweeps: schedule, exit codes, extend -----------------------------------------------------

PROBE = """
mode: probe
trials: {trials}
mitigation_axis: [none, xnack, tf32_off]
step_time_regex: 'step ([0-9.]+) ms'
"""
STEPS = (
    "import os\n"
    "t = int(os.environ['AORTA_TRIAL'])\n"
    "f = 2 if os.environ.get('HSA_XNACK') else 1\n"
    "for s in range(4): print(f'step {f * (10 + t * 0.01 + s * 0.001):.4f} ms')"
)


def probe_sweep(tmp_path, name, trials, **kw):
    text = PROBE.format(trials=trials) + "".join(f"{k}: {v}\n" for k, v in kw.items())
    return sweep(
        load_recipe_text(text, command=["python3", "-c", STEPS]),
        output=tmp_path / name,
        progress="none",
    )


@pytest.mark.slow
def test_interleaved_is_the_default_and_records_the_run_order(tmp_path):
    result = probe_sweep(tmp_path, "i", 2)
    by_order = sorted(result.records, key=lambda r: r.run_order)
    assert [r.run_order for r in by_order] == list(range(6))
    assert [r.trial for r in by_order] == [0, 0, 0, 1, 1, 1]  # rounds
    ds = aorta.load_run(result.run_dir)
    assert sorted(ds.run_order.values.ravel().tolist()) == list(range(6))
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["schedule"] == "interleaved"
    assert "- schedule: interleaved" in (result.run_dir / "matrix.md").read_text()
    seq = probe_sweep(tmp_path, "s", 2, schedule="sequential")
    assert [r.cell for r in sorted(seq.records, key=lambda r: r.run_order)] == [
        "none-none",
        "none-none",
        "xnack-none",
        "xnack-none",
        "tf32_off-none",
        "tf32_off-none",
    ]


@pytest.mark.slow
def test_extend_then_compare_equals_the_larger_run_from_the_start(tmp_path, run_cli):
    small = probe_sweep(tmp_path, "small", 3)
    grown = sweep(resume=small.run_dir, extend_to=6, progress="none")
    assert grown.exit_code == ExitCode.OK and grown.run_dir == small.run_dir
    full = probe_sweep(tmp_path, "full", 6)
    columns = ["n", "n_ok", "median", "ratio", "ratio_ci_low", "ratio_ci_high", "p_adj"]
    columns += ["difference", "band"]
    a = aorta.compare(aorta.load_run(grown.run_dir))[columns]
    b = aorta.compare(aorta.load_run(full.run_dir))[columns]
    pd.testing.assert_frame_equal(a, b)
    manifest = json.loads((small.run_dir / "manifest.json").read_text())
    assert manifest["trials_override"] == {c: 6 for c in manifest["cells"]}
    assert manifest["extensions"][0]["trials"] == 6 and manifest["status"] == "complete"
    assert (
        "- extended to 6 trials per cell (all cells)" in (small.run_dir / "matrix.md").read_text()
    )
    # Nothing to add: a usage error; the CLI grows one cell.
    code, _, err = run_cli("sweep", "extend", small.run_dir, "--trials", "6")
    assert code == ExitCode.USAGE and "does not add trials" in err
    code, _, err = run_cli(
        "sweep", "extend", small.run_dir, "--trials", "7", "--cells", "xnack-none"
    )
    assert code == ExitCode.OK, err
    ds = aorta.load_run(small.run_dir)
    assert int((ds.status.sel(cell="xnack-none") == "ok").sum()) == 7
    assert int((ds.status.sel(cell="none-none") == "ok").sum()) == 6


# --- a failing baseline under `aorta launch`: every node exits 0 (under torchrun alone:
# tests/run/test_distributed.py, whose corruption run has a failing baseline) ---------------

# The race workload with a corruption injected in the *baseline*: the bug reproduces there and
# the other cell (the "mitigation") is clean. A complete matrix: exit 0 on every rank.
FAILING_BASELINE = """
workload: race
ticket: FAILBASE
steps: 4
timeout_per_trial: 120
trials: 1
workload_config: {mode: ddp, fsdp_shard_size: 2048, num_layers: 3, dtype: float32}
confound: {baseline_cell: broken}
cells:
  - name: broken
    mitigations: [none]
    workload_config: {fault_injection: {rank: 1, iteration: 2, layer: 1, collective: all_reduce, index: 7}}
  - {name: fixed, mitigations: [none]}
"""


@needs_sshd
@needs_venv
@pytest.mark.slow
def test_a_failing_baseline_launch_on_two_sshd_nodes_succeeds(tmp_path, farm):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(FAILING_BASELINE)
    cluster = farm.write_cluster(tmp_path / "cluster.json")
    out = tmp_path / "out"
    deadlines = ["--run-timeout", "240", "--setup-timeout", "30"]
    args = ["-c", str(cluster), "-r", str(recipe), "--nproc-per-node", "1", "-o", str(out)]
    code = main(["launch", *args, *deadlines])
    assert code == ExitCode.OK
    (run_dir,) = (p.parent for p in out.glob("FAILBASE/race/*/manifest.json"))
    assert json.loads((run_dir / "launch.json").read_text())["status"] == "complete"
    cells = {c["name"]: c for c in json.loads((run_dir / "matrix.json").read_text())["cells"]}
    assert cells["broken"]["failures"] == 1 and cells["fixed"]["failures"] == 0


def test_the_figures_work_on_measurements_taken_elsewhere():
    from matplotlib.figure import Figure

    # One failure per cell: the Wilson bound at 0/n is being fixed on another branch (it can
    # come out a hair above 0, which matplotlib rejects as a negative error bar).
    failed = {("base", 0): "workload_failed", ("x", 0): "workload_failed"}
    df = trials_table({"base": levels(10, 7), "x": levels(12, 7)}, status=failed, noise=0.01)
    ds = aorta.from_trials(df, baseline="base")
    comparison = aorta.compare(ds)
    figures = [
        aorta.plot.step_distributions(ds),
        aorta.plot.step_series(ds),
        aorta.plot.failure_rates(comparison),
        aorta.plot.ratio_forest(comparison),
    ]
    assert all(isinstance(f, Figure) and f.axes for f in figures)
