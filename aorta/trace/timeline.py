"""GPU time breakdown (TraceLens-compatible) and idle time per stream by cause.

The breakdown is the interval arithmetic of :mod:`aorta.trace.breakdown` over GPU ops, per
class, across streams.

TraceLens compatibility (checked against its own output on three traces, see
``docs/traces.md``): only GPU ops with a launching runtime call in the trace count (TraceLens'
default ``include_unlinked_kernels=False``), and ``gpu_memset`` events are left out of every
class (TraceLens does not count them). Both are options here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from .breakdown import breakdown, breakdown_table, counted_gpu_ops
from .host import host_timeline

if TYPE_CHECKING:
    from .model import Trace

__all__ = ["gpu_timeline", "idle_causes", "timeline"]


def gpu_timeline(
    trace: Trace,
    *,
    by: Literal["rank", "device"] = "rank",
    include_unlinked: bool = False,
    memset: Literal["ignore", "memcpy", "compute"] = "ignore",
) -> pd.DataFrame:
    """The TraceLens ``gpu_timeline`` table: where GPU time went.

    Parameters
    ----------
    trace
        The trace.
    by
        ``"rank"``: all of a rank's GPU ops in one breakdown (what TraceLens reports for a
        single-rank trace); ``"device"``: one breakdown per (rank, device).
    include_unlinked
        Also count GPU ops whose launching runtime call is not in the trace (TraceLens:
        ``include_unlinked_kernels``).
    memset
        What fills (``gpu_memset``, rocclr fill kernels) count as: ``"ignore"`` (TraceLens),
        ``"memcpy"`` or ``"compute"``.

    Returns
    -------
    pandas.DataFrame
        Columns ``rank`` (and ``device``), ``type`` (the rows of :data:`~aorta.trace.breakdown.BREAKDOWN_TYPES`),
        ``time ms`` and ``percent`` (of ``total_time``). ``df[["type", "time ms", "percent"]]``
        of a single rank is TraceLens' CSV. A trace without GPU ops gives an empty table whose
        ``attrs["note"]`` says so.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("kernel", "gemm", 0, 10), ("kernel", "ncclKernel_AllReduce", 5, 10),
    ...                      ("gpu_memcpy", "Memcpy HtoD", 30, 10)])
    >>> t.gpu_timeline().set_index("type")["time ms"].to_dict()["exposed_comm_time"]
    0.005
    """
    ops, cls = counted_gpu_ops(trace.gpu_ops, include_unlinked=include_unlinked, memset=memset)
    keys = ["rank"] if by == "rank" else ["rank", "device"]
    frames = []
    groups = pd.DataFrame({"rank": ops.rank, "device": ops.device}).groupby(keys, sort=True).indices
    for key, idx in groups.items():
        values = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        frames.append(breakdown_table(breakdown(ops.ts[idx], ops.end[idx], cls[idx]), values))
    if not frames:
        empty = pd.DataFrame(
            {
                **{k: pd.Series(dtype=np.int64) for k in keys},
                "type": pd.Series(dtype=object),
                "time ms": [],
                "percent": [],
            }
        )
        if len(trace.gpu_ops) == 0:
            empty.attrs["note"] = "no GPU events (kernel/gpu_memcpy/gpu_memset)"
        else:
            empty.attrs["note"] = (
                "no GPU events linked to a runtime call (include_unlinked=True counts them all)"
            )
        return empty
    frame = pd.concat(frames, ignore_index=True)
    frame.attrs["units"] = {"time ms": "ms", "percent": "% of total_time"}
    return frame


def timeline(
    trace: Trace,
    *,
    device: Literal["auto", "gpu", "host"] = "auto",
    include_unlinked: bool = False,
    memset: Literal["ignore", "memcpy", "compute"] = "ignore",
) -> pd.DataFrame:
    """The time breakdown of each rank, from its GPU ops or, for a rank without any, its host ops.

    Parameters
    ----------
    device
        ``"auto"``: per rank, :func:`gpu_timeline` when the rank has GPU ops, else
        :func:`~aorta.trace.host.host_timeline`; ``"gpu"`` / ``"host"``: that one for every
        rank.
    include_unlinked, memset
        As for :func:`gpu_timeline`.

    Returns
    -------
    pandas.DataFrame
        The columns of ``gpu_timeline(by="rank")`` plus ``source`` (``gpu`` or ``host``).
        Ranks with nothing to break down have no rows.

    Examples
    --------
    >>> from aorta.trace import Trace
    >>> from aorta.trace.testing import synthetic_trace
    >>> gpu = synthetic_trace([("kernel", "gemm", 0, 10)], header={"distributedInfo": {"rank": 0}})
    >>> cpu = synthetic_trace([("cpu_op", "aten::mm", 0, 10)], header={"distributedInfo": {"rank": 1}})
    >>> t = timeline(Trace.concat([gpu, cpu]))
    >>> t[t["type"] == "computation_time"][["rank", "source", "time ms"]].to_dict("list")
    {'rank': [0, 1], 'source': ['gpu', 'host'], 'time ms': [0.01, 0.01]}
    """
    with_gpu = set(np.unique(trace.gpu_ops.rank).tolist())
    use_gpu = {r: device == "gpu" or (device == "auto" and r in with_gpu) for r in trace.ranks}
    frames = []
    if any(use_gpu.values()):
        gpu = gpu_timeline(trace, include_unlinked=include_unlinked, memset=memset)
        frames.append(gpu[gpu["rank"].map(use_gpu).astype(bool)].assign(source="gpu"))
    if not all(use_gpu.values()):
        host = host_timeline(trace)
        frames.append(host[~host["rank"].map(use_gpu).astype(bool)].assign(source="host"))
    frame = pd.concat(frames, ignore_index=True).sort_values("rank", kind="stable")
    frame = frame.reset_index(drop=True)
    frame.attrs["units"] = {"time ms": "ms", "percent": "% of total_time"}
    return frame


def idle_causes(trace: Trace, *, kernel_wait_us: float = 10.0) -> pd.DataFrame:
    """Idle gaps between consecutive GPU ops of each stream, by cause.

    For each gap before an op on a stream (the op starts after everything before it on the
    stream ended):

    - ``host_wait``: the op's launching runtime call started after the previous op ended —
      the GPU waited for the CPU to submit work;
    - ``kernel_wait``: otherwise, if the gap is shorter than ``kernel_wait_us`` — the overhead
      between back-to-back queued ops;
    - ``other``: the rest (waiting for another stream, an event, a synchronisation), and gaps
      before ops whose launch is not in the trace.

    These are HTA's idle-time categories (``get_idle_time_breakdown``), for CUDA and HIP alike.

    Returns
    -------
    pandas.DataFrame
        One row per (rank, device, stream): ``host_wait``, ``kernel_wait``, ``other``,
        ``idle`` (their sum) and ``span`` (first start to last end), all in µs, and ``gaps``.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("kernel", "a", 0, 10), ("kernel", "b", 40, 10, {"launch_ts": 30}),
    ...                      ("kernel", "c", 55, 5, {"launch_ts": 1})])
    >>> t.idle_causes()[["host_wait", "kernel_wait", "other"]].iloc[0].tolist()
    [30.0, 5.0, 0.0]
    """
    ops = trace.gpu_ops
    columns = [
        "rank",
        "device",
        "stream",
        "host_wait",
        "kernel_wait",
        "other",
        "idle",
        "span",
        "gaps",
    ]
    if len(ops) == 0:
        empty = pd.DataFrame({c: [] for c in columns})
        empty.attrs["note"] = "no GPU events"
        return empty
    ops = ops.take(np.lexsort((ops.ts, ops.stream, ops.device, ops.rank)))
    stream = np.stack([ops.rank, ops.device, ops.stream])
    same = np.r_[False, (stream[:, 1:] == stream[:, :-1]).all(axis=0)]  # as the op before
    end = ops.end
    group_start = np.flatnonzero(~same)
    # the latest end so far within the stream (ops on a stream may nest when traces are odd)
    prev_end = np.empty_like(end)
    for a, b in zip(group_start, np.r_[group_start[1:], end.size], strict=True):
        prev_end[a:b] = np.maximum.accumulate(end[a:b])
    before = np.r_[0, prev_end[:-1]]
    gap = np.where(same, np.maximum(ops.ts - before, 0), 0)
    host = same & ops.linked & (ops.launch_ts > before) & (gap > 0)
    kernel = same & ~host & ops.linked & (gap > 0) & (gap < kernel_wait_us * 1000)
    other = same & (gap > 0) & ~host & ~kernel
    frame = pd.DataFrame(
        {
            "rank": ops.rank,
            "device": ops.device,
            "stream": ops.stream,
            "host_wait": np.where(host, gap, 0),
            "kernel_wait": np.where(kernel, gap, 0),
            "other": np.where(other, gap, 0),
            "gaps": (gap > 0).astype(np.int64),
            "ts": ops.ts,
            "end": end,
        }
    )
    out = frame.groupby(["rank", "device", "stream"], sort=True).agg(
        host_wait=("host_wait", "sum"),
        kernel_wait=("kernel_wait", "sum"),
        other=("other", "sum"),
        gaps=("gaps", "sum"),
        first=("ts", "min"),
        last=("end", "max"),
    )
    for column in ("host_wait", "kernel_wait", "other"):
        out[column] = out[column] / 1e3
    out["idle"] = out["host_wait"] + out["kernel_wait"] + out["other"]
    out["span"] = (out["last"] - out["first"]) / 1e3
    out = out.reset_index()[columns]
    out.attrs["units"] = dict.fromkeys(("host_wait", "kernel_wait", "other", "idle", "span"), "us")
    return out
