"""Nothing a trial starts outlives it: kill -9 of the sweep, setsid daemons (real processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from aorta import envvars
from aorta.errors import ExitCode
from aorta.run.orphans import OrphanGuard, _is_subreaper, _set_subreaper
from tests.sshd import processes_with_env, wait_for_processes

AORTA = str(Path(sys.executable).parent / "aorta")

PROBE = """
mode: probe
ticket: ORPHANS
trials: 1
mitigation_axis: [none]
trial_isolation: {isolation}
"""


def _wait_gone(entry: str, timeout: float = 15.0) -> list[int]:
    end = time.monotonic() + timeout
    while (left := processes_with_env(entry)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def _wait_file(path: Path, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert path.exists(), f"the trial never started ({path} missing)"


def test_a_guard_leaves_the_process_as_it_found_it():
    # Its exit switched the subreaper off whatever it had found: a sweep run inside a process
    # that was one (an outer sweep, a test's own) left it one no longer, and the outer trials'
    # orphans went to init instead of to their reaper.
    was = _is_subreaper()
    token = os.environ.get(envvars.SWEEP_TOKEN)
    try:
        for before in (True, False):
            if not _set_subreaper(before):
                pytest.skip("no PR_SET_CHILD_SUBREAPER here")
            with OrphanGuard(grace_s=0.5):
                assert _is_subreaper()
            assert _is_subreaper() is before
            assert os.environ.get(envvars.SWEEP_TOKEN) == token
    finally:
        _set_subreaper(was)


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["in_process", "process"])
def test_kill_9_of_the_sweep_leaves_no_trial_process(tmp_path, isolation):
    mark = f"ORPHAN_TEST={uuid.uuid4().hex}"
    started = tmp_path / "started"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(PROBE.format(isolation=isolation))
    script = f"touch {started}; sleep 1000 & sleep 1000; wait"
    scratch = tmp_path / "tmp"  # the sweep's temp folder: a worker's scratch goes there
    scratch.mkdir()
    sweep = subprocess.Popen(
        [AORTA, "sweep", "run", "--recipe", str(recipe), "-o", str(tmp_path / "out"),
         "--", "bash", "-c", script],
        env={**os.environ, mark.split("=")[0]: mark.split("=")[1], "TMPDIR": str(scratch)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_file(started)
        # the sweep, bash and its two sleeps, which start after the touch
        assert len(wait_for_processes(mark, 3)) >= 3
        assert len(list(scratch.glob("aorta-trial-*"))) == (isolation == "process")
        sweep.kill()
        sweep.wait(timeout=10)
        assert _wait_gone(mark) == []
        # the guard removes the worker's scratch too (its request holds the trial's env)
        deadline = time.monotonic() + 10
        while list(scratch.glob("aorta-trial-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(scratch.glob("aorta-trial-*")) == []
    finally:
        for pid in processes_with_env(mark):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["in_process", "process"])
def test_a_setsid_daemon_does_not_survive_an_ok_trial(tmp_path, isolation):
    mark = f"DAEMON_TEST={uuid.uuid4().hex}"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(PROBE.format(isolation=isolation))
    # The daemon leaves the trial's process group and session; the command itself passes.
    script = "setsid sleep 1000 < /dev/null > /dev/null 2>&1 & sleep 0.3; echo done"
    try:
        proc = subprocess.run(
            [AORTA, "sweep", "run", "--recipe", str(recipe), "-o", str(tmp_path / "out"),
             "--", "bash", "-c", script],
            env={**os.environ, mark.split("=")[0]: mark.split("=")[1]},
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
        assert proc.returncode == ExitCode.OK, proc.stderr
        assert _wait_gone(mark, timeout=5.0) == []
        (record,) = (tmp_path / "out").rglob("trial_0000.json")
        data = json.loads(record.read_text())
        assert data["status"] == "ok"
        assert any("setsid" in w for w in data["warnings"]), data["warnings"]
    finally:
        for pid in processes_with_env(mark):
            os.kill(pid, signal.SIGKILL)
