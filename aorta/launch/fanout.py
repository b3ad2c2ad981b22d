"""The fan-out: one thread per node, one deadline per phase, one outcome per node.

:func:`run_parallel` is the one parallel strategy (daemon threads: ``concurrent.futures`` would
join a thread stuck in a read at exit). :func:`setup_nodes` sets every node up at once;
:func:`stop_node` runs the node helper's ``kill`` over a *fresh* connection (kill-on-bad-exit,
deadlines, Ctrl-C, and :func:`teardown_nodes` on every node where setup was attempted).

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

from aorta.report.launch import describe_kill

from .cluster import Node
from .command import (
    LaunchSpec,
    env_file_command,
    env_script,
    kill_command,
    node_env,
    setup_command,
)
from .outcome import Deadlines, NodeOutcome
from .ssh import ExecResult, NodeSession, RemoteError, Unreachable

__all__ = [
    "Done",
    "Failed",
    "SetupReport",
    "TimedOut",
    "run_parallel",
    "setup_nodes",
    "stop_node",
    "teardown_nodes",
]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class Done(Generic[V]):
    value: V


@dataclass(frozen=True)
class Failed:
    error: BaseException


@dataclass(frozen=True)
class TimedOut:
    pass


def daemon(target: Callable[[], None], name: str) -> None:
    """Start ``target`` in a daemon thread (abandoned, never joined, at interpreter exit)."""
    threading.Thread(target=target, name=name, daemon=True).start()


def run_parallel(
    keys: Iterable[K], fn: Callable[[K, threading.Event], V], *, timeout: float, name: str = "aorta"
) -> dict[K, Done[V] | Failed | TimedOut]:
    """Call ``fn(key, cancel)`` for every key at once; wait at most ``timeout`` seconds; return
    ``{key: Done(value) | Failed(error) | TimedOut()}``. ``cancel`` is set at the deadline (a
    straggler then cleans up after itself) and when the caller is interrupted."""
    keys = list(keys)
    cancel = threading.Event()
    results: queue.Queue[tuple[K, Done[V] | Failed]] = queue.Queue()

    def runner(key: K) -> None:
        try:
            results.put((key, Done(fn(key, cancel))))
        except BaseException as exc:
            results.put((key, Failed(exc)))

    for i, key in enumerate(keys):
        daemon(lambda key=key: runner(key), f"{name}-{i}")
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
    """What setup learned on one node (the helper's JSON line)."""

    node_dir: str
    workdir: str
    port: int | None
    snapshot: dict[str, Any] = field(default_factory=dict)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _parse_setup(node: Node, result: ExecResult) -> SetupReport:
    if result.exit_code != 0:
        why = _last_line(result.stdout) or f"exit code {result.exit_code}"
        raise SetupFailed(
            f"setup failed: {node.python}: command not found"
            if result.exit_code == 127
            else f"setup failed: {why}"
        )
    try:
        data = json.loads(_last_line(result.stdout))
    except ValueError:
        raise SetupFailed(f"setup printed no report: {_last_line(result.stdout)[:200]!r}") from None
    if data.get("missing"):
        raise SetupFailed(f"{', '.join(data['missing'])} cannot be imported by {node.python}")
    return SetupReport(data["node_dir"], data["workdir"], data.get("port"), data["snapshot"])


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

    Failures land in ``outcomes`` (``unreachable``, ``setup_failed``, ``timeout``; a straggler
    tears itself down). Unless a dry run, each node then gets its 0600 environment file.
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
        if dry_run:
            return report
        if cancel.is_set():  # a straggler: the launch gave up on this node, undo what setup made
            stop_node(session, run_id=run_id, node_dir=report.node_dir, deadlines=deadlines)
            return report
        env = env_script(node_env(node, spec, run_id=run_id, node_dir=report.node_dir))
        written = session.exec(
            env_file_command(report.node_dir), stdin=env, timeout=deadlines.setup
        )
        if written.exit_code != 0:
            raise SetupFailed(f"cannot write the environment file: {_last_line(written.stdout)}")
        return report

    reports: dict[str, SetupReport] = {}
    results = run_parallel(sessions, one, timeout=deadlines.setup, name="aorta-setup")
    for name, res in results.items():
        out = outcomes[name]
        if isinstance(res, Done):
            reports[name], out.snapshot = res.value, res.value.snapshot
        elif isinstance(res, TimedOut):
            out.status, out.message = "timeout", f"setup not finished after {deadlines.setup:g} s"
        elif isinstance(res.error, KeyboardInterrupt):
            raise res.error
        else:
            err = res.error
            out.status = "unreachable" if isinstance(err, Unreachable) else "setup_failed"
            out.message = (
                str(err) if isinstance(err, RemoteError) else f"{type(err).__name__}: {err}"
            )
    return reports


def stop_node(
    session: NodeSession, *, run_id: str, node_dir: str, deadlines: Deadlines, **head: str | None
) -> dict[str, Any]:
    """Stop everything this run started on one node, over a fresh connection; return the
    helper's report (see :func:`~aorta.launch.command.kill_command` for ``head``)."""
    cmd, stdin = kill_command(
        session.node, run_id=run_id, node_dir=node_dir, grace=deadlines.kill_grace, **head
    )
    timeout = deadlines.kill_grace + deadlines.teardown
    result = session.exec(cmd, stdin=stdin, timeout=timeout, fresh=True)
    if result.exit_code != 0:
        raise RemoteError(_last_line(result.stdout) or f"exit code {result.exit_code}")
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
    """Stop whatever this run left on each node in ``dirs`` (in ``outcome.teardown``); return
    each node's report (with ``head``, its folder and token: ``shares_head``, ``head_out``)."""
    head_dir, token = head if head else (None, None)

    def one(name: str, cancel: threading.Event) -> dict[str, Any]:
        return stop_node(
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
            out.teardown = describe_kill(res.value, out.teardown)
        elif isinstance(res, TimedOut):
            out.teardown = f"teardown did not finish in {timeout:g} s: processes may be left"
        else:
            out.teardown = f"teardown failed: {res.error}"
    return reports
