"""A trial aorta killed is signed by why aorta killed it: what the job prints after aorta's
signal (torchrun's ``SignalException`` traceback on SIGTERM) stays in its log and is not the
cause (issue 45)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep

# Silent and idle until SIGTERM, then a Python traceback on stderr, as torchrun's agent does.
ON_TERM = """
import signal, sys, time, traceback
class SignalException(Exception):
    pass
def raise_(signum, frame):
    raise SignalException(f"Process {__import__('os').getpid()} got signal: {signum}")
signal.signal(signal.SIGTERM, raise_)
try:
    time.sleep(600)
except SignalException:
    traceback.print_exc()
    sys.exit(1)
"""


def _one(tmp_path: Path, extra: str, isolation: str):
    recipe = load_recipe_text(
        f"mode: probe\nmitigation_axis: [none]\ntrial_isolation: {isolation}\n"
        f"forensics: {{enabled: false}}\n{extra}",
        command=[sys.executable, "-c", ON_TERM],
    )
    result = sweep(recipe, output=tmp_path / "out", progress="none")
    (record,) = [r for r in result.records if r.trial >= 0]
    return record


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["in_process", "process"])
def test_a_hung_trial_is_a_hang_not_the_traceback_it_printed_when_killed(tmp_path, isolation):
    record = _one(tmp_path, "hang_after: 2\ntimeout_per_trial: 120\n", isolation)
    assert record.failure_kind == "hang"
    assert record.signature == "hang", record.signature_line
    # The traceback is still in the log for whoever reads it.
    logs = "".join(p.read_text() for p in (tmp_path / "out").rglob("stderr*.log"))
    assert "SignalException" in logs


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["in_process", "process"])
def test_a_trial_killed_at_its_deadline_is_signed_deadline(tmp_path, isolation):
    record = _one(tmp_path, "timeout_per_trial: 3\n", isolation)
    assert record.status.value == "timeout"
    assert record.signature == "deadline", record.signature_line
