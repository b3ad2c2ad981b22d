"""Figures of the trace metrics of a run (``aorta.load_run(run, traces=True)``).

:func:`time_breakdown`: where each cell's time went (stacked bars, one per cell);
:func:`exposed_comm_vs_step`: does exposed communication explain the step time (one point
per trial, across cells). Both return a :class:`~matplotlib.figure.Figure`, draw into ``ax=``
when given one and never touch pyplot's global state.

Examples
--------
>>> import numpy as np
>>> from aorta.matrix.dataset import build_dataset
>>> from aorta.store.record import TrialRecord
>>> ds = build_dataset([{"name": c, "trials": 3} for c in ("base", "x")],
...     [TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True, step_times_ms=[10.0 + t + (c == "x")])
...      for c in ("base", "x") for t in range(3)], attrs={"baseline": "base"})
>>> rng = np.random.default_rng(0)
>>> ds = ds.assign({k: (("cell", "trial", "rank"), rng.uniform(1, 5, (2, 3, 2)), {"rank_reduction": "max", "units": "ms"})
...                 for k in ("computation_ms", "exposed_comm_ms", "exposed_memcpy_ms", "idle_ms")})
>>> fig = time_breakdown(ds)
>>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
['base', 'x']
>>> exposed_comm_vs_step(ds).axes[0].get_xlabel()
'median post-warm-up step time per trial [ms]'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aorta.matrix.select import RankReduction, TrialSelection, trial_values

from .style import PALETTE, aorta_style, new_axes

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["BREAKDOWN_COLORS", "exposed_comm_vs_step", "time_breakdown"]

#: Colour of each part of the breakdown.
BREAKDOWN_COLORS: dict[str, str] = {
    "computation_ms": PALETTE["blue"],
    "exposed_comm_ms": PALETTE["vermillion"],
    "exposed_memcpy_ms": PALETTE["orange"],
    "idle_ms": PALETTE["grey"],
}
_LABELS = {
    "computation_ms": "computation",
    "exposed_comm_ms": "exposed comm",
    "exposed_memcpy_ms": "exposed memcpy",
    "idle_ms": "idle",
}
_CELL_COLORS = ("blue", "orange", "green", "vermillion", "sky", "purple", "black", "grey")


def _quartiles(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: q25, median, q75 of the finite values (NaN for an empty row)."""
    out = np.full((3, values.shape[0]), np.nan)
    for i, row in enumerate(values):
        row = row[np.isfinite(row)]
        if row.size:
            out[:, i] = np.percentile(row, [25, 50, 75])
    return out[0], out[1], out[2]


def time_breakdown(
    ds: xr.Dataset,
    *,
    ranks: RankReduction = "mean",
    trials: TrialSelection = "ok",
    ax: Axes | None = None,
) -> Figure:
    """Stacked bars, one per cell: median computation, exposed comm, exposed memcpy and idle
    time over the cell's trials, each with a whisker spanning its interquartile range.

    ``ranks`` reduces each trial's ranks first (default ``mean``: the parts of a mean still add
    up to the mean profiled span; ``worst`` would mix ranks); ``trials`` as in
    :func:`aorta.compare`. Raises ``ValueError`` when ``ds`` has no trace metrics.
    """
    parts = [p for p in BREAKDOWN_COLORS if p in ds]
    if "computation_ms" not in parts:
        raise ValueError(
            "no trace metrics in this Dataset: load it with load_run(run, traces=True)"
        )
    cells = [str(c) for c in ds.cell.values.tolist()]
    x = np.arange(len(cells))
    with aorta_style():
        fig, ax = new_axes(ax, figsize=(max(4.0, 1.2 + 0.9 * len(cells)), 4.0))
        bottom = np.zeros(len(cells))
        for part in parts:
            values = trial_values(ds, metric=part, trials=trials, ranks=ranks)
            q25, median, q75 = _quartiles(values.transpose("cell", "trial").values)
            height = np.nan_to_num(median)
            ax.bar(x, height, 0.6, bottom=bottom, color=BREAKDOWN_COLORS[part], label=_LABELS[part])
            top = bottom + height
            ok = np.isfinite(median)
            ax.errorbar(
                x[ok],
                top[ok],
                yerr=[(median - q25)[ok], (q75 - median)[ok]],
                fmt="none",
                ecolor=PALETTE["black"],
                elinewidth=0.8,
                capsize=2,
            )
            bottom = top
        ax.set_xticks(
            x,
            labels=cells,
            rotation=30 if len(cells) > 4 else 0,
            ha="right" if len(cells) > 4 else "center",
        )
        ax.grid(axis="x", visible=False)
        which = f"rank {ranks}" if isinstance(ranks, int) else f"{ranks} over ranks"
        ax.set_ylabel(f"profiled window [ms] (median over trials, IQR; {which})")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def exposed_comm_vs_step(
    ds: xr.Dataset,
    *,
    ranks: RankReduction = "worst",
    trials: TrialSelection = "ok",
    per_step: bool = True,
    ax: Axes | None = None,
) -> Figure:
    """Exposed communication against step time, one point per trial, one colour per cell.

    The x value is the trial's median post-warm-up step time; the y value its exposed
    communication (``ranks``: the worst rank by default), per profiled step when ``per_step``
    (the profiled window's total divided by its ``ProfilerStep`` count, so both axes are ms
    per step) or over the whole window. Cells whose points line up along a rising diagonal
    lose their step time to communication. Raises ``ValueError`` when ``ds`` has no trace
    metrics.
    """
    if "exposed_comm_ms" not in ds:
        raise ValueError(
            "no trace metrics in this Dataset: load it with load_run(run, traces=True)"
        )
    metric = "exposed_comm_ms"
    if per_step and "profiled_steps" in ds:
        metric = "exposed_comm_per_step_ms"
        per = ds.exposed_comm_ms / ds.profiled_steps.where(ds.profiled_steps > 0)
        ds = ds.assign(
            {
                metric: per.assign_attrs(
                    long_name="exposed communication per profiled step",
                    units="ms",
                    rank_reduction=ds.exposed_comm_ms.attrs.get("rank_reduction", "max"),
                )
            }
        )
    step = trial_values(ds, metric="step_time_ms", trials=trials).transpose("cell", "trial")
    comm = trial_values(ds, metric=metric, trials=trials, ranks=ranks).transpose("cell", "trial")
    with aorta_style():
        fig, ax = new_axes(ax)
        for k, cell in enumerate(str(c) for c in ds.cell.values.tolist()):
            color = PALETTE[_CELL_COLORS[k % len(_CELL_COLORS)]]
            xs, ys = step.values[k], comm.values[k]
            ok = np.isfinite(xs) & np.isfinite(ys)
            if not ok.any():
                continue
            ax.scatter(xs[ok], ys[ok], s=18, color=color, alpha=0.7, lw=0, label=cell)
            ax.scatter(np.median(xs[ok]), np.median(ys[ok]), s=70, marker="D", color=color,
                       edgecolor=PALETTE["black"], lw=0.8)  # fmt: skip
        ax.set_xlabel("median post-warm-up step time per trial [ms]")
        ax.set_ylabel(f"{comm.attrs.get('long_name', 'exposed comm')} [ms]")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="cell (◆ median)")
    return fig
