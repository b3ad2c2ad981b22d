"""schedule: adaptive end to end: a real CPU sweep (the ``command`` workload, step times from
its output) stops its settled cells early, resumes after kill -9 to the same decisions, and
``load_run`` + ``compare(sequential=True)`` says what matrix.json says."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import aorta
from aorta.errors import ExitCode

AORTA = str(Path(sys.executable).parent / "aorta")

# Each cell's step time and failures come from its environment; trial values are seeded by
# AORTA_SEED (per cell and trial), so every run of the recipe sees the same trials.
STEPS = """\
import os, random, sys
cell, trial = os.environ["AORTA_CELL"], int(os.environ["AORTA_TRIAL"])
if f"{cell}/{trial}" == os.environ.get("KILL_AT"):
    os.kill(os.getppid(), 9)
rng = random.Random(int(os.environ["AORTA_SEED"]))
level = 10.0 * float(os.environ.get("FACTOR", "1")) * (1 + rng.gauss(0, 0.01))
for s in range(6):
    print(f"step {level * (1 + rng.gauss(0, 0.005)):.4f} ms")
if os.environ.get("FLAKY") and trial % 2:
    sys.exit(3)
"""
RECIPE = """
ticket: ADAPT
schedule: adaptive
adaptive: {min_trials: 5, max_trials: 10}
step_time_regex: 'step ([0-9.]+) ms'
cells:
  - {name: base, mitigations: [none]}
  - {name: same, mitigations: [none], extra_env: {FACTOR: '1.0'}}
  - {name: slow, mitigations: [none], extra_env: {FACTOR: '1.3'}}
  - {name: flaky, mitigations: [none], extra_env: {FLAKY: '1'}}
"""


def _sweep(root: Path, *args: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [AORTA, "sweep", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def _run(root: Path, out: str, env: dict[str, str] | None = None):
    recipe = root / "r.yaml"
    recipe.write_text(RECIPE)
    (root / "steps.py").write_text(STEPS)
    proc = _sweep(
        root,
        "run",
        "--recipe",
        str(recipe),
        "-o",
        str(root / out),
        "--",
        sys.executable,
        str(root / "steps.py"),
        env=env,
    )
    (run_dir,) = (root / out / "ADAPT" / "command").iterdir()
    return proc, run_dir


def _trials(run_dir: Path) -> dict[str, list[int]]:
    return {
        c.name: sorted(int(p.stem.split("_")[1]) for p in c.glob("trial_*.json"))
        for c in sorted((run_dir / "cells").iterdir())
    }


@pytest.mark.slow
def test_adaptive_sweep_stops_settled_cells_and_resumes_after_kill_9(tmp_path):
    proc, ref = _run(tmp_path, "ref")
    assert proc.returncode == ExitCode.OK, proc.stderr
    adaptive = json.loads((ref / "matrix.json").read_text())["adaptive"]
    # No-effect and clearly slower cells stop after ≤ 8 trials; the flaky cell's failure
    # question needs more than max_trials here, so it and the baseline run to the end.
    assert adaptive["same"]["decided"] and adaptive["same"]["trials"] <= 8
    assert adaptive["slow"]["decided"] and adaptive["slow"]["trials"] <= 8
    assert not adaptive["flaky"]["decided"] and adaptive["flaky"]["trials"] == 10
    assert adaptive["base"]["trials"] == 10
    assert adaptive["same"]["reason"].startswith("within band after ")
    assert adaptive["slow"]["reason"].startswith("slower after ")
    text = (ref / "matrix.md").read_text()
    assert "## Adaptive stopping" in text
    assert "undecided at max_trials 10" in text
    assert "statistics (anytime-valid)" in text
    assert "same: stopped, within band after" in proc.stderr + proc.stdout

    # The same decisions from the records afterwards (load_run + compare(sequential=True)).
    df = aorta.compare(aorta.load_run(ref), sequential=True)
    for cell in ("same", "slow", "flaky"):
        assert bool(df.loc[cell, "decided"]) == adaptive[cell]["decided"]
        assert df.loc[cell, "reason"] == adaptive[cell]["reason"]
    assert df.loc["slow", "difference"] == "slower"

    # kill -9 in the middle of round 7 (after the first decisions), then resume: the decisions
    # are recomputed from the records, so the run ends exactly as the uninterrupted one.
    killed, run_dir = _run(tmp_path, "killed", env={"KILL_AT": "flaky/6"})
    assert killed.returncode == -signal.SIGKILL
    resumed = _sweep(tmp_path, "resume", str(run_dir))
    assert resumed.returncode == ExitCode.OK, resumed.stderr
    assert _trials(run_dir) == _trials(ref)
    again = json.loads((run_dir / "matrix.json").read_text())["adaptive"]
    assert again == adaptive

    # The progress total is a bound that falls as cells stop, so the last count is full.
    counts = re.findall(r"\[(\d+)/≤(\d+)\]", proc.stderr)
    assert "≤ 40 trials" in proc.stderr and counts and counts[-1][0] == counts[-1][1]
    # The findings raise the undecided cell's cap (no fixed-n projection).
    assert f"aorta sweep extend {ref} --trials 20 --cells base,flaky" in text
    assert "would decide" not in text

    # `sweep extend` on an adaptive run raises the cap: only the undecided cell (with the
    # baseline it pairs with) runs on; a decided cell alone is refused.
    refused = _sweep(tmp_path, "extend", str(ref), "--trials", "12", "--cells", "same")
    assert refused.returncode == ExitCode.USAGE and "every chosen cell is decided" in refused.stderr
    before = _trials(ref)
    grown = _sweep(tmp_path, "extend", str(ref), "--trials", "12")
    assert grown.returncode == ExitCode.OK, grown.stderr
    after = _trials(ref)
    assert after["same"] == before["same"] and after["slow"] == before["slow"]
    assert after["base"] == list(range(12))
    assert after["flaky"] == list(range(12))
    text = (ref / "matrix.md").read_text()
    assert "- extended to 12 trials per cell (all cells)" in text and "optimistic" not in text
