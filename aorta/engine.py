"""Runs a plan: every cell × trial, with isolation, deadlines, resume and the run directory.

:func:`sweep` is the notebook and CLI entry point::

    result = aorta.sweep("recipes/cpu-smoke.yaml")
    result.run_dir        # triage_results/_no_ticket_/matmul/2026-11-30T04-55-38
    result.exit_code      # ExitCode.OK

Trials run cell by cell. After each trial its record is written atomically; after each cell
``matrix.md``/``matrix.json`` are rewritten, so a run killed at any point resumes
(:func:`sweep` with ``resume=``) from exactly the trials that are missing or unreadable.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aorta import envvars, procs
from aorta.errors import AortaError, ExitCode, UsageError
from aorta.matrix import CellSummary, matrix_json, matrix_markdown, summarize
from aorta.planning import Cell, Plan, TrialKey, plan
from aorta.progress import ProgressMode, Reporter, choose_reporter
from aorta.recipe import Recipe, dump_recipe, load_recipe, recipe_from_data
from aorta.record import TrialRecord, TrialStatus
from aorta.registry import Registry
from aorta.rundir import RunDir, utc_now
from aorta.trial import Outcome, Watchdog, run_in_process, run_in_worker, workload_ref
from aorta.workload import (
    Isolation,
    TrialContext,
    UnknownWorkload,
    Workload,
    WorkloadCatalog,
    resolve_isolation,
)

__all__ = ["Interrupted", "Prepared", "SweepResult", "prepare", "sweep"]

#: How long an in-process trial may overrun its deadline (stuck in native code) before the
#: engine records it as a timeout and stops the sweep for a resume.
STUCK_GRACE_S = 60.0


class Interrupted(AortaError):
    """The sweep was stopped (Ctrl-C, SIGTERM, a stuck trial); the run directory resumes."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, message: str, run_dir: Path) -> None:
        super().__init__(message)
        self.run_dir = run_dir


@dataclass
class Prepared:
    """A recipe made ready to run: the plan and what was resolved around it."""

    plan: Plan
    registry: Registry
    catalog: WorkloadCatalog
    #: None when the workload is not registered (the dry-run warns; a run fails each cell).
    workload: type[Workload] | None
    #: None when the workload is unknown.
    isolation: Isolation | None
    warnings: list[str] = field(default_factory=list)
    mitigations_files: list[str] = field(default_factory=list)


def prepare(
    recipe: Recipe | str | Path,
    *,
    command: Sequence[str] | None = None,
    ticket: str | None = None,
    timeout_s: float | None = None,
    isolation: str | None = None,
    mitigations_files: Sequence[str | Path] = (),
    registry: Registry | None = None,
    catalog: WorkloadCatalog | None = None,
) -> Prepared:
    """Load (if needed), apply command-line overrides, plan, and resolve the workload.

    Overrides are written into the recipe so ``recipe.resolved.yaml`` reproduces the run:
    ``ticket``, ``timeout_s`` (sets ``timeout_per_trial``), ``isolation`` (sets
    ``trial_isolation``) and ``command`` (the argv after ``--``).

    Raises :class:`~aorta.errors.RecipeError` / :class:`~aorta.errors.UsageError` for a bad
    recipe, an unknown mitigation, or an isolation the workload cannot run under.
    """
    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe, command=list(command) if command else None)
    elif command:
        recipe = recipe_from_data(recipe.model_dump(mode="json"), command=list(command))
    updates: dict[str, object] = {}
    if ticket is not None:
        updates["ticket"] = ticket
    if timeout_s is not None:
        updates["timeout_per_trial"] = float(timeout_s)
    if isolation is not None:
        updates["trial_isolation"] = isolation
    if updates:
        recipe = recipe_from_data({**recipe.model_dump(mode="json"), **updates})
    registry = registry or Registry.load(files=mitigations_files)
    the_plan = plan(recipe, registry=registry)
    catalog = catalog or WorkloadCatalog()
    warnings: list[str] = []
    workload: type[Workload] | None = None
    level: Isolation | None = None
    try:
        workload = catalog.get(the_plan.workload)
    except UnknownWorkload as exc:
        warnings.append(f"{exc}; every cell will fail with infrastructure_failed")
    if workload is not None:
        level = resolve_isolation(the_plan.isolation, workload)
        docker = sorted(
            {c.environment.name for c in the_plan.cells if c.environment.kind == "docker"}
        )
        if docker and not workload.supports_docker:
            warnings.append(
                f"workload {workload.name!r} cannot run in docker environments ({', '.join(docker)}); "
                "those cells will fail with infrastructure_failed — run aorta inside the image instead"
            )
    return Prepared(
        the_plan, registry, catalog, workload, level, warnings, [str(f) for f in mitigations_files]
    )


@dataclass
class SweepResult:
    """What a sweep produced: the run directory, the per-cell summaries and every record."""

    run_dir: Path
    status: str
    baseline: str
    summaries: list[CellSummary]
    records: list[TrialRecord]

    @property
    def exit_code(self) -> ExitCode:
        """OK, or INCOMPLETE when the baseline has no usable trial."""
        if self.status == "interrupted":
            return ExitCode.INTERRUPTED
        base = next((s for s in self.summaries if s.name == self.baseline), None)
        if base is None or base.n_ok == 0:
            return ExitCode.INCOMPLETE
        return ExitCode.OK

    @property
    def clean(self) -> list[CellSummary]:
        return [s for s in self.summaries if s.failures == 0 and s.errors == 0]

    @property
    def failing(self) -> list[CellSummary]:
        return [s for s in self.summaries if s.failures > 0]

    @property
    def erroring(self) -> list[CellSummary]:
        return [s for s in self.summaries if s.errors > 0]


# ------------------------------------------------------------------------------------------


def _recipe_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _event(record: TrialRecord, verdict: str) -> bool:
    if verdict == "timeout":
        return record.status is TrialStatus.TIMEOUT
    if verdict == "any_failure":
        return record.status not in (TrialStatus.OK, TrialStatus.DID_NOT_RUN)
    return record.status is TrialStatus.WORKLOAD_FAILED


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """A scheduler's SIGTERM stops the sweep like Ctrl-C: children reaped, run resumable."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Sweep:
    """One sweep's state; :func:`sweep` builds it and calls :meth:`run`."""

    def __init__(
        self, prepared: Prepared, rd: RunDir, reporter: Reporter, python: str | None
    ) -> None:
        self.p = prepared
        self.plan = prepared.plan
        self.recipe = prepared.plan.recipe
        self.rd = rd
        self.reporter = reporter
        self.python = python
        self.records: dict[tuple[str, int], TrialRecord] = {}
        self.host = socket.gethostname()

    # -- files -----------------------------------------------------------------------------

    def _header(self, status: str) -> dict[str, Any]:
        return {
            "ticket": self.recipe.ticket,
            "workload": self.plan.workload,
            "run_dir": str(self.rd.path),
            "baseline": self.plan.baseline,
            "threshold": self.plan.threshold,
            "status": status,
        }

    def _cells_data(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.plan.cells]

    def write_matrix(self, status: str) -> list[CellSummary]:
        rows = summarize(
            self._cells_data(),
            self.records.values(),
            baseline=self.plan.baseline,
            threshold=self.plan.threshold,
        )
        header = self._header(status)
        self.rd.write_json("matrix.json", matrix_json(rows, header=header))
        self.rd.write_text("matrix.md", matrix_markdown(rows, header=header))
        return rows

    def write_preamble(self, resumed: bool) -> None:
        from aorta.hostenv import snapshot

        text = dump_recipe(self.recipe)
        redaction = self.recipe.redaction
        snap_kw: dict[str, Any] = {}
        if redaction is not None:
            snap_kw = {
                "scrub_keys": redaction.scrub_env_keys,
                "scrub_paths": redaction.scrub_paths,
                "scrub_ips": redaction.scrub_ip_addresses,
            }
        if not resumed:
            self.rd.write_text("recipe.resolved.yaml", text)
            self.rd.write_json("host_env.json", snapshot(**snap_kw))
        for cell in self.plan.cells:
            self.rd.write_json(f"cells/{cell.name}/cell.json", cell.to_dict())
        for env in {c.environment.name: c.environment for c in self.plan.cells}.values():
            self.rd.write_json(f"environments/{env.name}/env.json", env.to_dict())
        manifest = {
            "schema_version": 1,
            "status": "running",
            "recipe_sha256": _recipe_sha(text),
            "ticket": self.recipe.ticket,
            "workload": self.plan.workload,
            "host": self.host,
            "pid": os.getpid(),
            "aorta_version": _aorta_version(),
            "isolation": self.p.isolation,
            "n_cells": len(self.plan.cells),
            "n_trials": self.plan.n_trials,
            "cells": {c.name: c.cell_id for c in self.plan.cells},
            "mitigations_files": self.p.mitigations_files,
        }
        if resumed:
            manifest["resumed_at"] = utc_now()
            self.rd.update_manifest(**manifest)
        else:
            manifest["started_at"] = utc_now()
            self.rd.write_json("manifest.json", manifest)

    # -- trials ------------------------------------------------------------------------------

    def _context(self, key: TrialKey, deadline: float) -> TrialContext:
        cell = key.cell
        r = self.recipe
        return TrialContext(
            cell=cell.name,
            trial=key.trial,
            steps=cell.steps,
            seed=key.seed,
            artifact_dir=self.rd.artifact_dir(cell.name, key.trial),
            env=dict(cell.env),
            deadline=deadline,
            command=list(self.plan.command) if self.plan.command else None,
            collect={c.name: dict(c.options) for c in cell.collect},
            step_time_regex=r.step_time_regex,
            env_passthrough_mode=r.env_passthrough_mode,
            save_logs=r.save_logs,
            isolated=self.p.isolation == "process",
            environment=cell.environment.to_dict(),
        )

    def _overlay(self, key: TrialKey) -> dict[str, str]:
        art = self.rd.artifact_dir(key.cell.name, key.trial)
        return {
            **key.cell.env,
            envvars.RUN_DIR: str(self.rd.path),
            envvars.CELL: key.cell.name,
            envvars.TRIAL: str(key.trial),
            envvars.SEED: str(key.seed),
            envvars.ARTIFACT_DIR: str(art),
        }

    def _execute(self, key: TrialKey, ctx: TrialContext, overlay: dict[str, str]) -> Outcome:
        cls = self.p.workload
        if cls is None:
            return Outcome(
                TrialStatus.INFRASTRUCTURE_FAILED,
                error=f"unknown workload {self.plan.workload!r} (registered: {', '.join(self.p.catalog.names())})",
            )
        if key.cell.environment.kind == "docker" and not cls.supports_docker:
            return Outcome(
                TrialStatus.INFRASTRUCTURE_FAILED,
                error=f"workload {cls.name!r} cannot run in docker environment {key.cell.environment.name!r}",
            )
        config = dict(key.cell.workload_config)
        if self.p.isolation == "process":
            return run_in_worker(
                workload_ref(cls), config, ctx, env={**os.environ, **overlay}, python=self.python
            )

        def stuck() -> None:
            self._abandon(key, ctx)

        with Watchdog(ctx.deadline, STUCK_GRACE_S, stuck):
            return run_in_process(cls, config, ctx, overlay)

    def _abandon(self, key: TrialKey, ctx: TrialContext) -> None:
        # Runs on the watchdog thread while the main thread is stuck in native code: record
        # the timeout, leave the run resumable, and end the process (nothing else can).
        record = self._record(
            key,
            Outcome(
                TrialStatus.TIMEOUT,
                error="stuck in native code past the deadline; the sweep was stopped",
            ),
            0.0,
            utc_now(),
        )
        self.rd.write_trial(record)
        self.records[(key.cell.name, key.trial)] = record
        with contextlib.suppress(Exception):
            self.write_matrix("interrupted")
            self.rd.update_manifest(status="interrupted", finished_at=utc_now())
        self.reporter.message(
            f"aorta: {key.cell.name} trial {key.trial} is stuck past its deadline in native code; recorded as timeout. "
            f"Resume with: aorta sweep resume {self.rd.path}  (trial_isolation: process survives such hangs)"
        )
        procs.reap_all()
        os._exit(int(ExitCode.INTERRUPTED))

    def _collect_paths(self, overlay: dict[str, str], art: Path) -> dict[str, str]:
        found: dict[str, str] = {}
        env = {**os.environ, **overlay}
        for pattern in self.recipe.collect_paths:
            expanded = _expand(pattern, env)
            for src in sorted(glob.glob(expanded)):
                path = Path(src)
                if not path.is_file():
                    continue
                try:
                    path.resolve().relative_to(art.resolve())
                    found[path.name] = self.rd.relative(path)
                    continue
                except ValueError:
                    pass
                dest = art / "collected" / path.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    shutil.copy2(path, dest)
                    found[f"collected/{path.name}"] = self.rd.relative(dest)
        return found

    def _record(self, key: TrialKey, outcome: Outcome, wall: float, started: str) -> TrialRecord:
        res = outcome.result
        art = self.rd.artifact_dir(key.cell.name, key.trial)
        artifacts: dict[str, str] = {}
        if art.is_dir():
            for p in sorted(art.rglob("*")):
                if p.is_file():
                    artifacts[p.relative_to(art).as_posix()] = self.rd.relative(p)
        return TrialRecord(
            cell=key.cell.name,
            cell_id=key.cell.cell_id,
            trial=key.trial,
            seed=key.seed,
            workload=self.plan.workload,
            status=outcome.status,
            passed=outcome.status is TrialStatus.OK,
            failure_count=(
                res.failure_count if res else int(outcome.status is TrialStatus.WORKLOAD_FAILED)
            ),
            failure_details=[f.to_dict() for f in res.failure_details] if res else [],
            step_times_ms=res.step_times_ms if res else [],
            elapsed_sec=res.elapsed_sec if res else None,
            wall_clock_s=wall,
            total_iterations=res.total_iterations if res else None,
            executed_iterations=res.executed_iterations if res else None,
            configured_iterations=res.configured_iterations if res else None,
            main_work_started=outcome.main_work_started,
            metrics=res.metrics if res else {},
            info=res.info if res else {},
            warmup_steps=res.warmup_steps if res else 0,
            error=outcome.error,
            hint=outcome.hint,
            warnings=outcome.warnings,
            exit_code=outcome.exit_code,
            isolation=self.p.isolation,
            started_at=started,
            finished_at=utc_now(),
            host=self.host,
            world_size=1,
            ranks=[],
            artifacts=artifacts,
        )

    def run_trial(self, key: TrialKey) -> TrialRecord:
        deadline = time.monotonic() + self.plan.timeout_s
        ctx = self._context(key, deadline)
        overlay = self._overlay(key)
        started = utc_now()
        t0 = time.monotonic()
        outcome = self._execute(key, ctx, overlay)
        wall = time.monotonic() - t0
        if self.recipe.collect_paths:
            self._collect_paths(overlay, ctx.artifact_dir or self.rd.path)
        return self._record(key, outcome, wall, started)

    def _skip(self, key: TrialKey, why: str) -> TrialRecord:
        return TrialRecord(
            cell=key.cell.name,
            cell_id=key.cell.cell_id,
            trial=key.trial,
            seed=key.seed,
            workload=self.plan.workload,
            status=TrialStatus.DID_NOT_RUN,
            passed=False,
            error=why,
            isolation=self.p.isolation,
            host=self.host,
        )

    # -- the loop ----------------------------------------------------------------------------

    def run_cell(self, cell: Cell) -> None:
        stop = self.plan.stop_after
        events = 0
        for trial in range(cell.trials):
            key = TrialKey(cell, trial)
            done = self.records.get((cell.name, trial))
            if done is not None:
                events += stop is not None and _event(done, stop.event_verdict)
                continue
            if stop is not None and events >= stop.events:
                record = self._skip(
                    key, f"stop_after: {events} {stop.event_verdict} trial(s) reached"
                )
            else:
                self.reporter.trial_started(cell.name, trial)
                record = self.run_trial(key)
                events += stop is not None and _event(record, stop.event_verdict)
            self.rd.write_trial(record)
            self.records[(cell.name, trial)] = record
            self.reporter.trial_done(cell.name, trial, record)

    def run(self, done: dict[tuple[str, int], TrialRecord]) -> SweepResult:
        self.records.update(done)
        self.reporter.start(
            run_dir=str(self.rd.path),
            total=self.plan.n_trials,
            done=len(done),
            cells=len(self.plan.cells),
        )
        for warning in self.p.warnings:
            self.reporter.message(f"warning: {warning}")
        try:
            for cell in self.plan.cells:
                self.run_cell(cell)
                self.write_matrix("running")
                self.reporter.cell_done(cell.name)
        except KeyboardInterrupt:
            procs.reap_all()
            self.write_matrix("interrupted")
            self.rd.update_manifest(status="interrupted", finished_at=utc_now())
            self.reporter.close()
            raise Interrupted(
                f"interrupted; resume with: aorta sweep resume {self.rd.path}", self.rd.path
            ) from None
        rows = self.write_matrix("complete")
        self.rd.update_manifest(status="complete", finished_at=utc_now())
        # results.nc: the finished run as an xarray Dataset (aorta.dataset). Best effort: the
        # records and matrix files are written, and `aorta.load_run` rebuilds it from them.
        try:
            from aorta.dataset import write_results

            write_results(self.rd.path)
        except (OSError, ValueError, ImportError, AortaError) as exc:
            self.reporter.message(f"warning: results.nc not written: {exc}")
        self.reporter.close()
        ordered = [
            self.records[k]
            for k in sorted(self.records, key=lambda k: (self.plan.cell(k[0]).index, k[1]))
        ]
        return SweepResult(self.rd.path, "complete", self.plan.baseline, rows, ordered)


def _expand(pattern: str, env: dict[str, str]) -> str:
    # ${VAR} and $VAR from the trial's environment (os.path.expandvars reads os.environ only).
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), m.group(0)), pattern
    )


def _aorta_version() -> str:
    from aorta import __version__

    return __version__


def sweep(
    recipe: Recipe | str | Path | None = None,
    *,
    command: Sequence[str] | None = None,
    output: str | Path = "triage_results",
    resume: str | Path | None = None,
    ticket: str | None = None,
    timeout_s: float | None = None,
    isolation: str | None = None,
    mitigations_files: Sequence[str | Path] = (),
    progress: ProgressMode | Reporter = "auto",
    verbose: bool = False,
    python: str | None = None,
    workloads: Mapping[str, type[Workload]] | None = None,
) -> SweepResult:
    """Run every cell × trial of ``recipe`` and write the run directory.

    Parameters
    ----------
    recipe
        A :class:`~aorta.recipe.Recipe` or a recipe file. Omit it with ``resume``.
    command
        Probe mode: the argv to run in every trial.
    output
        Root of the run directories (``<output>/<ticket>/<workload>/<time>``).
    resume
        An existing run directory: run only its missing or unreadable trials, with the recipe
        it recorded (``recipe.resolved.yaml``).
    ticket, timeout_s, isolation
        Override the recipe's ``ticket``, ``timeout_per_trial`` and ``trial_isolation``.
    mitigations_files
        Sidecar files with more mitigations and environments.
    progress
        ``auto`` (rich on a terminal, tqdm in Jupyter, lines otherwise), ``lines``,
        ``rich``, ``tqdm``, ``none``, or a :class:`~aorta.progress.Reporter`.
    verbose
        One progress line per trial.
    python
        The interpreter for process-isolated workers (default: this one).
    workloads
        Extra workload classes by name, beside the registered ones (a notebook's own
        workload; process-isolated workers import it by its module path).

    Returns
    -------
    SweepResult
        ``run_dir``, per-cell ``summaries``, every ``records`` and the ``exit_code``.

    Raises
    ------
    RecipeError, UsageError
        Before anything runs.
    Interrupted
        Ctrl-C or SIGTERM: children were reaped and the run directory can be resumed.

    Examples
    --------
    >>> import tempfile
    >>> from aorta.recipe import load_recipe_text
    >>> r = load_recipe_text("cells: [{name: base, mitigations: [none]}]", command=["true"])
    >>> result = sweep(r, output=tempfile.mkdtemp(), progress="none")
    >>> result.summaries[0].n_ok, result.exit_code.name
    (1, 'OK')
    """
    if resume is not None:
        rd = RunDir.open(resume)
        manifest = rd.manifest()
        resolved = rd.path / "recipe.resolved.yaml"
        if recipe is not None:
            given = (
                recipe
                if isinstance(recipe, Recipe)
                else load_recipe(recipe, command=list(command) if command else None)
            )
            if dump_recipe(given) != resolved.read_text():
                raise UsageError(
                    f"--recipe differs from the recipe {rd.path} was started with; resume without --recipe"
                )
        prepared = prepare(
            resolved,
            mitigations_files=mitigations_files or manifest.get("mitigations_files", []),
            catalog=WorkloadCatalog(extra=workloads),
        )
    else:
        if recipe is None:
            raise UsageError("give a recipe (or resume=RUN_DIR)")
        prepared = prepare(
            recipe,
            command=command,
            ticket=ticket,
            timeout_s=timeout_s,
            isolation=isolation,
            mitigations_files=mitigations_files,
            catalog=WorkloadCatalog(extra=workloads),
        )
        rd = RunDir.create(
            output, ticket=prepared.plan.recipe.ticket, workload=prepared.plan.workload
        )
    reporter = choose_reporter(progress, verbose=verbose)
    with rd.lock(), _sigterm_as_interrupt():
        engine = _Sweep(prepared, rd, reporter, python)
        expected = {c.name: c.cell_id for c in prepared.plan.cells}
        done = rd.completed(expected) if resume is not None else {}
        try:
            engine.write_preamble(resumed=resume is not None)
        except KeyboardInterrupt:
            raise Interrupted("interrupted before the first trial", rd.path) from None
        return engine.run(done)
