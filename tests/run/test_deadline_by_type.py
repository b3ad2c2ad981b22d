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
from aorta.run.trial import alarm


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


def test_the_trial_alarm_gives_the_callers_timer_back() -> None:
    # An in-process trial's alarm cancelled the caller's real-time timer (a notebook's, a test
    # runner's: pytest-timeout lost its timeout for the rest of the test) and kept none of it.
    saved_handler, saved_timer = (
        signal.getsignal(signal.SIGALRM),
        signal.getitimer(signal.ITIMER_REAL),
    )

    def theirs(signum: int, frame: object) -> None:
        raise AssertionError("the caller's timer fired inside the trial")

    try:
        signal.signal(signal.SIGALRM, theirs)
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        with alarm(time.monotonic() + 5.0):
            time.sleep(0.2)
        assert signal.getsignal(signal.SIGALRM) is theirs
        assert 25.0 < signal.getitimer(signal.ITIMER_REAL)[0] < 29.9
        with pytest.raises(TrialDeadline), alarm(time.monotonic() + 0.05):
            time.sleep(5.0)  # the trial's own deadline still fires in the block
        assert 25.0 < signal.getitimer(signal.ITIMER_REAL)[0] < 29.9
    finally:
        signal.setitimer(signal.ITIMER_REAL, *saved_timer)
        signal.signal(signal.SIGALRM, saved_handler)
