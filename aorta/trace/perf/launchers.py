"""The rows of :func:`~aorta.trace.perf.perf_summary` for the GPU ops no model claims: each
counted under the CPU op that launched it.

The launching op is the innermost ``cpu_op`` whose span, on the runtime call's thread,
contains the runtime call that launched the GPU op — found by time containment, as the perf
model finds the GPU work of modelled ops, and as TraceLens and HTA do. The runtime call's
``External id`` is not used: some traces give runtime calls ids of their own that match no
CPU op (every launch in ``a100_nccl_sampled_rank-0``), and where the ids do match, the two
agree on every trace in ``tests/data``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .. import links
from ..classify import GPU_CLASSES

if TYPE_CHECKING:
    from ..model import Trace

__all__ = ["launching_ops", "unmodelled_rows"]

_COMM = GPU_CLASSES.index("communication")


def launching_ops(trace: Trace, rt_pos: np.ndarray) -> np.ndarray:
    """For runtime calls (positions in :attr:`Trace.runtime_rows`): the event row of the
    innermost ``cpu_op`` on the call's thread whose span contains the call, or -1.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "outer", 0, 100), ("cpu_op", "inner", 10, 20),
    ...                      ("cuda_runtime", "cudaLaunchKernel", 15, 2),
    ...                      ("cuda_runtime", "cudaLaunchKernel", 50, 2),
    ...                      ("cuda_runtime", "cudaLaunchKernel", 150, 2)])
    >>> [t.categories("name")[t.column("name")[r]] if r >= 0 else None
    ...  for r in launching_ops(t, np.arange(3)).tolist()]
    ['inner', 'outer', None]
    """
    cats = trace.categories("cat")
    if rt_pos.size == 0 or "cpu_op" not in cats:
        return np.full(rt_pos.size, -1, np.int64)
    ops = np.flatnonzero(trace.column("cat") == cats.index("cpu_op"))
    calls = trace.runtime_rows[rt_pos]
    ts, dur = trace.column("ts"), trace.column("dur")
    op_group, call_group = links.thread_groups(trace, ops, calls)
    pos = links.innermost(op_group, ts[ops], ts[ops] + dur[ops], call_group, ts[calls])
    return np.where(pos >= 0, ops[np.maximum(pos, 0)], -1)


def unmodelled_rows(trace: Trace, gpu_idx: np.ndarray) -> pd.DataFrame:
    """One row per (launching op, family) for the GPU ops ``gpu_idx`` (indices into
    :attr:`Trace.gpu_ops`, each linked to its runtime call): ``count`` (launching ops),
    ``kernel_us`` (summed GPU op duration), ``family`` ``"communication"`` for NCCL/RCCL
    kernels, else ``"other"``; a GPU op whose call no ``cpu_op`` contains is counted under its
    own name, one call each."""
    gpu = trace.gpu_ops
    op_row = launching_ops(trace, gpu.launch_rt[gpu_idx])
    names, name_codes = trace.categories("name"), trace.column("name")
    label = np.where(op_row >= 0, name_codes[np.maximum(op_row, 0)], gpu.name[gpu_idx])
    leaf = pd.DataFrame(
        {
            "op": [names[c] for c in label.tolist()],
            "event": np.where(op_row >= 0, op_row, -1 - gpu_idx),
            "ns": gpu.end[gpu_idx] - gpu.ts[gpu_idx],
            "family": np.where(gpu.cls[gpu_idx] == _COMM, "communication", "other"),
        }
    )
    per_event = leaf.groupby(["op", "family", "event"], sort=False)["ns"].sum().reset_index()
    out = per_event.groupby(["op", "family"], sort=False).agg(
        count=("event", "size"), kernel_us=("ns", "sum")
    )
    out["kernel_us"] /= 1e3
    return out.reset_index().assign(
        shape="", dtype="", dtypes="", strides="", unit="", has_model=False
    )
