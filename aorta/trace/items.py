"""Per-step time of each kernel, host op or class, per rank: what :func:`aorta.explain` adds up.

:func:`step_items` turns one trace into the table that a step-time difference is decomposed
over. Unlike :func:`aorta.trace.diff` (inclusive host times, whole window), it is built to add
up within a step:

- only work inside the rank's profiled steps counts (between the first ``ProfilerStep#N``'s
  start and the last one's end; a GPU op by the time its launching call ran, so the kernels
  of the last step count even when they finish after the host moved on);
- host ops (``cpu_op`` and ``user_annotation``, without the ``ProfilerStep#N`` annotations
  themselves) count their **self** time — their duration less that of the ops nested in them
  on the same thread — so an op and its children are not counted twice, and a block such as
  ``record_function("injected")`` owns exactly the time nothing inside it explains;
- each item's time is divided by the rank's number of steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from . import links
from .classify import GPU_CLASSES, HOST_CLASSES
from .diff import KERNEL_NAME_RULES, normalize_kernel_name
from .model import Trace
from .steps import STEP_NAME

__all__ = ["ITEMS_BY", "self_times", "step_items"]

ItemsBy = Literal["kernel", "op", "class"]
#: The values ``step_items(by=...)`` (and :func:`aorta.explain`) take.
ITEMS_BY: tuple[str, ...] = ("kernel", "op", "class")


def self_times(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Self time (ns) of each host event of ``rows``: its duration less the time of the events
    of ``rows`` nested directly in it on the same (rank, pid, tid).

    An event that starts inside another and outlasts it counts only up to the outer one's end.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "outer", 0, 10), ("cpu_op", "inner", 2, 3),
    ...                      ("cpu_op", "innermost", 3, 1), ("cpu_op", "other_thread", 0, 10, {"tid": 9})])
    >>> sorted((self_times(t, t.op_rows) / 1e3).tolist())
    [1.0, 2.0, 7.0, 10.0]
    """
    n = rows.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    ts = trace.column("ts")[rows]
    dur = trace.column("dur")[rows]
    end = ts + dur
    (group,) = links.thread_groups(trace, rows)
    order = np.lexsort((-dur, ts, group))
    nested = np.zeros(n, dtype=np.int64)
    ts_l, end_l, group_l = ts.tolist(), end.tolist(), group.tolist()
    stack: list[int] = []
    current = -1
    for i in order.tolist():
        if group_l[i] != current:
            stack, current = [], group_l[i]
        while stack and end_l[stack[-1]] <= ts_l[i]:
            stack.pop()
        if stack:
            parent = stack[-1]
            nested[parent] += min(end_l[i], end_l[parent]) - ts_l[i]
        stack.append(i)
    own: np.ndarray = np.maximum(dur - nested, 0)
    return own


#: Per rank with steps: (first step start, last step end, number of steps, mean step ns).
Windows = dict[int, tuple[int, int, int, float]]


def _windows(trace: Trace) -> Windows:
    """Per rank with steps: (first step start, last step end, number of steps, mean step ns)."""
    rows = trace.find(cats=["user_annotation", "cpu_op"], names=STEP_NAME.match)
    out: Windows = {}
    if rows.size == 0:
        return out
    rank, ts, dur = (trace.column(c)[rows] for c in ("rank", "ts", "dur"))
    for r in np.unique(rank).tolist():
        mine = rank == r
        start, stop = int(ts[mine].min()), int((ts[mine] + dur[mine]).max())
        out[int(r)] = (start, stop, int(mine.sum()), float(dur[mine].mean()))
    return out


def _inside(rank: np.ndarray, when: np.ndarray, windows: Windows) -> np.ndarray:
    keep = np.zeros(rank.size, dtype=bool)
    for r, (start, stop, _, _) in windows.items():
        keep |= (rank == r) & (when >= start) & (when < stop)
    return keep


def _host_items(trace: Trace, windows: Windows) -> pd.DataFrame:
    rows = trace.op_rows
    names = np.asarray(trace.categories("name"), dtype=object)
    codes = trace.column("name")[rows]
    is_step = np.array([bool(STEP_NAME.match(n)) for n in names], dtype=bool)
    keep = ~is_step[codes] if names.size else np.zeros(rows.size, bool)
    rows, cls = rows[keep], trace.host_cls[keep]
    own = self_times(trace, rows)
    rank, ts = trace.column("rank")[rows], trace.column("ts")[rows]
    inside = _inside(rank, ts, windows)
    return pd.DataFrame(
        {
            "rank": rank[inside],
            "item": names[trace.column("name")[rows[inside]]],
            "class": np.asarray(HOST_CLASSES, dtype=object)[cls[inside]],
            "dur": own[inside] / 1e3,
        }
    )


def _gpu_items(
    trace: Trace, windows: Windows, name_rules: Sequence[tuple[str, object]]
) -> pd.DataFrame:
    gpu = trace.gpu_ops
    when = np.where(gpu.linked, gpu.launch_ts, gpu.ts)
    inside = _inside(gpu.rank, when, windows)
    gpu = gpu.take(inside)
    names = trace.categories("name")
    unique, inverse = np.unique(gpu.name, return_inverse=True)
    folded = np.array(
        [normalize_kernel_name(names[u], rules=name_rules) for u in unique], dtype=object
    )
    return pd.DataFrame(
        {
            "rank": gpu.rank,
            "item": folded[inverse] if unique.size else np.empty(0, object),
            "class": np.asarray(GPU_CLASSES, dtype=object)[gpu.cls],
            "dur": (gpu.end - gpu.ts) / 1e3,
        }
    )


def step_items(
    trace: Trace,
    *,
    by: ItemsBy = "kernel",
    name_rules: Sequence[tuple[str, object]] = KERNEL_NAME_RULES,
) -> pd.DataFrame:
    """Per rank, the time per step of each item inside the profiled steps.

    Parameters
    ----------
    trace
        One or more ranks.
    by
        ``"kernel"``: GPU ops (kernels, copies, fills) by :func:`normalize_kernel_name`;
        ``"op"``: host ops (``cpu_op`` and ``user_annotation`` such as
        ``record_function`` blocks and ``gloo:*`` work) by name, **self** time
        (:func:`self_times`); ``"class"``: per rank, the GPU classes (compute, communication,
        memcpy, memset) when the rank has GPU ops, else the host classes (compute,
        communication, other) of the host ops' self time.
    name_rules
        The rules of :func:`normalize_kernel_name` (``by="kernel"`` only).

    Returns
    -------
    pandas.DataFrame
        One row per (rank, item), ranks with steps only: ``rank``, ``item``, ``class``,
        ``per_step`` (µs per step), ``calls`` (per step). ``attrs["steps"]``: per rank
        ``{"steps": n, "step_us": mean ProfilerStep duration}``; ``attrs["units"]``.

    Raises
    ------
    ValueError
        ``by`` is not one of :data:`ITEMS_BY`.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("user_annotation", "ProfilerStep#1", 0, 100), ("cpu_op", "aten::mm", 10, 30),
    ...                      ("user_annotation", "injected", 50, 40), ("cpu_op", "aten::add", 60, 5)])
    >>> step_items(t, by="op")[["item", "per_step", "calls"]].to_dict("records")
    [{'item': 'injected', 'per_step': 35.0, 'calls': 1.0}, {'item': 'aten::mm', 'per_step': 30.0, 'calls': 1.0}, {'item': 'aten::add', 'per_step': 5.0, 'calls': 1.0}]
    >>> step_items(t, by="op").attrs["steps"]
    {0: {'steps': 1, 'step_us': 100.0}}
    """
    if by not in ITEMS_BY:
        raise ValueError(f"by must be one of {', '.join(ITEMS_BY)}, not {by!r}")
    windows = _windows(trace)
    if by == "op":
        items = _host_items(trace, windows)
    elif by == "kernel":
        items = _gpu_items(trace, windows, name_rules)
    else:
        gpu = _gpu_items(trace, windows, ())
        host = _host_items(trace, windows)
        host = host[~host["rank"].isin(set(gpu["rank"].tolist()))]
        items = pd.concat([gpu, host], ignore_index=True)
        items["item"] = items["class"]
    steps = pd.Series({r: w[2] for r, w in windows.items()}, dtype=float)
    grouped = items.groupby(["rank", "item"], sort=True)
    out = pd.DataFrame(
        {"class": grouped["class"].first(), "total": grouped["dur"].sum(), "n": grouped.size()}
    ).reset_index()
    per = out["rank"].map(steps).to_numpy(dtype=float)
    out = pd.DataFrame(
        {
            "rank": out["rank"].to_numpy(dtype=np.int64),
            "item": out["item"].astype(str).to_numpy(dtype=object),
            "class": out["class"].astype(str).to_numpy(dtype=object),
            "per_step": out["total"].to_numpy(dtype=float) / per,
            "calls": out["n"].to_numpy(dtype=float) / per,
        }
    )
    order = np.lexsort(
        (out["item"].to_numpy(), -out["per_step"].to_numpy(), out["rank"].to_numpy())
    )
    out = out.iloc[order].reset_index(drop=True)
    out.attrs = {
        "by": by,
        "units": {"per_step": "us"},
        "steps": {r: {"steps": w[2], "step_us": w[3] / 1e3} for r, w in windows.items()},
    }
    return out
