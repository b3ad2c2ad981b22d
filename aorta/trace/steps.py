"""Per-iteration tables: one row per ``ProfilerStep#N`` of each rank."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from .breakdown import breakdown, counted_gpu_ops

if TYPE_CHECKING:
    from .model import Trace

__all__ = ["STEP_NAME", "steps"]

#: The name of a step annotation (`ProfilerStep#N`); group 1 is N.
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_PARTS = (
    "computation",
    "exposed_comm",
    "exposed_memcpy",
    "busy",
    "idle",
    "total_comm",
    "total_memcpy",
)


def _step_number(name: str) -> int:
    """``ProfilerStep#7`` → 7 (``name`` was found by :data:`STEP_NAME`)."""
    match = STEP_NAME.match(name)
    if match is None:
        raise ValueError(f"not a ProfilerStep annotation: {name!r}")
    return int(match.group(1))


def steps(
    trace: Trace,
    *,
    include_unlinked: bool = False,
    memset: Literal["ignore", "memcpy", "compute"] = "ignore",
) -> pd.DataFrame:
    """One row per profiler step (the host ``ProfilerStep#N`` annotations) of each rank.

    A GPU op belongs to the step during which its launching runtime call ran (an unlinked op,
    with ``include_unlinked``, to the step during which it started). Its GPU time is broken down
    as in :func:`~aorta.trace.timeline.gpu_timeline`, over the span from the step's first GPU
    op start to its last GPU op end.

    Parameters
    ----------
    include_unlinked, memset
        As for :func:`~aorta.trace.timeline.gpu_timeline`.

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``step``, ``cpu_start`` (ns), ``cpu_time``, ``gpu_start`` (ns),
        ``gpu_time`` (span), ``computation``, ``exposed_comm``, ``exposed_memcpy``, ``busy``,
        ``idle``, ``total_comm``, ``total_memcpy`` (µs) and ``gpu_ops``. Empty (with
        ``attrs["note"]``) when the trace has no ProfilerStep annotations.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("user_annotation", "ProfilerStep#3", 0, 100), ("user_annotation", "ProfilerStep#4", 100, 100),
    ...                      ("kernel", "a", 10, 10, {"launch_ts": 5}), ("kernel", "b", 120, 20, {"launch_ts": 110})])
    >>> t.steps()[["step", "cpu_time", "gpu_time", "computation"]].to_dict("list")
    {'step': [3, 4], 'cpu_time': [100.0, 100.0], 'gpu_time': [10.0, 20.0], 'computation': [10.0, 20.0]}
    """
    columns = ["rank", "step", "cpu_start", "cpu_time", "gpu_start", "gpu_time", *_PARTS, "gpu_ops"]
    rows = trace.find(cats=["user_annotation", "cpu_op"], names=STEP_NAME.match)
    if rows.size == 0:
        empty = pd.DataFrame({c: [] for c in columns})
        empty.attrs["note"] = "no ProfilerStep annotations in the trace"
        return empty
    ops, cls = counted_gpu_ops(trace.gpu_ops, include_unlinked=include_unlinked, memset=memset)
    when = np.where(ops.launch_ts >= 0, ops.launch_ts, ops.ts)
    ts, dur, rank = trace.column("ts"), trace.column("dur"), trace.column("rank")
    names = trace.categories("name")
    records = []
    for r in np.unique(rank[rows]):
        mine = rows[rank[rows] == r]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        starts, ends = ts[mine], ts[mine] + dur[mine]
        on_rank = ops.rank == r
        which = np.searchsorted(starts, when, side="right") - 1
        inside = np.flatnonzero(on_rank & (which >= 0) & (when < ends[np.maximum(which, 0)]))
        inside = inside[np.argsort(which[inside], kind="stable")]
        bounds = np.searchsorted(which[inside], np.arange(mine.size + 1))
        for k, row in enumerate(mine):
            idx = inside[bounds[k] : bounds[k + 1]]
            parts = breakdown(ops.ts[idx], ops.end[idx], cls[idx])
            records.append(
                {
                    "rank": int(r),
                    "step": _step_number(names[trace.column("name")[row]]),
                    "cpu_start": int(starts[k]),
                    "cpu_time": (ends[k] - starts[k]) / 1e3,
                    "gpu_start": int(ops.ts[idx].min()) if idx.size else -1,
                    "gpu_time": parts["total_time"] / 1e3,
                    **{p: parts[f"{p}_time"] / 1e3 for p in _PARTS},
                    "gpu_ops": int(idx.size),
                }
            )
    out = pd.DataFrame.from_records(records, columns=columns)
    out.attrs["units"] = {"cpu_start": "ns", "gpu_start": "ns"} | dict.fromkeys(
        ("cpu_time", "gpu_time", *_PARTS), "us"
    )
    return out
