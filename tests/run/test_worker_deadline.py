"""A process-isolated trial and its worker share one deadline (the worker's context carries
the engine's ``time.monotonic()`` value, the same clock on the machine): the engine, not the
worker, must act on it first, or the trial's log snapshot and evidence — taken only while the
worker lives — would be skipped. They are taken: nothing in the worker acts on the deadline
before the engine (a Python workload runs without a timer of its own there, and an isolated
command's own wait cannot signal its command, which is no group leader), so the engine's
capture runs on the live trial and its SIGTERM is what stops the worker. This pins it, for the
day a worker learns to keep its own deadline."""

from __future__ import annotations

import json
import sys

import pytest

from aorta.errors import ExitCode
from aorta.store.rundir import HANG_DIR, evidence_name, evidence_rank_dir

RECIPE = "ticket: WD\ntrials: 2\ntimeout_per_trial: 3\ntrial_isolation: process\n"
RECIPE += "cells: [{name: a, mitigations: [none]}]\n"


@pytest.mark.slow
def test_the_engine_takes_the_evidence_before_the_worker_acts_on_the_deadline(tmp_path, run_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    sleeper = "import time; print('step 1', flush=True); time.sleep(120)"
    code, out, err = run_cli(
        "sweep", "run", "--recipe", recipe, "-o", tmp_path / "out", "--",
        sys.executable, "-c", sleeper,
    )  # fmt: skip
    assert code == ExitCode.OK, out + err
    records = sorted(tmp_path.glob("out/*/*/*/cells/a/trial_*.json"))
    assert len(records) == 2
    for path in records:
        record = json.loads(path.read_text())
        assert record["status"] == "timeout", record["error"]
        assert "the worker was stopped" in record["error"]  # the engine's SIGTERM, first
        folder = path.with_suffix("") / HANG_DIR / evidence_rank_dir(0)
        capture = json.loads((folder / evidence_name("capture", 0)).read_text())
        assert capture["reason"] == "deadline"
        assert record["forensics"]["evidence"][0]["rank"] == 0
