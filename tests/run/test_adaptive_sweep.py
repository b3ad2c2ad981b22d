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
from tests.processes import AORTA, sweep_run

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
if os.environ.get("FLAKY") and trial % 4 == 1:
    sys.exit(3)
"""
RECIPE = """
ticket: ADAPT
schedule: adaptive
adaptive: {min_trials: 5, max_trials: 14}
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


def _run(
    root: Path,
    out: str,
    env: dict[str, str] | None = None,
    *,
    recipe_text: str = RECIPE,
    steps: str = STEPS,
    ticket: str = "ADAPT",
):
    recipe = root / "r.yaml"
    recipe.write_text(recipe_text)
    (root / "steps.py").write_text(steps)
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
    (run_dir,) = (root / out / ticket / "command").iterdir()
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
    # No-effect and clearly slower cells stop once their failure question is settled too
    # (no failure in 8 pairs, the floor, rules out a change of ±0.3 at 50%: futility); the flaky cell
    # (1 in 4 fails) is open at max_trials, so it and the baseline run to the end.
    assert adaptive["same"]["decided"] and adaptive["same"]["trials"] == 8
    assert adaptive["slow"]["decided"] and adaptive["slow"]["trials"] == 8
    assert not adaptive["flaky"]["decided"] and adaptive["flaky"]["trials"] == 14
    assert adaptive["base"]["trials"] == 14
    assert adaptive["same"]["reason"].startswith("within band after ")
    assert adaptive["slow"]["reason"].startswith("slower after ")
    assert adaptive["same"]["reason"].endswith("after 8 trials (futility)")
    assert (
        "failures open after 14 trials (4/14 failed, baseline 0/14)" in adaptive["flaky"]["reason"]
    )
    text = (ref / "matrix.md").read_text()
    assert "## Adaptive stopping" in text
    assert "undecided at max_trials 14" in text
    assert "statistics (anytime-valid)" in text
    assert "same: stopped, within band after" in proc.stderr + proc.stdout

    # The same decisions from the records afterwards (load_run + compare(sequential=True)).
    df = aorta.compare(aorta.load_run(ref), sequential=True)
    for cell in ("same", "slow", "flaky"):
        assert bool(df.loc[cell, "decided"]) == adaptive[cell]["decided"]
        assert df.loc[cell, "reason"] == adaptive[cell]["reason"]
    assert df.loc["slow", "difference"] == "slower"

    # kill -9 in the middle of round 12 (after the first stops), then resume: the decisions
    # are recomputed from the records, so the run ends exactly as the uninterrupted one.
    killed, run_dir = _run(tmp_path, "killed", env={"KILL_AT": "flaky/11"})
    assert killed.returncode == -signal.SIGKILL
    resumed = _sweep(tmp_path, "resume", str(run_dir))
    assert resumed.returncode == ExitCode.OK, resumed.stderr
    assert _trials(run_dir) == _trials(ref)
    again = json.loads((run_dir / "matrix.json").read_text())["adaptive"]
    assert again == adaptive

    # The progress total is a bound that falls as cells stop, so the last count is full.
    counts = re.findall(r"\[(\d+)/≤(\d+)\]", proc.stderr)
    assert "≤ 56 trials" in proc.stderr and counts and counts[-1][0] == counts[-1][1]
    # The findings raise the undecided cell's cap (no fixed-n projection).
    assert f"aorta sweep extend {ref} --trials 28 --cells base,flaky" in text
    assert "would decide" not in text

    # `sweep extend` on an adaptive run raises the cap: only the undecided cell (with the
    # baseline it pairs with) runs on; a decided cell alone is refused.
    refused = _sweep(tmp_path, "extend", str(ref), "--trials", "16", "--cells", "same")
    assert refused.returncode == ExitCode.USAGE and "every chosen cell is decided" in refused.stderr
    before = _trials(ref)
    grown = _sweep(tmp_path, "extend", str(ref), "--trials", "16")
    assert grown.returncode == ExitCode.OK, grown.stderr
    after = _trials(ref)
    assert after["same"] == before["same"] and after["slow"] == before["slow"]
    assert after["base"] == list(range(16))
    assert after["flaky"] == list(range(16))
    text = (ref / "matrix.md").read_text()
    assert "- extended to 16 trials per cell (all cells)" in text and "optimistic" not in text


# Issue 36: a cell failing half its trials against a baseline failing 1 in 20. Failures are
# drawn per cell and trial from SALT (2864: the flaky cell fails 1 of its first 8 trials, the
# baseline none — the lucky start the old futility rule stopped on after 8 trials).
FLAKY_STEPS = """\
import os, random, sys
cell, trial = os.environ["AORTA_CELL"], int(os.environ["AORTA_TRIAL"])
noise = random.Random(f"steps/{cell}/{trial}")
for s in range(4):
    print(f"step {10.0 * (1 + noise.gauss(0, 0.005)):.4f} ms")
if random.Random(f"{os.environ['SALT']}/{cell}/{trial}").random() < float(os.environ["FAIL"]):
    sys.exit(3)
"""
FLAKY_RECIPE = """
ticket: FLAKY
schedule: adaptive
adaptive: {min_trials: 5, max_trials: 40}
step_time_regex: 'step ([0-9.]+) ms'
extra_env: {SALT: '2864'}
cells:
  - {name: base, mitigations: [none], extra_env: {FAIL: '0.05'}}
  - {name: flaky, mitigations: [none], extra_env: {FAIL: '0.5'}}
"""


@pytest.mark.slow
def test_a_flaky_cell_with_a_lucky_start_is_called_more_failures_and_stops_early(tmp_path):
    proc, run_dir = _run(
        tmp_path, "out", recipe_text=FLAKY_RECIPE, steps=FLAKY_STEPS, ticket="FLAKY"
    )
    assert proc.returncode == ExitCode.OK, proc.stderr
    doc = json.loads((run_dir / "matrix.json").read_text())
    flaky = doc["adaptive"]["flaky"]
    # Not stopped as futile after its lucky first 8 trials (the old rule did: 1/8 against
    # 0/8 is within ±0.15); the e-process calls it once the evidence is in, before the cap.
    assert flaky["decided"] and flaky["trials"] == 20 < 40
    assert flaky["reason"].startswith("within band after ")
    assert flaky["reason"].endswith("; more failures after 20 trials")
    assert doc["adaptive"]["base"]["trials"] == 20
    (cell,) = [c for c in doc["cells"] if c.get("name", c.get("cell")) == "flaky"]
    assert cell["failures_vs_baseline"] == "more"
    assert "flaky: stopped, within band after" in proc.stderr + proc.stdout
    # The same verdict from the records afterwards.
    df = aorta.compare(aorta.load_run(run_dir), sequential=True)
    assert df.loc["flaky", "failures_vs_baseline"] == "more"
    assert df.loc["flaky", "reason"] == flaky["reason"]
    assert df.attrs["max_trials"] == 40


STEADY = ("sh", "-c", "echo step 10.0 ms; echo step 10.0 ms")


def test_a_million_trial_cap_ends_when_the_cells_stop(tmp_path):
    """After every cell stopped, the sweep ends: it walked the rest of max_trials, deciding
    every earlier point again for each trial (max_trials 32,000: 141 s of CPU for nothing)."""
    recipe = tmp_path / "r.yaml"
    # Steady step times, so the cells settle within a few dozen trials: timed as `true`'s fork
    # and exit, "same" took 1,100 trials to be within band, which took over 600 s with ~20
    # processes on 2 cores (the cap's walk is what this tests, not how noisy a fork is).
    recipe.write_text(
        "ticket: CAP\nschedule: adaptive\nadaptive: {min_trials: 5, max_trials: 1000000}\n"
        "step_time_regex: 'step ([0-9.]+) ms'\n"
        "cells: [{name: base, mitigations: [none]}, {name: same, mitigations: [none]}]\n"
    )
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        sweep_run(recipe, tmp_path / "out", "--", *STEADY),
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == ExitCode.OK, proc.stderr
    (run_dir,) = (tmp_path / "out" / "CAP" / "command").iterdir()
    matrix = json.loads((run_dir / "matrix.json").read_text())
    assert matrix["adaptive"]["same"]["decided"] is True
    ran = len(list((run_dir / "cells").glob("*/trial_*.json")))
    assert ran < 10_000  # the cells stopped long before their cap
    # Generous (both cores busy): each trial is a fork of `sh`; the walk was O(max_trials²).
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu < 60 + 0.5 * ran, (cpu, ran)
