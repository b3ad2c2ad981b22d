"""From a recipe to the cells and trials to run — pure, no files, no processes.

:func:`plan` resolves every cell's mitigations and environment against a
:class:`~aorta.recipe.registry.Registry`, merges the environment overlay with the precedence

    environment  <  mitigations (list order)  <  recipe ``extra_env``  <  cell ``extra_env``

and gives each cell a stable id (a hash of its canonical request, so reordering YAML keys does
not change it). Two stacked mitigations that set one variable to different values are an
error: override deliberately with ``extra_env``.

Examples
--------
>>> from aorta.recipe import load_recipe_text
>>> from aorta.recipe.registry import Registry
>>> r = load_recipe_text('''
... workload: matmul
... extra_env: {OMP_NUM_THREADS: "2"}
... cells:
...   - {name: baseline, mitigations: [none]}
...   - {name: x, mitigations: [xnack, tf32_off]}
... ''')
>>> p = plan(r, registry=Registry.load(entry_points=False))
>>> p.baseline, p.n_trials
('baseline', 2)
>>> dict(p.cell("x").env)
{'HSA_XNACK': '1', 'DISABLE_TF32': '1', 'OMP_NUM_THREADS': '2'}
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from aorta.errors import Problem, RecipeError, by_path
from aorta.recipe.blocks import Collector, StopAfter
from aorta.recipe.checks import checked_recipe, is_missing_command
from aorta.recipe.expand import ExpandedCell
from aorta.recipe.limits import MAX_CELLS
from aorta.recipe.load import canonical_json
from aorta.recipe.model import Recipe
from aorta.recipe.registry import Environment, Registry
from aorta.recipe.setaside import covered

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Cell",
    "Plan",
    "TrialKey",
    "merge_env",
    "plan",
    "recipe_problems",
    "schedule_for",
]

#: Deadline of a trial when neither the recipe nor the command line gives one.
DEFAULT_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Cell:
    """One planned cell: everything a trial of it needs, resolved."""

    name: str
    #: Stable id: a hash of the canonical request (name, workload, overlay, config, steps…).
    cell_id: str
    index: int
    workload: str
    mitigations: tuple[str, ...]
    environment: Environment
    #: The environment overlay a trial runs with.
    env: Mapping[str, str]
    #: For each variable in ``env``, the layer that set it (``mitigation:xnack``, ``cell extra_env``…).
    env_sources: Mapping[str, str]
    workload_config: Mapping[str, Any]
    trials: int
    #: Steps per trial; ``None`` lets the workload choose.
    steps: int | None
    collect: tuple[Collector, ...]
    #: Where the cell comes from in the recipe (``cells[2]``, ``axes``, ``mitigation_axis[0]``).
    path: str
    #: The generated name in full when it was too long for a file name and ``name`` is
    #: its shortened form (``<head>-<8 hex>``); ``None`` otherwise.
    full_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (trial records, matrix.json, the dry-run)."""
        return {
            "name": self.name,
            "cell_id": self.cell_id,
            "index": self.index,
            "workload": self.workload,
            "mitigations": list(self.mitigations),
            "environment": self.environment.to_dict(),
            "env": dict(self.env),
            "env_sources": dict(self.env_sources),
            "workload_config": dict(self.workload_config),
            "trials": self.trials,
            "steps": self.steps,
            "collect": [c.model_dump(mode="json") for c in self.collect],
        } | ({"full_name": self.full_name} if self.full_name is not None else {})


@dataclass(frozen=True)
class TrialKey:
    """One trial of one cell (``trial`` counts from 0)."""

    cell: Cell
    trial: int

    @property
    def seed(self) -> int:
        """A per-trial seed derived from the cell id, so reruns and resumes repeat it."""
        digest = hashlib.blake2b(
            f"{self.cell.cell_id}/{self.trial}".encode(), digest_size=4
        ).digest()
        return int.from_bytes(digest, "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class Plan:
    """The cells of a recipe, resolved, and the run-wide settings."""

    recipe: Recipe
    cells: tuple[Cell, ...]
    baseline: str
    threshold: float
    timeout_s: float
    #: The isolation the recipe asks for (``auto`` defers to the workload).
    isolation: str
    stop_after: StopAfter | None
    command: tuple[str, ...] | None
    #: ``interleaved``, ``sequential`` or ``adaptive`` (:func:`schedule_for`).
    schedule: str = "sequential"
    #: The run's seed (the interleaved rounds' shuffles).
    seed: int = 0
    _by_name: Mapping[str, Cell] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", MappingProxyType({c.name: c for c in self.cells}))

    @property
    def workload(self) -> str:
        return self.recipe.workload_name

    @property
    def n_trials(self) -> int:
        """How many trials the plan runs at most (with ``stop_after``, maybe fewer)."""
        return sum(c.trials for c in self.cells)

    def cell(self, name: str) -> Cell:
        """The cell called ``name`` (``KeyError`` naming the known ones otherwise)."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no cell {name!r} (cells: {', '.join(self._by_name)})") from None

    def trials(self) -> Iterator[TrialKey]:
        """Every (cell, trial), cell by cell, trials in order (the sequential schedule)."""
        for cell in self.cells:
            for t in range(cell.trials):
                yield TrialKey(cell, t)

    def order(self) -> list[TrialKey]:
        """Every (cell, trial) in the order the schedule runs them.

        ``sequential``: cell by cell. ``interleaved``: round ``r`` runs trial ``r`` of every
        cell that has one, the cells shuffled per round by ``random.Random`` seeded from the
        run's ``seed`` and ``r`` — the same on every rank and on every resume, so a drift of
        the machine over the run is spread over all cells instead of landing in one.
        ``adaptive``: as ``interleaved``; the sweep skips the trials of cells already decided.

        >>> from aorta.recipe import load_recipe_text
        >>> from aorta.recipe.registry import Registry
        >>> text = "trials: 2\\ncells: [{name: a, mitigations: [none]}, {name: b, mitigations: [none]}]"
        >>> r = load_recipe_text(text, command=["true"])
        >>> [(k.cell.name, k.trial) for k in plan(r, registry=Registry.load(entry_points=False)).order()]
        [('a', 0), ('b', 0), ('b', 1), ('a', 1)]
        """
        return list(self.iter_order())

    def iter_order(self) -> Iterator[TrialKey]:
        """:meth:`order`, one trial at a time: an adaptive sweep whose cells all stopped
        early leaves the rest of a million-trial schedule unbuilt.

        >>> from aorta.recipe import load_recipe_text
        >>> from aorta.recipe.registry import Registry
        >>> r = load_recipe_text("{trials: 1000000, cells: [{name: a, mitigations: [none]}]}",
        ...                      command=["true"])
        >>> next(plan(r, registry=Registry.load(entry_points=False)).iter_order()).trial
        0
        """
        if self.schedule == "sequential":
            yield from self.trials()
            return
        for r in range(max((c.trials for c in self.cells), default=0)):
            round_cells = [c for c in self.cells if c.trials > r]
            random.Random(f"aorta-schedule/{self.seed}/{r}").shuffle(round_cells)
            yield from (TrialKey(c, r) for c in round_cells)

    def with_trials(self, trials: Mapping[str, int]) -> Plan:
        """The plan with some cells' trial counts raised (``aorta sweep extend``); counts below
        a cell's planned ones are ignored.

        Raises ``KeyError`` for a cell not in the plan.
        """
        for name in trials:
            self.cell(name)
        cells = tuple(
            dataclasses.replace(c, trials=max(c.trials, int(trials.get(c.name, 0))))
            for c in self.cells
        )
        return dataclasses.replace(self, cells=cells, _by_name={})


def merge_env(layers: list[tuple[str, Mapping[str, str]]]) -> tuple[dict[str, str], dict[str, str]]:
    """Merge ``(source, env)`` layers, later winning; return the overlay and each var's source.

    >>> merge_env([("a", {"X": "1", "Y": "1"}), ("b", {"Y": "2"})])
    ({'X': '1', 'Y': '2'}, {'X': 'a', 'Y': 'b'})
    """
    env: dict[str, str] = {}
    sources: dict[str, str] = {}
    for source, layer in layers:
        for key, value in layer.items():
            env[key] = value
            sources[key] = source
    return env, sources


def schedule_for(recipe: Recipe, cells: tuple[Cell, ...]) -> str:
    """The recipe's ``schedule``, or by default ``interleaved`` unless the cells need more
    than one docker image (switching images every trial would be slow): then ``sequential``.

    >>> from aorta.recipe import load_recipe_text
    >>> schedule_for(load_recipe_text("cells: [{name: a, mitigations: [none]}]", command=["true"]), ())
    'interleaved'
    """
    if recipe.is_adaptive:
        return "adaptive"
    if recipe.schedule is not None:
        return recipe.schedule
    images = {c.environment.name for c in cells if c.environment.kind == "docker"}
    return "sequential" if len(images) > 1 else "interleaved"


def _cell_id(payload: dict[str, Any]) -> str:
    return hashlib.blake2b(canonical_json(payload).encode(), digest_size=6).hexdigest()


def plan(
    recipe: Recipe,
    *,
    registry: Registry | None = None,
    timeout_s: float | None = None,
) -> Plan:
    """Resolve ``recipe`` into a :class:`Plan`.

    Parameters
    ----------
    recipe
        A validated recipe (:func:`aorta.load_recipe`).
    registry
        Mitigations and environments; default: built-ins and installed plugins.
    timeout_s
        Per-trial deadline when the recipe sets no ``timeout_per_trial``
        (default :data:`DEFAULT_TIMEOUT_S`).

    Raises
    ------
    RecipeError
        An unknown mitigation or environment (listing the available ones), or stacked
        mitigations that set one variable to two values — each problem naming its recipe path.
    """
    if registry is None:
        registry = Registry.load()
    problems: list[Problem] = []
    cells = [
        cell
        for index, ex in enumerate(recipe.expand_cells())
        if (cell := _resolve_cell(recipe, ex, index, registry, problems)) is not None
    ]
    if problems:
        raise RecipeError(problems)
    return Plan(
        recipe=recipe,
        cells=tuple(cells),
        baseline=recipe.baseline_cell(),
        threshold=recipe.confound.threshold,
        timeout_s=_deadline(recipe, timeout_s),
        isolation=recipe.trial_isolation,
        stop_after=recipe.stop_after,
        command=tuple(recipe.command) if recipe.command else None,
        schedule=schedule_for(recipe, tuple(cells)),
        seed=recipe.seed,
    )


def _resolve_cell(
    recipe: Recipe, ex: ExpandedCell, index: int, registry: Registry, problems: list[Problem]
) -> Cell | None:
    """One expanded cell resolved against the registry (``None``: its problems noted)."""
    spec = ex.spec
    try:
        environment = registry.environment(spec.environment, path=ex.environment_path)
    except RecipeError as exc:
        problems.extend(exc.problems)
        return None
    layers = _mitigation_layers(ex, registry, problems)
    if layers is None:
        return None
    layers.insert(0, (f"environment:{environment.name}", environment.env))
    layers.append(("recipe extra_env", recipe.extra_env))
    layers.append(
        (
            f"{ex.path} extra_env" if ex.path.startswith("cells[") else "cell extra_env",
            spec.extra_env,
        )
    )
    env, sources = merge_env(layers)
    config = {**recipe.workload_config, **spec.workload_config}
    steps = spec.steps if spec.steps is not None else recipe.steps
    collect = tuple(spec.collect if spec.collect is not None else recipe.collect)
    payload = {
        "name": spec.name,
        "workload": recipe.workload_name,
        "mitigations": list(spec.mitigations),
        "environment": environment.to_dict(),
        "env": env,
        "workload_config": config,
        "steps": steps,
        "collect": [c.model_dump(mode="json") for c in collect],
        "command": recipe.command,
    }
    return Cell(
        name=spec.name,
        cell_id=_cell_id(payload),
        index=index,
        workload=recipe.workload_name,
        mitigations=tuple(spec.mitigations),
        environment=environment,
        env=MappingProxyType(env),
        env_sources=MappingProxyType(sources),
        workload_config=MappingProxyType(config),
        trials=recipe.planned_trials(spec),
        steps=steps,
        collect=collect,
        path=ex.path,
        full_name=ex.full_name,
    )


def _mitigation_layers(
    ex: ExpandedCell, registry: Registry, problems: list[Problem]
) -> list[tuple[str, Mapping[str, str]]] | None:
    """The cell's mitigations' env layers, in order (``None``: an unknown or clashing one,
    noted in ``problems``)."""
    layers: list[tuple[str, Mapping[str, str]]] = []
    owner: dict[str, tuple[str, str, str]] = {}  # var -> (mitigation, value, path)
    bad = False
    for name, mpath in zip(ex.spec.mitigations, ex.mitigation_paths, strict=True):
        try:
            mit = registry.mitigation(name, path=mpath)
        except RecipeError as exc:
            problems.extend(exc.problems)
            bad = True
            continue
        for var, value in mit.env.items():
            prior = owner.get(var)
            if prior is not None and prior[1] != value:
                problems.append(
                    Problem(
                        mpath,
                        f"{name!r} sets {var}={value!r} but {prior[0]!r} sets {var}={prior[1]!r}; "
                        f"stack only one, or override deliberately with extra_env",
                    )
                )
                bad = True
            owner.setdefault(var, (name, value, mpath))
        layers.append((f"mitigation:{name}", mit.env))
    return None if bad else layers


def _deadline(recipe: Recipe, timeout_s: float | None) -> float:
    """The per-trial deadline: the recipe's, else ``timeout_s``, else the default."""
    if recipe.timeout_per_trial is not None:
        return float(recipe.timeout_per_trial)
    if timeout_s is not None:
        return float(timeout_s)
    return DEFAULT_TIMEOUT_S


def recipe_problems(
    data: Any, *, registry: Registry, command: list[str] | None = None
) -> tuple[Plan | None, list[Problem], bool, tuple[str, ...]]:
    """Every problem of a parsed recipe at once: its structure, its cross-field rules and the
    names it uses (mitigations, environments), sorted by path — what ``aorta recipe validate``
    lists and every command that loads a recipe refuses it with.

    Returns ``(plan, problems, pending, skipped)``: the plan when there is no problem, each
    problem with its path, whether a probe recipe's command is still to come (given after
    ``--`` when it runs; not a problem), and the checks that could not run until the problems
    are fixed. A bad value does not hide the problems of later stages: it is set aside
    (:func:`~aorta.recipe.checks.checked_recipe`) and the names are checked on what is left,
    or in the raw document when its structure is too broken to validate.

    >>> reg = Registry.load(entry_points=False)
    >>> data = {"workload": "matmul", "trails": 3,
    ...         "cells": [{"name": "a", "mitigations": ["none"]}, {"name": "b", "mitigations": ["tf32_of"]}]}
    >>> _, problems, _, _ = recipe_problems(data, registry=reg)
    >>> [str(p)[:30] for p in problems]
    ["unknown key 'trails'; did you ", 'cells[1].mitigations[0]: unkno']
    """
    checked = checked_recipe(data, command=command)
    pending = any(is_missing_command(p) for p in checked.problems)
    problems = [p for p in checked.problems if not is_missing_command(p)]
    skipped = checked.skipped
    model = checked.recipe
    if model is not None:
        if pending:
            model = model.model_copy(update={"command": ["<pending>"]})
        if model.n_cells > MAX_CELLS:
            skipped += ("the mitigation and environment names",)
        else:
            try:
                the_plan = plan(model, registry=registry)
            except RecipeError as exc:
                problems += [
                    p for p in exc.problems if p not in problems and not covered(p, checked.aside)
                ]
            else:
                if not problems:
                    return the_plan, [], pending, ()
    else:
        reported = [p.path for p in problems]
        problems += [
            p
            for p in _raw_name_problems(data, registry)
            if not any(p.path == r or p.path.startswith(r + "[") for r in reported)
        ]
    return None, by_path(problems), pending, skipped


def _raw_name_problems(data: Any, registry: Registry) -> Iterator[Problem]:
    """The mitigation and environment names of a document whose structure did not validate."""
    if not isinstance(data, Mapping):
        return

    def names(path: str, value: Any) -> Iterator[tuple[str, str]]:
        items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        for k, name in enumerate(items):
            if isinstance(name, str) and name:
                yield (f"{path}[{k}]" if not isinstance(value, str) else path), name

    def check(kind: str, path: str, name: str) -> Iterator[Problem]:
        try:
            (registry.mitigation if kind == "m" else registry.environment)(name, path=path)
        except RecipeError as exc:
            yield from exc.problems

    cells = data.get("cells")
    for i, cell in enumerate(cells if isinstance(cells, list) else []):
        if not isinstance(cell, Mapping):
            continue
        for path, name in names(f"cells[{i}].mitigations", cell.get("mitigations")):
            yield from check("m", path, name)
        if isinstance(cell.get("environment"), str) and cell["environment"]:
            yield from check("e", f"cells[{i}].environment", cell["environment"])
    axes = data.get("axes")
    if isinstance(axes, Mapping):
        stacks = axes.get("mitigations")
        for i, stack in enumerate(stacks if isinstance(stacks, list) else []):
            for _, name in names(f"axes.mitigations[{i}]", stack):  # a stack is one path
                yield from check("m", f"axes.mitigations[{i}]", name)
        for path, name in names("axes.environment", axes.get("environment")):
            yield from check("e", path, name)
    for key in ("mitigation_axis", "diagnostic_axis"):
        for path, name in names(key, data.get(key)):
            yield from check("m", path, name)
