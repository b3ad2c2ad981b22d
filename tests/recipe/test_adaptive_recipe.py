"""schedule: adaptive in a recipe and in flag mode (--adaptive): settings, plan, clear errors."""

from __future__ import annotations

import pytest

from aorta.errors import RecipeError
from aorta.recipe import dump_recipe, load_recipe_text
from aorta.recipe.flags import recipe_from_flags
from aorta.recipe.plan import plan
from aorta.recipe.registry import Registry

CELLS = "cells: [{name: a, mitigations: [none]}, {name: b, mitigations: [none]}]\n"


def load(text: str):
    return load_recipe_text(text + CELLS, command=["true"])


def error(text: str) -> str:
    with pytest.raises(RecipeError) as exc:
        load(text)
    return str(exc.value)


def test_adaptive_schedule_plans_max_trials_per_cell_interleaved():
    r = load("schedule: adaptive\nadaptive: {min_trials: 6, max_trials: 20, round: 2}\n")
    p = plan(r, registry=Registry.load(entry_points=False))
    assert p.schedule == "adaptive" and r.is_adaptive
    assert [c.trials for c in p.cells] == [20, 20]
    # Rounds of one trial per cell, as interleaved.
    assert [k.trial for k in p.order()[:4]] == [0, 0, 1, 1]
    assert r.adaptive_settings.round == 2 and r.adaptive_settings.failure_margin == 0.15
    again = load_recipe_text(dump_recipe(r), command=["true"])
    assert again.adaptive_settings == r.adaptive_settings and again.is_adaptive


def test_an_adaptive_block_alone_means_schedule_adaptive_with_defaults():
    assert load("adaptive: {max_trials: 12}\n").is_adaptive
    d = load("schedule: adaptive\n").adaptive_settings
    assert (d.min_trials, d.max_trials, d.round) == (5, 30, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("adaptive: {min_trials: 3}\n", "adaptive.min_trials: must be ≥ 5"),
        ("adaptive: {min_trials: 9, max_trials: 6}\n", "max_trials (6) must be ≥ min_trials (9)"),
        ("schedule: sequential\nadaptive: {}\n", "schedule is 'sequential'"),
        ("schedule: adaptive\nstop_after: {events: 1}\n", "stop_after (a flake hunt)"),
        ("adaptive: {failure_margin: 1.5}\n", "adaptive.failure_margin"),
        ("adaptive: {round: true}\n", "adaptive.round: must be a whole number"),
    ],
)
def test_bad_adaptive_settings_are_named(text, message):
    assert message in error(text)


def test_flag_mode_adaptive_takes_trials_as_max_trials():
    r = recipe_from_flags(
        mitigation_axis=["none", "xnack"], command=["true"], trials=12, adaptive=True
    )
    assert r.is_adaptive and r.adaptive_settings.max_trials == 12
    with pytest.raises(RecipeError, match="--trials"):
        recipe_from_flags(mitigation_axis=["none"], command=["true"], trials=3, adaptive=True)
