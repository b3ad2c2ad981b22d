"""Secrets everywhere aorta prints (#45.5): the run's redaction applies to the console too —
the dry-run, ``recipe show``, ``recipe validate``, ``sweep status``, the end-of-run summary and
error messages — not only to the files it writes."""

from __future__ import annotations

import json

import pytest

from aorta.errors import ExitCode

TOKEN = "hf_s3cretVALUE99"
PASSWORD = "pw-Sw0rdfish-77"
CELL_KEY = "apikey-Zebra-4242"
ARGV = "pw-Argv-Secret-31"
SECRETS = (TOKEN, PASSWORD, CELL_KEY, ARGV)

RECIPE = f"""\
workload: command
command: [python3, -c, "pass", --password, {ARGV}]
extra_env: {{HF_TOKEN: {TOKEN}, DB_PASSWORD: {PASSWORD}}}
cells:
  - {{name: base, mitigations: [none]}}
  - {{name: x, mitigations: [tf32_off], extra_env: {{MY_API_KEY: {CELL_KEY}}}}}
"""


def _clean(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


@pytest.fixture
def recipe(write):
    return write("r.yaml", RECIPE)


def test_plan_show_and_validate_print_no_secret(run_cli, recipe):
    for args in (
        ("sweep", "run", "--recipe", recipe, "--dry-run"),
        ("sweep", "run", "--recipe", recipe, "--dry-run", "--json"),
        ("recipe", "show", recipe),
        ("recipe", "show", recipe, "--resolved"),
        ("recipe", "validate", recipe),
    ):
        code, out, err = run_cli(*args)
        assert code == ExitCode.OK, (args, err)
        assert out.strip()
        _clean(out, err)
    code, out, _ = run_cli("sweep", "run", "--recipe", recipe, "--dry-run")
    assert "HF_TOKEN=<redacted>" in out and "MY_API_KEY=<redacted>" in out


def test_error_messages_print_no_secret(run_cli, write):
    # The secret is also a (wrong) mitigation name and a cell name: the errors naming them
    # are redacted as the run's files are.
    path = write(
        "bad.yaml",
        f"workload: matmul\nextra_env: {{HF_TOKEN: {TOKEN}}}\n"
        f"cells: [{{name: a, mitigations: [{TOKEN}]}}, {{name: a, mitigations: [none]}}]\n",
    )
    code, out, err = run_cli("recipe", "validate", path)
    assert code == ExitCode.USAGE
    assert "unknown mitigation '<redacted>'" in err
    _clean(out, err)
    code, out, err = run_cli("sweep", "run", "--recipe", path, "--dry-run")
    assert code == ExitCode.USAGE and err.startswith("Error: ")
    _clean(out, err)


@pytest.mark.slow
def test_a_sweep_its_summary_and_status_print_no_secret(run_cli, recipe, tmp_path):
    code, out, err = run_cli("sweep", "run", "--recipe", recipe, "-o", tmp_path / "runs")
    assert code == ExitCode.OK, err
    _clean(out, err)
    (run,) = (tmp_path / "runs").glob("*/command/*")
    for args in (("sweep", "status", run), ("sweep", "status", run, "--json")):
        code, out, err = run_cli(*args)
        assert code == ExitCode.OK
        _clean(out, err)
    assert json.loads(run_cli("sweep", "status", run, "--json")[1])["status"] == "complete"
