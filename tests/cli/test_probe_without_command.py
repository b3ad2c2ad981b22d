"""A probe recipe gets its command after '--' when it runs; ``recipe show [--resolved]`` and
``sweep run --dry-run`` show it before that, saying where the command comes from."""

from __future__ import annotations

import json

import yaml

from aorta.errors import ExitCode
from aorta.recipe import load_recipe_text

PROBE = "mode: probe\nticket: T-1\ntrials: 3\nmitigation_axis: [none, xnack]\n"
AFTER_DASHES = "a probe recipe's command comes after '--'"


def test_recipe_show_resolved_prints_a_probe_recipe_without_command(run_cli, write):
    path = write("probe.yaml", PROBE)
    code, out, err = run_cli("recipe", "show", "--resolved", path)
    assert code == ExitCode.OK, err
    first = out.splitlines()[0]
    assert first.startswith("# command: none yet") and AFTER_DASHES in first
    data = yaml.safe_load(out)  # still a recipe: the note is a comment
    assert data["command"] is None and data["mitigation_axis"] == ["none", "xnack"]
    assert data["trials"] == 3
    # What it printed loads back as the same recipe once the command is given.
    given = load_recipe_text(out, command=["bash", "t.sh"])
    assert given == load_recipe_text(PROBE, command=["bash", "t.sh"])


def test_recipe_show_plain(run_cli, write):
    code, out, _ = run_cli("recipe", "show", write("probe.yaml", PROBE))
    assert code == ExitCode.OK
    assert AFTER_DASHES in out.splitlines()[0]
    assert yaml.safe_load(out) == {
        "mode": "probe",
        "ticket": "T-1",
        "trials": 3,
        "mitigation_axis": ["none", "xnack"],
    }


def test_dry_run_shows_the_plan_of_a_probe_recipe_without_command(run_cli, write, tmp_path):
    path = write("probe.yaml", PROBE)
    code, out, err = run_cli("sweep", "run", "--dry-run", "--recipe", path, "-o", tmp_path / "o")
    assert code == ExitCode.OK, err
    lines = out.splitlines()
    assert lines[0] == "Plan: 2 cells, 6 trials — workload 'command', ticket T-1"
    assert lines[1].startswith("  command: none yet") and AFTER_DASHES in lines[1]
    assert any("HSA_XNACK=1" in line for line in lines)
    assert not (tmp_path / "o").exists()

    code, out, _ = run_cli("sweep", "run", "--dry-run", "--json", "--recipe", path)
    plan = json.loads(out)
    assert plan["command"] is None and plan["n_trials"] == 6
    assert any(AFTER_DASHES in w for w in plan["warnings"])


def test_a_probe_recipe_with_its_command_shows_it(run_cli, write):
    path = write("probe.yaml", PROBE)
    code, out, _ = run_cli("sweep", "run", "--dry-run", "--recipe", path, "--", "bash", "t.sh")
    assert code == ExitCode.OK and out.splitlines()[1] == "  command: bash t.sh"


def test_other_problems_are_still_errors(run_cli, write):
    path = write("probe.yaml", PROBE + "cells: [{name: a, mitigations: [none]}]\n")
    for argv in (("recipe", "show", "--resolved", path), ("sweep", "run", "--dry-run", "-r", path)):
        code, _, err = run_cli(*argv)
        assert code == ExitCode.USAGE
        assert "probe recipes take mitigation_axis" in err and "Traceback" not in err
    # Running (not a dry run) still needs the command.
    code, _, err = run_cli("sweep", "run", "--recipe", write("p2.yaml", PROBE))
    assert code == ExitCode.USAGE and "none was given: put it after '--'" in err
