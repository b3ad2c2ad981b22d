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

Examples
--------
>>> pooled = np.array([15.1, 15.3, 14.9, 15.0, 15.2, 15.1, 15.4, 14.8, 15.0, 15.2])
>>> sentinel_drift(np.array([15.0, 15.2]), pooled, threshold=1.3).drifted
False
>>> d = sentinel_drift(np.array([30.1, 29.8]), pooled, threshold=1.3)
>>> d.drifted, round(d.ratio, 2), round(d.p, 3)
(True, 1.98, 0.03)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SENTINEL_TRIALS", "Drift", "sentinel_drift"]

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
