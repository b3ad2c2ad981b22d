"""aorta.explain without a sweep: the per-step item tables of a trace, the decomposition, its
rendering. The real 2-rank sweep is in test_explain_sweep.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.errors import ExitCode
from aorta.matrix.explain import TrialItems, decompose
from aorta.plot.waterfall import waterfall
from aorta.report.explain import explain_json, explain_markdown, explain_table
from aorta.trace.items import self_times, step_items
from aorta.trace.testing import synthetic_trace

STEP = ("user_annotation", "ProfilerStep#1", 0, 100)


# --- per-step item tables --------------------------------------------------------------------


def test_self_time_subtracts_nested_ops_on_the_same_thread_only():
    t = synthetic_trace(
        [
            ("cpu_op", "outer", 0, 50),
            ("cpu_op", "a", 5, 10),
            ("cpu_op", "a_inner", 6, 4),
            ("cpu_op", "b", 30, 30),  # runs past outer's end: only 20 of it is nested
            ("cpu_op", "elsewhere", 0, 50, {"tid": 9}),
        ]
    )
    names = [t.categories("name")[c] for c in t.column("name")[t.op_rows]]
    own = dict(zip(names, (self_times(t, t.op_rows) / 1e3).tolist(), strict=True))
    assert own == {"outer": 20.0, "a": 6.0, "a_inner": 4.0, "b": 30.0, "elsewhere": 50.0}


def test_step_items_counts_only_inside_steps_and_divides_by_steps():
    t = synthetic_trace(
        [
            ("user_annotation", "ProfilerStep#1", 0, 100),
            ("user_annotation", "ProfilerStep#2", 100, 100),
            ("cpu_op", "aten::mm", 10, 30),
            ("cpu_op", "aten::mm", 110, 10),
            ("cpu_op", "aten::mm", 250, 1000),  # after the last step: not counted
            ("kernel", "gemm_kernel_1", 20, 40, {"launch_ts": 15}),
            ("kernel", "gemm_kernel_2", 195, 40, {"launch_ts": 150}),  # launched inside
        ]
    )
    ops = step_items(t, by="op")
    assert ops[["item", "per_step", "calls"]].to_dict("records") == [
        {"item": "aten::mm", "per_step": 20.0, "calls": 1.0}
    ]
    assert ops.attrs["steps"] == {0: {"steps": 2, "step_us": 100.0}}
    kernels = step_items(t, by="kernel")
    assert kernels["item"].tolist() == ["gemm_kernel_#"] and kernels["per_step"].tolist() == [40.0]
    classes = step_items(t, by="class")  # GPU classes for a rank with GPU ops
    assert classes["item"].tolist() == ["compute"]
    with pytest.raises(ValueError, match="by must be one of kernel, op, class"):
        step_items(t, by="collective")  # type: ignore[arg-type]


def test_step_items_without_steps_is_empty():
    t = synthetic_trace([("cpu_op", "aten::mm", 10, 30)])
    out = step_items(t, by="op")
    assert out.empty and out.attrs["steps"] == {}


# --- the decomposition -----------------------------------------------------------------------


def _group(name, step, items):
    return TrialItems(
        name,
        step=dict(enumerate(step)),
        items={
            i: {k: ("compute", float(v), 1.0) for k, v in row.items()}
            for i, row in enumerate(items)
        },
    )


times = st.floats(min_value=0.0, max_value=1e3, allow_nan=False)
rows = st.lists(
    st.dictionaries(st.sampled_from("abcde"), times, max_size=5), min_size=2, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(rows, rows, st.lists(times, min_size=6, max_size=6), st.lists(times, min_size=6, max_size=6))
def test_items_and_residual_add_up_to_the_step(base_rows, cell_rows, base_steps, cell_steps):
    base = _group("base", base_steps[: len(base_rows)], base_rows)
    cell = _group("cell", cell_steps[: len(cell_rows)], cell_rows)
    d = decompose(base, cell, resamples=50)
    total = d["delta"].sum() + d.attrs["residual"]["delta"]
    assert total == pytest.approx(d.attrs["step"]["delta"], abs=1e-6)
    assert (np.abs(d["delta"]).diff().dropna() <= 1e-12).all()  # largest |delta| first
    ok = d["ci_low"] <= d["delta"] + 1e-9
    assert ok.all() and (d["delta"] <= d["ci_high"] + 1e-9).all()


@settings(max_examples=25, deadline=None)
@given(rows, st.lists(times, min_size=6, max_size=6))
def test_a_group_against_itself_is_all_zeros(group_rows, steps):
    g = _group("base", steps[: len(group_rows)], group_rows)
    d = decompose(g, g, resamples=50)
    assert (d[["delta", "ci_low", "ci_high", "share"]].to_numpy() == 0).all()
    assert d.attrs["step"]["delta"] == 0 and d.attrs["residual"]["ci_high"] == 0


@settings(max_examples=25, deadline=None)
@given(rows, rows, st.lists(times, min_size=6, max_size=6))
def test_swapping_cell_and_baseline_negates_every_interval(a_rows, b_rows, steps):
    a = _group("a", steps[: len(a_rows)], a_rows)
    b = _group("b", steps[: len(b_rows)], b_rows)
    ab = decompose(a, b, resamples=60).set_index("item")
    ba = decompose(b, a, resamples=60).set_index("item").loc[ab.index]
    np.testing.assert_allclose(ab["delta"], -ba["delta"], atol=1e-9)
    np.testing.assert_allclose(ab["ci_low"], -ba["ci_high"], atol=1e-9)


def test_a_step_change_within_rounding_is_no_change():
    # the same step times in another order: the means differ in their last bit only
    a = _group("a", [0.1, 0.2, 0.3], [{"mm": 6.0}] * 3)
    b = _group("b", [0.3, 0.2, 0.1], [{"mm": 7.0}] * 3)
    d = decompose(a, b, resamples=50)
    assert 0 < abs(d.attrs["step"]["delta"]) < 1e-15
    assert d["delta"].tolist() == [1.0] and d["share"].tolist() == [0.0]  # was -1.8e16


def test_one_trial_has_no_interval_and_absent_items_are_flagged():
    base = _group("base", [10.0], [{"mm": 6.0}])
    cell = _group("cell", [15.0, 16.0], [{"mm": 6.0, "sleep": 5.0}, {"mm": 6.0, "sleep": 6.0}])
    d = decompose(base, cell, resamples=50).set_index("item")
    assert math.isnan(d.loc["sleep", "ci_low"]) and d.loc["sleep", "only_in"] == "cell"
    assert d.loc["sleep", "delta"] == 5.5 and d.loc["mm", "only_in"] == ""


# --- rendering -------------------------------------------------------------------------------


@pytest.fixture
def explained():
    base = _group("base", [10.0, 11.0, 10.5], [{"mm": 6.0}, {"mm": 6.5}, {"mm": 6.2}])
    cell = _group(
        "slow",
        [16.0, 17.0, 16.4],
        [{"mm": 6.0, "sleep": 5.0}, {"mm": 6.5, "sleep": 5.1}, {"mm": 6.1, "sleep": 5.2}],
    )
    d = decompose(base, cell, resamples=200)
    d.attrs |= {"by": "op", "notes": ["a note"]}
    return d


def test_table_markdown_and_json(explained):
    text = explain_table(explained, top=1)
    assert text.startswith("slow vs base: step +5.97 ms") and "sleep" in text
    assert "1 more items" in text and "note: a note" in text
    md = explain_markdown(explained)
    assert "| sleep | compute |" in md and "*residual (no item)*" in md
    doc = explain_json(explained)
    assert doc["items"][0]["item"] == "sleep" and doc["step"]["delta"] == pytest.approx(
        5.9667, abs=1e-3
    )


def test_waterfall_bars_start_where_the_last_ended(explained):
    fig = waterfall(explained, top=1)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["base", "sleep", "1 other items", "residual", "slow"]
    bars = ax.patches
    assert bars[0].get_height() == pytest.approx(explained.attrs["step"]["baseline"])
    for before, after in itertools.pairwise(bars[:-1]):
        assert after.get_y() == pytest.approx(before.get_y() + before.get_height())
    last = bars[-2]
    assert last.get_y() + last.get_height() == pytest.approx(explained.attrs["step"]["cell"])
    import matplotlib.pyplot as plt

    _, ax2 = plt.subplots()
    assert waterfall(explained, ax=ax2) is ax2.figure
    plt.close("all")


def test_cli_explain_needs_one_run(run_cli, tmp_path):
    code, _, err = run_cli("compare", tmp_path, tmp_path, "--explain", "x")
    assert code == ExitCode.USAGE and "one run" in err


def test_explain_of_a_dataset_without_a_run_dir_says_what_it_needs():
    import aorta
    from aorta.matrix.dataset import build_dataset
    from aorta.store.record import TrialRecord

    ds = build_dataset(
        [{"name": "base"}],
        [TrialRecord(cell="base", cell_id="", trial=0, status="ok", passed=True)],
    )
    with pytest.raises(ValueError, match="traces=True"):
        aorta.explain(ds, "base")
    with pytest.raises(ValueError, match="by must be one of"):
        aorta.explain(ds, "base", by="collective")  # type: ignore[arg-type]
