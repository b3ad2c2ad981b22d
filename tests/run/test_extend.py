"""``aorta sweep extend`` on a run it may not touch: refused before anything is written
(issue 24), and held to the recipe's bounds (real sweeps, real locks)."""

from __future__ import annotations

import json

import pytest

from aorta.errors import ExitCode, UsageError
from aorta.recipe import load_recipe_text
from aorta.recipe.limits import MAX_TRIALS
from aorta.run.extend import record_extension
from aorta.run.sweep import sweep
from aorta.store.rundir import RunDir, RunLocked

PROBE = "mode: probe\ntrials: 2\nmitigation_axis: [none, xnack]\n"


@pytest.fixture
def finished_run(tmp_path):
    result = sweep(load_recipe_text(PROBE, command=["true"]), output=tmp_path, progress="none")
    assert result.exit_code == ExitCode.OK
    return result.run_dir


def test_a_refused_extend_leaves_the_manifest_as_it_was(finished_run, run_cli):
    rd = RunDir.open(finished_run)
    before = rd.manifest_path.read_bytes()
    with rd.lock():  # another sweep holds the run
        with pytest.raises(RunLocked, match="in use"):
            record_extension(finished_run, trials=32, cells=None)
        code, _, err = run_cli("sweep", "extend", finished_run, "--trials", "32")
    assert code == ExitCode.USAGE and "in use" in err and "Traceback" not in err
    assert rd.manifest_path.read_bytes() == before
    # A later resume runs nothing nobody asked for.
    again = sweep(resume=finished_run, progress="none")
    assert len(again.records) == 4
    assert "trials_override" not in json.loads(rd.manifest_path.read_text())


@pytest.mark.parametrize("trials", [0, MAX_TRIALS + 1, 10**15])
def test_extend_keeps_the_recipe_bounds(finished_run, run_cli, trials):
    rd = RunDir.open(finished_run)
    before = rd.manifest_path.read_bytes()
    with pytest.raises(UsageError, match=f"from 1 to {MAX_TRIALS:,}"):
        record_extension(finished_run, trials=trials, cells=None)
    code, _, err = run_cli("sweep", "extend", finished_run, "--trials", str(trials))
    assert code == ExitCode.USAGE and "Traceback" not in err
    assert rd.manifest_path.read_bytes() == before
