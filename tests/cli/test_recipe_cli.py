"""The recipe commands and the dry-run, in-process through aorta.cli.main."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from tests.conftest import UPSTREAM_RECIPES

ROOT = Path(__file__).resolve().parents[2]


def test_validate_ok(run_cli):
    code, out, _ = run_cli("recipe", "validate", UPSTREAM_RECIPES / "example-fsdp-smoke.yaml")
    assert code == ExitCode.OK
    assert "OK — 3 cells, 6 trials, baseline 'baseline-local'" in out


def test_validate_lists_every_problem(run_cli, write):
    path = write(
        "bad.yaml", "workload: matmul\ntrials: 0\ncells: [{name: a, mitigations: tf32_off}]\n"
    )
    code, _out, err = run_cli("recipe", "validate", path)
    assert code == ExitCode.USAGE
    assert err.splitlines() == [  # sorted by path
        f"Error: {path}: cells[0].mitigations: must be a non-empty list of names, got 'tf32_off'",
        f"Error: {path}: trials: must be ≥ 1, got integer 0",
    ]


def test_validate_checks_the_registry(run_cli, write):
    path = write("bad.yaml", "workload: matmul\ncells: [{name: a, mitigations: [none, xnak]}]\n")
    code, _, err = run_cli("recipe", "validate", path)
    assert code == ExitCode.USAGE
    assert err.startswith(
        f"Error: {path}: cells[0].mitigations[1]: unknown mitigation 'xnak'; did you mean 'xnack'?"
    )


def test_validate_with_a_mitigations_file(run_cli, write):
    mit = write("mit.yaml", "site_fix: {SITE: '1'}\n")
    path = write("r.yaml", "workload: matmul\ncells: [{name: a, mitigations: [site_fix]}]\n")
    assert run_cli("recipe", "validate", path)[0] == ExitCode.USAGE
    assert run_cli("recipe", "validate", path, "--mitigations-file", mit)[0] == ExitCode.OK


def test_show_resolved_reloads(run_cli, tmp_path):
    code, out, _ = run_cli("recipe", "show", UPSTREAM_RECIPES / "race_smoke.yaml", "--resolved")
    assert code == ExitCode.OK
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(out)
    assert run_cli("recipe", "validate", resolved)[0] == ExitCode.OK
    from aorta.recipe import load_recipe

    assert load_recipe(resolved) == load_recipe(UPSTREAM_RECIPES / "race_smoke.yaml")


def test_show_plain_omits_defaults(run_cli):
    code, out, _ = run_cli("recipe", "show", UPSTREAM_RECIPES / "race_smoke.yaml")
    assert code == ExitCode.OK and "trial_isolation" not in out and "ticket: RACE-SMOKE" in out


def test_probe_dry_run_prints_four_cell_plan(run_cli):
    code, out, err = run_cli(
        "sweep",
        "run",
        "--recipe",
        ROOT / "recipes/probe/probe-template-bash.yaml",
        "--dry-run",
        "--",
        "echo",
        "hi",
    )
    assert code == ExitCode.OK, err
    assert out.startswith("Plan: 4 cells, 12 trials — workload 'command', ticket TICKET-1234")
    assert "command: echo hi" in out
    for cell in (
        "none-none",
        "none-xnack",
        "pytorch_no_cuda_memory_caching-none",
        "pytorch_no_cuda_memory_caching-xnack",
    ):
        assert f" {cell} " in out
    assert "overlay: PYTORCH_NO_CUDA_MEMORY_CACHING=1 HSA_XNACK=1" in out
    assert "Baseline: none-none (*)   confound threshold: 1.15   deadline per trial: 1800 s" in out


def test_dry_run_json(run_cli):
    code, out, _ = run_cli(
        "sweep",
        "run",
        "-r",
        UPSTREAM_RECIPES / "example-fsdp-smoke.yaml",
        "--dry-run",
        "--json",
        "--ticket",
        "T-9",
        "--timeout",
        "30",
    )
    assert code == ExitCode.OK
    plan = json.loads(out)
    assert (plan["ticket"], plan["timeout_s"], plan["n_cells"], plan["baseline"]) == (
        "T-9",
        30.0,
        3,
        "baseline-local",
    )
    assert plan["cells"][2]["env"] == {"HSA_XNACK": "1"}
    assert plan["cells"][0]["workload_config"]["mode"] == "fsdp"


@pytest.mark.parametrize("name", sorted(p.name for p in UPSTREAM_RECIPES.glob("*.yaml")))
def test_upstream_recipes_dry_run(run_cli, name):
    args = ["sweep", "run", "--recipe", UPSTREAM_RECIPES / name, "--dry-run"]
    if "probe" in name:
        args += ["--", "echo", "hi"]
    code, out, err = run_cli(*args)
    assert code == ExitCode.OK, err
    assert out.startswith("Plan: ")


def test_unknown_workload_is_a_dry_run_warning(run_cli, write):
    path = write("r.yaml", "workload: nosuch\ncells: [{name: a, mitigations: [none]}]\n")
    code, out, _ = run_cli("sweep", "run", "--recipe", path, "--dry-run")
    assert code == ExitCode.OK
    assert "warning: unknown workload 'nosuch' (registered: " in out and "matmul" in out


def test_bad_recipe_exits_usage_with_one_line(run_cli, write):
    path = write(
        "r.yaml", "workload: matmul\ncells: [{name: a, mitigations: [none], extra_env: {X: on}}]\n"
    )
    code, out, err = run_cli("sweep", "run", "--recipe", path, "--dry-run")
    assert code == ExitCode.USAGE
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(
        f"Error: {path}: cells[0].extra_env.X: must be a string, got boolean true"
    )


def test_usage_errors(run_cli):
    code, _, err = run_cli("sweep", "run", "--dry-run")
    assert code == ExitCode.USAGE and err == "Error: give --recipe FILE (or --resume RUN_DIR)\n"
    code, _, err = run_cli("sweep", "nope")
    assert code == ExitCode.USAGE and err.startswith("Error: No such command 'nope'.")


def test_recipe_from_environment_twin(run_cli, monkeypatch):
    monkeypatch.setenv("AORTA_RECIPE", str(UPSTREAM_RECIPES / "race_smoke.yaml"))
    code, out, _ = run_cli("sweep", "run", "--dry-run")
    assert code == ExitCode.OK and "workload 'race'" in out


@pytest.mark.slow
def test_console_script_help_and_exit_code():
    aorta = Path(sys.executable).parent / "aorta"
    for args in (
        ["--help"],
        ["sweep", "run", "--help"],
        ["recipe", "validate", "--help"],
        ["workloads", "list", "--help"],
    ):
        proc = subprocess.run([aorta, *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "Usage: aorta" in proc.stdout
    proc = subprocess.run(
        [aorta, "recipe", "validate", "/nonexistent.yaml"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == ExitCode.USAGE
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "recipes").rglob("*.yaml"))
)
def test_shipped_recipes_validate(run_cli, path):
    code, out, err = run_cli("recipe", "validate", ROOT / path)
    assert code == ExitCode.OK, err
    assert out.startswith(f"{ROOT / path}: OK — ")
    if "mode: probe" in (ROOT / path).read_text():
        # A probe recipe's command comes at run time, after '--': validate says so.
        assert "give the command after '--'" in out
        code, out, err = run_cli("recipe", "validate", ROOT / path, "--", "bash", "train.sh")
        assert code == ExitCode.OK, err
        assert "give the command" not in out


def test_env_and_mitigations_list(run_cli, write):
    code, out, _ = run_cli("env", "--json")
    assert code == ExitCode.OK and json.loads(out)["python"]
    mit = write("m.yaml", "site_fix: {SITE: '1'}\n")
    code, out, _ = run_cli("mitigations", "list", "--mitigations-file", mit)
    assert code == ExitCode.OK
    assert any(line.split()[:3] == ["xnack", "amd", "HSA_XNACK=1"] for line in out.splitlines())
    assert any(line.startswith("site_fix") for line in out.splitlines())


def test_validate_reports_every_stage_in_one_pass(run_cli, write):
    """Structure (unknown keys at two depths, a bad count, a string for a list), names (a
    mitigation, an environment), what the run would refuse (race in process) and what it
    warns about (a key race does not read) — all in one pass, each with its path."""
    path = write(
        "bad.yaml",
        "workload: race\n"
        "trial_isolation: in_process\n"
        "trails: 3\n"
        "confound: {threshhold: 1.2}\n"
        "cells:\n"
        "  - {name: base, mitigations: [none], colour: red}\n"
        "  - {name: x, mitigations: [xnak], trials: 0}\n"
        "  - {name: y, mitigations: tf32_off}\n"
        "  - {name: z, mitigations: [none], environment: rocm9, workload_config: {bogus: 1}}\n",
    )
    code, out, err = run_cli("recipe", "validate", path)
    assert code == ExitCode.USAGE and out == ""
    # The key race does not read is what a sweep only warns about: a warning here too.
    warned = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1
    assert warned[0].startswith("warning: cells[3].workload_config.bogus: workload 'race' does not")
    lines = [line for line in err.splitlines() if line not in warned]
    assert all(line.startswith(f"Error: {path}: ") for line in lines)
    paths_and_words = [line.removeprefix(f"Error: {path}: ")[:90] for line in lines]
    expected = [
        "unknown key 'trails'",
        "confound: unknown key 'threshhold'",
        "cells[0]: unknown key 'colour'",
        "cells[1].trials: must be ≥ 1",
        "cells[2].mitigations: must be a non-empty list of names, got 'tf32_off'",
        "cells[1].mitigations[0]: unknown mitigation 'xnak'",
        "cells[3].environment: unknown environment 'rocm9'",
        "trial_isolation: workload 'race' requires 'process' isolation",
    ]
    for want in expected:
        assert any(got.startswith(want) for got in paths_and_words), (want, lines)
    assert len(lines) == len(expected), lines


def test_validate_names_a_single_process_workloads_distributed_key(run_cli, write):
    path = write(
        "m.yaml",
        "workload: matmul\nworkload_config: {straggler_rank: 1}\n"
        "cells: [{name: a, mitigations: [none]}]\n",
    )
    # A warning, as the sweep gives it (its trials ignore the key), not a refusal.
    code, _, err = run_cli("recipe", "validate", path)
    assert code == ExitCode.OK
    assert err.startswith("warning: workload_config.straggler_rank: workload 'matmul'")
    assert "read by distributed workloads only" in err


def test_validate_refuses_what_the_run_refuses(run_cli, write):
    """Whatever validate passes, the dry-run accepts; what the run refuses, validate does."""
    path = write(
        "r.yaml",
        "workload: race\ntrial_isolation: in_process\ncells: [{name: a, mitigations: [none]}]\n",
    )
    assert run_cli("recipe", "validate", path)[0] == ExitCode.USAGE
    assert run_cli("sweep", "run", "--recipe", path, "--dry-run")[0] == ExitCode.USAGE
    path.write_text("workload: race\ncells: [{name: a, mitigations: [none]}]\n")
    assert run_cli("recipe", "validate", path)[0] == ExitCode.OK
    assert run_cli("sweep", "run", "--recipe", path, "--dry-run")[0] == ExitCode.OK
