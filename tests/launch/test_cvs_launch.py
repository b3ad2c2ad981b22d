"""``aorta launch --cvs-config``: a CVS Aorta config runs unchanged on real loopback sshd nodes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from aorta.cli import main
from aorta.errors import ExitCode
from aorta.run.ports import rendezvous_port
from tests.launch_fixtures import (  # noqa: F401 - fixtures
    farm_fixture,
    needs_sshd,
    needs_venv,
    ssh_key_fixture,
)
from tests.sshd import SshdFarm

#: Records what each node's trial was started with, where the test can read it (loopback nodes
#: share this file system).
TRAIN_PY = """\
import json, os, sys
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seen")
os.makedirs(out, exist_ok=True)
rank = os.environ["AORTA_NODE_RANK"]
keep = ("NCCL_SOCKET_IFNAME", "AORTA_NODE_RANK")
with open(os.path.join(out, f"node_{rank}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in keep}}, f)
"""


def _cvs_config(tmp_path: Path, port: int) -> Path:
    """A CVS aorta_benchmark.yaml as CVS users write it (its keys, its layout)."""
    (tmp_path / "train.py").write_text(TRAIN_PY)
    (tmp_path / "config").mkdir()
    (tmp_path / "config/distributed.yaml").write_text("training: {max_steps: 1}\n")
    path = tmp_path / "aorta_benchmark.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            aorta_path: {tmp_path}
            base_config: config/distributed.yaml
            gpus_per_node: 1
            timeout_seconds: 300
            skip_rccl_build: true
            training_overrides:
              training.max_steps: 2
              profiling.enabled: false
            multi_node:
              master_launch_mode: auto
              train_script: train.py
              extra_torchrun_args: ["--master_port={port}"]
              extra_train_args: ["--seed", "7"]
              extra_env: {{NCCL_SOCKET_IFNAME: lo}}
              collect_traces: true
            """
        )
    )
    return path


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_field_that_does_not_map_stops_the_launch_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "hosts"
    cluster.write_text("worker-1 slots=2\n")
    config = tmp_path / "aorta_benchmark.yaml"
    config.write_text("multi_node:\n  extra_torchrun_args: [--nproc_per_node=2, --standalone]\n")
    code = main(["launch", "-c", str(cluster), "--cvs-config", str(config), "--dry-run"])
    assert code == ExitCode.USAGE
    assert _error_line(capsys.readouterr().err) == (
        f"Error: {config}: multi_node.extra_torchrun_args[1]: '--standalone' is set by aorta "
        "from the cluster file (it honours --nproc_per_node, --master_addr, --master_port)"
    )
    config.write_text("multi_node: {train_script: t.py}\n")
    code = main(["launch", "-c", str(cluster), "--cvs-config", str(config), "--", "python", "x"])
    assert code == ExitCode.USAGE
    assert "drop the one after '--'" in _error_line(capsys.readouterr().err)


@pytest.mark.slow
@needs_sshd
@needs_venv
def test_dry_run_prints_the_command_each_node_would_run(
    farm: SshdFarm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = farm.write_cluster(tmp_path / "cvs_cluster.json")
    port = rendezvous_port()
    config = _cvs_config(tmp_path, port)
    code = main(["launch", "--cluster", str(cluster), "--cvs-config", str(config), "--dry-run"])
    captured = capsys.readouterr()
    out = captured.out
    assert code == ExitCode.OK, captured
    py = farm.cluster_dict()["python"]
    train = (
        f"-- {py} {tmp_path}/train.py --config {tmp_path}/config/distributed.yaml --seed 7 "
        "--override training.max_steps=2 profiling.enabled=False"
    )
    commands = [line.strip() for line in out.splitlines() if line.strip().startswith("command:")]
    assert len(commands) == 2, out
    for rank, command in enumerate(commands):  # the CVS command last, ONE --override group
        assert command.endswith(train) and command.count("--override") == 1, command
        torchrun = (
            f"--nproc-per-node=1 --node-rank={rank} --master-addr=127.0.0.2 --master-port={port}"
        )
        assert torchrun in command and "NCCL_SOCKET_IFNAME=lo" in command
    assert "skip_rccl_build: not read by aorta launch (ignored)" in captured.err


@pytest.mark.slow
@needs_sshd
@needs_venv
def test_a_cvs_config_runs_unchanged_on_two_nodes(
    farm: SshdFarm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = farm.write_cluster(tmp_path / "cvs_cluster.json")
    config = _cvs_config(tmp_path, rendezvous_port())
    out_dir = tmp_path / "out"
    args = ["launch", "-c", str(cluster), "--cvs-config", str(config), "-o", str(out_dir), "-q"]
    code = main([*args, "--override", "training.max_steps=3"])  # the command line wins
    assert code == ExitCode.OK, capsys.readouterr()
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"seen/node_{rank}.json").read_text())
        assert seen["argv"] == [
            "--config",
            f"{tmp_path}/config/distributed.yaml",
            "--seed",
            "7",
            "--override",
            "training.max_steps=3",
            "profiling.enabled=False",
        ]
        assert seen["env"] == {"NCCL_SOCKET_IFNAME": "lo", "AORTA_NODE_RANK": str(rank)}
    (record,) = out_dir.glob("cvs/command/*/launch.json")
    launch = json.loads(record.read_text())
    assert {n["status"] for n in launch["nodes"].values()} == {"ok"}, launch
