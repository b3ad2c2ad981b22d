"""``launch``: setup on every node, torchrun everywhere, teardown, gather — in that order,
whatever fails; each phase bounded by a :class:`~aorta.launch.outcome.Deadlines` field.

The run streams each node's lines; the first node to exit non-zero gets every other node
stopped at once (kill-on-bad-exit), and at the run deadline the rest are stopped. Teardown runs
on every node where setup was attempted; gathering pulls every node's output into
``combined_traces/node_<k>/``, also after a failure. Outcomes are kept per node.
"""

from __future__ import annotations

import datetime as _dt
import json
import queue
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from aorta.errors import UsageError
from aorta.report.launch import last_words
from aorta.store.rundir import atomic_write

from .cluster import Cluster, Node, NprocPerNode
from .command import STARTED_MARKER, LaunchSpec, NodeCommand, NodePath, node_dir, run_command
from .fanout import (
    Done,
    SetupReport,
    TimedOut,
    daemon,
    run_parallel,
    setup_nodes,
    stop_node,
    teardown_nodes,
)
from .gather import finalize, node_folder, staging_dir
from .outcome import Deadlines, LaunchFailed, LaunchResult, NodeOutcome
from .preflight import env_diff
from .ssh import NodeSession, SshOptions, SshSession

__all__ = ["DryRun", "dry_run", "launch", "new_run_id", "ssh_sessions", "sweep_spec"]

SessionFactory = Callable[[Cluster], Mapping[str, NodeSession]]
LineSink = Callable[[Node, str], None]
EventSink = Callable[[str], None]


def _ignore(*_args: object) -> None:
    pass


def new_run_id(now: _dt.datetime | None = None) -> str:
    """``2026-11-30T05-12-33-a1b2c3``: UTC time plus 24 random bits (also ``AORTA_RUN_ID``).

    >>> new_run_id(_dt.datetime(2026, 1, 2, 3, 4, 5))[:20]
    '2026-01-02T03-04-05-'
    """
    stamp = (now or _dt.datetime.now(_dt.UTC)).strftime("%Y-%m-%dT%H-%M-%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def ssh_sessions(cluster: Cluster) -> dict[str, NodeSession]:
    """One :class:`~aorta.launch.ssh.SshSession` per node (building them connects nothing)."""
    return {n.name: SshSession(n, SshOptions.for_node(cluster, n)) for n in cluster.nodes}


def sweep_spec(
    recipe: str | Path,
    *,
    command: Sequence[str] = (),
    overrides: Sequence[str] = (),
    nproc_per_node: NprocPerNode | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    ticket: str | None = None,
) -> LaunchSpec:
    """``aorta sweep run --recipe R [-- command]`` under torchrun, the recipe shipped to every
    node (its ``redaction.scrub_env_keys`` also redact the nodes' ``host_env.json``).
    ``overrides`` are one ``--override`` group for the probe ``command``. Raises
    :class:`~aorta.errors.UsageError` for an unreadable recipe or overrides without a command.

    >>> import pathlib, tempfile
    >>> recipe = pathlib.Path(tempfile.mkdtemp()) / "probe.yaml"
    >>> _ = recipe.write_text("mode: probe\\nmitigation_axis: [none]\\n")
    >>> spec = sweep_spec(recipe, command=["python", "train.py"], overrides=["lr=0.1"])
    >>> spec.argv[:4], spec.argv[-3:], spec.overrides
    (('-m', 'aorta', 'sweep', 'run'), ('--', 'python', 'train.py'), ('lr=0.1',))
    """
    path = Path(recipe)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the recipe: {exc.strerror or exc}") from None
    if overrides and not command:
        raise UsageError("--override needs a training command after '--' to pass the overrides to")
    name = "recipe" + (path.suffix if path.suffix in (".yaml", ".yml", ".json") else ".yaml")
    argv = ["-m", "aorta", "sweep", "run", "--recipe", NodePath(name), "--output", NodePath("out")]
    argv += [*(["--ticket", ticket] if ticket else []), *(["--", *command] if command else [])]
    try:  # only this key is read here: the node's sweep validates the whole recipe
        keys = yaml.safe_load(data)["redaction"]["scrub_env_keys"]
    except (yaml.YAMLError, KeyError, TypeError):
        keys = []
    return LaunchSpec(
        argv=tuple(argv),
        nproc_per_node=nproc_per_node,
        overrides=tuple(overrides),
        files={name: data},
        requires=("torch", "aorta"),
        master_addr=master_addr,
        master_port=master_port,
        scrub_env_keys=tuple(k for k in keys if isinstance(k, str))
        if isinstance(keys, list)
        else (),
    )


def _commands(
    cluster: Cluster, spec: LaunchSpec, reports: Mapping[str, SetupReport], **kwargs: Any
) -> dict[str, NodeCommand]:
    return {
        n.name: run_command(
            cluster,
            n,
            spec,
            node_dir=reports[n.name].node_dir,
            cwd=reports[n.name].workdir,
            **kwargs,
        )
        for n in cluster.nodes
        if n.name in reports
    }


class _Launch:
    """One launch's state, phase by phase (what :func:`launch` drives)."""

    def __init__(
        self,
        cluster: Cluster,
        spec: LaunchSpec,
        *,
        output: Path,
        deadlines: Deadlines,
        on_line: LineSink,
        emit: EventSink,
        sessions: SessionFactory,
        run_id: str,
    ) -> None:
        self.cluster, self.spec, self.output, self.deadlines = cluster, spec, output, deadlines
        self.on_line, self.emit, self.t0 = on_line, emit, time.monotonic()
        self.head_token = secrets.token_hex(8)
        self.staging = staging_dir(output, run_id)
        self.folders = {n.name: node_folder(self.staging, n.rank) for n in cluster.nodes}
        for folder in self.folders.values():
            folder.mkdir(parents=True, exist_ok=True)
        self.logs: dict[str, IO[str]] = {
            name: open(folder / "launch.log", "a", encoding="utf-8")  # noqa: SIM115 - closed in finish()
            for name, folder in self.folders.items()
        }
        self.log_lock = threading.Lock()
        outcomes = {
            n.name: NodeOutcome(n, log=self.folders[n.name] / "launch.log") for n in cluster.nodes
        }
        addr = cluster.master_addr(spec.master_addr)
        self.result = LaunchResult(run_id, outcomes, master_addr=addr, master_port=spec.master_port)
        self.outcomes = self.result.outcomes
        self.live = dict(sessions(cluster))
        self.reports: dict[str, SetupReport] = {}
        self.commands: dict[str, NodeCommand] = {}
        self.events: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.stopping: dict[str, str] = {}  # node name → why it is being stopped

    def now(self) -> float:
        return time.monotonic() - self.t0

    def setup(self) -> bool:
        """Set every node up; True when all of them are ready."""
        self.reports = setup_nodes(
            self.live,
            self.spec,
            self.outcomes,
            run_id=self.result.run_id,
            probe_port=self.spec.master_port is None,
            dry_run=False,
            deadlines=self.deadlines,
            head_token=self.head_token,
        )
        self.result.timings["setup"] = self.now()
        for name, out in self.outcomes.items():
            if out.snapshot is not None:
                text = json.dumps(out.snapshot, indent=1) + "\n"
                atomic_write(self.folders[name] / "host_env.json", text)
        self.result.skew = env_diff({name: o.snapshot for name, o in self.outcomes.items()})
        if self.result.skew:
            keys = ", ".join(sorted(self.result.skew)[:6])
            self.emit(
                f"warning: nodes differ in {len(self.result.skew)} setting(s): {keys} (see launch.json)"
            )
        if len(self.reports) < len(self.cluster.nodes):
            self.emit(f"setup failed: {self.result.summary()}")
            return False
        return True

    # -- run ------------------------------------------------------------------------------------

    def _watch(self, name: str) -> None:
        """One node's run (in its own thread): stream its lines, report its end as an event."""
        session, cmd = self.live[name], self.commands[name]
        log = self.logs[name]

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
            result = session.exec(cmd.remote, timeout=timeout, on_line=line, keep_stdin_open=True)
            self.events.put(("exit", name, result))
        except BaseException as exc:
            self.events.put(("error", name, exc))

    def _stop(self, names: list[str], why: str) -> None:
        """Stop ``names`` now, each over a fresh connection, without waiting."""
        for name in [n for n in names if n not in self.stopping]:
            self.stopping[name] = why

            def kill(name: str = name) -> None:
                out = self.outcomes[name]
                try:
                    session, ndir = self.live[name], self.commands[name].node_dir
                    found = stop_node(
                        session, run_id=self.result.run_id, node_dir=ndir, deadlines=self.deadlines
                    )
                    n = int(found.get("terminated", 0))
                    out.teardown = f"stopped {n} process(es)" if n else ""
                except Exception as exc:
                    out.teardown = f"stop failed: {exc}"

            daemon(kill, f"aorta-stop-{name}")

    def run(self) -> None:
        """Start every node's command and wait: until every node ended, or — once a node failed
        or the run deadline passed and the rest were being stopped — the stop's grace ran out."""
        result, d = self.result, self.deadlines
        result.master_port = self.spec.master_port or self.reports[self.cluster.head.name].port
        addr, port = str(result.master_addr), int(result.master_port or 0)
        self.commands = _commands(
            self.cluster,
            self.spec,
            self.reports,
            run_id=result.run_id,
            master_addr=addr,
            master_port=port,
        )
        self.emit(
            f"setup done in {result.timings['setup']:.2f} s; rendezvous {addr}:{port}; "
            f"starting {len(self.commands)} node(s)"
        )
        pending = set(self.commands)
        for name in self.commands:
            daemon(lambda name=name: self._watch(name), f"aorta-run-{name}")
        deadline, give_up = time.monotonic() + d.run, None
        try:
            while pending:
                left = (give_up or deadline) - time.monotonic()
                if left <= 0 and give_up is not None:
                    for name in sorted(pending):
                        out = self.outcomes[name]
                        out.message += (
                            "; " if out.message else ""
                        ) + "its connection did not close after the stop"
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
                    starts = [self.outcomes[n].started_s for n in self.commands]
                    if None not in starts:
                        result.timings["all_started"] = max(s or 0.0 for s in starts)
                    continue
                pending.discard(name)
                if self._ended(name, kind, payload) and give_up is None:
                    give_up = time.monotonic() + d.kill_grace + d.teardown
        except KeyboardInterrupt:
            for name in pending:
                self.outcomes[name].status = "interrupted"
            self._stop(sorted(pending), "interrupted")
            raise
        finally:
            result.timings["run"] = self.now() - result.timings["setup"]

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
        code = payload.exit_code if kind == "exit" else None
        out.exit_code = code
        if out.status in ("timeout", "interrupted"):
            return False
        if code == 0:
            out.status, out.message = "ok", ""
            return False
        if name in self.stopping:
            out.status, out.message = "stopped", f"because {self.stopping[name]}"
            return False
        last = last_words(payload.stdout) if kind == "exit" else ""
        message = str(payload) if kind == "error" else f"exited with code {code}"
        out.status, out.message = (
            "failed",
            message + (f" (last words: {last[:160]})" if last else ""),
        )
        others = sorted(n for n in self.commands if self.outcomes[n].ended_s is None)
        if others:
            self.emit(f"{out.node.label} {out.message}: stopping {', '.join(others)}")
            self._stop(others, f"{out.node.label} failed")
        return True

    # -- teardown, gather, the record --------------------------------------------------------

    def finish(self) -> None:
        """Teardown, gathering and the final name — whatever happened before."""
        result = self.result
        try:
            t = time.monotonic()
            found = self._teardown()
            result.timings["teardown"] = time.monotonic() - t
            t = time.monotonic()
            self._gather(found)
            result.timings["collect"] = time.monotonic() - t
        finally:
            for session in self.live.values():
                session.close()
            with self.log_lock:
                for log in self.logs.values():
                    log.close()
            result.run_dir = finalize(self.staging, self.output, result.run_id)
            for out in self.outcomes.values():
                out.log = node_folder(result.run_dir, out.node.rank) / "launch.log"
            result.timings["total"] = self.now()
            record = result.to_dict()
            record["commands"] = {name: c.describe() for name, c in self.commands.items()}
            text = json.dumps(record, indent=1, default=str) + "\n"
            atomic_write(result.run_dir / "launch.json", text)
            self.emit(f"{result.status}: results in {result.run_dir}")

    def _teardown(self) -> dict[str, dict[str, Any]]:
        # Every node where setup was attempted; a node never connected to has nothing to stop.
        attempted = {
            n.name: self.reports[n.name].node_dir
            if n.name in self.reports
            else node_dir(n, self.result.run_id)
            for n in self.cluster.nodes
            if self.outcomes[n.name].status != "unreachable"
        }
        head = self.reports.get(self.cluster.head.name)
        return teardown_nodes(
            self.live,
            self.outcomes,
            run_id=self.result.run_id,
            dirs=attempted,
            deadlines=self.deadlines,
            head=(head.node_dir, self.head_token) if head else None,
        )

    def _gather(self, found: Mapping[str, Mapping[str, Any]]) -> None:
        """Pull each node's output folder and — when it does not share the head's file system —
        the head's output path, where its ranks wrote into the run directory rank 0 published."""
        timeout = (
            min(self.deadlines.collect, 30.0) if self.result.interrupted else self.deadlines.collect
        )
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

        for name, res in run_parallel(
            sources, one, timeout=timeout + 5.0, name="aorta-collect"
        ).items():
            out = self.outcomes[name]
            if isinstance(res, Done):
                out.collected = res.value
            elif isinstance(res, TimedOut):
                out.collected = f"not collected: still copying after {timeout:g} s"
            else:
                out.collected = f"not collected: {res.error}"


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
    """Run ``spec`` on every node of ``cluster`` under torchrun; gather the results under
    ``output`` (named after the head's run directory, else ``<output>/_launch_/<run id>``).

    ``on_line(node, line)`` gets every output line of every node (from several threads),
    ``on_event(line)`` each step of the launch; ``sessions`` maps a cluster to its node
    sessions (default :func:`ssh_sessions`, Fabric). Returns the :class:`LaunchResult` when
    every node exited 0; raises :class:`LaunchFailed` carrying it otherwise (a node failed,
    timed out or was unreachable), :class:`ClusterError` for a rendezvous address that cannot
    work, and ``KeyboardInterrupt`` after stopping every node and gathering what there was.
    A node that refuses connections fails the launch at setup; the record still lands:

    >>> import tempfile
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
    state = _Launch(
        cluster,
        spec,
        output=Path(output),
        deadlines=deadlines,
        on_line=on_line or _ignore,
        emit=on_event or _ignore,
        sessions=sessions or ssh_sessions,
        run_id=run_id or new_run_id(),
    )
    try:
        if state.setup():
            state.run()
    except KeyboardInterrupt:
        state.result.interrupted = True
        raise
    finally:
        state.finish()
    if state.result.status != "complete":
        raise LaunchFailed(state.result)
    return state.result


@dataclass
class DryRun:
    """What ``--dry-run`` found: each node's exact command, reachability and versions."""

    run_id: str
    master_addr: str
    master_port: int | None
    commands: dict[str, NodeCommand]
    outcomes: dict[str, NodeOutcome]
    skew: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every node reachable and ready (Python works, required modules importable)."""
        return len(self.commands) == len(self.outcomes)


def dry_run(
    cluster: Cluster,
    spec: LaunchSpec,
    *,
    deadlines: Deadlines = Deadlines(),
    sessions: SessionFactory | None = None,
) -> DryRun:
    """Check every node (reachable, snapshot, ``spec.requires``, the head's free port) within
    ``deadlines.setup`` and build each ready node's command; create or start nothing.

    >>> c = Cluster.from_dict({"node_dict": {"127.0.0.1": {"port": 1}}, "connect_timeout": 2})
    >>> report = dry_run(c, LaunchSpec(argv=("train.py",)))
    >>> report.ok, report.outcomes["node0"].status
    (False, 'unreachable')
    >>> "connection refused" in report.outcomes["node0"].message
    True
    """
    run_id = new_run_id()
    addr = cluster.master_addr(spec.master_addr)
    outcomes = {n.name: NodeOutcome(n) for n in cluster.nodes}
    live = (sessions or ssh_sessions)(cluster)
    try:
        reports = setup_nodes(
            live,
            spec,
            outcomes,
            run_id=run_id,
            probe_port=spec.master_port is None,
            dry_run=True,
            deadlines=deadlines,
        )
    finally:
        for session in live.values():
            session.close()
    head = reports.get(cluster.head.name)
    port = spec.master_port or (head.port if head else None)
    for name in reports:
        outcomes[name].status = "ok"
    commands = (
        _commands(cluster, spec, reports, run_id=run_id, master_addr=addr, master_port=port)
        if port
        else {}
    )
    skew = env_diff({name: o.snapshot for name, o in outcomes.items()})
    return DryRun(run_id, addr, port, commands, outcomes, skew)
