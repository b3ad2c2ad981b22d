"""The launch's parts without SSH: command lines run by a real local shell, the node helper's
setup and kill run locally, the fan-out driven through a local session, and the pure pieces."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from aorta.errors import UsageError
from aorta.fanout import TimedOut, run_parallel
from aorta.launch import (
    Cluster,
    Deadlines,
    LaunchFailed,
    LaunchOptions,
    LaunchSpec,
    Node,
    NodePath,
    dry_run,
    env_diff,
    launch,
    run,
    run_command,
)
from aorta.launch.launcher import last_words
from aorta.launch.node_command import (
    ENV_FILE,
    STARTED_MARKER,
    env_script,
    kill_command,
    setup_command,
)
from aorta.launch.ssh import ExecResult
from aorta.recipe.launch_spec import launch_job, sweep_spec
from aorta.report.launch_text import format_skew, version_rows
from aorta.store.gather import finalize, is_artifact, node_folder, staging_dir
from aorta.text import cause_lines
from tests.launch_fixtures import LocalSession, local_sessions
from tests.sshd import REPO, VENV_PYTHON, processes_with_env, wait_for_processes, wait_gone

PY = str(VENV_PYTHON) if VENV_PYTHON.is_file() else shutil.which("python3") or "python3"
SHELLS = [s for s in ("sh", "bash") if shutil.which(s)]
ECHO = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': {k: os.environ.get(k) for k in ('TEST_V', 'RANK', 'MASTER_ADDR', 'AORTA_NODE_RANK', 'AORTA_RUN_ID')}, 'cwd': os.getcwd(), 'pid': os.getpid(), 'sid': os.getsid(0)}), flush=True)"
TRICKY = [
    "a b",
    "it's",
    'say "hi"',
    "$HOME",
    "`id`",
    "; exit 3",
    "*",
    "back\\slash",
    "",
    "new\nline",
    "ünï €",
]


def _cluster(tmp_path: Path, n: int = 2, **extra: object) -> Cluster:
    nodes = {}
    for i in range(n):
        (tmp_path / f"node{i}").mkdir(exist_ok=True)
        nodes[f"127.0.0.{i + 2}"] = {"workdir": str(tmp_path / f"node{i}")}
    data = {"python": PY, "env_vars": {"PYTHONPATH": str(REPO)}, "node_dict": nodes, **extra}
    return Cluster.from_dict(data)


def _sh(
    shell: str, line: str, *, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # What sshd does with a remote command: the login shell runs it with -c.
    return subprocess.run(
        [shell, "-c", line],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize("shell", SHELLS)
def test_the_remote_line_delivers_argv_env_and_cwd_intact(tmp_path: Path, shell: str) -> None:
    cluster = _cluster(tmp_path, env_vars={"TEST_V": 'it\'s "q" $HOME `x` ;|&'})
    node = cluster.nodes[1]
    ndir = str(tmp_path / "nd")
    os.makedirs(ndir)
    spec = LaunchSpec(argv=(PY, "-c", ECHO, *TRICKY), torchrun=False, overrides=("a=1", "b=c d"))
    cmd = run_command(
        cluster, node, spec, run_id="r-1", node_dir=ndir, master_addr="127.0.0.2", master_port=1
    )
    Path(ndir, ENV_FILE).write_bytes(env_script(cmd.env))  # what setup writes over SSH
    login_env = {
        **os.environ,
        "RANK": "7",
        "MASTER_ADDR": "stale.example",
    }  # a stale profile export
    proc = _sh(shell, cmd.remote, env=login_env)

    assert proc.returncode == 0, proc.stderr
    marker, payload = proc.stdout.splitlines()[:2]
    seen = json.loads(payload)
    assert seen["argv"] == [*TRICKY, "--override", "a=1", "b=c d"]
    assert seen["env"] == {
        "TEST_V": 'it\'s "q" $HOME `x` ;|&',
        "RANK": None,
        "MASTER_ADDR": None,
        "AORTA_NODE_RANK": "1",
        "AORTA_RUN_ID": "r-1",
    }
    assert seen["cwd"] == node.workdir
    pid = int(Path(ndir, "pid").read_text())
    assert marker == f"{STARTED_MARKER} {pid}" and seen["pid"] == pid == seen["sid"]  # own session


def test_exit_codes_pass_through_and_cancel_stops_a_late_start(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    ndir = tmp_path / "nd"
    ndir.mkdir()
    spec = LaunchSpec(argv=("sh", "-c", "exit 7"), torchrun=False)
    cmd = run_command(
        cluster, cluster.head, spec, run_id="r", node_dir=str(ndir), master_addr="h", master_port=1
    )
    (ndir / ENV_FILE).write_bytes(env_script(cmd.env))
    assert _sh("sh", cmd.remote).returncode == 7
    assert not (ndir / ENV_FILE).exists()  # read once, then removed
    (ndir / "cancel").write_text("")
    late = _sh("sh", cmd.remote)
    assert late.returncode == 143 and STARTED_MARKER not in late.stdout


def test_torchrun_line(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, n=3, nproc_per_node=4)
    spec = LaunchSpec(argv=("-m", "aorta", "sweep", "run", "--recipe", NodePath("recipe.yaml")))
    cmd = run_command(
        cluster,
        cluster.nodes[2],
        spec,
        run_id="r",
        node_dir="/n",
        master_addr="10.0.0.1",
        master_port=29400,
    )
    assert cmd.argv == [
        PY,
        "-m",
        "torch.distributed.run",
        "--nnodes=3",
        "--nproc-per-node=4",
        "--node-rank=2",
        "--master-addr=10.0.0.1",
        "--master-port=29400",
        "--max-restarts=0",
        "-m",
        "aorta",
        "sweep",
        "run",
        "--recipe",
        "/n/recipe.yaml",
    ]
    assert cmd.env["AORTA_LAUNCH_OUTPUT"] == "/n/out" and "RANK" in cmd.unset
    assert "CUDA_VISIBLE_DEVICES" not in cmd.unset  # describes the node; torchrun does not own it
    override = LaunchSpec(argv=("train.py",), nproc_per_node=2)
    assert (
        "--nproc-per-node=2"
        in run_command(
            cluster,
            cluster.head,
            override,
            run_id="r",
            node_dir="/n",
            master_addr="a",
            master_port=1,
        ).argv
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"argv": ()}, "nothing to launch"),
        ({"argv": ("x",), "env": {"WORLD_SIZE": "2"}}, "WORLD_SIZE belongs to the launcher"),
        (
            {"argv": ("x",), "env": {"AORTA_NODE_RANK": "2"}},
            "AORTA_NODE_RANK belongs to the launcher",
        ),
        ({"argv": ("x",), "env": {"bad name": "2"}}, "not a valid environment variable name"),
        ({"argv": ("x",), "env": {"A": "x\ny"}}, "env A: contains a NUL or newline character"),
        ({"argv": ("x",), "files": {"../r.yaml": b""}}, "plain names"),
        ({"argv": ("x",), "master_port": 70000}, "not a TCP port"),
    ],
)
def test_launch_spec_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        LaunchSpec(**kwargs)


def test_sweep_spec(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yml"
    recipe.write_text("workload: matmul\nredaction: {scrub_env_keys: [MY_*]}\n")
    spec = sweep_spec(
        recipe, command=["python", "train.py"], overrides=["lr=1"], ticket="T-9", nproc_per_node=2
    )
    assert spec.argv[:6] == ("-m", "aorta", "sweep", "run", "--recipe", NodePath("recipe.yml"))
    assert spec.argv[6:] == (
        "--output",
        NodePath("out"),
        "--ticket",
        "T-9",
        "--",
        "python",
        "train.py",
    )
    assert spec.files == {"recipe.yml": recipe.read_bytes()} and spec.requires == (
        "torch",
        "aorta",
    )
    assert spec.scrub_env_keys == ("MY_*",)
    with pytest.raises(UsageError, match="--override needs a training command"):
        sweep_spec(recipe, overrides=["lr=1"])
    with pytest.raises(UsageError, match="cannot read the recipe"):
        sweep_spec(tmp_path / "missing.yaml")


def test_launch_job_reads_what_the_options_run(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yml"
    recipe.write_text("workload: matmul\n")
    job = launch_job(LaunchOptions(recipe=recipe, nproc_per_node="2", ticket="T-9"), None)
    assert job is not None and job.run_timeout is None and job.warnings == ()
    assert job.spec == sweep_spec(recipe, nproc_per_node=2, ticket="T-9")
    with pytest.raises(UsageError, match="--nproc-per-node: must be a whole number"):
        launch_job(LaunchOptions(recipe=recipe, nproc_per_node="many"), None)
    with pytest.raises(UsageError, match="give --recipe FILE"):
        launch_job(LaunchOptions(slurm=True), None)
    # Options that cannot go together are refused before any file is read.
    with pytest.raises(UsageError, match="--container runs over SSH"):
        launch_job(LaunchOptions(recipe=recipe, slurm=True, container="img:1"), None)
    with pytest.raises(UsageError, match="--dry-run with --slurm shows the sbatch script"):
        launch_job(LaunchOptions(recipe=tmp_path / "missing.yml", slurm=True, dry_run=True), None)
    assert launch_job(LaunchOptions(slurm=True, dry_run=True, attach="42"), None) is None


def test_the_entry_point_runs_ssh_from_the_cluster_file(tmp_path: Path) -> None:
    """No ``slurm``: the cluster file's nodes over SSH; a dry run's result comes back (a node
    refusing connections is in it, not raised), the file's warnings go to ``on_event``."""
    recipe, cluster = tmp_path / "r.yml", tmp_path / "cluster.json"
    recipe.write_text("workload: matmul\n")
    nodes = {"node_dict": {"127.0.0.1": {"port": 1}}, "connect_timeout": 2, "colour": "red"}
    cluster.write_text(json.dumps(nodes))
    events: list[str] = []
    opts = LaunchOptions(cluster=cluster, recipe=recipe, dry_run=True, setup_timeout=30)
    launched = run(opts, on_event=events.append)
    assert launched.result is not None and launched.text == ""
    assert launched.result.status == "failed" and not launched.result.commands
    assert launched.result.outcomes["node0"].status == "unreachable"
    assert events == [f"warning: {cluster}: unknown key 'colour' ignored"]


@pytest.mark.slow
def test_node_helper_setup_runs_locally(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, n=1)
    spec = LaunchSpec(
        argv=("x",),
        files={"recipe.yaml": b"a: 1\n"},
        requires=("json", "no_such_module_xyz"),
        scrub_env_keys=("MY_*",),
    )
    line, stdin = setup_command(cluster.head, spec, run_id="r-5", probe_port=True)
    secrets = {"NCCL_IB_PASSWD": "p", "NCCL_CREDENTIAL": "c", "NCCL_MY_X": "m", "MY_NCCL": "s"}
    proc = _sh("sh", line, stdin=stdin, env={**os.environ, **secrets})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    ndir = Path(report["node_dir"])
    assert ndir == tmp_path / "node0" / ".aorta-launch" / "r-5" / "node_0"
    assert (ndir / "recipe.yaml").read_bytes() == b"a: 1\n" and (ndir / "out").is_dir()
    assert report["missing"] == ["no_such_module_xyz"] and 0 < report["port"] < 65536
    snap = report["snapshot"]
    assert snap["python"] == platform.python_version() or snap["executable"] == PY
    assert snap["env"]["AORTA_NODE_RANK"] == "0" and snap["tools"]["setsid"] in (True, False)
    # the one host snapshot and its secret policy: the same schema as the sweep's host_env.json
    assert {"host", "aorta", "torch", "gpus", "env"} <= set(snap)
    assert snap["env"]["NCCL_IB_PASSWD"] == snap["env"]["NCCL_CREDENTIAL"] == "<redacted>"
    assert snap["env"]["NCCL_MY_X"] == "m"  # the recipe's globs match whole names
    dry_line, dry_stdin = setup_command(
        cluster.head, spec, run_id="r-6", probe_port=False, dry_run=True
    )
    dry = json.loads(_sh("sh", dry_line, stdin=dry_stdin).stdout.splitlines()[-1])
    assert dry["port"] is None and not Path(dry["node_dir"]).exists()


def test_node_helper_kill_takes_the_whole_tree_even_setsid_grandchildren(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, n=1)
    run_id = f"kill-{uuid.uuid4().hex[:8]}"
    ndir = tmp_path / "nd"
    ndir.mkdir()
    # Like torchrun: the program starts a worker in a session of its own, then waits.
    program = "import subprocess, sys, time; subprocess.Popen(['sleep', '1000'], start_new_session=True); print('ready', flush=True); time.sleep(1000)"
    spec = LaunchSpec(argv=(PY, "-c", program), torchrun=False)
    cmd = run_command(
        cluster,
        cluster.head,
        spec,
        run_id=run_id,
        node_dir=str(ndir),
        master_addr="h",
        master_port=1,
    )
    (ndir / ENV_FILE).write_bytes(env_script(cmd.env))
    wrapper = subprocess.Popen(["sh", "-c", cmd.remote], stdout=subprocess.PIPE, text=True)
    try:
        assert wrapper.stdout is not None
        assert wrapper.stdout.readline().startswith(STARTED_MARKER)
        assert wrapper.stdout.readline().strip() == "ready"
        assert len(wait_for_processes(f"AORTA_RUN_ID={run_id}", 2)) == 2
        line, stdin = kill_command(cluster.head, run_id=run_id, node_dir=str(ndir), grace=2.0)
        report = json.loads(_sh("sh", line, stdin=stdin).stdout)
        assert report["terminated"] == 2 and report["left"] == []
        assert wait_gone(f"AORTA_RUN_ID={run_id}", timeout=0.0) == []
        assert wrapper.wait(timeout=10) != 0
        assert (ndir / "cancel").is_file()
    finally:
        for pid in processes_with_env(f"AORTA_RUN_ID={run_id}"):
            os.kill(pid, 9)
        wrapper.kill()


def _cmdlines_with(text: str) -> list[int]:
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in path.read_bytes():
                found.append(int(path.parent.name))
        except (OSError, ValueError):
            continue
    return [pid for pid in found if pid != os.getpid()]


def test_the_watchdog_stops_the_run_when_its_channel_closes(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, n=1)
    run_id = f"dog-{uuid.uuid4().hex[:8]}"
    spec = LaunchSpec(
        argv=(PY, "-c", "import time; print('up', flush=True); time.sleep(1000)"), torchrun=False
    )
    line, stdin = setup_command(cluster.head, spec, run_id=run_id, probe_port=False)
    ndir = json.loads(_sh("sh", line, stdin=stdin).stdout.splitlines()[-1])["node_dir"]
    cmd = run_command(
        cluster, cluster.head, spec, run_id=run_id, node_dir=ndir, master_addr="h", master_port=1
    )
    Path(ndir, ENV_FILE).write_bytes(env_script(cmd.env))
    # stdin is a pipe we hold, like the SSH channel the launch keeps open
    wrapper = subprocess.Popen(
        ["sh", "-c", cmd.remote], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert wrapper.stdout is not None and wrapper.stdin is not None
        assert wrapper.stdout.readline().startswith(STARTED_MARKER)
        assert wrapper.stdout.readline().strip() == "up"
        time.sleep(0.3)
        assert processes_with_env(f"AORTA_RUN_ID={run_id}"), "the program should still run"
        wrapper.stdin.close()  # the orchestrator went away
        assert wait_gone(f"AORTA_RUN_ID={run_id}", timeout=10.0) == []
        assert wrapper.wait(timeout=10) != 0
        deadline = time.monotonic() + 5
        while _cmdlines_with(ndir) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cmdlines_with(ndir) == []  # the watchdog itself ended too
    finally:
        for pid in processes_with_env(f"AORTA_RUN_ID={run_id}"):
            os.kill(pid, 9)
        wrapper.kill()


@pytest.mark.slow
def test_fanout_through_an_injected_session_stops_the_others_on_a_bad_exit(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    spec = LaunchSpec(argv=(PY, "-m", "tests.launch_worker", "fail-on", "1"), torchrun=False)
    deadlines = Deadlines(setup=20, run=30, collect=20, kill_grace=1, teardown=10)
    events: list[str] = []
    with pytest.raises(LaunchFailed) as info:
        launch(
            cluster,
            spec,
            output=tmp_path / "out",
            deadlines=deadlines,
            sessions=local_sessions,
            on_event=events.append,
        )
    result = info.value.result
    assert result.status == "failed" and "node1 127.0.0.3 exited with code 1" in str(info.value)
    assert result.outcomes["node0"].status == "stopped" and result.outcomes["node1"].exit_code == 1
    assert any("stopping node0" in e for e in events)
    assert (
        node_folder(result.run_dir, 0) / "node0_rankx.json"
    ).is_file()  # collected after the failure
    assert wait_gone(f"AORTA_RUN_ID={result.run_id}", timeout=0.0) == []


class _SlowStopReply(LocalSession):
    """A node whose first stop (node0's: the kill of a failed launch's others, over a fresh
    connection) answers late: it ran, the node's processes are gone, its reply is on the way."""

    def __init__(self, node: Node) -> None:
        super().__init__(node)
        self.fresh_calls = 0

    def exec(self, command: str, *, timeout: float, fresh: bool = False, **kw: Any) -> ExecResult:
        result = super().exec(command, timeout=timeout, fresh=fresh, **kw)
        self.fresh_calls += fresh
        if fresh and self.fresh_calls == 1 and self.node.rank == 0:
            time.sleep(2.0)
        return result


@pytest.mark.slow
def test_teardown_waits_for_the_stop_of_a_failed_launchs_others(tmp_path: Path) -> None:
    # The others' stop runs in a thread of its own; the node's run channel closes as its
    # processes die, which may be before the stop's reply is back, and teardown began then: both
    # stops ran at once, and the late reply was lost (the record was written before it came) or
    # overwrote teardown's report.
    cluster = _cluster(tmp_path)
    spec = LaunchSpec(argv=(PY, "-m", "tests.launch_worker", "fail-on", "1"), torchrun=False)
    deadlines = Deadlines(setup=20, run=30, collect=20, kill_grace=1, teardown=10)
    with pytest.raises(LaunchFailed) as info:
        launch(
            cluster,
            spec,
            output=tmp_path / "out",
            deadlines=deadlines,
            sessions=lambda c: {n.name: _SlowStopReply(n) for n in c.nodes},
        )
    node0 = info.value.result.outcomes["node0"]
    assert node0.status == "stopped"
    assert node0.teardown == "stopped 1 process(es); nothing left"  # the stop's, then teardown's


def test_run_parallel_reports_each_key_and_never_waits_past_the_deadline() -> None:
    stragglers: list[str] = []

    def work(key: str, cancel: threading.Event) -> str:
        if key == "slow":
            time.sleep(1.0)
            if cancel.is_set():
                stragglers.append(key)  # a straggler cleans up after itself
        if key == "bad":
            raise ValueError("boom")
        return key * 2

    t = time.monotonic()
    out = run_parallel(["ok", "bad", "slow"], work, timeout=0.3)
    assert time.monotonic() - t < 0.9
    assert out["ok"] == "okok" and isinstance(out["bad"], ValueError)
    assert isinstance(out["slow"], TimedOut)
    assert str(out["bad"]) == "boom"
    deadline = time.monotonic() + 5
    while not stragglers and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stragglers == ["slow"]
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("aorta-"))


def test_last_words() -> None:
    assert last_words("step 1\nNaN loss at step 2\n=====\n") == "NaN loss at step 2"
    torchrun = "worker says bye\nTraceback (most recent call last):\n  File torch/distributed/run.py\nChildFailedError:\n====="
    assert last_words(torchrun) == "worker says bye"
    assert last_words("") == ""


def test_preflight_env_diff_and_versions() -> None:
    a = {
        "torch": {"version": "2.4.0"},
        "aorta": "0.1",
        "env": {"NCCL_IB_DISABLE": "1", "AORTA_NODE_RANK": "0"},
        "host": "a",
        "taken_at": "t0",
    }
    b = {
        "torch": {"version": "2.4.0"},
        "aorta": "0.1",
        "env": {"AORTA_NODE_RANK": "1"},
        "host": "b",
        "taken_at": "t1",
    }
    skew = env_diff({"node0": a, "node1": b, "node2": None})
    assert skew == {"env.NCCL_IB_DISABLE": {"node0": "1", "node1": "(unset)"}}
    assert format_skew(skew) == [
        "nodes differ in 1 setting(s):",
        "  env.NCCL_IB_DISABLE: node0=1  node1=(unset)",
    ]
    assert env_diff({"node0": a}) == {}
    rows = version_rows(
        {
            "python": "3.11",
            "torch": {"version": "2.4", "cuda": "12.4"},
            "libraries": {"nccl_wheel": "2.21.5"},
        }
    )
    assert rows == {
        "python": "3.11",
        "aorta": "-",
        "torch": "2.4",
        "cuda/hip": "12.4",
        "nccl/rccl": "2.21.5",
        "driver": "-",
    }


def test_finalize_names_the_result_after_the_heads_run_dir(tmp_path: Path) -> None:
    out = tmp_path / "out"
    staging = staging_dir(out, "r1")
    run = node_folder(staging, 0) / "T" / "wl" / "2026-01-01T00-00-00"
    (run / "cells" / "c" / "trial_0000" / "trace").mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    (run / "cells" / "c" / "trial_0000.json").write_text("{}")
    (run / "cells" / "c" / "trial_0000" / "trace" / "rank0.json").write_text("{}")
    (node_folder(staging, 1) / "trace").mkdir(parents=True)
    final = finalize(staging, out, "r1")
    assert final == out / "T" / "wl" / "2026-01-01T00-00-00" and not staging.exists()
    assert (final / "manifest.json").is_file() and (
        final / "cells/c/trial_0000/trace/rank0.json"
    ).is_file()
    head_copy = node_folder(final, 0) / "T" / "wl" / "2026-01-01T00-00-00"
    assert sorted(
        p.relative_to(head_copy).as_posix() for p in head_copy.rglob("*") if p.is_file()
    ) == ["cells/c/trial_0000/trace/rank0.json"]
    assert (
        os.stat(final / "cells/c/trial_0000/trace/rank0.json").st_ino
        == os.stat(head_copy / "cells/c/trial_0000/trace/rank0.json").st_ino
    )
    bare = staging_dir(out, "r2")
    node_folder(bare, 0).mkdir(parents=True)
    assert finalize(bare, out, "r2") == out / "_launch_" / "r2"
    assert (
        is_artifact("x/node.log")
        and is_artifact("a.pt.trace.json.gz")
        and not is_artifact("matrix.md")
    )


# -- what a failed remote command says (issue 39, item 3) -----------------------------------------
DOCKER_FAILED = (
    "docker: Error response from daemon: error gathering device information while adding custom "
    'device "/dev/nope": no such file or directory.\n'
    "Run 'docker run --help' for more information"
)


def test_the_lines_carrying_the_cause_are_kept_bounded_and_redacted() -> None:
    # Before: only the last line ("Run 'docker run --help' ...") reached the message.
    assert cause_lines(DOCKER_FAILED).startswith("docker: Error response from daemon: error")
    assert "--help" not in cause_lines(DOCKER_FAILED)
    noisy = "\n".join([f"error {i}: " + "x" * 500 for i in range(100)] + ["see the docs"])
    kept = cause_lines(noisy).split(" | ")
    assert [k[:9] for k in kept] == ["error 97:", "error 98:", "error 99:"]
    assert all(len(k) <= 200 for k in kept)
    leaked = "fatal: could not read Password for 'https://u:Hunter2pw@git.example'"
    cause = ExecResult(128, leaked).cause  # what a message carries: credential shapes masked
    assert "Hunter2pw" not in cause and "<redacted>" in cause
    assert cause_lines("step 1\nstep 2\n\n") == "step 2"  # nothing says why: the last line


def test_a_node_whose_python_cannot_start_says_why(tmp_path: Path) -> None:
    # A real interpreter that fails to start: Python prints the cause first, then a thread dump
    # ending "<no Python frame>" — before, that last line was all the message said.
    broken = tmp_path / "python"
    broken.write_text(f'#!/bin/sh\nPYTHONHOME=/nonexistent exec {shutil.which("python3")} "$@"\n')
    broken.chmod(0o755)
    cluster = _cluster(tmp_path, n=1, python=str(broken))
    report = dry_run(cluster, LaunchSpec(argv=("x",)), sessions=local_sessions)
    message = report.outcomes["node0"].message
    assert report.outcomes["node0"].status == "setup_failed"
    assert "No module named 'encodings'" in message, message
    assert "no Python frame" not in message


def test_cvs_orchestrator_baremetal_launches_natively_whatever_the_block_says(
    tmp_path: Path,
) -> None:
    # Before: the container block's presence decided, so this dry run probed docker for an
    # image no node has, and failed.
    block = {"image": "no-such-image", "runtime": "/nonexistent/docker"}
    cluster = _cluster(tmp_path, n=1, orchestrator="baremetal", container=block)
    report = dry_run(cluster, LaunchSpec(argv=("x",)), sessions=local_sessions)
    assert report.status == "complete", report.summary()
    assert report.commands["node0"].container == ()  # no docker line
