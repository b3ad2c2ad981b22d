"""YAML that expands without end: refused quickly and clearly (issue "Hardening")."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aorta.errors import RecipeError
from aorta.recipe import load_recipe_text
from aorta.recipe.registry import Registry
from aorta.recipe.yamldoc import MAX_ALIAS_EXPANSION, parse_yaml

HEAD = "workload: matmul\ncells: [{name: baseline, mitigations: [none]}]\n"


def laughs(levels: int, width: int = 9, indent: str = "  ") -> str:
    """The "billion laughs": each level lists the previous one ``width`` times."""
    lines = [f'{indent}l0: &l0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"{indent}l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(30)
def test_billion_laughs_recipe_is_refused_within_a_second():
    text = HEAD + "workload_config:\n" + laughs(9)
    start = time.perf_counter()
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, source="bomb.yaml")
    assert time.perf_counter() - start < 1.0
    assert "too many alias expansions" in str(info.value)
    assert str(info.value).startswith("bomb.yaml: ")


@pytest.mark.timeout(30)
def test_billion_laughs_mitigations_file_is_refused(tmp_path):
    path = tmp_path / "mitigations.yaml"
    path.write_text(
        "mitigations:\n  m: {env: {A: '1'}}\nenvironments:\n  x:\n" + laughs(9, indent="    ")
    )
    start = time.perf_counter()
    with pytest.raises(RecipeError, match="too many alias expansions"):
        Registry.load(files=[path], entry_points=False)
    assert time.perf_counter() - start < 1.0


def test_alias_expansion_bound_is_on_added_nodes():
    # 10 × 10 × 10 × 10 leaves: about 11,000 nodes, fine; one more level is over 100,000.
    assert parse_yaml("a:\n" + laughs(4, width=10))["a"]["l4"][9][9][9][9] == ["lol"]
    with pytest.raises(RecipeError, match=f"{MAX_ALIAS_EXPANSION:,}"):
        parse_yaml("a:\n" + laughs(5, width=10))


def test_recursive_alias_is_refused():
    with pytest.raises(RecipeError, match="refers to its own anchor"):
        parse_yaml("a: &x [1, *x]\n")
    with pytest.raises(RecipeError, match=r"a\.k: an alias refers to its own anchor"):
        parse_yaml("a: &x {k: *x}\n")


def test_duplicate_key_inside_an_aliased_mapping_is_reported_once():
    text = "base: &b {x: 1, x: 2}\nu: *b\nv: *b\n"
    with pytest.raises(RecipeError) as info:
        parse_yaml(text)
    assert [p.path for p in info.value.problems] == ["base.x"]


def test_anchors_aliases_and_merge_keys_still_load():
    r = load_recipe_text(
        """
workload: matmul
trials: 2
extra_env: &envs {OMP_NUM_THREADS: "1"}
cells:
  - &first {name: baseline, mitigations: [none], trials: 3}
  - <<: *first
    name: xnack
    mitigations: [xnack]
  - {<<: [*first], name: big, workload_config: &cfg {m: 64}, extra_env: *envs}
  - {<<: *first, name: big2, workload_config: *cfg}
"""
    )
    cells = {c.name: c.spec for c in r.expand_cells()}
    assert list(cells) == ["baseline", "xnack", "big", "big2"]
    assert cells["xnack"].mitigations == ["xnack"] and cells["xnack"].trials == 3
    assert cells["big2"].workload_config == {"m": 64}
    assert cells["big"].extra_env == {"OMP_NUM_THREADS": "1"}


# --- fuzz: random recipe-like YAML with anchors and aliases ------------------------------------

KEYS = [
    "workload",
    "trials",
    "steps",
    "cells",
    "name",
    "mitigations",
    "environment",
    "axes",
    "workload_config",
    "extra_env",
    "timeout_per_trial",
    "ticket",
    "<<",
    "docker",
    "x",
]
SCALARS = [
    "matmul",
    "none",
    "xnack",
    "1",
    "0",
    "-1",
    "1e400",
    ".inf",
    ".nan",
    "null",
    "true",
    "'a b'",
    '""',
    "baseline",
    "OMP_NUM_THREADS",
    "-v/:/host",
    "~",
    "[]",
    "{}",
]


@st.composite
def yaml_docs(draw, depth: int = 0, anchors: list[str] | None = None):
    """Flow-style YAML text; nodes may carry anchors, and later nodes alias earlier anchors."""
    anchors = [] if anchors is None else anchors
    kinds = ["scalar", "alias"] if depth >= 4 else ["scalar", "alias", "list", "map", "map"]
    kind = draw(st.sampled_from(kinds))
    if kind == "alias":
        if anchors:
            return "*" + draw(st.sampled_from(anchors))
        kind = "scalar"
    if kind == "scalar":
        text = draw(st.sampled_from(SCALARS))
    elif kind == "list":
        items = draw(st.lists(yaml_docs(depth + 1, anchors), max_size=9))
        text = "[" + ", ".join(items) + "]"
    else:
        pairs = draw(
            st.lists(st.tuples(st.sampled_from(KEYS), yaml_docs(depth + 1, anchors)), max_size=6)
        )
        text = "{" + ", ".join(f"{k!s}: {v}" for k, v in pairs) + "}"
    if draw(st.booleans()):
        name = f"a{len(anchors)}"
        anchors.append(name)  # defined after its children: an alias to it is never recursive
        text = f"&{name} {text}"
    return text


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(body=yaml_docs(), prefix=st.sampled_from(["", HEAD, "workload_config: "]))
def test_fuzz_recipe_yaml_with_aliases_only_raises_recipe_error(body, prefix):
    try:
        load_recipe_text(prefix + body)
    except RecipeError as exc:
        assert str(exc)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(body=yaml_docs())
def test_fuzz_mitigations_file_with_aliases_only_raises_recipe_error(tmp_path_factory, body):
    path = tmp_path_factory.mktemp("m") / "m.yaml"
    path.write_text(body)
    try:
        Registry.load(files=[path], entry_points=False)
    except RecipeError as exc:
        assert str(exc)
