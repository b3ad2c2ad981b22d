"""``recipe validate`` sees everything in one pass (#45.3): whatever subset of problems of
different stages a recipe carries — structure, names, what the run would refuse — each is
reported once, with its path, and nothing else is."""

from __future__ import annotations

import copy

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.run.prepare import validate_recipe

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


#: fault → (how it is made, how its one problem starts)
FAULTS = {
    "unknown_top": (_unknown_top, "unknown key 'trails'"),
    "unknown_nested": (_unknown_nested, "cells[0]: unknown key 'colour'"),
    "bad_count": (_bad_count, "cells[1].trials: must be ≥ 1"),
    "unknown_mitigation": (_unknown_mitigation, "cells[1].mitigations[0]: unknown mitigation"),
    "unknown_environment": (_unknown_environment, "cells[2].environment: unknown environment"),
    "isolation": (_isolation, "trial_isolation: workload 'race' requires 'process'"),
    "config_key": (_config_key, "cells[2].workload_config.bogus: workload 'race' does not"),
}


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from(sorted(FAULTS))))
def test_every_problem_once_whatever_the_mix(tmp_path_factory, faults: set[str]) -> None:
    doc = copy.deepcopy(BASE)
    for fault in faults:
        FAULTS[fault][0](doc)
    path = tmp_path_factory.mktemp("v") / "r.yaml"
    path.write_text(yaml.safe_dump(doc))
    found = [str(p) for p in validate_recipe(path).problems]
    for fault in faults:
        start = FAULTS[fault][1]
        assert sum(p.startswith(start) for p in found) == 1, (fault, found)
    assert len(found) == len(faults), found
