"""The drift sentinel's failure half (``aorta.matrix.sentinel.failure_drift``): Boschloo's p
of the fresh trials' failures against the pool's, the matrix's own test of failure rates, on
the counts a bisect step records (2 fresh trials of the first value, its pooled ones)."""

from __future__ import annotations

import pytest

from aorta.matrix.sentinel import failure_drift
from aorta.matrix.stats import failure_p


@pytest.mark.parametrize(
    ("fresh", "pooled", "drifted"),
    [
        ((2, 2), (0, 5), True),  # the machine started failing: p = 0.030
        ((0, 2), (10, 10), True),  # the pool failed where the machine now passes
        ((1, 2), (0, 20), False),  # one failure of two: p = 0.080
        ((0, 2), (0, 30), False),  # nothing failed: p = 1
        ((2, 2), (3, 10), False),  # a pool that failed often already
    ],
)
def test_failure_drift_is_boschloo_at_the_level(
    fresh: tuple[int, int], pooled: tuple[int, int], drifted: bool
) -> None:
    d = failure_drift(fresh, pooled)
    assert d.p == failure_p(*fresh, *pooled) and d.drifted is drifted
    assert d.words("b0").startswith(f"b0 drifted: {fresh[0]} of its {fresh[1]} fresh trials")


def test_no_failure_drift_without_trials_that_ran_and_bad_counts_refused() -> None:
    assert not failure_drift((0, 0), (0, 5)).drifted  # every fresh trial errored
    assert failure_drift((2, 2), (0, 0)).p == 1.0
    with pytest.raises(ValueError, match="between 0"):
        failure_drift((3, 2), (0, 5))
    with pytest.raises(ValueError, match="level"):
        failure_drift((2, 2), (0, 5), level=0.0)
