"""Figures of a matrix: trial values per cell, failure rates, ratios to the baseline, step series.

Each function returns a :class:`~matplotlib.figure.Figure`, draws into ``ax=`` when given one
(else a new figure, never pyplot's global state), and uses the package style.

Examples
--------
>>> from aorta.matrix.dataset import build_dataset
>>> from aorta.store.record import TrialRecord
>>> ds = build_dataset([{"name": c, "trials": 4} for c in ("base", "x")],
...     [TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True,
...                  step_times_ms=[5.0, 1.0 + t / 10 + (c == "x"), 1.1])
...      for c in ("base", "x") for t in range(4)], attrs={"baseline": "base", "threshold": 1.15})
>>> fig = step_distributions(ds)
>>> type(fig).__name__, fig.axes[0].get_xlabel()
('Figure', 'median post-warm-up step time per trial [ms]')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from aorta.matrix.select import DEFAULT_THRESHOLD, TrialSelection, band_threshold, trial_values
from aorta.store.record import TrialStatus

from .style import PALETTE, aorta_style, new_axes

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["VERDICT_COLORS", "failure_rates", "ratio_forest", "step_distributions", "step_series"]

#: Colour of each verdict in the figures (Okabe–Ito).
VERDICT_COLORS: dict[str, str] = {
    "slower": PALETTE["vermillion"],
    "higher": PALETTE["vermillion"],
    "faster": PALETTE["green"],
    "lower": PALETTE["green"],
    "no difference detected": PALETTE["blue"],
    "no data": PALETTE["grey"],
    "baseline": PALETTE["black"],
}
_STATUS_COLORS = {
    TrialStatus.OK.value: PALETTE["blue"],
    TrialStatus.WORKLOAD_FAILED.value: PALETTE["vermillion"],
}


def _label(da: xr.DataArray) -> str:
    name = da.attrs.get("long_name", da.name or "value")
    units = da.attrs.get("units")
    return f"{name} [{units}]" if units else str(name)


def _cell_axis(ax: Axes, cells: Sequence[str]) -> np.ndarray:
    y = np.arange(len(cells))[::-1].astype(float)
    ax.set_yticks(y, labels=list(cells))
    ax.set_ylim(-0.6, len(cells) - 0.4)
    ax.grid(axis="y", visible=False)
    return y


def step_distributions(
    ds: xr.Dataset,
    baseline: str | None = None,
    *,
    metric: str = "step_time_ms",
    trials: TrialSelection = "ran",
    threshold: float | None = None,
    ax: Axes | None = None,
) -> Figure:
    """One point per trial for each cell, the cell's median as a bar, and the baseline's band.

    The medians are of the trials that ended ok, as the matrix's. The band is the baseline
    median × ``[1/threshold, threshold]`` (the recipe's confound
    threshold unless given): cells whose points sit inside it are within the band of
    practical equivalence. Failed trials (``trials="ran"``, the default) are drawn in
    vermillion; ``trials="ok"`` leaves them out.

    Raises ``ValueError`` for an unknown metric, ``trials`` or baseline cell.
    """
    values = trial_values(ds, metric=metric, trials=trials).transpose("cell", "trial")
    cells = [str(c) for c in ds.cell.values.tolist()]
    baseline = baseline if baseline is not None else ds.attrs.get("baseline")
    if baseline is not None and baseline not in cells:
        raise ValueError(f"baseline cell {baseline!r} is not in the run")
    thr = band_threshold(ds, threshold)
    status = ds.status.transpose("cell", "trial").values
    # The bar and the band are the medians the matrix and the verdict use: of the trials that
    # ended ok. Failed trials are drawn, but a failure that ran long moved the bar before.
    ok = np.where(status == TrialStatus.OK.value, values.values, np.nan)
    with aorta_style():
        fig, ax = new_axes(ax, figsize=(6.4, 0.9 + 0.45 * len(cells)))
        y = _cell_axis(ax, cells)
        if baseline is not None:
            base_values = ok[cells.index(baseline)]
            base_values = base_values[np.isfinite(base_values)]
            base = float(np.median(base_values)) if base_values.size else math.nan
            if math.isfinite(base):
                ax.axvspan(
                    base / thr,
                    base * thr,
                    color=PALETTE["grey"],
                    alpha=0.2,
                    lw=0,
                    label=f"baseline ×[1/{thr:g}, {thr:g}]",
                )
                ax.axvline(base, color=PALETTE["grey"], lw=1)
        spread = np.linspace(-0.25, 0.25, max(values.sizes.get("trial", 1), 1))
        for i, yi in enumerate(y):
            row = values.values[i]
            for status_name, color in _STATUS_COLORS.items():
                sel = np.isfinite(row) & (status[i] == status_name)
                if sel.any():
                    ax.scatter(
                        row[sel],
                        yi + spread[: row.size][sel],
                        s=14,
                        color=color,
                        alpha=0.8,
                        lw=0,
                        label=status_name.replace("_", " "),
                    )
            if np.isfinite(ok[i]).any():
                ax.plot(
                    [np.nanmedian(ok[i])] * 2, [yi - 0.35, yi + 0.35], color=PALETTE["black"], lw=2
                )
            if not np.isfinite(row).any():  # nothing to draw: say why, instead of a blank row
                ax.text(
                    0.5,
                    yi,
                    _no_steps(status[i]),
                    transform=ax.get_yaxis_transform(),
                    ha="center",
                    va="center",
                    color=PALETTE["vermillion"],
                    fontsize="small",
                )
        ax.set_xlabel(f"{_label(values)}".replace(" [", " per trial [", 1))
        _dedupe_legend(ax, outside=True)
    return fig


def failure_rates(comparison: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """Each cell's failure rate with its Wilson interval (from :func:`aorta.compare`).

    Cells with significantly more failures than the baseline are vermillion, fewer green;
    the baseline's rate is a vertical line.

    Examples
    --------
    >>> from aorta.matrix.compare import compare
    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> ds = build_dataset([{"name": c, "trials": 4} for c in ("base", "x")],
    ...     [TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True,
    ...                  step_times_ms=[1.0 + t / 10 + (c == "x")]) for c in ("base", "x") for t in range(4)],
    ...     attrs={"baseline": "base", "threshold": 1.15})
    >>> fig = failure_rates(compare(ds))
    >>> len(fig.axes)
    1
    """
    cells = [str(c) for c in comparison.index]
    colors = {"more": PALETTE["vermillion"], "fewer": PALETTE["green"]}
    with aorta_style():
        fig, ax = new_axes(ax, figsize=(6.4, 0.9 + 0.45 * len(cells)))
        y = _cell_axis(ax, cells)
        base = comparison["baseline_failure_rate"].dropna()
        if len(base):
            ax.axvline(float(base.iloc[0]), color=PALETTE["grey"], lw=1, label="baseline")
        for yi, (_, row) in zip(y, comparison.iterrows(), strict=True):
            if math.isnan(row["failure_rate"]):
                continue
            color = colors.get(row["failures_vs_baseline"], PALETTE["blue"])
            lo, hi = row["failure_ci_low"], row["failure_ci_high"]
            ax.errorbar(
                row["failure_rate"],
                yi,
                # clipped at 0: Wilson's bound at 0 failures can land a rounding error above 0
                xerr=[[max(row["failure_rate"] - lo, 0.0)], [max(hi - row["failure_rate"], 0.0)]],
                fmt="o",
                color=color,
                capsize=3,
                label={"more": "more failures", "fewer": "fewer failures"}.get(
                    row["failures_vs_baseline"]
                ),
            )
            ran = int(row["n_ok"]) + int(row["n_failed"])
            ax.annotate(
                f"{int(row['n_failed'])}/{ran}",
                (hi, yi),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize="x-small",
            )
        ax.set_xlim(-0.02, 1.1)
        ax.xaxis.set_major_formatter(_percent())
        level = comparison.attrs.get("failure_ci_level", 0.95)
        ax.set_xlabel(
            f"failure rate (failed / passed + failed), {float(level) * 100:.4g}% Wilson CI"
        )
        _dedupe_legend(ax, outside=True)
    return fig


def ratio_forest(comparison: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """Each cell's ratio to the baseline with its bootstrap CI, on a log scale.

    The shaded band is ``[1/threshold, threshold]``; colours are the verdicts
    (:data:`VERDICT_COLORS`). The baseline row is left out.

    Examples
    --------
    >>> from aorta.matrix.compare import compare
    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> ds = build_dataset([{"name": c, "trials": 4} for c in ("base", "x")],
    ...     [TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True,
    ...                  step_times_ms=[1.0 + t / 10 + (c == "x")]) for c in ("base", "x") for t in range(4)],
    ...     attrs={"baseline": "base", "threshold": 1.15})
    >>> fig = ratio_forest(compare(ds))
    >>> len(fig.axes)
    1
    """
    rows = comparison[comparison["difference"] != "baseline"]
    cells = [str(c) for c in rows.index]
    thr = float(comparison.attrs.get("threshold", DEFAULT_THRESHOLD))
    with aorta_style():
        fig, ax = new_axes(ax, figsize=(6.4, 0.9 + 0.45 * max(len(cells), 1)))
        y = _cell_axis(ax, cells)
        ax.axvspan(
            1 / thr,
            thr,
            color=PALETTE["grey"],
            alpha=0.2,
            lw=0,
            label=f"band [{1 / thr:.3g}, {thr:g}]",
        )
        ax.axvline(1.0, color=PALETTE["grey"], lw=1)
        for yi, (_, row) in zip(y, rows.iterrows(), strict=True):
            if math.isnan(row["ratio"]):
                continue
            color = VERDICT_COLORS.get(str(row["difference"]), PALETTE["blue"])
            if not math.isnan(row["ratio_ci_low"]):
                ax.plot([row["ratio_ci_low"], row["ratio_ci_high"]], [yi, yi], color=color, lw=2)
            ax.plot(row["ratio"], yi, "o", color=color, label=str(row["difference"]))
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(_plain_log())
        lo, hi = ax.get_xlim()
        if hi / lo <= 100:  # label 2 and 5 only while they do not crowd the axis
            ax.xaxis.set_minor_formatter(_plain_log(minor=True))
        else:
            ax.xaxis.set_minor_formatter(_blank())
        level = comparison.attrs.get("ci_level", 0.95)
        units = comparison.attrs.get("metric", "value")
        ax.set_xlabel(
            f"ratio of medians to the baseline ({units}), {float(level) * 100:.4g}% bootstrap CI"
        )
        _dedupe_legend(ax, outside=True)
    return fig


def _no_steps(statuses: np.ndarray) -> str:
    """What a cell without one completed step shows in its row.

    >>> _no_steps(np.array(["timeout", "timeout"])), _no_steps(np.array(["workload_failed"]))
    ('hung — no completed steps', 'failed — no completed steps')
    >>> _no_steps(np.array(["did_not_run", ""]))
    'no completed steps'
    """
    seen = {str(s) for s in statuses.tolist()}
    if TrialStatus.TIMEOUT.value in seen:
        return "hung — no completed steps"
    if seen & {TrialStatus.WORKLOAD_FAILED.value, TrialStatus.SETUP_FAILED.value}:
        return "failed — no completed steps"
    return "no completed steps"


#: Cells drawn into one panel of :func:`step_series`; more get one small panel each.
SERIES_CELLS_PER_PANEL = 4


def step_series(
    ds: xr.Dataset,
    *,
    cells: Sequence[str] | None = None,
    trials: Sequence[int] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Step time against step, one line per trial, one colour per cell; warm-up shaded.

    ``cells`` and ``trials`` pick a subset (default: all). Up to
    :data:`SERIES_CELLS_PER_PANEL` cells share one panel; more (and no ``ax``) get one small
    panel each, on shared axes, with the baseline's median step time dashed in every panel for
    reference — the lines of many cells in one panel cannot be told apart. At most
    :data:`SERIES_MAX_PANELS` panels; the figure says how many cells it left out. Raises
    ``KeyError`` for an unknown cell or trial.

    Examples
    --------
    >>> from aorta.matrix.compare import compare
    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> ds = build_dataset([{"name": c, "trials": 4} for c in ("base", "x")],
    ...     [TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True,
    ...                  step_times_ms=[1.0 + t / 10 + (c == "x")]) for c in ("base", "x") for t in range(4)],
    ...     attrs={"baseline": "base", "threshold": 1.15})
    >>> fig = step_series(ds, cells=["x"])
    >>> len(fig.axes)
    1
    """
    sel = ds.step_time_ms
    if cells is not None:
        sel = sel.sel(cell=list(cells))
    if trials is not None:
        sel = sel.sel(trial=list(trials))
    names = [str(c) for c in sel.cell.values.tolist()]
    if ax is not None or len(names) <= SERIES_CELLS_PER_PANEL:
        from matplotlib.ticker import MaxNLocator

        with aorta_style():
            fig, ax = new_axes(ax)
            _series_panel(ax, ds, sel, names, colors=_SERIES_COLORS)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # no step -0.04
            ax.set_xlabel("step")
            ax.set_ylabel(_label(ds.step_time_ms))
            _dedupe_legend(ax)
        return fig
    return _series_facets(ds, sel, names)


_SERIES_COLORS = [
    PALETTE[k] for k in ("blue", "orange", "green", "vermillion", "sky", "purple", "black")
]
#: The most panels :func:`step_series` draws (one per cell).
SERIES_MAX_PANELS = 24


def _series_panel(
    ax: Axes, ds: xr.Dataset, sel: xr.DataArray, names: Sequence[str], *, colors: Sequence[str]
) -> None:
    """The trials of ``names`` as lines in ``ax``, the warm-up shaded."""
    warm = ds.warmup_steps.sel(cell=list(names), trial=sel.trial)
    w = int(warm.max()) if warm.size else 0
    if w > 0:
        ax.axvspan(-0.5, w - 0.5, color=PALETTE["grey"], alpha=0.15, lw=0, label="warm-up")
    steps = sel.step.values
    for k, cell in enumerate(names):
        color = colors[k % len(colors)]
        drawn = False
        for t in sel.trial.values.tolist():
            line = sel.sel(cell=cell, trial=t).values
            finite = np.isfinite(line)
            if not finite.any():
                continue
            drawn = True
            ax.plot(steps, line, color=color, lw=0.8, alpha=0.6, label=cell)
            # A line needs two neighbouring points: a one-step trial (or a step between two
            # missing ones) drew nothing, and the panel looked empty. Mark those points.
            lone = finite & ~np.r_[False, finite[:-1]] & ~np.r_[finite[1:], False]
            if lone.any():
                ax.plot(steps[lone], line[lone], "o", ms=3, color=color, alpha=0.8, label=cell)
        if not drawn and len(names) > 1:
            # In a shared panel a cell without a step would just be missing from the legend.
            status = ds.status.sel(cell=cell).values
            ax.plot([], [], " ", label=f"{cell}: {_no_steps(status)}")


def _series_facets(ds: xr.Dataset, sel: xr.DataArray, names: Sequence[str]) -> Figure:
    """One small panel per cell (shared axes), the baseline's median dashed in each."""
    from matplotlib.figure import Figure

    shown, left = list(names[:SERIES_MAX_PANELS]), len(names) - SERIES_MAX_PANELS
    cols = min(4, len(shown))
    rows = math.ceil(len(shown) / cols)
    baseline = ds.attrs.get("baseline")
    reference = None
    if baseline in ds.cell.values.tolist():
        base = ds.step_time_ms.sel(cell=baseline)
        if np.isfinite(base.values).any():
            reference = base.median("trial", skipna=True)
    with aorta_style():
        fig = Figure(figsize=(2.6 * cols, 0.6 + 1.9 * rows), layout="constrained")
        axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
        for k, (ax, cell) in enumerate(zip(axes, shown, strict=False)):
            color = PALETTE["black"] if cell == baseline else _SERIES_COLORS[k % 6]
            _series_panel(ax, ds, sel, [cell], colors=[color])
            if reference is not None and cell != baseline:
                ax.plot(reference.step.values, reference.values, color=PALETTE["grey"], lw=1,
                        ls="--", label=f"{baseline} (median)")  # fmt: skip
            if not np.isfinite(sel.sel(cell=cell).values).any():
                status = ds.status.sel(cell=cell).values
                ax.text(0.5, 0.5, _no_steps(status), transform=ax.transAxes, ha="center",
                        va="center", color=PALETTE["vermillion"], fontsize="small")  # fmt: skip
            ax.set_title(cell, fontsize="small")
        for ax in axes[len(shown) :]:
            ax.set_visible(False)
        fig.supxlabel("step")
        fig.supylabel(_label(ds.step_time_ms))
        notes = [f"dashed: {baseline}'s median step time"] if reference is not None else []
        if left > 0:
            notes.append(
                f"first {len(shown)} of {len(names)} cells (step_series(ds, cells=[…]) for the rest)"
            )
        if notes:
            fig.suptitle("; ".join(notes), fontsize="small")
    return fig


def _dedupe_legend(ax: Axes, *, outside: bool = False) -> None:
    handles, labels = ax.get_legend_handles_labels()
    seen: dict[str, Any] = {}
    for h, lab in zip(handles, labels, strict=True):
        seen.setdefault(lab, h)
    if not seen:
        return
    if outside:
        ax.legend(seen.values(), seen.keys(), loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(seen.values(), seen.keys(), loc="best")


def _percent() -> Any:
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(xmax=1.0, decimals=0)


def _blank() -> Any:
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def _plain_log(*, minor: bool = False) -> Any:
    from matplotlib.ticker import FuncFormatter

    def fmt(v: float, _pos: Any) -> str:
        if minor and not any(np.isclose(v, m * 10.0**e) for m in (2, 5) for e in range(-3, 4)):
            return ""
        return f"{v:g}"

    return FuncFormatter(fmt)
