"""The time breakdown: interval arithmetic over classed intervals, shared by GPU and host.

One sweep over the sorted start/end points gives, for every elementary segment, which classes
cover it:

- ``computation_time`` = |∪ compute|
- ``exposed_comm_time`` = |∪ communication − ∪ compute|
- ``exposed_memcpy_time`` = |∪ memcpy − ∪ compute − ∪ communication|
- ``busy_time`` = |∪ all|, ``total_time`` = last end − first start, ``idle_time`` = total − busy
- ``total_comm_time`` = |∪ communication|, ``total_memcpy_time`` = |∪ memcpy|

so computation + exposed comm + exposed memcpy + idle = total, whatever the overlap. The GPU
breakdown (:mod:`aorta.trace.timeline`), the per-step one (:mod:`aorta.trace.steps`) and the
host's (:mod:`aorta.trace.host`) are this arithmetic on different intervals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from .classify import GPU_CLASSES

if TYPE_CHECKING:
    from .model import GpuOps

__all__ = ["BREAKDOWN_TYPES", "breakdown", "breakdown_table", "counted_gpu_ops"]

#: Row order of the TraceLens ``gpu_timeline`` table.
BREAKDOWN_TYPES: tuple[str, ...] = (
    "computation_time",
    "exposed_comm_time",
    "exposed_memcpy_time",
    "busy_time",
    "idle_time",
    "total_time",
    "total_comm_time",
    "total_memcpy_time",
)
_COMPUTE, _COMM, _MEMCPY, _MEMSET = (
    GPU_CLASSES.index(c) for c in ("compute", "communication", "memcpy", "memset")
)


def breakdown(start: np.ndarray, end: np.ndarray, cls: np.ndarray) -> dict[str, int]:
    """The breakdown of intervals ``[start, end)`` with class codes ``cls`` (0 compute,
    1 communication, 2 memcpy; any other code is ignored), in the units of the input.

    Examples
    --------
    >>> b = breakdown(np.array([0, 5, 30]), np.array([10, 20, 40]), np.array([0, 1, 2]))
    >>> b["computation_time"], b["exposed_comm_time"], b["exposed_memcpy_time"], b["idle_time"], b["total_time"]
    (10, 10, 10, 10, 40)
    """
    keep = (cls == _COMPUTE) | (cls == _COMM) | (cls == _MEMCPY)
    start, end, cls = start[keep], np.maximum(end[keep], start[keep]), cls[keep]
    if start.size == 0:
        return dict.fromkeys(BREAKDOWN_TYPES, 0)
    points = np.concatenate([start, end])
    order = np.argsort(points, kind="stable")
    seg = np.diff(points[order])
    step = np.concatenate([np.ones(start.size, np.int32), -np.ones(end.size, np.int32)])[order]
    both_cls = np.concatenate([cls, cls])[order]
    cover = {
        c: np.cumsum(np.where(both_cls == c, step, 0))[:-1] > 0 for c in (_COMPUTE, _COMM, _MEMCPY)
    }
    comp, comm, mem = cover[_COMPUTE], cover[_COMM], cover[_MEMCPY]
    busy = int(seg[comp | comm | mem].sum())
    total = int(end.max() - start.min())
    return {
        "computation_time": int(seg[comp].sum()),
        "exposed_comm_time": int(seg[comm & ~comp].sum()),
        "exposed_memcpy_time": int(seg[mem & ~comp & ~comm].sum()),
        "busy_time": busy,
        "idle_time": total - busy,
        "total_time": total,
        "total_comm_time": int(seg[comm].sum()),
        "total_memcpy_time": int(seg[mem].sum()),
    }


def breakdown_table(parts: dict[str, int], keys: dict[str, int]) -> pd.DataFrame:
    """A :func:`breakdown` (in ns) as rows ``type``, ``time ms``, ``percent`` (of
    ``total_time``), after one constant column per item of ``keys``.

    Examples
    --------
    >>> parts = breakdown(np.array([0, 5]), np.array([10, 20]), np.array([0, 1]))
    >>> breakdown_table(parts, {"rank": 3}).iloc[:2].to_dict("list")
    {'rank': [3, 3], 'type': ['computation_time', 'exposed_comm_time'], 'time ms': [1e-05, 1e-05], 'percent': [50.0, 50.0]}
    """
    total = parts["total_time"]
    frame = pd.DataFrame(
        {"type": list(BREAKDOWN_TYPES), "time ms": [parts[t] / 1e6 for t in BREAKDOWN_TYPES]}
    )
    frame["percent"] = [100.0 * parts[t] / total if total else np.nan for t in BREAKDOWN_TYPES]
    for i, (key, value) in enumerate(keys.items()):
        frame.insert(i, key, value)
    return frame


def counted_gpu_ops(
    ops: GpuOps,
    *,
    include_unlinked: bool,
    memset: Literal["ignore", "memcpy", "compute"],
) -> tuple[GpuOps, np.ndarray]:
    """The GPU ops a breakdown counts, and their class codes after the ``memset`` policy.

    Without ``include_unlinked`` only ops with a launching runtime call in the trace count
    (TraceLens' default); fills count as nothing (``"ignore"``, code -1), copies or compute.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("kernel", "k", 0, 10), ("gpu_memset", "Memset", 20, 5)])
    >>> ops, cls = counted_gpu_ops(t.gpu_ops, include_unlinked=False, memset="memcpy")
    >>> [GPU_CLASSES[c] for c in cls]
    ['compute', 'memcpy']
    """
    if not include_unlinked:
        ops = ops.take(ops.linked)
    cls = ops.cls.astype(np.int8, copy=True)
    cls[cls == _MEMSET] = {"ignore": -1, "memcpy": _MEMCPY, "compute": _COMPUTE}[memset]
    return ops, cls
