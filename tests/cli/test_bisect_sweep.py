"""`aorta bisect` for real: a probe whose step time doubles from one value of a variable on,
each step an adaptive sweep; the first bad value is found, the steps are run directories with
their records, matrix.md and bisect.json, and the JSON has the promised shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aorta.cli import main
from aorta.errors import ExitCode

pytestmark = pytest.mark.slow

PROBE = (
    "import os, time\n"
    "d = 0.04 if int(os.environ['PROBE_BUILD'][1:]) >= 3 else 0.015\n"
    "for _ in range(3):\n"
    "    t = time.perf_counter(); time.sleep(d)\n"
    "    print(f'step time: {(time.perf_counter() - t) * 1000:.3f} ms', flush=True)\n"
)
RECIPE = """
ticket: BISECT
step_time_regex: 'step time: ([0-9.]+) ms'
confound: {threshold: 1.3}
adaptive: {min_trials: 5, max_trials: 20}
cells: [{name: base, mitigations: [none]}]
bisect: {variable: PROBE_BUILD, values: [b0, b1, b2, b3, b4, b5]}
"""


def test_bisect_finds_the_first_bad_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "bisect.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "out"
    code = main(
        ["bisect", "--recipe", str(recipe), "-o", str(out), "--json", "--", "python3", "-c", PROBE]
    )
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == ExitCode.OK, doc
    assert (doc["first_bad"], doc["last_good"]) == ("b3", "b2")
    assert [(s["value"], s["verdict"]) for s in doc["steps"]] == [("b2", "good"), ("b3", "bad")]
    bad = doc["steps"][1]
    assert bad["ratio"] > 1.5 and bad["ci"][0] > 1.3 and bad["failures"] == 0
    assert set(doc["steps"][0]) >= {"value", "verdict", "ratio", "ci", "failures", "trials"}
    # Each step is a run: its records, matrix.md and, in its manifest, which step it was.
    assert doc["trials"] == sum(
        len(list((Path(s["run_dir"]) / "cells").glob("*/trial_*.json"))) for s in doc["steps"]
    )
    for i, step in enumerate(doc["steps"], 1):
        run = Path(step["run_dir"])
        assert (run / "matrix.md").is_file()
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["bisect"] == {
            "variable": "PROBE_BUILD",
            "step": i,
            "value": step["value"],
            "verdict": step["verdict"],
        }
    record = json.loads(Path(doc["record"]).read_text())
    assert record["first_bad"] == "b3" and len(record["steps"]) == 2
    assert "step: PROBE_BUILD=b3: bad" in captured.err


def test_bisect_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("cells: [{name: base, mitigations: [none]}]\n")
    assert main(["bisect", "--recipe", str(recipe), "--", "true"]) == ExitCode.USAGE
    assert "no bisect" in capsys.readouterr().err
    assert main(["bisect", "--", "true"]) == ExitCode.USAGE
