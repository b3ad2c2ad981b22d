"""The fan-out: one thread per node for setup, run and teardown, each phase with a deadline.

* :func:`setup_nodes` connects to every node at once, creates its per-run folder, snapshots its
  environment and (on the head) probes the rendezvous port. A node still setting up at the
  deadline is ``timeout``; when it finally finishes it tears itself down (a straggler never
  leaves anything behind).
* :class:`RunPhase` starts every node's command and watches them: the first node to exit
  non-zero makes the launch stop the others at once (kill-on-bad-exit); at the run deadline the
  nodes still running are ``timeout`` and stopped. Stopping is a ``kill`` run over a *second*
  connection against the pid file and the run's identity, so whole process trees go.
* :func:`teardown_nodes` runs that ``kill`` on every node where setup was attempted, whatever
  happened, and reports what it found.

Results are kept per node (``{node name: NodeOutcome}``); one bad node never hides another's.
Threads are daemons (see :mod:`aorta.launch.parallel`).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .cluster import Cluster, Node
from .command import STARTED_MARKER, LaunchSpec, NodeCommand, kill_command, node_dir, setup_command
from .outcome import Deadlines, NodeOutcome
from .parallel import Done, TimedOut, run_parallel, start_daemon
from .remote import ExecResult, NodeSession, RemoteError

__all__ = ["RunPhase", "SetupReport", "setup_nodes", "teardown_nodes"]

LineSink = Callable[[Node, str], None]
EventSink = Callable[[str], None]


class SetupFailed(RemoteError):
    """A node was reached but is not ready (its Python, torch or aorta is missing, ...)."""


class _Unreachable(RemoteError):
    pass


@dataclass
class SetupReport:
    """What setup learned on one node (parsed from the helper's JSON line)."""

    node_dir: str
    workdir: str
    port: int | None
    snapshot: dict[str, Any] = field(default_factory=dict)

    @property
    def has_rsync(self) -> bool:
        return bool(self.snapshot.get("tools", {}).get("rsync"))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def last_words(text: str) -> str:
    """The line of a failed node's output most likely to say why.

    torchrun ends a failure with its own traceback and a ``ChildFailedError`` box; the line
    before that traceback (the worker's last words, or torchrun's ``failed (exitcode: ...)``)
    says more. Lines without a letter or digit (``=====``) never do.

    >>> last_words("loss nan\\nTraceback (most recent call last):\\n  torch.distributed.elastic ...\\n=====")
    'loss nan'
    """
    lines = [line.strip() for line in text.splitlines() if any(c.isalnum() for c in line)]
    starts = [
        i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")
    ]
    if (
        starts
        and any(
            m in line
            for line in lines[starts[-1] :]
            for m in ("torch.distributed", "torch/distributed")
        )
        and starts[-1] > 0
    ):
        lines = lines[: starts[-1]]
    return lines[-1] if lines else ""


def _parse_setup(node: Node, result: ExecResult, spec: LaunchSpec) -> SetupReport:
    if result.exit_code != 0:
        why = (
            _last_line(result.stderr)
            or _last_line(result.stdout)
            or f"exit code {result.exit_code}"
        )
        if result.exit_code == 127:
            why = f"{node.python}: command not found"
        raise SetupFailed(f"setup failed: {why}")
    try:
        data = json.loads(_last_line(result.stdout))
    except ValueError:
        raise SetupFailed(f"setup printed no report: {_last_line(result.stdout)[:200]!r}") from None
    if data.get("missing"):
        raise SetupFailed(f"{', '.join(data['missing'])} cannot be imported by {node.python}")
    return SetupReport(
        data["node_dir"], data["workdir"], data.get("port"), data.get("snapshot") or {}
    )


def setup_nodes(
    cluster: Cluster,
    sessions: Mapping[str, NodeSession],
    spec: LaunchSpec,
    outcomes: dict[str, NodeOutcome],
    *,
    run_id: str,
    probe_port: bool,
    dry_run: bool,
    deadlines: Deadlines,
    head_token: str | None = None,
) -> dict[str, SetupReport]:
    """Set every node up in parallel; return the reports of the nodes that made it.

    Failures land in ``outcomes`` (``unreachable``, ``setup_failed``, ``timeout``). The head
    probes a free port when ``probe_port`` and keeps ``head_token`` in its folder.
    """

    def one(name: str, cancel: threading.Event) -> SetupReport:
        session = sessions[name]
        node = session.node
        try:
            session.open()
        except RemoteError as exc:
            raise _Unreachable(str(exc)) from exc
        head = node.rank == 0
        cmd, stdin = setup_command(
            node,
            spec,
            run_id=run_id,
            probe_port=probe_port and head,
            dry_run=dry_run,
            head_token=head_token if head else None,
        )
        report = _parse_setup(node, session.exec(cmd, stdin=stdin, timeout=deadlines.setup), spec)
        if cancel.is_set() and not dry_run:
            # A straggler: the launch gave up on this node, so undo what setup made.
            kill, kstdin = kill_command(
                node, run_id=run_id, node_dir=report.node_dir, grace=deadlines.kill_grace
            )
            session.exec(kill, stdin=kstdin, timeout=deadlines.teardown)
        return report

    results = run_parallel(list(sessions), one, timeout=deadlines.setup, name="aorta-setup")
    reports: dict[str, SetupReport] = {}
    for name, res in results.items():
        out = outcomes[name]
        if isinstance(res, Done):
            reports[name] = res.value
            out.snapshot = res.value.snapshot
        elif isinstance(res, TimedOut):
            out.status, out.message = "timeout", f"setup not finished after {deadlines.setup:g} s"
        else:
            err = res.error
            if isinstance(err, KeyboardInterrupt):
                raise err
            out.status = "unreachable" if isinstance(err, _Unreachable) else "setup_failed"
            out.message = (
                str(err) if isinstance(err, RemoteError) else f"{type(err).__name__}: {err}"
            )
    return reports


def teardown_nodes(
    sessions: Mapping[str, NodeSession],
    outcomes: dict[str, NodeOutcome],
    *,
    run_id: str,
    dirs: Mapping[str, str],
    deadlines: Deadlines,
    head: tuple[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Stop whatever this run left on each node in ``dirs`` (over fresh connections), record
    what was found in ``outcome.teardown`` and return each node's report.

    With ``head`` (the head's folder and token) a report also says whether the node shares the
    head's file system (``shares_head``) and sees the head's output path (``head_out``).
    """

    def one(name: str, cancel: threading.Event) -> dict[str, Any]:
        session = sessions[name]
        head_dir, token = head if head else (None, None)
        cmd, stdin = kill_command(
            session.node,
            run_id=run_id,
            node_dir=dirs[name],
            grace=deadlines.kill_grace,
            head_dir=head_dir,
            head_token=token,
        )
        result = session.exec_fresh(
            cmd, stdin=stdin, timeout=deadlines.kill_grace + deadlines.teardown
        )
        if result.exit_code != 0:
            raise RemoteError(_last_line(result.stderr) or f"exit code {result.exit_code}")
        return json.loads(_last_line(result.stdout))

    timeout = deadlines.kill_grace + deadlines.teardown + 5.0
    reports: dict[str, dict[str, Any]] = {}
    for name, res in run_parallel(list(dirs), one, timeout=timeout, name="aorta-teardown").items():
        out = outcomes[name]
        if isinstance(res, Done):
            reports[name] = res.value
            out.teardown = _describe_kill(res.value, out.teardown)
        elif isinstance(res, TimedOut):
            out.teardown = f"teardown did not finish in {timeout:g} s: processes may be left"
        else:
            out.teardown = f"teardown failed: {res.error}"
    return reports


def _describe_kill(report: Mapping[str, Any], before: str) -> str:
    if report.get("fallback"):
        return "the node's Python could not run the cleanup: killed the pid file's session only"
    left = report.get("left") or []
    if left:
        return f"{len(left)} process(es) still running after SIGKILL: {left}"
    n = int(report.get("terminated", 0))
    now = f"stopped {n} leftover process(es)" if n else "nothing left"
    return f"{before}; {now}" if before else now


class RunPhase:
    """Start every node's command, stream its lines, stop all when one fails or time runs out.

    Fills ``outcomes`` in place; :attr:`all_started_s` is when the last node's program started.
    """

    def __init__(
        self,
        sessions: Mapping[str, NodeSession],
        commands: Mapping[str, NodeCommand],
        outcomes: dict[str, NodeOutcome],
        *,
        run_id: str,
        deadlines: Deadlines,
        on_line: LineSink,
        on_event: EventSink,
        t0: float,
    ) -> None:
        self.sessions = sessions
        self.commands = commands
        self.outcomes = outcomes
        self.run_id = run_id
        self.deadlines = deadlines
        self.on_line = on_line
        self.on_event = on_event
        self.t0 = t0
        self.events: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.cancel = threading.Event()
        self.stopping: dict[str, str] = {}  # node name → why it is being stopped
        self.all_started_s: float | None = None

    def _now(self) -> float:
        return time.monotonic() - self.t0

    def _watch(self, name: str) -> None:
        session, cmd = self.sessions[name], self.commands[name]

        def line(text: str) -> None:
            if text.startswith(STARTED_MARKER):
                self.events.put(("started", name, self._now()))
            else:
                self.on_line(session.node, text)

        if self.cancel.is_set():
            self.events.put(("skipped", name, None))
            return
        limit = self.deadlines.run + self.deadlines.kill_grace + self.deadlines.teardown + 60.0
        try:
            result = session.exec(cmd.remote, timeout=limit, on_line=line, keep_stdin_open=True)
            self.events.put(("exit", name, result))
        except BaseException as exc:
            self.events.put(("error", name, exc))

    def _stop(self, names: list[str], why: str) -> None:
        names = [n for n in names if n not in self.stopping]
        self.cancel.set()
        for name in names:
            self.stopping[name] = why
            session = self.sessions[name]
            cmd, stdin = kill_command(
                session.node,
                run_id=self.run_id,
                node_dir=self.commands[name].node_dir,
                grace=self.deadlines.kill_grace,
            )

            def kill(
                session: NodeSession = session,
                cmd: str = cmd,
                stdin: bytes = stdin,
                name: str = name,
            ) -> None:
                try:
                    res = session.exec_fresh(
                        cmd,
                        stdin=stdin,
                        timeout=self.deadlines.kill_grace + self.deadlines.teardown,
                    )
                    report = json.loads(_last_line(res.stdout)) if res.exit_code == 0 else {}
                    n = int(report.get("terminated", 0))
                    self.outcomes[name].teardown = f"stopped {n} process(es)" if n else ""
                except Exception as exc:
                    self.outcomes[name].teardown = f"stop failed: {exc}"

            start_daemon(kill, name=f"aorta-stop-{name}")

    def run(self) -> None:
        """Start all nodes and wait; returns when every node ended or was given up on."""
        pending = set(self.commands)
        for name in self.commands:
            start_daemon(lambda name=name: self._watch(name), name=f"aorta-run-{name}")
        deadline = time.monotonic() + self.deadlines.run
        give_up: float | None = None
        try:
            while pending:
                limit = give_up if give_up is not None else deadline
                remaining = limit - time.monotonic()
                if remaining <= 0:
                    if give_up is not None:
                        self._abandon(pending)
                        return
                    self._deadline(pending)
                    give_up = time.monotonic() + self.deadlines.kill_grace + self.deadlines.teardown
                    continue
                try:
                    kind, name, payload = self.events.get(timeout=remaining)
                except queue.Empty:
                    continue
                if kind == "started":
                    self.outcomes[name].started_s = payload
                    if all(self.outcomes[n].started_s is not None for n in self.commands):
                        self.all_started_s = max(
                            self.outcomes[n].started_s or 0.0 for n in self.commands
                        )
                    continue
                pending.discard(name)
                if self._ended(name, kind, payload) and give_up is None:
                    give_up = time.monotonic() + self.deadlines.kill_grace + self.deadlines.teardown
        except KeyboardInterrupt:
            for name in pending:
                self.outcomes[name].status = "interrupted"
            self._stop(sorted(pending), "interrupted")
            raise

    def _deadline(self, pending: set[str]) -> None:
        for name in sorted(pending):
            out = self.outcomes[name]
            out.status, out.message = (
                "timeout",
                f"still running after the {self.deadlines.run:g} s run deadline",
            )
            out.ended_s = self._now()
        self.on_event(
            f"run deadline ({self.deadlines.run:g} s) passed: stopping {', '.join(sorted(pending))}"
        )
        self._stop(sorted(pending), "run deadline")

    def _abandon(self, pending: set[str]) -> None:
        for name in sorted(pending):
            out = self.outcomes[name]
            out.message = (
                out.message + "; " if out.message else ""
            ) + "its connection did not close after the stop"

    def _ended(self, name: str, kind: str, payload: Any) -> bool:
        """Record one node's end; start stopping the others when it failed. True if it did."""
        out = self.outcomes[name]
        out.ended_s = self._now()
        if kind == "skipped":
            out.status, out.message = "not_started", ""
            return False
        if kind == "error":
            if isinstance(payload, KeyboardInterrupt):
                raise payload
            code, message = None, str(payload)
        else:
            code = payload.exit_code
            last = last_words(payload.stdout)
            message = f"exited with code {code}" + (
                f" (last words: {last[:160]})" if last and code else ""
            )
        out.exit_code = code
        if out.status in ("timeout", "interrupted"):
            return False
        if code == 0:
            out.status, out.message = "ok", ""
            return False
        if name in self.stopping:
            out.status, out.message = "stopped", f"because {self.stopping[name]}"
            return False
        out.status, out.message = "failed", message
        others = sorted(
            n for n, o in self.outcomes.items() if n in self.commands and o.ended_s is None
        )
        if others:
            self.on_event(f"{out.node.label} {message}: stopping {', '.join(others)}")
            self._stop(others, f"{out.node.label} failed")
        return True


def node_dirs(cluster: Cluster, run_id: str) -> dict[str, str]:
    """Every node's per-run folder as the launch names it before setup resolves it."""
    return {n.name: node_dir(n, run_id) for n in cluster.nodes}
