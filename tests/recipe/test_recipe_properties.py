"""Hypothesis properties of recipes and plans."""

from __future__ import annotations

import contextlib
import math
import random

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aorta.errors import RecipeError
from aorta.recipe import dump_recipe, load_recipe_text
from aorta.recipe.load import recipe_from_data
from aorta.recipe.model import Recipe
from aorta.recipe.plan import merge_env, plan
from aorta.recipe.registry import Mitigation, Registry

MITIGATION_NAMES = ["none", "m_a", "m_b", "m_c", "m_d"]
REGISTRY = Registry(
    [
        Mitigation("none", {}),
        Mitigation("m_a", {"VAR_A": "a"}),
        Mitigation("m_b", {"VAR_B": "b", "SHARED_X": "1"}),
        Mitigation("m_c", {"VAR_C": "c"}),
        Mitigation("m_d", {"SHARED_X": "1"}),
    ]
)

names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,12}", fullmatch=True).filter(
    lambda s: s not in {".", ".."}
)
env_names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True).filter(
    lambda s: (
        s
        not in {
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
            "NODE_RANK",
            "GROUP_RANK",
            "ROLE_RANK",
            "ROLE_NAME",
        }
        and not s.startswith(("TORCHELASTIC_", "SLURM_", "PMI_", "PMIX_", "AORTA_"))
    )
)
# Every value an environment file can carry: no C0 control character but a tab, no DEL
# (aorta.envvars.control_problem); C1 controls and any other text are fine.
_REFUSED = "".join(chr(c) for c in range(32) if c != 9) + "\x7f"
env_values = st.text(
    st.characters(exclude_characters=_REFUSED, exclude_categories=("Cs",)), max_size=12
)
env_maps = st.dictionaries(env_names, env_values, max_size=4)
scalars = st.one_of(
    st.integers(-1000, 1000),
    st.booleans(),
    st.text(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
)
config_keys = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(lambda k: k != "steps")
configs = st.dictionaries(config_keys, scalars, max_size=3)
stacks = st.lists(st.sampled_from(MITIGATION_NAMES), min_size=1, max_size=3)


@st.composite
def cells(draw):
    cell: dict = {"name": draw(names), "mitigations": draw(stacks)}
    if draw(st.booleans()):
        cell["extra_env"] = draw(env_maps)
    if draw(st.booleans()):
        cell["trials"] = draw(st.integers(1, 5))
    if draw(st.booleans()):
        cell["steps"] = draw(st.integers(1, 50))
    if draw(st.booleans()):
        cell["workload_config"] = draw(configs)
    if draw(st.booleans()):
        cell["environment"] = draw(
            st.sampled_from(["local", {"docker": "img:1"}, {"docker": "rocm/pytorch:latest"}])
        )
    if draw(st.booleans()):
        cell["collect"] = draw(
            st.sampled_from([[], ["torch_profiler"], [{"torch_profiler": {"active": 2}}]])
        )
    return cell


@st.composite
def matrix_recipes(draw):
    cell_list = draw(st.lists(cells(), min_size=1, max_size=5, unique_by=lambda c: c["name"]))
    data: dict = {"workload": "matmul", "cells": cell_list}
    data["confound"] = {
        "baseline_cell": cell_list[0]["name"],
        "threshold": draw(st.floats(1.01, 3.0)),
    }
    for key, strat in [
        ("trials", st.integers(1, 9)),
        ("steps", st.integers(1, 99)),
        ("ticket", st.text(min_size=1, max_size=10)),
        ("extra_env", env_maps),
        ("workload_config", configs),
        ("timeout_per_trial", st.floats(0.5, 1e4)),
        ("trial_isolation", st.sampled_from(["auto", "in_process", "process"])),
        ("save_logs", st.booleans()),
        ("stop_after", st.fixed_dictionaries({"events": st.integers(1, 3)})),
    ]:
        if draw(st.booleans()):
            data[key] = draw(strat)
    return data


@st.composite
def axes_recipes(draw):
    axes: dict = {}
    if draw(st.booleans()):
        axes["mitigations"] = draw(
            st.lists(
                st.sampled_from(["none", "m_a", "m_c", ["m_a", "m_c"]]),
                min_size=1,
                max_size=3,
                unique_by=str,
            )
        )
    if draw(st.booleans()):
        axes["environment"] = draw(st.sampled_from([["local"], ["local", {"docker": "x:1"}]]))
    keys = draw(st.lists(config_keys, max_size=2, unique=True))
    axes["workload_config"] = {
        k: draw(st.lists(st.integers(1, 4096), min_size=1, max_size=3, unique=True)) for k in keys
    }
    return {
        "workload": "matmul",
        "trials": draw(st.integers(1, 4)),
        "axes": axes,
        "confound": {"baseline_cell": None},
    }


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(matrix_recipes())
def test_load_dump_round_trip(data):
    r = recipe_from_data(data)
    assert load_recipe_text(dump_recipe(r)) == r


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(axes_recipes())
def test_cell_count_is_product_of_axis_sizes_and_trials_sum(data):
    axes = data["axes"]
    try:
        r = recipe_from_data(data)
    except RecipeError as exc:
        # Only a baseline ambiguity may stop an axes recipe (no `none` stack, several cells).
        assert all(p.path == "confound.baseline_cell" for p in exc.problems)
        return
    expected = len(axes.get("mitigations", [None])) * len(axes.get("environment", [None]))
    expected *= math.prod(len(v) for v in axes["workload_config"].values())
    p = plan(r, registry=REGISTRY)
    assert len(p.cells) == r.n_cells == expected  # n_cells counts without expanding
    assert p.n_trials == sum(c.trials for c in p.cells) == expected * data["trials"]
    assert len({c.name for c in p.cells}) == expected
    assert r == load_recipe_text(dump_recipe(r))


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(matrix_recipes(), st.sampled_from([None, "stop_after", "adaptive"]), st.integers(5, 12))
def test_the_plan_and_the_bound_on_the_total_count_the_same_trials(data, cap, n):
    """A cell runs its own trials or the recipe's, unless stop_after.max_trials or adaptive's
    max_trials caps every cell: the plan and the load-time bound read one count of it."""
    if cap == "stop_after":
        data = {**data, "stop_after": {"max_trials": n}}
    elif cap == "adaptive":
        data = {k: v for k, v in data.items() if k != "stop_after"} | {
            "adaptive": {"max_trials": n}
        }
    r = recipe_from_data(data)
    p = plan(r, registry=REGISTRY)
    default = data.get("trials", Recipe.model_fields["trials"].default)
    expected = [n if cap else c.get("trials", default) for c in data["cells"]]
    assert [c.trials for c in p.cells] == [r.planned_trials(e.spec) for e in r.expand_cells()]
    assert [c.trials for c in p.cells] == expected and p.n_trials == sum(expected)
    assert r.n_cells == len(r.expand_cells()) == len(p.cells)


def _shuffled(obj, rng):
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(obj, list):
        return [_shuffled(v, rng) for v in obj]
    return obj


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(matrix_recipes(), st.randoms(use_true_random=False))
def test_cell_ids_stable_under_key_reordering_and_unique(data, rnd):
    try:
        first = plan(recipe_from_data(data), registry=REGISTRY)
    except RecipeError as exc:
        assert all("sets" in p.message for p in exc.problems)  # only stacked conflicts (none here)
        return
    text = yaml.safe_dump(_shuffled(data, random.Random(rnd.random())), sort_keys=False)
    again = plan(load_recipe_text(text), registry=REGISTRY)
    assert [c.cell_id for c in first.cells] == [c.cell_id for c in again.cells]
    assert len({c.cell_id for c in first.cells}) == len(first.cells)


@given(
    st.lists(
        st.tuples(st.sampled_from(["env", "m1", "m2", "recipe", "cell"]), env_maps), max_size=6
    )
)
def test_env_merge_later_layer_wins(layers):
    env, sources = merge_env(layers)
    for key, value in env.items():
        last = [(src, layer[key]) for src, layer in layers if key in layer][-1]
        assert (sources[key], value) == last
    assert set(env) == {k for _, layer in layers for k in layer}


@given(env_maps, env_maps, env_maps, env_maps)
def test_plan_precedence_for_random_bundles(env_layer, mit_layer, recipe_layer, cell_layer):
    from aorta.recipe.registry import Environment

    reg = Registry(
        [Mitigation("none", {}), Mitigation("mx", mit_layer)],
        [Environment("e", "local", None, env_layer)],
    )
    data = {
        "workload": "w",
        "extra_env": recipe_layer,
        "cells": [
            {"name": "c", "mitigations": ["mx"], "environment": "e", "extra_env": cell_layer}
        ],
    }
    got = dict(plan(recipe_from_data(data), registry=reg).cell("c").env)
    assert got == {**env_layer, **mit_layer, **recipe_layer, **cell_layer}


yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10))
yaml_docs = st.recursive(
    yaml_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(
                st.text(max_size=12),
                st.sampled_from(
                    [
                        "cells",
                        "workload",
                        "mitigations",
                        "name",
                        "trials",
                        "axes",
                        "mode",
                        "environment",
                        "extra_env",
                        "confound",
                    ]
                ),
            ),
            children,
            max_size=5,
        ),
    ),
    max_leaves=25,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(yaml_docs)
def test_random_documents_raise_only_recipe_errors(doc):
    text = yaml.safe_dump(doc)
    try:
        load_recipe_text(text)
    except RecipeError as exc:
        assert exc.problems and all(isinstance(p.message, str) and p.message for p in exc.problems)


@settings(max_examples=300)
@given(st.text(max_size=200))
def test_random_text_raises_only_recipe_errors(text):
    with contextlib.suppress(RecipeError):
        load_recipe_text(text)
