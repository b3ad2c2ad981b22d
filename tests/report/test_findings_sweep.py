"""Failures and hangs first, on every page, from a real sweep: the probe recipe and job script of
docs/triage.md (the baseline fails 4/8 with an NCCL error line, the expandable-segments cell
0/8, the scratch-reclaim cell hangs in every trial and is killed by ``hang_after``), run by the
CLI in-process with real processes and files; then ``aorta compare`` (with ``--signature``),
``aorta report`` and a 1-trial screen."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from aorta.errors import ExitCode

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs/examples/triage-probe.yaml"
JOB = ROOT / "docs/examples/triage-probe-job.sh"
BASE, FIX = "none-none", "pytorch_alloc_expandable_segments-none"
HANG = "hsa_no_scratch_reclaim-none"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One real sweep of the triage scenario: (run dir, the CLI's summary)."""
    import contextlib
    import io

    from aorta.cli import main

    out = tmp_path_factory.mktemp("triage")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(
            ["sweep", "run", "--recipe", str(RECIPE), "--output", str(out), "--", "bash", str(JOB)]
        )
    assert code == ExitCode.OK, buf.getvalue()
    (run_dir,) = (out / "TRIAGE-NCCL" / "command").iterdir()
    return run_dir, buf.getvalue()


def test_the_cli_summary_tells_the_hang_and_the_fix_first(swept):
    run_dir, summary = swept
    lines = summary.splitlines()
    at = lines.index("Findings (failures and hangs first):")
    assert lines[at + 1].startswith(f"  {HANG}: hangs in 8/8 trials, baseline 0/8")
    assert lines[at + 2].startswith(f"  {FIX}: fails in 0/8 trials, baseline 4/8")
    assert f"aorta sweep extend {run_dir} --trials " in lines[at + 2]
    assert summary.index("Findings") < summary.index("Failing trials")


def test_matrix_md_findings_come_first_and_numbers_are_honest(swept):
    run_dir, _ = swept
    md = (run_dir / "matrix.md").read_text()
    assert md.index("## Findings") < md.index("## Cells") < md.index("| cell |")
    findings = md.split("## Findings\n\n", 1)[1].splitlines()
    assert findings[0].startswith(f"- `{HANG}`: **hangs in 8/8 trials, baseline 0/8**")
    assert findings[1].startswith(
        f"- `{FIX}`: fails in 0/8 trials, baseline 4/8 (baseline: `nccl_error` 4)"
    )
    assert "not yet significant (Boschloo p_adj 0.056)" in findings[1]
    assert findings[2].startswith(
        f"- `{HANG}`: no step time — none of its 8 trials ended ok (8 hang)"
    )
    doc = json.loads((run_dir / "matrix.json").read_text())
    cells = {c["name"]: c for c in doc["cells"]}
    hang = cells[HANG]
    assert hang["mean_step_ms"] is None and hang["mean_step_time_ms"] is None
    assert hang["step_source"] == "no_ok_trial" and hang["confound"] == "n/a"
    row = next(line for line in md.splitlines() if line.startswith(f"| {HANG} |"))
    assert "— (no ok trial)" in row and "| n/a |" in row
    assert [f["kind"] for f in doc["findings"]][:2] == ["failure_kind", "failures"]
    # The trials behind it: each failed trial's signature in trials.csv comes with aorta report.


def test_compare_text_has_the_findings_and_failure_columns(swept, run_cli):
    run_dir, _ = swept
    code, out, _ = run_cli("compare", run_dir)
    assert code == ExitCode.OK
    assert out.index("Findings") < out.index("n_ok/n")
    assert f"  {HANG}: hangs in 8/8 trials, baseline 0/8" in out
    head = next(line for line in out.splitlines() if line.startswith("cell "))
    assert re.search(r"failure rate \[CI\]\s+failures\s+failure p_adj\s+median", head)
    row = next(line for line in out.splitlines() if line.startswith(f"{HANG} "))
    assert "100% (8/8)" in row and "8 (8 hang)" in row


def test_compare_one_signature_from_the_cli(swept, run_cli):
    run_dir, _ = swept
    code, out, _ = run_cli("compare", run_dir, "--signature", "nccl_error", "--json")
    assert code == ExitCode.OK
    doc = json.loads(out)
    cells = {c["cell"]: c for c in doc["cells"]}
    assert (cells[BASE]["n_failed"], cells[FIX]["n_failed"], cells[HANG]["n_failed"]) == (4, 0, 0)
    assert doc["statistics"]["signature"] == "nccl_error"
    # The failure findings are about the signature; timing follows as always.
    kinds = [f["kind"] for f in doc["findings"]]
    assert kinds[0] == "signature" and not {"failures", "failure_kind"} & set(kinds)
    assert doc["findings"][0]["cell"] == FIX and doc["findings"][0]["baseline_count"] == 4
    code, out, _ = run_cli("compare", run_dir, "--signature", "nccl_error")
    assert "failure event: signature nccl_error" in out
    assert f"{FIX}: nccl_error in 0/8 trials, baseline 4/8" in out


def test_report_md_and_trials_csv(swept, run_cli):
    run_dir, _ = swept
    code, _, err = run_cli("report", run_dir)
    assert code == ExitCode.OK, err
    report = (run_dir / "report" / "report.md").read_text()
    assert report.index("## Findings") < report.index("## Cells")
    first = report.split("## Findings\n\n", 1)[1].splitlines()[0]
    assert first.startswith(f"- `{HANG}`: **hangs in 8/8 trials, baseline 0/8**")
    assert "| failures | failure p_adj |" in report
    with (run_dir / "report" / "trials.csv").open() as fh:
        trials = list(csv.DictReader(fh))
    by = {(t["cell"], t["trial"]): t for t in trials}
    assert by[(BASE, "1")]["signature"] == "nccl_error"
    assert by[(HANG, "0")]["failure_kind"] == "hang" and by[(HANG, "0")]["signature"] == "hang"
    assert by[(FIX, "0")]["signature"] == ""


def test_the_docs_show_this_job_script_and_recipe():
    triage = (ROOT / "docs/triage.md").read_text()
    assert JOB.read_text().strip() in triage
    assert RECIPE.read_text().strip() in triage


def test_a_one_trial_sweep_is_a_screen(tmp_path, run_cli):
    """Upstream's probe-flag-sweep shape: one trial per cell, ranked, no verdict per cell."""
    recipe = tmp_path / "screen.yaml"
    recipe.write_text(
        "mode: probe\nticket: SCREEN\ntrials: 1\n"
        "step_time_regex: 'took (?P<ms>[0-9.]+) ms'\n"
        "mitigation_axis: [none, xnack, hsa_no_sdma, tf32_off, hsa_disable_cache]\n"
    )
    script = 'for i in 1 2 3; do echo "took $((10 + ${#HSA_XNACK} * 5 + ${#HSA_ENABLE_SDMA} * 2)) ms"; done'
    code, out, _ = run_cli(
        "sweep", "run", "--recipe", recipe, "--output", tmp_path / "out", "--", "bash", "-c", script
    )
    assert code == ExitCode.OK, out
    assert "no verdicts — verdicts need ≥ 5 trials per cell" in out and "undecided" not in out
    (run_dir,) = (tmp_path / "out" / "SCREEN" / "command").iterdir()
    md = (run_dir / "matrix.md").read_text()
    findings = md.split("## Findings\n\n", 1)[1].split("## Cells")[0]
    assert "undecided" not in findings and "Cells by effect size" in findings
    ranked = [line.split("`")[1] for line in findings.splitlines() if line.startswith("  - `")]
    assert ranked[0] == "xnack-none"  # +50%, the largest effect first
