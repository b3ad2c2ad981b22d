"""Flag mode: a recipe built from command-line axes, as upstream AORTA's ``--workload …
--mitigation-axis a,b --environment-axis local,image:<ref> --trials N --steps S``.

:func:`recipe_from_flags` gives the same :class:`~aorta.recipe.model.Recipe` a file would:
one cell per mitigation × environment, named ``<mitigation>-<environment>`` (a stack
``a+b`` is named ``a.b``; an ``image:<ref>`` environment is the inline docker environment
``{docker: <ref>}``, named ``_inline_<hash>``) — exactly the cells of the ``axes:`` block
with those two lists, so names, overlays and cell ids agree with the equivalent recipe file.
The run writes it as ``recipe.resolved.yaml`` like any other; ``aorta sweep run --recipe``
repeats it.

Examples
--------
>>> r = recipe_from_flags(workload="matmul", mitigation_axis=["none", "tf32_off"],
...                       environment_axis=["local", "image:rocm/pytorch:latest"], trials=3, steps=10)
>>> [c.name for c in r.expand_cells()]
['none-local', 'none-_inline_982a8846', 'tf32_off-local', 'tf32_off-_inline_982a8846']
>>> r.baseline_cell(), r.trials, r.steps
('none-local', 3, 10)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aorta.errors import Problem, RecipeError
from aorta.recipe.load import recipe_from_data
from aorta.recipe.model import Recipe

__all__ = ["IMAGE_PREFIX", "axes_data", "recipe_from_flags", "split_axis"]

#: An environment-axis item naming a docker image: ``image:<ref>``.
IMAGE_PREFIX = "image:"


def split_axis(values: str | Sequence[str] | None) -> list[str]:
    """A comma-separated axis (or repeated options, each maybe comma-separated) as a list.

    >>> split_axis("none, tf32_off"), split_axis(["a,b", "c"]), split_axis(None)
    (['none', 'tf32_off'], ['a', 'b', 'c'], [])
    """
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def _environment(item: str) -> str | dict[str, str]:
    if item.startswith(IMAGE_PREFIX):
        return {"docker": item[len(IMAGE_PREFIX) :]}
    return item


def axes_data(
    mitigation_axis: Sequence[str], environment_axis: Sequence[str] = ("local",)
) -> dict[str, Any]:
    """The ``axes:`` block equivalent to the two flags (``a+b`` stacks, ``image:<ref>``).

    >>> axes_data(["none", "xnack+tf32_off"], ["local", "image:img:1"])
    {'mitigations': [['none'], ['xnack', 'tf32_off']], 'environment': ['local', {'docker': 'img:1'}]}
    """
    return {
        "mitigations": [[m for m in item.split("+") if m] or [item] for item in mitigation_axis],
        "environment": [_environment(e) for e in environment_axis],
    }


def recipe_from_flags(
    *,
    mitigation_axis: Sequence[str],
    environment_axis: Sequence[str] = ("local",),
    workload: str | None = None,
    trials: int = 1,
    steps: int | None = None,
    baseline: str | None = None,
    ticket: str | None = None,
    command: Sequence[str] | None = None,
    adaptive: bool = False,
) -> Recipe:
    """The recipe that the flags describe (see the module docstring).

    Parameters
    ----------
    mitigation_axis
        Mitigation names, one cell row each; ``a+b`` stacks two. Include ``none`` for the
        baseline.
    environment_axis
        Environment names (``local``, a registered one) or ``image:<ref>``.
    workload
        The workload; may be omitted when a ``command`` is given (probe-style, workload
        ``command``).
    trials, steps
        Per cell, per trial.
    baseline
        The baseline cell's name (``<mitigation>-<environment>``); default: the first cell
        whose mitigations are all ``none``.
    ticket
        Names the run folder.
    command
        The argv given after ``--``.
    adaptive
        ``schedule: adaptive`` (``--adaptive``): cells stop as their verdicts settle;
        ``trials`` (when given, ≥ 5) is then each cell's ``max_trials``.

    Raises
    ------
    RecipeError
        An empty axis, or anything a recipe file with these values would be refused for,
        each problem named by its flag (``--mitigation-axis: …``).
    """
    problems = []
    if not mitigation_axis:
        problems.append(Problem("--mitigation-axis", "give at least one mitigation (e.g. none)"))
    if not environment_axis:
        problems.append(Problem("--environment-axis", "give at least one environment (e.g. local)"))
    if workload is None and not command:
        problems.append(
            Problem("--workload", "required in flag mode (or give a command after '--')")
        )
    if problems:
        raise RecipeError(problems)
    data: dict[str, Any] = {
        "workload": workload,
        "ticket": ticket,
        "trials": trials,
        "steps": steps,
        "axes": axes_data(mitigation_axis, environment_axis),
    }
    if baseline is not None:
        data["confound"] = {"baseline_cell": baseline}
    if adaptive:
        data["schedule"] = "adaptive"
        if trials > 1:
            data["adaptive"] = {"max_trials": trials}
    try:
        recipe = recipe_from_data(data, command=list(command) if command else None)
    except RecipeError as exc:
        raise RecipeError([_as_flag(p) for p in exc.problems]) from None
    # Written out as explicit cells, so recipe.resolved.yaml reads like upstream's.
    cells = [
        {"name": c.name, "mitigations": list(c.spec.mitigations), "environment": c.spec.environment}
        for c in recipe.expand_cells()
    ]
    doc = recipe.model_dump(mode="json")
    doc.update(axes=None, cells=cells)
    return recipe_from_data(doc)


_FLAG_OF = {
    "axes.mitigations": "--mitigation-axis",
    "axes.environment": "--environment-axis",
    "axes": "--mitigation-axis/--environment-axis",
    "confound.baseline_cell": "--baseline",
    "workload": "--workload",
    "trials": "--trials",
    "adaptive.max_trials": "--trials (with --adaptive, the most per cell)",
    "steps": "--steps",
    "ticket": "--ticket",
}


def _as_flag(problem: Problem) -> Problem:
    for prefix, flag in _FLAG_OF.items():
        if problem.path == prefix or problem.path.startswith((f"{prefix}.", f"{prefix}[")):
            return Problem(flag + problem.path[len(prefix) :], problem.message)
    return problem
