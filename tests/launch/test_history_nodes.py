"""`aorta history` over runs made by `aorta launch` on two loopback sshd nodes: a variable set
on one node only between two launches shows as that node's environment change, and the runs
form one series."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import aorta
from aorta.cli import main
from aorta.errors import ExitCode
from aorta.store.history import run_snapshots
from tests.launch_fixtures import (  # noqa: F401 - fixtures
    farm_fixture,
    needs_sshd,
    needs_venv,
    ssh_key_fixture,
)
from tests.sshd import SshdFarm

pytestmark = [needs_sshd, needs_venv, pytest.mark.slow]

RECIPE = """\
schema_version: 1
mode: probe
ticket: HISTORY-NODES
trials: 2
mitigation_axis: [none]
diagnostic_axis: [none]
"""


def _launch(farm: SshdFarm, tmp_path: Path, out: Path, node1_env: dict[str, str]) -> None:
    data = farm.cluster_dict()
    second = list(data["node_dict"])[1]
    data["node_dict"][second]["env_vars"] = node1_env
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(data))
    recipe = tmp_path / "probe.yaml"
    recipe.write_text(RECIPE)
    args = ["-c", str(cluster), "-r", str(recipe), "-o", str(out), "--run-timeout", "240"]
    assert main(["launch", *args, "--setup-timeout", "60", "--", "true"]) == ExitCode.OK


def test_per_node_environment_changes_between_launches(
    farm: SshdFarm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "store"
    _launch(farm, tmp_path, out, {"NCCL_ALGO": "Tree"})
    _launch(farm, tmp_path, out, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"})
    history = aorta.history([out])
    first, second = history.runs()
    assert first["series"] == second["series"] == "HISTORY-NODES/command"
    assert sorted(run_snapshots(second["run"])) == ["node_0", "node_1"]
    changes = second["environment_changes"]
    assert changes["nodes"] == {
        "node_1": {"env.NCCL_ALGO": ["Tree", "Ring"], "env.NCCL_PROTO": [None, "LL"]}
    }
    assert not any(k.startswith("env.NCCL") for k in changes if k != "nodes")
    capsys.readouterr()
    assert main(["history", str(out), "--json"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"][1]["environment_changes"]["nodes"]["node_1"]["env.NCCL_PROTO"] == [
        None,
        "LL",
    ]
    assert len(doc["series"]) == 1 and doc["change_points"] == []
