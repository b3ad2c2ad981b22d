"""Whether a few fresh trials of a value still match its trials measured earlier, pure: the
drift sentinel of ``aorta bisect`` (:mod:`aorta.run.bisect`), which reuses the endpoints'
trials across its steps and so would read a machine that drifted between them as a difference.

The rule: **drift** when every fresh trial lies beyond every pooled trial, all on the same side,
*and* the fresh trials' median is beyond the band from the pool's (its ratio above
``threshold`` or below ``1 / threshold``). With no drift the fresh and the pooled trials are
exchangeable, and ``m`` fresh trials all beyond ``n`` pooled ones on one side or the other has
probability ``2 / C(n + m, m)`` — for the 2 fresh trials bisect runs, ``4 / ((n + 1) (n + 2))``:
9.5% against 5 pooled trials, 3.0% against 10, 0.87% against 20 — the sentinel's false
alarm rate at most (the band only lowers it), and a false alarm costs trials, not a wrong
verdict. A drift inside the band cannot turn a verdict, which is decided beyond the band.

Timing alone misses a machine that started *failing*: its failed trials have no step time, so
the fresh trials that still pass look like the pool and the midpoint's failures read as its
own. So the failure counts are watched too (:func:`failure_drift`): **drift** when
**Boschloo's exact test** of the fresh trials' failures against the pool's — the test every
failure rate of the matrix gets (:func:`aorta.matrix.stats.failure_p`) — gives a two-sided
p at most ``level`` (0.05), either way: a pool that failed where the fresh trials pass is as
unlike the machine now. Boschloo's test keeps its size at ``level``, so that is the false
alarm rate at most. With 2 fresh trials only both failing (or both passing against a pool
that always failed) can reach it: 2 of 2 against 0 of 5 pooled gives p = 0.030, 0 of 10:
0.009; 1 of 2 against 0 of 20: 0.080, not drift.

Examples
--------
>>> pooled = np.array([15.1, 15.3, 14.9, 15.0, 15.2, 15.1, 15.4, 14.8, 15.0, 15.2])
>>> sentinel_drift(np.array([15.0, 15.2]), pooled, threshold=1.3).drifted
False
>>> d = sentinel_drift(np.array([30.1, 29.8]), pooled, threshold=1.3)
>>> d.drifted, round(d.ratio, 2), round(d.p, 3)
(True, 1.98, 0.03)
>>> f = failure_drift((2, 2), (0, 10))
>>> f.drifted, round(f.p, 3)
(True, 0.009)
>>> f.words("b0")
'b0 drifted: 2 of its 2 fresh trials failed, 0 of its 10 pooled ones (p = 0.009 with no drift)'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from aorta.matrix.stats import DEFAULT_ALPHA, failure_p

__all__ = ["SENTINEL_TRIALS", "Drift", "FailureDrift", "failure_drift", "sentinel_drift"]

#: Fresh trials of the first value each bisect step runs beside its midpoint.
SENTINEL_TRIALS = 2


@dataclass(frozen=True)
class Drift:
    """The fresh trials against the pooled: the ratio of their medians, the probability of
    fresh trials so far beyond the pool with no drift (1 when they are not all beyond it on
    one side), and whether that is drift (:func:`sentinel_drift`)."""

    ratio: float
    p: float
    drifted: bool
    fresh: int
    pooled: int

    def words(self, value: str) -> str:
        """The drift as a phrase naming the value whose trials drifted."""
        return (
            f"{value} drifted: its {self.fresh} fresh trials ×{self.ratio:.3g} its "
            f"{self.pooled} pooled ones, all beyond them (p = {self.p:.2g} with no drift)"
        )


def sentinel_drift(fresh: np.ndarray, pooled: np.ndarray, *, threshold: float) -> Drift:
    """Whether the ``fresh`` trial values of a value drifted from its ``pooled`` ones (see the
    module docstring); non-finite values are left out, and no drift is said without a finite
    value on each side.

    Raises ``ValueError`` for ``threshold`` below 1.
    """
    if threshold < 1:
        raise ValueError(f"threshold must be at least 1, got {threshold}")
    new = np.asarray(fresh, dtype=float)
    old = np.asarray(pooled, dtype=float)
    new, old = new[np.isfinite(new)], old[np.isfinite(old)]
    if not (new.size and old.size):
        return Drift(math.nan, 1.0, False, int(new.size), int(old.size))
    ratio = float(np.median(new) / np.median(old)) if np.median(old) else math.nan
    beyond = bool(new.min() > old.max() or new.max() < old.min())
    p = min(1.0, 2 / math.comb(new.size + old.size, new.size)) if beyond else 1.0
    banded = math.isfinite(ratio) and (ratio > threshold or ratio < 1 / threshold)
    return Drift(ratio, p, beyond and banded, int(new.size), int(old.size))


@dataclass(frozen=True)
class FailureDrift:
    """The fresh trials' failures against the pooled ones' (each ``(failed, ran)``), the
    Boschloo p of the two rates (1 when there is nothing to compare) and whether that is
    drift (:func:`failure_drift`)."""

    fresh: tuple[int, int]
    pooled: tuple[int, int]
    p: float
    drifted: bool

    def words(self, value: str) -> str:
        """The drift as a phrase naming the value whose trials drifted."""
        (failed, ran), (was, pooled) = self.fresh, self.pooled
        return (
            f"{value} drifted: {failed} of its {ran} fresh trials failed, {was} of its "
            f"{pooled} pooled ones (p = {self.p:.2g} with no drift)"
        )


def failure_drift(
    fresh: tuple[int, int], pooled: tuple[int, int], *, level: float = DEFAULT_ALPHA
) -> FailureDrift:
    """Whether a value's failure rate drifted: ``fresh`` and ``pooled`` are ``(failed, ran)``
    of its fresh and its pooled trials (ran: passed or failed; see the module docstring).
    No drift is said without a trial that ran on each side.

    Raises ``ValueError`` for ``level`` outside (0, 1), or counts that are not ``0 ≤ failed
    ≤ ran``.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    for failed, ran in (fresh, pooled):
        if not 0 <= failed <= ran:
            raise ValueError(f"failures must lie between 0 and the trials that ran: {failed}/{ran}")
    if not (fresh[1] and pooled[1]):
        return FailureDrift(fresh, pooled, 1.0, False)
    p = failure_p(fresh[0], fresh[1], pooled[0], pooled[1])
    return FailureDrift(fresh, pooled, p, p <= level)
