"""``aorta launch`` in-process through ``aorta.cli.main``: exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from aorta.cli import main
from aorta.errors import ExitCode
from tests.launch_fixtures import (  # noqa: F401 - fixtures
    FAST,
    farm_fixture,
    needs_sshd,
    needs_venv,
    ssh_key_fixture,
)
from tests.sshd import SshdFarm, wait_gone

RECIPE = """\
schema_version: 1
mode: probe
ticket: LAUNCH-CLI
trials: 1
mitigation_axis: [none]
diagnostic_axis: [none]
"""

#: A distributed recipe: DDP training steps on gloo, a fresh worker per trial and rank, and
#: torch.profiler traces on every rank of one cell. (In-process distributed trials hang now and
#: then on two static-rendezvous nodes even under plain torchrun — reported to the engine.)
DISTRIBUTED_RECIPE = """\
schema_version: 1
ticket: LAUNCH-E2E
workload: training
trial_isolation: process
trials: 1
steps: 3
workload_config: {model_dim: 16, num_layers: 1, batch_size: 4, mode: ddp}
cells:
  - {name: baseline, mitigations: [none]}
  - {name: profiled, mitigations: [none], collect: [torch_profiler]}
"""


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "probe.yaml"
    path.write_text(RECIPE)
    return path


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_bad_cluster_file_is_a_usage_error_naming_the_path(
    tmp_path: Path, recipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"node_dict": {"10.0.0.2": {"vpc_ip": 5}}}))
    assert main(["launch", "--cluster", str(cluster), "--recipe", str(recipe)]) == ExitCode.USAGE
    line = _one_error_line(capsys.readouterr().err)
    assert (
        line
        == f'Error: {cluster}: node_dict["10.0.0.2"].vpc_ip: must be a host name or IP address, got integer 5'
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--recipe", "{recipe}", "--nproc-per-node", "many"],
            "--nproc-per-node: must be a whole number ≥ 1, 'gpu' or 'auto', got string 'many'",
        ),
        ([], "give --recipe FILE"),
        (["--recipe", "{tmp}/missing.yaml"], "cannot read the recipe"),
        (["--recipe", "{recipe}", "--override", "lr=1"], "--override needs a training command"),
        (["--recipe", "{recipe}", "--master-port", "0"], "--master-port"),
    ],
)
def test_bad_arguments_are_usage_errors(
    tmp_path: Path, recipe: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    cluster = tmp_path / "hosts"
    cluster.write_text("worker-1 slots=2\n")
    argv = [a.format(recipe=recipe, tmp=tmp_path) for a in args]
    assert main(["launch", "--cluster", str(cluster), *argv]) == ExitCode.USAGE
    assert expected in _one_error_line(capsys.readouterr().err)


@pytest.mark.slow
@needs_sshd
@needs_venv
def test_dry_run_prints_each_nodes_command_and_versions(
    farm: SshdFarm, tmp_path: Path, recipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = farm.write_cluster(tmp_path / "cluster.json")
    code = main(
        [
            "launch",
            "-c",
            str(cluster),
            "-r",
            str(recipe),
            "--nproc-per-node",
            "2",
            "--dry-run",
            "--",
            "echo",
            "a b",
        ]
    )
    out = capsys.readouterr().out
    assert code == ExitCode.OK, out
    assert "node0 127.0.0.2: reachable" in out and "node1 127.0.0.3: reachable" in out
    assert out.count("torch 2.") == 2 and out.count("aorta 0.") == 2
    assert "--nproc-per-node=2 --node-rank=1 --master-addr=127.0.0.2" in out
    assert "sweep run --recipe" in out and "-- echo 'a b'" in out
    assert "AORTA_NODE_RANK=1" in out


def test_a_newline_in_an_env_value_is_refused_like_in_a_recipe(
    tmp_path: Path, recipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"node_dict": {"h": {}}, "env_vars": {"A": "x\ny"}}))
    assert main(["launch", "--cluster", str(cluster), "--recipe", str(recipe)]) == ExitCode.USAGE
    line = _one_error_line(capsys.readouterr().err)
    assert line == (
        f"Error: {cluster}: env_vars.A: contains a NUL or newline character, "
        "which a process environment cannot carry"
    )


@pytest.mark.slow
@needs_sshd
@needs_venv
def test_a_node_that_cannot_run_fails_the_launch_with_error(
    farm: SshdFarm, tmp_path: Path, recipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = farm.cluster_dict()
    data["node_dict"]["127.0.0.3"]["python"] = "/nonexistent/python3"
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(data))
    out_dir = tmp_path / "out"
    code = main(["launch", "-c", str(cluster), "-r", str(recipe), "-o", str(out_dir), "-q"])
    err = capsys.readouterr().err
    assert code == ExitCode.ERROR
    line = _one_error_line(err)
    assert "node1 127.0.0.3 setup failed: /nonexistent/python3: command not found" in line
    assert "node0 127.0.0.2 was not started" in line
    (record,) = out_dir.glob("_launch_/*/launch.json")
    nodes = json.loads(record.read_text())["nodes"]
    assert (nodes["node0"]["status"], nodes["node1"]["status"]) == ("not_started", "setup_failed")
    assert wait_gone(f"AORTA_RUN_ID={record.parent.name}", timeout=0.0) == []


@pytest.mark.slow
@needs_sshd
@needs_venv
def test_ctrl_c_stops_every_node_and_exits_interrupted(
    farm: SshdFarm, tmp_path: Path, recipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = farm.write_cluster(tmp_path / "cluster.json")
    out_dir = tmp_path / "out"
    py = farm.cluster_dict()["python"]

    def interrupt_when_running() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            logs = list(out_dir.glob(".aorta-launch-*/combined_traces/node_*/launch.log"))
            if len(logs) == 2 and all("hanging" in p.read_text() for p in logs):
                os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does
                return
            time.sleep(0.05)

    threading.Thread(target=interrupt_when_running, daemon=True).start()
    # Ctrl-C through the library, on two nodes running the worker directly (plain mode); the
    # SIGTERM test below goes through the CLI and the sweep engine.
    from aorta.launch import Cluster, LaunchSpec, launch

    the_cluster = Cluster.from_dict(farm.cluster_dict())
    spec = LaunchSpec(argv=(py, "-m", "tests.launch_worker", "hang-on", "all"), torchrun=False)
    with pytest.raises(KeyboardInterrupt):
        launch(the_cluster, spec, output=out_dir, deadlines=FAST)
    (record,) = out_dir.glob("_launch_/*/launch.json")
    data = json.loads(record.read_text())
    assert data["status"] == "interrupted"
    assert {n["status"] for n in data["nodes"].values()} == {"interrupted"}
    assert wait_gone(f"AORTA_RUN_ID={data['run_id']}", timeout=0.0) == []
    assert cluster.is_file()


@pytest.mark.slow
@needs_sshd
@needs_venv
def test_sigterm_stops_the_nodes_and_exits_interrupted(
    farm: SshdFarm, tmp_path: Path, recipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = farm.write_cluster(tmp_path / "cluster.json", nodes=farm.nodes[:1])
    out_dir = tmp_path / "out"
    # the trial's command; `; :` keeps sh alive (no exec), with a marker to find it by
    probe = f"sh\0-c\0sleep 1000; :\0aorta-sigterm-{os.getpid()}\0"

    def terminate_when_the_trial_runs() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if _running(probe):
                os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler's time limit does
                return
            time.sleep(0.1)

    threading.Thread(target=terminate_when_the_trial_runs, daemon=True).start()
    args = ["-c", str(cluster), "-r", str(recipe), "-o", str(out_dir), "--run-timeout", "120"]
    code = main(["launch", *args, "--", *probe.rstrip("\0").split("\0")])
    assert code == ExitCode.INTERRUPTED
    assert "launch: interrupted: results in" in capsys.readouterr().err
    (record,) = out_dir.glob("LAUNCH-CLI/*/*/launch.json")  # the trial had begun: a run dir
    data = json.loads(record.read_text())
    assert data["status"] == "interrupted" and data["nodes"]["node0"]["status"] == "interrupted"
    assert wait_gone(f"AORTA_RUN_ID={data['run_id']}", timeout=0.0) == []
    assert not _running(probe)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def _running(cmdline: str) -> bool:
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if path.read_bytes() == cmdline.encode():
                return True
        except OSError:
            continue
    return False


@needs_sshd
@needs_venv
@pytest.mark.slow
def test_two_node_two_process_gloo_sweep_writes_one_run_directory(
    farm: SshdFarm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "training.yaml"
    recipe.write_text(DISTRIBUTED_RECIPE)
    cluster = farm.write_cluster(tmp_path / "cluster.json")
    out_dir = tmp_path / "out"
    deadlines = ["--run-timeout", "240", "--setup-timeout", "30"]
    code = main(
        [
            "launch",
            "-c",
            str(cluster),
            "-r",
            str(recipe),
            "--nproc-per-node",
            "2",
            "-o",
            str(out_dir),
            *deadlines,
        ]
    )
    captured = capsys.readouterr()
    assert code == ExitCode.OK, captured.err
    (run_dir,) = (p.parent for p in out_dir.glob("LAUNCH-E2E/training/*/manifest.json"))
    launch_record = json.loads((run_dir / "launch.json").read_text())
    assert run_dir.name == launch_record["run_id"]  # the engine named it after AORTA_RUN_ID
    assert list(run_dir.rglob("matrix.md")) == [
        run_dir / "matrix.md"
    ]  # one run directory, one matrix
    trials = [json.loads(p.read_text()) for p in run_dir.glob("cells/*/trial_*.json")]
    assert len(trials) == 2 and {t["world_size"] for t in trials} == {4}
    assert {t["status"] for t in trials} == {"ok"}
    assert sorted(r["rank"] for r in trials[0]["ranks"]) == [0, 1, 2, 3]
    # every rank's profiler trace; the loopback nodes share one disk, so node 1's ranks wrote
    # theirs into the head's run directory (on separate disks they are pulled from node 1)
    traces = {p.name.split(".")[0] for p in run_dir.glob("cells/profiled/trial_0000/trace/*")}
    assert traces == {"rank0", "rank1", "rank2", "rank3"}
    assert "shares the head's file system" in launch_record["nodes"]["node1"]["collected"]
    assert (run_dir / "combined_traces/node_1/launch.log").is_file()
    assert launch_record["status"] == "complete"
    assert wait_gone(f"AORTA_RUN_ID={launch_record['run_id']}", timeout=0.0) == []


HANG_RECIPE = """\
schema_version: 1
ticket: LAUNCH-HANG
workload: tests.hang_faults:HangFault
timeout_per_trial: 300
hang_after: 2
workload_config: {fault: sleep, rank: 1, at: 2, collectives: 3}
cells:
  - {name: sleepy, mitigations: [none]}
"""


@needs_sshd
@needs_venv
@pytest.mark.slow
def test_a_hang_across_two_nodes_names_the_rank_and_its_node(
    farm: SshdFarm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 1, node1's only process, sleeps before its 2nd all_reduce; rank 0 on node0 waits.
    Each node's engine takes its own rank's evidence; it reaches the head's record through the
    engines' store, not a shared disk."""
    recipe = tmp_path / "hang.yaml"
    recipe.write_text(HANG_RECIPE)
    cluster = farm.write_cluster(tmp_path / "cluster.json")
    out_dir = tmp_path / "out"
    args = ["-c", str(cluster), "-r", str(recipe), "-o", str(out_dir), "--run-timeout", "240"]
    code = main(["launch", *args, "--setup-timeout", "30"])
    assert code == ExitCode.OK, capsys.readouterr().err
    (rec_path,) = out_dir.glob("LAUNCH-HANG/*/*/cells/sleepy/trial_0000.json")
    rec = json.loads(rec_path.read_text())
    f = rec["forensics"]
    assert (f["culprit_ranks"], f["op"], f["seq"], f["kind"]) == ([1], "all_reduce", 2, "missing")
    hosts = {e["rank"]: e["host"] for e in f["evidence"]}
    assert set(hosts) == {0, 1} and f["culprit_hosts"] == [hosts[1]]
    assert f["frames"][0]["where"].endswith("in _stall_in_python")
    md = (rec_path.parents[2] / "matrix.md").read_text()
    assert "rank 1 (node " in md and "never reached all_reduce #2" in md
