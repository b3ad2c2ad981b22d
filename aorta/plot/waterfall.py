"""The waterfall of :func:`aorta.explain`: baseline step → per-item deltas → cell step.

The first bar is the baseline's mean profiled step; each following bar starts where the last
ended and rises (slower, vermillion) or falls (faster, blue) by one item's difference, with
its bootstrap CI as a whisker; the ``top`` largest items are drawn one by one, the rest
together, then the residual no item explains (grey); the last bar is the cell's mean step,
with the step difference's CI.

Examples
--------
>>> from aorta.matrix.explain import TrialItems, decompose
>>> a = TrialItems("base", step={0: 10.0, 1: 11.0},
...                items={0: {"mm": ("compute", 6.0, 1.0)}, 1: {"mm": ("compute", 6.5, 1.0)}})
>>> b = TrialItems("slow", step={0: 16.0, 1: 17.0},
...                items={0: {"mm": ("compute", 6.0, 1.0), "sleep": ("other", 5.0, 1.0)},
...                       1: {"mm": ("compute", 6.5, 1.0), "sleep": ("other", 5.2, 1.0)}})
>>> fig = waterfall(decompose(a, b, resamples=100))
>>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
['base', 'sleep', 'mm', 'residual', 'slow']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aorta.matrix.stats import DEFAULT_ALPHA

from .style import PALETTE, aorta_style, new_axes

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["waterfall"]


def _short(name: str, width: int = 28) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def waterfall(explained: pd.DataFrame, *, top: int = 8, ax: Axes | None = None) -> Figure:
    """Draw the decomposition of :func:`aorta.explain` as a waterfall.

    Parameters
    ----------
    explained
        The table :func:`aorta.explain` returns (its ``attrs`` hold the step and residual).
    top
        Items drawn one by one (largest ``|delta|`` first); the others become one
        ``N other items`` bar.
    ax
        Draw into this axes (else a new figure).

    Returns
    -------
    matplotlib.figure.Figure
    """
    step, residual = explained.attrs["step"], explained.attrs["residual"]
    shown = explained.head(top)
    rest = explained.iloc[top:]
    labels = [str(explained.attrs["baseline"])]
    starts = [0.0]
    heights = [step["baseline"]]
    lows = [np.nan]
    highs = [np.nan]
    colors = [PALETTE["grey"]]
    level = step["baseline"]
    # (label, delta, CI low, CI high, colour: None for the sign's colour)
    deltas: list[tuple[str, float, float, float, str | None]] = [
        (_short(str(r.item)), r.delta, r.ci_low, r.ci_high, None)
        for r in shown.itertuples(index=False)
    ]
    if len(rest):
        deltas.append(
            (f"{len(rest)} other items", float(rest["delta"].sum()), np.nan, np.nan, None)
        )
    deltas.append(
        ("residual", residual["delta"], residual["ci_low"], residual["ci_high"], PALETTE["grey"])
    )
    for label, delta, low, high, color in deltas:
        labels.append(label)
        starts.append(level)
        heights.append(delta)
        lows.append(level + low)
        highs.append(level + high)
        colors.append(color or (PALETTE["vermillion"] if delta > 0 else PALETTE["blue"]))
        level += delta
    labels.append(str(explained.attrs["cell"]))
    starts.append(0.0)
    heights.append(step["cell"])
    lows.append(step["baseline"] + step["ci_low"])
    highs.append(step["baseline"] + step["ci_high"])
    colors.append(PALETTE["black"])
    x = np.arange(len(labels))
    with aorta_style():
        fig, ax = new_axes(ax, figsize=(max(5.0, 1.0 + 0.75 * len(labels)), 4.2))
        ax.bar(x, heights, 0.6, bottom=starts, color=colors)
        ends = np.array(starts) + np.array(heights)
        for i in range(len(labels) - 1):  # connectors from each bar's end to the next start
            ax.plot([i + 0.3, i + 0.7], [ends[i], ends[i]], color=PALETTE["black"], lw=0.6)
        lo, hi = np.array(lows), np.array(highs)
        ok = np.isfinite(lo) & np.isfinite(hi)
        mid = ends
        ax.errorbar(
            x[ok],
            mid[ok],
            yerr=[np.maximum(mid - lo, 0)[ok], np.maximum(hi - mid, 0)[ok]],
            fmt="none",
            ecolor=PALETTE["black"],
            elinewidth=0.8,
            capsize=2,
        )
        ax.set_xticks(x, labels=labels, rotation=30, ha="right")
        ax.grid(axis="x", visible=False)
        level_ci = f"{100 * (1 - explained.attrs.get('alpha', DEFAULT_ALPHA)):.0f}%"
        ax.set_ylabel(f"ms per profiled step (mean over trials; {level_ci} CI)")
        ax.set_title(
            f"Where the time went: {explained.attrs['cell']} vs {explained.attrs['baseline']}"
            f" (by {explained.attrs.get('by', 'item')})"
        )
    return fig
