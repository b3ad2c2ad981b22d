"""pytest fixtures for the launcher tests: a throwaway key and real sshd nodes (see tests/sshd.py).

Import them into a test module under their function names (``from tests.launch_fixtures import
farm_fixture``); tests ask for them by fixture name (``farm``).
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aorta.launch import Cluster, Deadlines, LaunchFailed, LaunchResult, LaunchSpec, Node, launch
from aorta.launch.ssh import ExecResult, RemoteTimeout
from aorta.store.rundir import COMBINED_TRACES
from tests.sshd import VENV_PYTHON, SshdFarm, make_key, sshd_available, wait_gone


def tiny_race(ticket: str) -> str:
    """A recipe of the race workload at its smallest, under ``ticket``: the launch tests are about
    the launch (torchrun or srun per node, containers, one run directory, clean-up), not the
    traffic; the upstream race_smoke.yaml moves 64x the data (~12 CPU-s more per 4-rank run).
    tests/run/test_distributed.py runs the upstream files as they are."""
    return f"""\
schema_version: 1
ticket: {ticket}
workload: race
trials: 1
steps: 3
workload_config: {{mode: fsdp, model_dim: 32, num_layers: 1, verify_iterations: 3,
                  warmup_iterations: 0, simulate_compute: true, dtype: float32}}
cells:
  - {{name: smoke, mitigations: [none]}}
"""


needs_sshd = pytest.mark.skipif(
    not sshd_available(),
    reason="needs /usr/sbin/sshd and ssh-keygen (Debian openssh-server; .ci/run installs it)",
)
needs_venv = pytest.mark.skipif(
    not VENV_PYTHON.is_file(), reason="the nodes run the repo's .venv/bin/python (make dev)"
)

#: Deadlines for tests that do not test them: a test that hangs fails in minutes, not hours, and
#: one on a loaded 2-core machine (~20 runnable processes early in `make test`) still passes.
FAST = Deadlines(setup=60.0, run=180.0, collect=60.0, kill_grace=2.0, teardown=30.0)
PY = str(VENV_PYTHON)


@pytest.fixture(scope="session", name="ssh_key")
def ssh_key_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_key(tmp_path_factory.mktemp("key"))


@pytest.fixture(scope="session", name="farm")
def farm_fixture(tmp_path_factory: pytest.TempPathFactory, ssh_key: Path) -> Iterator[SshdFarm]:
    """Two loopback nodes shared by the tests that keep them up."""
    with SshdFarm(tmp_path_factory.mktemp("farm"), ssh_key) as f:
        f.start(2)
        yield f


@pytest.fixture(name="cluster")
def cluster_fixture(farm: SshdFarm) -> Cluster:
    return Cluster.from_dict(farm.cluster_dict())


def worker(*args: str) -> tuple[str, ...]:
    """argv of ``tests/launch_worker.py`` under torchrun."""
    return ("-m", "tests.launch_worker", *args)


def plain(*args: str) -> tuple[str, ...]:
    """argv running ``tests/launch_worker.py`` once per node, without torchrun."""
    return (PY, "-m", "tests.launch_worker", *args)


def run_launch(
    cluster: Cluster, spec: LaunchSpec, output: Path, **kwargs: Any
) -> tuple[LaunchResult, list[str]]:
    """Launch; return the result whether it failed or not, and every streamed line."""
    lines: list[str] = []
    kwargs.setdefault("deadlines", FAST)
    try:
        result = launch(
            cluster,
            spec,
            output=output,
            on_line=lambda n, t: lines.append(f"[{n.label}] {t}"),
            **kwargs,
        )
    except LaunchFailed as exc:
        result = exc.result
    return result, lines


def assert_nothing_left(result: LaunchResult) -> None:
    """No process of this run survives the launch (checked at once: teardown waited)."""
    left = wait_gone(f"AORTA_RUN_ID={result.run_id}", timeout=0.0)
    assert left == [], f"processes left behind by {result.run_id}: {left}"


class LocalSession:
    """A stand-in for :class:`aorta.launch.SshSession` for tests of the fan-out logic only: the
    same commands, run by a local ``sh -c`` (what sshd does with them), a copy for a pull.
    Transport behaviour is tested against real sshd (tests/test_launch_ssh.py)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def exec(
        self,
        command: str,
        *,
        timeout: float,
        stdin: bytes | None = None,
        on_line: Callable[[str], None] | None = None,
        keep_stdin_open: bool = False,
        fresh: bool = False,
    ) -> ExecResult:
        proc = subprocess.Popen(
            ["sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        tail: collections.deque[str] = collections.deque(maxlen=40)
        try:
            proc.stdin.write(stdin or b"")
            proc.stdin.flush()
            if not keep_stdin_open:
                proc.stdin.close()
            for raw in proc.stdout:
                tail.append(line := raw.decode(errors="replace").rstrip("\r\n"))
                if on_line is not None:
                    on_line(line)
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
            proc.stdin.close()
            proc.stdout.close()
        if code == -9:
            raise RemoteTimeout(f"{self.node.label}: still running after {timeout:g} s")
        return ExecResult(code, "\n".join(tail))

    def pull(self, remote_dir: str, local_dir: Path, *, timeout: float) -> str:
        shutil.copytree(
            remote_dir,
            local_dir,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(COMBINED_TRACES),
        )
        return "copy"

    def close(self) -> None:
        pass


def local_sessions(cluster: Cluster) -> dict[str, LocalSession]:
    """The session factory ``launch(..., sessions=local_sessions)`` takes."""
    return {n.name: LocalSession(n) for n in cluster.nodes}
