"""Launches inside containers on a real Docker daemon (tests/docker_daemon.py), as CVS does.

Two loopback sshd "nodes" (tests/sshd.py) share the session's one ``dockerd``; each launch names
its containers per node (``<prefix>-<rank>``). The image is Debian bookworm with ``python3``
only; torch and aorta's dependencies come from the repo's ``.venv`` mounted read-only (its
``site-packages`` on the container's ``PYTHONPATH``); aorta itself is what the launch ships.
Processes in containers are visible in this machine's ``/proc``, so "nothing left" is checked
the same way as for native launches, and ``docker ps -a`` says every container is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from aorta.cli import main
from aorta.errors import ExitCode
from aorta.launch import Cluster, LaunchSpec, dry_run, launch
from aorta.report.launch_text import dry_run_lines
from aorta.run.ports import LOWEST, ephemeral_range
from tests.docker_daemon import (
    IMAGE,
    DockerDaemon,
    docker_fixture,  # noqa: F401 - fixture
    venv_site_packages,
)
from tests.launch_fixtures import (  # noqa: F401 - fixtures
    FAST,
    assert_nothing_left,
    farm_fixture,
    needs_sshd,
    needs_venv,
    run_launch,
    ssh_key_fixture,
    tiny_race,
    worker,
)
from tests.sshd import REPO, SshdFarm, processes_with_env, wait_gone

pytestmark = [needs_sshd, needs_venv, pytest.mark.slow]

#: Container creation can copy the image's files (vfs): slower setup than a native launch. The
#: run's is a safety net: two torchrun nodes in containers took over 120 s in the first
#: minutes of `make test` on 2 cores.
SLOW = FAST.__class__(**{**FAST.__dict__, "setup": 180.0, "run": 300.0, "teardown": 60.0})

RACE = tiny_race("RACE-CONTAINER")


@pytest.fixture(name="prefix")
def prefix_fixture(docker: DockerDaemon) -> Any:
    """This test's container names; whatever it leaves is removed (and fails the test)."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    yield prefix
    left = docker.containers(prefix)
    if left:
        docker.docker("rm", "-f", *left, check=False)


def block(docker: DockerDaemon, prefix: str, **extra: Any) -> dict[str, Any]:
    """A ``container:`` block for the test image on the session's daemon."""
    return {
        "image": IMAGE,
        "name": f"{prefix}-{{rank}}",
        "runtime": shlex.join(docker.cli),
        "mounts": [f"{REPO}:{REPO}:ro"],  # the venv (torch) and tests.launch_worker
        "env": {"PYTHONPATH": venv_site_packages(), "SECRET_TOKEN": "hunter2"},
        **extra,
    }


def container_cluster(farm: SshdFarm, docker: DockerDaemon, prefix: str, **extra: Any) -> Cluster:
    data = farm.cluster_dict(container=block(docker, prefix, **extra))
    data["env_vars"]["PYTHONPATH"] = f"{REPO}:{venv_site_packages()}"
    return Cluster.from_dict(data)


def in_container(*args: str) -> tuple[str, ...]:
    """argv of ``tests/launch_worker.py`` once per node with the image's python3."""
    return ("python3", "-m", "tests.launch_worker", *args)


def test_two_nodes_run_torchrun_in_their_containers_and_leave_none(
    farm: SshdFarm, docker: DockerDaemon, prefix: str, tmp_path: Path
) -> None:
    cluster = container_cluster(farm, docker, prefix)
    spec = LaunchSpec(argv=worker("allreduce", "a b"), nproc_per_node=2)
    result, lines = run_launch(cluster, spec, tmp_path / "out", deadlines=SLOW)

    assert result.status == "complete", result.summary()
    # Drawn in the head's container (host network), below the range connections take ports from.
    assert LOWEST <= (result.master_port or 0) < ephemeral_range()[0]
    ranks = [
        json.loads(p.read_text())
        for k in (0, 1)
        for p in (result.run_dir / f"combined_traces/node_{k}").glob("node*_rank*.json")
    ]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3] and {r["sum"] for r in ranks} == {10.0}
    for rank in (0, 1):
        snap = json.loads(
            (result.run_dir / f"combined_traces/node_{rank}/host_env.json").read_text()
        )
        assert snap["container"]["image"] == IMAGE and snap["container"]["image_id"]
        assert snap["executable"] == "/usr/bin/python3"  # Debian's, in the image
    record = json.loads((result.run_dir / "launch.json").read_text())
    assert "removed" in record["nodes"]["node1"]["teardown"]
    assert f"exec -i -w {farm.nodes[1].workdir} {prefix}-1 sh -c" in record["commands"]["node1"]
    assert "hunter2" not in (result.run_dir / "launch.json").read_text()
    assert any(line.startswith("[node1 127.0.0.3] ") for line in lines)
    assert not [k for k in result.skew if k.startswith("container.")]  # one image everywhere
    assert docker.containers(prefix) == []
    assert_nothing_left(result)


def test_a_failing_node_stops_the_other_and_every_container_is_removed(
    farm: SshdFarm, docker: DockerDaemon, prefix: str, tmp_path: Path
) -> None:
    cluster = container_cluster(farm, docker, prefix)
    result, _ = run_launch(
        cluster, LaunchSpec(argv=worker("fail-on", "1")), tmp_path / "out", deadlines=SLOW
    )

    assert result.status == "failed"
    node0, node1 = result.outcomes["node0"], result.outcomes["node1"]
    assert (node1.status, node1.exit_code) == ("failed", 1)
    assert node0.status == "stopped" and "node1 127.0.0.3 failed" in node0.message
    assert (
        "failing on purpose" in (result.run_dir / "combined_traces/node_1/launch.log").read_text()
    )
    assert docker.containers(prefix) == []
    assert_nothing_left(result)


def test_a_node_past_the_run_deadline_times_out_and_its_container_goes(
    farm: SshdFarm, docker: DockerDaemon, prefix: str, tmp_path: Path
) -> None:
    cluster = container_cluster(farm, docker, prefix)
    # node 0's `docker exec` must end within the deadline under CI's load, hence not less
    deadlines = SLOW.__class__(**{**SLOW.__dict__, "run": 8.0})
    spec = LaunchSpec(argv=in_container("hang-on", "1"), torchrun=False)
    result, _ = run_launch(cluster, spec, tmp_path / "out", deadlines=deadlines)

    assert result.status == "timeout"
    assert result.outcomes["node1"].status == "timeout"
    assert result.outcomes["node0"].status == "ok"
    assert docker.containers(prefix) == []
    assert_nothing_left(result)


def test_a_stale_container_of_a_killed_run_is_replaced(
    farm: SshdFarm, docker: DockerDaemon, prefix: str, tmp_path: Path
) -> None:
    stale = docker.docker("run", "-d", "--name", f"{prefix}-1", IMAGE, "tail", "-f", "/dev/null")
    cluster = container_cluster(farm, docker, prefix)
    spec = LaunchSpec(argv=in_container("argv", "x"), torchrun=False)
    result, _ = run_launch(cluster, spec, tmp_path / "out", deadlines=SLOW)

    assert result.status == "complete", result.summary()
    assert "replaced a stale container" in result.outcomes["node1"].teardown
    assert "replaced" not in result.outcomes["node0"].teardown
    assert stale not in docker.docker("ps", "-aq", "--no-trunc")
    assert docker.containers(prefix) == []


def test_a_persistent_container_is_started_once_then_reused_and_kept(
    farm: SshdFarm, docker: DockerDaemon, prefix: str, tmp_path: Path
) -> None:
    cluster = container_cluster(farm, docker, prefix, lifetime="persistent")
    spec = LaunchSpec(argv=in_container("argv", "x"), torchrun=False)
    first, _ = run_launch(cluster, spec, tmp_path / "a", deadlines=SLOW)
    ids = docker.docker("ps", "-q", "--no-trunc", "--filter", f"name={prefix}-").split()
    second, _ = run_launch(cluster, spec, tmp_path / "b", deadlines=SLOW)

    assert (first.status, second.status) == ("complete", "complete"), second.summary()
    assert len(ids) == 2
    assert sorted(
        docker.docker("ps", "-q", "--no-trunc", "--filter", f"name={prefix}-").split()
    ) == sorted(ids)
    assert "kept (persistent)" in first.outcomes["node0"].teardown
    assert "reused the running container" in second.outcomes["node0"].teardown
    assert "reused" not in first.outcomes["node0"].teardown
    for result in (first, second):
        assert_nothing_left(result)  # the run's processes stop; the container stays


def test_no_launch_refuses_when_the_container_is_missing(
    farm: SshdFarm, docker: DockerDaemon, prefix: str, tmp_path: Path
) -> None:
    docker.docker(
        "run",
        "-d",
        "--name",
        f"{prefix}-0",
        "-v",
        f"{farm.nodes[0].workdir}:{farm.nodes[0].workdir}",
        "-v",
        f"{REPO}:{REPO}:ro",
        "-e",
        f"PYTHONPATH={venv_site_packages()}",
        IMAGE,
        "tail",
        "-f",
        "/dev/null",
    )
    cluster = container_cluster(farm, docker, prefix, lifetime="no_launch")
    spec = LaunchSpec(argv=in_container("argv", "x"), torchrun=False)
    result, _ = run_launch(cluster, spec, tmp_path / "out", deadlines=SLOW)

    assert result.status == "failed"
    assert result.outcomes["node1"].status == "setup_failed"
    assert f"container {prefix}-1 does not exist" in result.outcomes["node1"].message
    assert "lifetime no_launch" in result.outcomes["node1"].message
    assert docker.containers(prefix) == [f"{prefix}-0"]  # the user's own stays
    assert result.outcomes["node0"].status == "not_started"


def test_a_failed_docker_run_says_dockers_own_cause(
    farm: SshdFarm, docker: DockerDaemon, prefix: str, tmp_path: Path
) -> None:
    # Before: "docker run aorta-test failed: Run 'docker run --help' for more information" —
    # docker's own first line, the cause, was dropped (issue 39, item 3).
    extra = block(docker, prefix, devices=["/dev/aorta-no-such-device"])
    cluster = Cluster.from_dict(farm.cluster_dict(nodes=farm.nodes[:1], container=extra))
    spec = LaunchSpec(argv=in_container("argv", "x"), torchrun=False)
    result, _ = run_launch(cluster, spec, tmp_path / "out", deadlines=SLOW)

    node0 = result.outcomes["node0"]
    assert node0.status == "setup_failed", node0.message
    assert "Error response from daemon" in node0.message, node0.message
    assert "/dev/aorta-no-such-device" in node0.message and "--help" not in node0.message
    assert docker.containers(prefix) == []


def test_files_in_the_run_folder_are_given_back_to_the_login_user(
    farm: SshdFarm, docker: DockerDaemon, prefix: str, tmp_path: Path
) -> None:
    run_id = f"2026-01-01T00-00-00-{prefix}"
    for node in farm.nodes:  # the container's user 4321 may write the run's folder
        folder = node.workdir / ".aorta-launch" / run_id
        folder.mkdir(parents=True)
        folder.chmod(0o777)
    cluster = container_cluster(farm, docker, prefix, user="4321")
    spec = LaunchSpec(argv=in_container("argv", "x"), torchrun=False)
    result, _ = run_launch(cluster, spec, tmp_path / "out", deadlines=SLOW, run_id=run_id)

    assert result.status == "complete", result.summary()
    for node in farm.nodes:
        folder = node.workdir / ".aorta-launch" / run_id
        written = list((folder / f"node_{node.index}" / "out").iterdir())
        assert written, "the worker wrote nothing"
        owners = {p.stat().st_uid for p in folder.rglob("*")}
        assert owners == {os.getuid()}, f"not given back: {owners}"


def test_dry_run_checks_docker_and_the_image_and_starts_no_container(
    farm: SshdFarm, docker: DockerDaemon, prefix: str
) -> None:
    cluster = container_cluster(farm, docker, prefix)
    report = dry_run(cluster, LaunchSpec(argv=worker("allreduce")), deadlines=SLOW)

    assert report.status == "complete", report.summary()
    text = report.commands["node1"].describe()
    assert f"run -d --name {prefix}-1 --network host --ipc host --user root" in text
    assert "--env-file" in text and "SECRET_TOKEN" in text and "hunter2" not in text
    assert report.outcomes["node0"].snapshot["container"]["docker"]
    printed = "\n".join(dry_run_lines(report))
    assert f"  container: {shlex.join(docker.cli)} rm -f {prefix}-0; " in printed
    assert "container env file keys: PYTHONPATH, SECRET_TOKEN" in printed
    assert docker.containers(prefix) == []

    missing = container_cluster(farm, docker, prefix, image="no-such-image")
    report = dry_run(missing, LaunchSpec(argv=worker("allreduce")), deadlines=SLOW)
    assert report.outcomes["node0"].status == "setup_failed"
    assert "image no-such-image is not on this node" in report.outcomes["node0"].message


def test_a_two_node_race_sweep_in_containers_through_the_cli(
    farm: SshdFarm,
    docker: DockerDaemon,
    prefix: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    recipe = tmp_path / "race.yaml"
    recipe.write_text(RACE)
    data = farm.cluster_dict(container=block(docker, prefix))
    data["env_vars"]["PYTHONPATH"] = venv_site_packages()  # aorta: only the shipped one
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(data))
    t = time.monotonic()
    code = main(
        [
            "launch",
            "-c",
            str(cluster),
            "-r",
            str(recipe),
            "-o",
            str(tmp_path / "out"),
            "--setup-timeout",
            "120",
            "--run-timeout",
            "300",
        ]
    )
    captured = capsys.readouterr()
    assert code == ExitCode.OK, captured.err[-3000:]
    (run_dir,) = (p.parent for p in (tmp_path / "out").glob("RACE-CONTAINER/race/*/manifest.json"))
    trials = [json.loads(p.read_text()) for p in run_dir.glob("cells/*/trial_*.json")]
    assert [t["status"] for t in trials] == ["ok"] and trials[0]["world_size"] == 2
    assert docker.containers(prefix) == []
    assert time.monotonic() - t < 300


def test_ctrl_c_during_setup_leaves_no_container(
    farm: SshdFarm, docker: DockerDaemon, prefix: str, tmp_path: Path
) -> None:
    cluster = container_cluster(farm, docker, prefix)
    spec = LaunchSpec(argv=in_container("hang-on", "all"), torchrun=False)
    seen: list[str] = []

    def interrupt_when_a_container_exists() -> None:
        deadline = time.monotonic() + 170  # a loaded machine can take minutes to set up
        while time.monotonic() < deadline:
            names = docker.containers(prefix)
            if names:  # setup is under way on at least one node
                seen.extend(names)
                os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does
                return
            time.sleep(0.02)

    threading.Thread(target=interrupt_when_a_container_exists, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        launch(
            cluster,
            spec,
            output=tmp_path / "out",
            deadlines=SLOW.__class__(**{**SLOW.__dict__, "setup": 160.0}),
        )

    assert seen, "no container was ever started"
    (record,) = (tmp_path / "out").glob("_launch_/*/launch.json")
    data = json.loads(record.read_text())
    assert data["status"] == "interrupted"
    teardown = {n: (v["status"], v.get("teardown")) for n, v in data["nodes"].items()}
    assert docker.containers(prefix) == [], teardown
    assert wait_gone(f"AORTA_RUN_ID={data['run_id']}", timeout=0.0) == []


def test_the_run_stops_in_its_containers_when_the_orchestrator_dies(
    farm: SshdFarm, docker: DockerDaemon, prefix: str, tmp_path: Path
) -> None:
    # A SIGKILLed launcher runs no teardown: the watchdog in each container sees `docker exec`
    # close its stdin (the SSH channel closed) and stops the run; the containers stay (see
    # docs/launch.md) until a launch with their name or `docker rm -f`.
    data = farm.cluster_dict(container=block(docker, prefix))
    data["env_vars"]["PYTHONPATH"] = f"{REPO}:{venv_site_packages()}"
    cluster_file = tmp_path / "cluster.json"
    cluster_file.write_text(json.dumps(data))
    run_id = f"2026-01-01T00-00-00-{prefix}"
    script = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from aorta.launch import Deadlines, LaunchSpec, launch, load_cluster\n"
        f"spec = LaunchSpec(argv={in_container('hang-on', 'all')!r}, torchrun=False)\n"
        f"launch(load_cluster({str(cluster_file)!r}), spec, output={str(tmp_path / 'out')!r},"
        f" run_id={run_id!r}, deadlines=Deadlines(setup=120))\n"
    )
    orchestrator = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def workers() -> list[int]:
        found = []
        for pid in processes_with_env(f"AORTA_RUN_ID={run_id}"):
            with contextlib.suppress(OSError):
                if b"launch_worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
        return found

    try:
        deadline = time.monotonic() + 150
        while len(workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers()) == 2  # one worker per node, in its container
    finally:
        orchestrator.kill()
        orchestrator.wait(timeout=10)
    assert wait_gone(f"AORTA_RUN_ID={run_id}", timeout=30.0) == []
    assert docker.containers(prefix) == [f"{prefix}-0", f"{prefix}-1"]  # left: no teardown ran


def test_cli_container_flag_sets_the_image_and_dry_run_prints_the_docker_lines(
    farm: SshdFarm,
    docker: DockerDaemon,
    prefix: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    recipe = tmp_path / "race.yaml"
    recipe.write_text(RACE)
    data = farm.cluster_dict(container=block(docker, prefix, image="not-this-one"))
    data["env_vars"]["PYTHONPATH"] = venv_site_packages()
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(data))
    args = ["launch", "-c", str(cluster), "-r", str(recipe), "--dry-run", "--setup-timeout", "90"]

    code = main([*args, "--container", IMAGE])
    out = capsys.readouterr().out
    assert code == ExitCode.OK, out
    assert (
        f"--env-file {farm.nodes[1].workdir}/.aorta-launch/" in out and " aorta-test tail -f" in out
    )
    assert out.count("  container: ") == 2 and "hunter2" not in out
    assert docker.containers(prefix) == []

    code = main(args)  # the file's image, which no node has
    err = capsys.readouterr().err
    assert code == ExitCode.ERROR and "image not-this-one is not on this node" in err
