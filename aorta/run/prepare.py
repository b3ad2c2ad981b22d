"""Preparing a sweep: a recipe made ready to run on this rank, or a run made ready to resume.

:func:`prepare` loads a recipe, applies the command line's overrides, plans it and resolves
the workload (what ``aorta sweep run --dry-run`` prints); :func:`prepare_run` is rank 0's
start of a sweep, new or resumed. Nothing is written; the recipe and the run directory are read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aorta.errors import AortaError, Problem, RecipeError, UsageError, by_path
from aorta.recipe import Recipe, dump_recipe, load_recipe
from aorta.recipe.checks import missing_command  # not on aorta.recipe's face
from aorta.recipe.load import recipe_from_data  # not on aorta.recipe's face
from aorta.recipe.plan import Plan, plan, recipe_problems
from aorta.recipe.registry import Registry
from aorta.recipe.yamldoc import parse_yaml
from aorta.run.options import RunOptions
from aorta.run.ranks import DistEnv
from aorta.run.workload import (
    Isolation,
    UnknownWorkload,
    Workload,
    WorkloadCatalog,
    resolve_isolation,
)
from aorta.store.rundir import RunDir, aorta_command

__all__ = [
    "Prepared",
    "Validation",
    "check_recipe_file",
    "check_world_size",
    "prepare",
    "prepare_run",
    "validate_recipe",
    "with_trials",
]


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
    files = [str(f) for f in opts.mitigations_files]
    registry = registry or Registry.load(files=files)
    catalog = catalog or WorkloadCatalog(extra=opts.workloads)
    updates = _overrides(opts)
    the_plan: Plan | None = None
    if not isinstance(recipe, Recipe):
        found = _check_file(recipe, options=opts, registry=registry, catalog=catalog)
        if found is not None and found.plan is not None:
            # Not a problem anywhere: validating planned it already, overrides and all.
            the_plan, recipe = found.plan, found.plan.recipe
        else:  # unreadable (load_recipe says so), or a probe recipe's command still to come
            recipe = load_recipe(recipe, command=command)
    elif command:
        recipe = recipe_from_data(recipe.model_dump(mode="json"), command=command)
    if the_plan is None:
        if updates:
            recipe = recipe_from_data({**recipe.model_dump(mode="json"), **updates})
        the_plan = plan(recipe, registry=registry)
    # Read from the recipe as dumped, which keeps the file's shape (axes stay axes): the
    # same paths and lines `recipe validate` warns with, a file's or flag mode's recipe.
    _, warned = _workload_problems(recipe.model_dump(mode="json"), catalog, [])
    workload: type[Workload] | None = None
    level: Isolation | None = None
    with contextlib.suppress(UnknownWorkload):  # among `warned`: every cell will fail
        workload = catalog.get(the_plan.workload)
    if workload is not None:
        level = resolve_isolation(the_plan.isolation, workload)
    warnings = _sweep_warnings(the_plan, workload, by_path(warned))
    return Prepared(the_plan, registry, catalog, workload, level, warnings, files)


@dataclass(frozen=True)
class Validation:
    """What ``aorta recipe validate`` finds in one pass (:func:`validate_recipe`)."""

    #: Every problem, each with its path in the recipe; empty when the recipe would run.
    problems: list[Problem]
    #: The plan, when there is no problem.
    plan: Plan | None = None
    #: A probe recipe whose command comes after ``--`` when it runs.
    pending_command: bool = False
    #: What the run would warn about, worded as ``sweep run`` and its ``--dry-run`` print it
    #: (:attr:`run_warns`, a collector the workload does not drive, …).
    warnings: list[str] = field(default_factory=list)
    #: The checks that could not run until the problems are fixed.
    skipped: tuple[str, ...] = ()
    #: What a run only warns about, each with its path (an unregistered workload: its
    #: trials fail; a ``workload_config`` key the workload does not read): not among
    #: ``problems``, since a workload may be a plugin installed only where the run goes.
    run_warns: tuple[Problem, ...] = ()


def validate_recipe(
    path: str | Path,
    *,
    command: list[str] | None = None,
    mitigations_files: Sequence[str | Path] = (),
    catalog: WorkloadCatalog | None = None,
) -> Validation:
    """Every problem of a recipe file in one pass: its structure, the names it uses
    (mitigations, environments, the workload) and what a run would refuse that the recipe
    alone tells — an isolation the workload cannot run under, ``workload_config`` keys the
    workload does not read (``straggler_rank`` on a single-process workload) — each with its
    path. A file that cannot be read or parsed is one problem.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.yaml"
    >>> _ = p.write_text("workload: race\\ntrial_isolation: in_process\\ncells: [{name: a, mitigations: [none]}]\\n")
    >>> [str(x) for x in validate_recipe(p).problems]  # doctest: +ELLIPSIS
    ["trial_isolation: workload 'race' requires 'process' isolation, the recipe asks for 'in_process'"]
    """
    path = Path(path)
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Validation([Problem("", "no such file")])
    except (OSError, UnicodeDecodeError) as exc:
        return Validation([Problem("", f"cannot read: {exc}")])
    except RecipeError as exc:
        return Validation(list(exc.problems))
    try:
        registry = Registry.load(files=[str(f) for f in mitigations_files])
    except RecipeError as exc:
        return Validation(list(exc.problems))
    return _validate_data(data, command=command, registry=registry, catalog=catalog)


def _validate_data(
    data: object,
    *,
    command: list[str] | None,
    registry: Registry,
    catalog: WorkloadCatalog | None,
) -> Validation:
    """:func:`validate_recipe` of a parsed document: the one list of problems that ``recipe
    validate`` prints and :func:`prepare` refuses a recipe file with."""
    the_plan, problems, pending, skipped = recipe_problems(data, registry=registry, command=command)
    refused, warned = _workload_problems(data, catalog or WorkloadCatalog(), problems)
    problems = by_path([*problems, *refused])
    warned = by_path(warned)
    if problems:
        return Validation(
            problems,
            pending_command=pending,
            warnings=_sweep_warnings(None, None, warned),
            skipped=skipped,
            run_warns=tuple(warned),
        )
    assert the_plan is not None
    cls: type[Workload] | None = None
    with contextlib.suppress(AortaError):
        cls = (catalog or WorkloadCatalog()).get(the_plan.workload)
    return Validation(
        [], the_plan, pending, _sweep_warnings(the_plan, cls, warned), run_warns=tuple(warned)
    )


def check_recipe_file(
    path: str | Path,
    *,
    options: RunOptions | None = None,
    registry: Registry | None = None,
    catalog: WorkloadCatalog | None = None,
    pending_ok: bool = False,
) -> None:
    """Refuse a recipe file a run would refuse, with every problem :func:`validate_recipe`
    finds, sorted by path: one rule for ``recipe validate``, ``sweep run`` and its
    ``--dry-run``. ``options`` give the command after ``--``, the mitigations files and the
    extra workloads (unless ``registry``, ``catalog`` are given); ``pending_ok``: a probe
    recipe's command may still come (a dry run).

    What a run only warns about — a workload not registered (its trials fail), a
    ``workload_config`` key the workload does not read — refuses nothing: it is among
    :func:`prepare`'s warnings, worded as ``recipe validate`` prints it. A file that cannot be read or parsed is left to
    :func:`~aorta.recipe.load.load_recipe`, whose error names it.

    Raises
    ------
    RecipeError
        Carrying every problem (``err.problems``), the checks skipped until they are
        fixed (``err.skipped``) and what the run would warn about (``err.warnings``, as
        :attr:`Validation.warnings` words it).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.yaml"
    >>> _ = p.write_text("trials: 0\\nworkload: matmul\\ncells: [{name: a, mitigations: [xnak]}]\\n")
    >>> try:
    ...     check_recipe_file(p)
    ... except RecipeError as err:
    ...     [f"{x.path}: {x.message.split(';')[0]}" for x in err.problems]
    ["cells[0].mitigations[0]: unknown mitigation 'xnak'", 'trials: must be ≥ 1, got integer 0']
    """
    _check_file(path, options=options, registry=registry, catalog=catalog, pending_ok=pending_ok)


def _check_file(
    path: str | Path,
    *,
    options: RunOptions | None,
    registry: Registry | None,
    catalog: WorkloadCatalog | None,
    pending_ok: bool = False,
) -> Validation | None:
    """:func:`check_recipe_file`, returning what validating found (``None``: the file could
    not be read or parsed); its plan, when it has one, is the run's, the overrides of
    ``options`` applied."""
    try:
        data = parse_yaml(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RecipeError):
        return None
    opts = options or RunOptions()
    if isinstance(data, Mapping):
        # What the command line overrides is what the run checks (--isolation process fixes
        # a recipe's in_process for race).
        data = {**data, **_overrides(opts)}
    found = _validate_data(
        data,
        command=list(opts.command) if opts.command else None,
        registry=registry or Registry.load(files=[str(f) for f in opts.mitigations_files]),
        catalog=catalog or WorkloadCatalog(extra=opts.workloads),
    )
    problems = found.problems
    if found.pending_command and not pending_ok:
        problems = by_path([*problems, missing_command()])
    if problems:
        # What the run would warn about rides along, so a refusal shows the list `recipe
        # validate` shows: fixing the problems must not uncover warnings never shown.
        raise RecipeError(
            problems, source=str(path), skipped=found.skipped, warnings=found.warnings
        )
    return found


def _overrides(opts: RunOptions) -> dict[str, object]:
    """The recipe fields the run's options override, so ``recipe.resolved.yaml`` reproduces
    the run (:func:`prepare`)."""
    updates: dict[str, object] = {}
    if opts.ticket is not None:
        updates["ticket"] = opts.ticket
    if opts.timeout_s is not None:
        updates["timeout_per_trial"] = float(opts.timeout_s)
    if opts.isolation is not None:
        updates["trial_isolation"] = opts.isolation
    if opts.check_numerics is not None:
        updates["check_numerics"] = opts.check_numerics
    return updates


def _workload_problems(
    data: object, catalog: WorkloadCatalog, found: list[Problem]
) -> tuple[list[Problem], list[Problem]]:
    """The workload's name, isolation and config keys, read from the raw document (so they
    show whatever else is wrong): ``(refused, warned)``, what a run refuses and what it only
    warns about."""
    if not isinstance(data, Mapping):
        return [], []
    name = data.get("workload")
    if name is None and (data.get("mode") == "probe" or data.get("command") is not None):
        name = "command"
    if not isinstance(name, str) or any(p.path == "workload" for p in found):
        return [], []
    try:
        cls = catalog.get(name)
    except UnknownWorkload as exc:
        return [], [Problem("workload", str(exc))]
    except AortaError as exc:
        return [Problem("workload", str(exc))], []
    refused: list[Problem] = []
    isolation = data.get("trial_isolation", "auto")
    if isinstance(isolation, str) and not any(p.path == "trial_isolation" for p in found):
        try:
            resolve_isolation(isolation, cls)
        except UsageError as exc:
            refused.append(Problem("trial_isolation", str(exc).removeprefix("trial_isolation: ")))
    return refused, _config_key_problems(data, name, cls)


def _config_key_problems(
    data: Mapping[str, object], name: str, cls: type[Workload]
) -> list[Problem]:
    """The ``workload_config`` keys (the recipe's, each cell's, the axes') ``cls`` does not
    read."""
    out: list[Problem] = []
    if cls.config_keys is None:
        return out
    configs = [("workload_config", data.get("workload_config"))]
    cells = data.get("cells")
    for i, cell in enumerate(cells if isinstance(cells, list) else []):
        if isinstance(cell, Mapping):
            configs.append((f"cells[{i}].workload_config", cell.get("workload_config")))
    axes = data.get("axes")
    if isinstance(axes, Mapping):
        configs.append(("axes.workload_config", axes.get("workload_config")))
    for where, config in configs:
        for key in config if isinstance(config, Mapping) else {}:
            if isinstance(key, str) and key not in cls.config_keys:
                reads = ", ".join(sorted(cls.config_keys)) or "none"
                extra = (
                    f"; {key} is read by distributed workloads only"
                    if key.startswith("straggler_") and cls.launch_mode != "distributed"
                    else ""
                )
                out.append(
                    Problem(
                        f"{where}.{key}",
                        f"workload {name!r} does not read {key!r} (it reads: {reads}){extra}",
                    )
                )
    return out


def _bisect_note(recipe: Recipe) -> str:
    """A sweep of a recipe with a ``bisect`` block runs its cells as written: the search is
    ``aorta bisect``'s (whose steps' recipes have no such block), and a user who gave the
    recipe to ``aorta sweep run`` hears so rather than wait for a search that never starts."""
    assert recipe.bisect is not None
    return (
        f"bisect: ignored by a sweep, which runs the cells as written; "
        f"'aorta bisect --recipe FILE' searches the {len(recipe.bisect.values)} values "
        f"of {recipe.bisect.variable}"
    )


def _sweep_warnings(
    the_plan: Plan | None, workload: type[Workload] | None, warned: Sequence[Problem]
) -> list[str]:
    """What a sweep of the recipe warns about, in one order for ``recipe validate``, ``sweep
    run`` and its ``--dry-run``: what the recipe's workload part only warns about
    (``warned``, by path), then what the plan tells (``the_plan`` None: not planned yet)."""
    out = [_run_warn_line(p) for p in warned]
    if the_plan is None:
        return out
    if the_plan.recipe.bisect is not None:
        out.append(_bisect_note(the_plan.recipe))
    if workload is None:
        return out
    out.extend(_collector_warnings(the_plan, workload))
    docker = sorted({c.environment.name for c in the_plan.cells if c.environment.kind == "docker"})
    if docker and not workload.supports_docker:
        out.append(
            f"workload {workload.name!r} cannot run in docker environments ({', '.join(docker)}); "
            "those cells will fail with infrastructure_failed — run aorta inside the image instead"
        )
    return out


def _run_warn_line(p: Problem) -> str:
    """One warning of :attr:`Validation.run_warns`, saying what the run does about it."""
    if p.path == "workload":
        return f"{p.message}; every cell will fail with infrastructure_failed"
    return f"{p}; the trials ignore it (each trial records a warning)"


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
    where = shlex.quote(str(recipe)) if isinstance(recipe, str | Path) else "RECIPE"
    line = aorta_command(
        f"sweep run --recipe {where}",
        {"kind": "torchrun", "nnodes": 1, "nproc_per_node": cls.min_world_size},
    )
    raise UsageError(
        f"workload {cls.name!r} needs at least {cls.min_world_size} ranks, WORLD_SIZE is {dist.world_size}; "
        f"run it under torchrun: {line}"
    )
