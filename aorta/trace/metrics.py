"""A handful of numbers per rank: what a sweep's Dataset keeps of each trace.

:func:`rank_metrics` reduces a trace to one row per rank — the time breakdown (GPU, or the
host's for a rank without GPU ops), the achieved GEMM TFLOP/s, the bus bandwidth of each
collective type and the time the rank waited at collectives for the last rank to arrive.
:func:`table_metrics` does the same from the tables alone, so TraceLens reports (see
:func:`aorta.trace.read_tracelens`) give the same numbers. :data:`METRICS` describes each
number (long name, units, and which direction is worse — what ``ranks="worst"`` of
:func:`aorta.compare` keeps across ranks).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from .classify import GPU_CLASSES
from .collectives import bus_factor
from .perf import rank_family_metrics

if TYPE_CHECKING:
    from .model import Trace

__all__ = ["BUSBW", "METRICS", "PERF", "busbw_name", "rank_metrics", "table_metrics"]

#: Per-rank metrics: name → (long name, units, the worse direction: "higher" or "lower").
METRICS: dict[str, tuple[str, str, str]] = {
    "computation_ms": ("computation time", "ms", "higher"),
    "exposed_comm_ms": ("exposed communication time", "ms", "higher"),
    "exposed_memcpy_ms": ("exposed memcpy time", "ms", "higher"),
    "busy_ms": ("busy time", "ms", "higher"),
    "idle_ms": ("idle time", "ms", "higher"),
    "total_ms": ("profiled span", "ms", "higher"),
    "total_comm_ms": ("communication time", "ms", "higher"),
    "gemm_tflops": ("achieved GEMM throughput", "TFLOP/s", "lower"),
    "straggler_wait_ms": ("time waiting at collectives for the last rank", "ms", "higher"),
    "last_to_enter_pct": ("share of matched collectives it entered last", "%", "higher"),
    "profiled_steps": ("profiled steps", "", "higher"),
    "perf_coverage": ("share of GPU kernel time with a perf model", "%", "lower"),
    # From the trace's [memory] events (profile_memory=True), read by aorta.trace.memory: the
    # loaded Trace keeps no instant events, so aorta.matrix.trace_metrics fills these per file.
    "peak_allocated_bytes": ("peak memory allocated (accelerator, else CPU)", "bytes", "higher"),
    "peak_reserved_bytes": ("peak memory reserved (accelerator, else CPU)", "bytes", "higher"),
}
#: The per-collective bus bandwidth metrics are named ``busbw_<collective>_gbps``.
BUSBW = re.compile(r"^busbw_(?P<collective>[a-z_]+)_gbps$")
#: The per-family perf metrics (:func:`aorta.trace.perf.rank_family_metrics`):
#: ``tflops_<family>`` (achieved TFLOP/s) and ``pct_roofline_<family>`` (% of the roofline).
PERF = re.compile(r"^(?P<kind>tflops|pct_roofline)_(?P<family>[A-Za-z][A-Za-z0-9_]*)$")
_COMM = GPU_CLASSES.index("communication")
_ROWS = {
    "computation_ms": "computation_time",
    "exposed_comm_ms": "exposed_comm_time",
    "exposed_memcpy_ms": "exposed_memcpy_time",
    "busy_ms": "busy_time",
    "idle_ms": "idle_time",
    "total_ms": "total_time",
    "total_comm_ms": "total_comm_time",
}


def busbw_name(collective: str) -> str:
    """The metric name of a collective type's bus bandwidth.

    >>> busbw_name("all_reduce")
    'busbw_all_reduce_gbps'
    """
    return f"busbw_{collective}_gbps"


def rank_metrics(trace: Trace, *, device: Literal["auto", "gpu", "host"] = "auto") -> pd.DataFrame:
    """One row per rank of ``trace``: the numbers a sweep's Dataset keeps of it.

    Parameters
    ----------
    device
        ``"auto"``: each rank's GPU breakdown when it has GPU ops, else its host breakdown
        (:func:`aorta.trace.timeline.timeline`), and the GPU's collectives when the trace has
        communication kernels, else the host's; ``"gpu"`` / ``"host"`` force one.

    Returns
    -------
    pandas.DataFrame
        Index ``rank``; ``source`` (``gpu`` or ``host``), the columns of :data:`METRICS`,
        one ``busbw_<collective>_gbps`` per collective type seen, and for a trace with GPU ops
        ``perf_coverage`` and one ``tflops_<family>`` / ``pct_roofline_<family>`` per perf-model
        family (see :data:`PERF`; the roofline against the trace's own GPU when known). NaN where a trace cannot tell
        (no GEMM with shapes, a single rank for the straggler wait, ...). See
        :func:`table_metrics` for how each is computed.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("user_annotation", "ProfilerStep#0", 0, 100),
    ...     ("cpu_op", "aten::mm", 0, 40, {"Input Dims": [[100, 100], [100, 100]], "Input type": ["float", "float"]}),
    ...     ("user_annotation", "gloo:all_reduce", 30, 50, {"tid": 7, "Input Dims": [[1000]], "Input type": ["float"]})],
    ...     header={"distributedInfo": {"rank": 0, "world_size": 2}})
    >>> m = rank_metrics(t).round(6)
    >>> m[["source", "computation_ms", "exposed_comm_ms", "gemm_tflops", "busbw_all_reduce_gbps"]].to_dict("records")
    [{'source': 'host', 'computation_ms': 0.04, 'exposed_comm_ms': 0.04, 'gemm_tflops': 0.05, 'busbw_all_reduce_gbps': 0.08}]
    """
    timeline = trace.timeline(device=device)
    if device == "auto":
        device = "gpu" if (trace.gpu_ops.cls == _COMM).any() else "host"
    calls = trace.collectives(device=device)
    skew = trace.collective_skew(device=device) if len(trace.ranks) > 1 else None
    gemms = trace.gemms(by="call")
    steps = trace.find(
        cats=["user_annotation", "cpu_op"], names=re.compile(r"^ProfilerStep#").match
    )
    n_steps = pd.Series(trace.column("rank")[steps]).value_counts()
    frame = table_metrics(timeline, gemms=gemms, collectives=calls, skew=skew, ranks=trace.ranks)
    frame["profiled_steps"] = [float(n_steps.get(r, 0)) for r in frame.index]
    if len(trace.gpu_ops):
        perf = rank_family_metrics(trace)
        frame["perf_coverage"] = perf["perf_coverage"].reindex(frame.index)
        families = perf.drop(columns=["perf_coverage"]).reindex(frame.index)
        frame = pd.concat([frame, families[sorted(families.columns)]], axis=1)
    return frame


def _time_column(gemms: pd.DataFrame, source: str) -> pd.Series:
    if source == "host" and "cpu_time" in gemms:
        return gemms["cpu_time"]
    return gemms["gpu_time"] if "gpu_time" in gemms else pd.Series(np.nan, index=gemms.index)


def _gemm_tflops(gemms: pd.DataFrame | None, source: str) -> float:
    """Total FLOPs / total time of the GEMMs that have both (TFLOP/s)."""
    if gemms is None or gemms.empty or "flops" not in gemms:
        return math.nan
    time_us = _time_column(gemms, source).to_numpy(dtype=float)
    count = gemms["count"].to_numpy(dtype=float) if "count" in gemms else 1.0
    flops = gemms["flops"].to_numpy(dtype=float) * count
    ok = np.isfinite(flops) & np.isfinite(time_us) & (time_us > 0)
    if not ok.any():
        return math.nan
    return float(flops[ok].sum() / (time_us[ok].sum() * 1e-6) / 1e12)


def _busbw(calls: pd.DataFrame | None) -> dict[str, float]:
    """Per collective type: Σ bytes × bus factor / Σ time (decimal GB/s)."""
    if calls is None or calls.empty:
        return {}
    count = calls["count"].to_numpy(dtype=float) if "count" in calls else np.ones(len(calls))
    seconds = calls["dur"].to_numpy(dtype=float) * count / 1e6
    factor = np.array(
        [bus_factor(c, n) for c, n in zip(calls["collective"], calls["group_size"], strict=True)],
        dtype=float,
    )
    bus_bytes = calls["bytes"].to_numpy(dtype=float) * factor * count
    ok = np.isfinite(bus_bytes) & np.isfinite(seconds) & (seconds > 0)
    out = {}
    for collective in sorted(set(calls["collective"][ok])):
        pick = ok & (calls["collective"] == collective).to_numpy()
        out[busbw_name(collective)] = float(bus_bytes[pick].sum() / seconds[pick].sum() / 1e9)
    return out


def table_metrics(
    timeline: pd.DataFrame,
    *,
    gemms: pd.DataFrame | None = None,
    collectives: pd.DataFrame | None = None,
    skew: pd.DataFrame | None = None,
    ranks: list[int] | None = None,
) -> pd.DataFrame:
    """Per-rank metrics from the tables of one trace (or of a TraceLens report).

    - the ``*_ms`` times are the rows of the breakdown (``timeline``: the columns of
      :func:`~aorta.trace.timeline.timeline`; without ``rank``/``source``, one rank 0 from the
      GPU), in ms over the profiled window;
    - ``gemm_tflops`` = Σ FLOPs / Σ time over the GEMMs with known shapes and a time (GPU time,
      or the op's host time for a ``host`` rank; rows may carry a ``count``);
    - ``busbw_<collective>_gbps`` = Σ bytes × the nccl-tests bus factor / Σ duration over the
      calls of that type with known sizes (rows may carry a ``count``, ``dur`` is per call);
    - ``straggler_wait_ms`` = Σ ``wait`` of the rank in ``skew``
      (:func:`~aorta.trace.collectives.collective_skew`): the time it spent at collectives
      waiting for the last rank; NaN without one;
    - ``last_to_enter_pct`` = 100 × the share of the rank's matched collectives in ``skew``
      that it started last (its ``last``; ranks that start together are all last); NaN
      without one.

    Examples
    --------
    >>> tl = pd.DataFrame({"type": ["computation_time", "exposed_comm_time"], "time ms": [3.0, 1.0]})
    >>> table_metrics(tl)[["source", "computation_ms", "exposed_comm_ms"]].to_dict("records")
    [{'source': 'gpu', 'computation_ms': 3.0, 'exposed_comm_ms': 1.0}]
    """
    timeline = timeline.assign(
        rank=timeline.get("rank", 0),
        source=timeline.get("source", "gpu"),
    )
    ranks = sorted(set(ranks or []) | set(timeline["rank"].astype(int)))
    rows: list[dict[str, Any]] = []
    for rank in ranks:
        mine = timeline[timeline["rank"] == rank]
        source = str(mine["source"].iloc[0]) if len(mine) else "none"
        times = mine.set_index("type")["time ms"]
        row: dict[str, Any] = {"rank": rank, "source": source}
        row |= {m: float(times.get(t, math.nan)) for m, t in _ROWS.items()}
        row["gemm_tflops"] = _gemm_tflops(_of_rank(gemms, rank), source)
        row["straggler_wait_ms"] = _wait(skew, rank)
        row["last_to_enter_pct"] = _last_share(skew, rank)
        row |= _busbw(_of_rank(collectives, rank))
        rows.append(row)
    frame = pd.DataFrame(rows).set_index("rank")
    for name in METRICS:
        if name not in frame:
            frame[name] = math.nan
    busbw = sorted(c for c in frame.columns if BUSBW.match(c))
    return frame[["source", *METRICS, *busbw]]


def _of_rank(table: pd.DataFrame | None, rank: int) -> pd.DataFrame | None:
    if table is None or "rank" not in table:
        return table
    return table[table["rank"] == rank]


def _wait(skew: pd.DataFrame | None, rank: int) -> float:
    if skew is None or skew.empty:
        return math.nan
    mine = skew[skew["rank"] == rank]
    return float(mine["wait"].sum() / 1e3) if len(mine) else math.nan


def _last_share(skew: pd.DataFrame | None, rank: int) -> float:
    if skew is None or skew.empty:
        return math.nan
    mine = skew.loc[skew["rank"] == rank, "last"]
    return float(mine.astype(bool).mean() * 100.0) if len(mine) else math.nan
