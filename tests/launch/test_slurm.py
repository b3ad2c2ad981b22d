"""The Slurm launcher against a real two-node Slurm on this host (tests/slurm.py); no mocks.

Both "nodes" are this machine: torchrun meets over loopback with gloo, each node's artifacts go
to its own folder (by ``SLURM_NODEID``). Each test checks the status, the node it names, the job
state, that the job left the queue and that no process of the run is left.

One job outlives most tests: ``--time 1`` (a minute: Slurm's smallest limit) submitted with
``--no-wait`` early on one node's spare CPU, attached to at the end — so waiting for its
TIMEOUT overlaps the other tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aorta import envvars
from aorta.cli import main
from aorta.errors import ExitCode
from aorta.launch import LaunchFailed, LaunchSpec, new_run_id
from aorta.launch.slurm import SlurmJob
from aorta.run.ports import LOWEST, ephemeral_range
from aorta.store.redact import Redactor
from aorta.store.rundir import SBATCH_SCRIPT
from tests.launch_fixtures import tiny_race
from tests.slurm import SlurmCluster, slurm_missing
from tests.sshd import VENV_PYTHON, wait_gone

pytestmark = [
    pytest.mark.skipif(slurm_missing() is not None, reason=str(slurm_missing())),
    pytest.mark.skipif(not VENV_PYTHON.is_file(), reason="the job steps run .venv/bin/python"),
]
RACE = "race.yaml"
PROBE = "schema_version: 1\nmode: probe\nticket: SLURM\ntrials: 1\nmitigation_axis: [none]\n"
#: Node 1 fails at once; node 0 would sleep for minutes.
FAIL_ON_1 = (
    'if [ "$AORTA_NODE_RANK" = 1 ]; then echo failing on purpose; exit 1; fi; exec sleep 300'
)

SECRET = "s3cr3t-slurm-value-81f2"


@pytest.fixture(scope="session", name="slurm")
def slurm_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    cluster = SlurmCluster(root=tmp_path_factory.mktemp("slurm")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(autouse=True)
def _env(slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "probe.yaml").write_text(PROBE)
    (tmp_path / RACE).write_text(tiny_race("RACE-SMOKE"))


def _queue(slurm: SlurmCluster, job: str) -> str:
    return slurm.run("squeue", "-h", "-j", job).stdout.strip()


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "launch.json").read_text())


def _assert_clean(slurm: SlurmCluster, record: dict) -> None:
    deadline = time.monotonic() + 20  # a salloc job may still be COMPLETING when salloc returns
    while _queue(slurm, record["slurm"]["job_id"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _queue(slurm, record["slurm"]["job_id"]) == ""
    # slurmd signals a cancelled step, then SIGKILLs it KillWait (3 s) later; under load (two
    # busy cores, torchrun's agent and ranks exiting) that took more than 10 s (#48.8).
    assert wait_gone(f"AORTA_RUN_ID={record['run_id']}", timeout=45.0) == []


@pytest.fixture(scope="module", name="timeout_job")
def timeout_job_fixture(slurm: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Submitted once with --no-wait: one node sleeping past its one-minute limit."""
    work = tmp_path_factory.mktemp("timeout")
    (work / "probe.yaml").write_text(PROBE)
    argv = ["launch", "--slurm", "--nodes", "1", "--time", "1", "--no-wait", "-r", "probe.yaml"]
    done = subprocess.run(
        [str(VENV_PYTHON), "-m", "aorta", *argv, "-o", "out", "--", "sleep", "600"],
        cwd=work,
        env={**slurm.env, "GLOO_SOCKET_IFNAME": "lo"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return {"work": work, "done": done, "t0": time.monotonic()}


@pytest.mark.slow
def test_no_wait_submits_and_prints_the_job_id(slurm: SlurmCluster, timeout_job: dict) -> None:
    done = timeout_job["done"]
    assert done.returncode == ExitCode.OK, done.stderr
    job = done.stdout.strip()
    assert job.isdigit() and _queue(slurm, job)  # still queued or running: we did not wait
    (staging,) = (timeout_job["work"] / "out").glob(".aorta-launch-*")
    assert "#SBATCH --time=1" in (staging / "aorta.sbatch").read_text()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "2", "--partition", "nope"], "--partition 'nope': no such Slurm partition"),
        (["--nodes", "3"], "--nodes 3: partition 'debug' has only 2 node(s)"),
        (["--nodes", "2", "--time", "1:2:3:4"], "not a Slurm time (MM, MM:SS, HH:MM:SS"),
        ([], "--slurm outside an allocation needs --nodes"),
    ],
)
def test_refused_before_anything_is_submitted(
    slurm: SlurmCluster, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = slurm.run("squeue", "-h", "-o", "%i").stdout
    code = main(["launch", "--slurm", *args, "-r", "probe.yaml", "-o", "out"])
    assert code == ExitCode.USAGE
    assert message in _one_error(capsys.readouterr().err)
    assert slurm.run("squeue", "-h", "-o", "%i").stdout == before  # nothing submitted
    assert not Path("out").exists()


@pytest.mark.slow
def test_dry_run_prints_the_script_and_submits_nothing(
    slurm: SlurmCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["launch", "--slurm", "--nodes", "2", "--partition", "debug", "--time", "0:30"]
    extra = ["--gpus-per-node", "0", "--sbatch-arg=--exclusive", "--dry-run"]
    assert main([*argv, *extra, "-r", "probe.yaml", "-o", "out"]) == ExitCode.OK
    script = capsys.readouterr().out
    for line in ("#SBATCH --nodes=2", "#SBATCH --partition=debug", "#SBATCH --exclusive"):
        assert line in script.splitlines()
    assert "-m aorta launch --slurm --in-job" in script
    assert not Path("out").exists()


@pytest.mark.slow
def test_sbatch_two_nodes_two_processes_race(
    slurm: SlurmCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["launch", "--slurm", "--nodes", "2", "--time", "10", "--nproc-per-node", "2"]
    code = main([*argv, "-r", RACE, "-o", "out"])
    captured = capsys.readouterr()
    assert code == ExitCode.OK, captured.err
    (run_dir,) = (p.parent for p in Path("out").glob("RACE-SMOKE/race/*/manifest.json"))
    assert list(run_dir.rglob("matrix.md")) == [run_dir / "matrix.md"]  # one matrix
    (trial,) = [json.loads(p.read_text()) for p in run_dir.glob("cells/*/trial_*.json")]
    assert trial["status"] == "ok" and trial["world_size"] == 4
    assert sorted(r["rank"] for r in trial["ranks"]) == [0, 1, 2, 3]
    for k in (0, 1):  # each node's output in its own folder
        assert "Traceback" not in (run_dir / f"combined_traces/node_{k}/launch.log").read_text()
    assert (run_dir / "combined_traces/node_0/RACE-SMOKE/race").is_dir()  # node 0's logs
    assert "[node0 node1] " in captured.out
    assert "RUNNING" in captured.err and "COMPLETED" in captured.err
    record = _record(run_dir)
    assert record["status"] == "complete" and record["run_id"] == run_dir.name
    assert LOWEST <= record["master_port"] < ephemeral_range()[0]  # the srun probe's draw
    assert record["slurm"]["state"] == "COMPLETED" and record["slurm"]["job"]["ExitCode"] == "0:0"
    assert (run_dir / "aorta.sbatch").read_text().startswith("#!/bin/bash\n#SBATCH")
    assert "--node-rank=1" in record["commands"]["node1"]
    assert 0 < record["timings"]["all_started"] < record["timings"]["total"]
    _assert_clean(slurm, record)


def _salloc(slurm: SlurmCluster, *args: str, per_node: int = 1) -> subprocess.CompletedProcess:
    argv = ["salloc", "-N2", f"--ntasks-per-node={per_node}", str(VENV_PYTHON), "-m", "aorta"]
    argv += ["launch", "--slurm", *args, "-o", "out"]
    env = {**slurm.env, "GLOO_SOCKET_IFNAME": "lo"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == ExitCode.OK, done.stderr
    return done


@pytest.mark.slow
def test_inside_an_allocation_srun_runs_torchrun_per_node(slurm: SlurmCluster) -> None:
    # One process per node: two per node through the same step (run.sh, srun, torchrun) is the
    # sbatch test's; this one is about being started from inside salloc (~12 CPU-s less).
    done = _salloc(slurm, "-r", RACE, "--nproc-per-node", "1")
    (run_dir,) = (p.parent for p in Path("out").glob("RACE-SMOKE/race/*/manifest.json"))
    (trial,) = [json.loads(p.read_text()) for p in run_dir.glob("cells/*/trial_*.json")]
    assert trial["status"] == "ok" and trial["world_size"] == 2
    assert "[node1 node2] " in done.stdout or "[node0 node1] " in done.stdout
    record = _record(run_dir)
    assert record["status"] == "complete" and record["slurm"]["state"] == "COMPLETED"
    _assert_clean(slurm, record)


@pytest.mark.slow
def test_srun_ranks_one_task_per_rank(slurm: SlurmCluster) -> None:
    _salloc(slurm, "--srun-ranks", "-r", RACE, "--nproc-per-node", "2", per_node=2)
    (run_dir,) = (p.parent for p in Path("out").glob("RACE-SMOKE/race/*/manifest.json"))
    (trial,) = [json.loads(p.read_text()) for p in run_dir.glob("cells/*/trial_*.json")]
    assert trial["status"] == "ok" and trial["world_size"] == 4
    run_sh = (run_dir / "slurm/node_1/run.sh").read_text()
    assert 'RANK="$SLURM_PROCID"' in run_sh and "torch.distributed.run" not in run_sh
    record = _record(run_dir)
    base = envvars.slurm_trial_port_base(int(record["slurm"]["job_id"]))
    assert f"AORTA_TRIAL_MASTER_PORT_BASE={base}" in run_sh  # job-unique
    assert sorted(p.name for p in (run_dir / "slurm/node_1").glob("exit.*")) == ["exit.2", "exit.3"]
    _assert_clean(slurm, record)


@pytest.mark.slow
def test_a_node_exiting_1_fails_the_job_and_is_named(slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = LaunchSpec(argv=("sh", "-c", FAIL_ON_1), torchrun=False)
    run_id, lines = new_run_id(), []
    job = SlurmJob(tmp_path / "out", run_id)
    job.submit(spec, nodes=2, options=[])
    with pytest.raises(LaunchFailed) as failed:
        job.follow(
            on_line=lambda n, t: lines.append(f"[{n.label}] {t}"),
            emit=lines.append,
            timeout=120,
            poll=0.3,
        )
    result = failed.value.result
    node0, node1 = result.outcomes["node0"], result.outcomes["node1"]
    assert (node1.status, node1.exit_code) == ("failed", 1)
    assert node0.status == "stopped" and "kill-on-bad-exit" in node0.message
    assert str(failed.value).startswith(
        "launch failed: node1 node2 exited with code 1 (job FAILED)"
    )
    assert "[node1 node2] failing on purpose" in lines
    record = _record(result.run_dir)
    assert record["status"] == "failed" and record["slurm"]["state"] == "FAILED"
    _assert_clean(slurm, record)


def _scan_cmdlines(needle: bytes, stop: threading.Event, found: set[str]) -> None:
    while not stop.is_set():
        for path in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                if needle in path.read_bytes():
                    found.add(path.read_bytes().decode(errors="replace"))
        time.sleep(0.02)


@pytest.mark.slow
def test_environment_values_stay_out_of_command_lines(slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = LaunchSpec(
        argv=("sh", "-c", 'echo "$MY_API_TOKEN" | rev; sleep 3'),
        torchrun=False,
        env={"MY_API_TOKEN": SECRET},
    )
    run_id, lines, found, stop = new_run_id(), [], set(), threading.Event()
    job = SlurmJob(tmp_path / "out", run_id)
    job.submit(spec, nodes=2, options=[])
    script = (job.staging / SBATCH_SCRIPT).read_text()
    env_files = list(tmp_path.glob("out/.aorta-launch-*/slurm/node_*/env.sh"))
    assert len(env_files) == 2 and {p.stat().st_mode & 0o777 for p in env_files} == {0o600}
    scanner = threading.Thread(target=_scan_cmdlines, args=(SECRET.encode(), stop, found))
    scanner.start()
    try:
        result = job.follow(
            on_line=lambda n, t: lines.append(f"[{n.label}] {t}"),
            emit=lines.append,
            timeout=120,
            poll=0.3,
        )
    finally:
        stop.set()
        scanner.join()
    assert found == set()  # in no process's argv, while the job ran
    assert f"[node1 node2] {SECRET[::-1]}" in lines  # yet every node's program had it
    assert SECRET not in script
    for path in [p for p in result.run_dir.rglob("*") if p.is_file()]:
        assert SECRET.encode() not in path.read_bytes(), path
    record = _record(result.run_dir)
    assert "MY_API_TOKEN=<redacted>" in record["commands"]["node0"]
    assert list(result.run_dir.rglob("env.sh")) == []  # removed when the step ended
    # The run knows it as a secret (salted hash), like the SSH launch's env_vars: a bundle or a
    # report from any shell masks it.
    assert Redactor.of_run(result.run_dir, env={}).text(f"echo {SECRET}") == "echo <redacted>"
    _assert_clean(slurm, record)


@pytest.mark.slow
def test_ctrl_c_cancels_the_job(slurm: SlurmCluster, tmp_path: Path) -> None:
    argv = [str(VENV_PYTHON), "-m", "aorta", "launch", "--slurm", "--nodes", "2", "--time", "5"]
    argv += ["-r", "probe.yaml", "-o", "out", "--", "sleep", "300"]
    env = {**slurm.env, "GLOO_SOCKET_IFNAME": "lo"}
    with open(tmp_path / "stderr.txt", "w") as err_file:
        proc = subprocess.Popen(argv, env=env, stderr=err_file)
    deadline = time.monotonic() + 60  # until both nodes run and the sweep wrote its manifest
    staging = "out/.aorta-launch-*/slurm"
    while len(list(tmp_path.glob(f"{staging}/node_*/started.*"))) < 2 or not list(
        tmp_path.glob(f"{staging}/node_0/out/*/*/*/manifest.json")
    ):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=90)
    err = (tmp_path / "stderr.txt").read_text()
    assert code == ExitCode.INTERRUPTED, err
    assert _one_error(err) == "Error: interrupted"
    (record_file,) = tmp_path.glob("out/**/launch.json")
    record = json.loads(record_file.read_text())
    assert record["status"] == "interrupted" and record["slurm"]["state"] == "CANCELLED"
    manifest = json.loads((record_file.parent / "manifest.json").read_text())
    assert manifest["status"] != "complete"  # resumable with `aorta sweep resume`
    _assert_clean(slurm, record)


@pytest.mark.slow
def test_attach_follows_a_job_to_its_time_limit(
    slurm: SlurmCluster,
    timeout_job: dict,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = timeout_job["done"].stdout.strip()
    # monkeypatch's: a bare chdir left every later test of the worker in this job's folder
    monkeypatch.chdir(timeout_job["work"])
    assert main(["launch", "--slurm", "--attach", job, "-o", "out"]) == ExitCode.ERROR
    error = _one_error(capsys.readouterr().err)
    assert error.startswith("Error: launch timed out: node0 node1 still running at the job's")
    assert "(TIMEOUT)" in error
    (record_file,) = Path("out").glob("**/launch.json")
    record = json.loads(record_file.read_text())
    assert record["status"] == "timeout" and record["slurm"]["state"] == "TIMEOUT"
    manifest = json.loads((record_file.parent / "manifest.json").read_text())
    assert manifest["status"] != "complete"  # resumable with `aorta sweep resume`
    _assert_clean(slurm, record)
