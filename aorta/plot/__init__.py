"""Matplotlib figures for matrices and traces.

Every function returns a :class:`~matplotlib.figure.Figure`, accepts ``ax=`` to draw into an
existing axes, and never calls ``plt.show()``. Figures use the package style
(:func:`aorta.plot.style.aorta_style`), colour-blind safe.

Matrix figures (:mod:`aorta.plot.matrix`): :func:`step_distributions` (one point per trial,
the baseline band), :func:`failure_rates` (Wilson intervals), :func:`ratio_forest` (ratios to
the baseline with their CIs), :func:`step_series` (step time per step, one line per trial).
"""

from __future__ import annotations

from .matrix import VERDICT_COLORS, failure_rates, ratio_forest, step_distributions, step_series
from .style import PALETTE, aorta_style

__all__ = [
    "PALETTE",
    "VERDICT_COLORS",
    "aorta_style",
    "failure_rates",
    "ratio_forest",
    "step_distributions",
    "step_series",
]
