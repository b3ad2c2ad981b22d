"""The roofline of a trace: arithmetic intensity against achieved TFLOP/s, one point per op and
shape (sized by kernel time, coloured by family), under the device's ceilings.

Takes :meth:`aorta.trace.Trace.perf_ops` (or ``perf_summary``); returns a
:class:`matplotlib.figure.Figure`, draws into ``ax=`` when given, never touches pyplot state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from aorta.trace.devices import get_device

from .style import PALETTE, aorta_style, new_axes

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["FAMILY_COLORS", "roofline"]

#: Colours of the perf-model families (others cycle through the palette).
FAMILY_COLORS: dict[str, str] = {
    "GEMM": PALETTE["blue"],
    "SDPA_fwd": PALETTE["vermillion"],
    "SDPA_bwd": PALETTE["vermillion"],
    "CONV_fwd": PALETTE["green"],
    "CONV_bwd": PALETTE["green"],
    "Normalization": PALETTE["purple"],
    "Softmax": PALETTE["orange"],
    "UnaryElementwise": PALETTE["sky"],
    "BinaryElementwise": PALETTE["sky"],
    "Elementwise": PALETTE["sky"],
    "Reduce_fwd": PALETTE["yellow"],
    "Reduce_bwd": PALETTE["yellow"],
    "Memory": PALETTE["grey"],
    "Pooling": PALETTE["grey"],
}


def _device(
    table: pd.DataFrame, device: str | Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    if isinstance(device, Mapping):
        return device
    name = device if isinstance(device, str) else table.attrs.get("device")
    if not name:
        return None
    try:
        return get_device(name)
    except ValueError:
        return None


def roofline(
    table: pd.DataFrame,
    *,
    device: str | Mapping[str, Any] | None = None,
    min_share: float = 0.0,
    ax: Axes | None = None,
) -> Figure:
    """Achieved TFLOP/s against FLOP/byte per op and shape, under the device's roofs.

    Parameters
    ----------
    table
        :meth:`Trace.perf_ops` (columns ``intensity``, ``tflops``, ``kernel_us``, ``family``;
        ``spec`` when it has a device).
    device
        A device name or arch-file mapping for the ceilings (default: ``table.attrs["device"]``);
        without one the points are drawn alone.
    min_share
        Leave out ops with less than this share (0..1) of the table's kernel time.

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"intensity": [90.0, 1.5], "tflops": [15.0, 0.1], "kernel_us": [85.0, 20.0],
    ...                   "family": ["GEMM", "BinaryElementwise"], "spec": ["matrix_bf16", "vector_bf16"]})
    >>> fig = roofline(t, device="MI300X")
    >>> ax = fig.axes[0]
    >>> ax.get_xscale(), ax.get_yscale(), len(ax.lines)  # HBM roof + matrix_bf16 + vector_bf16
    ('log', 'log', 3)
    """
    with aorta_style():
        fig, ax = new_axes(ax, figsize=(6.4, 4.4))
        total = float(table["kernel_us"].sum()) if len(table) else 0.0
        keep = (
            np.isfinite(table["intensity"].to_numpy(dtype=float))
            & (table["intensity"].to_numpy(dtype=float) > 0)
            & np.isfinite(table["tflops"].to_numpy(dtype=float))
            & (table["tflops"].to_numpy(dtype=float) > 0)
            if len(table)
            else np.zeros(0, bool)
        )
        if total and min_share:
            keep &= table["kernel_us"].to_numpy(dtype=float) >= min_share * total
        data = table[keep]
        if data.empty:
            ax.text(0.5, 0.5, "no modelled ops with GPU time", ha="center", va="center",
                    transform=ax.transAxes, color=PALETTE["grey"])  # fmt: skip
            ax.set_xticks([])
            ax.set_yticks([])
            return fig
        size = 15 + 400 * np.sqrt(data["kernel_us"].to_numpy(dtype=float) / max(total, 1e-9))
        for family, group in data.groupby("family", sort=True):
            ax.scatter(
                group["intensity"],
                group["tflops"],
                s=size[data.index.get_indexer(group.index)],
                alpha=0.75,
                color=FAMILY_COLORS.get(str(family)),
                edgecolors="white",
                linewidths=0.5,
                label=str(family),
            )
        lo = float(data["intensity"].min()) / 4
        hi = float(data["intensity"].max()) * 4
        spec = _device(table, device)
        if spec is not None:
            _ceilings(ax, spec, data, lo, hi)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small", title="family")
        name = spec.get("name", "") if spec is not None else ""
        ax.set_title(f"Roofline{' — ' + name if name else ''}")
    return fig


def _ceilings(ax: Axes, spec: Mapping[str, Any], data: pd.DataFrame, lo: float, hi: float) -> None:
    """The HBM roof (TB/s × intensity) and the compute roofs of the precisions in ``data``."""
    peaks = spec.get("max_achievable_tflops", {}) or {}
    bandwidth = float(spec.get("mem_bw_gbps") or 0) / 1e3  # TB/s
    used = sorted({s for s in data.get("spec", []) if isinstance(s, str) and s in peaks})
    top = max([float(peaks[s]) for s in used], default=float(max(peaks.values(), default=1)))
    if bandwidth:
        x = np.geomspace(lo, hi, 64)
        ax.plot(x, np.minimum(bandwidth * x, top), color=PALETTE["grey"], lw=1.2,
                label=None)  # fmt: skip
        ax.annotate(f"HBM {bandwidth:g} TB/s", (lo * 1.2, bandwidth * lo * 1.3), fontsize="x-small",
                    color=PALETTE["grey"])  # fmt: skip
    for name in used:
        peak = float(peaks[name])
        start = peak / bandwidth if bandwidth else lo
        ax.plot([max(start, lo), hi], [peak, peak], color=PALETTE["grey"], lw=1, ls="--")
        ax.annotate(f"{name} {peak:g}", (hi / 1.05, peak * 1.08), ha="right", fontsize="x-small",
                    color=PALETTE["grey"])  # fmt: skip
