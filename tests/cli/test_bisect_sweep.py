"""`aorta bisect` for real: a probe whose step time doubles from one value of a variable on.
The endpoints are measured once (step 0), each step runs the midpoint alone against them; the
first bad value is found, the steps are run directories with their records, matrix.md and
bisect.json, and the JSON has the promised shape. `--remeasure` runs both endpoints beside
every midpoint; a last value no worse than the first is said to leave nothing to bisect."""

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
adaptive: {min_trials: 5, max_trials: 30}
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
    # The endpoints were measured once, in their own run (step 0); each step ran the midpoint
    # alone, compared with them: v0 for the verdict, the last value beside it.
    ends = doc["endpoints"]
    assert (ends["value"], ends["verdict"]) == ("b5", "bad") and ends["ratio"] > 1.5
    assert doc["steps"][0]["vs_bad"]["difference"] == "faster"
    # b3 runs as slowly as b5 (the step stops once b3 is bad, perhaps before that settles).
    assert 0.75 < doc["steps"][1]["vs_bad"]["ratio"] < 1.33
    runs = [Path(ends["run_dir"]), *(Path(s["run_dir"]) for s in doc["steps"])]
    assert [sorted(p.name for p in (r / "cells").iterdir()) for r in runs] == [
        ["bad05-b5", "good00-b0"],
        ["good00-b0", "try02-b2"],  # each step's 2 trials of b0: the drift sentinel's
        ["good00-b0", "try03-b3"],
    ]
    assert [s["drift"] for s in doc["steps"]] == [None, None]
    # Each step is a run: its records, matrix.md and, in its manifest, which step it was.
    assert doc["trials"] == sum(len(list((r / "cells").glob("*/trial_*.json"))) for r in runs)
    for i, (run, step) in enumerate(zip(runs, [ends, *doc["steps"]], strict=True)):
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
    assert record["endpoints"]["verdict"] == "bad"
    assert "endpoints: PROBE_BUILD=b5 against b0: bad" in captured.err
    assert "step: PROBE_BUILD=b3: bad" in captured.err


def test_remeasure_runs_the_endpoints_beside_every_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "bisect.yaml"
    recipe.write_text(RECIPE.replace("[b0, b1, b2, b3, b4, b5]", "[b0, b3, b5]"))
    args = ["bisect", "--recipe", str(recipe), "-o", str(tmp_path), "--json", "--remeasure"]
    assert main([*args, "--", "python3", "-c", PROBE]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    (step,) = doc["steps"]
    assert (doc["first_bad"], doc["endpoints"], doc["remeasure"]) == ("b3", None, True)
    assert step["verdict"] == "bad" and 0.75 < step["vs_bad"]["ratio"] < 1.33
    cells = sorted(p.name for p in (Path(step["run_dir"]) / "cells").iterdir())
    assert cells == ["bad02-b5", "good00-b0", "try01-b3"]


def test_nothing_to_bisect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Every value runs at the same speed: the last is not worse than the first, and bisect
    # says so instead of naming it the first bad value.
    recipe = tmp_path / "bisect.yaml"
    recipe.write_text(RECIPE.replace("[b0, b1, b2, b3, b4, b5]", "[b0, b1, b2]"))
    args = ["bisect", "--recipe", str(recipe), "-o", str(tmp_path)]
    assert main([*args, "--", "python3", "-c", PROBE]) == ExitCode.INCOMPLETE
    out = capsys.readouterr().out
    assert "nothing to bisect: PROBE_BUILD=b2 is not measurably worse than b0" in out


def test_bisect_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("cells: [{name: base, mitigations: [none]}]\n")
    assert main(["bisect", "--recipe", str(recipe), "--", "true"]) == ExitCode.USAGE
    assert "no bisect" in capsys.readouterr().err
    assert main(["bisect", "--", "true"]) == ExitCode.USAGE


# The machine slows down 2.7× after step 0 (the file the probe reads says by how much): every
# value, b0 included, runs slower from then on.
DRIFTING = (
    "import os, time, pathlib\n"
    "f = pathlib.Path(os.environ['PROBE_SLOWDOWN'])\n"
    "k = float(f.read_text()) if f.exists() else 1.0\n"
    "d = k * (0.04 if int(os.environ['PROBE_BUILD'][1:]) >= 3 else 0.015)\n"
    "for _ in range(3):\n"
    "    t = time.perf_counter(); time.sleep(d)\n"
    "    print(f'step time: {(time.perf_counter() - t) * 1000:.3f} ms', flush=True)\n"
)


def test_the_drift_sentinel_remeasures_the_endpoints_of_a_step_on_a_drifted_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b1 runs as fast as b0, but the machine got 2.7× slower after the endpoints were
    measured: against b0's pooled trials b1 is never found good (without the sentinel the
    search ends undecided, no first bad value). The step's 2 fresh b0 trials are beyond
    every pooled one and beyond the band (×1.3), so the step runs b0 and b5 again beside b1,
    finds b1 good and says why."""
    from aorta.recipe import load_recipe
    from aorta.run.bisect import Step, bisect
    from aorta.run.options import RunOptions

    slowdown = tmp_path / "slowdown"
    monkeypatch.setenv("PROBE_SLOWDOWN", str(slowdown))
    path = tmp_path / "bisect.yaml"
    path.write_text(RECIPE.replace("[b0, b1, b2, b3, b4, b5]", "[b0, b1, b5]"))
    recipe = load_recipe(path, command=["python3", "-c", DRIFTING])

    def drift_after_step_0(step: Step) -> None:
        if step.endpoints:
            slowdown.write_text("2.7")

    options = RunOptions(output=tmp_path / "out", progress="none")
    result = bisect(recipe, options=options, on_step=drift_after_step_0)
    (step,) = result.steps
    assert (result.first_bad, step.verdict) == ("b5", "good")
    assert step.drift.startswith("b0 drifted: its 2 fresh trials ×") and step.drift in step.reason
    assert "endpoints re-measured beside it" in step.reason
    assert result.to_json()["steps"][0]["drift"] == step.drift
    cells = sorted(p.name for p in (Path(step.run_dir) / "cells").iterdir())
    assert cells == ["bad02-b5", "good00-b0", "try01-b1"]


# The machine, not the build: once the file PROBE_FAILING names exists, every trial fails.
FAILING = (
    "import os, sys, time, pathlib\n"
    "if pathlib.Path(os.environ['PROBE_FAILING']).exists():\n"
    "    sys.exit('the machine fails every trial now')\n"
    "d = 0.04 if int(os.environ['PROBE_BUILD'][1:]) >= 3 else 0.015\n"
    "for _ in range(3):\n"
    "    t = time.perf_counter(); time.sleep(d)\n"
    "    print(f'step time: {(time.perf_counter() - t) * 1000:.3f} ms', flush=True)\n"
)


def test_the_drift_sentinel_watches_failures_as_well_as_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b1 is as good as b0, but the machine started failing every trial after the endpoints
    were measured. Timing alone saw nothing (a failed trial has no step time, so no fresh
    trial to compare) and b1, failing 5 of 5 against b0's pooled 0 of 5, was called bad: a
    wrong first bad value. The sentinel's 2 fresh b0 trials fail where none of the pool did
    (Boschloo p = 0.030), so the step runs b0 and b5 again beside b1 — all failing, nothing
    tells them apart — and never calls b1 bad."""
    from aorta.recipe import load_recipe
    from aorta.run.bisect import Step, bisect
    from aorta.run.options import RunOptions

    failing = tmp_path / "failing"
    monkeypatch.setenv("PROBE_FAILING", str(failing))
    path = tmp_path / "bisect.yaml"
    path.write_text(RECIPE.replace("[b0, b1, b2, b3, b4, b5]", "[b0, b1, b5]"))
    recipe = load_recipe(path, command=["python3", "-c", FAILING])

    def fail_after_step_0(step: Step) -> None:
        if step.endpoints:
            failing.touch()

    options = RunOptions(output=tmp_path / "out", progress="none")
    result = bisect(recipe, options=options, on_step=fail_after_step_0)
    (step,) = result.steps
    assert step.verdict != "bad" and result.first_bad != "b1"
    assert step.drift == (
        "b0 drifted: 2 of its 2 fresh trials failed, 0 of its 5 pooled ones (p = 0.03 with no "
        "drift)"
    )
    assert f"{step.drift}: endpoints re-measured beside it" in step.reason
    cells = sorted(p.name for p in (Path(step.run_dir) / "cells").iterdir())
    assert cells == ["bad02-b5", "good00-b0", "try01-b1"]
