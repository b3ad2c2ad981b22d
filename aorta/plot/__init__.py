"""Matplotlib figures for matrices and traces.

Every function returns a :class:`~matplotlib.figure.Figure`, accepts ``ax=`` to draw into an
existing axes, and never calls ``plt.show()``. Figures use the package style
(:func:`aorta.plot.style.aorta_style`), colour-blind safe.
"""

from __future__ import annotations

from .style import PALETTE, aorta_style

__all__ = ["PALETTE", "aorta_style"]
