"""Flag mode (``aorta sweep run --workload W --mitigation-axis … --environment-axis …``) builds
the same cells as the equivalent recipe file, and ``sweep run --json`` prints the summary."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aorta.errors import RecipeError
from aorta.recipe import dump_recipe, load_recipe, load_recipe_text
from aorta.recipe.blocks import DockerEnvironment
from aorta.recipe.flags import recipe_from_flags
from aorta.recipe.plan import plan
from aorta.recipe.registry import BUILTIN_ENVIRONMENTS, Environment, Mitigation, Registry
from aorta.store.rundir import RunDir

REGISTRY = Registry(
    [
        Mitigation("none", {}),
        Mitigation("m_a", {"VAR_A": "a"}),
        Mitigation("m_b", {"VAR_B": "b"}),
        Mitigation("m_c", {"VAR_C": "c"}),
    ],
    [*BUILTIN_ENVIRONMENTS, Environment("cluster_env", env={"SITE": "x"})],
)

stacks = st.lists(st.sampled_from(["m_a", "m_b", "m_c"]), min_size=1, max_size=2, unique=True)
mitigation_axes = st.lists(
    st.one_of(st.just("none"), stacks.map("+".join)), min_size=1, max_size=4, unique=True
)
images = st.from_regex(r"[a-z][a-z0-9]{0,6}(/[a-z0-9]{1,6})?:[a-z0-9]{1,5}", fullmatch=True)
environment_axes = st.lists(
    st.one_of(st.sampled_from(["local", "cluster_env"]), images.map("image:{}".format)),
    min_size=1,
    max_size=3,
    unique=True,
)


def _cells(recipe):
    p = plan(recipe, registry=REGISTRY)
    return [(c.name, c.cell_id, dict(c.env), c.environment.to_dict()) for c in p.cells], p.baseline


def _name(mitigation, environment):
    """Upstream's flag-mode cell name, derived independently: <mitigation>-<environment>."""
    if environment.startswith("image:"):
        environment = DockerEnvironment(docker=environment[len("image:") :]).name
    return f"{mitigation.replace('+', '.')}-{environment}"


def _axes_recipe(mitigations, environments, trials, steps, baseline):
    """The recipe file a person would write for the same matrix (an axes block)."""
    data = {
        "workload": "matmul",
        "trials": trials,
        "steps": steps,
        "axes": {
            "mitigations": [m.split("+") for m in mitigations],
            "environment": [
                {"docker": e[len("image:") :]} if e.startswith("image:") else e
                for e in environments
            ],
        },
    }
    if baseline is not None:
        data["confound"] = {"baseline_cell": baseline}
    return load_recipe_text(yaml.safe_dump(data))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mitigation_axes,
    environment_axes,
    st.integers(1, 5),
    st.one_of(st.none(), st.integers(1, 50)),
    st.data(),
)
def test_flag_mode_cells_equal_the_equivalent_recipes(
    mitigations, environments, trials, steps, data
):
    # A baseline named on the command line, or (with a `none` row) found by the usual rule.
    names = [_name(m, e) for m in mitigations for e in environments]
    baseline = data.draw(st.sampled_from(names)) if "none" not in mitigations else None
    flags = recipe_from_flags(
        workload="matmul",
        mitigation_axis=mitigations,
        environment_axis=environments,
        trials=trials,
        steps=steps,
        baseline=baseline,
    )
    expected = _axes_recipe(mitigations, environments, trials, steps, baseline)
    # Same cells — names, ids, overlays, environments — and the same baseline as the file.
    assert _cells(flags) == _cells(expected)
    assert [c[0] for c in _cells(flags)[0]] == names
    # Written out (recipe.resolved.yaml holds explicit cells) it loads back equal, same cells.
    again = load_recipe_text(dump_recipe(flags))
    assert again == flags and again.axes is None and len(again.cells) == len(names)
    assert _cells(again) == _cells(flags)
    assert (flags.trials, flags.steps) == (trials, steps)


def test_names_follow_upstream():
    r = recipe_from_flags(
        workload="matmul",
        mitigation_axis=["none", "m_a+m_b"],
        environment_axis=["local", "image:rocm/pytorch:6.2"],
        trials=2,
        steps=5,
    )
    names = [c.name for c in r.expand_cells()]
    assert names[0] == "none-local" and names[2] == "m_a.m_b-local"
    assert names[1].startswith("none-_inline_") and r.baseline_cell() == "none-local"


def test_problems_name_the_flag():
    with pytest.raises(RecipeError) as info:
        recipe_from_flags(workload="matmul", mitigation_axis=["m_a"], trials=1, baseline="nope")
    assert str(info.value).startswith("--baseline: no cell named 'nope'")
    with pytest.raises(RecipeError, match="--workload: required"):
        recipe_from_flags(mitigation_axis=["none"])
    with pytest.raises(RecipeError, match="--environment-axis"):
        recipe_from_flags(workload="w", mitigation_axis=["none"], environment_axis=["image:"])


@pytest.mark.slow
def test_flag_mode_run_writes_a_resolved_recipe_and_json_summary(tmp_path, run_cli):
    code, out, err = run_cli(
        "sweep", "run", "--mitigation-axis", "none,tf32_off", "--environment-axis", "local",
        "--trials", "2", "--ticket", "FLAGS-1", "-o", tmp_path, "--json", "--", "sh", "-c",
        'test -z "$DISABLE_TF32"',
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)  # stdout is the JSON document and nothing else
    run = RunDir.open(summary["run_dir"])
    assert summary["status"] == "complete" and summary["exit_status"] == "OK"
    assert summary["baseline"] == "none-local" and summary["failing"] == ["tf32_off-local"]
    cells = {c["cell"]: c for c in summary["cells"]}
    assert cells["tf32_off-local"]["statuses"] == {"workload_failed": 2}
    assert cells["tf32_off-local"]["failure_rate"] == 1.0 and "verdict" in cells["none-local"]
    # The recipe it ran is on disk like any other and runs again as a file.
    resolved = load_recipe(run.recipe_path)
    assert [c.name for c in resolved.cells] == ["none-local", "tf32_off-local"]
    assert resolved.command == ["sh", "-c", 'test -z "$DISABLE_TF32"'] and resolved.trials == 2
    assert run.path.parent.parent.name == "FLAGS-1"


def test_flag_mode_refuses_a_recipe_beside_it(tmp_path, run_cli, write):
    recipe = write("r.yaml", "workload: matmul\ncells: [{name: a, mitigations: [none]}]\n")
    code, _, err = run_cli("sweep", "run", "--recipe", recipe, "--mitigation-axis", "none")
    assert code == 2 and "--mitigation-axis build a recipe (flag mode)" in err


def test_json_with_strict_reports_the_gate(tmp_path, run_cli):
    code, out, _ = run_cli(
        "sweep", "run", "--mitigation-axis", "none,tf32_off", "-o", tmp_path, "--json",
        "--strict", "--", "sh", "-c", 'test -z "$DISABLE_TF32"',
    )  # fmt: skip
    assert code == 4 and json.loads(out)["exit_status"] == "GATE"
