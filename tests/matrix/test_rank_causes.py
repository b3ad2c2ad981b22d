"""Per-rank causes per cell (aorta.matrix.rank_causes): OOM ranks and figures across trials,
the earliest non-finite rank per trial, and the memory outlier rule (a property over peaks)."""

from __future__ import annotations

import numpy as np
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from aorta.matrix.dataset import build_dataset
from aorta.matrix.rank_causes import memory_outliers, numerics_incidents, oom_incidents
from aorta.store.record import NonFinite, OomEvent, TrialRecord

GIB = 1 << 30


def _ds(cell: str, records: list[TrialRecord]) -> xr.Dataset:
    return build_dataset([{"name": cell, "trials": len(records)}], records)


def test_figures_that_differ_across_trials_read_as_ranges_and_other_ranks_are_named():
    def oom(rank: int, asked: int) -> OomEvent:
        return OomEvent(
            rank=rank, kind="hip", requested_bytes=asked * GIB, free_bytes=GIB // 2,
            total_bytes=192 * GIB, reserved_unallocated_bytes=GIB // 4,
        )  # fmt: skip

    recs = [
        TrialRecord(
            cell="c",
            cell_id="",
            trial=t,
            status="workload_failed",
            passed=False,
            world_size=4,
            oom=events,
        )
        for t, events in enumerate([[oom(2, 1)], [oom(2, 3)], [oom(2, 2), oom(0, 1)], []])
    ]
    line = oom_incidents(_ds("c", recs))["c"].line()
    assert line == (
        "out of memory on rank 2 in 3/4 trials (tried to allocate 1.00 GiB–3.00 GiB with "
        "512.00 MiB free of 192.00 GiB; 256.00 MiB reserved but unallocated); also rank 0 in 1; "
        "the other 2 ranks never"
    )


def test_too_big_for_the_device_is_said():
    e = OomEvent(
        rank=0, kind="cuda", requested_bytes=100 * GIB, free_bytes=GIB, total_bytes=80 * GIB
    )
    recs = [
        TrialRecord(cell="c", cell_id="", trial=0, status="workload_failed", passed=False, oom=[e])
    ]
    assert "larger than the whole device" in oom_incidents(_ds("c", recs))["c"].line()


def test_the_earliest_rank_of_each_trial_names_it():
    def nf(rank: int, step: int, module: str, finite: bool = True) -> NonFinite:
        return NonFinite(rank=rank, step=step, module=module, cls="Linear", inputs_finite=finite)

    trials = [
        [nf(0, 12, "head", False), nf(3, 11, "layers.2.mlp")],
        [nf(3, 9, "layers.2.mlp"), nf(1, 10, "head", False)],
        [],
    ]
    recs = [
        TrialRecord(cell="c", cell_id="", trial=t, status="ok", passed=True, numerics=events)
        for t, events in enumerate(trials)
    ]
    inc = numerics_incidents(_ds("c", recs))["c"]
    assert (inc.rank, inc.count, inc.ran) == (3, 2, 3)
    assert inc.line() == (
        "rank 3's first non-finite output at steps 9–11 in `layers.2.mlp` (Linear), nan, "
        "inputs finite, in 2/3 trials"
    )


@given(arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 5)),
              elements=st.floats(1.0, 100.0)))  # fmt: skip
def test_an_outlier_is_the_top_rank_by_the_band_in_most_trials(peaks):
    trials, ranks = peaks.shape
    ds = xr.Dataset(
        {"peak_allocated_bytes": (("cell", "trial", "rank"), peaks[None])},
        coords={"cell": ["c"], "trial": list(range(trials)), "rank": list(range(ranks))},
    )
    found = memory_outliers(ds, band=0.10).get("c")
    tops = []
    for row in peaks:
        top = np.flatnonzero(row == row.max())
        others = np.median(np.delete(row, top[0]))
        tops.append(int(top[0]) if len(top) == 1 and row[top[0]] / others - 1 >= 0.10 else -1)
    best = max(set(tops) - {-1}, key=lambda r: (tops.count(r), -r), default=None)
    if best is None or 2 * tops.count(best) <= trials:
        assert found is None
    else:
        assert found is not None and found.rank == best and found.count == tops.count(best)
        assert found.excess_pct >= 10.0 - 1e-9
