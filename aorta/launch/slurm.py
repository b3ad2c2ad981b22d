"""The Slurm backend: one ``srun`` step runs torchrun (or, with ``srun_ranks``, each rank) on
every node of an allocation; from a login node, an sbatch job does that and is followed here.

Inside an allocation (``salloc``, ``sbatch``) :func:`start_step` probes a rendezvous port on the
first node, writes each node's exact command to ``<staging>/slurm/node_<k>/run.sh`` and starts
``srun --kill-on-bad-exit=1``: every task writes ``started.<task>`` and ``exit.<task>`` (exit code
and time) beside it, and its output goes to ``combined_traces/node_<k>/launch.log``. From a login
node :func:`submit` writes ``<staging>/aorta.sbatch`` (which runs ``aorta launch --slurm --in-job
<staging>``: the same step) and submits it. Both end in :func:`finish`: per-node outcomes from
those files and the job's state, the node outputs moved into ``combined_traces/node_<k>/``,
the run directory named as the SSH path names it, and ``launch.json`` with the job record.
The staging folder must be on a file system every node shares.

>>> check_time("1-02:30"), check_time("90")
('1-02:30', '90')
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from aorta import envvars
from aorta.errors import AortaError, UsageError
from aorta.store.rundir import atomic_write

from .cluster import Cluster, Node
from .command import LaunchSpec, NodePath, run_command
from .gather import finalize, node_folder, staging_dir
from .outcome import LaunchFailed, LaunchResult, NodeOutcome

__all__ = [
    "FINAL_STATES",
    "SCRIPT",
    "check_request",
    "check_time",
    "finish",
    "follow",
    "job_info",
    "new_run_id",
    "run_in_job",
    "run_inside",
    "start_step",
    "submit",
]

#: Job states after which nothing of the job runs any more.
FINAL_STATES = frozenset(
    [
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "CANCELLED",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    ]
)
LineSink = Callable[[Node, str], None]
EventSink = Callable[[str], None]
TOOLS = ("sbatch", "srun", "scontrol", "sinfo", "scancel")
SCRIPT, JOB_FILE = "aorta.sbatch", "slurm.json"
_TIME = re.compile(r"\d+(:\d\d?){0,2}|\d+-\d+(:\d\d?){0,2}")
_PROBE = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
# One srun task: mark the start, run the node's command, record the exit code and the time.
_TASK = (
    'd="$0/node_$SLURM_NODEID"; date +%s.%N > "$d/started.$SLURM_PROCID"; sh "$d/run.sh"; '
    'c=$?; echo "$c $(date +%s.%N)" > "$d/exit.$SLURM_PROCID"; exit $c'
)


def new_run_id() -> str:
    """``2026-11-30T05-12-33-a1b2c3``, as the SSH launcher names its runs (``AORTA_RUN_ID``)."""
    return f"{time.strftime('%Y-%m-%dT%H-%M-%S', time.gmtime())}-{secrets.token_hex(3)}"


def _slurm(*argv: str, timeout: float = 60.0) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AortaError(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise AortaError(f"{shlex.join(argv)}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def check_time(value: str) -> str:
    """``value`` if it is a Slurm time (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``); else :class:`UsageError`."""
    if not _TIME.fullmatch(value):
        raise UsageError(
            f"--time {value!r}: not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)"
        )
    return value


def check_request(*, nodes: int | None, partition: str | None, time_limit: str | None) -> None:
    """Refuse, before anything is submitted, what Slurm would refuse or what cannot run."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise UsageError(f"--slurm: Slurm client tools not found on PATH: {', '.join(missing)}")
    if nodes is None:
        if "SLURM_JOB_ID" not in os.environ:
            raise UsageError("--slurm outside an allocation needs --nodes K (or run in salloc)")
        return
    if time_limit is not None:
        check_time(time_limit)
    rows = [r.split() for r in _slurm("sinfo", "-h", "-o", "%P %D").splitlines() if r.strip()]
    sizes: dict[str, int] = {}
    for name, count in rows:
        sizes[name.rstrip("*")] = sizes.get(name.rstrip("*"), 0) + int(count)
    default = next((n.rstrip("*") for n, _ in rows if n.endswith("*")), None)
    part = partition or default
    if part is None or part not in sizes:
        raise UsageError(f"--partition {part!r}: no such Slurm partition (sinfo -h -p {part})")
    if nodes > sizes[part]:
        raise UsageError(f"--nodes {nodes}: partition {part!r} has only {sizes[part]} node(s)")


def job_info(job_id: str) -> dict[str, str]:
    """``scontrol show job``'s fields (``JobState``, ``NodeList``, ``ExitCode``, ...)."""
    text = _slurm("scontrol", "show", "job", "-o", job_id, timeout=30.0)
    return dict(f.split("=", 1) for f in text.split() if "=" in f)


def hosts(nodelist: str) -> list[str]:
    return _slurm("scontrol", "show", "hostnames", nodelist).split()


def allocation(python: str, cwd: str) -> Cluster:
    """The current allocation's nodes, in Slurm's order (``vpc_ip``: the node's NodeAddr)."""
    names = hosts(os.environ["SLURM_JOB_NODELIST"])
    info = _slurm("scontrol", "show", "node", "-o", names[0])
    addr = re.search(r"NodeAddr=(\S+)", info)
    first = addr.group(1) if addr else names[0]
    nodes = [
        Node(rank=k, address=h, vpc_ip=first if k == 0 else None, python=python, workdir=cwd)
        for k, h in enumerate(names)
    ]
    return Cluster(nodes=tuple(nodes), source="slurm")


def _run_sh(cmd: Any, ranks: int | None, addr: str, port: int) -> str:
    q = shlex.quote
    ident = (
        f'RANK="$SLURM_PROCID" WORLD_SIZE="$SLURM_NTASKS" LOCAL_RANK="$SLURM_LOCALID" '
        f"LOCAL_WORLD_SIZE={ranks} MASTER_ADDR={q(addr)} MASTER_PORT={port} "
        if ranks
        else ""
    )
    unset = " ".join(f"-u {n}" for n in cmd.unset)
    env = " ".join(q(f"{k}={v}") for k, v in cmd.env.items())
    return f"cd {q(cmd.cwd)} || exit 1\nexec env {unset} {ident}{env} {shlex.join(cmd.argv)} </dev/null\n"


def start_step(
    spec: LaunchSpec, *, staging: Path, run_id: str, srun_ranks: bool, emit: Callable[[str], None]
) -> tuple[subprocess.Popen[bytes], Cluster]:
    """Inside an allocation: probe the port, write each node's ``run.sh``, start the srun step."""
    job = os.environ["SLURM_JOB_ID"]
    cluster = allocation(sys.executable, os.getcwd())
    head, nnodes = cluster.head, len(cluster.nodes)
    ranks = int(spec.nproc_per_node or 1) if srun_ranks else None
    if srun_ranks:  # the static-launcher contract: srun makes the ranks, aorta the trial ports
        base = str(30000 + int(job.split("_")[0]) % 30 * 1000)
        env = {**spec.env, envvars.TRIAL_MASTER_PORT_BASE: base}
        spec = replace(spec, torchrun=False, argv=(sys.executable, *spec.argv), env=env)
    port = spec.master_port or int(
        _slurm("srun", "-N1", "-n1", "-w", head.address, sys.executable, "-c", _PROBE).split()[-1]
    )
    addr = spec.master_addr or str(head.vpc_ip)
    slurm_dir, where = (
        staging / "slurm",
        {"run_id": run_id, "master_addr": addr, "master_port": port},
    )
    for node in cluster.nodes:
        ndir = slurm_dir / f"node_{node.rank}"
        (ndir / "out").mkdir(parents=True, exist_ok=True)
        node_folder(staging, node.rank).mkdir(parents=True, exist_ok=True)
        for name, data in spec.files.items():
            (ndir / name).write_bytes(data)
        cmd = run_command(cluster, node, spec, **where, node_dir=str(ndir))
        (ndir / "run.sh").write_text(_run_sh(cmd, ranks, addr, port))
        (ndir / "command").write_text(cmd.describe() + "\n")
    argv = ["srun", "--kill-on-bad-exit=1", "--quit-on-interrupt", f"-N{nnodes}"]
    argv += [f"--ntasks-per-node={ranks or 1}", f"--ntasks={nnodes * (ranks or 1)}"]
    argv += [f"--output={staging}/combined_traces/node_%n/launch.log", "--open-mode=append"]
    _note(staging, job_id=job, master=f"{addr}:{port}", tasks=ranks or 1)
    emit(f"job {job}: rendezvous {addr}:{port}; starting {nnodes} node(s)")
    step = [*argv, "sh", "-c", _TASK, str(slurm_dir)]
    return subprocess.Popen(step, stdin=subprocess.DEVNULL, start_new_session=True), cluster


def _files(folder: Path, prefix: str) -> list[list[float]]:
    return [[float(x) for x in p.read_text().split()] for p in folder.glob(f"{prefix}.*")]


def _outcome(node: Node, folder: Path, state: str, t0: float, tasks: int) -> NodeOutcome:
    exits, started = _files(folder, "exit"), _files(folder, "started")
    out = NodeOutcome(node, started_s=min((s[0] - t0 for s in started), default=None))
    bad = sorted((e for e in exits if e[0] != 0), key=lambda e: e[1])
    if bad:
        code, when = int(bad[0][0]), bad[0][1]
        out.status, out.exit_code, out.ended_s = "failed", code, when - t0
        out.message = f"exited with code {code} (job {state})"
    elif len(exits) >= tasks:
        out.status, out.exit_code = "ok", 0
        out.ended_s = max(e[1] for e in exits) - t0
    elif state in ("TIMEOUT", "DEADLINE"):
        out.status, out.message = "timeout", f"still running at the job's time limit ({state})"
    elif state in ("NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"):
        out.status, out.message = "failed", f"job {state}, no exit code from this node"
    elif started:
        out.status, out.message = "stopped", f"job {state}"
    else:
        out.status, out.message = "not_started", f"job {state}"
    return out


@dataclass(frozen=True)
class _Run:
    """Where one launch keeps its files until :func:`finish`, and when it began (wall clock)."""

    output: Path
    run_id: str
    t0: float

    @property
    def staging(self) -> Path:
        return staging_dir(self.output, self.run_id).resolve()


def finish(
    cluster: Cluster, run: _Run, *, state: str, job: Any = None, interrupted: bool = False
) -> LaunchResult:
    """Outcomes from the task files, outputs into ``combined_traces/node_<k>/``, the run named,
    ``launch.json`` written; raises :class:`LaunchFailed` unless every node finished."""
    staging, t0 = run.staging, run.t0
    meta = _note(staging)
    outcomes = {}
    for node in cluster.nodes:
        ndir = staging / "slurm" / f"node_{node.rank}"
        out = _outcome(node, ndir, state, t0, int(meta.get("tasks", 1)))
        if out.status == "stopped" and not interrupted:
            out.message = f"stopped by srun --kill-on-bad-exit (job {state})"
        for entry in (ndir / "out").iterdir() if (ndir / "out").is_dir() else ():
            os.replace(entry, node_folder(staging, node.rank) / entry.name)
        out.collected = "in place (the staging folder is on a shared file system)"
        outcomes[node.name] = out
    addr, _, port = str(meta.get("master", "")).rpartition(":")
    result = LaunchResult(
        run.run_id, outcomes, master_addr=addr or None, master_port=int(port or 0)
    )
    result.interrupted = interrupted
    started = [o.started_s for o in outcomes.values()]
    if started and None not in started:
        result.timings["all_started"] = max(s for s in started if s is not None)
    result.timings["total"] = time.time() - t0
    result.run_dir = finalize(staging, run.output, run.run_id)
    for out in outcomes.values():
        out.log = node_folder(result.run_dir, out.node.rank) / "launch.log"
    record = result.to_dict()
    record["commands"] = {
        n.name: (result.run_dir / f"slurm/node_{n.rank}/command").read_text().strip()
        for n in cluster.nodes
        if (result.run_dir / f"slurm/node_{n.rank}/command").is_file()
    }
    meta = {k: v for k, v in meta.items() if k != "spec"}  # slurm.json beside it has the spec
    record["slurm"] = {**meta, "state": state, "script": str(result.run_dir / SCRIPT), "job": job}
    atomic_write(result.run_dir / "launch.json", json.dumps(record, indent=1, default=str) + "\n")
    if result.status != "complete" and not interrupted:
        raise LaunchFailed(result)
    return result


def _note(staging: Path, **fields: Any) -> dict[str, Any]:
    """Read ``slurm.json`` (the job id, the spec, the rendezvous...), adding ``fields``."""
    path = staging / JOB_FILE
    data = json.loads(path.read_text()) if path.is_file() else {}
    if fields:
        data.update(fields)
        atomic_write(path, json.dumps(data, indent=1) + "\n")
    return data


def _save_spec(spec: LaunchSpec) -> dict[str, Any]:
    data = asdict(spec)
    data["argv"] = [a if isinstance(a, str) else {"node_path": a.relative} for a in spec.argv]
    data["files"] = {k: base64.b64encode(v).decode() for k, v in spec.files.items()}
    return data


def _load_spec(data: Mapping[str, Any]) -> LaunchSpec:
    argv = tuple(a if isinstance(a, str) else NodePath(a["node_path"]) for a in data["argv"])
    files = {k: base64.b64decode(v) for k, v in data["files"].items()}
    lists = {k: tuple(data[k]) for k in ("overrides", "requires", "scrub_env_keys")}
    return LaunchSpec(**{**data, **lists, "argv": argv, "files": files})


class _Tail:
    """Each node's ``launch.log`` (and the batch script's output) followed as it grows."""

    def __init__(self, sinks: Mapping[Path, Callable[[str], None]]) -> None:
        self.sinks, self.pos = dict(sinks), dict.fromkeys(sinks, 0)

    @classmethod
    def of(cls, staging: Path, cluster: Cluster, on_line: LineSink) -> _Tail:
        def sink(node: Node) -> Callable[[str], None]:
            return lambda text: on_line(node, text)

        return cls({node_folder(staging, n.rank) / "launch.log": sink(n) for n in cluster.nodes})

    def poll(self) -> None:
        for path, sink in self.sinks.items():
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.pos[path])
                    data = fh.read()
            except OSError:
                continue
            data = data[: data.rfind(b"\n") + 1]
            self.pos[path] += len(data)
            for line in data.decode(errors="replace").splitlines():
                sink(line)


def run_inside(
    spec: LaunchSpec,
    *,
    output: Path,
    run_id: str,
    srun_ranks: bool,
    on_line: LineSink,
    emit: EventSink,
    timeout: float,
) -> LaunchResult:
    """Inside an allocation: the srun step, followed until it ends, then :func:`finish`."""
    run = _Run(output, run_id, time.time())
    staging, t0 = run.staging, run.t0
    proc, cluster = start_step(
        spec, staging=staging, run_id=run_id, srun_ranks=srun_ranks, emit=emit
    )
    tail, state = _Tail.of(staging, cluster, on_line), "FAILED"
    try:
        while proc.poll() is None and time.time() - t0 < timeout:
            tail.poll()
            time.sleep(0.2)
        if proc.poll() is None:
            state = "DEADLINE"
            _stop(proc)
    except KeyboardInterrupt:
        _stop(proc)
        tail.poll()
        finish(cluster, run, state="CANCELLED", interrupted=True)
        raise
    tail.poll()
    state = "COMPLETED" if proc.returncode == 0 else state
    return finish(cluster, run, state=state)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    # srun --quit-on-interrupt ends the step (and Slurm every task of it) on one SIGINT.
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_in_job(staging: Path, emit: EventSink) -> int:
    """The sbatch script's step: :func:`start_step` with the saved spec; srun's exit code."""
    meta = _note(staging)
    spec = _load_spec(meta["spec"])
    proc, _ = start_step(
        spec, staging=staging, run_id=meta["run_id"], srun_ranks=meta["srun_ranks"], emit=emit
    )
    return proc.wait()


def sbatch_script(staging: Path, *, run_id: str, options: Sequence[str]) -> str:
    """The batch script: ``#SBATCH`` options, then ``aorta launch --slurm --in-job <staging>``."""
    head = [f"--job-name=aorta-{run_id}", *options, f"--output={staging}/slurm-%j.out"]
    step = [sys.executable, "-m", "aorta", "launch", "--slurm", "--in-job", str(staging)]
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {shlex.quote(o)}" for o in head),
            f"# aorta launch --slurm, run {run_id}: one srun step runs every node's command",
            f"# (slurm/node_<k>/run.sh); the spec is in {JOB_FILE}.",
            f"cd {shlex.quote(os.getcwd())} || exit 1",
            f"exec {shlex.join(step)}",
            "",
        ]
    )


def submit(
    spec: LaunchSpec,
    *,
    output: Path,
    run_id: str,
    srun_ranks: bool,
    nodes: int,
    options: Sequence[str],
    dry_run: bool = False,
) -> tuple[str | None, str]:
    """Write the sbatch script into the staging folder and submit it: ``(job id, script)``.
    With ``dry_run`` nothing is written or submitted (job id ``None``)."""
    staging = staging_dir(output, run_id).resolve()
    tasks = int(spec.nproc_per_node or 1) if srun_ranks else 1
    opts = [f"--nodes={nodes}", f"--ntasks-per-node={tasks}", *options]
    script = sbatch_script(staging, run_id=run_id, options=opts)
    if dry_run:
        return None, script
    staging.mkdir(parents=True)
    (staging / SCRIPT).write_text(script)
    saved = {"nodes": nodes, "srun_ranks": srun_ranks, "spec": _save_spec(spec)}
    _note(staging, run_id=run_id, submitted=time.time(), **saved)
    job = _slurm("sbatch", "--parsable", str(staging / SCRIPT)).strip().split(";")[0]
    _note(staging, job_id=job)
    return job, script


def find_job(output: Path, job_id: str) -> Path:
    """The staging folder of a job this machine submitted (for ``--attach``)."""
    for path in Path(output).glob(f".aorta-launch-*/{JOB_FILE}"):
        if json.loads(path.read_text()).get("job_id") == job_id:
            return path.parent
    raise UsageError(f"--attach {job_id}: no pending launch of that job under {output}")


class _Watch:
    """One submitted job seen through ``scontrol``: state changes, then node output."""

    def __init__(self, job_id: str, staging: Path, nodes: int, on_line: LineSink, emit: EventSink):
        self.job_id, self.staging, self.on_line, self.emit = job_id, staging, on_line, emit
        self.cluster = Cluster(nodes=tuple(Node(rank=k, address="-") for k in range(nodes)))
        self.state, self.info, self.cause = "", {}, ""
        self.tails: list[_Tail] = []

    def step(self) -> bool:
        """Look once; True when the job has ended."""
        try:
            self.info = job_info(self.job_id)
        except AortaError as exc:
            if "Invalid job id" not in str(exc):
                raise
            self.info = {"JobState": "ENDED", "Reason": "no longer known to scontrol"}
        info = self.info
        if info.get("JobState") != self.state:
            self.state, why = info.get("JobState", "UNKNOWN"), info.get("Reason", "None")
            self.emit(f"job {self.job_id} {self.state}" + (f" ({why})" if why != "None" else ""))
        if not self.tails and info.get("NodeList", "(null)") not in ("(null)", "", "None assigned"):
            names = hosts(info["NodeList"])
            self.cluster = Cluster(
                nodes=tuple(Node(rank=k, address=h) for k, h in enumerate(names))
            )
            batch = self.staging / f"slurm-{self.job_id}.out"
            self.tails = [
                _Tail.of(self.staging, self.cluster, self.on_line),
                _Tail({batch: lambda t: self.emit(t.removeprefix("launch: "))}),
            ]
        for tail in self.tails:
            tail.poll()
        return self.state in FINAL_STATES or self.state == "ENDED"

    def cancel(self, cause: str) -> None:
        self.cause = cause
        _slurm("scancel", self.job_id)
        end = time.time() + 120.0  # KillWait (30 s by default) and the epilog
        while not self.step() and time.time() < end:
            time.sleep(0.5)


def follow(
    job_id: str,
    *,
    output: Path,
    on_line: LineSink,
    emit: EventSink,
    timeout: float,
    poll: float = 1.0,
) -> LaunchResult:
    """Follow a submitted job (queue state, node output) to its end, then :func:`finish`.
    Ctrl-C/SIGTERM cancels it (``scancel``), waits for it to end and re-raises."""
    meta = _note(find_job(output, job_id))
    run = _Run(output, str(meta["run_id"]), float(meta["submitted"]))
    watch = _Watch(job_id, run.staging, int(meta["nodes"]), on_line, emit)
    try:
        while not watch.step():
            if time.time() - run.t0 > timeout:
                watch.cancel("DEADLINE")
                break
            time.sleep(poll)
    except KeyboardInterrupt:
        watch.cancel("CANCELLED")
        finish(watch.cluster, run, state="CANCELLED", job=watch.info, interrupted=True)
        raise
    return finish(watch.cluster, run, state=watch.cause or watch.state, job=watch.info)
