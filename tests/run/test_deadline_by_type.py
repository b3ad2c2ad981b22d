"""The in-process trial's deadline is told apart from Ctrl-C by its type (#45.7): an alarm that
raises ``TrialDeadline`` while ``run_with_deadline`` waits on a child is a deadline whatever the
clock says; a ``KeyboardInterrupt`` is an interrupt."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from aorta.run import procs
from aorta.run.procs import TrialDeadline, TrialHang


def _wait_with_alarm(exc: BaseException, *, deadline: float | None) -> list[str]:
    """Run a sleeping child under ``run_with_deadline``; ``exc`` is raised in this (main)
    thread 0.3 s in, as an in-process trial's SIGALRM does. Returns what ``before_kill`` saw."""
    seen: list[str] = []

    def fire(signum: int, frame: object) -> None:
        raise exc

    proc = procs.spawn([sys.executable, "-c", "import time; time.sleep(60)"])
    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(type(exc)):
            procs.run_with_deadline(
                proc, deadline=deadline, before_kill=lambda pid, why: seen.append(why)
            )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert proc.poll() is not None  # the child went down with the wait
    return seen


@pytest.mark.slow
def test_the_alarm_is_a_deadline_however_far_the_clock_says_it_is() -> None:
    # The clock says the deadline is an hour away: only the type says it is one.
    assert _wait_with_alarm(TrialDeadline(), deadline=time.monotonic() + 3600) == ["deadline"]
    assert _wait_with_alarm(TrialHang("silent"), deadline=None) == ["deadline"]


@pytest.mark.slow
def test_ctrl_c_is_an_interrupt() -> None:
    assert _wait_with_alarm(KeyboardInterrupt(), deadline=None) == ["interrupted"]
    far = time.monotonic() + 3600
    assert _wait_with_alarm(KeyboardInterrupt(), deadline=far) == ["interrupted"]
