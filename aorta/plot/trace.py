"""Figures for traces: GPU time breakdown, a timeline window, GEMM TFLOP/s, collective
bandwidth and a straggler heatmap.

Each function takes the table an :class:`aorta.trace.Trace` method returns (``timeline`` takes
the trace), returns a :class:`matplotlib.figure.Figure`, draws into ``ax=`` when given and never
touches pyplot state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from aorta.trace.classify import GPU_CLASSES

from .style import PALETTE, aorta_style, new_axes

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from aorta.trace import Trace

__all__ = [
    "collective_bandwidth",
    "gemm_tflops",
    "gpu_breakdown",
    "memory_timeline",
    "straggler_heatmap",
    "timeline",
]

#: Colours of the GPU op classes and breakdown parts.
CLASS_COLORS: dict[str, str] = {
    "compute": PALETTE["blue"],
    "communication": PALETTE["orange"],
    "memcpy": PALETTE["green"],
    "memset": PALETTE["purple"],
    "idle": PALETTE["grey"],
}
_PARTS = (
    ("computation_time", "computation", "compute"),
    ("exposed_comm_time", "exposed comm", "communication"),
    ("exposed_memcpy_time", "exposed memcpy", "memcpy"),
    ("idle_time", "idle", "idle"),
)


def _empty(ax: Axes, message: str) -> None:
    ax.text(
        0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color=PALETTE["grey"]
    )
    ax.set_xticks([])
    ax.set_yticks([])


def gpu_breakdown(table: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """Stacked bars of computation / exposed comm / exposed memcpy / idle per rank (or device).

    Parameters
    ----------
    table
        :meth:`Trace.gpu_timeline` (``by="rank"`` or ``by="device"``).

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> fig = gpu_breakdown(synthetic_trace([("kernel", "k", 0, 10)]).gpu_timeline())
    >>> fig.axes[0].get_xlabel()
    'GPU time (ms)'
    """
    with aorta_style():
        fig, ax = new_axes(ax)
        if table.empty:
            _empty(ax, table.attrs.get("note", "no GPU events"))
            return fig
        keys = [k for k in ("rank", "device") if k in table.columns]
        wide = table.pivot_table(index=keys, columns="type", values="time ms", aggfunc="first")
        labels = [
            " / ".join(
                f"{k} {v}"
                for k, v in zip(keys, idx if isinstance(idx, tuple) else (idx,), strict=True)
            )
            for idx in wide.index
        ]
        left = np.zeros(len(wide))
        for column, label, cls in _PARTS:
            values = wide[column].to_numpy(dtype=float)
            ax.barh(labels, values, left=left, color=CLASS_COLORS[cls], label=label)
            left += values
        ax.set_xlabel("GPU time (ms)")
        ax.invert_yaxis()
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=4)
        ax.set_title("GPU time breakdown")
    return fig


def timeline(
    trace: Trace,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    ranks: list[int] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """GPU ops of each (rank, device, stream) as bars coloured by class, within a time window.

    Parameters
    ----------
    start_ns, end_ns
        The window, in the trace's ns clock (default: everything).
    ranks
        Ranks to show (default: all).

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> fig = timeline(synthetic_trace([("kernel", "k", 0, 10), ("gpu_memcpy", "Memcpy", 12, 3)]))
    >>> fig.axes[0].get_xlabel()
    'time from window start (ms)'
    """
    ops = trace.gpu_ops
    lo = int(ops.ts.min()) if start_ns is None and len(ops) else (start_ns or 0)
    hi = int(ops.end.max()) if end_ns is None and len(ops) else (end_ns or 0)
    keep = (ops.end >= lo) & (ops.ts <= hi)
    if ranks is not None:
        keep &= np.isin(ops.rank, ranks)
    ops = ops.take(keep)
    with aorta_style():
        fig, ax = new_axes(ax, figsize=(9.0, 3.5))
        if len(ops) == 0:
            _empty(ax, "no GPU ops in this window")
            return fig
        lanes = sorted(
            set(zip(ops.rank.tolist(), ops.device.tolist(), ops.stream.tolist(), strict=True))
        )
        lane_of = {lane: i for i, lane in enumerate(lanes)}
        y = np.array(
            [
                lane_of[k]
                for k in zip(
                    ops.rank.tolist(), ops.device.tolist(), ops.stream.tolist(), strict=True
                )
            ]
        )
        for code, cls in enumerate(GPU_CLASSES):
            sel = ops.cls == code
            if sel.any():
                ax.barh(
                    y[sel],
                    (ops.end[sel] - ops.ts[sel]) / 1e6,
                    left=(ops.ts[sel] - lo) / 1e6,
                    height=0.8,
                    color=CLASS_COLORS[cls],
                    label=cls,
                    linewidth=0,
                )
        ax.set_yticks(range(len(lanes)), [f"r{r} d{d} s{s}" for r, d, s in lanes])
        ax.set_xlim(0, (hi - lo) / 1e6)
        ax.set_xlabel("time from window start (ms)")
        ax.invert_yaxis()
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=4)
        ax.set_title("GPU timeline")
    return fig


def gemm_tflops(table: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """Achieved TFLOP/s against FLOPs per call, one point per GEMM shape, coloured by family.

    Parameters
    ----------
    table
        :meth:`Trace.gemms` (by shape or by call).

    Examples
    --------
    >>> import pandas as pd
    >>> fig = gemm_tflops(pd.DataFrame({"flops": [1e9, 1e12], "tflops": [10.0, 300.0], "family": ["tensile", "hipblaslt"]}))
    >>> fig.axes[0].get_xscale()
    'log'
    """
    with aorta_style():
        fig, ax = new_axes(ax)
        data = (
            table[
                np.isfinite(table["flops"].to_numpy(dtype=float))
                & np.isfinite(table["tflops"].to_numpy(dtype=float))
            ]
            if len(table)
            else table
        )
        if data.empty:
            _empty(ax, "no GEMMs with shapes and GPU time")
            return fig
        for family, group in data.groupby(data["family"].replace("", "unknown"), sort=True):
            size = (
                20 + 10 * np.sqrt(group["count"].to_numpy(dtype=float)) if "count" in group else 20
            )
            ax.scatter(group["flops"], group["tflops"], s=size, alpha=0.8, label=family)
        ax.set_xscale("log")
        ax.set_xlabel("FLOPs per call")
        ax.set_ylabel("achieved TFLOP/s")
        ax.legend(title="kernel family")
        ax.set_title("GEMM throughput")
    return fig


def collective_bandwidth(
    table: pd.DataFrame, *, kind: Literal["busbw", "algbw"] = "busbw", ax: Axes | None = None
) -> Figure:
    """Bus (or algorithm) bandwidth against message size, one point per call, by collective.

    Parameters
    ----------
    table
        :meth:`Trace.collectives`.
    kind
        ``"busbw"`` (nccl-tests bus bandwidth) or ``"algbw"``.

    Examples
    --------
    >>> import pandas as pd
    >>> fig = collective_bandwidth(pd.DataFrame({"bytes": [1e6, 1e8], "busbw": [5.0, 80.0], "algbw": [3.0, 45.0],
    ...                                          "collective": ["all_reduce", "all_reduce"]}))
    >>> fig.axes[0].get_ylabel()
    'busbw (GB/s)'
    """
    with aorta_style():
        fig, ax = new_axes(ax)
        data = (
            table[
                np.isfinite(table["bytes"].to_numpy(dtype=float))
                & np.isfinite(table[kind].to_numpy(dtype=float))
            ]
            if len(table)
            else table
        )
        if data.empty:
            _empty(ax, "no collectives with known message sizes")
            return fig
        for name, group in data.groupby("collective", sort=True):
            ax.scatter(group["bytes"], group[kind], s=24, alpha=0.8, label=name)
        ax.set_xscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(f"{kind} (GB/s)")
        ax.legend(title="collective")
        ax.set_title("Collective bandwidth")
    return fig


def straggler_heatmap(
    table: pd.DataFrame, *, value: Literal["lateness", "wait"] = "lateness", ax: Axes | None = None
) -> Figure:
    """Ranks × matched collectives, coloured by how late each rank arrived (or how long it waited).

    Parameters
    ----------
    table
        :meth:`Trace.collective_skew`.
    value
        ``"lateness"`` (start − earliest start) or ``"wait"`` (latest start − start), in µs.

    Examples
    --------
    >>> import pandas as pd
    >>> skew = pd.DataFrame({"pg": ["0"] * 4, "seq": [0, 0, 1, 1], "rank": [0, 1, 0, 1], "lateness": [0.0, 5.0, 2.0, 0.0]})
    >>> fig = straggler_heatmap(skew)
    >>> fig.axes[0].get_ylabel()
    'rank'
    """
    with aorta_style():
        fig, ax = new_axes(ax, figsize=(8.0, 3.5))
        if table.empty:
            _empty(ax, table.attrs.get("note", "no collectives matched across ranks"))
            return fig
        grid = table.pivot_table(
            index="rank", columns=["pg", "seq"], values=value, aggfunc="first", sort=True
        )
        image = ax.imshow(
            grid.to_numpy(dtype=float), aspect="auto", cmap="magma_r", interpolation="nearest"
        )
        ax.set_yticks(range(len(grid.index)), [str(r) for r in grid.index])
        ax.set_ylabel("rank")
        ax.set_xlabel("collective (in order)")
        ax.grid(False)
        fig.colorbar(image, ax=ax, label=f"{value} (µs)")
        ax.set_title("Straggler heatmap")
    return fig


def memory_timeline(report: Any, *, ax: Axes | None = None) -> Figure:
    """Allocated (solid) and reserved (dashed) memory over time per device of a
    :class:`aorta.trace.memory.MemoryReport`, in GiB against seconds from the first event,
    the steps' starts as vertical lines and each device's allocated peak marked.

    >>> from aorta.trace.memory import report_from_events
    >>> ev = [{"ph": "i", "name": "[memory]", "ts": t, "tid": 1, "args": {"Bytes": 1,
    ...        "Total Allocated": t, "Total Reserved": 9, "Device Type": 1, "Device Id": 0}}
    ...       for t in range(5)]
    >>> fig = memory_timeline(report_from_events(ev))
    >>> fig.axes[0].get_ylabel()
    'GiB'
    """
    with aorta_style():
        fig, ax = new_axes(ax)
        _memory(report, ax)
    return fig


def _memory(report: Any, ax: Axes) -> None:
    timelines = dict(report.timelines)
    if not timelines:
        _empty(ax, "no [memory] events (profile with profile_memory=True)")
        return
    t0 = min(float(t["ts_us"].iloc[0]) for t in timelines.values())
    gib = float(1 << 30)
    for name, t in timelines.items():
        x = (t["ts_us"].to_numpy() - t0) / 1e6
        (line,) = ax.step(
            x, t["allocated"].to_numpy() / gib, where="post", label=f"{name} allocated"
        )
        ax.step(
            x,
            t["reserved"].to_numpy() / gib,
            where="post",
            linestyle="--",
            color=line.get_color(),
            label=f"{name} reserved",
        )
        allocated = t["allocated"].to_numpy(dtype=float)
        if np.isnan(allocated).all():
            continue  # no event gave the device's total: no peak to mark (NaN draws nothing)
        at = int(np.nanargmax(allocated))
        ax.plot([x[at]], [allocated[at] / gib], marker="o", color=line.get_color())
    for i, (_, start) in enumerate(report.steps):
        ax.axvline(
            (start - t0) / 1e6, color="0.6", linewidth=0.8, label="step start" if i == 0 else None
        )
    ax.set_xlabel("seconds from the first allocation")
    ax.set_ylabel("GiB")
    ax.set_title("memory over time")
    ax.legend(fontsize=8, loc="best")
