"""A series across runs: each run's median with its CI and its failure rate with its CI, the
change points marked where they happened, the environment changes written beside them.

Examples
--------
>>> entry = {"runs": ["/r/a", "/r/b", "/r/c"], "median": [10.0, 10.2, 13.0],
...          "median_ci": [[9.8, 10.0, 12.7], [10.3, 10.4, 13.2]],
...          "failure_rate": [0.0, 0.0, 0.1], "failure_ci": [[0.0, 0.0, 0.02], [0.2, 0.2, 0.4]]}
>>> change = {"before": "/r/b", "after": "/r/c", "metric": "step_time_ms", "direction": "slower",
...           "environment_changes": {"torch.version": ["2.12", "2.13"]}}
>>> fig = series_figure(entry, [change], metric="step_time_ms")
>>> [ax.get_ylabel() for ax in fig.axes]
['step_time_ms', 'failure rate']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .style import PALETTE, aorta_style

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["series_figure"]

_CHANGE_COLORS = {
    "slower": PALETTE["vermillion"],
    "more_failures": PALETTE["vermillion"],
    "faster": PALETTE["green"],
    "fewer_failures": PALETTE["green"],
}


def _change_color(change: Mapping[str, Any]) -> str:
    """Vermillion for a change for the worse, green for the better: a trace metric's
    ``higher``/``lower`` by its ``worse`` flag, older JSON (no flag) by its direction."""
    if "worse" in change and change["direction"] not in _CHANGE_COLORS:
        return PALETTE["vermillion"] if change["worse"] else PALETTE["green"]
    return _CHANGE_COLORS.get(change["direction"], PALETTE["grey"])


def _values(xs: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in xs], dtype=float)


def _short(changes: Mapping[str, Any], limit: int = 2) -> str:
    keys = [k for k in changes if k != "nodes"]

    def word(v: Any) -> str:
        return "unset" if v is None else str(v)

    parts = [f"{k}: {word(changes[k][0])}→{word(changes[k][1])}" for k in keys[:limit]]
    more = len(keys) - limit + len(changes.get("nodes") or {})
    return "\n".join(parts) + (f"\n+{more} more" if more > 0 else "")


def series_figure(
    entry: Mapping[str, Any], changes: Sequence[Mapping[str, Any]], *, metric: str
) -> Figure:
    """Two panels over the runs of one series × cell (``aorta history``'s JSON ``series``
    entry): the metric's per-run median with its CI, and the failure rate with its CI; each of
    ``changes`` (its change points) a vertical line between its two runs, coloured by
    direction, with the first environment changes written beside it."""
    from matplotlib.figure import Figure

    runs = [Path(r).name for r in entry["runs"]]
    x = np.arange(len(runs))
    position = {r: i for i, r in enumerate(entry["runs"])}
    with aorta_style():
        fig = Figure(figsize=(max(6.0, 0.28 * len(runs) + 3), 4.6), layout="constrained")
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1.4])
        med = _values(entry["median"])
        lo, hi = (_values(v) for v in entry["median_ci"])
        err = np.vstack(
            [np.where(np.isfinite(lo), med - lo, 0), np.where(np.isfinite(hi), hi - med, 0)]
        )
        top.errorbar(x, med, yerr=err, fmt="o", ms=3.5, lw=1, color=PALETTE["blue"], capsize=2)
        top.set_ylabel(metric)
        rate = _values(entry["failure_rate"])
        flo, fhi = (_values(v) for v in entry["failure_ci"])
        ferr = np.vstack([np.nan_to_num(rate - flo), np.nan_to_num(fhi - rate)])
        bottom.errorbar(x, rate, yerr=ferr, fmt="s", ms=3, lw=1, color=PALETTE["orange"], capsize=2)
        bottom.set_ylabel("failure rate")
        bottom.set_ylim(-0.05, 1.05)
        for c in changes:
            if c["after"] not in position:
                continue
            at = position[c["after"]] - 0.5
            color = _change_color(c)
            for ax in (top, bottom):
                ax.axvline(at, color=color, lw=1.4, ls="--")
            # Named as the text and the JSON name it: which metric, which way.
            label = f"{c['metric']}: {c['direction'].replace('_', ' ')}"
            env = _short(c.get("environment_changes") or {})
            top.annotate(
                f"{label}\n{env}" if env else label,
                (at, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -2),
                textcoords="offset points",
                va="top",
                fontsize="x-small",
                color=color,
                bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85},
            )
        step = max(1, len(runs) // 20)
        bottom.set_xticks(
            x[::step], [runs[i] for i in x[::step]], rotation=60, ha="right", fontsize="x-small"
        )
    return fig
