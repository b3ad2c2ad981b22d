"""``aorta sweep status`` on a real sweep process: running while it lives, interrupted (with the
resume command) once it was ``kill -9``-ed and its manifest still says ``running``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from aorta.store.rundir import RunDir
from tests.processes import sweep_run

RECIPE = "mode: probe\nticket: STATUS\ntrials: 2\nmitigation_axis: [none]\n"


def _wait_for(path: Path, deadline_s: float = 120.0) -> str:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


@pytest.mark.slow
def test_status_of_a_killed_sweep_says_interrupted_and_how_to_resume(tmp_path, run_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    marker = tmp_path / "trial.pid"
    # The trial writes its pid, then sleeps: the sweep is mid-trial when it is killed.
    sweep = subprocess.Popen(
        sweep_run(
            recipe, tmp_path / "out", "--", "bash", "-c", f"echo $$ > {marker}; exec sleep 120"
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    trial_pid = int(_wait_for(marker))
    try:
        (run_dir,) = (tmp_path / "out" / "STATUS" / "command").iterdir()
        code, out, err = run_cli("sweep", "status", run_dir)
        assert code == ExitCode.OK, err
        assert f": running (pid {sweep.pid})" in out

        sweep.send_signal(signal.SIGKILL)
        sweep.wait(timeout=60)
    finally:
        sweep.kill()
        sweep.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(trial_pid, signal.SIGKILL)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    assert (run_dir / "run.lock").exists()  # a kill -9 leaves the lock file behind

    code, out, err = run_cli("sweep", "status", run_dir)
    assert code == ExitCode.OK, err
    assert f": interrupted (owner pid {sweep.pid} gone) — 0/2 trials recorded (none)" in out
    assert out.strip().endswith(f"— resume with: aorta sweep resume {run_dir}")

    code, out, _ = run_cli("sweep", "status", "--json", run_dir)
    info = json.loads(out)
    assert (info["status"], info["manifest_status"]) == ("interrupted", "running")
    assert info["owner"]["pid"] == sweep.pid and info["owner"]["alive"] is False


def test_status_of_a_run_nobody_holds_is_interrupted(tmp_path, run_cli):
    # A manifest left at "running" with no lock file at all (deleted, or never taken).
    from aorta.store.rundir import RunDir

    rd = RunDir.create(tmp_path, ticket=None, workload="command")
    rd.update_manifest(status="running", pid=999_999_999, n_trials=3)
    code, out, _ = run_cli("sweep", "status", rd.path)
    assert code == ExitCode.OK
    assert ": interrupted (owner pid 999999999 gone) — 0/3 trials recorded (none)" in out
    assert "resume with: aorta sweep resume" in out


def test_a_recycled_pid_that_holds_no_lock_is_not_the_owner(tmp_path, run_cli):
    # The lock file names a live process (this one) that never took the lock: a pid reused
    # after the sweep died. The kernel lock decides, not the pid.
    from aorta.store.rundir import LOCK, RunDir

    rd = RunDir.create(tmp_path, ticket=None, workload="command")
    rd.update_manifest(status="running", n_trials=1)
    (rd.path / LOCK).write_text(json.dumps({"host": os.uname().nodename, "pid": os.getpid()}))
    assert rd.live_status() == ("interrupted", {**rd.owner(), "alive": False})
    code, out, _ = run_cli("sweep", "status", rd.path)
    assert code == ExitCode.OK and f"interrupted (owner pid {os.getpid()} gone)" in out
    with rd.lock():  # now this process holds it: running
        assert rd.live_status()[0] == "running"
        assert run_cli("sweep", "status", rd.path)[1].startswith(f"{rd.path}: running (pid ")


def _finished_run(tmp_path, run_cli, recipe: str, *command: str):
    (tmp_path / "r.yaml").write_text(recipe)
    code, _, err = run_cli(
        "sweep", "run", "--recipe", tmp_path / "r.yaml", "-o", tmp_path / "out", "--", *command
    )
    assert code == ExitCode.OK, err
    (path,) = (tmp_path / "out" / "LOST" / "command").iterdir()
    return RunDir.open(path)


def test_a_complete_run_with_a_lost_record_is_incomplete_and_says_what_resume_runs(
    tmp_path, run_cli
):
    recipe = "mode: probe\nticket: LOST\ntrials: 2\nmitigation_axis: [none, omp_num_threads_1]\n"
    rd = _finished_run(tmp_path, run_cli, recipe, "true")
    assert run_cli("sweep", "status", rd.path)[1].strip() == (
        f"{rd.path}: complete — 4/4 trials recorded (4 ok)"
    )
    # One record deleted, one cut short: the manifest still says complete.
    rd.trial_path("none-none", 1).unlink()
    path = rd.trial_path("omp_num_threads_1-none", 0)
    path.write_bytes(path.read_bytes()[:40])
    assert rd.manifest()["status"] == "complete"

    code, out, _ = run_cli("sweep", "status", rd.path)
    assert code == ExitCode.OK
    assert out.strip() == (
        f"{rd.path}: incomplete — 2/4 trials recorded (2 ok) — missing: none-none trial 1; "
        f"omp_num_threads_1-none trial 0 — run them with: aorta sweep resume {rd.path}"
    )
    info = json.loads(run_cli("sweep", "status", "--json", rd.path)[1])
    assert info["status"] == "incomplete" and info["manifest_status"] == "complete"
    assert info["missing"] == {"none-none": [1], "omp_num_threads_1-none": [0]}

    # The command it names runs exactly those, and the run is complete again.
    code, _, err = run_cli("sweep", "resume", rd.path)
    assert code == ExitCode.OK, err
    assert rd.missing_trials() == {}
    assert run_cli("sweep", "status", rd.path)[1].strip() == (
        f"{rd.path}: complete — 4/4 trials recorded (4 ok)"
    )


def test_trials_a_did_not_run_record_stands_for_are_not_missing(tmp_path, run_cli):
    # stop_after skips a cell's remainder with one did_not_run record: that run is complete.
    recipe = (
        "mode: probe\nticket: LOST\nmitigation_axis: [none]\n"
        "stop_after: {events: 1, max_trials: 5}\n"
    )
    rd = _finished_run(tmp_path, run_cli, recipe, "false")
    assert rd.missing_trials() == {}
    code, out, _ = run_cli("sweep", "status", rd.path)
    assert code == ExitCode.OK and f"{rd.path}: complete — 2/5 trials recorded" in out
