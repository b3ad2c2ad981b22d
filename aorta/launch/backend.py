"""The one lifecycle of every launch backend (SSH: :mod:`~aorta.launch.launcher`, Slurm:
:mod:`~aorta.launch.slurm`), :func:`drive` — ``setup → start → wait → teardown → gather``
whatever fails (teardown first: its kill report says which nodes share the head's disk), then
one record (docs/launch.md, "What happens"). Its fan-outs over the nodes are
:func:`aorta.fanout.run_parallel`'s, one result or exception per node.

>>> why(TimeoutError("read timed out")), why(AortaError("node0 10.0.0.1: connection refused"))
('TimeoutError: read timed out', 'node0 10.0.0.1: connection refused')
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from aorta.errors import AortaError
from aorta.recipe.cluster import Node
from aorta.store.gather import finalize, node_log
from aorta.store.redact import harvest_secrets, record_secrets
from aorta.store.rundir import LAUNCH_JSON, RunDir, atomic_write

from .outcome import LaunchFailed, LaunchResult

__all__ = ["Backend", "drive", "why"]

#: Where a backend sends its progress lines, and every node's output lines.
EventSink = Callable[[str], None]
LineSink = Callable[[Node, str], None]


def ignore(*_args: object) -> None:
    """The sink that drops what it gets."""


def why(exc: BaseException) -> str:
    """One line for a node's failure: aorta's own message, else the exception's type too."""
    return str(exc) if isinstance(exc, AortaError) else f"{type(exc).__name__}: {exc}"


class Backend(Protocol):
    """What :func:`drive` needs from a way of launching: the phases, each bounded by a deadline
    of its own, and what the shared record needs."""

    result: LaunchResult
    #: Where the nodes' logs and outputs are gathered until :func:`drive` names the run.
    staging: Path

    def now(self) -> float:
        """Seconds since the launch began."""

    def setup(self) -> bool:
        """Make every node ready; ``False`` (the outcomes say why) skips start and wait."""

    def start(self) -> None:
        """Start every node's program."""

    def wait(self) -> None:
        """Until every node ended, or was stopped (a node failed, a deadline passed, Ctrl-C)."""

    def teardown(self) -> None:
        """Stop whatever this run left running; undo what setup made (containers, env files)."""

    def gather(self) -> None:
        """Each node's log and outputs into ``combined_traces/node_<rank>/`` of the staging."""

    def close(self) -> None:
        """Release the connections (after gathering, whatever happened)."""

    def environments(self) -> list[Mapping[str, str]]:
        """Every environment the nodes' programs got: their secret values are the run's."""

    def record(self) -> dict[str, Any]:
        """Extra keys for ``launch.json`` (Slurm: the job)."""


def write_record(result: LaunchResult, **extra: Any) -> None:
    """Point every outcome at its ``launch.log`` in ``result.run_dir`` and write the launch's
    record there: :meth:`~aorta.launch.LaunchResult.to_dict` plus ``extra`` keys."""
    assert result.run_dir is not None
    for out in result.outcomes.values():
        out.log = node_log(result.run_dir, out.node.rank)
    text = json.dumps({**result.to_dict(), **extra}, indent=1, default=str) + "\n"
    atomic_write(result.run_dir / LAUNCH_JSON, text)


def _timed(result: LaunchResult, key: str, backend: Backend, step: Callable[[], Any]) -> Any:
    t = backend.now()
    try:
        return step()
    finally:
        result.timings[key] = backend.now() - t


def drive(backend: Backend, *, emit: EventSink) -> LaunchResult:
    """Run ``backend`` through its lifecycle and write the record (see the module docstring);
    a Ctrl-C marks the launch interrupted and is raised after the record is written."""
    result, started = backend.result, False
    try:
        ready = _timed(result, "setup", backend, backend.setup)
        if ready:
            started = True
            backend.start()
            backend.wait()
    except KeyboardInterrupt:
        result.interrupted = True
        raise
    finally:
        if started:
            result.timings["run"] = backend.now() - result.timings["setup"]
        try:
            _timed(result, "teardown", backend, backend.teardown)
            _timed(result, "collect", backend, backend.gather)
        finally:
            backend.close()
            result.run_dir = finalize(backend.staging, backend.staging.parent, result.run_id)
            known = harvest_secrets(*backend.environments())
            record_secrets(RunDir(result.run_dir), known)  # the run knows them (hashes only)
            starts = [o.started_s for o in result.outcomes.values()]
            if starts and None not in starts:
                result.timings["all_started"] = max(s or 0.0 for s in starts)
            result.timings["total"] = backend.now()
            write_record(result, **backend.record())
            emit(f"{result.status}: results in {result.run_dir}")
    if result.status != "complete":
        raise LaunchFailed(result)
    return result
