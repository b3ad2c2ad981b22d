"""The SSH backend of :func:`~aorta.launch.backend.drive`'s lifecycle: :class:`SshLaunch` runs
each node's part with the node's own Python, or inside a container per node (the cluster's
``container:`` block, :class:`~aorta.launch.container.ContainerSession`). ``launch`` drives it (setup, start, wait, teardown, gathering — whatever fails, each wait
bounded by a :class:`~aorta.recipe.launch_spec.Deadlines` field); ``dry_run`` runs its setup checks
only. The first node to exit non-zero gets the others stopped (kill-on-bad-exit). ``run`` is
``aorta launch``'s one entry point: it picks Slurm or one of these from a ``LaunchOptions``.
"""

from __future__ import annotations

import functools
import json
import queue
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from aorta.fanout import TimedOut, daemon, run_parallel
from aorta.recipe.cluster import Cluster, Node, load_cluster
from aorta.recipe.launch_spec import Deadlines, LaunchOptions, LaunchSpec, launch_job
from aorta.store.gather import new_run_id, node_folder, node_log, staging_dir
from aorta.store.rundir import HOST_ENV, atomic_write

from .backend import EventSink, LineSink, drive, ignore, why
from .container import ContainerSession, aorta_requirements
from .node_command import (
    STARTED_MARKER,
    env_file_command,
    env_script,
    kill_command,
    node_dir,
    node_env,
    run_command,
    setup_command,
)
from .outcome import Launched, LaunchResult, NodeOutcome, env_diff
from .slurm import run_in_job, run_slurm
from .ssh import ExecResult, NodeSession, RemoteError, Unreachable, ssh_sessions

__all__ = ["SshLaunch", "describe_kill", "dry_run", "last_words", "launch", "run"]

SessionFactory = Callable[[Cluster], Mapping[str, NodeSession]]


class SetupFailed(RemoteError):
    """A node was reached but is not ready (its Python, torch or aorta is missing, ...)."""


def _reply(result: ExecResult) -> dict[str, Any]:  # the node helper's JSON line, its last
    reply: dict[str, Any] = json.loads(result.stdout.strip().rsplit("\n", 1)[-1])
    return reply


def describe_kill(report: Mapping[str, Any], before: str = "") -> str:
    """What a node's teardown found, from the node helper's ``kill`` report."""
    if report.get("fallback"):
        return "the node's Python could not run the cleanup: killed the pid file's session only"
    if report.get("left"):
        return f"{len(report['left'])} process(es) still running after SIGKILL: {report['left']}"
    n = int(report.get("terminated", 0))
    now = f"stopped {n} leftover process(es)" if n else "nothing left"
    return f"{before}; {now}" if before else now


def last_words(text: str) -> str:
    """The line of a failed node's output most likely to say why.

    torchrun ends a failure with its own traceback and a ``ChildFailedError`` box; the line
    before that traceback (the worker's last words) says more. Lines without a letter or digit
    (``=====``) never do.

    >>> last_words("loss nan\\nTraceback (most recent call last):\\n  torch.distributed.elastic ...\\n===")
    'loss nan'
    """
    lines = [line.strip() for line in text.splitlines() if any(c.isalnum() for c in line)]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call")]
    tail = lines[starts[-1] :] if starts and starts[-1] > 0 else []
    if any("torch" in line and "distributed" in line for line in tail):
        lines = lines[: starts[-1]]
    return lines[-1] if lines else ""


@dataclass
class SetupReport:
    """What setup learned on one node (the node helper's JSON line)."""

    node_dir: str
    workdir: str
    port: int | None
    snapshot: dict[str, Any]


def _parse_setup(node: Node, result: ExecResult) -> SetupReport:
    if result.exit_code == 127:
        raise SetupFailed(f"setup failed: {node.python}: command not found")
    if result.exit_code != 0:
        raise SetupFailed(f"setup failed: {result.cause}")
    try:
        data = _reply(result)
    except ValueError:
        raise SetupFailed(f"setup printed no report: {result.cause!r}") from None
    if data.get("missing"):
        raise SetupFailed(f"{', '.join(data['missing'])} cannot be imported by {node.python}")
    return SetupReport(data["node_dir"], data["workdir"], data.get("port"), data["snapshot"])


class SshLaunch:
    """The SSH backend (a :class:`~aorta.launch.backend.Backend`): each node's own Python runs
    the node helper and the program, over its session — with a ``container:`` block, through
    the node's :class:`~aorta.launch.container.ContainerSession` (setup probes the node and
    starts or finds the container first; teardown gives the run's files back and removes a
    ``per_run`` one). With an ``output``, node logs and snapshots go to the staging folder
    :func:`~aorta.launch.backend.drive` names."""

    def __init__(
        self,
        cluster: Cluster,
        spec: LaunchSpec,
        *,
        deadlines: Deadlines,
        sessions: SessionFactory | None = None,
        run_id: str | None = None,
        output: Path | None = None,
        on_line: LineSink = ignore,
        emit: EventSink = ignore,
        dry_run: bool = False,
    ) -> None:
        run_id = run_id or new_run_id()
        self.cluster, self.spec, self.deadlines, self.run_id = cluster, spec, deadlines, run_id
        self.on_line, self.emit, self.dry, self.t0 = on_line, emit, dry_run, time.monotonic()
        addr = cluster.master_addr(spec.master_addr)
        outcomes = {n.name: NodeOutcome(n) for n in cluster.nodes}
        self.result = LaunchResult(run_id, outcomes, master_addr=addr, master_port=spec.master_port)
        self.outcomes, self.commands = self.result.outcomes, self.result.commands
        self.logs: dict[str, IO[str]] = {}
        self.staging = staging_dir(output or Path(), run_id)
        if output is not None:
            for out in outcomes.values():
                out.log = node_log(self.staging, out.node.rank)
                out.log.parent.mkdir(parents=True, exist_ok=True)
                self.logs[out.node.name] = open(out.log, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.log_lock = threading.Lock()
        self.head_token = secrets.token_hex(8)
        live, box = dict((sessions or ssh_sessions)(cluster)), cluster.container
        self.boxes = {n: ContainerSession(s, box, run_id) for n, s in live.items()} if box else {}
        self.live: dict[str, NodeSession] = {**live, **self.boxes}
        self.reports: dict[str, SetupReport] = {}
        self.found: dict[str, dict[str, Any]] = {}  # teardown's report per node
        self.events: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.pending: set[str] = set()  # started, not ended
        self.stopping: dict[str, tuple[str, threading.Event]] = {}  # node → why, stop returned

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _prepare(self, name: str, cancel: threading.Event) -> LaunchSpec:
        """Setup's first step on a node (a container's: probe, start or find, ship aorta); the
        spec its setup checks (in a container, aorta's dependencies too, not aorta itself in a
        dry run's throwaway one)."""
        if name not in self.boxes:
            return self.spec
        self.boxes[name].prepare(timeout=self.deadlines.setup, cancel=cancel, dry_run=self.dry)
        needs = [m for m in self.spec.requires if not (self.dry and m == "aorta")]
        extra = aorta_requirements() if "aorta" in self.spec.requires else ()
        return replace(self.spec, requires=tuple(dict.fromkeys([*needs, *extra])))

    def environments(self) -> list[Mapping[str, str]]:
        """The cluster's ``env_vars`` (each node's), the spec's environment, the container's."""
        box = [self.cluster.container.env] if self.cluster.container else []
        return [*(n.env_vars for n in self.cluster.nodes), self.spec.env, *box]

    def record(self) -> dict[str, Any]:
        return {}

    # -- setup --------------------------------------------------------------------------------

    def setup(self) -> bool:
        """Set every node up at once; True when all are ready. Failures land in the outcomes
        (``unreachable``, ``setup_failed``, ``timeout``: a straggler tears itself down)."""
        results = run_parallel(
            self.live, self._setup_one, timeout=self.deadlines.setup, name="aorta-setup"
        )
        for name, report in results.succeeded.items():
            self.reports[name], self.outcomes[name].snapshot = report, report.snapshot
        for name, exc in results.failed.items():
            out, timed_out = self.outcomes[name], isinstance(exc, TimedOut)
            out.status = "unreachable" if isinstance(exc, Unreachable) else "setup_failed"
            out.status, out.message = "timeout" if timed_out else out.status, why(exc)
        for out in self.outcomes.values():
            if out.snapshot is not None and out.log is not None:
                atomic_write(out.log.parent / HOST_ENV, json.dumps(out.snapshot, indent=1) + "\n")
        self.result.skew = skew = env_diff({name: o.snapshot for name, o in self.outcomes.items()})
        if skew:
            keys = ", ".join(sorted(skew)[:6])
            self.emit(f"warning: nodes differ in {len(skew)} setting(s): {keys} (see launch.json)")
        if len(self.reports) < len(self.cluster.nodes):
            self.emit(f"setup failed: {self.result.summary()}")
            return False
        return True

    def _setup_one(self, name: str, cancel: threading.Event) -> SetupReport:
        """Setup (a container's first), then — unless a dry run — the node's 0600 env file."""
        session, d, box = self.live[name], self.deadlines, self.boxes.get(name)
        node, head = session.node, session.node.rank == 0
        cmd, stdin = setup_command(
            node,
            self._prepare(name, cancel),
            run_id=self.run_id,
            probe_port=head and self.spec.master_port is None,
            dry_run=self.dry,
            head_token=self.head_token if head and not self.dry else None,
        )
        result = session.exec(cmd, stdin=stdin, timeout=d.setup)
        try:
            report = _parse_setup(node, result)
        except SetupFailed as exc:
            raise SetupFailed(f"{exc} (in image {box.spec.image})" if box else str(exc)) from None
        if box:
            report.snapshot["container"] = box.snapshot()
        if self.dry:
            return report
        if cancel.is_set():  # a straggler: the launch gave up on this node, undo what setup made
            self.stop(name, report.node_dir)
            return report
        env = node_env(node, self.spec, run_id=self.run_id, node_dir=report.node_dir)
        line = env_file_command(report.node_dir)
        env = box.run_env(env) if box else env
        written = session.exec(line, stdin=env_script(env), timeout=d.setup)
        if written.exit_code != 0:
            raise SetupFailed(f"cannot write the environment file: {written.cause}")
        return report

    def stop(self, name: str, ndir: str, **head: str | None) -> dict[str, Any]:
        """Stop everything this run started on one node, over a fresh connection; return the
        helper's report (``head``: see :func:`~aorta.launch.node_command.kill_command`)."""
        session, d = self.live[name], self.deadlines
        cmd, stdin = kill_command(
            session.node, run_id=self.run_id, node_dir=ndir, grace=d.kill_grace, **head
        )
        result = session.exec(cmd, stdin=stdin, timeout=d.kill_grace + d.teardown, fresh=True)
        if result.exit_code != 0:
            raise RemoteError(result.cause)
        return _reply(result)

    def plan(self) -> None:
        """The rendezvous port — the spec's, else the one setup found free on the head — and
        each ready node's command (none when the head was not reached: no port)."""
        head = self.reports.get(self.cluster.head.name)
        port = self.result.master_port = self.spec.master_port or (head.port if head else None)
        if port is None:
            return
        for name, report in self.reports.items():
            command = run_command(
                self.cluster,
                self.live[name].node,
                self.spec,
                run_id=self.run_id,
                node_dir=report.node_dir,
                cwd=report.workdir,
                master_addr=str(self.result.master_addr),
                master_port=port,
            )
            box = tuple(self.boxes[name].describe()) if name in self.boxes else ()
            self.commands[name] = replace(command, container=box)

    # -- start, wait --------------------------------------------------------------------------

    def start(self) -> None:
        """Start every node's command, each streamed by a thread of its own."""
        result = self.result
        self.plan()
        self.emit(
            f"setup done in {result.timings['setup']:.2f} s; rendezvous "
            f"{result.master_addr}:{result.master_port}; starting {len(self.commands)} node(s)"
        )
        self.pending = set(self.commands)
        for name in self.commands:
            daemon(functools.partial(self._watch, name), f"aorta-run-{name}")

    def _watch(self, name: str) -> None:
        """One node's run (in its own thread): stream its lines, report its end as an event."""
        session, log = self.live[name], self.logs[name]

        def line(text: str) -> None:
            if text.startswith(STARTED_MARKER):
                self.events.put(("started", name, self.now()))
                return
            with self.log_lock:
                if not log.closed:
                    log.write(text + "\n")
                    log.flush()
            self.on_line(session.node, text)

        d = self.deadlines
        try:
            # stdin stays open: the node's watchdog stops the run when this channel closes
            timeout = d.run + d.kill_grace + d.teardown + 60.0
            remote = self.commands[name].remote
            result = session.exec(remote, timeout=timeout, on_line=line, keep_stdin_open=True)
            self.events.put(("exit", name, result))
        except BaseException as exc:
            self.events.put(("error", name, exc))

    def _stop(self, names: list[str], reason: str) -> None:
        """Stop ``names`` now, each over a fresh connection, without waiting."""
        for name in [n for n in names if n not in self.stopping]:
            self.stopping[name] = (reason, returned := threading.Event())

            def kill(name: str = name, returned: threading.Event = returned) -> None:
                out = self.outcomes[name]
                try:
                    n = int(self.stop(name, self.commands[name].node_dir).get("terminated", 0))
                    out.teardown = f"stopped {n} process(es)" if n else ""
                except Exception as exc:
                    out.teardown = f"stop failed: {exc}"
                finally:
                    returned.set()

            daemon(kill, f"aorta-stop-{name}")

    def wait(self) -> None:
        """Until every node ended, or — once a node failed or the run deadline passed and the
        rest were being stopped — the stop's grace ran out."""
        d, pending = self.deadlines, self.pending
        deadline, give_up = time.monotonic() + d.run, None
        try:
            while pending:
                left = (give_up or deadline) - time.monotonic()
                if left <= 0 and give_up is not None:
                    for out in (self.outcomes[name] for name in sorted(pending)):
                        sep = "; " if out.message else ""
                        out.message += f"{sep}its connection did not close after the stop"
                    return
                if left <= 0:
                    self._timeout(sorted(pending))
                    give_up = time.monotonic() + d.kill_grace + d.teardown
                    continue
                try:
                    kind, name, payload = self.events.get(timeout=left)
                except queue.Empty:
                    continue
                if kind == "started":
                    self.outcomes[name].started_s = payload
                    continue
                pending.discard(name)
                if self._ended(name, kind, payload) and give_up is None:
                    give_up = time.monotonic() + d.kill_grace + d.teardown
        except KeyboardInterrupt:
            for name in pending:
                self.outcomes[name].status = "interrupted"
            self._stop(sorted(pending), "interrupted")
            raise

    def _timeout(self, names: list[str]) -> None:
        for name in names:
            out = self.outcomes[name]
            out.status, out.ended_s = "timeout", self.now()
            out.message = f"still running after the {self.deadlines.run:g} s run deadline"
        self.emit(f"run deadline ({self.deadlines.run:g} s) passed: stopping {', '.join(names)}")
        self._stop(names, "run deadline")

    def _ended(self, name: str, kind: str, payload: Any) -> bool:
        """Record one node's end; start stopping the others when it failed. True if it did."""
        out = self.outcomes[name]
        out.ended_s = self.now()
        if kind == "error" and isinstance(payload, KeyboardInterrupt):
            raise payload
        out.exit_code = code = payload.exit_code if kind == "exit" else None
        if out.status in ("timeout", "interrupted"):
            return False
        if code == 0:
            out.status, out.message = "ok", ""
            return False
        if name in self.stopping:
            out.status, out.message = "stopped", f"because {self.stopping[name][0]}"
            return False
        last = last_words(payload.stdout) if kind == "exit" else ""
        out.status = "failed"
        out.message = str(payload) if kind == "error" else f"exited with code {code}"
        out.message += f" (last words: {last[:160]})" if last else ""
        others = sorted(n for n in self.commands if self.outcomes[n].ended_s is None)
        if others:
            self.emit(f"{out.node.label} {out.message}: stopping {', '.join(others)}")
            self._stop(others, f"{out.node.label} failed")
        return True

    # -- teardown, gather ---------------------------------------------------------------------

    def close(self) -> None:
        for session in self.live.values():
            session.close()
        with self.log_lock:
            for log in self.logs.values():
                log.close()

    def teardown(self) -> None:
        """Stop what this run left on every node where setup was attempted; each report says
        whether the node shares the head's disk and sees its output path (``kill_command``)."""
        d, head = self.deadlines, self.reports.get(self.cluster.head.name)
        where = {"head_dir": head.node_dir, "head_token": self.head_token} if head else {}
        # A node's run ends as _stop's kill ends its processes, maybe before that stop's reply:
        # teardown's stop ran beside it, and the late reply overwrote its report (both bounded).
        bound = time.monotonic() + d.kill_grace + d.teardown
        for _, returned in self.stopping.values():
            returned.wait(max(0.0, bound - time.monotonic()))
        tried = [n for n in self.cluster.nodes if self.outcomes[n.name].status != "unreachable"]
        made = {name: report.node_dir for name, report in self.reports.items()}
        dirs = {n.name: made.get(n.name) or node_dir(n, self.run_id) for n in tried}

        def one(name: str, cancel: threading.Event) -> dict[str, Any]:
            stop = functools.partial(self.stop, name, dirs[name], **where)
            box = self.boxes.get(name)
            return box.teardown(stop, timeout=d.teardown, wait=d.setup) if box else stop()

        more = d.setup + 2 * d.teardown if self.boxes else 0.0  # `docker run` in flight, `rm`
        timeout = d.kill_grace + d.teardown + 5.0 + more
        results = run_parallel(dirs, one, timeout=timeout, name="aorta-teardown")
        for name, exc in results.failed.items():
            self.outcomes[name].teardown = f"teardown failed: {why(exc)}: processes may be left"
        self.found = results.succeeded
        for name, report in self.found.items():
            out = self.outcomes[name]
            out.teardown = describe_kill(report, out.teardown)
            out.teardown += f"; {report['container']}" if report.get("container") else ""

    def gather(self) -> None:
        """Pull each node's output folder and — if it does not share the head's disk — the
        head's output path, where its ranks wrote into the run directory rank 0 published."""
        collect, found = self.deadlines.collect, self.found
        timeout = min(collect, 30.0) if self.result.interrupted else collect
        head = self.reports.get(self.cluster.head.name)
        sources: dict[str, list[str]] = {}
        for name, report in self.reports.items():
            seen = found.get(name, {})
            sources[name] = [f"{report.node_dir}/out"]
            if head and report is not head and seen.get("head_out") and not seen.get("shares_head"):
                sources[name].append(f"{head.node_dir}/out")

        def one(name: str, cancel: threading.Event) -> str:
            session = self.live[name]
            dest = node_folder(self.staging, session.node.rank)
            how = " + ".join(session.pull(src, dest, timeout=timeout) for src in sources[name])
            shared = name != self.cluster.head.name and found.get(name, {}).get("shares_head")
            note = " (shares the head's file system: its ranks wrote into the run directory)"
            return how + (note if shared else "")

        results = run_parallel(sources, one, timeout=timeout + 5.0, name="aorta-collect")
        for name, exc in results.failed.items():
            self.outcomes[name].collected = f"not collected: {why(exc)}"
        for name, how in results.succeeded.items():
            self.outcomes[name].collected = how


def launch(
    cluster: Cluster,
    spec: LaunchSpec,
    *,
    output: str | Path = "triage_results",
    deadlines: Deadlines = Deadlines(),
    on_line: LineSink | None = None,
    on_event: EventSink | None = None,
    sessions: SessionFactory | None = None,
    run_id: str | None = None,
) -> LaunchResult:
    """Run ``spec`` on every node of ``cluster``; gather the results under ``output`` (named
    after the head's run directory, else ``<output>/_launch_/<run id>``).

    ``on_line(node, line)`` gets every node's output lines (from several threads), ``on_event``
    each step; ``sessions`` maps a cluster to node sessions (default: Fabric). Returns the
    :class:`LaunchResult` when every node exited 0, else raises ``LaunchFailed`` carrying
    it — also for a node refusing connections, whose record still lands:

    >>> import tempfile
    >>> from aorta.launch import LaunchFailed
    >>> c = Cluster.from_dict({"node_dict": {"127.0.0.1": {"port": 1}}, "connect_timeout": 2})
    >>> spec = LaunchSpec(argv=("-m", "my_training", "--epochs", "1"), nproc_per_node=8)
    >>> try:
    ...     launch(c, spec, output=tempfile.mkdtemp())
    ... except LaunchFailed as exc:
    ...     print(exc.result.status, exc.result.outcomes["node0"].status)
    ...     print((exc.result.run_dir / "launch.json").is_file())
    failed unreachable
    True
    """
    emit = on_event or ignore
    backend = SshLaunch(
        cluster,
        spec,
        deadlines=deadlines,
        sessions=sessions,
        run_id=run_id,
        output=Path(output),
        on_line=on_line or ignore,
        emit=emit,
    )
    return drive(backend, emit=emit)


def dry_run(
    cluster: Cluster,
    spec: LaunchSpec,
    *,
    deadlines: Deadlines = Deadlines(),
    sessions: SessionFactory | None = None,
) -> LaunchResult:
    """Check every node (reachable, snapshot, ``spec.requires``, the head's free port) and
    build each ready node's command; create or start nothing. Every node ready: ``status`` is
    ``"complete"``; ``commands`` holds each ready node's :class:`NodeCommand`.

    >>> c = Cluster.from_dict({"node_dict": {"127.0.0.1": {"port": 1}}, "connect_timeout": 2})
    >>> report = dry_run(c, LaunchSpec(argv=("train.py",)))
    >>> report.status, report.outcomes["node0"].status
    ('failed', 'unreachable')
    >>> "connection refused" in report.outcomes["node0"].message
    True
    """
    state = SshLaunch(cluster, spec, deadlines=deadlines, sessions=sessions, dry_run=True)
    try:
        state.setup()
    finally:
        state.close()
    for name in state.reports:
        state.outcomes[name].status = "ok"
    state.plan()
    return state.result


def run(
    options: LaunchOptions, *, on_line: LineSink | None = None, on_event: EventSink | None = None
) -> Launched:
    """The one entry point of ``aorta launch``: what ``options`` runs (:func:`launch_job`), on
    the backend they pick — Slurm (``slurm``), else SSH on the cluster file's nodes (in a
    container per node when the file or ``container`` names an image) — or only checked
    (``dry_run``). ``on_line``/``on_event``: as :func:`launch`'s. Raises ``UsageError`` for bad
    options, :class:`LaunchFailed` when a node did not finish.

    >>> import tempfile
    >>> run(LaunchOptions(cluster=tempfile.mktemp()))
    Traceback (most recent call last):
    ...
    aorta.errors.UsageError: give --recipe FILE (the recipe every node sweeps)
    """
    emit, o = on_event or ignore, options
    if o.slurm and o.in_job is not None:
        return Launched(exit_code=run_in_job(Path(o.in_job), emit))
    # A CVS config's train_script runs with the cluster's interpreter: read the cluster first.
    cluster = None if o.slurm or o.cvs_config is None else _cluster(o)
    job = launch_job(o, cluster)
    for warning in job.warnings if job else ():
        emit(f"warning: {o.cvs_config}: {warning}")
    run_s = o.run_timeout or (job.run_timeout if job else None) or Deadlines.run
    if o.slurm:
        spec = job.spec if job and o.attach is None else None
        o = replace(o, run_timeout=run_s)
        return run_slurm(spec, o, on_line=on_line or ignore, emit=emit)
    assert job is not None
    cluster = cluster or _cluster(o)
    for warning in cluster.warnings:
        emit(f"warning: {o.cluster}: {warning}")
    deadlines = Deadlines(setup=o.setup_timeout, run=run_s, collect=o.collect_timeout)
    if o.dry_run:
        return Launched(dry_run(cluster, job.spec, deadlines=deadlines))
    result = launch(
        cluster, job.spec, output=o.output, deadlines=deadlines, on_line=on_line, on_event=on_event
    )
    return Launched(result)


def _cluster(options: LaunchOptions) -> Cluster:
    cluster = load_cluster(options.cluster)
    return cluster if options.container is None else cluster.with_image(options.container)
