"""The sweep engine end to end: real processes, real files, real deadlines."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from aorta.errors import ExitCode, RecipeError, UsageError
from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep
from aorta.store.rundir import RunDir, RunLocked
from tests.processes import alive
from tests.workloads_fixture import TEST_WORKLOADS


def run(text: str, tmp_path: Path, **kw):
    kw.setdefault("progress", "none")
    kw.setdefault("workloads", TEST_WORKLOADS)
    return sweep(
        load_recipe_text(text, command=kw.pop("command", None)), output=tmp_path / "out", **kw
    )


def records(result):
    return {(r.cell, r.trial): r for r in result.records}


# --- probe mode ---------------------------------------------------------------------------------

PROBE = """
mode: probe
ticket: T-1
trials: 2
mitigation_axis: [none, xnack]
step_time_regex: 'step ([0-9.]+) ms'
"""


def test_probe_sweep_writes_the_run_directory(tmp_path):
    cmd = [
        "bash",
        "-c",
        'echo "step 2.5 ms"; echo "step 3.5 ms"; echo err >&2; [ -z "$HSA_XNACK" ]',
    ]
    result = run(PROBE, tmp_path, command=cmd)
    rd = result.run_dir
    assert rd.parent == tmp_path / "out" / "T-1" / "command"
    for name in (
        "manifest.json",
        "recipe.resolved.yaml",
        "host_env.json",
        "matrix.md",
        "matrix.json",
    ):
        assert (rd / name).is_file(), name
    assert sorted(p.name for p in (rd / "cells").iterdir()) == ["none-none", "xnack-none"]
    assert sorted(p.name for p in (rd / "cells/none-none").glob("trial_*.json")) == [
        "trial_0000.json",
        "trial_0001.json",
    ]
    recs = records(result)
    ok = recs[("none-none", 0)]
    assert (ok.status.value, ok.passed, ok.exit_code, ok.step_times_ms) == (
        "ok",
        True,
        0,
        [2.5, 3.5],
    )
    assert (
        rd / "cells/none-none/trial_0000/stdout.log"
    ).read_text() == "step 2.5 ms\nstep 3.5 ms\n"
    assert (rd / "cells/none-none/trial_0000/stderr.log").read_text() == "err\n"
    bad = recs[("xnack-none", 1)]
    assert (bad.status.value, bad.passed, bad.exit_code, bad.error) == (
        "workload_failed",
        False,
        1,
        "the command exited 1",
    )
    manifest = json.loads((rd / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["n_trials"] == 4
    matrix = json.loads((rd / "matrix.json").read_text())
    assert [
        (c["name"], c["failures"], c["failure_rate"], c["step_source"]) for c in matrix["cells"]
    ] == [
        ("none-none", 0, 0.0, "per_step"),
        ("xnack-none", 2, 1.0, "no_ok_trial"),  # no step time from failed trials
    ]
    assert result.exit_code == ExitCode.OK
    assert load_recipe_text((rd / "recipe.resolved.yaml").read_text()).command == cmd


def test_command_argv_is_passed_byte_for_byte(tmp_path):
    arg = "spaces  and 'quotes' \"double\" $HOME `x` ; | *"
    result = run(
        "mode: probe\nmitigation_axis: [none]\n",
        tmp_path,
        command=["python3", "-c", "import sys; print(repr(sys.argv[1]))", arg],
    )
    out = (result.run_dir / "cells/none-none/trial_0000/stdout.log").read_text()
    assert out.strip() == repr(arg)


@pytest.mark.parametrize(
    "argv, status, code, hint",
    [
        (["/definitely/not/here"], "setup_failed", None, None),
        (["bash", "-c", "exit 127"], "workload_failed", 127, "command not found"),
        (["bash", "-c", "exit 126"], "workload_failed", 126, "not executable"),
        (["bash", "-c", "kill -SEGV $$"], "workload_failed", -11, "SIGSEGV"),
    ],
)
def test_command_exit_codes_have_hints(tmp_path, argv, status, code, hint):
    rec = run("mode: probe\nmitigation_axis: [none]\n", tmp_path, command=argv).records[0]
    assert rec.status.value == status
    assert rec.exit_code == code
    if hint:
        assert hint in rec.hint
    else:
        assert "command not found: '/definitely/not/here'" in rec.error


def test_env_passthrough_file_mode(tmp_path):
    text = "mode: probe\nmitigation_axis: [xnack]\nenv_passthrough_mode: file\n"
    # The overlay stays in the environment and is also in the private file (issue 13).
    script = 'test "$HSA_XNACK" = 1 && stat -c %a "$AORTA_ENV_FILE" && cat "$AORTA_ENV_FILE"'
    result = run(text, tmp_path, command=["bash", "-c", script])
    rec = result.records[0]
    assert rec.status.value == "ok", rec.error
    out = (result.run_dir / "cells/xnack-none/trial_0000/stdout.log").read_text().splitlines()
    assert out == ["600", "HSA_XNACK=1"]


def test_collect_paths_copies_files_from_outside(tmp_path):
    outside = tmp_path / "app.log"
    text = f"mode: probe\nmitigation_axis: [none]\ncollect_paths: ['{tmp_path}/*.log', '${{AORTA_ARTIFACT_DIR}}/stdout.log']\n"
    result = run(text, tmp_path, command=["bash", "-c", f"echo data > {outside}; echo out"])
    rec = result.records[0]
    assert (result.run_dir / "cells/none-none/trial_0000/collected/app.log").read_text() == "data\n"
    assert rec.artifacts["collected/app.log"] == "cells/none-none/trial_0000/collected/app.log"
    assert rec.artifacts["stdout.log"] == "cells/none-none/trial_0000/stdout.log"


# --- deadlines ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["in_process", "process"])
def test_hang_hits_its_deadline_and_leaves_no_process(tmp_path, isolation):
    pids = tmp_path / "pids"
    script = f"sleep 1000 & echo $! >> {pids}; (sleep 1000; true) & echo $! >> {pids}; echo $$ >> {pids}; wait"
    text = f"mode: probe\nmitigation_axis: [none]\ntrials: 2\ntimeout_per_trial: 4\ntrial_isolation: {isolation}\n"
    start = time.monotonic()
    result = run(text, tmp_path, command=["bash", "-c", script])
    # Two 4 s deadlines, each followed by the capture and the kill: a safety net, sized for a
    # loaded machine (30.5 s beside the first minutes of `make test`, with worker starts).
    assert time.monotonic() - start < 60
    assert [r.status.value for r in result.records] == ["timeout", "timeout"]
    assert all(3.9 < r.wall_clock_s < 15 for r in result.records)
    written = [int(p) for p in pids.read_text().split()]
    assert len(written) == 6
    assert not [p for p in written if alive(p)]


def test_in_process_python_workload_is_interrupted_at_its_deadline(tmp_path):
    text = "workload: sleeper\ntimeout_per_trial: 0.5\nworkload_config: {seconds: 30}\ncells: [{name: a, mitigations: [none]}]\n"
    start = time.monotonic()
    rec = run(text, tmp_path).records[0]
    # A net against a 30 s sleep, not a speed bound: the sweep's start and the capture before
    # the kill took 10.7 s beside lint in a clean-clone .ci/run.
    assert time.monotonic() - start < 25
    assert rec.status.value == "timeout" and "during run()" in rec.error


@pytest.mark.slow
def test_process_worker_hang_in_setup_is_killed(tmp_path):
    text = "workload: sleeper\ntrial_isolation: process\ntimeout_per_trial: 3\nworkload_config: {seconds: 30, phase: setup}\ncells: [{name: a, mitigations: [none]}]\n"
    rec = run(text, tmp_path).records[0]
    assert rec.status.value == "timeout"
    assert "during setup()" in rec.error


# --- failure classification ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "phase, status, error",
    [
        ("init", "setup_failed", "ValueError: bad config"),
        ("setup", "setup_failed", "RuntimeError: setup went wrong"),
        ("run", "workload_failed", "RuntimeError: run went wrong"),
        ("cleanup", "ok", None),
    ],
)
def test_exceptions_are_classified_by_phase(tmp_path, phase, status, error):
    text = f"workload: raiser\nworkload_config: {{phase: {phase}}}\ncells: [{{name: a, mitigations: [none]}}]\n"
    rec = run(text, tmp_path).records[0]
    assert rec.status.value == status
    if error:
        assert rec.error.startswith(error)
    if phase == "cleanup":
        assert any("cleanup() raised OSError: cleanup went wrong" in w for w in rec.warnings)


@pytest.mark.parametrize("phase, status", [("setup", "setup_failed"), ("run", "workload_failed")])
def test_worker_crash_is_blamed_on_its_phase(tmp_path, phase, status):
    text = f"workload: crasher\nworkload_config: {{phase: {phase}}}\ncells: [{{name: a, mitigations: [none]}}]\n"
    rec = run(text, tmp_path).records[0]
    assert rec.status.value == status
    assert f"the worker crashed during {phase}(): killed by SIGSEGV" in rec.error
    assert rec.exit_code == -11


@pytest.mark.slow
def test_unknown_workload_fails_every_trial_listing_registered(tmp_path):
    result = run("workload: nosuch\ntrials: 2\ncells: [{name: a, mitigations: [none]}]\n", tmp_path)
    assert [r.status.value for r in result.records] == ["infrastructure_failed"] * 2
    assert "unknown workload 'nosuch' (registered: " in result.records[0].error
    assert "matmul" in result.records[0].error
    assert result.exit_code == ExitCode.INCOMPLETE


def test_isolation_less_than_required_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="requires 'process' isolation"):
        run(
            "workload: crasher\ntrial_isolation: in_process\ncells: [{name: a, mitigations: [none]}]\n",
            tmp_path,
        )
    assert not (tmp_path / "out").exists()


def test_bad_env_value_rejected_before_anything_runs(tmp_path, run_cli, write):
    path = write("r.yaml", 'mode: probe\nmitigation_axis: [none]\nextra_env: {X: "a\\0b"}\n')
    code, _, err = run_cli("sweep", "run", "--recipe", path, "-o", tmp_path / "out", "--", "true")
    assert code == ExitCode.USAGE and "extra_env.X: contains a NUL or newline" in err
    path2 = write("r2.yaml", 'mode: probe\nmitigation_axis: [none]\nextra_env: {X: "a\\nb"}\n')
    assert (
        run_cli("sweep", "run", "--recipe", path2, "-o", tmp_path / "out", "--", "true")[0]
        == ExitCode.USAGE
    )
    assert not (tmp_path / "out").exists()


# --- isolation ------------------------------------------------------------------------------------


def test_in_process_overlay_is_applied_and_restored_exactly(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBE_VAR", "outer")
    monkeypatch.delenv("SET_BY_WORKLOAD", raising=False)
    before = dict(os.environ)
    text = "workload: env_probe\ncells: [{name: a, mitigations: [none], extra_env: {PROBE_VAR: inner}}, {name: b, mitigations: [none]}]\n"
    result = run(text, tmp_path)
    assert dict(os.environ) == before
    recs = records(result)
    assert recs[("a", 0)].info == {"value": "inner", "trial_env": "0", "cell_env": "a"}
    assert recs[("b", 0)].info["value"] == "outer"


@pytest.mark.slow
def test_process_isolation_sees_import_time_variables(tmp_path):
    # torch reads OMP_NUM_THREADS once, at import: a cell's value reaches a fresh worker, not
    # the engine's process, which imported torch already (tests/conftest.py sets 1 for it).
    import torch

    ambient = torch.get_num_threads()
    other = 2 if ambient == 1 else 1
    text = (
        "workload: matmul\nsteps: 2\nworkload_config: {m: 32, n: 32, k: 32, warmup_steps: 0}\n"
        f"cells: [{{name: one, mitigations: [none], extra_env: {{OMP_NUM_THREADS: '{other}'}}}}]\n"
    )
    in_proc = run(text, tmp_path, isolation="in_process").records[0]
    fresh = run(text, tmp_path, isolation="process").records[0]
    assert in_proc.metrics["threads"] == ambient
    assert fresh.metrics["threads"] == other
    assert (in_proc.isolation, fresh.isolation) == ("in_process", "process")


# --- matmul -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_matmul_sweep(tmp_path):
    text = (
        "workload: matmul\ntrials: 2\nsteps: 3\nworkload_config: {m: 64, n: 32, k: 16, warmup_steps: 1, iters_per_step: 2}\n"
        "cells: [{name: baseline, mitigations: [none]}, {name: f64, mitigations: [none], workload_config: {dtype: float64}}]\n"
    )
    result = run(text, tmp_path)
    assert result.exit_code == ExitCode.OK
    for rec in result.records:
        assert rec.status.value == "ok"
        assert len(rec.step_times_ms) == 4 and rec.warmup_steps == 1
        assert rec.metrics["tflops"] > 0 and rec.info["device"] == "cpu"
    assert (
        "| baseline | none | local | 2/2 | 0% (0/2) |" in (result.run_dir / "matrix.md").read_text()
    )


def test_matmul_rejects_bad_config_as_setup_failure(tmp_path):
    rec = run(
        "workload: matmul\nworkload_config: {dtype: int8}\ncells: [{name: a, mitigations: [none]}]\n",
        tmp_path,
    ).records[0]
    assert rec.status.value == "setup_failed" and "dtype must be one of" in rec.error


def test_unknown_config_key_is_a_recorded_warning(tmp_path):
    rec = run(
        "workload: matmul\nsteps: 1\nworkload_config: {m: 8, n: 8, k: 8, colour: red}\ncells: [{name: a, mitigations: [none]}]\n",
        tmp_path,
    ).records[0]
    assert rec.status.value == "ok"
    assert rec.warnings == ["workload 'matmul' ignores unknown workload_config key(s): colour"]


# --- stop_after, run dirs, locks ----------------------------------------------------------------------


def test_stop_after_marks_the_rest_did_not_run(tmp_path):
    text = "mode: probe\nmitigation_axis: [none, xnack]\ntrials: 4\nstop_after: {events: 1}\n"
    result = run(text, tmp_path, command=["bash", "-c", '[ -z "$HSA_XNACK" ]'])
    statuses = [(r.cell, r.status.value) for r in result.records]
    # One did_not_run record stands for the cell's whole unrun remainder.
    assert statuses == [("none-none", "ok")] * 4 + [
        ("xnack-none", "workload_failed"),
        ("xnack-none", "did_not_run"),
    ]
    assert "stop_after: 1 workload_failed trial(s) reached" in result.records[-1].error
    assert "stands for the 3 trial(s) not run (1–3)" in result.records[-1].error
    cells = json.loads((result.run_dir / "matrix.json").read_text())["cells"]
    assert {c["name"]: c["did_not_run"] for c in cells} == {"none-none": 0, "xnack-none": 3}


@pytest.mark.slow
def test_a_long_hunt_that_stops_early_writes_a_handful_of_files(tmp_path):
    # A flake hunt plans 200,000 trials and stops at the first failure: the run is as small
    # as what ran (one record per trial run, one for the remainder), and quick.
    text = (
        "mode: probe\nmitigation_axis: [xnack]\ntrials: 200000\nstop_after: {events: 1}\n"
        "schedule: sequential\n"
    )
    start = time.monotonic()
    result = run(text, tmp_path, command=["false"])
    assert time.monotonic() - start < 60
    assert [r.status.value for r in result.records] == ["workload_failed", "did_not_run"]
    assert len(list(result.run_dir.rglob("trial_*.json"))) == 2
    cells = json.loads((result.run_dir / "matrix.json").read_text())["cells"]
    assert cells[0]["did_not_run"] == 199_999


def test_runs_in_the_same_second_get_suffixes(tmp_path):
    import datetime as dt

    now = dt.datetime(2026, 11, 30, 4, 55, 38, tzinfo=dt.UTC)
    names = [RunDir.create(tmp_path, ticket="T", workload="w", now=now).path.name for _ in range(3)]
    assert names == ["2026-11-30T04-55-38", "2026-11-30T04-55-38-2", "2026-11-30T04-55-38-3"]


def test_lock_refuses_a_second_sweep_and_takes_over_a_stale_one(tmp_path):
    rd = RunDir.create(tmp_path, ticket=None, workload="w")
    with rd.lock(), pytest.raises(RunLocked, match=f"in use by pid {os.getpid()}"), rd.lock():
        pass
    import socket
    import subprocess

    dead = subprocess.run(["true"], check=True)
    del dead
    proc = subprocess.Popen(["true"])
    proc.wait()
    (rd.path / "run.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": proc.pid}))
    with rd.lock():
        assert json.loads((rd.path / "run.lock").read_text())["pid"] == os.getpid()
    assert not (rd.path / "run.lock").exists()


def test_atomic_writes_leave_no_temp_files(tmp_path):
    result = run(PROBE, tmp_path, command=["true"])
    leftovers = [p for p in result.run_dir.rglob("*") if ".tmp-" in p.name]
    assert leftovers == []


@pytest.mark.slow
def test_secrets_are_redacted_in_host_env(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_IB_KEY", "hunter2")
    monkeypatch.setenv("HF_TOKEN_NCCL", "x")
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    result = run(PROBE, tmp_path, command=["true"])
    env = json.loads((result.run_dir / "host_env.json").read_text())["env"]
    assert env["NCCL_IB_KEY"] == "<redacted>" and env["NCCL_DEBUG"] == "WARN"
    assert "hunter2" not in (result.run_dir / "host_env.json").read_text()


def test_trial_files_are_private_only_where_needed(tmp_path):
    result = run(
        "mode: probe\nmitigation_axis: [xnack]\nenv_passthrough_mode: file\n",
        tmp_path,
        command=["true"],
    )
    # probe.env is 0600 while the trial runs (test_env_passthrough_file_mode) and removed after
    # it: the overlay may hold credentials.
    assert not (result.run_dir / "cells/xnack-none/trial_0000/probe.env").exists()
    assert stat.S_IMODE((result.run_dir / "matrix.json").stat().st_mode) == 0o644


def test_recipe_errors_raise_before_a_run_dir_exists(tmp_path):
    with pytest.raises(RecipeError):
        run("workload: matmul\ncells: [{name: a, mitigations: [nope]}]\n", tmp_path)
    assert not (tmp_path / "out").exists()


def test_docker_environment_wraps_the_command(tmp_path, monkeypatch):
    # No Docker engine runs on this machine: a stand-in `docker` on PATH records its argv and
    # runs the command as the container would (the one mock in this suite; see its note).
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'printf "%s\\n" "$@" > {tmp_path}/docker-argv\n'
        'for a in "$@"; do case "$a" in --env-file=*) '
        f'cp -p "${{a#--env-file=}}" {tmp_path}/docker-env;; esac; done\n'
        'while [ "${1#--}" != "$1" ] || [ "$1" = run ]; do shift; done\n'
        'shift\nexec "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    text = "cells: [{name: a, mitigations: [xnack], environment: {docker: 'rocm/pytorch:7'}}]\n"
    rec = run(text, tmp_path, command=["true"]).records[0]
    assert rec.status.value == "ok", rec.error
    argv = (tmp_path / "docker-argv").read_text().splitlines()
    assert argv[:3] == ["run", "--rm", "--network=host"]
    env_file = next(a.split("=", 1)[1] for a in argv if a.startswith("--env-file="))
    assert not Path(env_file).exists()  # removed after the trial; the stand-in kept a copy
    copy = tmp_path / "docker-env"
    assert "HSA_XNACK=1" in copy.read_text().splitlines()
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert argv[-2:] == ["rocm/pytorch:7", "true"]


def test_docker_environment_refused_by_workloads_that_cannot(tmp_path):
    text = "workload: env_probe\ncells: [{name: a, mitigations: [none], environment: {docker: 'img:1'}}]\n"
    rec = run(text, tmp_path).records[0]
    assert rec.status.value == "infrastructure_failed"
    assert "cannot run in docker environment" in rec.error
