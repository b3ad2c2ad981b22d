"""Matplotlib figures for matrices and traces.

Every function returns a :class:`~matplotlib.figure.Figure`, accepts ``ax=`` to draw into an
existing axes, and never calls ``plt.show()``. Figures use the package style
(:func:`aorta.plot.style.aorta_style`), colour-blind safe.

Matrix figures (:mod:`aorta.plot.matrix`): :func:`step_distributions` (one point per trial,
the baseline band), :func:`failure_rates` (Wilson intervals), :func:`ratio_forest` (ratios to
the baseline with their CIs), :func:`step_series` (step time per step, one line per trial).

Trace metrics of a run (:mod:`aorta.plot.trace_matrix`, ``load_run(run, traces=True)``):
:func:`time_breakdown` (stacked bars per cell), :func:`exposed_comm_vs_step` (one point per
trial); :func:`waterfall` (:func:`aorta.explain`: baseline step → per-item deltas → cell step).

Single traces (:mod:`aorta.plot.trace`): :func:`gpu_breakdown` (per rank),
:func:`timeline` (a window of one rank's streams), :func:`gemm_tflops`,
:func:`collective_bandwidth` (bandwidth vs message size), :func:`straggler_heatmap`,
:func:`roofline` (:meth:`Trace.perf_ops <aorta.trace.Trace.perf_ops>` under the device's roofs).
"""

from __future__ import annotations

import sys

from aorta.matrix.accessor import register_figures

from .matrix import VERDICT_COLORS, failure_rates, ratio_forest, step_distributions, step_series
from .roofline import FAMILY_COLORS, roofline
from .style import PALETTE, aorta_style
from .trace import (
    collective_bandwidth,
    gemm_tflops,
    gpu_breakdown,
    memory_timeline,
    straggler_heatmap,
    timeline,
)
from .trace_matrix import BREAKDOWN_COLORS, exposed_comm_vs_step, time_breakdown
from .waterfall import waterfall

__all__ = [
    "BREAKDOWN_COLORS",
    "FAMILY_COLORS",
    "PALETTE",
    "VERDICT_COLORS",
    "aorta_style",
    "collective_bandwidth",
    "exposed_comm_vs_step",
    "failure_rates",
    "gemm_tflops",
    "gpu_breakdown",
    "memory_timeline",
    "ratio_forest",
    "roofline",
    "step_distributions",
    "step_series",
    "straggler_heatmap",
    "time_breakdown",
    "timeline",
    "waterfall",
]

# ds.aorta.plot_* draw with this package's functions (the matrix stage never imports it).
register_figures(sys.modules[__name__])
