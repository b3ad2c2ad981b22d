"""The bisect plan, pure: the first bad value found for every position of it in a 16-value
list, in at most ceil(log2(15)) steps, whatever the values; an undecided step keeps the range;
the step recipe is two cells of the recipe's first cell with the variable set."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aorta.errors import RecipeError, UsageError
from aorta.recipe import load_recipe_text
from aorta.run.bisect import BisectPlan, step_recipe

VALUES = tuple(f"2.{i}.0" for i in range(16))


@pytest.mark.parametrize("first_bad", range(1, 16))
def test_every_position_of_the_first_bad_value(first_bad: int) -> None:
    plan, tried = BisectPlan(VALUES), []
    while not plan.done:
        tried.append(plan.next)
        plan = plan.after("bad" if plan.next >= first_bad else "good")
    assert (
        plan.first_bad == VALUES[first_bad] and plan.range == VALUES[first_bad - 1 : first_bad + 1]
    )
    assert len(tried) <= math.ceil(math.log2(15)) and len(set(tried)) == len(tried)
    assert 0 not in tried and 15 not in tried  # the ends are known: never run


@given(n=st.integers(2, 200), data=st.data())
def test_any_list(n: int, data: st.DataObject) -> None:
    first_bad = data.draw(st.integers(1, n - 1))
    plan = BisectPlan(tuple(map(str, range(n))))
    steps = 0
    while not plan.done:
        plan, steps = plan.after("bad" if plan.next >= first_bad else "good"), steps + 1
    assert plan.first_bad == str(first_bad) and steps <= math.ceil(math.log2(n - 1))


def test_undecided_keeps_the_range() -> None:
    plan = BisectPlan(VALUES).after("good")
    assert plan.after("undecided") == plan and plan.first_bad is None
    with pytest.raises(ValueError, match="over"):
        BisectPlan(("a", "b")).after("bad")
    with pytest.raises(ValueError, match="two values"):
        BisectPlan(("a",))


RECIPE = """
cells: [{name: base, mitigations: [none], extra_env: {NCCL_DEBUG: INFO}}]
adaptive: {min_trials: 5, max_trials: 9}
bisect: {variable: TORCH_WHEEL, values: [/wheels/2.12.whl, /wheels/2.13 rc1.whl, /wheels/2.13.whl]}
"""


def test_step_recipe() -> None:
    r = load_recipe_text(RECIPE, command=["true"])
    step = step_recipe(r, 1)
    good, tried = step.cells
    assert step.baseline_cell() == good.name and step.adaptive_settings.max_trials == 9
    assert good.extra_env == {"NCCL_DEBUG": "INFO", "TORCH_WHEEL": "/wheels/2.12.whl"}
    assert tried.extra_env["TORCH_WHEEL"] == "/wheels/2.13 rc1.whl"
    assert tried.name == "try01-wheels_2.13_rc1.whl" and step.bisect is None
    with pytest.raises(UsageError, match="no bisect"):
        step_recipe(
            load_recipe_text("cells: [{name: b, mitigations: [none]}]", command=["true"]), 1
        )


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("{variable: X, values: [a, b, a]}", "distinct"),
        ("{variable: X, values: [a, b]}", "at least 3"),
        ("{variable: 1X, values: [a, b, c]}", "bisect.variable"),
        ("{variable: X, values: a}", "must be a list"),
    ],
)
def test_bad_bisect_blocks(block: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        load_recipe_text(
            f"cells: [{{name: b, mitigations: [none]}}]\nbisect: {block}", command=["true"]
        )
