"""Planning: registry resolution, env precedence, conflicts, stable ids."""

from __future__ import annotations

import json
import warnings

import pytest

from aorta.errors import RecipeError
from aorta.recipe import load_recipe_text
from aorta.recipe.plan import plan
from aorta.recipe.registry import Environment, Mitigation, Registry


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.load(entry_points=False)


def test_precedence_environment_mitigations_recipe_cell():
    reg = Registry(
        [
            Mitigation("none", {}),
            Mitigation("m1", {"A": "m1", "B": "m1"}),
            Mitigation("m2", {"C": "m2", "E": "m2"}),
        ],
        [Environment("envx", "local", None, {"A": "env", "D": "env", "E": "env"})],
    )
    r = load_recipe_text(
        "workload: matmul\nextra_env: {B: recipe, C: recipe}\n"
        "cells: [{name: a, mitigations: [m1, m2], environment: envx, extra_env: {C: cell}}]"
    )
    cell = plan(r, registry=reg).cell("a")
    assert dict(cell.env) == {"A": "m1", "D": "env", "E": "m2", "B": "recipe", "C": "cell"}
    assert cell.env_sources["A"] == "mitigation:m1"
    assert cell.env_sources["D"] == "environment:envx"
    assert cell.env_sources["B"] == "recipe extra_env"
    assert cell.env_sources["C"] == "cells[0] extra_env"


def test_stacked_mitigations_conflict_names_both(registry):
    r = load_recipe_text(
        "workload: matmul\ncells: [{name: a, mitigations: [none]}, {name: b, mitigations: [hsa_enable_cache, hsa_disable_cache]}]"
    )
    with pytest.raises(RecipeError) as info:
        plan(r, registry=registry)
    (p,) = info.value.problems
    assert p.path == "cells[1].mitigations[1]"
    assert (
        "'hsa_disable_cache' sets HSA_DISABLE_CACHE='1' but 'hsa_enable_cache' sets HSA_DISABLE_CACHE='0'"
        in p.message
    )


def test_same_value_twice_is_not_a_conflict():
    reg = Registry(
        [Mitigation("none", {}), Mitigation("p", {"X": "1"}), Mitigation("q", {"X": "1", "Y": "2"})]
    )
    r = load_recipe_text("workload: matmul\ncells: [{name: a, mitigations: [p, q]}]")
    assert dict(plan(r, registry=reg).cell("a").env) == {"X": "1", "Y": "2"}


def test_unknown_mitigation_lists_available_and_path(registry):
    r = load_recipe_text(
        "workload: matmul\ncells: [{name: a, mitigations: [none]}, {name: b, mitigations: [none, xnak]}]"
    )
    with pytest.raises(RecipeError) as info:
        plan(r, registry=registry)
    (p,) = info.value.problems
    assert p.path == "cells[1].mitigations[1]"
    assert p.message.startswith("unknown mitigation 'xnak'; did you mean 'xnack'?")
    assert "available: " in p.message and "tf32_off" in p.message


def test_unknown_mitigation_in_probe_axis(registry):
    r = load_recipe_text(
        "mode: probe\nmitigation_axis: [none, bogus]\ndiagnostic_axis: [none]", command=["true"]
    )
    with pytest.raises(RecipeError) as info:
        plan(r, registry=registry)
    assert {p.path for p in info.value.problems} == {"mitigation_axis[1]"}


def test_unknown_environment(registry):
    r = load_recipe_text(
        "workload: matmul\ncells: [{name: a, mitigations: [none], environment: rocm7}]"
    )
    with pytest.raises(RecipeError) as info:
        plan(r, registry=registry)
    assert str(info.value.problems[0]).startswith(
        "cells[0].environment: unknown environment 'rocm7'"
    )


def test_inline_docker_environment_resolves(registry):
    r = load_recipe_text(
        "workload: matmul\ncells: [{name: a, mitigations: [none], environment: {docker: 'img:1'}}]"
    )
    env = plan(r, registry=registry).cell("a").environment
    assert (env.kind, env.image) == ("docker", "img:1") and env.name.startswith("_inline_")


def test_workload_config_merge_and_steps_and_trials(registry):
    r = load_recipe_text(
        "workload: matmul\ntrials: 3\nsteps: 7\nworkload_config: {m: 64, dtype: float32}\n"
        "cells: [{name: a, mitigations: [none]}, {name: b, mitigations: [none], trials: 5, steps: 2, workload_config: {m: 128}}]"
    )
    p = plan(r, registry=registry)
    assert dict(p.cell("a").workload_config) == {"m": 64, "dtype": "float32"}
    assert dict(p.cell("b").workload_config) == {"m": 128, "dtype": "float32"}
    assert (p.cell("a").trials, p.cell("a").steps, p.cell("b").trials, p.cell("b").steps) == (
        3,
        7,
        5,
        2,
    )
    assert p.n_trials == 8
    assert [(k.cell.name, k.trial) for k in p.trials()][:4] == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("b", 0),
    ]


def test_stop_after_max_trials_sets_the_cap(registry):
    r = load_recipe_text(
        "workload: matmul\ntrials: 2\nstop_after: {events: 1, max_trials: 50}\ncells: [{name: a, mitigations: [none]}]"
    )
    assert plan(r, registry=registry).cell("a").trials == 50


def test_timeout_precedence(registry):
    r = load_recipe_text("workload: matmul\ncells: [{name: a, mitigations: [none]}]")
    assert plan(r, registry=registry).timeout_s == 3600
    assert plan(r, registry=registry, timeout_s=5).timeout_s == 5
    r2 = load_recipe_text(
        "workload: matmul\ntimeout_per_trial: 9\ncells: [{name: a, mitigations: [none]}]"
    )
    assert plan(r2, registry=registry, timeout_s=5).timeout_s == 9


def test_trial_seeds_stable_and_distinct(registry):
    r = load_recipe_text("workload: matmul\ntrials: 4\ncells: [{name: a, mitigations: [none]}]")
    seeds = [k.seed for k in plan(r, registry=registry).trials()]
    assert seeds == [k.seed for k in plan(r, registry=registry).trials()]
    assert len(set(seeds)) == 4


def test_cell_to_dict_is_json(registry):
    r = load_recipe_text(
        "workload: matmul\ncollect: [torch_profiler]\ncells: [{name: a, mitigations: [xnack]}]"
    )
    d = plan(r, registry=registry).cell("a").to_dict()
    assert json.loads(json.dumps(d))["env"] == {"HSA_XNACK": "1"}
    assert d["collect"] == [{"name": "torch_profiler", "options": {}}]


# --- registry -------------------------------------------------------------------------------------


def test_builtins_cover_upstream_table_and_nvidia():
    reg = Registry.load(entry_points=False)
    assert dict(reg.mitigation("rccl_gfx942_cheap_fence_off").env) == {
        "RCCL_GFX9_CHEAP_FENCE_OFF": "1",
        "RCCL_GFX942_CHEAP_FENCE_OFF": "1",
    }
    assert dict(reg.mitigation("pytorch_alloc_expandable_segments").env) == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"
    }
    assert dict(reg.mitigation("cuda_launch_blocking").env) == {"CUDA_LAUNCH_BLOCKING": "1"}
    assert dict(reg.mitigation("nccl_proto_ll128").env) == {"NCCL_PROTO": "LL128"}
    assert dict(reg.mitigation("none").env) == {}


def test_sidecar_file_adds_mitigations_and_environments(write):
    path = write(
        "mit.yaml",
        "mitigations:\n  my_fix: {env: {MY_FLAG: '1'}, description: mine}\n  short: {OTHER: x}\n"
        "environments:\n  rocm7: {docker: 'rocm/pytorch:7', env: {HIP_FORCE_DEV_KERNARG: '1'}}\n",
    )
    reg = Registry.load(files=[path], entry_points=False)
    assert dict(reg.mitigation("my_fix").env) == {"MY_FLAG": "1"}
    assert reg.mitigation("short").source == str(path)
    env = reg.environment("rocm7")
    assert (env.kind, env.image, dict(env.env)) == (
        "docker",
        "rocm/pytorch:7",
        {"HIP_FORCE_DEV_KERNARG": "1"},
    )


def test_sidecar_short_form_json(write):
    path = write("mit.json", json.dumps({"fix_a": {"A": "1"}}))
    assert dict(Registry.load(files=[path], entry_points=False).mitigation("fix_a").env) == {
        "A": "1"
    }


def test_name_defined_twice_names_both_sources(write):
    path = write("mit.yaml", "mitigations: {xnack: {HSA_XNACK: '0'}}\n")
    with pytest.raises(RecipeError) as info:
        Registry.load(files=[path], entry_points=False)
    assert str(info.value) == f"mitigation 'xnack' is defined twice: by builtin and by {path}"


def test_two_sidecars_clash(write):
    a = write("a.yaml", "mitigations: {m: {A: '1'}}\n")
    b = write("b.yaml", "mitigations: {m: {A: '2'}}\n")
    with pytest.raises(RecipeError, match=f"defined twice: by {a} and by {b}"):
        Registry.load(files=[a, b], entry_points=False)


def test_sidecar_rejects_numbers_and_reserved(write):
    with pytest.raises(
        RecipeError, match=r"mitigations.m.A: must be a string, got integer 1: quote the value"
    ):
        Registry.load(files=[write("a.yaml", "mitigations: {m: {A: 1}}\n")], entry_points=False)
    with pytest.raises(RecipeError, match="MASTER_PORT belongs to the launcher"):
        Registry.load(
            files=[write("b.yaml", "mitigations: {m: {MASTER_PORT: '1'}}\n")], entry_points=False
        )


def test_broken_entry_point_is_named_in_a_warning(monkeypatch):
    import importlib.metadata as md

    from aorta.recipe import registry as registry_mod

    ep = md.EntryPoint(name="broken", value="no_such_module_xyz:table", group="aorta.mitigations")
    monkeypatch.setattr(
        registry_mod, "_entry_points", lambda group: [ep] if group == "aorta.mitigations" else []
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg = Registry.load()
    assert "xnack" in reg.mitigations
    assert any(
        "broken" in str(w.message) and "no_such_module_xyz" in str(w.message) for w in caught
    )


def test_entry_point_table_is_loaded(monkeypatch):
    import importlib.metadata as md

    from aorta.recipe import registry as registry_mod

    ep = md.EntryPoint(
        name="site", value="tests.plugin_fixtures:MITIGATIONS", group="aorta.mitigations"
    )
    monkeypatch.setattr(
        registry_mod, "_entry_points", lambda group: [ep] if group == "aorta.mitigations" else []
    )
    reg = Registry.load()
    assert dict(reg.mitigation("site_fix").env) == {"SITE_FLAG": "1"}
    assert reg.mitigation("site_fix").source.startswith("entry point 'site'")
