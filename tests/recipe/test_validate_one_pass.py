"""``recipe validate`` sees everything in one pass (#45.3): whatever subset of problems of
different stages a recipe carries — structure, the rules across fields, names, what the run
would refuse — each is reported once, with its path, sorted by path, and nothing else is; a
sweep refuses the recipe with the same list (one rule)."""

from __future__ import annotations

import copy

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.errors import RecipeError, by_path
from aorta.run.prepare import check_recipe_file, prepare, validate_recipe

BASE = {
    "workload": "race",
    "cells": [
        {"name": "base", "mitigations": ["none"]},
        {"name": "x", "mitigations": ["tf32_off"]},
        {"name": "y", "mitigations": ["none"]},
    ],
}


def _unknown_top(d):
    d["trails"] = 3


def _unknown_nested(d):
    d["cells"][0]["colour"] = "red"


def _bad_count(d):
    d["cells"][1]["trials"] = 0


def _unknown_mitigation(d):
    d["cells"][1]["mitigations"] = ["xnak"]


def _unknown_environment(d):
    d["cells"][2]["environment"] = "rocm9"


def _isolation(d):
    d["trial_isolation"] = "in_process"


def _config_key(d):
    d["cells"][2]["workload_config"] = {"bogus": 1}


def _duplicate_name(d):
    d["cells"][2]["name"] = "x"


def _bad_top_value(d):
    d["timeout_per_trial"] = -1


def _bad_cell_name(d):
    d["cells"][0]["name"] = "-base"


#: fault → (how it is made, how its one problem starts)
FAULTS = {
    "unknown_top": (_unknown_top, "unknown key 'trails'"),
    "unknown_nested": (_unknown_nested, "cells[0]: unknown key 'colour'"),
    "bad_count": (_bad_count, "cells[1].trials: must be ≥ 1"),
    "unknown_mitigation": (_unknown_mitigation, "cells[1].mitigations[0]: unknown mitigation"),
    "unknown_environment": (_unknown_environment, "cells[2].environment: unknown environment"),
    "isolation": (_isolation, "trial_isolation: workload 'race' requires 'process'"),
    "config_key": (_config_key, "cells[2].workload_config.bogus: workload 'race' does not"),
    "duplicate_name": (_duplicate_name, "cells[2].name: duplicate cell name 'x' (also cells[1])"),
    "bad_top_value": (_bad_top_value, "timeout_per_trial: must be > 0"),
    "bad_cell_name": (_bad_cell_name, "cells[0].name: '-base' is not a valid cell name"),
}
#: What a sweep only warns about (its trials record it): it refuses nothing, and validate
#: warns of it with the sweep's words (#48).
RUN_WARNS = {"config_key"}


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from(sorted(FAULTS))))
def test_every_problem_once_whatever_the_mix(tmp_path_factory, faults: set[str]) -> None:
    doc = copy.deepcopy(BASE)
    for fault in faults:
        FAULTS[fault][0](doc)
    path = tmp_path_factory.mktemp("v") / "r.yaml"
    path.write_text(yaml.safe_dump(doc))
    validation = validate_recipe(path)
    problems = validation.problems
    found = [str(p) for p in problems]
    for fault in faults:
        start = FAULTS[fault][1]
        # What the sweep only warns about is a warning of validate's too, never a problem.
        where = validation.warnings if fault in RUN_WARNS else found
        assert sum(p.startswith(start) for p in where) == 1, (fault, found, validation.warnings)
    assert len(found) == len(faults - RUN_WARNS), found
    assert problems == by_path(problems)
    # The sweep: refused with exactly this list, or (nothing but what it warns about) not at
    # all, and then warning with validate's lines.
    try:
        check_recipe_file(path)
    except RecipeError as exc:
        assert faults - RUN_WARNS, (faults, exc.problems)
        assert exc.problems == problems
    else:
        assert not faults - RUN_WARNS, faults
        assert prepare(path).warnings == validation.warnings


@settings(max_examples=40, deadline=None)
@given(
    names=st.lists(
        st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True), min_size=1, max_size=6, unique=True
    ),
    copies=st.lists(st.integers(0, 5), min_size=1, max_size=8),
    bad_trials=st.sets(st.integers(0, 13)),
    bad_env=st.sets(st.integers(0, 13)),
    bad_mitigations=st.sets(st.integers(0, 13)),
)
def test_every_duplicate_name_is_reported_beside_bad_values(
    tmp_path_factory, names, copies, bad_trials, bad_env, bad_mitigations
) -> None:
    """N cells repeating an earlier name are N problems, whatever bad values the cells carry
    besides (each set aside and reported on its own; a cell without valid mitigations still
    has its name)."""
    cells = [{"name": n, "mitigations": ["none"]} for n in names]
    cells += [{"name": names[i % len(names)], "mitigations": ["none"]} for i in copies]
    for i in bad_trials & set(range(len(cells))):
        cells[i]["trials"] = 0
    for i in bad_env & set(range(len(cells))):
        cells[i]["environment"] = 3
    bad_mitigations &= set(range(len(cells)))
    for i in bad_mitigations:
        cells[i]["mitigations"] = "none"
    path = tmp_path_factory.mktemp("d") / "r.yaml"
    path.write_text(yaml.safe_dump({"workload": "matmul", "cells": cells}))
    found = [str(p) for p in validate_recipe(path).problems]
    assert sum("duplicate cell name" in p for p in found) == len(copies), found
    assert sum(".trials: must be ≥ 1" in p for p in found) == len(
        bad_trials & set(range(len(cells)))
    )
    assert sum(".environment: must be" in p for p in found) == len(bad_env & set(range(len(cells))))
    assert sum(".mitigations: must be" in p for p in found) == len(bad_mitigations)
    assert len(found) == len(copies) + len(bad_trials & set(range(len(cells)))) + len(
        bad_env & set(range(len(cells)))
    ) + len(bad_mitigations), found
