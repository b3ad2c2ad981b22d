"""Runs a plan: every cell × trial, with isolation, deadlines, resume and the run directory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aorta.planning import Plan, plan
from aorta.recipe import Recipe, load_recipe
from aorta.registry import Registry
from aorta.workload import Isolation, UnknownWorkload, Workload, WorkloadCatalog, resolve_isolation

__all__ = ["Prepared", "prepare"]


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
    """
    from aorta.recipe import recipe_from_data

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
    return Prepared(the_plan, registry, catalog, workload, level, warnings)
