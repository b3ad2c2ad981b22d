"""Summary tables: GPU time per kernel, CPU and launched GPU time per CPU op.

Durations in these tables are microseconds (``attrs["units"]`` says so per column).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from . import links
from .classify import GPU_CLASSES

if TYPE_CHECKING:
    from .model import Trace

__all__ = ["kernels", "launched_gpu_time", "ops"]


def launched_gpu_time(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU work launched from inside each host event of ``rows`` (inclusive of nested ops).

    A GPU op belongs to a host event when the runtime call that launched it ran on the same
    (rank, pid, tid) within the event's span. Returns ``(gpu_ns, n_ops, longest)``: total GPU
    op duration (ns), number of GPU ops, and the event row of the longest one (``-1`` if none).

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 10), ("kernel", "k1", 12, 30, {"launch_ts": 2}),
    ...                      ("kernel", "k2", 50, 5, {"launch_ts": 20})])
    >>> ns, n, longest = launched_gpu_time(t, t.op_rows)
    >>> ns.tolist(), n.tolist(), t.categories("name")[t.column("name")[longest[0]]]
    ([30000], [1], 'k1')
    """
    gpu, rt = trace.gpu_ops, trace.runtime_rows
    n = rows.size
    gpu_ns = np.zeros(n, np.int64)
    count = np.zeros(n, np.int64)
    longest = np.full(n, -1, np.int64)
    linked = gpu.linked
    if n == 0 or rt.size == 0 or not linked.any():
        return gpu_ns, count, longest
    # per runtime call: the GPU time it launched, and its longest op
    launch_idx = np.searchsorted(rt, gpu.launch[linked])
    dur = gpu.end[linked] - gpu.ts[linked]
    per_rt_ns = np.bincount(launch_idx, weights=dur, minlength=rt.size).astype(np.int64)
    per_rt_n = np.bincount(launch_idx, minlength=rt.size)
    best, best_dur = np.full(rt.size, -1, np.int64), np.full(rt.size, -1, np.int64)
    by_dur = np.lexsort((dur, launch_idx))  # the last op of each runtime call is its longest
    best[launch_idx[by_dur]] = gpu.row[linked][by_dur]
    best_dur[launch_idx[by_dur]] = dur[by_dur]
    ts = trace.column("ts")
    group, rt_group = links.thread_groups(trace, rows, rt)
    order, lo, hi = links.contained_ranges(
        group, ts[rows], ts[rows] + trace.column("dur")[rows], rt_group, ts[rt]
    )
    cum_ns = np.r_[0, np.cumsum(per_rt_ns[order])]
    cum_n = np.r_[0, np.cumsum(per_rt_n[order])]
    gpu_ns, count = cum_ns[hi] - cum_ns[lo], cum_n[hi] - cum_n[lo]
    longest = links.segment_argmax(best_dur[order], lo, hi, best[order])
    return gpu_ns, count, longest


def kernels(trace: Trace, *, by_rank: bool = False) -> pd.DataFrame:
    """GPU time per GPU op name (kernels, copies and fills), longest total first.

    Parameters
    ----------
    trace
        The trace.
    by_rank
        One row per (rank, name) instead of per name across ranks.

    Returns
    -------
    pandas.DataFrame
        ``name``, ``cat``, ``class`` (compute/communication/memcpy/memset), ``gemm_family``,
        ``count``, ``total``, ``mean``, ``median``, ``min``, ``max`` (µs) and ``percent`` of
        the summed GPU op time.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("kernel", "Cijk_Ailk_Bljk", 0, 10), ("kernel", "Cijk_Ailk_Bljk", 20, 30)])
    >>> t.kernels()[["name", "gemm_family", "count", "total"]].to_dict("records")
    [{'name': 'Cijk_Ailk_Bljk', 'gemm_family': 'tensile', 'count': 2, 'total': 40.0}]
    """
    gpu = trace.gpu_ops
    names, cats = trace.categories("name"), trace.categories("cat")
    cat_codes = trace.column("cat")[gpu.row]
    frame = pd.DataFrame(
        {
            "rank": gpu.rank,
            "name": pd.Categorical.from_codes(gpu.name, categories=names),
            "cat": pd.Categorical.from_codes(cat_codes, categories=cats),
            "class": pd.Categorical.from_codes(gpu.cls, categories=list(GPU_CLASSES)),
            "dur": (gpu.end - gpu.ts) / 1e3,
        }
    )
    keys = ["rank", "name", "cat", "class"] if by_rank else ["name", "cat", "class"]
    out = (
        frame.groupby(keys, observed=True, sort=False)["dur"]
        .agg(["count", "sum", "mean", "median", "min", "max"])
        .reset_index()
    )
    out = out.rename(columns={"sum": "total"})
    out["gemm_family"] = [
        trace.rules.gemm_family(str(n), str(c)) or ""
        for n, c in zip(out["name"], out["cat"], strict=True)
    ]
    grand = out["total"].sum()
    out["percent"] = 100.0 * out["total"] / grand if grand else np.nan
    out = out.sort_values("total", ascending=False, kind="stable").reset_index(drop=True)
    for column in ("name", "cat", "class"):
        out[column] = out[column].astype(str)
    out = out[
        [
            *keys[:-3],
            "name",
            "cat",
            "class",
            "gemm_family",
            "count",
            "total",
            "mean",
            "median",
            "min",
            "max",
            "percent",
        ]
    ]
    out.attrs["units"] = dict.fromkeys(("total", "mean", "median", "min", "max"), "us")
    return out


def ops(trace: Trace, *, by_rank: bool = False) -> pd.DataFrame:
    """CPU time and launched GPU time per CPU op name (``cpu_op`` events), longest first.

    ``cpu_total`` is the ops' wall time on the host (inclusive of nested ops); ``gpu_total``
    the duration of the GPU ops launched from inside them (inclusive too, so nested ops both
    count the same kernel: compare rows of one nesting level).

    Returns
    -------
    pandas.DataFrame
        ``name``, ``count``, ``cpu_total``, ``cpu_mean``, ``gpu_total``, ``gpu_mean`` (µs) and
        ``gpu_ops`` (number launched); with ``by_rank`` also ``rank``.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 10), ("kernel", "k1", 12, 30, {"launch_ts": 2})])
    >>> t.ops()[["name", "cpu_total", "gpu_total", "gpu_ops"]].to_dict("records")
    [{'name': 'aten::mm', 'cpu_total': 10.0, 'gpu_total': 30.0, 'gpu_ops': 1}]
    """
    cpu = trace.find(cats=["cpu_op"])
    gpu_ns, n_gpu, _ = launched_gpu_time(trace, cpu)
    frame = pd.DataFrame(
        {
            "rank": trace.column("rank")[cpu],
            "name": pd.Categorical.from_codes(
                trace.column("name")[cpu], categories=trace.categories("name")
            ),
            "cpu": trace.column("dur")[cpu] / 1e3,
            "gpu": gpu_ns / 1e3,
            "gpu_ops": n_gpu,
        }
    )
    keys = ["rank", "name"] if by_rank else ["name"]
    out = frame.groupby(keys, observed=True, sort=False).agg(
        count=("cpu", "size"),
        cpu_total=("cpu", "sum"),
        cpu_mean=("cpu", "mean"),
        gpu_total=("gpu", "sum"),
        gpu_mean=("gpu", "mean"),
        gpu_ops=("gpu_ops", "sum"),
    )
    out = (
        out.reset_index()
        .sort_values(["cpu_total"], ascending=False, kind="stable")
        .reset_index(drop=True)
    )
    out["name"] = out["name"].astype(str)
    out.attrs["units"] = dict.fromkeys(("cpu_total", "cpu_mean", "gpu_total", "gpu_mean"), "us")
    return out
