"""The one lifecycle every launch backend goes through (aorta/launch/backend.py): the phases'
order whatever fails, and what is recorded once for every backend — the run's secrets, the
timings, launch.json. The backend here is a plain in-memory one: the SSH, container and Slurm
backends run the same ``drive`` against real sshd, Docker and Slurm in their own test files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from aorta.launch import LaunchFailed, LaunchResult, Node, NodeOutcome
from aorta.launch.backend import drive
from aorta.store.gather import node_folder, staging_dir
from aorta.store.redact import Redactor

SECRET = "hunter2-lifecycle-7c1d"


class Recorder:
    """A backend of two nodes that does nothing but note each phase; ``fail`` names the phase
    that raises (``setup_false``: setup reports a node not ready)."""

    def __init__(self, output: Path, fail: str = "") -> None:
        self.staging, self.fail, self.calls = staging_dir(output, "r1"), fail, list[str]()
        nodes = [Node(0, "a", env_vars={"HF_TOKEN": SECRET}), Node(1, "b")]
        self.result = LaunchResult("r1", {n.name: NodeOutcome(n) for n in nodes})
        for n in nodes:
            node_folder(self.staging, n.rank).mkdir(parents=True)
        self.clock = 0.0

    def now(self) -> float:
        self.clock += 1.0
        return self.clock

    def _phase(self, name: str) -> None:
        self.calls.append(name)
        if self.fail == name:
            raise KeyboardInterrupt if name == "wait" else RuntimeError(f"{name} broke")

    def setup(self) -> bool:
        self._phase("setup")
        return self.fail != "setup_false"

    def start(self) -> None:
        self._phase("start")
        for k, out in enumerate(self.result.outcomes.values()):
            out.started_s = 2.0 + k

    def wait(self) -> None:
        self._phase("wait")
        for out in self.result.outcomes.values():
            out.status = "ok"

    def teardown(self) -> None:
        self._phase("teardown")

    def gather(self) -> None:
        self._phase("gather")

    def close(self) -> None:
        self.calls.append("close")

    def environments(self) -> list[Mapping[str, str]]:
        return [out.node.env_vars for out in self.result.outcomes.values()]

    def record(self) -> dict[str, Any]:
        return {"backend": "recorder"}


def test_every_phase_in_order_and_one_record(tmp_path: Path) -> None:
    backend, events = Recorder(tmp_path), list[str]()
    result = drive(backend, emit=events.append)
    assert backend.calls == ["setup", "start", "wait", "teardown", "gather", "close"]
    assert result.status == "complete" and events == [f"complete: results in {result.run_dir}"]
    record = json.loads((result.run_dir / "launch.json").read_text())
    assert record["backend"] == "recorder" and record["status"] == "complete"
    # derived once, from the outcomes: the last node's start
    assert record["timings"]["all_started"] == 3.0
    assert set(record["timings"]) == {"setup", "all_started", "run", "teardown", "collect", "total"}
    assert Redactor.of_run(result.run_dir, env={}).text(f"x {SECRET}") == "x <redacted>"
    assert SECRET not in (result.run_dir / "launch.json").read_text()


def test_a_node_not_ready_skips_the_run_yet_tears_down_and_records(tmp_path: Path) -> None:
    backend = Recorder(tmp_path, fail="setup_false")
    with pytest.raises(LaunchFailed) as failed:
        drive(backend, emit=lambda text: None)
    assert backend.calls == ["setup", "teardown", "gather", "close"]
    result = failed.value.result
    assert result.status == "failed" and "run" not in result.timings
    assert "all_started" not in result.timings and (result.run_dir / "launch.json").is_file()
    assert Redactor.of_run(result.run_dir, env={}).text(SECRET) == "<redacted>"


def test_ctrl_c_while_waiting_still_tears_down_gathers_and_records(tmp_path: Path) -> None:
    backend = Recorder(tmp_path, fail="wait")
    with pytest.raises(KeyboardInterrupt):
        drive(backend, emit=lambda text: None)
    assert backend.calls == ["setup", "start", "wait", "teardown", "gather", "close"]
    (record_file,) = tmp_path.glob("**/launch.json")
    assert json.loads(record_file.read_text())["status"] == "interrupted"


def test_a_failing_teardown_still_names_the_run_and_records(tmp_path: Path) -> None:
    backend = Recorder(tmp_path, fail="teardown")
    with pytest.raises(RuntimeError, match="teardown broke"):
        drive(backend, emit=lambda text: None)
    assert backend.calls == ["setup", "start", "wait", "teardown", "close"]
    (record_file,) = tmp_path.glob("**/launch.json")
    assert json.loads(record_file.read_text())["status"] == "complete"
