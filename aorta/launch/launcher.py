"""``launch``: set up every node, run torchrun everywhere, tear down, collect — in that order,
whatever fails.

The steps, each bounded by a :class:`~aorta.launch.outcome.Deadlines` field:

1. **setup** (all nodes at once) — connect, create ``<workdir>/.aorta-launch/<run id>/node_<k>/``,
   ship the recipe, snapshot the environment, probe the rendezvous port on the head;
2. **run** — start torchrun on every node (static rendezvous on the head, node rank = position
   in the cluster), stream each line as ``[node<k> host] ...``, stop everyone when one node fails;
3. **teardown** — on every node where setup was attempted, stop whatever this run left;
4. **gather** — pull every node's per-run output into ``combined_traces/node_<k>/``, then name
   the result after the head's run directory.

:func:`launch` returns a :class:`LaunchResult` when every node finished with exit code 0 and
raises :class:`LaunchFailed` (carrying the same result, every node's outcome included) otherwise.
"""

from __future__ import annotations

import datetime as _dt
import json
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from aorta.errors import UsageError
from aorta.store.rundir import atomic_write

from .cluster import Cluster, Node, NprocPerNode
from .command import LaunchSpec, NodeCommand, NodePath, node_dir, run_command
from .fanout import Done, RunPhase, SetupReport, TimedOut, run_parallel, setup_nodes, teardown_nodes
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
    """The spec of ``aorta launch``: ``aorta sweep run --recipe R [-- command]`` under torchrun.

    The recipe is shipped to every node (nodes need not share a file system) and each node's
    sweep writes under its per-run folder, which the launch gathers. The recipe's
    ``redaction.scrub_env_keys`` also redact the nodes' ``host_env.json``. ``command`` is the probe
    command (after ``--``); ``overrides`` are appended to it as one ``--override`` group.

    Raises
    ------
    UsageError
        The recipe cannot be read, or ``overrides`` were given without a ``command``.

    Examples
    --------
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
    argv: list[str | NodePath] = [
        "-m",
        "aorta",
        "sweep",
        "run",
        "--recipe",
        NodePath(name),
        "--output",
        NodePath("out"),
    ]
    if ticket:
        argv += ["--ticket", ticket]
    if command:
        argv += ["--", *command]
    return LaunchSpec(
        argv=tuple(argv),
        nproc_per_node=nproc_per_node,
        overrides=tuple(overrides),
        files={name: data},
        requires=("torch", "aorta"),
        master_addr=master_addr,
        master_port=master_port,
        scrub_env_keys=_scrub_env_keys(data),
    )


def _scrub_env_keys(recipe: bytes) -> tuple[str, ...]:
    # Only this key is read here: the node's sweep validates the whole recipe.
    try:
        data = yaml.safe_load(recipe)
        keys = data["redaction"]["scrub_env_keys"]
    except (yaml.YAMLError, KeyError, TypeError):
        return ()
    return tuple(k for k in keys if isinstance(k, str)) if isinstance(keys, list) else ()


class _Logs:
    """Each node's lines: appended to its ``launch.log`` and handed to the caller's sink."""

    def __init__(self, folders: Mapping[str, Path], sink: LineSink) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._files: dict[str, IO[str]] = {
            name: open(folder / "launch.log", "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            for name, folder in folders.items()
        }

    def line(self, node: Node, text: str) -> None:
        with self._lock:
            fh = self._files.get(node.name)
            if fh is not None:
                fh.write(text + "\n")
                fh.flush()
        self._sink(node, text)

    def close(self) -> None:
        with self._lock:
            for fh in self._files.values():
                fh.close()
            self._files.clear()


def _commands(
    cluster: Cluster,
    spec: LaunchSpec,
    reports: Mapping[str, SetupReport],
    *,
    run_id: str,
    addr: str,
    port: int,
) -> dict[str, NodeCommand]:
    return {
        n.name: run_command(
            cluster,
            n,
            spec,
            run_id=run_id,
            node_dir=reports[n.name].node_dir,
            master_addr=addr,
            master_port=port,
            cwd=reports[n.name].workdir,
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
        self.cluster, self.spec, self.output, self.deadlines, self.emit = (
            cluster,
            spec,
            output,
            deadlines,
            emit,
        )
        self.t0 = time.monotonic()
        self.head_token = secrets.token_hex(8)
        self.staging = staging_dir(output, run_id)
        self.folders = {n.name: node_folder(self.staging, n.rank) for n in cluster.nodes}
        for folder in self.folders.values():
            folder.mkdir(parents=True, exist_ok=True)
        outcomes = {
            n.name: NodeOutcome(n, log=self.folders[n.name] / "launch.log") for n in cluster.nodes
        }
        addr = cluster.master_addr(spec.master_addr)
        self.result = LaunchResult(run_id, outcomes, master_addr=addr, master_port=spec.master_port)
        self.logs = _Logs(self.folders, on_line)
        self.live = dict(sessions(cluster))
        self.reports: dict[str, SetupReport] = {}
        self.commands: dict[str, NodeCommand] = {}

    @property
    def outcomes(self) -> dict[str, NodeOutcome]:
        return self.result.outcomes

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
        self.result.timings["setup"] = time.monotonic() - self.t0
        _record_snapshots(self.result, self.folders, self.emit)
        if len(self.reports) < len(self.cluster.nodes):
            self.emit(f"setup failed: {self.result.summary()}")
            return False
        return True

    def run(self) -> None:
        """Start every node's torchrun and wait (kill-on-bad-exit, run deadline)."""
        result = self.result
        result.master_port = self.spec.master_port or self.reports[self.cluster.head.name].port
        addr, port = str(result.master_addr), int(result.master_port or 0)
        self.commands = _commands(
            self.cluster, self.spec, self.reports, run_id=result.run_id, addr=addr, port=port
        )
        self.emit(
            f"setup done in {result.timings['setup']:.2f} s; rendezvous {addr}:{port}; "
            f"starting {len(self.commands)} node(s)"
        )
        phase = RunPhase(
            self.live,
            self.commands,
            self.outcomes,
            run_id=result.run_id,
            deadlines=self.deadlines,
            on_line=self.logs.line,
            on_event=self.emit,
            t0=self.t0,
        )
        try:
            phase.run()
        finally:
            if phase.all_started_s is not None:
                result.timings["all_started"] = phase.all_started_s
            result.timings["run"] = time.monotonic() - self.t0 - result.timings["setup"]

    def finish(self) -> None:
        """Teardown, gathering and the final name — whatever happened before."""
        result = self.result
        try:
            t = time.monotonic()
            found = self._teardown()
            result.timings["teardown"] = time.monotonic() - t
            t = time.monotonic()
            timeout = (
                min(self.deadlines.collect, 30.0) if result.interrupted else self.deadlines.collect
            )
            shared = frozenset(
                n
                for n, seen in found.items()
                if seen.get("shares_head") and n != self.cluster.head.name
            )
            self._gather(self._sources(found), timeout=timeout, shared=shared)
            result.timings["collect"] = time.monotonic() - t
        finally:
            self.logs.close()
            result.run_dir = finalize(self.staging, self.output, result.run_id)
            for out in self.outcomes.values():
                out.log = node_folder(result.run_dir, out.node.rank) / "launch.log"
            result.timings["total"] = time.monotonic() - self.t0
            record = result.to_dict()
            record["commands"] = {name: c.describe() for name, c in self.commands.items()}
            atomic_write(
                result.run_dir / "launch.json", json.dumps(record, indent=1, default=str) + "\n"
            )
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

    def _sources(self, found: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
        """What to pull from each node: its own output folder and — when it does not share the
        head's file system — the head's output path, where its ranks wrote into the run
        directory rank 0 published (the engine's per-rank traces and logs)."""
        head = self.reports.get(self.cluster.head.name)
        sources: dict[str, list[str]] = {}
        for name, report in self.reports.items():
            sources[name] = [f"{report.node_dir}/out"]
            seen = found.get(name, {})
            if (
                head
                and name != self.cluster.head.name
                and seen.get("head_out")
                and not seen.get("shares_head")
            ):
                sources[name].append(f"{head.node_dir}/out")
        return sources

    def _gather(
        self, sources: Mapping[str, list[str]], *, timeout: float, shared: frozenset[str]
    ) -> None:
        def one(name: str, cancel: threading.Event) -> str:
            session = self.live[name]
            dest = node_folder(self.staging, session.node.rank)
            how = [session.pull(src, dest, timeout=timeout) for src in sources[name]]
            note = " (shares the head's file system: its ranks wrote into the run directory)"
            return " + ".join(how) + (note if name in shared else "")

        for name, res in run_parallel(
            list(sources), one, timeout=timeout + 5.0, name="aorta-collect"
        ).items():
            if isinstance(res, Done):
                self.outcomes[name].collected = res.value
            elif isinstance(res, TimedOut):
                self.outcomes[name].collected = f"not collected: still copying after {timeout:g} s"
            else:
                self.outcomes[name].collected = f"not collected: {res.error}"


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
    """Run ``spec`` on every node of ``cluster`` under torchrun; gather the results.

    Parameters
    ----------
    output
        Root of the run directories on this machine; the result is named after the head's run
        directory (``<output>/<ticket>/<workload>/<timestamp>``) or ``<output>/_launch_/<run id>``.
    deadlines
        Seconds for setup, run, collection and stopping (:class:`Deadlines`).
    on_line
        Called with ``(node, line)`` for every output line of every node, from several threads.
    on_event
        Called with one line for each step of the launch (setup done, a node failed, ...).
    sessions
        ``cluster -> {node name: session}``; default :func:`ssh_sessions`.

    Returns
    -------
    LaunchResult
        Every node's outcome, the run directory, the rendezvous and timings.

    Raises
    ------
    LaunchFailed
        A node exited non-zero, timed out or was unreachable; ``.result`` has every node's
        outcome and the (collected) run directory.
    ClusterError
        The rendezvous address cannot work (nothing was started).
    KeyboardInterrupt
        After stopping every node and collecting what there was.

    Examples
    --------
    With a node that refuses connections the launch fails at setup, nothing is started, and
    the result (every node's outcome) still lands in a run directory:

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


def _record_snapshots(result: LaunchResult, folders: Mapping[str, Path], emit: EventSink) -> None:
    for name, out in result.outcomes.items():
        if out.snapshot is not None:
            atomic_write(folders[name] / "host_env.json", json.dumps(out.snapshot, indent=1) + "\n")
    result.skew = env_diff({name: o.snapshot for name, o in result.outcomes.items()})
    if result.skew:
        keys = ", ".join(sorted(result.skew)[:6])
        emit(f"warning: nodes differ in {len(result.skew)} setting(s): {keys} (see launch.json)")


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
    """Check every node and build each node's command, creating or starting nothing.

    Each node is connected to and snapshotted (Python, aorta and torch versions, drivers, the
    variables that steer NCCL/RCCL) and must be able to import ``spec.requires``; the head still
    probes a free rendezvous port.

    Parameters
    ----------
    deadlines
        ``deadlines.setup`` bounds the whole check.
    sessions
        ``cluster -> {node name: session}``; default :func:`ssh_sessions`.

    Returns
    -------
    DryRun
        ``outcomes`` (``ok``, ``unreachable``, ``setup_failed``, ``timeout`` per node), the exact
        ``commands`` of the ready nodes (none when the head is not ready: no port), ``skew``.

    Examples
    --------
    A node nobody listens on is reported, not raised:

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
    reports = setup_nodes(
        (sessions or ssh_sessions)(cluster),
        spec,
        outcomes,
        run_id=run_id,
        probe_port=spec.master_port is None,
        dry_run=True,
        deadlines=deadlines,
    )
    head = reports.get(cluster.head.name)
    port = spec.master_port or (head.port if head else None)
    for name, out in outcomes.items():
        if name in reports:
            out.status = "ok"
    commands = (
        _commands(cluster, spec, reports, run_id=run_id, addr=addr, port=port or 0) if port else {}
    )
    skew = env_diff({name: o.snapshot for name, o in outcomes.items()})
    return DryRun(run_id, addr, port, commands, outcomes, skew)
