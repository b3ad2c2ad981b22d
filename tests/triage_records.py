"""Trial records of the docs/triage.md scenario, for tests of the findings and the matrix
files (no sweep: build_dataset over real TrialRecord objects)."""

from __future__ import annotations

import numpy as np

from aorta.matrix.dataset import build_dataset
from aorta.store.record import TrialRecord

BASE, FIX, HANG = (
    "none-none",
    "pytorch_alloc_expandable_segments-none",
    "hsa_no_scratch_reclaim-none",
)


def rec(cell, trial, status, *, steps=(), sig=None, wall=1.0):
    return TrialRecord(
        cell=cell,
        cell_id="",
        trial=trial,
        status=status,
        passed=status == "ok",
        step_times_ms=list(steps),
        signature=sig,
        wall_clock_s=wall,
        elapsed_sec=wall,
        main_work_started=True,
        run_order=trial,
    )


def triage_dataset():
    """The docs/triage.md scenario as records: the baseline fails 4/8 with an NCCL error, the
    expandable-segments cell 0/8, the scratch-reclaim cell hangs in every trial (6 s each,
    until the kill)."""
    rng = np.random.default_rng(3)
    recs = []
    for t in range(8):
        steps = 12 + rng.random(3)
        if t % 2:
            recs.append(rec(BASE, t, "workload_failed", steps=steps[:1], sig="nccl_error"))
        else:
            recs.append(rec(BASE, t, "ok", steps=steps))
        recs.append(rec(FIX, t, "ok", steps=12 + rng.random(3)))
        recs.append(rec(HANG, t, "timeout", steps=steps[:1], sig="hang", wall=6.2))
    cells = [{"name": c, "trials": 8} for c in (BASE, FIX, HANG)]
    return build_dataset(cells, recs, attrs={"baseline": BASE, "threshold": 1.15})
