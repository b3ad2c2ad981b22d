"""One process group, one name (#48): a hang's cell line in matrix.md said ``(default_pg)``
where the incident's own summary said ``(default_pg, ranks 0-3)`` for the same group, and
report.html's group table a third way, ``default_pg (0, 1, 2, 3)``.

The incident is a real one — the evidence a device fault left on two nodes
(tests/data/hang/node), analysed by ``aorta hang analyze`` — written into the golden run's
hung trials as a sweep writes it (the record's ``forensics``); every output then names its
group as the summary does (:func:`aorta.hang.model.describe_group`)."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from aorta.hang.model import HangReport
from aorta.report.matrix_files import write_matrix
from tests.conftest import DATA

GROUP = "default_pg, ranks 0-3"


def _plain(text: str) -> str:
    """Text as read: markup, markdown emphasis and code quotes away, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", text)).replace("**", "").replace("`", "")


@pytest.mark.slow  # three CLI runs over a copied run, report.html among them (~10 s)
def test_every_output_names_a_hangs_group_as_its_summary_does(tmp_path, run_cli):
    evidence = DATA / "hang" / "node"
    code, out, err = run_cli("hang", "analyze", evidence, "--json")
    assert code == ExitCode.OK, err
    report = HangReport.from_dict(json.loads(out))
    assert (report.process_group, report.group_ranks) == ("default_pg", (0, 1, 2, 3))
    assert report.group_label == GROUP and f"({GROUP})" in report.summary
    code, text, err = run_cli("hang", "analyze", evidence)
    assert code == ExitCode.OK, err
    assert f"({GROUP})" in text  # the summary line
    assert any(line.startswith(f"{GROUP}  ") for line in text.splitlines())  # the group table

    run = Path(shutil.copytree(DATA / "golden_run", tmp_path / "run"))
    hung = 0
    for path in sorted((run / "cells" / "flaky").glob("trial_*.json")):
        rec = json.loads(path.read_text())
        if rec["status"] == "timeout":
            rec.update(signature="hang", signature_tier=8, forensics=report.to_dict())
            path.write_text(json.dumps(rec))
            hung += 1
    assert hung
    write_matrix(run)
    doc = json.loads((run / "matrix.json").read_text())
    (flaky,) = [c for c in doc["cells"] if c["name"] == "flaky"]
    (finding,) = [f["text"] for f in doc["findings"] if f["text"].startswith("flaky: fails")]
    code, compared, _ = run_cli("compare", run)
    assert code == ExitCode.OK
    code, compared_json, _ = run_cli("compare", run, "--json")
    assert code == ExitCode.OK
    (row,) = [c for c in json.loads(compared_json)["cells"] if c["cell"] == "flaky"]
    code, _, err = run_cli("report", run, "--html")
    assert code == ExitCode.OK, err
    page = (run / "report" / "report.html").read_text()

    outputs = {
        "matrix.md": (run / "matrix.md").read_text(),
        "matrix.json's hang line": flaky["hangs"]["line"],
        "matrix.json's finding": finding,
        "aorta compare": compared,
        "aorta compare --json": row["hang_incident"],
        "report.html": _plain(page),
    }
    for name, said in outputs.items():
        assert f"({GROUP})" in said, name
        # The group's bare description, without its members, is how the cell line said it.
        assert "(default_pg)" not in said, name
    # report.html's table of diverging groups: the same phrase in its first column.
    assert f"<td>{GROUP}</td><td>device</td>" in page
