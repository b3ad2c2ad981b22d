"""schedule: adaptive, the parts a real sweep (tests/run/test_adaptive_sweep.py) runs through,
each on its own and fast: what matrix.md and the findings say about an adaptive run (anytime-
valid: no optional-stopping warning, no fixed-n projection; an undecided cell at its cap gets
the command that raises it), the progress bound, the schedule's decisions far into a resumed
run, and what ``aorta sweep extend`` does with an adaptive run."""

from __future__ import annotations

import io
import json
import random

import pytest

from aorta.errors import UsageError
from aorta.matrix.dataset import build_dataset
from aorta.matrix.findings import findings
from aorta.matrix.summary import summarize
from aorta.recipe import load_recipe_text
from aorta.recipe.plan import plan
from aorta.recipe.registry import Registry
from aorta.report.findings import finding_text
from aorta.report.matrix_files import matrix_markdown
from aorta.report.progress import LineReporter
from aorta.run.adaptive import AdaptiveSchedule
from aorta.run.extend import record_extension
from aorta.store.record import TrialRecord
from aorta.store.rundir import RunDir

CELLS = ("base", "same", "flaky")


def _cells(trials: int) -> list[dict]:
    return [{"name": n, "cell_id": n, "mitigations": ["none"], "trials": trials} for n in CELLS]


def _records(trials: int, *, same_until: int | None = None) -> list[TrialRecord]:
    """``same`` as fast as the baseline; ``flaky`` too, but it fails its odd trials."""
    rng = random.Random(1)
    out = []
    for t in range(trials):
        for cell in CELLS:
            if cell == "same" and same_until is not None and t >= same_until:
                continue
            failed = cell == "flaky" and t % 2 == 1
            out.append(
                TrialRecord(
                    cell=cell,
                    cell_id=cell,
                    trial=t,
                    status="workload_failed" if failed else "ok",
                    passed=not failed,
                    step_times_ms=[10 * (1 + rng.gauss(0, 0.01)) for _ in range(6)],
                )
            )
    return out


def _header(schedule: str) -> dict:
    return {
        "baseline": "base",
        "threshold": 1.15,
        "schedule": schedule,
        "run_dir": "runs/x",
        "extensions": [{"at": "T", "trials": 10, "cells": ["base", "flaky"], "previous": {}}],
        **({"failure_margin": 0.15} if schedule == "adaptive" else {}),
    }


@pytest.fixture(scope="module")
def adaptive_summary():
    header = _header("adaptive")
    ds = build_dataset(_cells(10), _records(10, same_until=6), attrs=header)
    return summarize(ds), header


def test_an_extended_adaptive_run_is_not_warned_about_optimistic_p_values(adaptive_summary):
    df, header = adaptive_summary
    text = matrix_markdown(df, header=header)
    line = next(x for x in text.splitlines() if x.startswith("- extended to 10"))
    assert "optimistic" not in line and "anytime-valid" in line
    # A fixed-n run extended the same way keeps its warning.
    fixed = _header("interleaved")
    ds = build_dataset(_cells(10), _records(10), attrs=fixed)
    text = matrix_markdown(summarize(ds), header=fixed)
    assert "so p-values are optimistic (optional stopping" in text


def test_findings_of_an_adaptive_run_raise_the_cap_instead_of_projecting_a_fixed_n(
    adaptive_summary,
):
    df, _ = adaptive_summary
    (flaky,) = [f for f in findings(df) if f.cell == "flaky"]
    assert flaky.sequential and flaky.undecided_at == 10 and flaky.trials_to_decide is None
    text = finding_text(flaky, run="runs/x", style="text")
    assert "would decide" not in text and "Boschloo" not in text
    assert "(anytime p_adj " in text
    assert text.endswith(
        "undecided at its cap of 10 trials; raise the cap and it stops once settled: "
        "aorta sweep extend runs/x --trials 20 --cells base,flaky"
    )


def test_a_running_adaptive_cell_gets_no_next_step(adaptive_summary):
    """While the sweep runs (a cell below its cap), the schedule decides: no command."""
    header = _header("adaptive")
    ds = build_dataset(_cells(20), _records(10), attrs=header)
    (flaky,) = [f for f in findings(summarize(ds)) if f.cell == "flaky"]
    assert flaky.undecided_at is None
    assert "aorta sweep extend" not in finding_text(flaky, run="runs/x", style="text")


def test_the_line_reporter_shows_a_bound_that_falls_as_cells_stop():
    out = io.StringIO()
    r = LineReporter(out)
    r.bound(30)
    r.start(run_dir="RUN", total=30, done=0, cells=3)
    rec = TrialRecord(cell="same", cell_id="x", trial=0, status="ok", passed=True)
    for trial in range(5):
        r.trial_done("same", trial, rec)
    r.bound(25)
    r.cell_done("same")
    assert out.getvalue().splitlines() == [
        "aorta: 3 cells, ≤ 30 trials (adaptive: cells stop once settled) → RUN",
        "[5/≤25] same: 5 ok",
    ]


RECIPE = """
schedule: adaptive
adaptive: {min_trials: 5, max_trials: 3000}
cells:
  - {name: base, mitigations: [none]}
  - {name: same, mitigations: [none]}
"""


def test_a_resumed_schedule_decides_far_into_the_run_and_bounds_the_total():
    """A resume may start at round 2,500: the points before it are decided in a loop (the
    first version recursed once per round, past Python's recursion limit)."""
    p = plan(load_recipe_text(RECIPE, command=["true"]), registry=Registry.load(entry_points=False))
    records = [r for r in _records(12) if r.cell != "flaky"]
    cells = [c for c in _cells(3000) if c["name"] != "flaky"]
    header = {"baseline": "base", "threshold": 1.15, "schedule": "adaptive"}

    def dataset(point):
        return build_dataset(cells, [r for r in records if r.trial < point], attrs=header)

    schedule = AdaptiveSchedule(p, dataset=dataset)
    active, stops = schedule.active(2500)
    assert active == frozenset()  # same settled, so the baseline stopped too
    assert {s.cell for s in stops} == {"base", "same"}
    (same,) = [s for s in stops if s.cell == "same"]
    assert 5 <= same.point <= 12 and same.reason.startswith("within band after ")
    recorded = {(r.cell, r.trial) for r in records}
    # Nothing beyond the records will run: the bound is what was recorded (was 6,000 planned).
    assert schedule.bound(recorded) == len(records)
    assert schedule.active(2600) == (frozenset(), [])  # decided once


def _adaptive_run(tmp_path, decided: dict[str, bool]) -> RunDir:
    rd = RunDir.create(tmp_path, ticket="T", workload="command")
    rd.write_json(
        rd.manifest_path,
        {"status": "complete", "schedule": "adaptive", "cells": {c: c for c in CELLS}},
    )
    for cell in CELLS:
        rd.write_json(rd.cell_json(cell), {"name": cell, "trials": 10})
    rd.write_json(
        rd.matrix_json,
        {
            "baseline": "base",
            "schedule": "adaptive",
            "adaptive": {
                c: {"decided": d, "reason": f"{c} reason", "trials": 10} for c, d in decided.items()
            },
        },
    )
    return rd


def test_extending_an_adaptive_run_raises_the_baseline_with_its_undecided_cells(tmp_path):
    rd = _adaptive_run(tmp_path, {"base": False, "same": True, "flaky": False})
    record_extension(rd.path, trials=20, cells=["flaky"])
    manifest = rd.manifest()
    assert manifest["trials_override"] == {"base": 20, "flaky": 20}
    assert manifest["extensions"][-1]["cells"] == ["base", "flaky"]


def test_extending_only_decided_cells_of_an_adaptive_run_is_refused(tmp_path):
    rd = _adaptive_run(tmp_path, {"base": False, "same": True, "flaky": False})
    before = rd.manifest_path.read_bytes()
    with pytest.raises(UsageError, match=r"every chosen cell is decided \(same: same reason\)"):
        record_extension(rd.path, trials=20, cells=["same"])
    assert rd.manifest_path.read_bytes() == before
    done = _adaptive_run(tmp_path, {"base": True, "same": True, "flaky": True})
    with pytest.raises(UsageError, match="would run nothing"):
        record_extension(done.path, trials=20, cells=None)
    assert json.loads(done.manifest_path.read_text())["status"] == "complete"


def test_once_every_cell_stopped_no_later_trial_decides_anything():
    """max_trials may be a million: after every cell stopped, each later trial's answer costs
    nothing (it cost a walk over every decision point before it: O(max_trials²) CPU)."""
    text = RECIPE.replace("max_trials: 3000", "max_trials: 1000000")
    p = plan(load_recipe_text(text, command=["true"]), registry=Registry.load(entry_points=False))
    records = [r for r in _records(12) if r.cell != "flaky"]
    cells = [c for c in _cells(1_000_000) if c["name"] != "flaky"]
    header = {"baseline": "base", "threshold": 1.15, "schedule": "adaptive"}
    looked: list[int] = []

    def dataset(point):
        looked.append(point)
        return build_dataset(cells, [r for r in records if r.trial < point], attrs=header)

    schedule = AdaptiveSchedule(p, dataset=dataset)
    for trial in range(13):
        schedule.active(trial)
    assert schedule.settled and schedule.active(12) == (frozenset(), [])
    points = list(looked)
    assert points == sorted(set(points)) and points[-1] <= 12  # each point once, in order
    for trial in range(13, 1_000_000, 997):
        assert schedule.active(trial) == (frozenset(), [])
    assert looked == points  # nothing more was decided
    assert schedule.bound({(r.cell, r.trial) for r in records}) == len(records)
