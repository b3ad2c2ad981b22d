"""A recipe with problems in several stages — a bad value, a duplicate cell name, an unknown
mitigation, an isolation the workload refuses — gets every one of them in one pass, each
naming its path, sorted by path: from ``recipe validate``, and the same lines from ``sweep
run`` and its ``--dry-run`` (one rule, not one per command)."""

from __future__ import annotations

from aorta.errors import ExitCode

#: Four problems, four stages: the fields (trials), the rules across fields (the name),
#: the registry (the mitigation), the workload (its isolation).
BAD = """\
workload: race
trial_isolation: in_process
trials: 0
cells:
  - {name: base, mitigations: [none]}
  - {name: a, mitigations: [none]}
  - {name: a, mitigations: [xnak]}
"""


def _lines(path: str) -> list[str]:
    return [
        f"Error: {path}: cells[2].mitigations[0]: unknown mitigation 'xnak'",
        f"Error: {path}: cells[2].name: duplicate cell name 'a' (also cells[1])",
        f"Error: {path}: trial_isolation: workload 'race' requires 'process' isolation",
        f"Error: {path}: trials: must be ≥ 1, got integer 0",
    ]


def _shown(err: str) -> list[str]:
    # The unknown mitigation's line goes on with the suggestion and the names there are.
    return [
        line.split(";")[0] if "unknown mitigation" in line else line.split(", the recipe")[0]
        for line in err.splitlines()
    ]


def test_validate_lists_every_stage_s_problem_sorted_by_path(run_cli, write):
    path = write("bad.yaml", BAD)
    code, out, err = run_cli("recipe", "validate", path)
    assert code == ExitCode.USAGE
    assert out == ""
    assert _shown(err) == _lines(str(path))


def test_sweep_run_and_its_dry_run_refuse_with_the_same_lines(run_cli, write, tmp_path):
    path = write("bad.yaml", BAD)
    _, _, validated = run_cli("recipe", "validate", path)
    for dry in (["--dry-run"], []):
        code, out, err = run_cli(
            "sweep", "run", "--recipe", path, "--output", tmp_path / "runs", *dry
        )
        assert code == ExitCode.USAGE, (dry, err)
        assert err == validated, dry
        assert out == ""
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_a_good_recipe_still_validates_and_plans(run_cli, write):
    path = write("good.yaml", BAD.replace("trials: 0", "trials: 2").replace("xnak", "xnack"))
    path.write_text(
        path.read_text().replace("in_process", "process").replace("name: a,", "name: b,", 1)
    )
    code, out, err = run_cli("recipe", "validate", path)
    assert (code, err) == (ExitCode.OK, "")
    assert "OK — 3 cells, 6 trials, baseline 'base'" in out
    code, out, err = run_cli("sweep", "run", "--recipe", path, "--dry-run")
    assert (code, err) == (ExitCode.OK, "")
    assert "xnack" in out


def test_one_problem_reads_as_before(run_cli, write):
    # One problem: the one line it always was, from every command.
    path = write(
        "one.yaml", "workload: matmul\ntrials: 0\ncells: [{name: a, mitigations: [none]}]\n"
    )
    expected = f"Error: {path}: trials: must be ≥ 1, got integer 0\n"
    for args in (["recipe", "validate", path], ["sweep", "run", "--recipe", path, "--dry-run"]):
        code, _, err = run_cli(*args)
        assert (code, err) == (ExitCode.USAGE, expected), args


def test_checks_that_cannot_run_are_named_not_hidden(run_cli, write):
    # A top-level rule fails (an adaptive block with a sequential schedule): no model to check
    # the cells on, so the duplicate is not found — and the output says what waits.
    path = write(
        "top.yaml",
        "workload: matmul\nschedule: sequential\nadaptive: {min_trials: 5}\n"
        "cells: [{name: a, mitigations: [none]}, {name: a, mitigations: [none]}]\n",
    )
    code, _, err = run_cli("recipe", "validate", path)
    assert code == ExitCode.USAGE
    assert err.splitlines() == [
        f"Error: {path}: adaptive: settings for schedule: adaptive, but schedule is 'sequential'",
        "(not checked until these are fixed: duplicate cell names, the cell count, the trial "
        "total and the baseline)",
    ]


def test_the_command_line_s_override_is_what_gets_checked(run_cli, write):
    # race refuses in_process; --isolation process is what the run would use, so it plans.
    path = write(
        "race.yaml",
        "workload: race\ntrial_isolation: in_process\ncells: [{name: a, mitigations: [none]}]\n",
    )
    code, _, err = run_cli("sweep", "run", "--recipe", path, "--dry-run")
    assert code == ExitCode.USAGE
    assert "trial_isolation: workload 'race' requires 'process' isolation" in err
    code, out, err = run_cli(
        "sweep", "run", "--recipe", path, "--dry-run", "--isolation", "process"
    )
    assert (code, err) == (ExitCode.OK, "")
    assert "process" in out


def test_a_cell_without_valid_mitigations_keeps_its_name_and_says_what_waits(run_cli, write):
    # cells[1]'s mitigations are a string: its name still counts for the duplicates, but
    # whether it is the baseline (the first cell with mitigations [none]) cannot be told.
    path = write(
        "mit.yaml",
        "workload: matmul\ncells: [{name: a, mitigations: [xnack]}, {name: b, mitigations: none},"
        " {name: b, mitigations: [none]}]\n",
    )
    code, _, err = run_cli("recipe", "validate", path)
    assert code == ExitCode.USAGE
    assert err.splitlines() == [
        f"Error: {path}: cells[1].mitigations: must be a non-empty list of names, got 'none'",
        f"Error: {path}: cells[2].name: duplicate cell name 'b' (also cells[1])",
        "(not checked until these are fixed: the baseline)",
    ]
    # Named, the baseline is checked: no line waits.
    path.write_text(path.read_text() + "confound: {baseline_cell: a}\n")
    code, _, err = run_cli("recipe", "validate", path)
    assert code == ExitCode.USAGE
    assert "not checked" not in err and len(err.splitlines()) == 2


def test_what_a_sweep_only_warns_about_is_a_warning_of_validate_s_in_the_sweep_s_words(
    run_cli, write
):
    # A workload not installed here (it may be a plugin of the nodes a launch reaches) and a
    # workload_config key it does not read: the sweep warns and runs, so validate passes the
    # recipe and prints the dry-run's warning lines, word for word (#48).
    cases = {
        "unknown.yaml": (
            "workload: nosuchwl\ncells: [{name: a, mitigations: [none]}]\n",
            "warning: unknown workload 'nosuchwl'",
        ),
        "key.yaml": (
            "workload: race\n"
            "cells: [{name: a, mitigations: [none], workload_config: {bogus: 1}}]\n",
            "warning: cells[0].workload_config.bogus: workload 'race' does not read 'bogus'",
        ),
    }
    for name, (text, start) in cases.items():
        path = write(name, text)
        code, out, err = run_cli("recipe", "validate", path)
        assert code == ExitCode.OK, err
        assert f"{path}: OK — 1 cells, 1 trials" in out
        warned = err.splitlines()
        assert len(warned) == 1 and warned[0].startswith(start), warned
        code, out, _ = run_cli("sweep", "run", "--recipe", path, "--dry-run")
        assert code == ExitCode.OK
        assert [line for line in out.splitlines() if line.startswith("warning:")] == warned


def test_a_refused_recipe_shows_its_warnings_too_in_every_command(run_cli, write, tmp_path):
    # Problems and warnings together: before, a refused sweep printed only the problems, and
    # a user who fixed them met warnings its message never showed. `recipe validate`, `sweep
    # run` and its --dry-run now print one list, warnings first (#48).
    path = write(
        "both.yaml",
        "workload: nosuchwl\ntrials: 0\n"
        "cells: [{name: a, mitigations: [none]}, {name: b, mitigations: [none], "
        "workload_config: {x: 1}}]\n",
    )
    code, out, validated = run_cli("recipe", "validate", path)
    assert (code, out) == (ExitCode.USAGE, "")
    lines = validated.splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "warning: unknown workload 'nosuchwl'",
        f"Error: {path}: trials: must be ≥ 1, got integer 0",
    ]
    known = path.read_text().replace("nosuchwl", "matmul")
    other = write("key.yaml", known)
    _, _, key_warned = run_cli("recipe", "validate", other)
    assert key_warned.splitlines()[0].startswith(
        "warning: cells[1].workload_config.x: workload 'matmul' does not read 'x'"
    )
    for recipe, expected in ((path, validated), (other, key_warned)):
        for dry in (["--dry-run"], ["--dry-run", "--json"], []):
            code, out, err = run_cli(
                "sweep", "run", "--recipe", recipe, "--output", tmp_path / "runs", *dry
            )
            assert (code, out) == (ExitCode.USAGE, ""), (dry, err)
            assert err == expected, dry
    assert not (tmp_path / "runs").exists()  # refused before anything was written
