"""What a launch returns: one outcome per node, the overall status, where the nodes'
environments disagree (:func:`env_diff`), and the error that carries them all.

Examples
--------
>>> from aorta.recipe.cluster import Node
>>> a, b = Node(rank=0, address="10.0.0.1"), Node(rank=1, address="10.0.0.2")
>>> result = LaunchResult(run_id="r1", outcomes={
...     "node0": NodeOutcome(a, status="stopped", exit_code=-15),
...     "node1": NodeOutcome(b, status="failed", exit_code=1, ended_s=2.5, message="exited with code 1"),
... })
>>> result.status
'failed'
>>> result.summary()
'node1 10.0.0.2 exited with code 1; node0 10.0.0.1 was stopped'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aorta.envvars import LAUNCH_PROVIDED
from aorta.errors import AortaError
from aorta.recipe.cluster import Node
from aorta.store.hostenv import diff_snapshots

__all__ = [
    "LaunchFailed",
    "LaunchResult",
    "Launched",
    "NodeOutcome",
    "NodeStatus",
    "RunStatus",
    "env_diff",
]

#: ``ok`` exited 0 · ``failed`` exited non-zero on its own · ``timeout`` still running (or still
#: setting up) at a deadline · ``stopped`` killed because another node failed or timed out ·
#: ``unreachable`` SSH failed · ``setup_failed`` reached but not ready (missing torch, ...) ·
#: ``not_started`` never launched (another node failed setup) · ``interrupted`` by Ctrl-C.
NodeStatus = Literal[
    "ok", "failed", "timeout", "stopped", "unreachable", "setup_failed", "not_started", "interrupted"
]  # fmt: skip
#: ``complete`` every node ok · ``failed`` a node failed or could not be set up · ``timeout`` a
#: node hit a deadline (and none failed) · ``interrupted`` the user stopped the launch.
RunStatus = Literal["complete", "failed", "timeout", "interrupted"]
_BAD: tuple[str, ...] = ("failed", "unreachable", "setup_failed")
_STOPPED = ("stopped", "not_started")  # named after the nodes that caused a launch's status
_VERBS = {"ok": "finished", "stopped": "was stopped", "not_started": "was not started"}
_VERBS["interrupted"] = "was interrupted"


@dataclass
class NodeOutcome:
    """How one node's part of the launch went. Times are seconds since the launch began."""

    node: Node
    status: NodeStatus = "not_started"
    exit_code: int | None = None
    message: str = ""  # one line: why it failed, or what it last printed
    started_s: float | None = None  # when its program (torchrun) started
    ended_s: float | None = None
    snapshot: dict[str, Any] | None = None  # its environment (aorta.store.hostenv.snapshot)
    teardown: str = ""  # what teardown found and stopped
    collected: str = ""  # how its artifacts were collected (``tar (N files)``), or why not
    log: Path | None = None  # its full log in the run directory

    @property
    def bad(self) -> bool:
        return self.status in _BAD or self.status == "timeout"

    def describe(self) -> str:
        """``node1 10.0.0.2 exited with code 1 (...)`` — one line for error messages."""
        verb = _VERBS.get(self.status)
        what = verb if verb and not self.message else (self.message or self.status)
        if self.status == "stopped" and self.message:
            what = f"was stopped ({self.message})"
        return f"{self.node.label} {what}"

    def to_dict(self) -> dict[str, Any]:
        node = {"node": self.node.name, "address": self.node.address, "rank": self.node.rank}
        keep = ("status", "exit_code", "message", "started_s", "ended_s", "teardown", "collected")
        return {**node, **{k: getattr(self, k) for k in keep}, "log": self.log and str(self.log)}


@dataclass
class LaunchResult:
    """The whole launch: ``{node name: NodeOutcome}`` plus where the results went.

    ``status`` is derived from the outcomes unless the launch was interrupted.
    """

    run_id: str
    outcomes: dict[str, NodeOutcome]
    run_dir: Path | None = None
    master_addr: str | None = None
    master_port: int | None = None
    #: Seconds, each written once by :func:`~aorta.launch.backend.drive`: ``setup``,
    #: ``all_started`` (the last node's program started), ``run``, ``teardown``, ``collect``,
    #: ``total``.
    timings: dict[str, float] = field(default_factory=dict)
    #: Keys whose values differ across nodes: ``{"packages.torch": {"node0": "2.4", ...}}``.
    skew: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Each node's :class:`~aorta.launch.node_command.NodeCommand` (Slurm: its ``describe()`` text).
    commands: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False

    @property
    def status(self) -> RunStatus:
        if self.interrupted:
            return "interrupted"
        states = {o.status for o in self.outcomes.values()}
        if states & set(_BAD):
            return "failed"
        if "timeout" in states:
            return "timeout"
        if states - {"ok"}:
            return "failed"
        return "complete"

    def culprits(self) -> list[NodeOutcome]:
        """The nodes that caused the status, the first to fail first."""
        bad = [o for o in self.outcomes.values() if o.bad]
        return sorted(bad, key=lambda o: (o.ended_s is None, o.ended_s or 0.0, o.node.rank))

    def summary(self) -> str:
        """One line naming the failed nodes first, then the ones stopped because of them."""
        parts = [o.describe() for o in self.culprits()]
        parts += [o.describe() for o in self.outcomes.values() if o.status in _STOPPED]
        return "; ".join(parts) or f"{len(self.outcomes)} node(s) finished"

    def to_dict(self) -> dict[str, Any]:
        keep = ("run_id", "status", "master_addr", "master_port", "timings")
        nodes = {name: o.to_dict() for name, o in self.outcomes.items()}
        commands = {n: c if isinstance(c, str) else c.describe() for n, c in self.commands.items()}
        run_dir = self.run_dir and str(self.run_dir)
        return {
            **{k: getattr(self, k) for k in keep},
            "nodes": nodes,
            "skew": self.skew,
            "run_dir": run_dir,
            "commands": commands,  # secret values redacted
        }


@dataclass(frozen=True)
class Launched:
    """What :func:`~aorta.launch.run` did: a launch's ``result`` (a dry run's too: nothing
    started), else ``text`` for the user (a Slurm dry run's batch script, the id of a job
    submitted without waiting) or the exit code of a batch job's step."""

    result: LaunchResult | None = None
    text: str = ""
    exit_code: int = 0


class LaunchFailed(AortaError):
    """A node failed, timed out or could not be reached; ``result`` holds every node's outcome."""

    def __init__(self, result: LaunchResult) -> None:
        self.result = result
        where = f" — results in {result.run_dir}" if result.run_dir else ""
        verb = "timed out" if result.status == "timeout" else "failed"
        super().__init__(f"launch {verb}: {result.summary()}{where}")


#: Snapshot keys of the launcher's own per-node variables, which differ by design.
LAUNCH_KEYS = frozenset(f"env.{name}" for name in LAUNCH_PROVIDED)


def env_diff(snapshots: Mapping[str, Mapping[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """Where the nodes' environment snapshots (versions, drivers, NCCL/RCCL variables) differ,
    the launcher's own variables aside (:func:`aorta.store.hostenv.diff_snapshots`), as
    ``{"torch.version": {node: value}}`` for :func:`aorta.report.launch_text.format_skew`."""
    return diff_snapshots(snapshots, ignore=LAUNCH_KEYS)
