"""Recipe values that validated but could never run: bounds, names, image references."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.errors import RecipeError
from aorta.recipe import load_recipe_text
from aorta.recipe.plan import plan
from aorta.recipe.registry import Registry

CELL = "cells: [{name: baseline, mitigations: [none]}]\n"
MINIMAL = "workload: matmul\n" + CELL


def problems(text: str) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text)
    return [str(p) for p in info.value.problems]


def one(text: str) -> str:
    found = problems(text)
    assert len(found) == 1, found
    return found[0]


# --- item 4: counts and timeouts are bounded -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("trials: 100000000000000000000\n" + MINIMAL, "trials"),
        ("trials: 1000001\n" + MINIMAL, "trials"),
        ("steps: 1000000001\n" + MINIMAL, "steps"),
        (
            "workload: matmul\ncells: [{name: baseline, mitigations: [none], trials: 2000000}]\n",
            "cells[0].trials",
        ),
        (
            "workload: matmul\ncells: [{name: baseline, mitigations: [none], steps: 10000000000}]\n",
            "cells[0].steps",
        ),
        ("stop_after: {max_trials: 100000000000}\n" + MINIMAL, "stop_after.max_trials"),
        ("stop_after: {events: 100000000000}\n" + MINIMAL, "stop_after.events"),
    ],
)
def test_absurd_counts_are_refused_naming_the_field(text, path):
    msg = one(text)
    assert msg.startswith(f"{path}: must be ≤ "), msg


def test_counts_at_the_bounds_load():
    r = load_recipe_text("trials: 1000000\nsteps: 1000000000\n" + MINIMAL)
    assert r.trials == 1_000_000 and r.steps == 1_000_000_000


def axis_of(n: int) -> str:
    return "[" + ", ".join(str(i) for i in range(n)) + "]"


def test_total_planned_trials_is_bounded():
    # 20 cells × 1,000,000 trials each is 20 million trials.
    text = f"workload: matmul\ntrials: 1000000\naxes: {{workload_config: {{m: {axis_of(20)}}}}}\n"
    msg = one(text)
    assert msg.startswith("trials: ") and "20,000,000 trials" in msg and "10,000,000" in msg


def test_stop_after_max_trials_counts_toward_the_total():
    text = (
        "workload: matmul\nstop_after: {max_trials: 1000000}\n"
        f"axes: {{workload_config: {{m: {axis_of(11)}}}}}\n"
    )
    assert one(text).startswith("stop_after.max_trials: ")


def test_adaptive_max_trials_counts_toward_the_total_and_is_named():
    text = (
        "workload: matmul\nadaptive: {max_trials: 1000000}\n"
        f"axes: {{workload_config: {{m: {axis_of(11)}}}}}\n"
    )
    assert one(text).startswith("adaptive.max_trials: ")


@pytest.mark.timeout(10)
def test_axes_cartesian_product_is_bounded_before_it_is_expanded():
    # 10**12 cells: expanding them would never finish.
    keys = ", ".join(f"k{i}: {axis_of(10)}" for i in range(12))
    msg = one(f"workload: matmul\naxes: {{workload_config: {{{keys}}}}}\n")
    assert msg.startswith("axes: ") and "1,000,000,000,000 cells" in msg


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e400", "2592001", "1e12"])
def test_non_finite_or_absurd_timeout_is_refused(value):
    msg = one(f"timeout_per_trial: {value}\n" + MINIMAL)
    assert msg.startswith("timeout_per_trial: "), msg


def test_timeout_of_thirty_days_loads():
    assert load_recipe_text("timeout_per_trial: 2592000\n" + MINIMAL).timeout_per_trial == 2592000


@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_non_finite_threshold_is_refused(value):
    assert one(f"confound: {{threshold: {value}}}\n" + MINIMAL).startswith("confound.threshold: ")


@settings(max_examples=100, deadline=None)
@given(trials=st.integers(1, 10**30), steps=st.integers(1, 10**30))
def test_counts_load_or_fail_with_a_located_error(trials, steps):
    text = f"trials: {trials}\nsteps: {steps}\n" + MINIMAL
    if trials <= 1_000_000 and steps <= 10**9:
        assert load_recipe_text(text).trials == trials
    else:
        found = problems(text)
        assert found and all(p.split(":")[0] in {"trials", "steps"} for p in found)


# --- item 5: names that become file names -----------------------------------------------------


def test_long_explicit_cell_name_is_refused():
    name = "c" * 201
    msg = one(f"workload: matmul\ncells: [{{name: {name}, mitigations: [none]}}]\n")
    assert msg.startswith("cells[0].name: ") and "201 bytes" in msg and "200" in msg


def test_cell_name_of_200_bytes_loads():
    name = "c" * 200
    r = load_recipe_text(f"workload: matmul\ncells: [{{name: {name}, mitigations: [none]}}]\n")
    assert r.baseline_cell() == name


@pytest.mark.parametrize("ticket", ["T" * 201, "é" * 101])  # é is 2 bytes in UTF-8
def test_long_ticket_is_refused(ticket):
    msg = one(f"ticket: '{ticket}'\n" + MINIMAL)
    assert msg.startswith("ticket: ") and "bytes" in msg


def test_long_workload_name_is_refused():
    assert one(f"workload: {'w' * 201}\n" + CELL).startswith("workload: ")


def test_long_axes_generated_names_are_shortened_stably():
    value = "x" * 150
    text = (
        "workload: matmul\naxes:\n  mitigations: [none, omp_num_threads_1]\n"
        f"  workload_config: {{path: ['{value}a', '{value}b'], other: ['{value}']}}\n"
    )
    r = load_recipe_text(text)
    cells = r.expand_cells()
    names = [c.name for c in cells]
    assert len(set(names)) == 4
    assert all(len(n.encode()) <= 200 for n in names)
    # stable: the same recipe gives the same names (resume finds its cells)
    assert names == [c.name for c in load_recipe_text(text).expand_cells()]
    # the full generated name is kept beside the short one
    full = cells[0].full_name
    assert full is not None and full.startswith("none-path_") and len(full) > 200
    assert names[0].startswith(full[:100])
    p = plan(r, registry=Registry.load(entry_points=False))
    record = p.cell(names[0]).to_dict()
    assert record["name"] == names[0] and record["full_name"] == full
    # names that fit are left alone and carry no full_name
    short = load_recipe_text("workload: matmul\naxes: {workload_config: {m: [1, 2]}}\n")
    assert [c.name for c in short.expand_cells()] == ["m_1", "m_2"]
    assert (
        "full_name"
        not in plan(short, registry=Registry.load(entry_points=False)).cells[0].to_dict()
    )


def test_long_probe_generated_names_are_shortened(tmp_path):
    long = "m" * 120
    sidecar = tmp_path / "m.yaml"
    sidecar.write_text(f"{long}a: {{A: '1'}}\n{long}b: {{A: '2'}}\n{long}d: {{B: '1'}}\n")
    r = load_recipe_text(
        f"mode: probe\nmitigation_axis: [none, {long}a, {long}b]\n"
        f"diagnostic_axis: [none, {long}d]\n",
        command=["true"],
    )
    names = [c.name for c in r.expand_cells()]
    assert names[:3] == ["none-none", f"none-{long}d", f"{long}a-none"]
    assert len(set(names)) == 6 and all(len(n.encode()) <= 200 for n in names)
    p = plan(r, registry=Registry.load(files=[sidecar], entry_points=False))
    assert p.cell(names[3]).to_dict()["full_name"] == f"{long}a-{long}d"
    assert "full_name" not in p.cell(names[2]).to_dict()


def test_long_sidecar_environment_name_is_refused(tmp_path):
    sidecar = tmp_path / "m.yaml"
    sidecar.write_text(f"environments:\n  {'e' * 201}: {{env: {{A: '1'}}}}\n")
    with pytest.raises(RecipeError, match="200 bytes"):
        Registry.load(files=[sidecar], entry_points=False)


# --- item 6: docker image references -----------------------------------------------------------

GOOD_REFS = [
    "ubuntu",
    "rocm/pytorch:latest",
    "rocm/pytorch:rocm7.0_ubuntu24.04_py3.12_pytorch_release_2.7.1",
    "docker.io/library/ubuntu:24.04",
    "localhost:5000/team/image:tag",
    "registry.example.com:443/a/b/c@sha256:" + "a" * 64,
    "nvcr.io/nvidia/pytorch:24.01-py3",
    "my_image__x.y-z:TAG_1",
    "[::1]:5000/img",
]
BAD_REFS = [
    "-v/:/host",
    "--privileged",
    "ubuntu --privileged",
    "ubuntu\n",
    " ubuntu",
    "Ubuntu",
    "rocm/PyTorch",
    "ubuntu:",
    "ubuntu:-tag",
    "ubuntu@sha256:abc",
    "a//b",
    "img:" + "t" * 129,
    "x" * 256,
]


@pytest.mark.parametrize("ref", GOOD_REFS)
def test_valid_docker_references_load(ref):
    r = load_recipe_text(
        f"workload: command\ncells: [{{name: baseline, mitigations: [none], environment: {{docker: '{ref}'}}}}]\n"
    )
    assert r.cells[0].environment.docker == ref


@pytest.mark.parametrize("ref", BAD_REFS)
def test_bad_docker_reference_in_a_cell_is_refused(ref):
    quoted = ref.replace("\n", "\\n")
    msg = one(
        "workload: command\ncells:\n  - {name: baseline, mitigations: [none]}\n"
        f'  - {{name: d, mitigations: [none], environment: {{docker: "{quoted}"}}}}\n'
    )
    assert msg.startswith("cells[1].environment.docker: "), msg
    assert "image reference" in msg


def test_bad_docker_reference_in_axes_is_refused():
    msg = one('workload: command\naxes: {environment: [local, {docker: "-v/:/host"}]}\n')
    assert msg.startswith("axes.environment[1].docker: "), msg
    assert "'-'" in msg


@pytest.mark.parametrize("ref", ["-v/:/host", "ubuntu --privileged"])
def test_bad_docker_reference_in_a_mitigations_file_is_refused(tmp_path, ref):
    sidecar = tmp_path / "m.yaml"
    sidecar.write_text(f'environments:\n  evil: {{docker: "{ref}"}}\n')
    with pytest.raises(RecipeError) as info:
        Registry.load(files=[sidecar], entry_points=False)
    assert "environments.evil.docker" in str(info.value)
    assert "image reference" in str(info.value)


@pytest.mark.parametrize("ref", GOOD_REFS)
def test_valid_docker_reference_in_a_mitigations_file_loads(tmp_path, ref):
    sidecar = tmp_path / "m.yaml"
    sidecar.write_text(f"environments:\n  img: {{docker: '{ref}'}}\n")
    assert Registry.load(files=[sidecar], entry_points=False).environment("img").image == ref


@settings(max_examples=300, deadline=None)
@given(ref=st.text(max_size=40))
def test_docker_reference_check_never_lets_an_option_through(ref):
    from aorta.recipe.limits import image_ref_problem

    problem = image_ref_problem(ref)
    if problem is None:
        assert ref and not ref.startswith("-")
        assert not any(c.isspace() for c in ref)


def test_bad_docker_reference_from_environment_objects_is_refused():
    # What a plugin hands over through the aorta.environments entry point.
    from aorta.recipe.registry import Environment, _environments_from

    with pytest.raises(RecipeError, match=r"plugin x: environments\.evil\.docker: not a docker"):
        _environments_from([Environment("evil", "docker", "-v/:/host")], "plugin x")
    (ok,) = _environments_from([Environment("img", "docker", "rocm/pytorch:latest")], "plugin x")
    assert ok.image == "rocm/pytorch:latest" and ok.source == "plugin x"
