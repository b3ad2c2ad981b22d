"""matrix.json in upstream AORTA's shape: a fixture written as upstream would (hand-checked
numbers, upstream's key names and confound vocabulary, ``workload_setup_failed`` records)
round-trips through ``aorta.load_run`` and aorta's writer with nothing lost.

One deliberate difference from upstream: the step-time keys (``mean_step_time_ms``, the spread,
``step_times_ms``, ``step_time_ratio`` and the ``speed (+N%)`` confound) come from the trials
that ended ok only — upstream used every trial that ran, so a hang's wall clock until the kill
counted as a step time. The fixture holds aorta's values for those keys. A second: the
``speed (+N%)`` confound reads the comparison's median ratio (``ratio``), as the verdict
does — upstream read the ratio of means (still its ``step_time_ratio``) — so one cell's
tag says +50% (median 1.5) where upstream's said +41% (issue 45: one statistic)."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from aorta.matrix.load import load_run
from aorta.recipe import load_recipe_text
from aorta.report.matrix_files import write_matrix
from aorta.report.upstream import CONFOUND_VOCABULARY
from aorta.run.sweep import sweep
from aorta.store.record import TrialRecord, TrialStatus
from aorta.store.rundir import RunDir
from tests.conftest import DATA

FIXTURE = DATA / "upstream_run"


def _same(a, b, where=""):
    """Equal as JSON, floats to 1e-9; returns the first difference's path (or None)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                return f"{where}.{k}: missing"
            diff = _same(a[k], b[k], f"{where}.{k}")
            if diff:
                return diff
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items vs {len(b)}"
        return next(
            (
                d
                for i, (x, y) in enumerate(zip(a, b, strict=True))
                if (d := _same(x, y, f"{where}[{i}]"))
            ),
            None,
        )
    if isinstance(a, float) and isinstance(b, int | float) and not isinstance(b, bool):
        return None if math.isclose(a, b, rel_tol=1e-9) else f"{where}: {a} vs {b}"
    return None if a == b else f"{where}: {a!r} vs {b!r}"


@pytest.fixture
def run(tmp_path):
    return shutil.copytree(FIXTURE, tmp_path / "run")


def test_upstream_fixture_round_trips_without_loss(run):
    upstream = json.loads((run / "matrix.json").read_text())
    ds = load_run(run)  # no recipe.resolved.yaml: the baseline comes from upstream's keys
    assert ds.attrs["baseline"] == upstream["baseline_cell"] == "baseline-local"
    assert ds.attrs["threshold"] == upstream["confound"]["threshold"]
    write_matrix(run, ds)
    ours = json.loads((run / "matrix.json").read_text())
    # Every upstream key, top level and per cell, is there with the same value ...
    assert _same(upstream, ours) is None
    # ... beside aorta's own keys, kept.
    cell = ours["cells"][3]
    assert cell["name"] == "slow-local" and {
        "ratio",
        "verdict",
        "p_adj",
        "statuses",
        "trials",
    } <= set(cell)
    assert ours["baseline"] == "baseline-local" and "statistics" in ours


def test_the_fixture_covers_upstreams_vocabulary(run):
    tags = {c["confound"] for c in json.loads((run / "matrix.json").read_text())["cells"]}
    assert {t if not t.startswith("speed") else "speed (+N%)" for t in tags} == set(
        CONFOUND_VOCABULARY
    )


def test_workload_setup_failed_is_read_and_written_as_upstream_names_it(run):
    raw = json.loads((run / "cells/broken-local/trial_0000.json").read_text())
    assert raw["status"] == "workload_setup_failed"
    rec = TrialRecord.model_validate(raw)
    assert rec.status is TrialStatus.SETUP_FAILED and rec.is_error
    assert TrialStatus("workload_setup_failed") is TrialStatus.SETUP_FAILED
    assert rec.status.upstream_name == "workload_setup_failed"
    # Our own name still reads, and a record written by aorta reads back.
    assert TrialRecord.model_validate_json(rec.to_json()).status is TrialStatus.SETUP_FAILED
    assert [r.status.value for r in RunDir(run).trial_records() if r.cell == "broken-local"] == [
        "setup_failed",
        "setup_failed",
    ]


@pytest.mark.slow
def test_a_real_run_writes_upstreams_keys(tmp_path):
    recipe = load_recipe_text(
        "trials: 2\ncells: [{name: baseline, mitigations: [none]}, "
        "{name: tok, mitigations: [none], extra_env: {HF_TOKEN: hf_abcdefghijklmnop1234}}]",
        command=["true"],
    )
    doc = json.loads(
        (sweep(recipe, output=tmp_path, progress="none").run_dir / "matrix.json").read_text()
    )
    assert doc["baseline_cell"] == "baseline"
    tok = doc["cells"][1]
    assert tok["resolved_env_vars"] == {"HF_TOKEN": "<redacted>"}
    assert (
        tok["exit_status_counts"] == {"ok": 2}
        and tok["trial_paths"][1] == "cells/tok/trial_0001.json"
    )
    assert tok["confound"] == "n/a"  # wall-clock timing only: upstream does not compare it
    assert tok["step_time_source"] == "wall_clock_total" and len(tok["step_times_ms"]) == 2
