"""Who the other ranks wait for (aorta.matrix.stragglers): the rule on small in-memory Datasets
built from real trial records (workload timing) or as trace metrics are stored, the finding it
becomes on every page's model, and properties of the rule (relabelling ranks relabels the
answer; equal ranks, or one rank, have no straggler)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.matrix.dataset import build_dataset
from aorta.matrix.findings import findings
from aorta.matrix.stragglers import STRAGGLER_COLUMNS, stragglers, trial_stragglers
from aorta.matrix.summary import summarize
from aorta.report.findings import finding_json, finding_text, findings_markdown
from aorta.report.matrix_files import matrix_json, matrix_markdown
from aorta.store.record import RankOutcome, TrialRecord

STEP = 40.0  # ms: every trial's recorded step


def trial(cell: str, t: int, waits: list[float], *, status: str = "ok") -> TrialRecord:
    """A trial whose ranks report ``waits`` (ms per step in collectives) of a ``STEP`` step."""
    ranks = [
        RankOutcome(
            rank=r,
            status=status,
            passed=status == "ok",
            metrics={"comm_wait_ms": w, "compute_ms": STEP - w},
        )
        for r, w in enumerate(waits)
    ]
    return TrialRecord(
        cell=cell,
        cell_id="",
        trial=t,
        status=status,
        passed=status == "ok",
        step_times_ms=[STEP] * 4,
        world_size=len(waits),
        ranks=ranks,
    )


def dataset(trials: dict[str, list[list[float]]], **attrs) -> xr.Dataset:
    records = [trial(c, t, w) for c, rows in trials.items() for t, w in enumerate(rows)]
    cells = [{"name": c, "trials": len(rows)} for c, rows in trials.items()]
    return build_dataset(
        cells, records, attrs={"baseline": next(iter(trials)), "threshold": 1.15, **attrs}
    )


def test_a_rank_the_others_wait_for_in_every_trial_is_named_with_its_cost():
    ds = dataset(
        {"slow": [[20.0, 21.0, 2.0, 19.0], [18.0, 20.0, 3.0, 22.0], [21.0, 20.5, 1.0, 20.0]]}
    )
    assert ds.comm_wait_ms.dims == ("cell", "trial", "rank")
    assert ds.comm_wait_ms.attrs["units"] == "ms"
    row = stragglers(ds).loc["slow"]
    assert (row["straggler_rank"], row["straggler_trials"], row["straggler_of"]) == (2, 3, 3)
    # per trial: the median of the others' waits less its own — 18, 17, 19.5 ms per step
    assert row["straggler_ms"] == pytest.approx(18.0)
    assert row["straggler_source"] == "workload" and row["straggler_note"] == ""
    assert math.isnan(row["straggler_share_pct"])  # only traces know who entered last


def test_a_strict_majority_of_trials_is_needed():
    two_of_three = [[10.0, 1.0], [10.0, 1.0], [1.0, 10.0]]
    half = [[10.0, 1.0], [10.0, 1.0], [1.0, 10.0], [1.0, 10.0]]
    found = stragglers(dataset({"a": two_of_three, "b": half}))
    assert found.loc["a", "straggler_rank"] == 1 and found.loc["a", "straggler_trials"] == 2
    assert found.loc["b", "straggler_rank"] == -1
    assert found.loc["b", "straggler_note"] == (
        "no consistent straggler: rank 0 and rank 1 in 2/4 trial(s), a majority needed"
    )


def test_an_excess_within_the_band_is_no_straggler():
    # 5 ms of a 40 ms step is 12.5%: inside a 15% band, beyond a 10% one
    ds = dataset({"c": [[6.0, 1.0]] * 3})
    assert stragglers(ds).loc["c", "straggler_rank"] == -1
    assert "beyond the band in any of 3 trial(s)" in stragglers(ds).loc["c", "straggler_note"]
    assert stragglers(ds, threshold=1.10).loc["c", "straggler_rank"] == 1


def test_one_rank_has_no_straggler_and_no_rank_dimension():
    records = [
        TrialRecord(cell="solo", cell_id="", trial=t, status="ok", passed=True,
                    step_times_ms=[5.0], metrics={"comm_wait_ms": 0.0, "compute_ms": 5.0})
        for t in range(3)
    ]  # fmt: skip
    ds = build_dataset([{"name": "solo"}], records, attrs={"baseline": "solo"})
    assert "rank" not in ds.dims and "comm_wait_ms" not in ds.data_vars
    row = stragglers(ds).loc["solo"]
    assert row["straggler_rank"] == -1 and row["straggler_of"] == 0
    assert row["straggler_note"].startswith("no per-rank timing")
    assert [f.kind for f in findings(summarize(ds, resamples=100))] == []


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_rank_alone_on_its_axis_has_no_straggler_and_says_nothing_to_the_user():
    # One rank on the rank axis (a run with one rank's trace): numpy's median of no others
    # warned "Mean of empty slice" on every `aorta report`.
    ds = xr.Dataset(
        {
            "status": (("cell", "trial"), np.array([["ok", "ok"]], dtype=object)),
            "comm_wait_ms": (("cell", "trial", "rank"), [[[5.0], [6.0]]]),
            "compute_ms": (("cell", "trial", "rank"), [[[1.0], [1.0]]]),
        },
        coords={"cell": ["one"], "trial": [0, 1], "rank": [0]},
    )
    assert trial_stragglers(ds).empty
    assert stragglers(ds).loc["one", "straggler_rank"] == -1


def test_only_trials_that_ended_ok_count():
    records = [trial("c", t, [12.0, 1.0]) for t in range(2)]
    records += [trial("c", 2, [1.0, 12.0], status="workload_failed")]
    records += [trial("c", 3, [1.0, 12.0], status="timeout")]
    ds = build_dataset([{"name": "c"}], records, attrs={"baseline": "c"})
    row = stragglers(ds).loc["c"]
    assert (row["straggler_rank"], row["straggler_trials"], row["straggler_of"]) == (1, 2, 2)


def test_ranks_that_tie_leave_the_trial_without_a_straggler():
    ds = dataset({"c": [[10.0, 1.0, 1.0, 10.0]] * 3})
    per_trial = trial_stragglers(ds)
    assert per_trial["rank"].tolist() == [-1, -1, -1]
    assert stragglers(ds).loc["c", "straggler_rank"] == -1


def traced(ds: xr.Dataset, waits: np.ndarray, shares: np.ndarray, *, steps: float = 4.0):
    """``ds`` with trace metrics as :func:`aorta.matrix.trace_metrics.add_trace_metrics`
    stores them: ``waits`` are each rank's ms per step waiting for the last rank."""
    dims = ("cell", "trial", "rank")
    source = np.full(waits.shape, "host", dtype=object)
    source[np.isnan(waits)] = "missing"
    return ds.assign(
        straggler_wait_ms=(dims, waits * steps),
        last_to_enter_pct=(dims, shares),
        profiled_steps=(dims, np.full(waits.shape, steps)),
        total_ms=(dims, np.full(waits.shape, STEP * steps)),
        trace_source=(dims, source),
    )


def test_traces_come_first_and_say_who_entered_last():
    # The workload's split says rank 0; the traces (every rank of trials 0-2) say rank 1.
    ds = dataset({"c": [[1.0, 15.0]] * 4})
    waits = np.array([[[12.0, 0.5], [11.0, 1.0], [13.0, 0.0], [np.nan, 0.0]]])
    shares = np.array([[[10.0, 90.0], [20.0, 80.0], [5.0, 95.0], [np.nan, 50.0]]])
    row = stragglers(traced(ds, waits, shares)).loc["c"]
    assert row["straggler_source"] == "traces"
    # trial 3 lacks rank 0's trace: it counts for neither source
    assert (row["straggler_rank"], row["straggler_trials"], row["straggler_of"]) == (1, 3, 3)
    assert row["straggler_share_pct"] == pytest.approx(90.0)
    assert row["straggler_ms"] == pytest.approx(11.5)
    assert stragglers(ds).loc["c", "straggler_rank"] == 0  # without traces: the workload's


def test_the_finding_comes_after_timing_on_every_page():
    ds = dataset(
        {
            "base": [[3.0, 3.1]] * 5,
            "slow": [[25.0, 2.0]] * 5,
        }
    )
    ds["step_time_ms"].loc[{"cell": "slow"}] = 60.0  # the straggler also makes the cell slower
    summary = summarize(ds, resamples=200)
    assert list(summary.columns[-len(STRAGGLER_COLUMNS) :]) == list(STRAGGLER_COLUMNS)
    found = findings(summary)
    assert [(f.kind, f.cell) for f in found] == [("timing", "slow"), ("straggler", "slow")]
    f = found[1]
    assert (f.rank, f.count, f.ran, f.subject) == (1, 5, 5, "workload")
    assert f.per_step_ms == pytest.approx(23.0)
    text = "`slow`: **rank 1** waited least at collectives (computed longest) in 5/5 trials, "
    text += "+23 ms per step (workload timing)"
    assert finding_text(f) == text
    assert findings_markdown(found).splitlines()[3] == f"- {text}"
    assert finding_json(f)["rank"] == 1 and finding_json(f)["text"].startswith("slow: rank 1")
    header = {"run_dir": "r", "baseline": "base", "threshold": 1.15}
    assert f"- {text}" in matrix_markdown(summary, header=header).splitlines()
    cells = {c["name"]: c for c in matrix_json(summary, ds, header=header)["cells"]}
    assert cells["base"]["straggler"] is None
    assert cells["slow"]["straggler"] == {
        "rank": 1, "trials": 5, "of": 5, "share_pct": None, "per_step_ms": 23.0, "source": "workload"
    }  # fmt: skip


def test_a_baseline_with_a_straggler_is_a_finding_too():
    ds = dataset({"base": [[25.0, 2.0]] * 3})
    assert [(f.kind, f.cell, f.rank) for f in findings(summarize(ds, resamples=100))] == [
        ("straggler", "base", 1)
    ]


# --- properties ------------------------------------------------------------------------------

FAST = settings(max_examples=30, deadline=None)


def waits_dataset(waits: np.ndarray) -> xr.Dataset:
    """A Dataset of ok trials (cell × trial × rank waits) with ``STEP`` ms steps."""
    n_cells, n_trials, _ = waits.shape
    status = np.full((n_cells, n_trials), "ok", dtype=object)
    dims = ("cell", "trial", "rank")
    return xr.Dataset(
        {
            "status": (("cell", "trial"), status),
            "step_time_ms": (("cell", "trial", "step"), np.full((n_cells, n_trials, 3), STEP)),
            "warmup_steps": (("cell", "trial"), np.zeros((n_cells, n_trials), dtype=int)),
            "comm_wait_ms": (dims, waits),
            "compute_ms": (dims, STEP - waits),
        },
        coords={"cell": [f"c{i}" for i in range(n_cells)], "trial": np.arange(n_trials)},
        attrs={"threshold": 1.15},
    )


@st.composite
def wait_arrays(draw):
    n_cells, n_trials, n_ranks = (draw(st.integers(1, hi)) for hi in (3, 6, 5))
    n_ranks = max(n_ranks, 2)
    values = st.sampled_from([0.0, 0.5, 1.0, 2.0, 5.0, 8.0, 12.0, 20.0, 30.0])
    flat = draw(
        st.lists(
            values, min_size=n_cells * n_trials * n_ranks, max_size=n_cells * n_trials * n_ranks
        )
    )
    return np.array(flat, dtype=float).reshape(n_cells, n_trials, n_ranks)


@FAST
@given(wait_arrays(), st.randoms(use_true_random=False))
def test_relabelling_ranks_relabels_the_answer(waits, rnd):
    perm = list(range(waits.shape[2]))
    rnd.shuffle(perm)  # new rank k is old rank perm[k]
    before = stragglers(waits_dataset(waits))
    after = stragglers(waits_dataset(waits[:, :, perm]))
    moved = [perm.index(r) if r >= 0 else -1 for r in before["straggler_rank"]]
    assert after["straggler_rank"].tolist() == moved
    for name in ("straggler_trials", "straggler_of", "straggler_ms"):
        assert after[name].tolist() == pytest.approx(before[name].tolist(), nan_ok=True)


@FAST
@given(wait_arrays(), st.floats(0.0, 10.0))
def test_equal_ranks_have_no_straggler_and_a_shared_wait_changes_nothing(waits, extra):
    equal = np.repeat(waits[:, :, :1], waits.shape[2], axis=2)
    assert (stragglers(waits_dataset(equal))["straggler_rank"] == -1).all()
    # the transfer costs every rank the same: adding it to every rank changes no answer
    before = stragglers(waits_dataset(waits))
    after = stragglers(waits_dataset(waits + extra))
    assert after["straggler_rank"].tolist() == before["straggler_rank"].tolist()


@FAST
@given(wait_arrays())
def test_a_named_straggler_holds_a_strict_majority_and_reaches_the_band(waits):
    found = stragglers(waits_dataset(waits))
    named = found[found["straggler_rank"] >= 0]
    assert (2 * named["straggler_trials"] > named["straggler_of"]).all()
    assert (named["straggler_ms"] >= 0.15 * STEP).all()
