"""Preparing a sweep: a recipe made ready to run on this rank, or a run made ready to resume.

:func:`prepare` loads a recipe, applies the command line's overrides, plans it and resolves
the workload (what ``aorta sweep run --dry-run`` prints); :func:`prepare_run` is rank 0's
start of a sweep, new or resumed. Nothing is written; the recipe and the run directory are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aorta.errors import UsageError
from aorta.recipe.plan import Plan, plan
from aorta.recipe.registry import Registry
from aorta.recipe.schema import Recipe, dump_recipe, load_recipe, recipe_from_data
from aorta.run.options import RunOptions
from aorta.run.ranks import DistEnv
from aorta.run.workload import (
    Isolation,
    UnknownWorkload,
    Workload,
    WorkloadCatalog,
    resolve_isolation,
)
from aorta.store.rundir import RunDir

__all__ = ["Prepared", "check_world_size", "prepare", "prepare_run", "with_trials"]


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
    options: RunOptions | None = None,
    registry: Registry | None = None,
    catalog: WorkloadCatalog | None = None,
) -> Prepared:
    """Load (if needed), apply the command line's overrides, plan, and resolve the workload.

    The overrides of ``options`` (:class:`~aorta.run.options.RunOptions`) are written into
    the recipe so ``recipe.resolved.yaml`` reproduces the run: ``ticket``, ``timeout_s`` (sets
    ``timeout_per_trial``), ``isolation`` (sets ``trial_isolation``) and ``command`` (the
    argv after ``--``); its ``mitigations_files`` extend the registry, its ``workloads`` the
    catalog (when none is given).

    Raises :class:`~aorta.errors.RecipeError` / :class:`~aorta.errors.UsageError` for a bad
    recipe, an unknown mitigation, or an isolation the workload cannot run under.
    """
    opts = options or RunOptions()
    command = list(opts.command) if opts.command else None
    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe, command=command)
    elif command:
        recipe = recipe_from_data(recipe.model_dump(mode="json"), command=command)
    updates: dict[str, object] = {}
    if opts.ticket is not None:
        updates["ticket"] = opts.ticket
    if opts.timeout_s is not None:
        updates["timeout_per_trial"] = float(opts.timeout_s)
    if opts.isolation is not None:
        updates["trial_isolation"] = opts.isolation
    if opts.check_numerics is not None:
        updates["check_numerics"] = opts.check_numerics
    if updates:
        recipe = recipe_from_data({**recipe.model_dump(mode="json"), **updates})
    files = [str(f) for f in opts.mitigations_files]
    registry = registry or Registry.load(files=files)
    the_plan = plan(recipe, registry=registry)
    catalog = catalog or WorkloadCatalog(extra=opts.workloads)
    warnings: list[str] = []
    workload: type[Workload] | None = None
    level: Isolation | None = None
    try:
        workload = catalog.get(the_plan.workload)
    except UnknownWorkload as exc:
        warnings.append(f"{exc}; every cell will fail with infrastructure_failed")
    if workload is not None:
        level = resolve_isolation(the_plan.isolation, workload)
        warnings.extend(_collector_warnings(the_plan, workload))
        docker = sorted(
            {c.environment.name for c in the_plan.cells if c.environment.kind == "docker"}
        )
        if docker and not workload.supports_docker:
            warnings.append(
                f"workload {workload.name!r} cannot run in docker environments ({', '.join(docker)}); "
                "those cells will fail with infrastructure_failed — run aorta inside the image instead"
            )
    return Prepared(the_plan, registry, catalog, workload, level, warnings, files)


def _collector_warnings(the_plan: Plan, workload: type[Workload]) -> list[str]:
    """A collector the recipe asks for that the workload does not drive is never silent."""
    if workload.collectors is None:
        return []
    asked = sorted({c.name for cell in the_plan.cells for c in cell.collect})
    missing = [name for name in asked if name not in workload.collectors]
    return [
        f"collect: {name}: workload {workload.name!r} does not run it itself; "
        f"{workload.collectors_hint}"
        for name in missing
    ]


def prepare_run(
    recipe: Recipe | str | Path | None,
    *,
    resume: str | Path | None,
    options: RunOptions,
    catalog: WorkloadCatalog,
) -> tuple[Prepared, RunDir | None]:
    """What rank 0 runs: a new run's prepared recipe (``resume`` None), or the recipe a run
    to resume was started with — refusing a different recipe or command — with the trial
    counts ``aorta sweep extend`` recorded. The run directory comes back when resuming."""
    if resume is None:
        if recipe is None:
            raise UsageError("give a recipe (or resume=RUN_DIR)")
        return prepare(recipe, options=options, catalog=catalog), None
    rd = RunDir.open(resume)
    resolved = rd.recipe_path
    command = options.command
    if command and recipe is None:
        recorded = load_recipe(resolved).command
        if list(command) != (recorded or []):
            raise UsageError(
                f"{rd.path} was started with the command {recorded!r}, not {list(command)!r}: "
                "a resumed run keeps its command (start a new run for a different one)"
            )
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
    manifest = rd.manifest()
    files = options.mitigations_files or manifest.get("mitigations_files", [])
    prepared = prepare(resolved, options=RunOptions(mitigations_files=files), catalog=catalog)
    return with_trials(prepared, manifest.get("trials_override") or {}), rd


def with_trials(prepared: Prepared, trials: Mapping[str, int]) -> Prepared:
    """``prepared`` with the trial counts ``aorta sweep extend`` recorded in the manifest."""
    if not trials:
        return prepared
    try:
        grown = prepared.plan.with_trials(trials)
    except KeyError as exc:
        raise UsageError(f"the run's trials_override names {exc.args[0]}") from None
    return dataclasses.replace(prepared, plan=grown)


def check_world_size(prepared: Prepared, dist: DistEnv, recipe: object) -> None:
    cls = prepared.workload
    if cls is None or cls.launch_mode != "distributed" or dist.world_size >= cls.min_world_size:
        return
    where = recipe if isinstance(recipe, str | Path) else "RECIPE"
    raise UsageError(
        f"workload {cls.name!r} needs at least {cls.min_world_size} ranks, WORLD_SIZE is {dist.world_size}; "
        f"run it under torchrun: torchrun --nproc-per-node={cls.min_world_size} $(command -v aorta) sweep run --recipe {where}"
    )
