"""Every problem of a recipe that needs no registry, in one pass: its fields validated past each
bad value (the value set aside, :mod:`aorta.recipe.setaside`), then the rules across fields
on what validated — a mode's shape, duplicate and generated cell names, the bounds on cells
and trials in all, the baseline — each problem with its path, sorted.

Examples
--------
>>> c = checked_recipe({"mode": "probe", "mitigation_axis": ["none"], "trials": True}, command=["true"])
>>> [str(p) for p in c.problems], c.aside
(['trials: must be a whole number ≥ 1, got boolean true'], ('trials',))
>>> is_missing_command(checked_recipe({"mode": "probe", "mitigation_axis": ["none"]}).problems[0])
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from aorta.errors import Problem, RecipeError, by_path, describe_value, validation_problems
from aorta.recipe.fields import CELL_NAME_RE, RESERVED_CELL_NAMES
from aorta.recipe.limits import MAX_CELLS, MAX_TOTAL_TRIALS
from aorta.recipe.model import SCHEMA_VERSION, Recipe
from aorta.recipe.setaside import BASELINE, SHAPE_KEYS, covered, hides_cells, made_up, set_aside

__all__ = ["CROSS_CHECKS", "Checked", "checked_recipe", "is_missing_command", "missing_command"]


_NO_COMMAND = (
    "a probe recipe runs a command in every trial and none was given: put it after "
    "'--', as in: aorta sweep run --recipe R -- cmd args… (or set command: [argv] in the recipe)"
)


def missing_command() -> Problem:
    """The problem of a probe recipe run without its command (see :func:`is_missing_command`).

    >>> is_missing_command(missing_command())
    True
    """
    return Problem("command", _NO_COMMAND)


def is_missing_command(problem: Problem) -> bool:
    """Whether ``problem`` is only a probe recipe's command still to come (after ``--``).

    >>> is_missing_command(Problem("command", _NO_COMMAND)), is_missing_command(Problem("cells", "x"))
    (True, False)
    """
    return problem.path == "command" and problem.message == _NO_COMMAND


def _cross_check(recipe: Recipe, command: list[str] | None) -> list[Problem]:
    problems: list[Problem] = []

    def add(path: str, msg: str) -> None:
        problems.append(Problem(path, msg))

    if recipe.mode == "probe":
        if not recipe.mitigation_axis:
            add("mitigation_axis", "probe mode needs a non-empty mitigation_axis")
        if recipe.cells:
            add("cells", "probe recipes take mitigation_axis × diagnostic_axis, not cells")
        if recipe.axes is not None:
            add("axes", "probe recipes take mitigation_axis × diagnostic_axis, not axes")
        if recipe.workload not in (None, "command"):
            add(
                "workload",
                f"probe mode runs the command given after '--'; workload must be 'command' or unset, got {recipe.workload!r}",
            )
        if command is None and recipe.command is None:
            add("command", _NO_COMMAND)
    else:
        for key in ("mitigation_axis", "diagnostic_axis"):
            if getattr(recipe, key) is not None:
                add(key, "only valid with mode: probe")
        if recipe.workload is None and command is None and recipe.command is None:
            add("workload", "required in matrix mode (or give a command after '--')")
        if not recipe.cells and recipe.axes is None:
            add("cells", "a matrix recipe needs at least one cell (or an axes block)")
    if any(p.path not in ("workload", "command") for p in problems):
        return problems  # the cells are not what a recipe of this mode has: nothing to count
    n_cells = recipe.n_cells
    if n_cells > MAX_CELLS:
        where = {"probe": "mitigation_axis"}.get(recipe.mode, "axes" if recipe.axes else "cells")
        add(where, f"the recipe expands to {n_cells:,} cells, more than {MAX_CELLS:,}")
        return problems
    seen: dict[str, str] = {}
    total = 0
    for cell in recipe.expand_cells():
        where = cell.path if cell.path != "axes" else f"axes (cell {cell.name!r})"
        if cell.name in seen:
            add(
                f"{cell.path}.name" if cell.path.startswith("cells[") else where,
                f"duplicate cell name {cell.name!r} (also {seen[cell.name]})",
            )
        else:
            seen[cell.name] = cell.path
        if not CELL_NAME_RE.match(cell.name) or cell.name in RESERVED_CELL_NAMES:
            add(where, f"generated cell name {cell.name!r} is not valid")
        total += recipe.planned_trials(cell.spec)
    if total > MAX_TOTAL_TRIALS:
        add(
            recipe.trials_cap[0],
            f"the recipe plans {total:,} trials in all over {n_cells:,} cells, more than "
            f"{MAX_TOTAL_TRIALS:,}",
        )
    try:
        recipe.baseline_cell()
    except RecipeError as exc:
        problems.extend(exc.problems)
    return problems


#: The checks :func:`checked_recipe` skips when the fields do not validate even with the bad
#: values set aside (a problem at the top of the document).
CROSS_CHECKS = "duplicate cell names, the cell count, the trial total and the baseline"
#: Rounds of setting aside and validating again (one per nesting level is plenty).
_MAX_ROUNDS = 16


@dataclass(frozen=True)
class Checked:
    """What :func:`checked_recipe` finds: the problems, sorted by path, and the recipe with
    the values they name set aside (to check further stages against; never to run unless
    ``problems`` is empty)."""

    recipe: Recipe | None
    problems: list[Problem]
    #: The paths set aside to reach ``recipe`` (a later stage's problems under them are echoes).
    aside: tuple[str, ...] = ()
    #: The checks that could not run (no ``recipe`` to run them on).
    skipped: tuple[str, ...] = ()


def checked_recipe(data: Any, *, command: list[str] | None = None) -> Checked:
    """Every problem of a parsed document that needs no registry, in one pass: the fields
    (each bad value set aside so the rest is still validated, :mod:`aorta.recipe.setaside`),
    then the rules across fields on what validated.

    >>> c = checked_recipe({"workload": "matmul", "trials": 0, "cells": [
    ...     {"name": "a", "mitigations": ["none"]}, {"name": "a", "mitigations": ["none"]}]})
    >>> [str(p) for p in c.problems]
    ["cells[1].name: duplicate cell name 'a' (also cells[0])", 'trials: must be ≥ 1, got integer 0']
    """
    if not isinstance(data, Mapping):
        return Checked(
            None, [Problem("", f"a recipe is a mapping of keys, got {describe_value(data)}")]
        )
    if "schema_version" in data and data["schema_version"] != SCHEMA_VERSION:
        # Another version's document: this schema's rules would only add noise.
        got = describe_value(data["schema_version"])
        return Checked(
            None,
            [
                Problem(
                    "schema_version", f"this aorta reads schema_version {SCHEMA_VERSION}, got {got}"
                )
            ],
        )
    problems: list[Problem] = []
    aside: list[str] = []
    recipe: Recipe | None = None
    doc: Any = data
    for _ in range(_MAX_ROUNDS):
        try:
            recipe = Recipe.model_validate(doc)
            break
        except ValidationError as exc:
            found = validation_problems(exc, hide={"str", "DockerEnvironment"})
        problems += [p for p in found if p not in problems and not covered(p, aside)]
        doc, more = set_aside(doc, found)
        if not more:
            break
        aside += more
    if recipe is None:
        return Checked(None, by_path(problems), tuple(aside), (CROSS_CHECKS,))
    if command is not None:
        if recipe.workload not in (None, "command"):
            problems.append(
                Problem(
                    "workload",
                    f"a command after '--' runs with workload 'command', but the recipe asks for {recipe.workload!r}",
                )
            )
        recipe = recipe.model_copy(update={"command": list(command)})
    cross = _cross_check(recipe, command)
    problems += [p for p in cross if p not in problems and not covered(p, aside)]
    unsure = hides_cells(aside) and _baseline_unsure(recipe, aside, cross)
    return Checked(recipe, by_path(problems), tuple(aside), ("the baseline",) if unsure else ())


def _baseline_unsure(recipe: Recipe, aside: list[str], cross: list[Problem]) -> bool:
    """Whether the baseline of ``recipe``, whose cells ``aside`` made up in part, may not be
    the one the recipe as fixed has (:meth:`Recipe.baseline_cell`'s rules, in order)."""
    if any(a in SHAPE_KEYS for a in aside) or any(p.path == BASELINE for p in cross):
        return True  # cells gone whole, or the baseline not found among the ones left
    if recipe.confound.baseline_cell is not None or recipe.n_cells == 1:
        return False  # named, and there; or the only cell
    if made_up(aside, "name"):
        return True  # the name as fixed may start with 'baseline'
    try:
        chosen = recipe.baseline_cell()
    except RecipeError:
        return True  # not checked (the rules across fields stopped earlier), or not found
    if chosen == "baseline" or chosen.startswith("baseline-"):
        return False  # the first so named: the names were all as written
    index = next(i for i, c in enumerate(recipe.expand_cells()) if c.name == chosen)
    # The first cell with mitigations [none]: one made up at or before it may not be.
    return any(i <= index for i in made_up(aside, "mitigations"))
