"""``aorta compare`` and ``aorta report`` in-process, on real (tiny) sweeps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from aorta.recipe import load_recipe_text
from aorta.report.matrix_files import write_matrix
from aorta.run.sweep import sweep
from tests.conftest import DATA

# Step times: SLOW_FACTOR scales every step, HSA_XNACK (the xnack cell) doubles them; FAIL
# makes the baseline fail. Distinct per trial, so the exact test applies.
STEPS = (
    "import os, sys\n"
    "if os.environ.get('FAIL'): sys.exit(1)\n"
    "t = int(os.environ['AORTA_TRIAL'])\n"
    "f = float(os.environ.get('SLOW_FACTOR', '1')) * (2 if os.environ.get('HSA_XNACK') else 1)\n"
    "for s in range(4): print(f'step {f * (10 + t * 0.01 + s * 0.001):.4f} ms')"
)


def probe(extra_env: str = "{}", trials: int = 5) -> str:
    return f"""
mode: probe
trials: {trials}
mitigation_axis: [none, xnack, tf32_off]
step_time_regex: 'step ([0-9.]+) ms'
extra_env: {extra_env}
"""


def run(tmp_path, name, text):
    result = sweep(
        load_recipe_text(text, command=["python3", "-c", STEPS]),
        output=tmp_path / name,
        progress="none",
    )
    return result.run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cmp")
    return {
        "a": run(tmp, "a", probe()),
        "a2": run(tmp, "a2", probe()),
        "slow": run(tmp, "slow", probe("{SLOW_FACTOR: '1.5'}")),
    }


@pytest.mark.slow
def test_one_run_against_its_baseline(run_cli, runs):
    code, out, err = run_cli("compare", runs["a"])
    assert code == ExitCode.OK, err
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "baseline" in lines["none-none"]
    assert "slower +100%" in lines["xnack-none"] and lines["xnack-none"].endswith("beyond band")
    # tf32_off does not touch the probe: the same values as the baseline.
    # The verdict shows the CI the band is judged on: Bonferroni over the 2 compared cells.
    assert lines["tf32_off-none"].endswith(
        "no difference detected +0.0%, 97.5% CI [-0.3, +0.3] — within band"
    )
    assert "10000 resamples, seed 0" in out


@pytest.mark.slow
def test_fail_on_regression_trips_the_gate(run_cli, runs):
    code, _, err = run_cli("compare", runs["a"], "--fail-on-regression")
    assert code == ExitCode.GATE
    assert "xnack-none" in err


@pytest.mark.slow
def test_two_runs_cell_by_cell(run_cli, runs):
    code, out, _ = run_cli("compare", runs["a"], runs["a2"], "--fail-on-regression")
    assert code == ExitCode.OK  # the same runs again: nothing regressed
    code, out, err = run_cli("compare", runs["a"], runs["slow"], "--fail-on-regression")
    assert code == ExitCode.GATE
    assert "none-none" in err and "xnack-none" in err
    # B faster than A is no regression.
    code, out, _ = run_cli("compare", runs["slow"], runs["a"], "--fail-on-regression")
    table = out.split("\n\n")[-1]  # the findings come first, then the table
    assert code == ExitCode.OK and sum(" faster -33%" in line for line in table.splitlines()) == 3
    assert out.index("Findings") < out.index("n_ok/n")


@pytest.mark.slow
def test_gate_from_its_env_twin(run_cli, runs, monkeypatch):
    monkeypatch.setenv("AORTA_FAIL_ON_REGRESSION", "1")
    code, _, _ = run_cli("compare", runs["a"], runs["slow"])
    assert code == ExitCode.GATE


@pytest.mark.slow
def test_json_records_seed_and_resamples(run_cli, runs):
    code, out, _ = run_cli("compare", runs["a"], "--json", "--seed", "3", "--resamples", "500")
    assert code == ExitCode.OK
    doc = json.loads(out)
    assert doc["statistics"]["seed"] == 3 and doc["statistics"]["resamples"] == 500
    cells = {c["cell"]: c for c in doc["cells"]}
    assert cells["xnack-none"]["ratio"] == pytest.approx(2.0, rel=1e-3)
    assert cells["none-none"]["difference"] == "baseline"
    assert (cells["xnack-none"]["difference"], cells["xnack-none"]["band"]) == (
        "slower",
        "beyond band",
    )


@pytest.mark.slow
def test_baseline_alpha_and_metric_options(run_cli, runs):
    code, out, _ = run_cli("compare", runs["a"], "--baseline", "xnack-none", "--alpha", "0.01")
    assert code == ExitCode.OK
    # 5 trials against 5 cannot reach 0.01 / 2 (the smallest exact p is 2/252).
    assert (
        "α = 0.01" in out
        and "no difference detected -50%, 99.5% CI [-50, -50] (≥ 6 trials per cell)" in out
    )
    # The baseline, against xnack: half the time; the interval is the verdict's 99.5% one.
    assert "0.5 [0.498, 0.502]" in out
    code, out, _ = run_cli("compare", runs["a"], "--metric", "wall_clock_s", "--json")
    assert code == ExitCode.OK and json.loads(out)["statistics"]["metric"] == "wall_clock_s"


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["--baseline", "nope"], "baseline cell 'nope'"),
        (["--metric", "nope"], "unknown metric 'nope'"),
        (["--alpha", "0"], "alpha must be in (0, 1)"),
    ],
)
def test_usage_errors(run_cli, runs, args, message):
    code, _, err = run_cli("compare", runs["a"], *args)
    assert code == ExitCode.USAGE
    assert message in err and err.startswith("Error: ")


@pytest.mark.slow
def test_usage_errors_about_runs(run_cli, runs, tmp_path):
    code, _, err = run_cli("compare", runs["a"], runs["a2"], "--baseline", "none-none")
    assert code == ExitCode.USAGE and "--baseline applies to one run" in err
    code, _, err = run_cli("compare", runs["a"], runs["a2"], runs["slow"])
    assert code == ExitCode.USAGE
    code, _, err = run_cli("compare", tmp_path)
    assert code == ExitCode.USAGE and "not an aorta run directory" in err


@pytest.mark.slow
def test_a_failing_baseline_is_the_normal_triage_case(run_cli, tmp_path):
    # The bug reproduces in the baseline and a mitigation fixes it: a finding, exit 0.
    text = probe(trials=6).replace("[none, xnack, tf32_off]", "[none, xnack]")
    fixed = "import os, sys; sys.exit(0 if os.environ.get('HSA_XNACK') == '1' else 1)"
    result = sweep(
        load_recipe_text(text, command=["python3", "-c", fixed]),
        output=tmp_path / "fb",
        progress="none",
    )
    assert result.exit_code == ExitCode.OK
    code, out, err = run_cli("compare", result.run_dir)
    assert code == ExitCode.OK, err
    line = next(line for line in out.splitlines() if line.startswith("xnack-none"))
    assert "0% (0/6)" in line and "fewer (p_adj 0.0" in line
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    code, out, err = run_cli(
        "sweep", "run", "-r", recipe, "-o", tmp_path / "cli", "--", "python3", "-c", fixed
    )
    assert code == ExitCode.OK, err
    assert "comparisons are impossible" not in out


@pytest.mark.slow
def test_no_usable_baseline_is_incomplete(run_cli, tmp_path):
    # Every trial errored (an unknown workload): nothing to compare against, for anything.
    result = sweep(
        load_recipe_text(
            "workload: nosuch\ntrials: 2\ncells: [{name: a, mitigations: [none]}, {name: b, mitigations: [xnack]}]\n"
        ),
        output=tmp_path / "f",
        progress="none",
    )
    assert result.exit_code == ExitCode.INCOMPLETE
    code, _, err = run_cli("compare", result.run_dir)
    assert code == ExitCode.INCOMPLETE and "has no trial that ran" in err


@pytest.mark.slow
def test_runs_sharing_no_cell_are_incomplete(run_cli, runs, tmp_path):
    other = run(tmp_path, "o", probe(trials=1).replace("[none, xnack, tf32_off]", "[hsa_no_sdma]"))
    code, _, err = run_cli("compare", runs["a"], other)
    assert code == ExitCode.INCOMPLETE and "share no cell" in err


@pytest.mark.slow
def test_report_writes_tables_and_figures(run_cli, tmp_path):
    run_dir = tmp_path / "golden"
    shutil.copytree(DATA / "golden_run", run_dir)
    code, out, err = run_cli("report", run_dir)
    assert code == ExitCode.OK, err
    names = sorted(p.name for p in (run_dir / "report").iterdir())
    assert names == [
        "comparison.csv",
        "comparison.json",
        "failure_rates.png",
        "ratio_forest.png",
        "report.md",
        "step_distributions.png",
        "step_series.png",
        "trials.csv",
    ]
    assert len(out.splitlines()) == len(names)
    for png in (run_dir / "report").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = (run_dir / "report" / "comparison.csv").read_text().splitlines()
    assert csv[0].startswith("cell,mitigations,environment,n,n_ok")
    assert "![ratio_forest](ratio_forest.png)" in (run_dir / "report" / "report.md").read_text()


def _probe_without_steps(root):
    """The golden run as a probe without a step regex writes it: no step times, each trial's
    wall clock what its steps took."""
    for path in (root / "cells").glob("*/trial_*.json"):
        rec = json.loads(path.read_text())
        rec["wall_clock_s"] = sum(rec.get("step_times_ms") or [0.0]) / 1000 + 0.5
        rec["step_times_ms"] = []
        path.write_text(json.dumps(rec))
    return root


def _twice_as_slow(root):
    for path in (root / "cells").glob("*/trial_*.json"):
        rec = json.loads(path.read_text())
        rec["wall_clock_s"] *= 2
        path.write_text(json.dumps(rec))


def test_a_run_without_step_times_is_compared_on_its_wall_clock(run_cli, tmp_path):
    """`aorta compare` of a probe without steps said "no data" for every cell (and the gate
    never fired), while matrix.md and report.html compared the trials' wall clocks."""
    a = _probe_without_steps(shutil.copytree(DATA / "golden_run", tmp_path / "a"))
    write_matrix(a)
    md = (a / "matrix.md").read_text()
    assert "trial value = wall_clock_s" in md
    code, out, err = run_cli("compare", a, "--json")
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert doc["statistics"]["metric"] == "wall_clock_s"
    cells = {c["cell"]: c for c in doc["cells"]}
    assert cells["slow"]["difference"] == "slower", cells["slow"]
    (slow,) = [
        c for c in json.loads((a / "matrix.json").read_text())["cells"] if c["name"] == "slow"
    ]
    code, out, _ = run_cli("compare", a)
    assert slow["verdict"].startswith("slower") and slow["verdict"] in out
    # Two such runs: the gate reads the wall clocks too.
    b = _probe_without_steps(shutil.copytree(DATA / "golden_run", tmp_path / "b"))
    _twice_as_slow(b)
    code, _, err = run_cli("compare", a, b, "--fail-on-regression")
    assert code == ExitCode.GATE, err
    code, _, err = run_cli("report", a)
    assert code == ExitCode.OK, err
    assert "trial value = wall_clock_s" in (a / "report" / "report.md").read_text()


def test_the_two_run_page_of_probes_without_step_times_compares_wall_clocks(run_cli, tmp_path):
    """`aorta report A B --html` of two probes without steps said "no data" for every cell:
    the page took step_time_ms where the table and the gate took the matrix's metric."""
    a = _probe_without_steps(shutil.copytree(DATA / "golden_run", tmp_path / "a"))
    b = _probe_without_steps(shutil.copytree(DATA / "golden_run", tmp_path / "b"))
    _twice_as_slow(b)
    code, out, err = run_cli("report", a, b, "--html")
    assert code == ExitCode.OK, err
    page = Path(out.strip().splitlines()[-1]).read_text()
    assert "wall_clock_s" in page or "wall clock" in page
    assert "slower" in page and "no data" not in page
