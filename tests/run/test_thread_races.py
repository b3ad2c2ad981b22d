"""Races between the threads of a sweep (aorta/run/): each test makes its interleaving near
certain — a switch interval of a microsecond, many rounds — and failed before its fix."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from aorta.run.trial import Watchdog
from tests.threads import switching_often


@pytest.fixture(name="switch_often")
def switch_often_fixture() -> Iterator[None]:
    with switching_often():
        yield


@pytest.mark.usefixtures("switch_often")
def test_a_watchdog_never_calls_on_stuck_after_its_trial_ended() -> None:
    # The sweep's on_stuck (`_abandon`) writes the trial's record as a timeout and ends the
    # process: running while the trial returns, it races the main thread writing the same
    # trial's real record (and the matrix, whose records dict changes under it). The watchdog's wait timing out and the trial ending are one
    # moment here (a trial that ends at its deadline, no grace), so both orders happen over the rounds.
    late: list[int] = []
    fired = 0
    for i in range(100):
        ended = threading.Event()

        def on_stuck(i: int = i, ended: threading.Event = ended) -> None:
            nonlocal fired
            fired += 1
            time.sleep(0.0005)  # on_stuck's own writes, during which the trial must not go on
            if ended.is_set():
                late.append(i)

        with Watchdog(time.monotonic() + 0.001, 0.0, on_stuck):
            time.sleep(0.001)
        ended.set()
    time.sleep(0.05)  # a late call lands after this; none may
    assert late == [], f"the trial ended while on_stuck ran in {len(late)} of 100 rounds"
    assert fired > 0  # the rounds did race: some calls came while the trial ran
