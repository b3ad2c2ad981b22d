"""The workload plugin interface and its discovery.

A workload is what a trial runs: a class with ``setup`` / ``run`` / ``cleanup``. The engine
builds one object per trial, calls ``setup()``, then ``run()`` (which returns a
:class:`WorkloadResult`), and always ``cleanup()`` once the object exists — whatever happened.

Workloads register under the ``aorta.workloads`` entry-point group::

    [project.entry-points."aorta.workloads"]
    my_repro = "my_pkg.repro:ReproWorkload"

Examples
--------
>>> class Noop(Workload):
...     name = "noop"
...     def run(self) -> WorkloadResult:
...         return WorkloadResult(passed=True, step_times_ms=[1.0] * self.steps)
>>> w = Noop({}, TrialContext(cell="a", trial=0, steps=3))
>>> w.run().step_times_ms
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

import importlib.metadata
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from aorta.errors import AortaError, UsageError

__all__ = [
    "ISOLATION_LEVELS",
    "FailureDetail",
    "Isolation",
    "LaunchMode",
    "TrialContext",
    "Workload",
    "WorkloadCatalog",
    "WorkloadResult",
    "resolve_isolation",
]

WORKLOADS_GROUP = "aorta.workloads"
Isolation = Literal["in_process", "process"]
LaunchMode = Literal["single_process", "distributed"]
#: Isolation levels, weakest first.
ISOLATION_LEVELS: tuple[Isolation, ...] = ("in_process", "process")


@dataclass
class FailureDetail:
    """One failure a workload saw: what, where (iteration, rank) and a hint for the human."""

    message: str
    hint: str | None = None
    iteration: int | None = None
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class WorkloadResult:
    """What one trial of a workload produced.

    ``passed`` is the workload's verdict; ``failure_count`` counts the failures it saw (e.g.
    corrupted collectives). ``step_times_ms`` holds one time per executed step, warm-up
    included (the statistics drop warm-up themselves). ``metrics`` are scalar extras
    (``layers_verified``, ``tflops``…) that end up in the matrix Dataset.
    """

    passed: bool
    failure_count: int = 0
    failure_details: list[FailureDetail] = field(default_factory=list)
    step_times_ms: list[float] = field(default_factory=list)
    elapsed_sec: float | None = None
    total_iterations: int | None = None
    executed_iterations: int | None = None
    configured_iterations: int | None = None
    #: False when the trial failed before its main work began (setup-like failures).
    main_work_started: bool = True
    metrics: dict[str, float] = field(default_factory=dict)
    #: Descriptive strings (device name, CPU capability…) kept beside the metrics.
    info: dict[str, str] = field(default_factory=dict)
    #: How many of the first ``step_times_ms`` are warm-up (the statistics drop them).
    warmup_steps: int = 0
    warnings: list[str] = field(default_factory=list)
    #: Files the workload wrote, relative to the trial's artifact dir (``stdout``, ``trace``…).
    artifacts: dict[str, str] = field(default_factory=dict)
    #: For the ``command`` workload: the process's exit code (negative: killed by that signal).
    exit_code: int | None = None
    #: The trial's own process, start to exit, when the workload ran one (``command``): the
    #: record's ``wall_clock_s``, timed by the kernel's exit notice, not by a poll.
    wall_clock_s: float | None = None

    def __post_init__(self) -> None:
        if not self.passed and self.failure_count == 0:
            self.failure_count = 1
        self.step_times_ms = [float(t) for t in self.step_times_ms]
        self.metrics = {str(k): float(v) for k, v in self.metrics.items()}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["failure_details"] = [f.to_dict() for f in self.failure_details]
        d["metrics"] = {k: (None if not math.isfinite(v) else v) for k, v in self.metrics.items()}
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkloadResult:
        data = dict(data)
        data["failure_details"] = [FailureDetail(**f) for f in data.get("failure_details", [])]
        data["metrics"] = {
            k: (math.nan if v is None else v) for k, v in (data.get("metrics") or {}).items()
        }
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class TrialContext:
    """What the engine tells a workload about the trial it runs."""

    cell: str
    trial: int
    #: Steps to run; ``None`` means the workload's ``default_steps``.
    steps: int | None = None
    seed: int = 0
    #: Where the trial may write files (logs, traces); created by the engine.
    artifact_dir: Path | None = None
    #: The cell's env overlay (already applied to ``os.environ`` by the engine).
    env: Mapping[str, str] = field(default_factory=dict)
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    #: ``time.monotonic()`` by which the trial must end; the engine enforces it too.
    deadline: float | None = None
    #: The argv after ``--`` (``command`` workload).
    command: Sequence[str] | None = None
    #: Collectors requested for this cell, name → options (``torch_profiler``…).
    collect: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Recipe settings the ``command`` workload reads.
    step_time_regex: str | None = None
    env_passthrough_mode: Literal["inherit", "file"] = "inherit"
    save_logs: bool = False
    #: Seconds of silent output and an idle process tree after which the trial is killed as
    #: hung (:mod:`aorta.run.hang`); ``None``: only the deadline.
    hang_after: float | None = None
    #: Distributed backend to use (``gloo``/``nccl``), resolved by the engine.
    backend: str | None = None
    #: True in a process-isolated worker: the trial already owns a process group, so children
    #: it starts stay in it (and die with it at the deadline).
    isolated: bool = False
    #: The cell's environment (``name``, ``kind``: local|docker, ``image``, ``env``).
    environment: Mapping[str, Any] = field(
        default_factory=lambda: {"name": "local", "kind": "local"}
    )

    @property
    def log_names(self) -> tuple[str, str]:
        """The trial's stdout/stderr file names: per rank when ranks share a folder."""
        if self.world_size == 1:
            return "stdout.log", "stderr.log"
        return f"rank{self.rank}.stdout.log", f"rank{self.rank}.stderr.log"

    def remaining(self) -> float | None:
        """Seconds left before the deadline (``None``: no deadline)."""
        return None if self.deadline is None else self.deadline - time.monotonic()


class Workload:
    """Base class of every workload.

    Subclasses set the class attributes and implement :meth:`run` (and :meth:`setup` /
    :meth:`cleanup` when they hold resources). The constructor must be cheap and must not fail
    for valid configs; expensive or failure-prone preparation goes into :meth:`setup`, whose
    exceptions the engine records as ``setup_failed``.
    """

    #: The registry name (the entry point's name wins when they differ).
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    launch_mode: ClassVar[LaunchMode] = "single_process"
    #: Fewest ranks a distributed workload can run with.
    min_world_size: ClassVar[int] = 1
    #: Isolation used when the recipe says ``auto``.
    default_isolation: ClassVar[Isolation] = "in_process"
    #: The least isolation the workload can run under (``process``: reads env at import time).
    required_isolation: ClassVar[Isolation] = "in_process"
    supported_isolation: ClassVar[frozenset[str]] = frozenset(ISOLATION_LEVELS)
    default_steps: ClassVar[int] = 10
    #: Whether the workload can run cells whose environment is a docker image.
    supports_docker: ClassVar[bool] = False
    #: Config keys the workload understands; others are reported as warnings. ``None``: any.
    config_keys: ClassVar[frozenset[str] | None] = None
    #: Collectors (``collect:``) the workload drives itself, e.g. ``torch_profiler`` through
    #: :class:`~aorta.run.profiler.StepProfiler`. A recipe asking for another is warned about
    #: when the sweep starts (and in ``--dry-run``). ``None``: not declared, nothing is said.
    collectors: ClassVar[frozenset[str] | None] = None
    #: What to tell a recipe that asks this workload for a collector it does not drive.
    collectors_hint: ClassVar[str] = "it will not be collected"

    def __init__(self, config: Mapping[str, Any], context: TrialContext) -> None:
        self.config = dict(config)
        self.context = context
        self.warnings: list[str] = []
        if self.config_keys is not None:
            unknown = sorted(set(self.config) - self.config_keys)
            if unknown:
                self.warnings.append(
                    f"workload {self.name!r} ignores unknown workload_config key(s): {', '.join(unknown)}"
                )

    @property
    def steps(self) -> int:
        return self.context.steps if self.context.steps is not None else self.default_steps

    def setup(self) -> None:
        """Prepare resources (allocate, connect, init process groups)."""

    def run(self) -> WorkloadResult:
        """Run the trial's steps and return the result."""
        raise NotImplementedError

    def cleanup(self) -> None:
        """Release resources; called once the object exists, whatever happened."""


def resolve_isolation(requested: str, workload: type[Workload]) -> Isolation:
    """The isolation a trial runs under: ``requested``, or the workload's default for ``auto``.

    Raises :class:`~aorta.errors.UsageError` when the recipe asks for less isolation than the
    workload requires, or for a level it does not support.

    >>> resolve_isolation("auto", Workload)
    'in_process'
    """
    level: Isolation = workload.default_isolation if requested == "auto" else requested  # type: ignore[assignment]
    if level not in ISOLATION_LEVELS:
        raise UsageError(f"trial_isolation: unknown level {requested!r}")
    if ISOLATION_LEVELS.index(level) < ISOLATION_LEVELS.index(workload.required_isolation):
        raise UsageError(
            f"trial_isolation: workload {workload.name!r} requires {workload.required_isolation!r} "
            f"isolation, the recipe asks for {requested!r}"
        )
    if level not in workload.supported_isolation:
        raise UsageError(
            f"trial_isolation: workload {workload.name!r} supports {', '.join(sorted(workload.supported_isolation))}, "
            f"not {level!r}"
        )
    return level


class UnknownWorkload(UsageError):
    """No workload of that name is registered."""


class WorkloadCatalog:
    """The workloads installed, found once through the ``aorta.workloads`` entry points.

    Classes are imported on first use only (most pull in torch).
    """

    def __init__(self, extra: Mapping[str, type[Workload]] | None = None) -> None:
        self._eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=WORKLOADS_GROUP)}
        self._loaded: dict[str, type[Workload]] = dict(extra or {})
        for name, cls in self._loaded.items():
            if not cls.name:
                cls.name = name

    def names(self) -> list[str]:
        return sorted(set(self._eps) | set(self._loaded))

    def __contains__(self, name: object) -> bool:
        return name in self._eps or name in self._loaded

    def get(self, name: str) -> type[Workload]:
        """The workload class registered as ``name``, or named by an import path
        ``package.module:Class`` (a workload you have not packaged as a plugin).

        Raises :class:`UnknownWorkload` listing the registered names, or
        :class:`~aorta.errors.AortaError` when the plugin fails to import.
        """
        if name in self._loaded:
            return self._loaded[name]
        ep = self._eps.get(name)
        if ep is None and ":" in name:
            ep = importlib.metadata.EntryPoint(name=name, value=name, group=WORKLOADS_GROUP)
        if ep is None:
            raise UnknownWorkload(
                f"unknown workload {name!r} (registered: {', '.join(self.names()) or 'none'}; "
                "or name a class as package.module:Class)"
            )
        try:
            cls = ep.load()
        except Exception as exc:
            raise AortaError(f"workload {name!r} ({ep.value}) failed to import: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Workload)):
            raise AortaError(f"workload {name!r} ({ep.value}) is not a Workload subclass")
        if not cls.name:
            cls.name = name
        self._loaded[name] = cls
        return cls

    def describe(self) -> list[dict[str, Any]]:
        """One row per workload: name, description, launch mode, isolation, or its import error."""
        rows: list[dict[str, Any]] = []
        for name in self.names():
            try:
                cls = self.get(name)
            except Exception as exc:
                rows.append({"name": name, "error": str(exc)})
                continue
            rows.append(
                {
                    "name": name,
                    "description": cls.description,
                    "launch_mode": cls.launch_mode,
                    "min_world_size": cls.min_world_size,
                    "default_isolation": cls.default_isolation,
                    "required_isolation": cls.required_isolation,
                    "source": self._eps[name].value if name in self._eps else "in-process",
                }
            )
        return rows
