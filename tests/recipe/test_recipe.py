"""The recipe model: every validation rule names its path; dumps load back equal."""

from __future__ import annotations

import pytest

from aorta.errors import RecipeError
from aorta.recipe import dump_recipe, load_recipe, load_recipe_text
from aorta.recipe.blocks import DockerEnvironment
from tests.conftest import UPSTREAM_RECIPES

MINIMAL = "workload: matmul\ncells: [{name: a, mitigations: [none]}]\n"


def problems(text: str, **kw) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, **kw)
    return [str(p) for p in info.value.problems]


def one(text: str, **kw) -> str:
    found = problems(text, **kw)
    assert len(found) == 1, found
    return found[0]


# --- structure ---------------------------------------------------------------------------------


def test_minimal_recipe_loads_with_defaults():
    r = load_recipe_text(MINIMAL)
    assert r.mode == "matrix"
    assert r.trials == 1
    assert r.confound.threshold == 1.15
    assert r.trial_isolation == "auto"
    assert [c.name for c in r.expand_cells()] == ["a"]


def test_mitigations_must_be_a_list_names_the_path():
    msg = one(
        "workload: matmul\ncells: [{name: a, mitigations: [none]}, {name: b, mitigations: [none]}, {name: c, mitigations: tf32_off}]"
    )
    assert msg == "cells[2].mitigations: must be a non-empty list of names, got 'tf32_off'"


@pytest.mark.parametrize("value", ["[]", "null", "[1]", "{a: b}"])
def test_mitigations_rejects_empty_and_non_names(value):
    assert one(f"workload: matmul\ncells: [{{name: a, mitigations: {value}}}]").startswith(
        "cells[0].mitigations: must be a non-empty list of names"
    )


def test_unknown_key_lists_allowed_and_suggests():
    msg = one("workload: matmul\ncells: [{name: a, mitigation: [none]}]")
    assert msg.startswith("cells[0]: unknown key 'mitigation'; did you mean 'mitigations'?")
    assert "allowed: name, mitigations, environment" in msg


def test_unknown_top_level_key():
    msg = one("workload: matmul\ntrails: 3\n" + MINIMAL.split("\n", 1)[1])
    assert "unknown key 'trails'; did you mean 'trials'?" in msg


@pytest.mark.parametrize("name", ["-x", ".hidden", "a b", "a/b", "ä", ""])
def test_cell_name_pattern(name):
    msg = one(f"workload: matmul\ncells: [{{name: '{name}', mitigations: [none]}}]")
    assert msg.startswith("cells[0].name:")


@pytest.mark.parametrize("name", [".", ".."])
def test_reserved_cell_names(name):
    assert (
        one(f"workload: matmul\ncells: [{{name: '{name}', mitigations: [none]}}]")
        == f"cells[0].name: {name!r} is reserved"
    )


def test_a_cell_may_share_a_run_files_name():
    """cells/matrix.md is a cell's folder of its own: it never meets the run's matrix.md."""
    recipe = load_recipe_text("workload: matmul\ncells: [{name: matrix.md, mitigations: [none]}]")
    assert [c.name for c in recipe.cells] == ["matrix.md"]


def test_cell_names_unique():
    msg = one(
        "workload: matmul\ncells: [{name: a, mitigations: [none]}, {name: a, mitigations: [xnack]}]"
    )
    assert msg == "cells[1].name: duplicate cell name 'a' (also cells[0])"


def test_duplicate_yaml_keys_rejected():
    msg = one("workload: matmul\ncells:\n  - name: a\n    mitigations: [none]\n    name: b\n")
    assert msg == "cells[0].name: duplicate key 'name' (lines 3 and 5)"


def test_invalid_yaml_names_line():
    assert one("workload: [matmul\n").startswith("line 2, column 1: not valid YAML")


def test_document_must_be_a_mapping():
    assert one("- a\n- b\n") == "a recipe is a mapping of keys, got a list"


def test_schema_version_other_than_1():
    assert (
        one("schema_version: 2\n" + MINIMAL)
        == "schema_version: this aorta reads schema_version 1, got integer 2"
    )


# --- environment variables ----------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["on", "yes", "true", "off"])
def test_env_booleans_rejected_not_coerced(raw):
    msg = one(f"workload: matmul\nextra_env: {{HSA_XNACK: {raw}}}\n" + MINIMAL.split("\n", 1)[1])
    assert msg.startswith("extra_env.HSA_XNACK: must be a string, got boolean")
    assert "quote the value" in msg


def test_env_numbers_rejected_not_coerced():
    msg = one(
        "workload: matmul\ncells: [{name: a, mitigations: [none], extra_env: {OMP_NUM_THREADS: 1}}]"
    )
    assert (
        msg
        == 'cells[0].extra_env.OMP_NUM_THREADS: must be a string, got integer 1: quote the value ("1")'
    )


def test_env_quoted_values_accepted():
    r = load_recipe_text(
        "workload: matmul\ncells: [{name: a, mitigations: [none], extra_env: {X: 'on', Y: '1'}}]"
    )
    assert r.cells[0].extra_env == {"X": "on", "Y": "1"}


@pytest.mark.parametrize("name", ["1X", "A-B", "A B", "É"])
def test_env_names_posix(name):
    assert "is not a valid environment variable name" in one(
        f"workload: matmul\nextra_env: {{'{name}': x}}\n" + MINIMAL.split("\n", 1)[1]
    )


@pytest.mark.parametrize("value", ['"a\\0b"', '"a\\nb"', '"a\\rb"'])
def test_env_values_without_nul_or_newline(value):
    assert "NUL or newline" in one(
        f"workload: matmul\nextra_env: {{X: {value}}}\n" + MINIMAL.split("\n", 1)[1]
    )


@pytest.mark.parametrize(
    "name",
    [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
        "AORTA_CELL",
    ],
)
def test_launcher_identity_never_settable(name):
    msg = one(
        f"workload: matmul\ncells: [{{name: a, mitigations: [none], extra_env: {{{name}: '1'}}}}]"
    )
    assert msg.startswith(f"cells[0].extra_env.{name}:") and "launcher or to aorta" in msg


# --- numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["trials", "steps"])
@pytest.mark.parametrize(
    "value, expected",
    [
        ("0", "must be ≥ 1, got integer 0"),
        ("true", "must be a whole number ≥ 1, got boolean true"),
        ("'3'", "must be a whole number, got string '3'"),
        ("1.5", "must be a whole number, got number 1.5"),
    ],
)
def test_counts_positive_integers_not_booleans(field, value, expected):
    assert one(f"{field}: {value}\n" + MINIMAL) == f"{field}: {expected}"


def test_cell_trials_checked_too():
    assert (
        one("workload: matmul\ncells: [{name: a, mitigations: [none], trials: 0}]")
        == "cells[0].trials: must be ≥ 1, got integer 0"
    )


def test_threshold_above_one():
    assert (
        one("confound: {threshold: 0.9}\n" + MINIMAL)
        == "confound.threshold: must be > 1.0, got number 0.9"
    )


def test_literal_choices_listed():
    msg = one("trial_isolation: maybe\n" + MINIMAL)
    assert (
        msg
        == "trial_isolation: must be one of 'auto', 'in_process' or 'process', got string 'maybe'"
    )


# --- workload_config ----------------------------------------------------------------------------


def test_steps_reserved_in_workload_config():
    msg = one(
        "workload: matmul\nworkload_config: {steps: 3}\ncells: [{name: a, mitigations: [none]}]"
    )
    assert msg.startswith("workload_config.steps: 'steps' is reserved")


def test_aorta_prefix_reserved_in_cell_workload_config():
    msg = one(
        "workload: matmul\ncells: [{name: a, mitigations: [none], workload_config: {_aorta_x: 1}}]"
    )
    assert msg.startswith(
        "cells[0].workload_config._aorta_x: keys starting with '_aorta_' are reserved"
    )


# --- environments and collectors ----------------------------------------------------------------


def test_inline_docker_environment_is_auto_named():
    r = load_recipe_text(
        "workload: matmul\ncells: [{name: a, mitigations: [none], environment: {docker: 'rocm/pytorch:latest'}}]"
    )
    env = r.cells[0].environment
    assert isinstance(env, DockerEnvironment)
    assert env.name.startswith("_inline_") and len(env.name) == len("_inline_") + 8


def test_inline_environment_bad_keys():
    assert one(
        "workload: matmul\ncells: [{name: a, mitigations: [none], environment: {image: x}}]"
    ) == ("cells[0].environment: an inline environment is {docker: <image ref>}, got keys image")


def test_collect_short_and_long_forms_equal():
    a = load_recipe_text("collect: [torch_profiler]\n" + MINIMAL)
    b = load_recipe_text("collect: [{torch_profiler: null}]\n" + MINIMAL)
    assert a.collect == b.collect
    c = load_recipe_text(
        "collect: [{torch_profiler: {active: 2, record_shapes: true}}]\n" + MINIMAL
    )
    assert c.collect[0].options == {"active": 2, "record_shapes": True}


def test_unknown_collector_and_option():
    assert one("collect: [nvtx]\n" + MINIMAL).startswith("collect[0]: unknown collector 'nvtx'")
    assert "unknown option 'steps'" in one("collect: [{torch_profiler: {steps: 2}}]\n" + MINIMAL)


# --- modes --------------------------------------------------------------------------------------


def test_matrix_needs_workload_and_cells():
    found = problems("trials: 2\n")
    assert "workload: required in matrix mode (or give a command after '--')" in found
    assert "cells: a matrix recipe needs at least one cell (or an axes block)" in found


def test_matrix_mode_without_workload_accepts_a_command():
    r = load_recipe_text("cells: [{name: a, mitigations: [none]}]", command=["echo", "hi"])
    assert r.workload_name == "command" and r.command == ["echo", "hi"]


def test_command_with_a_non_command_workload_is_an_error():
    assert one(MINIMAL, command=["echo"]).startswith(
        "workload: a command after '--' runs with workload 'command'"
    )


def test_probe_mode_cells_are_the_product_named_m_d():
    r = load_recipe_text(
        "mode: probe\nmitigation_axis: [none, xnack]\ndiagnostic_axis: [none, hip_launch_blocking]\n",
        command=["true"],
    )
    names = [c.name for c in r.expand_cells()]
    assert names == [
        "none-none",
        "none-hip_launch_blocking",
        "xnack-none",
        "xnack-hip_launch_blocking",
    ]
    assert r.expand_cells()[3].spec.mitigations == ["xnack", "hip_launch_blocking"]


def test_probe_mode_inferred_from_axes():
    assert load_recipe_text("mitigation_axis: [none]\n", command=["true"]).mode == "probe"


def test_probe_mode_rejects_cells_and_other_workloads():
    found = problems(
        "mode: probe\nworkload: matmul\nmitigation_axis: [none]\ncells: [{name: a, mitigations: [none]}]"
    )
    assert any(p.startswith("cells: probe recipes take") for p in found)
    assert any(p.startswith("workload: probe mode runs the command") for p in found)


def test_probe_axes_only_in_probe_mode():
    assert "mitigation_axis: only valid with mode: probe" in problems(
        "mode: matrix\nmitigation_axis: [none]\n" + MINIMAL
    )


def test_bad_step_time_regex():
    assert one(
        "mode: probe\nmitigation_axis: [none]\ncommand: [echo]\nstep_time_regex: '(['\n"
    ).startswith("step_time_regex: not a valid regular expression")


# --- axes -----------------------------------------------------------------------------------------


def test_axes_product_and_names():
    r = load_recipe_text(
        "workload: matmul\naxes:\n  mitigations: [none, [xnack, tf32_off]]\n  environment: [local]\n"
        "  workload_config: {m: [256, 512], dtype: [float32]}\n"
    )
    names = [c.name for c in r.expand_cells()]
    assert names == [
        "none-local-m_256-dtype_float32",
        "none-local-m_512-dtype_float32",
        "xnack.tf32_off-local-m_256-dtype_float32",
        "xnack.tf32_off-local-m_512-dtype_float32",
    ]
    assert r.expand_cells()[3].spec.workload_config == {"m": 512, "dtype": "float32"}
    assert r.baseline_cell() == "none-local-m_256-dtype_float32"


def test_axes_and_cells_combine_and_clash():
    msg = one(
        "workload: matmul\ncells: [{name: none, mitigations: [none]}]\naxes: {mitigations: [none]}\n"
    )
    assert msg == "axes (cell 'none'): duplicate cell name 'none' (also cells[0])"


def test_axes_values_must_be_lists():
    assert (
        one("workload: matmul\naxes: {workload_config: {m: 256}}\n")
        == "axes.workload_config: m: must be a non-empty list of values, got integer 256"
    )


# --- baseline -----------------------------------------------------------------------------------


def test_baseline_explicit_must_exist():
    msg = one(
        "workload: matmul\nconfound: {baseline_cell: base}\ncells: [{name: basee, mitigations: [xnack]}, {name: b, mitigations: [xnack]}]"
    )
    assert (
        msg
        == "confound.baseline_cell: no cell named 'base'; did you mean 'basee'? (cells: basee, b)"
    )


def test_baseline_resolution_order():
    cells = "cells: [{name: a, mitigations: [xnack]}, {name: n, mitigations: [none]}, {name: baseline-x, mitigations: [xnack]}]"
    assert load_recipe_text(f"workload: matmul\n{cells}").baseline_cell() == "baseline-x"
    cells2 = "cells: [{name: a, mitigations: [xnack]}, {name: n, mitigations: [none]}]"
    assert load_recipe_text(f"workload: matmul\n{cells2}").baseline_cell() == "n"
    assert (
        load_recipe_text(
            "workload: matmul\ncells: [{name: only, mitigations: [xnack]}]"
        ).baseline_cell()
        == "only"
    )
    assert (
        load_recipe_text(
            f"workload: matmul\nconfound: {{baseline_cell: a}}\n{cells2}"
        ).baseline_cell()
        == "a"
    )


def test_baseline_unresolvable():
    msg = one(
        "workload: matmul\ncells: [{name: a, mitigations: [xnack]}, {name: b, mitigations: [tf32_off]}]"
    )
    assert msg.startswith("confound.baseline_cell: cannot tell which cell is the baseline")


# --- files ----------------------------------------------------------------------------------------


def test_missing_file_names_it(tmp_path):
    with pytest.raises(RecipeError) as info:
        load_recipe(tmp_path / "nope.yaml")
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: no such file"


def test_error_message_counts_other_problems(write):
    path = write("r.yaml", "trials: 0\nsteps: 0\n" + MINIMAL)
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    # The problems come sorted by path: `steps` before `trials`.
    assert str(info.value) == f"{path}: steps: must be ≥ 1, got integer 0 (+1 more problem)"
    assert [p.path for p in info.value.problems] == ["steps", "trials"]


@pytest.mark.parametrize("name", sorted(p.name for p in UPSTREAM_RECIPES.glob("*.yaml")))
def test_upstream_recipes_load_and_round_trip(name):
    # A probe recipe's command comes after '--' (and without one it is refused, issue 13).
    probe = "mode: probe" in (UPSTREAM_RECIPES / name).read_text()
    r = load_recipe(UPSTREAM_RECIPES / name, command=["true"] if probe else None)
    assert load_recipe_text(dump_recipe(r)) == r


def test_resolved_dump_keeps_every_field():
    r = load_recipe(
        UPSTREAM_RECIPES / "probe-template-bash.yaml", command=["bash", "launch.sh", "--x 'y'"]
    )
    text = dump_recipe(r)
    for key in (
        "redaction",
        "collect_paths",
        "timeout_per_trial",
        "env_passthrough_mode",
        "command",
        "confound",
    ):
        assert f"\n{key}:" in text
    again = load_recipe_text(text)
    assert again == r and again.command == ["bash", "launch.sh", "--x 'y'"]
    assert (
        again.redaction is not None and again.redaction.scrub_env_keys == r.redaction.scrub_env_keys
    )
