"""One finding, one source (issue 45): a run with a slow, a flaky and a hung cell reads the
same in every output — the end-of-run console summary, matrix.md, matrix.json, ``aorta
compare`` (text and JSON) and report.html: the same verdict, the same interval numbers at the
same level, the same top signature and the same hang culprit.

The run is the golden run (tests/data/golden_run) copied, with the evidence a real hang leaves
added to ``flaky``'s two hung trials (the incident :func:`aorta.hang.analyze` writes into
``forensics``) and signatures on its failed trials."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from aorta.matrix.load import load_run
from aorta.matrix.summary import summarize
from aorta.report.console import format_summary, summary_to_dict
from aorta.report.matrix_files import write_matrix
from aorta.run.sweep import SweepResult
from aorta.store.rundir import RunDir
from tests.conftest import DATA

INCIDENT = {
    "summary": "rank 2 never reached all_reduce #41",
    "kind": "missing",
    "culprit_ranks": [2],
    "culprit_hosts": ["gpu-r3"],
    "op": "all_reduce",
    "seq": 41,
    "process_group": "default_pg, ranks 0-3",
    "frames": [{"rank": 2, "where": "train.py:88 in step", "source": "stacks"}],
}
CULPRIT = "rank 2 (node gpu-r3) never reached all_reduce #41"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = Path(shutil.copytree(DATA / "golden_run", tmp_path_factory.mktemp("truth") / "run"))
    for trial in range(7):
        path = root / "cells" / "flaky" / f"trial_{trial:04d}.json"
        rec = json.loads(path.read_text())
        if rec["status"] == "timeout":
            rec.update(signature="hang", signature_tier=8, forensics=INCIDENT)
        else:
            rec.update(signature="nan_inf_loss", signature_tier=4)
        path.write_text(json.dumps(rec))
    write_matrix(root)
    return root


def _md_row(text: str, cell: str) -> dict[str, str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| cell | mitigations"))
    head = [h.strip() for h in lines[start].strip("|").split("|")]
    for line in lines[start + 2 :]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == cell:
            return dict(zip(head, cells, strict=True))
    raise AssertionError(f"no row for {cell}")


def _plain(text: str) -> str:
    """Text as read: markup, markdown emphasis and code quotes away, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", text)).replace("**", "").replace("`", "")


def test_every_output_says_the_same_about_each_cell(run, run_cli):
    doc = json.loads((run / "matrix.json").read_text())
    cells = {c["name"]: c for c in doc["cells"]}
    md = (run / "matrix.md").read_text()
    slow, flaky = cells["slow"], cells["flaky"]

    # The interval the table shows is the one the verdict was judged on, at one level.
    level = doc["statistics"]["ci_level"]
    pct = f"{level * 100:.4g}%"
    row = _md_row(md, "slow")
    ratio_col = next(k for k in row if k.startswith("ratio ["))
    assert ratio_col == f"ratio [{pct} CI]"
    lo, hi = slow["ratio_ci"]
    assert row[ratio_col] == f"{slow['ratio']:.3g} [{lo:.3g}, {hi:.3g}]"
    assert f"{pct} CI [{(lo - 1) * 100:+.0f}, {(hi - 1) * 100:+.0f}]" in slow["verdict"]
    assert row["verdict"] == slow["verdict"]
    # The confound reads the same median ratio and says what it means.
    assert row["confound"] == f"above the 1.15 confound line, ×{slow['ratio']:.3g}"

    # The flaky cell: its top signature and its culprit, in the json and the md.
    assert _md_row(md, "flaky")["top failure"] == flaky["top_failure"]
    assert flaky["top_failure"].startswith("nan_inf_loss")
    assert CULPRIT in flaky["hangs"]["line"]
    assert CULPRIT in md

    findings = [f["text"] for f in doc["findings"]]
    hang_finding = next(t for t in findings if t.startswith("flaky: fails"))
    slow_finding = next(t for t in findings if t.startswith("slow:"))
    assert CULPRIT in hang_finding and slow["verdict"] in slow_finding

    # aorta compare RUN: the same findings, the culprit included (it used to drop it).
    code, out, _ = run_cli("compare", run)
    assert code == 0
    assert CULPRIT in out and slow["verdict"] in out and hang_finding in out
    code, out, _ = run_cli("compare", run, "--json")
    compared = json.loads(out)
    assert [f["text"] for f in compared["findings"]] == findings
    by_cell = {c["cell"]: c for c in compared["cells"]}
    assert by_cell["slow"]["ratio_ci_low"] == pytest.approx(lo)
    assert by_cell["slow"]["ratio_ci_high"] == pytest.approx(hi)
    assert CULPRIT in by_cell["flaky"]["hang_incident"]

    # The end-of-run summary on the console.
    ds = load_run(run, source="records")
    result = SweepResult(
        run, "complete", "baseline", summarize(ds), list(RunDir(run).trial_records())
    )
    console = format_summary(result)
    assert CULPRIT in console and slow["verdict"] in console
    assert "nan_inf_loss" in console

    # report.html: the same verdict, interval, culprit and signature.
    code, _, err = run_cli("report", run, "--html")
    assert code == 0, err
    page = _plain((run / "report" / "report.html").read_text())
    assert slow["verdict"] in page and CULPRIT in page and "nan_inf_loss" in page
    assert f"{slow['ratio']:.3g} [{lo:.3g}, {hi:.3g}]" in page and f"ratio [{pct} CI]" in page
    assert row["confound"] in page and "no effect" not in page


def test_the_two_run_page_names_the_culprit_compare_does(run, run_cli, tmp_path):
    b = Path(shutil.copytree(run, tmp_path / "b"))
    code, out, _ = run_cli("compare", run, b, "--json")
    assert code == 0
    (flaky,) = [c for c in json.loads(out)["cells"] if c["cell"] == "flaky"]
    assert CULPRIT in flaky["hang_incident"]
    code, _, err = run_cli("report", run, b, "--html")
    assert code == 0, err
    (page,) = (b / "report").glob("compare_*.html")
    assert flaky["hang_incident"] in _plain(page.read_text())


def test_an_undecided_verdict_reads_the_same_everywhere(tmp_path, run_cli):
    """A CI that spans the whole band: matrix.md, compare and the end-of-run summary said
    "spans the whole band" while report.html, the two-run page and ``sweep run --json`` said
    "crosses a band edge" (they worded the verdict without the band's threshold)."""
    root = Path(shutil.copytree(DATA / "golden_run", tmp_path / "run"))
    for trial, scale in enumerate([0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 0.7, 1.8]):
        path = root / "cells" / "same" / f"trial_{trial:04d}.json"
        rec = json.loads(path.read_text())
        rec["step_times_ms"] = [t * scale for t in rec["step_times_ms"]]
        path.write_text(json.dumps(rec))
    write_matrix(root)
    (same,) = [
        c for c in json.loads((root / "matrix.json").read_text())["cells"] if c["name"] == "same"
    ]
    assert "spans the whole band" in same["verdict"], same["verdict"]
    assert _md_row((root / "matrix.md").read_text(), "same")["verdict"] == same["verdict"]

    code, _, err = run_cli("report", root, "--html")
    assert code == 0, err
    page = _plain((root / "report" / "report.html").read_text())
    # The findings and the matrix's verdict cell: both the wording matrix.md has.
    assert page.count(same["verdict"]) >= 2 and "crosses a band edge" not in page

    ds = load_run(root, source="records")
    result = SweepResult(
        root, "complete", "baseline", summarize(ds), list(RunDir(root).trial_records())
    )
    (summary,) = [c for c in summary_to_dict(result)["cells"] if c["cell"] == "same"]
    assert summary["verdict"] == same["verdict"]

    # Two runs: B's `same` against A's golden one; the page words it as compare does.
    a = Path(shutil.copytree(DATA / "golden_run", tmp_path / "a"))
    code, text, _ = run_cli("compare", a, root)
    assert code == 0
    verdict = next(line for line in text.splitlines() if line.startswith("same ")).split("  ")[-1]
    assert "undecided: the" in verdict, verdict
    code, _, err = run_cli("report", a, root, "--html")
    assert code == 0, err
    (page,) = (root / "report").glob("compare_*.html")
    text = _plain(page.read_text())
    assert verdict.strip() in text and "crosses a band edge" not in text
