"""matrix.md and matrix.json of a fixed run directory (tests/data/golden_run).

The run directory is made by tests/data/make_golden_run.py. After an intended change of the
rendering, rewrite the golden files with ``UPDATE_GOLDEN=1 pytest tests/test_matrix_golden.py``
and review the diff.
"""

from __future__ import annotations

import json
import os

import pytest

from aorta.matrix.dataset import load_run, run_attrs
from aorta.report.matrix import matrix_json, matrix_markdown, summarize
from aorta.store.rundir import RunDir

from .conftest import DATA

RUN = DATA / "golden_run"
GOLDEN_MD = DATA / "golden_matrix.md"


def render():
    rd = RunDir.open(RUN)
    cells = sorted(
        (json.loads(p.read_text()) for p in (RUN / "cells").glob("*/cell.json")),
        key=lambda c: c["index"],
    )
    attrs = run_attrs(RUN)
    rows = summarize(
        cells, rd.trial_records(), baseline=attrs["baseline"], threshold=attrs["threshold"]
    )
    header = {
        "ticket": attrs["ticket"],
        "workload": attrs["workload"],
        "run_dir": "tests/data/golden_run",
        "baseline": attrs["baseline"],
        "threshold": attrs["threshold"],
        "status": "complete",
    }
    return rows, header


def test_golden_matrix_md():
    rows, header = render()
    text = matrix_markdown(rows, header=header)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN_MD.write_text(text)
    assert text == GOLDEN_MD.read_text()


def test_golden_run_verdicts():
    rows, header = render()
    by = {r.name: r for r in rows}
    assert {n: r.verdict for n, r in by.items()} == {
        "baseline": "baseline",
        "slow": "slower",
        "same": "no change",
        "flaky": "inconclusive",
        "few": "inconclusive",
    }
    # The failure finding stands although flaky's timing is inconclusive.
    assert by["flaky"].failures_vs_baseline == "more"
    assert by["few"].trials_needed == 5 and by["flaky"].trials_needed == 5
    # Upstream's confound tag is still there beside the new columns.
    assert by["slow"].confound.startswith("speed (+")
    doc = matrix_json(rows, header=header)
    assert doc["statistics"]["seed"] == 0 and doc["statistics"]["resamples"] == 10_000
    assert doc["statistics"]["family_size"] == 4
    slow = next(c for c in doc["cells"] if c["name"] == "slow")
    assert slow["ratio_ci"][0] > 1.15 and slow["p_adj"] < 0.05
    json.dumps(doc, allow_nan=False)  # no NaN leaks into matrix.json


def test_matrix_agrees_with_compare():
    rows, _ = render()
    df = load_run(RUN).aorta.compare()
    for r in rows:
        assert r.verdict == df.loc[r.name, "verdict"]
        if r.ratio is not None:
            assert r.ratio == pytest.approx(df.loc[r.name, "ratio"], rel=0, abs=0)
