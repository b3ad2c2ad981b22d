"""The host-side time breakdown: the CPU analogue of the GPU breakdown, for CPU-only runs.

A CPU-only run (gloo) records no GPU events, so a GPU breakdown has nothing to say. Its trace
still shows the same two activities side by side: the main thread issues collectives
(``c10d::allreduce_``, a few µs) and computes (ATen ops), while gloo's worker thread(s) do the
communication, recorded as ``user_annotation`` events named ``gloo:all_reduce``,
``gloo:all_gather``, ... — a communication stream beside a compute stream. The host breakdown
classifies host ops with the ``host`` table of the :class:`~aorta.trace.classify.Rules`
(``compute`` / ``communication`` / ``other``) and does the GPU breakdown's interval arithmetic
per rank:

- *communication* = ∪ of the communication events (default: ``gloo:*``, ``mpi:*``, ``ucc:*``);
  the threads they run on are *communication threads*;
- *computation* = ∪ of the compute ops (default: namespaced ``cpu_op``\\s such as ``aten::mm``)
  on every other thread. Wrappers (``autograd::engine::evaluate_function: ...``,
  ``GeluBackward0``, ``torch::autograd::*``) and collective calls (``c10d::*``,
  ``record_param_comms``) are not compute: a thread that blocks waiting for a collective does
  so inside such a wrapper, and counting it would hide the wait;
- ``exposed_comm_time`` = \\|communication − computation\\|; ``busy_time`` = \\|∪ both\\|;
  ``total_time`` = first start to last end of the counted events; ``idle_time`` = total −
  busy (Python, the dispatcher, and waits that no communication explains);
  ``exposed_memcpy_time`` and ``total_memcpy_time`` are 0 (no host op is a copy here).

Host collectives (:func:`aorta.trace.collectives.collectives` with ``device="host"``) are
these communication events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from . import links
from .breakdown import breakdown, breakdown_table
from .classify import HOST_CLASSES

if TYPE_CHECKING:
    from .model import Trace

__all__ = ["communication_rows", "compute_rows", "host_timeline"]

_COMPUTE, _COMM = HOST_CLASSES.index("compute"), HOST_CLASSES.index("communication")


def communication_rows(trace: Trace) -> np.ndarray:
    """Event rows of host communication work (``gloo:all_reduce``, ...), by the ``host`` rules.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 5), ("user_annotation", "gloo:all_reduce", 1, 9, {"tid": 7})])
    >>> communication_rows(t).tolist()
    [1]
    """
    rows: np.ndarray = trace.op_rows[trace.host_cls == _COMM]
    return rows


def compute_rows(trace: Trace) -> np.ndarray:
    """Event rows of host compute ops, leaving out every op on a communication thread.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 5), ("user_annotation", "gloo:all_reduce", 1, 9, {"tid": 7}),
    ...                      ("cpu_op", "aten::copy_", 2, 1, {"tid": 7})])
    >>> compute_rows(t).tolist()
    [0]
    """
    rows, cls = trace.op_rows, trace.host_cls
    comm, compute = rows[cls == _COMM], rows[cls == _COMPUTE]
    if comm.size and compute.size:
        comm_key, compute_key = links.thread_groups(trace, comm, compute)
        compute = compute[~np.isin(compute_key, comm_key)]
    return np.asarray(compute)


def host_timeline(trace: Trace) -> pd.DataFrame:
    """The host-side breakdown, one block of rows per rank, in the shape of ``gpu_timeline``.

    See the module docstring for the definitions; every rank with host ops gets the rows of
    :data:`~aorta.trace.breakdown.BREAKDOWN_TYPES`.

    Returns
    -------
    pandas.DataFrame
        Columns ``rank``, ``type``, ``time ms``, ``percent`` (of ``total_time``). Empty, with
        ``attrs["note"]``, when the trace has no compute or communication host ops.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 10),
    ...                      ("user_annotation", "gloo:all_reduce", 5, 15, {"tid": 7})])
    >>> t.host_timeline().set_index("type")["time ms"].mul(1000).to_dict()["exposed_comm_time"]
    10.0
    """
    comm, compute = communication_rows(trace), compute_rows(trace)
    rows = np.concatenate([compute, comm])
    cls = np.concatenate([np.zeros(compute.size, np.int8), np.ones(comm.size, np.int8)])
    ts, rank = trace.column("ts")[rows], trace.column("rank")[rows]
    end = ts + np.maximum(trace.column("dur")[rows], 0)
    frames = [
        breakdown_table(breakdown(ts[rank == r], end[rank == r], cls[rank == r]), {"rank": int(r)})
        for r in np.unique(rank)
    ]
    if not frames:
        empty = pd.DataFrame(
            {"rank": pd.Series(dtype=np.int64), "type": pd.Series(dtype=object)}
            | {"time ms": [], "percent": []}
        )
        empty.attrs["note"] = "no host compute or communication ops"
        return empty
    frame = pd.concat(frames, ignore_index=True)
    frame.attrs["units"] = {"time ms": "ms", "percent": "% of total_time"}
    return frame
