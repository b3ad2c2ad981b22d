"""The package's matplotlib style: quiet axes and a colour-blind-safe palette (Okabe–Ito)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

__all__ = ["PALETTE", "aorta_style", "new_axes"]

#: Okabe & Ito (2008), safe for the common colour-vision deficiencies.
PALETTE: dict[str, str] = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "green": "#009E73",
    "vermillion": "#D55E00",
    "sky": "#56B4E9",
    "purple": "#CC79A7",
    "yellow": "#F0E442",
    "black": "#000000",
    "grey": "#999999",
}

_RC: dict[RcKeyType, Any] = {
    "axes.prop_cycle": None,  # filled lazily (needs cycler from matplotlib)
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.titlesize": "medium",
    "axes.titleweight": "bold",
    "axes.labelsize": "small",
    "xtick.labelsize": "small",
    "ytick.labelsize": "small",
    "legend.fontsize": "small",
    "legend.frameon": False,
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
}


@contextlib.contextmanager
def aorta_style() -> Iterator[None]:
    """Context manager applying the package style (without touching global rcParams after)."""
    import matplotlib as mpl
    from cycler import cycler

    rc = dict(_RC)
    rc["axes.prop_cycle"] = cycler(
        color=[
            PALETTE[k]
            for k in ("blue", "orange", "green", "vermillion", "sky", "purple", "yellow", "grey")
        ]
    )
    with mpl.rc_context(rc):
        yield


def new_axes(
    ax: Axes | None = None, *, figsize: tuple[float, float] = (6.4, 4.0)
) -> tuple[Figure, Axes]:
    """``(fig, ax)``: the given axes and the figure it is drawn in (a subfigure's root, the
    one that saves), or a new figure (never pyplot state)."""
    if ax is not None and (root := ax.get_figure(root=True)) is not None:
        return root, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()
