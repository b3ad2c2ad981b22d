"""A trial's clock: the process's own start-to-exit time, read when the kernel says it exited
— not at the next 50 ms poll of ``Popen.wait(timeout=...)``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from aorta.recipe import load_recipe_text
from aorta.run import procs
from aorta.run.sweep import sweep
from aorta.store.rundir import WARMUP_TRIAL, RunDir


def test_wait_exit_wakes_at_the_exit_not_at_a_poll():
    # A child that exits at once, watched with a 5 s poll: the wait ends with the child,
    # and the exit time it reports is before the wait returned, not a poll step later.
    proc = procs.spawn([sys.executable, "-c", "pass"])
    exited = procs.wait_exit(proc, 60.0)
    after = time.monotonic()
    assert exited is not None and proc.returncode == 0
    assert exited <= after


def test_wait_exit_times_out_on_a_live_child():
    proc = procs.spawn([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert procs.wait_exit(proc, 0.05) is None
        assert proc.returncode is None
    finally:
        procs.kill_group(proc, grace_s=1.0)


def test_run_with_deadline_times_the_child_not_the_stop_poll():
    # stop_when is polled every 5 s; a 20 ms child must not read as 5 s.
    walls = []
    for _ in range(8):
        proc = procs.spawn([sys.executable, "-c", "import time; time.sleep(0.02)"])
        got = procs.run_with_deadline(
            proc, deadline=time.monotonic() + 120, stop_when=lambda: None, poll_s=5.0
        )
        assert got.returncode == 0
        walls.append(got.wall_s)
    # Distinct to the microsecond: a poll would put them on a few grid points.
    assert len({round(w, 6) for w in walls}) == len(walls), walls
    assert min(walls) >= 0.02 and max(walls) < 5.0, walls


@pytest.mark.slow
def test_an_a_a_sweep_of_a_short_command_is_timed_below_a_millisecond(tmp_path: Path):
    recipe = load_recipe_text(
        "ticket: AA\ntrials: 6\ncells: [{name: a, mitigations: [none]}, {name: b, mitigations: [none]}]",
        command=[sys.executable, "-c", "pass"],
    )
    result = sweep(recipe, output=tmp_path / "out", progress="none")
    walls = [r.wall_clock_s for r in result.records if r.trial >= 0]
    assert len(walls) == 12 and all(w is not None and w > 0 for w in walls)
    # Before, every trial read 0.117, 0.169, 0.22, 0.28 or 0.33 s: five values for twelve.
    assert len({round(w, 6) for w in walls if w is not None}) == len(walls), walls
    # The command's own time, which the workload also reports as its elapsed time.
    for r in result.records:
        assert r.elapsed_sec == pytest.approx(r.wall_clock_s)
    # The discarded warm-up ran first, as the baseline's warmup.json: not a trial_*.json,
    # not in the run's order, and named in matrix.md.
    rd = RunDir(result.run_dir)
    (warm,) = rd.warmup_records()
    assert warm.cell == "a" and warm.trial == WARMUP_TRIAL and warm.run_order is None
    assert sorted(r.run_order for r in result.records) == list(range(12))
    assert len(list(rd.trial_records())) == 12
    assert (
        "warm-up: one trial of `a` ran first and was discarded"
        in (result.run_dir / "matrix.md").read_text()
    )
    assert warm.started_at is not None and min(r.started_at or "" for r in result.records) > (
        warm.started_at
    )
