"""GEMM FLOPs and achieved TFLOP/s from the ops' ``Input Dims``.

Counted ops: ``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``, and ``aten::linear`` /
``aten::matmul`` only when they are leaves (no GEMM op nested inside them on the same thread),
so a ``linear → matmul → mm`` chain counts once. FLOPs are ``2·B·M·N·K`` (bias additions are
not counted). The GPU time of an op is the duration of the GPU ops launched from inside it
(see :func:`~aorta.trace.tables.launched_gpu_time`).
"""

from __future__ import annotations

import json
import math
from functools import reduce
from operator import mul
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from . import links
from .tables import launched_gpu_time

if TYPE_CHECKING:
    from .model import Trace

__all__ = ["GEMM_OPS", "gemm_shape", "gemms"]

#: GEMM ops and the positions of their two matrix operands in ``Input Dims``.
GEMM_OPS: dict[str, tuple[int, int]] = {
    "aten::mm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::bmm": (0, 1),
    "aten::baddbmm": (1, 2),
    "aten::_scaled_mm": (0, 1),
    "aten::linear": (0, 1),
    "aten::matmul": (0, 1),
}
_LEAF_ONLY = frozenset({"aten::linear", "aten::matmul"})
_NAN_SHAPE = (math.nan, math.nan, math.nan, math.nan)
_UNITS = {"ts": "ns", "gpu_time": "us", "cpu_time": "us", "tflops": "TFLOP/s"}


def _prod(values: list[int]) -> int:
    return reduce(mul, values, 1)


def gemm_shape(op: str, dims: list[list[int]] | None) -> tuple[float, float, float, float]:
    """``(batch, M, N, K)`` of a GEMM op from its ``Input Dims``; NaNs when unknown.

    Examples
    --------
    >>> gemm_shape("aten::addmm", [[512], [141, 512], [512, 2048], [], []])
    (1, 141, 2048, 512)
    >>> gemm_shape("aten::linear", [[1, 141, 512], [2048, 512], [2048]])
    (1, 141, 2048, 512)
    >>> gemm_shape("aten::baddbmm", [[8, 4, 5], [8, 4, 3], [8, 3, 5], [], []])
    (8, 4, 5, 3)
    >>> gemm_shape("aten::matmul", [[2, 1, 4, 3], [5, 3, 6]])
    (10, 4, 6, 3)
    """
    if op not in GEMM_OPS or not isinstance(dims, list):
        return _NAN_SHAPE
    i, j = GEMM_OPS[op]
    if len(dims) <= j or not all(
        isinstance(d, list) and all(isinstance(x, int) for x in d) for d in (dims[i], dims[j])
    ):
        return _NAN_SHAPE
    a, b = dims[i], dims[j]
    if op == "aten::linear":  # x [..., K] @ weight[N, K]^T
        if len(b) != 2 or not a or a[-1] != b[1]:
            return _NAN_SHAPE
        return 1, _prod(a[:-1]), b[0], a[-1]
    if op == "aten::matmul":
        return _matmul_shape(a, b)
    if len(a) != len(b) or len(a) not in (2, 3) or a[-1] != b[-2]:
        return _NAN_SHAPE
    batch = a[0] if len(a) == 3 else 1
    return batch, a[-2], b[-1], a[-1]


def _matmul_shape(a: list[int], b: list[int]) -> tuple[float, float, float, float]:
    if not a or not b:
        return _NAN_SHAPE
    a2 = [1, *a] if len(a) == 1 else a  # a vector is a row
    b2 = [*b, 1] if len(b) == 1 else b  # ... or a column
    if a2[-1] != b2[-2]:
        return _NAN_SHAPE
    batch_a, batch_b = a2[:-2], b2[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + batch_a
    batch_b = [1] * (width - len(batch_b)) + batch_b
    if any(x != y and 1 not in (x, y) for x, y in zip(batch_a, batch_b, strict=True)):
        return _NAN_SHAPE
    batch = _prod([max(x, y) for x, y in zip(batch_a, batch_b, strict=True)])
    return batch, a2[-2], b2[-1], a2[-1]


def _dtype(text: str | float) -> str:
    """The first tensor element type in an ``Input type`` JSON list ("" when unknown)."""
    if not isinstance(text, str):
        return ""
    try:
        types = json.loads(text)
    except ValueError:
        return ""
    for t in types if isinstance(types, list) else []:
        if (
            isinstance(t, str)
            and t
            and t not in ("Scalar", "ScalarList", "TensorList", "GenericList")
        ):
            return t.replace("c10::", "")
    return ""


def _leaf(trace: Trace, rows: np.ndarray, names: list[str]) -> np.ndarray:
    """True for rows with no other GEMM op starting inside them on the same thread."""
    ts, end = trace.column("ts")[rows], trace.column("ts")[rows] + trace.column("dur")[rows]
    (group,) = links.thread_groups(trace, rows)
    _, lo, hi = links.contained_ranges(group, ts, end, group, ts)
    leaf: np.ndarray = ((hi - lo) <= 1) | ~np.isin(names, list(_LEAF_ONLY))
    return leaf


def gemms(trace: Trace, *, by: Literal["shape", "call"] = "shape") -> pd.DataFrame:
    """GEMM ops with their FLOPs and achieved TFLOP/s.

    Parameters
    ----------
    by
        ``"shape"``: one row per (op, batch, M, N, K, dtype), most GPU time first;
        ``"call"``: one row per op call, in time order.

    Returns
    -------
    pandas.DataFrame
        ``op``, ``batch``, ``M``, ``N``, ``K``, ``dtype``, ``flops`` (per call), ``gpu_time``
        (µs of GPU ops launched by the op; per call, or summed), ``cpu_time`` (µs the op ran on
        the host, the GEMM's own time on a CPU-only run), ``tflops`` (achieved TFLOP/s = FLOPs /
        GPU time), ``kernel`` (the longest GPU op it launched) and
        ``family`` (its GEMM family); ``count`` by shape; ``rank``, ``ts`` (ns) by call.
        Ops recorded without shapes (``record_shapes=False``) have NaN FLOPs.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 10, {"Input Dims": [[1024, 512], [512, 256]], "Input type": ["float", "float"]}),
    ...                      ("kernel", "Cijk_Alik_Bljk_SB", 12, 100, {"launch_ts": 2})])
    >>> row = t.gemms().iloc[0]
    >>> int(row["flops"]), round(float(row["tflops"]), 3), row["family"]
    (268435456, 2.684, 'tensile')
    """
    calls = _calls(trace)
    if by == "call":
        return calls
    return _by_shape(calls)


def _calls(trace: Trace) -> pd.DataFrame:
    """One row per counted GEMM op call, in time order."""
    rows = trace.find(cats=["cpu_op"], names=GEMM_OPS)
    names = trace.categories("name")
    op_names = [names[c] for c in trace.column("name")[rows]]
    keep = _leaf(trace, rows, op_names) if rows.size else np.zeros(0, bool)
    rows, op_names = rows[keep], [n for n, k in zip(op_names, keep, strict=True) if k]
    gpu_ns, _, longest = launched_gpu_time(trace, rows)
    dims_cats, type_cats = trace.categories("input_dims"), trace.categories("input_type")
    dims_codes, type_codes = trace.column("input_dims")[rows], trace.column("input_type")[rows]
    parsed = {c: json.loads(dims_cats[c]) for c in set(dims_codes.tolist()) if c >= 0}
    shape = np.array(
        [gemm_shape(op, parsed.get(int(c))) for op, c in zip(op_names, dims_codes, strict=True)],
        dtype=float,
    ).reshape(-1, 4)
    calls = pd.DataFrame(
        {"rank": trace.column("rank")[rows], "ts": trace.column("ts")[rows], "op": op_names}
    )
    calls[["batch", "M", "N", "K"]] = pd.DataFrame(shape).astype("Int64")
    calls["dtype"] = [_dtype(type_cats[c]) if c >= 0 else "" for c in type_codes]
    calls["flops"] = 2.0 * shape.prod(axis=1)
    calls["gpu_time"] = np.where(gpu_ns > 0, gpu_ns / 1e3, np.nan)
    calls["cpu_time"] = trace.column("dur")[rows] / 1e3
    calls["tflops"] = calls["flops"] / (calls["gpu_time"] * 1e-6) / 1e12
    calls["kernel"] = [names[trace.column("name")[r]] if r >= 0 else "" for r in longest]
    calls["family"] = [(trace.rules.gemm_family(k) or "") if k else "" for k in calls["kernel"]]
    calls = calls.sort_values(["rank", "ts"], kind="stable").reset_index(drop=True)
    calls.attrs["units"] = _UNITS
    return calls


def _by_shape(calls: pd.DataFrame) -> pd.DataFrame:
    """Calls grouped by (op, shape, dtype); TFLOP/s over the calls that launched GPU work."""
    keys = ["op", "batch", "M", "N", "K", "dtype"]
    calls = calls.assign(timed_flops=calls["flops"].where(calls["gpu_time"].notna()))
    grouped = calls.groupby(keys, dropna=False, sort=False).agg(
        count=("flops", "size"),
        flops=("flops", "first"),
        timed_flops=("timed_flops", "sum"),
        timed=("timed_flops", "count"),
        gpu_time=("gpu_time", "sum"),
        cpu_time=("cpu_time", "sum"),
        kernel=("kernel", "first"),
        family=("family", "first"),
    )
    grouped = grouped.reset_index()
    timed_flops = grouped["timed_flops"].where(grouped["timed"] > 0)
    grouped["tflops"] = timed_flops / (grouped["gpu_time"].replace(0, np.nan) * 1e-6) / 1e12
    grouped = grouped.sort_values("gpu_time", ascending=False, kind="stable").reset_index(drop=True)
    grouped = grouped[
        [*keys, "count", "flops", "gpu_time", "cpu_time", "tflops", "kernel", "family"]
    ]
    grouped.attrs["units"] = _UNITS
    return grouped
