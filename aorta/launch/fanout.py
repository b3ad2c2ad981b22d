"""The fan-out: one thread per node for setup, run and teardown, each phase with a deadline.

* :func:`run_parallel` is the one parallel strategy: ``fn(key, cancel)`` per key in daemon
  threads, one deadline for all. (``concurrent.futures`` joins its threads at interpreter exit,
  so one node stuck in a read would keep the process alive; daemon threads are abandoned.)
* :func:`setup_nodes` reaches every node at once, creates its per-run folder, snapshots its
  environment and (on the head) probes the rendezvous port. A node still setting up at the
  deadline is ``timeout``; when it finally finishes it tears itself down.
* :class:`RunPhase` starts every node's command and watches them: the first node to exit
  non-zero makes the launch stop the others at once (kill-on-bad-exit); at the run deadline the
  nodes still running are ``timeout`` and stopped. Stopping is a ``kill`` run over a new
  connection against the pid file and the run's identity, so whole process trees go.
* :func:`teardown_nodes` runs that ``kill`` on every node where setup was attempted, whatever
  happened, and reports what it found.

Results are kept per node (``{node name: NodeOutcome}``); one bad node never hides another's.

Examples
--------
>>> import time
>>> def work(key, cancel):
...     if key == "slow":
...         time.sleep(5)
...     if key == "bad":
...         raise ValueError("no")
...     return key.upper()
>>> out = run_parallel(["a", "bad", "slow"], work, timeout=0.3)
>>> out["a"].value, type(out["bad"].error).__name__, isinstance(out["slow"], TimedOut)
('A', 'ValueError', True)
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .cluster import Node
from .command import STARTED_MARKER, LaunchSpec, NodeCommand, kill_command, setup_command
from .outcome import Deadlines, NodeOutcome
from .ssh import ExecResult, NodeSession, RemoteError, Unreachable

__all__ = [
    "Done",
    "Failed",
    "RunPhase",
    "SetupReport",
    "TimedOut",
    "last_words",
    "run_parallel",
    "setup_nodes",
    "teardown_nodes",
]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
LineSink = Callable[[Node, str], None]
EventSink = Callable[[str], None]


@dataclass(frozen=True)
class Done(Generic[V]):
    value: V


@dataclass(frozen=True)
class Failed:
    error: BaseException


@dataclass(frozen=True)
class TimedOut:
    pass


def _daemon(target: Callable[[], None], name: str) -> None:
    threading.Thread(target=target, name=name, daemon=True).start()


def run_parallel(
    keys: Iterable[K], fn: Callable[[K, threading.Event], V], *, timeout: float, name: str = "aorta"
) -> dict[K, Done[V] | Failed | TimedOut]:
    """Call ``fn(key, cancel)`` for every key at once; wait at most ``timeout`` seconds.

    Returns ``{key: Done(value) | Failed(error) | TimedOut()}`` in the order of ``keys``.
    ``cancel`` is set when the deadline passes (a straggler should then clean up after itself)
    and when the caller is interrupted.
    """
    keys = list(keys)
    cancel = threading.Event()
    results: queue.Queue[tuple[K, Done[V] | Failed]] = queue.Queue()

    def runner(key: K) -> None:
        try:
            results.put((key, Done(fn(key, cancel))))
        except BaseException as exc:
            results.put((key, Failed(exc)))

    for i, key in enumerate(keys):
        _daemon(lambda key=key: runner(key), f"{name}-{i}")
    got: dict[K, Done[V] | Failed] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < len(keys) and (left := deadline - time.monotonic()) > 0:
            try:
                key, outcome = results.get(timeout=left)
            except queue.Empty:
                break
            got[key] = outcome
    finally:
        if len(got) < len(keys):
            cancel.set()
    return {key: got.get(key, TimedOut()) for key in keys}


class SetupFailed(RemoteError):
    """A node was reached but is not ready (its Python, torch or aorta is missing, ...)."""


@dataclass
class SetupReport:
    """What setup learned on one node (parsed from the helper's JSON line)."""

    node_dir: str
    workdir: str
    port: int | None
    snapshot: dict[str, Any] = field(default_factory=dict)


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
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call")]
    if (
        starts
        and starts[-1] > 0
        and any("torch" in line and "distributed" in line for line in lines[starts[-1] :])
    ):
        lines = lines[: starts[-1]]
    return lines[-1] if lines else ""


def _parse_setup(node: Node, result: ExecResult) -> SetupReport:
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
        node, head = session.node, session.node.rank == 0
        cmd, stdin = setup_command(
            node,
            spec,
            run_id=run_id,
            probe_port=probe_port and head,
            dry_run=dry_run,
            head_token=head_token if head else None,
        )
        report = _parse_setup(node, session.exec(cmd, stdin=stdin, timeout=deadlines.setup))
        if cancel.is_set() and not dry_run:
            # A straggler: the launch gave up on this node, so undo what setup made.
            kill, kstdin = kill_command(
                node, run_id=run_id, node_dir=report.node_dir, grace=deadlines.kill_grace
            )
            session.exec(kill, stdin=kstdin, timeout=deadlines.teardown)
        return report

    reports: dict[str, SetupReport] = {}
    for name, res in run_parallel(
        sessions, one, timeout=deadlines.setup, name="aorta-setup"
    ).items():
        out = outcomes[name]
        if isinstance(res, Done):
            reports[name], out.snapshot = res.value, res.value.snapshot
        elif isinstance(res, TimedOut):
            out.status, out.message = "timeout", f"setup not finished after {deadlines.setup:g} s"
        elif isinstance(res.error, KeyboardInterrupt):
            raise res.error
        else:
            out.status = "unreachable" if isinstance(res.error, Unreachable) else "setup_failed"
            err = res.error
            out.message = (
                str(err) if isinstance(err, RemoteError) else f"{type(err).__name__}: {err}"
            )
    return reports


def _stop(
    session: NodeSession, *, run_id: str, node_dir: str, deadlines: Deadlines, **head: str | None
) -> dict[str, Any]:
    """Run the ``kill`` on one node (a new connection); return the helper's report."""
    cmd, stdin = kill_command(
        session.node, run_id=run_id, node_dir=node_dir, grace=deadlines.kill_grace, **head
    )
    result = session.exec(cmd, stdin=stdin, timeout=deadlines.kill_grace + deadlines.teardown)
    if result.exit_code != 0:
        raise RemoteError(_last_line(result.stderr) or f"exit code {result.exit_code}")
    return json.loads(_last_line(result.stdout))


def teardown_nodes(
    sessions: Mapping[str, NodeSession],
    outcomes: dict[str, NodeOutcome],
    *,
    run_id: str,
    dirs: Mapping[str, str],
    deadlines: Deadlines,
    head: tuple[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Stop whatever this run left on each node in ``dirs``, record what was found in
    ``outcome.teardown`` and return each node's report.

    With ``head`` (the head's folder and token) a report also says whether the node shares the
    head's file system (``shares_head``) and sees the head's output path (``head_out``).
    """
    head_dir, token = head if head else (None, None)

    def one(name: str, cancel: threading.Event) -> dict[str, Any]:
        return _stop(
            sessions[name],
            run_id=run_id,
            node_dir=dirs[name],
            deadlines=deadlines,
            head_dir=head_dir,
            head_token=token,
        )

    timeout = deadlines.kill_grace + deadlines.teardown + 5.0
    reports: dict[str, dict[str, Any]] = {}
    for name, res in run_parallel(dirs, one, timeout=timeout, name="aorta-teardown").items():
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
    if report.get("left"):
        return f"{len(report['left'])} process(es) still running after SIGKILL: {report['left']}"
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
        self.sessions, self.commands, self.outcomes = sessions, commands, outcomes
        self.run_id, self.deadlines, self.t0 = run_id, deadlines, t0
        self.on_line, self.on_event = on_line, on_event
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
        d = self.deadlines
        try:
            result = session.exec(
                cmd.remote,
                timeout=d.run + d.kill_grace + d.teardown + 60.0,
                on_line=line,
                keep_stdin_open=True,
            )
            self.events.put(("exit", name, result))
        except BaseException as exc:
            self.events.put(("error", name, exc))

    def _stop(self, names: list[str], why: str) -> None:
        self.cancel.set()
        for name in [n for n in names if n not in self.stopping]:
            self.stopping[name] = why

            def kill(name: str = name) -> None:
                try:
                    report = _stop(
                        self.sessions[name],
                        run_id=self.run_id,
                        node_dir=self.commands[name].node_dir,
                        deadlines=self.deadlines,
                    )
                    n = int(report.get("terminated", 0))
                    self.outcomes[name].teardown = f"stopped {n} process(es)" if n else ""
                except Exception as exc:
                    self.outcomes[name].teardown = f"stop failed: {exc}"

            _daemon(kill, f"aorta-stop-{name}")

    def run(self) -> None:
        """Start all nodes and wait; returns when every node ended or was given up on."""
        pending = set(self.commands)
        for name in self.commands:
            _daemon(lambda name=name: self._watch(name), f"aorta-run-{name}")
        deadline = time.monotonic() + self.deadlines.run
        grace = self.deadlines.kill_grace + self.deadlines.teardown
        give_up: float | None = None
        try:
            while pending:
                remaining = (give_up if give_up is not None else deadline) - time.monotonic()
                if remaining <= 0 and give_up is not None:
                    for name in sorted(pending):
                        out = self.outcomes[name]
                        out.message += (
                            "; " if out.message else ""
                        ) + "its connection did not close after the stop"
                    return
                if remaining <= 0:
                    self._deadline(pending)
                    give_up = time.monotonic() + grace
                    continue
                try:
                    kind, name, payload = self.events.get(timeout=remaining)
                except queue.Empty:
                    continue
                if kind == "started":
                    self.outcomes[name].started_s = payload
                    starts = [self.outcomes[n].started_s for n in self.commands]
                    if None not in starts:
                        self.all_started_s = max(s or 0.0 for s in starts)
                    continue
                pending.discard(name)
                if self._ended(name, kind, payload) and give_up is None:
                    give_up = time.monotonic() + grace
        except KeyboardInterrupt:
            for name in pending:
                self.outcomes[name].status = "interrupted"
            self._stop(sorted(pending), "interrupted")
            raise

    def _deadline(self, pending: set[str]) -> None:
        for name in sorted(pending):
            out = self.outcomes[name]
            out.status, out.ended_s = "timeout", self._now()
            out.message = f"still running after the {self.deadlines.run:g} s run deadline"
        self.on_event(
            f"run deadline ({self.deadlines.run:g} s) passed: stopping {', '.join(sorted(pending))}"
        )
        self._stop(sorted(pending), "run deadline")

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
            code, last = payload.exit_code, last_words(payload.stdout)
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
        others = sorted(n for n in self.commands if self.outcomes[n].ended_s is None)
        if others:
            self.on_event(f"{out.node.label} {message}: stopping {', '.join(others)}")
            self._stop(others, f"{out.node.label} failed")
        return True
