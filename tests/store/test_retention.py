"""``retain:``: a real sweep whose trials pass, fail and time out (a hang is a failure), each
outcome pruned to its level; every record survives."""

from __future__ import annotations

import json

import pytest

from aorta.errors import RecipeError
from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep
from aorta.store.retention import SUMMARY_TAIL_BYTES
from aorta.store.rundir import RunDir

# Each trial writes a log, a trace and a collected file; the cell decides how it ends.
SCRIPT = r"""
set -e
mkdir -p "$AORTA_ARTIFACT_DIR/trace"
echo '{"traceEvents": []}' > "$AORTA_ARTIFACT_DIR/trace/rank0.pt.trace.json"
echo data > "$AORTA_ARTIFACT_DIR/collected.bin"
i=0; while [ $i -lt 5000 ]; do echo "line $i of the log"; i=$((i+1)); done
echo "the last line"
case "$OUTCOME" in pass) exit 0;; fail) exit 3;; hang) exec sleep 60;; esac
"""

RECIPE = """
trials: 2
timeout_per_trial: 3
retain: {on_pass: log, on_fail: summary, on_error: none}
cells:
  - {name: passes, mitigations: [none], extra_env: {OUTCOME: pass}}
  - {name: fails, mitigations: [none], extra_env: {OUTCOME: fail}}
  - {name: hangs, mitigations: [none], extra_env: {OUTCOME: hang}}
"""


def _files(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def pruned_run(tmp_path_factory):
    recipe = load_recipe_text(RECIPE, command=["sh", "-c", SCRIPT])
    return sweep(recipe, output=tmp_path_factory.mktemp("runs"), progress="none")


@pytest.mark.slow
def test_every_record_is_kept(pruned_run):
    rd = RunDir(pruned_run.run_dir)
    statuses = {(r.cell, r.trial): r.status.value for r in rd.trial_records()}
    assert statuses == {
        ("passes", 0): "ok",
        ("passes", 1): "ok",
        ("fails", 0): "workload_failed",
        ("fails", 1): "workload_failed",
        ("hangs", 0): "timeout",
        ("hangs", 1): "timeout",
    }


@pytest.mark.slow
def test_each_outcome_is_pruned_to_its_level(pruned_run):
    rd = RunDir(pruned_run.run_dir)
    records = {(r.cell, r.trial): r for r in rd.trial_records()}
    for trial in (0, 1):
        # on_pass: log — the logs stay whole, the trace and the collected file go.
        passed = rd.artifact_dir("passes", trial)
        assert _files(passed) == ["stderr.log", "stdout.log"]
        assert (passed / "stdout.log").read_text().count("\n") == 5001
        # on_fail: summary — only the logs' tails, for workload failures and hangs alike, and
        # a hung trial's evidence (what its record's forensics name).
        for cell in ("fails", "hangs"):
            failed = rd.artifact_dir(cell, trial)
            forensics = records[(cell, trial)].forensics
            items = forensics.evidence if forensics else ()
            evidence = sorted(f for e in items for f in e.files)
            # `exec sleep` is no Python process: a capture, no stacks and no dump.
            assert evidence == (["hang/rank0/capture_0.json"] if cell == "hangs" else [])
            assert _files(failed) == [*evidence, "stderr.log", "stdout.log"]
            if cell == "hangs":  # the trial's own alarm is its deadline, not an interrupt
                capture = json.loads((failed / "hang/rank0/capture_0.json").read_text())
                assert capture["reason"] == "deadline"
            tail = (failed / "stdout.log").read_bytes()
            assert len(tail) <= SUMMARY_TAIL_BYTES + 200
            assert tail.startswith(b"[aorta retain: summary") and tail.endswith(b"the last line\n")
    assert records[("passes", 0)].info["retained"] == "log"
    assert set(records[("passes", 1)].artifacts.values()) == {
        "cells/passes/trial_0001/stdout.log",
        "cells/passes/trial_0001/stderr.log",
    }
    assert records[("hangs", 0)].info["retained"] == "summary"


@pytest.mark.slow
def test_the_matrix_still_has_every_trial(pruned_run):
    cells = json.loads((pruned_run.run_dir / "matrix.json").read_text())["cells"]
    assert {c["name"]: c["n_trials"] for c in cells} == {"passes": 2, "fails": 2, "hangs": 2}


def test_without_retain_everything_stays(tmp_path):
    recipe = load_recipe_text(
        "cells: [{name: a, mitigations: [none], extra_env: {OUTCOME: pass}}]",
        command=["sh", "-c", SCRIPT],
    )
    run = sweep(recipe, output=tmp_path, progress="none").run_dir
    assert _files(RunDir(run).artifact_dir("a", 0)) == [
        "collected.bin",
        "stderr.log",
        "stdout.log",
        "trace/rank0.pt.trace.json",
    ]


def test_unknown_level_is_a_recipe_error():
    with pytest.raises(RecipeError, match=r"retain\.on_pass"):
        load_recipe_text(
            "workload: matmul\nretain: {on_pass: some}\ncells: [{name: a, mitigations: [none]}]"
        )
