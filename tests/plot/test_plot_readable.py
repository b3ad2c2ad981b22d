"""Figures a reader can read (#45.7): many cells' step series get a panel each instead of one
tangle, and a cell without a completed step says why in its row or panel instead of staying
blank (a hung cell: "hung — no completed steps")."""

from __future__ import annotations

import numpy as np
import pytest

from aorta.matrix.dataset import build_dataset
from aorta.plot.matrix import (
    SERIES_CELLS_PER_PANEL,
    SERIES_MAX_PANELS,
    step_distributions,
    step_series,
)
from aorta.store.record import TrialRecord

HUNG = "hangs"


def _ds(n_cells: int, *, hung: bool = True):
    rng = np.random.default_rng(1)
    cells = ["baseline", *(f"m{i}" for i in range(n_cells - 1 - hung)), *([HUNG] if hung else [])]
    recs = []
    for ci, cell in enumerate(cells):
        for t in range(3):
            if cell == HUNG:
                recs.append(
                    TrialRecord(cell=cell, cell_id="", trial=t, status="timeout", passed=False)
                )
            else:
                steps = list(5 + ci * 0.2 + rng.normal(0, 0.1, 8))
                recs.append(
                    TrialRecord(
                        cell=cell,
                        cell_id="",
                        trial=t,
                        status="ok",
                        passed=True,
                        step_times_ms=steps,
                    )
                )
    return build_dataset(
        [{"name": c, "trials": 3} for c in cells],
        recs,
        attrs={"baseline": "baseline", "threshold": 1.15},
    )


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_many_cells_get_a_panel_each_with_the_baseline_for_reference() -> None:
    ds = _ds(11)
    fig = step_series(ds)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [str(c) for c in ds.cell.values]
    for ax in shown:
        solid = {line.get_color() for line in ax.get_lines() if line.get_linestyle() == "-"}
        assert len(solid) <= 1  # one cell per panel
    assert "baseline's median" in fig.get_suptitle()
    assert "hung — no completed steps" in _texts(fig)


def test_few_cells_share_a_panel_and_a_given_axes_is_drawn_into() -> None:
    few = step_series(_ds(SERIES_CELLS_PER_PANEL, hung=False))
    assert len(few.axes) == 1
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    assert step_series(_ds(11), ax=ax).axes == [ax]


def test_past_the_panel_bound_the_figure_says_what_it_left_out() -> None:
    n = SERIES_MAX_PANELS + 3
    fig = step_series(_ds(n, hung=False))
    assert sum(ax.get_visible() for ax in fig.axes) == SERIES_MAX_PANELS
    assert f"first {SERIES_MAX_PANELS} of {n} cells" in fig.get_suptitle()


@pytest.mark.parametrize(
    ("status", "said"),
    [("timeout", "hung — no completed steps"), ("workload_failed", "failed — no completed steps")],
)
def test_plot_steps_says_why_a_row_is_empty(status: str, said: str) -> None:
    ds = _ds(3)
    ds["status"] = ds.status.where(ds.cell != HUNG, status)
    fig = step_distributions(ds)
    assert _texts(fig) == [said]
    assert ds.aorta.plot_steps().axes[0].texts[0].get_text() == said


def _one_step_ds():
    """The hang-forensics run's shape: a baseline whose trial timed one step, a hung cell."""
    recs = [
        TrialRecord(cell="baseline", cell_id="", trial=0, status="ok", passed=True,
                    step_times_ms=[1.0]),
        TrialRecord(cell=HUNG, cell_id="", trial=0, status="timeout", passed=False),
    ]  # fmt: skip
    return build_dataset(
        [{"name": c, "trials": 1} for c in ("baseline", HUNG)],
        recs,
        attrs={"baseline": "baseline", "threshold": 1.15},
    )


def test_a_trial_of_one_step_is_drawn_not_an_empty_panel() -> None:
    # A line through one point draws nothing: report.html showed an empty step-series panel.
    (ax,) = step_series(_one_step_ds()).axes
    drawn = [line for line in ax.get_lines() if line.get_marker() not in ("None", "", None, " ")]
    assert [(list(line.get_xdata()), list(line.get_ydata())) for line in drawn] == [([0], [1.0])]


def test_a_shared_panel_says_which_cell_has_no_completed_step() -> None:
    (ax,) = step_series(_one_step_ds()).axes
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"{HUNG}: hung — no completed steps" in labels
    assert all(float(x).is_integer() for x in ax.get_xticks())  # steps, not -0.04


def test_the_median_bar_and_band_are_the_matrix_medians_of_ok_trials() -> None:
    # Failed trials are drawn, but the bar and the band counted them too: a cell whose
    # failures ran long got a bar far from the median matrix.md and the verdict use.
    recs = [
        TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True, step_times_ms=[10.0])
        for c in ("baseline", "x")
        for t in range(2)
    ] + [
        TrialRecord(cell=c, cell_id="", trial=t, status="workload_failed", passed=False,
                    main_work_started=True, step_times_ms=[100.0])
        for c in ("baseline", "x")
        for t in (2, 3, 4)
    ]  # fmt: skip
    ds = build_dataset(
        [{"name": c, "trials": 5} for c in ("baseline", "x")],
        recs,
        attrs={"baseline": "baseline", "threshold": 1.15},
    )
    (ax,) = step_distributions(ds).axes
    vertical = [
        float(line.get_xdata()[0])
        for line in ax.get_lines()
        if len(set(np.asarray(line.get_xdata(), dtype=float))) == 1
    ]
    assert vertical and all(v == 10.0 for v in vertical), vertical
    assert 100.0 in {float(x) for c in ax.collections for x, _ in c.get_offsets()}
