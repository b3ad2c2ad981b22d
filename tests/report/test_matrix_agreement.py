"""matrix.md and matrix.json say the same thing: every field both show, cell by cell, on the
golden run and on the triage scenario (a baseline failing 4/8, a fixed cell, an all-hung cell)."""

from __future__ import annotations

import json

import pytest

from aorta.matrix.load import load_run
from aorta.matrix.summary import summarize
from aorta.report.comparison import ms_text, p_text, percent_text
from aorta.report.matrix_files import (
    failure_signatures,
    matrix_header,
    matrix_json,
    matrix_markdown,
)
from tests.conftest import DATA
from tests.triage_records import triage_dataset


def _md_rows(text: str) -> list[dict[str, str]]:
    """The cells table of a matrix.md as dicts keyed by column header."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| cell | mitigations"))
    head = [h.strip() for h in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True)))
    return rows


def _check(md: dict[str, str], js: dict) -> None:
    """Each md column against the json field(s) it shows."""
    ran = js["n_ran"]
    assert md["cell"] == js["name"]
    assert md["mitigations"] == "+".join(js["mitigations"])
    assert md["env"] == js["environment"]
    assert md["trials"] == f"{ran + js['errors']}/{js['n_trials']}"
    if ran:
        assert (
            md["failure rate"]
            .strip("*")
            .startswith(f"{percent_text(js['failure_rate'])} ({js['failures']}/{ran})")
        )
    else:
        assert md["failure rate"] == "—" and js["failure_rate"] is None
    assert md["failures"].split()[0] == str(js["failures"])
    for kind, n in js["failure_kinds"].items():
        assert (f"{n} {kind}" in md["failures"]) == bool(n)
    assert md["errors"] == str(js["errors"])
    mean = ms_text(js["mean_step_ms"])
    if js["step_source"] == "no_ok_trial":
        assert md["mean step (ms)"] == "— (no ok trial)" and js["mean_step_ms"] is None
    else:
        assert md["mean step (ms)"] == mean
    assert md["step source"] == js["step_source"]
    # What upstream's tag means, never blank, never "no effect" (issue 45).
    assert md["confound"] == js["confound_text"] and md["confound"]
    assert "no effect" not in md["confound"]
    assert md["p_adj"] == p_text(js["p_adj"])
    assert md["verdict"].split("; **stalls**")[0] == js["verdict"]
    if "top failure" in md:
        assert md["top failure"] == (js["top_failure"] or "—")
    (ratio,) = [v for k, v in md.items() if k.startswith("ratio [")]
    if js["ratio"] is None or js["difference"] == "baseline":
        assert ratio in ("—", "1")
    else:
        assert ratio.startswith(f"{js['ratio']:.3g}")


def _both(ds, run_dir: str):
    summary = summarize(ds, resamples=500)
    header = matrix_header(ds, run_dir=run_dir, status="complete")
    sigs = failure_signatures(ds)
    md = matrix_markdown(summary, header=header, signatures=sigs)
    doc = matrix_json(summary, ds, header=header, signatures=sigs)
    json.dumps(doc, allow_nan=False)
    return md, doc


@pytest.mark.parametrize("which", ["golden", "triage"])
def test_matrix_md_and_json_agree_on_every_shared_field(which):
    golden = which == "golden"
    ds = load_run(DATA / "golden_run", source="records") if golden else triage_dataset()
    md, doc = _both(ds, f"runs/{which}")
    rows = _md_rows(md)
    cells = doc["cells"]
    assert [r["cell"] for r in rows] == [c["name"] for c in cells]
    for row, cell in zip(rows, cells, strict=True):
        _check(row, cell)
    # The findings are the same list in both, in the same order.
    found = md.split("## Findings\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(found) == len(doc["findings"])
    for line, f in zip(found, doc["findings"], strict=True):
        assert line.replace("`", "").replace("*", "") == "- " + f["text"]
