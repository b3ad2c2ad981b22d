"""The Slurm backend (docs/launch.md, "Slurm"): one ``srun --kill-on-bad-exit=1`` step runs
torchrun (with ``srun_ranks``, each rank) on every node of an allocation; from a login node, a
batch job runs that step. Each task writes ``started.<task>`` and ``exit.<task>`` beside its
``run.sh``: :meth:`SlurmJob.follow` turns them and the job's state into per-node outcomes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

from aorta import envvars
from aorta.errors import AortaError, UsageError
from aorta.recipe.cluster import Cluster, Node, check_slurm_partition, check_slurm_time
from aorta.recipe.launch_spec import Deadlines, LaunchOptions, LaunchSpec, NodePath
from aorta.store.gather import (
    new_run_id,
    node_folder,
    node_log,
    slurm_node_dir,
    staging_dir,
    staging_run_id,
)
from aorta.store.rundir import (
    COMBINED_TRACES,
    LAUNCH_LOG,
    LAUNCH_STAGING,
    SBATCH_SCRIPT,
    SLURM_DIR,
    SLURM_JOB,
    atomic_write,
)
from aorta.store.secrets import redact_env

from .backend import EventSink, LineSink, drive, ignore
from .node_command import ENV_FILE, env_script, node_env, port_probe, run_command
from .outcome import Launched, LaunchResult, NodeOutcome

__all__ = ["FINAL_STATES", "SlurmJob", "check_request", "run_in_job", "run_slurm", "sbatch_script"]

#: Job states after which nothing of the job runs any more.
FINAL_STATES = frozenset(
    "COMPLETED FAILED TIMEOUT NODE_FAIL CANCELLED OUT_OF_MEMORY PREEMPTED BOOT_FAIL DEADLINE".split()  # noqa: SIM905
)
# One srun task: mark the start, run the node's command, record the exit code and the time.
_TASK = 'd="$0/node_$SLURM_NODEID"; date +%s.%N > "$d/started.$SLURM_PROCID"; sh "$d/run.sh"; '
_TASK += 'c=$?; echo "$c $(date +%s.%N)" > "$d/exit.$SLURM_PROCID"; exit $c'


def _slurm(*argv: str, timeout: float = 60.0) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AortaError(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise AortaError(f"{shlex.join(argv)}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def check_request(
    *, nodes: int | None, partition: str | None, time_limit: str | None, dry_run: bool = False
) -> None:
    """Refuse, before anything is submitted, what Slurm would refuse or what cannot run
    (``dry_run``: only what needs no Slurm tools or controller, the time's form)."""
    check_slurm_time(time_limit)
    if dry_run:
        return
    missing = [t for t in ("sbatch", "srun", "scontrol", "sinfo", "scancel") if not shutil.which(t)]
    if missing:
        raise UsageError(f"--slurm: Slurm client tools not found on PATH: {', '.join(missing)}")
    if nodes is None and "SLURM_JOB_ID" not in os.environ:
        raise UsageError("--slurm outside an allocation needs --nodes K (or run in salloc)")
    if nodes:
        check_slurm_partition(nodes, partition, _slurm("sinfo", "-h", "-o", "%P %D"))


def sbatch_script(options: Sequence[str], step: Sequence[str], *, run_id: str, cwd: str) -> str:
    """The batch script ``aorta launch --slurm`` submits (and ``--dry-run`` prints): ``#SBATCH``
    options, then ``step`` run from ``cwd``. It carries no environment values. An option with a
    control character is refused (:class:`~aorta.errors.UsageError`): a line break would end
    its ``#SBATCH`` line and make the rest a shell line.

    >>> print(sbatch_script(["--nodes=2"], ["python", "-m", "aorta"], run_id="r1", cwd="/w"), end="")
    #!/bin/bash
    #SBATCH --nodes=2
    # aorta launch --slurm, run r1: one srun step runs every node's command
    # (slurm/node_<k>/run.sh); the spec is in slurm.json, the environment in slurm/node_<k>/env.sh.
    cd /w || exit 1
    exec python -m aorta
    """
    for option in options:  # one #SBATCH line each: a line break would start a shell line
        if problem := envvars.control_problem(option):
            raise UsageError(f"sbatch option {option!r}: {problem}")
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {shlex.quote(o)}" for o in options),
            f"# aorta launch --slurm, run {run_id}: one srun step runs every node's command",
            "# (slurm/node_<k>/run.sh); the spec is in slurm.json, the environment in"
            " slurm/node_<k>/env.sh.",
            f"cd {shlex.quote(cwd)} || exit 1",
            f"exec {shlex.join(step)}",
            "",
        ]
    )


def _note(staging: Path, **fields: Any) -> dict[str, Any]:
    """``slurm.json`` (the run id, the spec, the job id, the hosts...), ``fields`` added."""
    path = staging / SLURM_JOB
    data = {**(json.loads(path.read_text()) if path.is_file() else {}), **fields}
    if fields:
        atomic_write(path, json.dumps(data, indent=1) + "\n")
    return data


def _drop_env(staging: Path) -> None:
    # The step is over: no task reads it.
    for path in staging.glob(f"{SLURM_DIR}/node_*/{ENV_FILE}"):
        path.unlink(missing_ok=True)


def _start_step(staging: Path, emit: EventSink) -> subprocess.Popen[bytes]:
    """In the allocation: probe the port, write each node's ``run.sh``, start the srun step."""
    meta, job, q, cwd = _note(staging), os.environ["SLURM_JOB_ID"], shlex.quote, os.getcwd()
    argv = tuple(NodePath(**a) if isinstance(a, dict) else a for a in meta["spec"]["argv"])
    spec, ranks = LaunchSpec(**{**meta["spec"], "argv": argv}), meta["ranks"] and meta["tasks"]
    if ranks:  # the static-launcher contract: srun makes the ranks, aorta the trial ports
        spec = replace(spec, torchrun=False, argv=(sys.executable, *spec.argv))
    names = _slurm("scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]).split()
    found = re.search(r"NodeAddr=(\S+)", _slurm("scontrol", "show", "node", "-o", names[0]))
    addr = spec.master_addr or (found.group(1) if found else names[0])
    probe = ("srun", "-N1", "-n1", "-w", names[0], sys.executable, "-c", port_probe())
    port, base = spec.master_port or int(_slurm(*probe).split()[-1]), int(job.split("_")[0])
    ident = 'RANK="$SLURM_PROCID" WORLD_SIZE="$SLURM_NTASKS" LOCAL_RANK="$SLURM_LOCALID" '
    ident += f"LOCAL_WORLD_SIZE={ranks} MASTER_ADDR={q(addr)} MASTER_PORT={port} "
    ident += f"{envvars.TRIAL_MASTER_PORT_BASE}={envvars.slurm_trial_port_base(base)} "
    nodes = tuple(Node(k, h, python=sys.executable, workdir=cwd) for k, h in enumerate(names))
    cluster, commands, rdzv = Cluster(nodes, source="slurm"), {}, {"master_addr": addr}
    for node in nodes:
        ndir = slurm_node_dir(staging, node.rank)
        cmd = run_command(
            cluster, node, spec, run_id=meta["run_id"], node_dir=str(ndir), **rdzv, master_port=port
        )
        (ndir / "run.sh").write_text(
            f"cd {q(cwd)} || exit 1\n. {q(f'{ndir}/{ENV_FILE}')} || exit 126\n"
            f"exec env {' '.join(f'-u {n}' for n in cmd.unset)} {ident if ranks else ''}"
            f"{shlex.join(cmd.argv)} </dev/null\n"
        )
        commands[node.name] = cmd.describe()  # secret values redacted
    _note(staging, job_id=job, hosts=names, master=f"{addr}:{port}", commands=commands)
    emit(f"job {job}: rendezvous {addr}:{port}; starting {len(names)} node(s)")
    step = ["srun", "--kill-on-bad-exit=1", "--quit-on-interrupt", f"-N{len(names)}"]
    step += [f"--ntasks-per-node={ranks or 1}", f"--ntasks={len(names) * (ranks or 1)}"]
    step += [f"--output={staging}/{COMBINED_TRACES}/node_%n/{LAUNCH_LOG}", "--open-mode=append"]
    step += ["sh", "-c", _TASK, str(staging / SLURM_DIR)]
    return subprocess.Popen(step, stdin=subprocess.DEVNULL, start_new_session=True)


def _outcome(node: Node, ndir: Path, state: str, meta: dict[str, Any]) -> NodeOutcome:
    exits, started = (
        [[*map(float, p.read_text().split())] for p in ndir.glob(f"{n}.*")]
        for n in ("exit", "started")
    )
    t0, bad = meta["t0"], sorted((e for e in exits if e[0] != 0), key=lambda e: e[1])
    out = NodeOutcome(node, started_s=min((s[0] - t0 for s in started), default=None))
    if bad:
        out.status, out.exit_code, out.ended_s = "failed", int(bad[0][0]), bad[0][1] - t0
        out.message = f"exited with code {out.exit_code} (job {state})"
    elif len(exits) >= meta["tasks"]:
        out.status, out.exit_code, out.ended_s = "ok", 0, max(e[1] for e in exits) - t0
    elif state in ("TIMEOUT", "DEADLINE"):
        out.status, out.message = "timeout", f"still running at the job's time limit ({state})"
    elif state in ("NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"):
        out.status, out.message = "failed", f"job {state}, no exit code from this node"
    else:
        out.status, out.message = "stopped" if started else "not_started", f"job {state}"
    return out


def run_in_job(staging: Path, emit: EventSink) -> int:
    """The batch script's step: the srun step, then ``env.sh`` removed; srun's exit code."""
    if "SLURM_JOB_ID" not in os.environ or not (staging / SLURM_JOB).is_file():
        raise UsageError(f"--in-job {staging}: only inside the job `aorta launch --slurm` submits")
    code = _start_step(staging, emit).wait()
    _drop_env(staging)
    return code


def run_slurm(
    spec: LaunchSpec | None, options: LaunchOptions, *, on_line: LineSink, emit: EventSink
) -> Launched:
    """``attach``: follow that job; inside an allocation: the srun step from here; else submit
    the batch job (``dry_run``: its script, as text) and follow it (not ``no_wait``)."""
    output, nodes, dry = Path(options.output), options.nodes, options.dry_run
    if spec is None:
        job = SlurmJob.attach(str(options.attach), output=output)
    else:
        if options.srun_ranks and not isinstance(spec.nproc_per_node or 1, int):
            raise UsageError("--srun-ranks needs a number for --nproc-per-node")
        check_request(
            nodes=nodes, partition=options.partition, time_limit=options.time_limit, dry_run=dry
        )
        job = SlurmJob(output, new_run_id(), srun_ranks=options.srun_ranks, spec=spec, nodes=nodes)
        if nodes is not None and dry:
            return Launched(text=job.script(spec, nodes=nodes, options=options.sbatch_options()))
    if spec is not None and nodes is not None:
        job.submit(spec, nodes=nodes, options=options.sbatch_options())
        emit(f"submitted job {job.job_id} (script {job.staging / SBATCH_SCRIPT})")
        if options.no_wait:
            return Launched(text=f"{job.job_id}\n")
    timeout = options.run_timeout or Deadlines.run
    return Launched(job.follow(on_line=on_line, emit=emit, timeout=timeout))


class SlurmJob:
    """One launch through Slurm (a :class:`~aorta.launch.backend.Backend`), known by its staging
    folder under ``output``; building one is free. ``spec``, ``nodes``, ``options``: what to
    run, on how many nodes (``None``: the allocation's), with which ``#SBATCH`` options."""

    def __init__(
        self,
        output: Path,
        run_id: str,
        *,
        srun_ranks: bool = False,
        spec: LaunchSpec | None = None,
        nodes: int | None = None,
        options: Sequence[str] = (),
    ) -> None:
        self.staging, self.run_id = staging_dir(output, run_id).resolve(), run_id
        self.srun_ranks, self.spec, self.nodes, self.options = srun_ranks, spec, nodes, options
        self.step: subprocess.Popen[bytes] | None = None  # the srun step started here
        meta = _note(self.staging)
        #: The batch job's id, once submitted.
        self.job_id: str | None = meta.get("job_id")
        self.t0: float = meta.get("t0", time.time())
        self.info: dict[str, str] | None = None  # scontrol's last record of the job
        self.seen, self.pos = "", dict[Path, int]()
        self.state, self.meta = "UNKNOWN", meta  # the job's final state; slurm.json at the end
        self.result = LaunchResult(run_id, {})
        self.on_line: LineSink = ignore
        self.emit: EventSink = ignore
        self.timeout, self.poll = Deadlines.run, 1.0

    @classmethod
    def attach(cls, job_id: str, *, output: Path) -> SlurmJob:
        """The job ``job_id`` submitted earlier under ``output`` (``--attach``)."""
        for path in Path(output).glob(f"{LAUNCH_STAGING}*/{SLURM_JOB}"):
            if json.loads(path.read_text()).get("job_id") == job_id:
                return cls(output, staging_run_id(path.parent))
        raise UsageError(f"--attach {job_id}: no pending launch of that job under {output}")

    def script(self, spec: LaunchSpec, *, nodes: int, options: Sequence[str]) -> str:
        """The batch script (``--dry-run`` prints it): the ``#SBATCH`` options, then ``aorta
        launch --slurm --in-job <staging>`` (:func:`run_in_job`)."""
        tasks = int(spec.nproc_per_node or 1) if self.srun_ranks else 1
        head = [f"--job-name=aorta-{self.run_id}", f"--nodes={nodes}", f"--ntasks-per-node={tasks}"]
        head += [*options, f"--output={self.staging}/slurm-%j.out"]
        step = [sys.executable, "-m", "aorta", "launch", "--slurm", "--in-job", str(self.staging)]
        return sbatch_script(head, step, run_id=self.run_id, cwd=os.getcwd())

    def submit(self, spec: LaunchSpec, *, nodes: int, options: Sequence[str]) -> str:
        """From a login node: :meth:`setup`, then :meth:`start` (sbatch
        :data:`~aorta.store.rundir.SBATCH_SCRIPT`); the job id."""
        self.spec, self.nodes, self.options = spec, nodes, options
        self.setup()
        self.start()
        return str(self.job_id)

    def follow(
        self, *, on_line: LineSink, emit: EventSink, timeout: float, poll: float = 1.0
    ) -> LaunchResult:
        """The whole lifecycle (:func:`~aorta.launch.backend.drive`; the run is stopped
        ``timeout`` s after the launch began): the outcomes, the run directory and
        ``launch.json``; raises :class:`~aorta.launch.outcome.LaunchFailed` unless every node finished. Ctrl-C or
        SIGTERM stops the job, waits for it to end, writes what there is, re-raises."""
        self.on_line, self.emit, self.timeout, self.poll = on_line, emit, timeout, poll
        return drive(self, emit=emit)

    # -- the lifecycle ------------------------------------------------------------------------

    def now(self) -> float:
        return time.time() - self.t0  # wall clock: the job may be followed by another process

    def setup(self) -> bool:
        """Each node's folder with the shipped files and ``env.sh``; ``slurm.json``, the spec
        (a job submitted earlier is set up already)."""
        spec = self.spec
        if spec is None or (self.staging / SLURM_JOB).is_file():
            return True
        nodes = self.nodes or int(os.environ["SLURM_JOB_NUM_NODES"])
        for k in range(nodes):
            ndir = slurm_node_dir(self.staging, k)
            (ndir / "out").mkdir(parents=True)
            node_folder(self.staging, k).mkdir(parents=True)
            for name, data in spec.files.items():
                (ndir / name).write_bytes(data)
            (ndir / ENV_FILE).touch(mode=0o600)  # values never in a command line or readable
            env = node_env(Node(k, "-"), spec, run_id=self.run_id, node_dir=str(ndir))
            (ndir / ENV_FILE).write_bytes(env_script(env))
        redacted = redact_env(spec.env, scrub_keys=spec.scrub_env_keys)
        saved = asdict(replace(spec, env=redacted, files={}))
        tasks = int(spec.nproc_per_node or 1) if self.srun_ranks else 1
        meta = {"run_id": self.run_id, "nodes": nodes, "tasks": tasks, "ranks": self.srun_ranks}
        _note(self.staging, **meta, spec=saved, t0=self.t0)
        return True

    def start(self) -> None:
        """Inside an allocation (no ``nodes``): the srun step, from here; else sbatch the job
        (a job submitted earlier has started)."""
        if self.job_id is not None or self.spec is None:
            return
        if self.nodes is None:
            self.step = _start_step(self.staging, self.emit)
            self.job_id = os.environ["SLURM_JOB_ID"]
            return
        script = self.script(self.spec, nodes=self.nodes, options=self.options)
        path = self.staging / SBATCH_SCRIPT
        path.write_text(script)
        job = _slurm("sbatch", "--parsable", str(path)).strip().split(";")[0]
        self.job_id = _note(self.staging, job_id=job)["job_id"]

    def wait(self) -> None:
        """Until the job (or the step) ended, streaming every node's output; the deadline or a
        Ctrl-C stops it, and waits for it to end."""
        try:
            while (state := self._state()) is None and self.now() < self.timeout:
                self._tail()
                time.sleep(self.poll)
            if state is None:
                state = "DEADLINE"
                self._stop()
        except KeyboardInterrupt:
            self.state = "CANCELLED"
            self._stop()
            raise
        self.state = state

    def teardown(self) -> None:
        """The step is over: no task reads ``env.sh`` any more, remove every node's."""
        _drop_env(self.staging)

    def gather(self) -> None:
        """Outcomes from the task files; each node's outputs into
        ``combined_traces/node_<k>/`` (moved: the staging folder is on a shared file system)."""
        self._tail()
        staging, result = self.staging, self.result
        self.meta = meta = _note(staging)
        for k, host in enumerate(meta.get("hosts") or ["-"] * meta.get("nodes", 0)):
            ndir, folder = slurm_node_dir(staging, k), node_folder(staging, k)
            out = result.outcomes[f"node{k}"] = _outcome(Node(k, host), ndir, self.state, meta)
            if out.status == "stopped" and not result.interrupted:
                out.message = f"stopped by srun --kill-on-bad-exit (job {self.state})"
            for entry in (ndir / "out").iterdir():
                os.replace(entry, folder / entry.name)
            out.collected = "in place (the staging folder is on a shared file system)"
        addr, _, port = str(meta.get("master", "")).rpartition(":")
        result.master_addr, result.master_port = addr or None, int(port or 0)
        result.commands = meta.get("commands", {})

    def close(self) -> None:
        pass

    def environments(self) -> list[Mapping[str, str]]:
        """The spec's environment, what every node's ``env.sh`` held (known to the process that
        set the job up: ``slurm.json`` keeps secret values redacted)."""
        return [self.spec.env] if self.spec is not None else []

    def record(self) -> dict[str, Any]:
        """``launch.json``'s ``slurm``: the job id, hosts, script, final state, scontrol's record."""
        meta = {k: v for k, v in self.meta.items() if k not in ("commands", "spec")}
        script = str(Path(str(self.result.run_dir)) / SBATCH_SCRIPT)
        return {"slurm": {**meta, "state": self.state, "script": script, "job": self.info}}

    def _state(self) -> str | None:
        if self.step is not None:
            code = self.step.poll()
            return None if code is None else "COMPLETED" if code == 0 else "FAILED"
        try:
            text = _slurm("scontrol", "show", "job", "-o", str(self.job_id), timeout=30.0)
            self.info = dict(f.split("=", 1) for f in text.split() if "=" in f)
        except AortaError as exc:
            if "Invalid job id" not in str(exc):
                raise
            self.info = {"JobState": "ENDED", "Reason": "no longer known to scontrol"}
        state, why = self.info.get("JobState", "UNKNOWN"), self.info.get("Reason", "None")
        if state != self.seen:
            self.seen = state
            self.emit(f"job {self.job_id} {state}" + (f" ({why})" if why != "None" else ""))
        return state if state in FINAL_STATES or state == "ENDED" else None

    def _stop(self) -> None:
        if self.step is not None:  # srun --quit-on-interrupt ends the step on one SIGINT
            self.step.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.step.wait(timeout=30)
            self.step.kill()
            self.step.wait()
            return
        _slurm("scancel", str(self.job_id))
        end = time.time() + 120.0  # KillWait (30 s by default) and the epilog
        while self._state() is None and time.time() < end:
            time.sleep(0.5)

    def _tail(self) -> None:
        """Every new whole line of each node's log (and of the batch script's own output)."""
        out = self.staging / f"slurm-{self.job_id}.out"  # the batch script's own lines: events
        sinks: dict[Path, EventSink] = {out: lambda t: self.emit(t.removeprefix("launch: "))}
        for k, host in enumerate(_note(self.staging).get("hosts", ())):
            sinks[node_log(self.staging, k)] = partial(self.on_line, Node(k, host))
        for path, sink in sinks.items():
            lines: list[bytes] = []
            with contextlib.suppress(FileNotFoundError), open(path, "rb") as fh:
                fh.seek(self.pos.get(path, 0))
                *lines, rest = fh.read().split(b"\n")  # whole lines only
                self.pos[path] = fh.tell() - len(rest)
            for line in lines:
                sink(line.decode(errors="replace"))
