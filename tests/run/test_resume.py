"""A killed sweep resumes where it stopped and ends with the matrix an uninterrupted run gives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aorta.errors import ExitCode
from tests.processes import alive

AORTA = str(Path(sys.executable).parent / "aorta")

# Deterministic trials: odd trials of the xnack cell fail; step times come from the output.
# Interleaved (the default, said explicitly): a kill lands mid-round, between cells.
RECIPE = """
mode: probe
ticket: RESUME
trials: 3
schedule: interleaved
mitigation_axis: [none, xnack, hsa_no_sdma]
step_time_regex: 'step ([0-9.]+)'
"""
SCRIPT = (
    'if [ "$AORTA_CELL/$AORTA_TRIAL" = "$KILL_AT" ]; then kill -9 $PPID; sleep 5; fi; '
    'echo "step $((AORTA_TRIAL + 1)).5"; '
    'if [ -n "$HSA_XNACK" ] && [ $((AORTA_TRIAL % 2)) = 1 ]; then exit 3; fi'
)
CELLS = ["none-none", "xnack-none", "hsa_no_sdma-none"]


def _aorta(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [AORTA, *args],
        capture_output=True,
        text=True,
        timeout=300,  # a safety net: a 4 s sweep took 117 s in the first minutes of `make test`
        env={**os.environ, **(env or {})},
        **kw,
    )


def _start_sweep(recipe: Path, output: Path, script: str) -> subprocess.Popen[str]:
    """``aorta sweep run`` in the background, each trial running ``bash -c script``."""
    argv = ["sweep", "run", "--recipe", str(recipe), "-o", str(output), "--", "bash", "-c", script]
    return subprocess.Popen(
        [AORTA, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _comparable(run_dir: Path) -> list[dict]:
    cells = json.loads((run_dir / "matrix.json").read_text())["cells"]
    keep = (
        "name",
        "n_ran",
        "n_ok",
        "failures",
        "errors",
        "did_not_run",
        "failure_rate",
        "mean_step_ms",
        "step_source",
        "confound",
        "statuses",
    )
    out = [{k: c[k] for k in keep} for c in cells]
    for c, full in zip(out, cells, strict=True):
        c["trials"] = [(t["trial"], t["status"]) for t in full["trials"]]
    return out


def _only_run_dir(root: Path) -> Path:
    (run_dir,) = (root / "RESUME" / "command").iterdir()
    return run_dir


def _reference(tmp_root: Path, recipe: Path) -> list[dict]:
    proc = _aorta(
        "sweep",
        "run",
        "--recipe",
        str(recipe),
        "-o",
        str(tmp_root / "ref"),
        "--",
        "bash",
        "-c",
        SCRIPT,
    )
    assert proc.returncode == ExitCode.OK, proc.stderr
    return _comparable(_only_run_dir(tmp_root / "ref"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[dict]:
    """The matrix of the recipe run without a kill: deterministic, so one run serves every
    example of the property below (it was rerun per example, a sweep each)."""
    root = tmp_path_factory.mktemp("ref")
    recipe = root / "r.yaml"
    recipe.write_text(RECIPE)
    return _reference(root, recipe)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 8 sweeps: 369 s of `make test`'s 600 s per test in a slow spell
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(cell=st.sampled_from(CELLS), trial=st.integers(0, 2))
def test_kill_9_at_any_trial_then_resume_equals_uninterrupted(
    tmp_path_factory, uninterrupted, cell, trial
):
    root = tmp_path_factory.mktemp("kill")
    recipe = root / "r.yaml"
    recipe.write_text(RECIPE)

    killed = _aorta(
        "sweep",
        "run",
        "--recipe",
        str(recipe),
        "-o",
        str(root / "run"),
        "--",
        "bash",
        "-c",
        SCRIPT,
        env={"KILL_AT": f"{cell}/{trial}"},
    )
    assert killed.returncode == -signal.SIGKILL
    run_dir = _only_run_dir(root / "run")
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    assert (run_dir / "run.lock").exists()  # left by the dead process: resume takes it over
    assert not (run_dir / "cells" / cell / f"trial_{trial:04d}.json").exists()

    resumed = _aorta("sweep", "resume", str(run_dir))
    assert resumed.returncode == ExitCode.OK, resumed.stderr
    assert _comparable(run_dir) == uninterrupted
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "complete"
    assert not (run_dir / "run.lock").exists()
    # Every trial that ran has its place in the run order, each place once.
    orders = sorted(
        json.loads(p.read_text())["run_order"] for p in run_dir.glob("cells/*/trial_*.json")
    )
    assert orders == list(range(len(orders)))


@pytest.mark.slow
def test_truncated_and_foreign_records_are_rerun_and_others_kept(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    expected = _reference(tmp_path, recipe)
    run_dir = _only_run_dir(tmp_path / "ref")
    cells = run_dir / "cells"
    truncated = cells / "xnack-none/trial_0001.json"
    truncated.write_bytes(truncated.read_bytes()[:40])
    foreign = cells / "none-none/trial_0002.json"
    data = json.loads(foreign.read_text())
    data["cell_id"] = "not-this-plan"
    foreign.write_text(json.dumps(data))
    untouched = {
        p: p.stat().st_mtime_ns
        for p in cells.glob("*/trial_*.json")
        if p not in (truncated, foreign)
    }

    proc = _aorta("sweep", "run", "--resume", str(run_dir))
    assert proc.returncode == ExitCode.OK, proc.stderr
    assert "9 trials, 7 already done" in proc.stderr
    assert json.loads(truncated.read_text())["status"] == "workload_failed"
    assert json.loads(foreign.read_text())["cell_id"] != "not-this-plan"
    assert {p: p.stat().st_mtime_ns for p in untouched} == untouched
    assert _comparable(run_dir) == expected


@pytest.mark.slow
def test_ctrl_c_reaps_children_and_leaves_the_run_resumable(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("mode: probe\nticket: RESUME\nmitigation_axis: [none, xnack]\n")
    pids = tmp_path / "pids"
    script = f'echo $$ >> {pids}; if [ -z "$DONE" ]; then sleep 1000 & echo $! >> {pids}; wait; fi'
    proc = _start_sweep(recipe, tmp_path / "run", script)
    deadline = time.monotonic() + 60
    while (not pids.exists() or len(pids.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED
    assert "resume with: aorta sweep resume" in err
    assert not [p for p in map(int, pids.read_text().split()) if alive(p)]
    run_dir = _only_run_dir(tmp_path / "run")
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    assert not (run_dir / "run.lock").exists()

    resumed = _aorta("sweep", "resume", str(run_dir), env={"DONE": "1"})
    assert resumed.returncode == ExitCode.OK, resumed.stderr
    statuses = json.loads((run_dir / "matrix.json").read_text())["cells"]
    assert [(c["name"], c["n_ok"]) for c in statuses] == [("none-none", 1), ("xnack-none", 1)]


@pytest.mark.slow
def test_sigterm_stops_like_ctrl_c(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("mode: probe\nticket: RESUME\nmitigation_axis: [none]\n")
    marker = tmp_path / "started"
    proc = _start_sweep(recipe, tmp_path / "run", f"touch {marker}; sleep 1000")
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.terminate()
    proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED


@pytest.mark.slow
def test_resume_refuses_a_different_recipe(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    _reference(tmp_path, recipe)
    run_dir = _only_run_dir(tmp_path / "ref")
    other = tmp_path / "other.yaml"
    other.write_text(RECIPE.replace("trials: 3", "trials: 4"))
    proc = _aorta(
        "sweep", "run", "--resume", str(run_dir), "--recipe", str(other), "--", "bash", "-c", SCRIPT
    )
    assert proc.returncode == ExitCode.USAGE
    assert "differs from the recipe" in proc.stderr


@pytest.mark.slow
def test_status_command(tmp_path, run_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    _reference(tmp_path, recipe)
    run_dir = _only_run_dir(tmp_path / "ref")
    code, out, _ = run_cli("sweep", "status", run_dir)
    assert code == ExitCode.OK
    assert out.strip() == f"{run_dir}: complete — 9/9 trials recorded (8 ok, 1 workload_failed)"


@pytest.mark.slow
def test_a_killed_attempts_output_does_not_leak_into_the_rerun(tmp_path):
    # The trial prints two steps, then the sweep is killed; the resumed attempt prints three.
    script = (
        'echo "step 1.5"; echo "step 2.5"; '
        'if [ "$AORTA_CELL/$AORTA_TRIAL" = "$KILL_AT" ] && [ ! -e "$MARK" ]; then '
        'touch "$MARK"; kill -9 $PPID; sleep 5; fi; echo "step 3.5"'
    )
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    env = {"KILL_AT": "xnack-none/1", "MARK": str(tmp_path / "killed-once")}
    killed = _aorta(
        "sweep", "run", "--recipe", str(recipe), "-o", str(tmp_path / "run"),
        "--", "bash", "-c", script, env=env,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    run_dir = _only_run_dir(tmp_path / "run")
    resumed = _aorta("sweep", "resume", str(run_dir), env=env)
    assert resumed.returncode == ExitCode.OK, resumed.stderr
    trial = json.loads((run_dir / "cells" / "xnack-none" / "trial_0001.json").read_text())
    assert trial["step_times_ms"] == [1.5, 2.5, 3.5]
    # The killed attempt's files are kept beside the trial's, named as such.
    aside = run_dir / "cells" / "xnack-none" / "trial_0001.attempt-1"
    assert "step 2.5" in "".join(p.read_text() for p in aside.glob("*stdout*"))
