"""matrix.md and matrix.json of a fixed run directory (tests/data/golden_run).

The run directory is made by tests/data/make_golden_run.py. After an intended change of the
rendering, rewrite the golden files with ``UPDATE_GOLDEN=1 pytest tests/test_matrix_golden.py``
and review the diff.
"""

from __future__ import annotations

import json
import os

import pytest

from aorta.matrix.load import load_run
from aorta.matrix.summary import summarize
from aorta.report.matrix_files import matrix_header, matrix_json, matrix_markdown
from tests.conftest import DATA

RUN = DATA / "golden_run"
GOLDEN_MD = DATA / "golden_matrix.md"


def render():
    ds = load_run(RUN, source="records")
    summary = summarize(ds)
    header = matrix_header(ds, run_dir="tests/data/golden_run", status="complete")
    return ds, summary, header


def test_golden_matrix_md():
    _, summary, header = render()
    text = matrix_markdown(summary, header=header)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN_MD.write_text(text)
    assert text == GOLDEN_MD.read_text()


def test_golden_run_verdicts():
    ds, summary, header = render()
    answers = summary[["difference", "band"]].apply(tuple, axis=1).to_dict()
    assert answers == {
        "baseline": ("baseline", "baseline"),
        "slow": ("slower", "beyond band"),
        "same": ("no difference detected", "within band"),
        "flaky": ("no difference detected", "undecided"),
        "few": ("no difference detected", "undecided"),
    }
    # The failure finding stands although flaky's timing cannot tell; its hangs count.
    assert summary.loc["flaky", "failures_vs_baseline"] == "more"
    assert (summary.loc["flaky", "n_failed_workload"], summary.loc["flaky", "n_failed_hang"]) == (
        5,
        2,
    )
    assert summary.loc["few", "trials_needed"] == 5 and summary.loc["flaky", "trials_needed"] == 5
    # Upstream's confound tag is still there beside the new columns.
    assert summary.loc["slow", "confound"].startswith("speed (+")
    doc = matrix_json(summary, ds, header=header)
    assert doc["statistics"]["seed"] == 0 and doc["statistics"]["resamples"] == 10_000
    assert doc["statistics"]["family_size"] == 4
    slow = next(c for c in doc["cells"] if c["name"] == "slow")
    assert slow["ratio_ci"][0] > 1.15 and slow["p_adj"] < 0.05
    assert slow["statuses"] == {"ok": 8} and len(slow["trials"]) == 8
    # The verdict shows the CI the band is judged on (Bonferroni over the 2 cells with a CI).
    assert slow["verdict"] == "slower +29%, 97.5% CI [+26, +32] — beyond band"
    assert slow["band_ci"][0] > 1.15
    flaky = next(c for c in doc["cells"] if c["name"] == "flaky")
    assert flaky["failure_kinds"] == {"workload": 5, "hang": 2, "crash": 0}
    json.dumps(doc, allow_nan=False)  # no NaN leaks into matrix.json


def test_matrix_agrees_with_compare():
    _, summary, _ = render()
    df = load_run(RUN).aorta.compare()
    for column in ("difference", "band"):
        assert summary[column].tolist() == df[column].tolist()
    assert summary["ratio"].tolist() == pytest.approx(
        df["ratio"].tolist(), rel=0, abs=0, nan_ok=True
    )
