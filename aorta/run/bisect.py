"""``aorta bisect``: the first bad value of an ordered list, each step an adaptive A/B sweep.

The recipe's ``bisect: {variable: NAME, values: [v0, …, vN]}`` lists the values in order,
``v0`` known good and ``vN`` known bad; every trial gets ``NAME=value`` in its environment (so
the job can pick a container image, a venv or a library build from it). The search is
:class:`BisectPlan`, pure: the range still open, the next value to try, the range after a
verdict. Each step is one sweep (:func:`aorta.run.sweep.sweep`) of two cells — the recipe's
first cell with ``NAME=v0`` (the baseline) and with ``NAME=v_mid`` — under ``schedule:
adaptive``: it stops as soon as both questions are settled, anytime-valid
(:mod:`aorta.matrix.sequential`). The midpoint is *bad* when it fails more than ``v0`` or is
slower beyond the band, *good* when it is settled otherwise, and *undecided* when it is still
open at ``max_trials``: the search stops there and names the range still open.

Every step is an ordinary run directory (records, ``matrix.md``, ``aorta report``) whose
manifest says which step it was (``bisect``) and whose ``bisect.json`` holds the search up to
it: the last step's is the answer.

Examples
--------
>>> p = BisectPlan(tuple("abcdefgh"))
>>> p.next, p.after("good").next, p.after("good").after("bad").range
(3, 5, ('d', 'f'))
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aorta.errors import UsageError
from aorta.matrix.compare import compare
from aorta.matrix.load import load_run
from aorta.recipe.schema import Recipe, recipe_from_data, recipe_to_data
from aorta.run.adaptive import decision_metric
from aorta.run.options import RunOptions
from aorta.run.sweep import sweep
from aorta.store.rundir import BISECT_JSON, RunDir, atomic_write, utc_now

__all__ = ["BisectPlan", "BisectResult", "Step", "Verdict", "bisect", "step_recipe"]

Verdict = Literal["good", "bad", "undecided"]


@dataclass(frozen=True)
class BisectPlan:
    """The search over ``values``: ``good`` the last index known good, ``bad`` the first known
    bad (``values[0]`` and ``values[-1]`` to start with). Pure: each verdict gives a new plan.

    >>> p = BisectPlan(("v0", "v1", "v2"))
    >>> p.done, p.next, p.after("bad").first_bad
    (False, 1, 'v1')
    """

    values: tuple[str, ...]
    good: int = 0
    bad: int = -1

    def __post_init__(self) -> None:
        if len(self.values) < 2:
            raise ValueError("a bisect needs at least two values")
        if self.bad < 0:
            object.__setattr__(self, "bad", len(self.values) - 1)
        if not 0 <= self.good < self.bad < len(self.values):
            raise ValueError(
                f"need 0 ≤ good < bad < {len(self.values)}, got {self.good}, {self.bad}"
            )

    @property
    def done(self) -> bool:
        """Whether the first bad value is known (good and bad are neighbours)."""
        return self.bad - self.good <= 1

    @property
    def next(self) -> int:
        """The index to try next: the middle of the open range."""
        return (self.good + self.bad) // 2

    @property
    def range(self) -> tuple[str, str]:
        """The last value known good and the first known bad."""
        return self.values[self.good], self.values[self.bad]

    @property
    def first_bad(self) -> str | None:
        """The first bad value once :attr:`done`, else ``None``."""
        return self.values[self.bad] if self.done else None

    def after(self, verdict: Verdict) -> BisectPlan:
        """The plan once :attr:`next` was found ``good`` or ``bad`` (``undecided`` keeps it)."""
        if self.done:
            raise ValueError("the search is over")
        if verdict == "good":
            return dataclasses.replace(self, good=self.next)
        if verdict == "bad":
            return dataclasses.replace(self, bad=self.next)
        return self


@dataclass(frozen=True)
class Step:
    """One step: the value tried, its verdict against ``values[0]``, the ratio with its CI,
    the failures and trials of the value's cell, and the run directory."""

    value: str
    verdict: Verdict
    ratio: float | None
    ci: tuple[float | None, float | None]
    failures: int
    trials: int
    run_dir: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``aorta bisect --json``'s ``steps``)."""
        return {
            "value": self.value,
            "verdict": self.verdict,
            "ratio": self.ratio,
            "ci": list(self.ci),
            "failures": self.failures,
            "trials": self.trials,
            "run_dir": self.run_dir,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class BisectResult:
    """The search's answer: the first bad value (``None`` when a step stayed undecided), the
    last good, every step and the trials they cost in all."""

    variable: str
    values: tuple[str, ...]
    first_bad: str | None
    last_good: str
    open_range: tuple[str, str]
    steps: list[Step]
    trials: int
    record: Path

    def to_json(self) -> dict[str, Any]:
        """``{"first_bad", "last_good", "trials", "steps": [...]}`` plus the variable, the
        values and, when undecided, the range still open."""
        return {
            "variable": self.variable,
            "values": list(self.values),
            "first_bad": self.first_bad,
            "last_good": self.last_good,
            "open_range": None if self.first_bad else list(self.open_range),
            "trials": self.trials,
            "steps": [s.to_dict() for s in self.steps],
            "record": str(self.record),
        }


def _cell_name(prefix: str, index: int, value: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_.\-]+", "_", value)[:40].strip("._-") or "v"
    return f"{prefix}{index:02d}-{text}"


def step_recipe(recipe: Recipe, index: int) -> Recipe:
    """The recipe of the step that tries ``values[index]``: the recipe's first cell twice,
    with ``NAME=values[0]`` (the baseline) and ``NAME=values[index]``, adaptive.

    Raises ``UsageError`` when the recipe has no ``bisect`` block.

    >>> from aorta.recipe.schema import load_recipe_text
    >>> r = load_recipe_text("cells: [{name: base, mitigations: [none]}]\\n"
    ...     "bisect: {variable: TORCH_BUILD, values: [a, b, c]}", command=["true"])
    >>> s = step_recipe(r, 1)
    >>> [(c.name, c.extra_env) for c in s.cells], s.is_adaptive
    ([('good00-a', {'TORCH_BUILD': 'a'}), ('try01-b', {'TORCH_BUILD': 'b'})], True)
    """
    if recipe.bisect is None:
        raise UsageError("the recipe has no bisect: {variable: NAME, values: [...]} block")
    spec = recipe.expand_cells()[0].spec
    var, values = recipe.bisect.variable, recipe.bisect.values
    data = recipe_to_data(recipe)
    template = {k: v for k, v in spec.model_dump(exclude_none=True).items() if k != "name"}
    cells = []
    for prefix, i in (("good", 0), ("try", index)):
        env = {**template.get("extra_env", {}), var: values[i]}
        cells.append({**template, "name": _cell_name(prefix, i, values[i]), "extra_env": env})
    for key in ("bisect", "axes", "mitigation_axis", "diagnostic_axis", "stop_after", "trials"):
        data.pop(key, None)
    data.update(mode="matrix", workload=recipe.workload_name, cells=cells, schedule="adaptive")
    data["confound"] = {**data.get("confound", {}), "baseline_cell": cells[0]["name"]}
    for cell in cells:
        cell.pop("trials", None)
    return recipe_from_data(data)


def _verdict(run_dir: Path, baseline: str, cell: str) -> Step:
    ds = load_run(run_dir, source="records")
    df = compare(ds, metric=decision_metric(ds, baseline), sequential=True, baseline=baseline)
    row = df.loc[cell]
    more = row["failures_vs_baseline"] == "more"
    slow = row["difference"] == "slower" and row["band"] == "beyond band"
    verdict: Verdict = "bad" if more or slow else "good" if bool(row["decided"]) else "undecided"
    outcome = ds.outcome.sel(cell=cell).values
    ran = int(((outcome == "passed") | (outcome == "failed")).sum())

    def num(x: Any) -> float | None:
        return float(x) if x == x and x is not None else None

    return Step(
        value="",
        verdict=verdict,
        ratio=num(row["ratio"]),
        ci=(num(row["ratio_ci_low"]), num(row["ratio_ci_high"])),
        failures=int((outcome == "failed").sum()),
        trials=ran,
        run_dir=str(run_dir),
        reason=str(row["reason"]),
    )


def bisect(
    recipe: Recipe,
    *,
    options: RunOptions | None = None,
    on_step: Callable[[Step], None] | None = None,
) -> BisectResult:
    """Find the first bad value of ``recipe.bisect`` (see the module docstring).

    Parameters
    ----------
    recipe
        A recipe with a ``bisect`` block; its first cell is what every step runs, its
        ``adaptive`` block (or the defaults) each step's stopping rule.
    options
        How each step's sweep runs (:class:`~aorta.run.options.RunOptions`); the step runs go
        under ``options.output`` like any run.
    on_step
        Called after each step (progress).

    Raises
    ------
    UsageError
        No ``bisect`` block; RecipeError when a step's recipe is invalid.
    Interrupted
        Ctrl-C: the finished steps are in ``bisect.json``.
    """
    if recipe.bisect is None:
        raise UsageError("the recipe has no bisect: {variable: NAME, values: [...]} block")
    opts = options or RunOptions()
    plan = BisectPlan(tuple(recipe.bisect.values))
    steps: list[Step] = []
    record: Path | None = None
    started = utc_now()
    while not plan.done:
        index = plan.next
        step_r = step_recipe(recipe, index)
        result = sweep(step_r, options=opts)
        baseline, cell = (c.name for c in step_r.cells)
        step = dataclasses.replace(
            _verdict(result.run_dir, baseline, cell), value=plan.values[index]
        )
        steps.append(step)
        record = result.run_dir / BISECT_JSON
        info = {"variable": recipe.bisect.variable, "step": len(steps), "value": step.value}
        RunDir(result.run_dir).update_manifest(bisect={**info, "verdict": step.verdict})
        if on_step is not None:
            on_step(step)
        if step.verdict == "undecided":
            break
        plan = plan.after(step.verdict)
        _write_record(record, recipe, plan, steps, started)
    assert record is not None  # at least one step: the schema asks for 3 values
    _write_record(record, recipe, plan, steps, started)
    return BisectResult(
        variable=recipe.bisect.variable,
        values=plan.values,
        first_bad=plan.first_bad,
        last_good=plan.range[0],
        open_range=plan.range,
        steps=steps,
        trials=sum(_step_trials(s) for s in steps),
        record=record,
    )


def _step_trials(step: Step) -> int:
    # Both cells of a step run the same rounds (the baseline runs while the other does).
    ds = load_run(step.run_dir, source="records")
    outcome = ds.outcome.values
    return int(((outcome != "missing") & (outcome != "did_not_run")).sum())


def _write_record(
    path: Path, recipe: Recipe, plan: BisectPlan, steps: list[Step], started: str
) -> None:
    assert recipe.bisect is not None
    doc = {
        "variable": recipe.bisect.variable,
        "values": list(plan.values),
        "started_at": started,
        "range": list(plan.range),
        "first_bad": plan.first_bad,
        "steps": [s.to_dict() for s in steps],
    }
    atomic_write(path, json.dumps(doc, indent=1) + "\n")
