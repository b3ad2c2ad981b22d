"""Per-op performance tables: FLOPs, bytes, achieved TFLOP/s and TB/s, roofline against a device.

``perf_ops`` is TraceLens's per-family sheets in one table (every modelled op, nested or not);
``perf_summary`` is its ``unified_perf_summary``: every GPU op counted once, under the outermost
op that has a model, else under the op that launched it. The formulas are in
:mod:`aorta.trace.perf.op_model`; the device peaks in :mod:`aorta.trace.devices`.

Kernel time of one call is the *busy time* of every GPU op (kernels, copies, fills) launched
from inside the op (the union of their intervals, as TraceLens does); the calls, their GPU
work and their rows come from :mod:`aorta.trace.perf.calls`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..classify import GPU_CLASSES
from ..devices import Device, resolve_device
from .calls import Calls, Grouping, calls, grouped_columns
from .launchers import unmodelled_rows
from .op_model import precision

if TYPE_CHECKING:
    from ..model import Trace

__all__ = [
    "PERF_COLUMNS",
    "add_roofline",
    "by_family",
    "coverage",
    "perf_ops",
    "perf_summary",
    "rank_family_metrics",
    "shapes_recorded",
]

_COMM = GPU_CLASSES.index("communication")
#: The columns of :func:`perf_ops` (without a device; ``add_roofline`` adds the roofline ones).
PERF_COLUMNS: tuple[str, ...] = (
    "op",
    "family",
    "shape",
    "dtype",
    "dtypes",
    "strides",
    "count",
    "flops",
    "bytes",
    "kernel_us",
    "tflops",
    "tbps",
    "intensity",
)
_ROOFLINE_COLUMNS = ("spec", "roofline_us", "bound", "pct_roofline", "roofline_note")
_UNITS = {
    "flops": "FLOP per call",
    "bytes": "bytes per call",
    "kernel_us": "us (summed over calls)",
    "tflops": "TFLOP/s",
    "tbps": "TB/s",
    "intensity": "FLOP/byte",
    "roofline_us": "us per call",
    "pct_roofline": "% (roofline time x count / kernel time)",
}


def perf_ops(trace: Trace, *, device: Device = None, by: Grouping = "args") -> pd.DataFrame:
    """FLOPs, bytes, achieved TFLOP/s and TB/s per op and arguments (TraceLens's per-family
    sheets in one table), and the roofline against ``device``.

    Parameters
    ----------
    trace
        The trace (recorded with ``record_shapes=True``: without shapes nothing is modelled).
    device
        ``None``: the trace's own GPU (``deviceProperties``) when :mod:`aorta.trace.devices`
        knows it, else no roofline columns; ``False``: no roofline; a device name (``"H100"``,
        ``"MI300X"``, ...); or a mapping in TraceLens's arch-file shape (``mem_bw_gbps``,
        ``max_achievable_tflops`` keyed ``matrix_bf16``, ``vector_fp32``, ...).
    by
        ``"args"`` (TraceLens's rows): one row per op × the model's parameters (shapes and
        the Concrete Inputs it reads) × the ``Input type`` and ``Input Strides`` of the tensors
        it reads — the same shape laid out two ways is two rows; ``"shape"``: one row per op ×
        parameters × first input's type, whatever the strides and the other types.

    Returns
    -------
    pandas.DataFrame
        One row per group, most kernel time first: ``op``, ``family``, ``shape`` (the
        parameters as text), ``dtype`` (the first input's), ``dtypes`` and ``strides`` (of the
        inputs the model reads; ``""`` with ``by="shape"``), ``count`` (calls), ``flops`` and
        ``bytes`` (per call), ``kernel_us`` (busy time of every GPU op — kernel, copy, fill —
        each call launched, summed over calls), ``tflops``, ``tbps`` (achieved, over the calls
        with GPU work), ``intensity`` (FLOP/byte), ``unit`` (matrix/vector); with a device also
        ``spec`` (``matrix_bf16``, ...), ``roofline_us`` (per call), ``bound``
        (compute/memory), ``pct_roofline`` (roofline time × count / kernel time × 100) and
        ``roofline_note`` (why a row has no roofline figure, or how it was found; ``""``
        otherwise). A wrapper op and its ``native_*`` child both appear, as in TraceLens.
        ``attrs["device"]`` names the device used.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 10, {"Input Dims": [[1024, 512], [512, 256]],
    ...                       "Input type": ["float", "float"], "Concrete Inputs": ["", ""]}),
    ...                      ("kernel", "Cijk_Alik_Bljk_SB", 12, 100, {"launch_ts": 2})])
    >>> row = t.perf_ops(device="MI300X").iloc[0]
    >>> row["family"], int(row["flops"]), float(row["kernel_us"]), row["bound"], round(float(row["pct_roofline"]), 2)
    ('GEMM', 268435456, 100.0, 'compute', 1.64)
    """
    found = calls(trace, by=by)
    columns = grouped_columns(found.records, found.group, found.kernel_ns)
    order = np.argsort(-columns["kernel_us"], kind="stable")  # most time first
    table = {c: columns[c][order] for c in (*PERF_COLUMNS, "unit")}
    resolved = resolve_device(trace, device)
    if resolved is not None:
        table |= _roofline(table, resolved)
    out = pd.DataFrame(table)  # one frame, built once
    if resolved is not None:
        out.attrs["device"] = resolved.get("name", "")
        out.attrs["peaks"] = "datasheet" if "sources" in resolved else "given"
    out.attrs["units"] = _UNITS
    return out


def add_roofline(table: pd.DataFrame, device: Mapping[str, Any]) -> pd.DataFrame:
    """``table`` (with ``flops``, ``bytes``, ``dtype``, ``unit``, ``count``, ``kernel_us``) plus
    ``spec``, ``roofline_us``, ``bound`` and ``pct_roofline`` for ``device`` (arch-file shape).

    Compute time uses the peak of the row's unit and precision (``matrix_bf16``, ...), memory
    time the HBM bandwidth; a row whose precision the device does not list gets NaN.

    Examples
    --------
    >>> t = pd.DataFrame({"flops": [2e9], "bytes": [1e6], "dtype": ["c10::BFloat16"], "unit": ["matrix"],
    ...                   "count": [1], "kernel_us": [10.0]})
    >>> dev = {"mem_bw_gbps": 5300, "max_achievable_tflops": {"matrix_bf16": 708}}
    >>> add_roofline(t, dev)[["spec", "bound"]].iloc[0].tolist()
    ['matrix_bf16', 'compute']
    """
    out = table.copy()
    for name, column in _roofline({c: table[c].to_numpy() for c in table}, device).items():
        out[name] = column
    return out


def _roofline(table: Mapping[str, np.ndarray], device: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """:func:`add_roofline`'s columns from a table's columns as arrays.

    A row whose precision the device lists no peak for (integers, booleans, fp4, fp8 on an
    A100) still gets the memory time when that is the longer one even at the slowest peak the
    device lists for the row's unit (its intensity is below every ridge point): that is its
    roofline, whatever the missing peak. ``roofline_note`` says so, or why there is none.
    """
    peaks = {k: float(v) for k, v in (device.get("max_achievable_tflops", {}) or {}).items() if v}
    bandwidth = float(device.get("mem_bw_gbps") or np.nan)
    name = str(device.get("name") or "the device")
    units, dtypes = table["unit"].tolist(), table["dtype"].tolist()
    spec = [f"{u}_{p}" if (p := precision(d)) else "" for u, d in zip(units, dtypes, strict=True)]
    peak = np.array([peaks.get(s, np.nan) for s in spec], float)
    flops, moved = table["flops"].astype(float), table["bytes"].astype(float)
    compute_us = flops / (peak * 1e6)
    memory_us = moved / (bandwidth * 1e3)
    roofline = np.where(np.isnan(compute_us), np.nan, np.fmax(compute_us, memory_us))
    bound = np.where(np.isnan(roofline), "", np.where(compute_us >= memory_us, "compute", "memory"))
    kernel = table["kernel_us"].astype(float)
    notes = [""] * len(spec)
    for i in np.flatnonzero(np.isnan(roofline)).tolist():
        slowest = min((v for k, v in peaks.items() if k.startswith(f"{units[i]}_")), default=None)
        what = spec[i] or f"{units[i]} {dtypes[i] or 'untyped'}"
        if units[i] not in ("matrix", "vector"):  # MoE dispatch/combine: the network's
            notes[i] = "moves data between ranks: no HBM roofline (see collectives())"
        elif np.isnan(memory_us[i]):
            notes[i] = f"no HBM bandwidth for {name}"
        elif slowest is not None and flops[i] / (slowest * 1e6) <= memory_us[i]:
            roofline[i], bound[i] = memory_us[i], "memory"
            notes[i] = f"no {what} peak for {name}: memory-bound at its slowest {units[i]} peak"
        else:
            notes[i] = f"no {what} peak for {name}"
    for i in np.flatnonzero(~(kernel > 0)).tolist():
        notes[i] = "; ".join(filter(None, (notes[i], "no GPU work in the trace")))
    spec_column = np.empty(len(spec), object if spec else float)  # as pandas makes of []
    spec_column[:] = spec
    note_column = np.empty(len(notes), object if notes else float)
    note_column[:] = notes
    return {
        "spec": spec_column,
        "roofline_us": roofline,
        "bound": bound,
        "pct_roofline": roofline * table["count"] / np.where(kernel > 0, kernel, np.nan) * 100,
        "roofline_note": note_column,
    }


# -- every GPU op once --------------------------------------------------------------------------
def perf_summary(trace: Trace, *, device: Device = None, by: Grouping = "args") -> pd.DataFrame:
    """Every GPU op counted once: under the outermost op with a model, else the op that
    launched it (TraceLens's ``unified_perf_summary``).

    Parameters
    ----------
    device, by
        As for :func:`perf_ops` (``by`` groups the modelled rows; the others are one row per
        launching op name and family).

    Returns
    -------
    pandas.DataFrame
        One row per modelled group (``op``, ``family``, ``shape``, ``dtype``, ``dtypes``,
        ``strides``) and per unmodelled launching op: ``count`` (calls), ``kernel_us`` (summed
        duration of the GPU ops — kernels, copies, fills — counted there), ``flops``/``bytes``
        per call and ``has_model``; ``family`` is ``"other"`` for ops without a model
        (``"communication"`` when their GPU ops are NCCL/RCCL kernels). Every GPU op whose
        runtime call is in the trace is counted exactly once. The op that launched a GPU op is the
        innermost ``cpu_op`` around its runtime call on the call's thread
        (:func:`~aorta.trace.perf.launchers.launching_ops`); a GPU op with none is a row of its
        own (``op`` = the GPU op's name). With a device
        (see :func:`perf_ops`) also the roofline columns. ``attrs["coverage"]`` is the share of
        GPU op time with a model (see :func:`coverage`); ``attrs["shapes_recorded"]`` is
        :func:`shapes_recorded` (when False no model can apply: the coverage is NaN, not 0).

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 10, {"Input Dims": [[64, 64], [64, 64]],
    ...                       "Input type": ["float", "float"], "External id": 1}),
    ...                      ("kernel", "gemm", 12, 30, {"launch_ts": 2, "External id": 1}),
    ...                      ("cpu_op", "aten::nonzero", 50, 10, {"External id": 2}),
    ...                      ("kernel", "nonzero_kernel", 62, 10, {"launch_ts": 52, "External id": 2})])
    >>> s = t.perf_summary(device=False)
    >>> s[["op", "has_model", "kernel_us"]].to_dict("list"), round(s.attrs["coverage"], 2)
    ({'op': ['aten::mm', 'aten::nonzero'], 'has_model': [True, False], 'kernel_us': [30.0, 10.0]}, 0.75)
    """
    found = calls(trace, by=by)
    gpu = trace.gpu_ops
    linked = np.flatnonzero(gpu.linked)
    owner = _owners(trace, found)
    modelled = owner >= 0
    dur_ns = gpu.end - gpu.ts
    frames = []
    if modelled.any():
        idx = np.flatnonzero(modelled)
        n = found.rows.size
        per_call = np.bincount(owner[idx], weights=dur_ns[idx], minlength=n)
        owning = np.flatnonzero(np.bincount(owner[idx], minlength=n))
        grouped = grouped_columns(found.records, found.group[owning], per_call[owning])
        frames.append(pd.DataFrame(grouped).assign(has_model=True))
    rest = linked[~modelled[linked]]  # sorted, as setdiff1d gave it, without a sort
    if rest.size:
        frames.append(unmodelled_rows(trace, rest))
    columns = ["op", "family", "shape", "dtype", "dtypes", "strides", "count", "kernel_us"]
    columns += ["flops", "bytes", "has_model", "unit"]
    if frames:
        out = pd.concat([f.reindex(columns=columns) for f in frames], ignore_index=True)
    else:
        out = pd.DataFrame({c: [] for c in columns})
    out["has_model"] = out["has_model"].astype(bool)
    out = out.sort_values("kernel_us", ascending=False, kind="stable").reset_index(drop=True)
    recorded = shapes_recorded(trace)
    out.attrs["coverage"] = coverage(out) if recorded else float("nan")  # no model possible
    out.attrs["shapes_recorded"] = recorded
    resolved = resolve_device(trace, device)
    if resolved is not None:
        out = add_roofline(out, resolved)
        out.attrs["device"] = resolved.get("name", "")
        out.attrs["peaks"] = "datasheet" if "sources" in resolved else "given"
    out.attrs["units"] = _UNITS
    return out


def _owners(trace: Trace, found: Calls) -> np.ndarray:
    """For each GPU op, the index of the outermost modelled call that launched it, or -1."""
    owner = np.full(len(trace.gpu_ops), -1, np.int64)
    event, gpu_idx = found.work.pairs()
    if event.size:
        ts, dur = trace.column("ts")[found.rows], trace.column("dur")[found.rows]
        outer = np.empty(found.rows.size, np.int64)  # each call's rank: earliest, then longest
        outer[np.lexsort((-dur, ts))] = np.arange(found.rows.size)
        key = gpu_idx.astype(np.int64) * max(found.rows.size, 1) + outer[event]
        order = np.argsort(key, kind="stable")  # outermost first per GPU op
        first = np.r_[True, gpu_idx[order][1:] != gpu_idx[order][:-1]]
        owner[gpu_idx[order][first]] = event[order][first]
    return owner


def rank_family_metrics(trace: Trace, *, device: Device = None) -> pd.DataFrame:
    """Per rank: ``perf_coverage`` (%) and, per family, ``tflops_<family>`` (achieved
    TFLOP/s) and ``pct_roofline_<family>`` (Σ roofline time / Σ kernel time × 100; with a
    device), every GPU op counted once as in :func:`perf_summary`.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 10, {"Input Dims": [[1024, 1024], [1024, 1024]],
    ...                       "Input type": ["c10::BFloat16"] * 2}), ("kernel", "gemm", 12, 100, {"launch_ts": 2})])
    >>> rank_family_metrics(t, device="MI300X").round(3).to_dict("records")
    [{'perf_coverage': 100.0, 'tflops_GEMM': 21.475, 'pct_roofline_GEMM': 1.643}]
    """
    found = calls(trace, by="shape")  # the metrics roll rows up per family: no strides needed
    gpu = trace.gpu_ops
    owner = _owners(trace, found)
    counted = gpu.linked & (gpu.cls != _COMM)
    dur_ns = (gpu.end - gpu.ts).astype(float)
    resolved = resolve_device(trace, device)
    groups = found.groups.assign(count=1, kernel_us=1.0)
    if resolved is not None and len(groups):
        groups = add_roofline(groups, resolved)
    roof = groups["roofline_us"].to_numpy(float) if "roofline_us" in groups else None
    ops = trace.op_rows
    shaped = set(
        np.unique(trace.column("rank")[ops[trace.column("input_dims")[ops] >= 0]]).tolist()
    )
    rows = {}
    for rank in trace.ranks:
        mine = counted & (gpu.rank == rank)
        total = dur_ns[mine].sum()
        mod = mine & (owner >= 0)
        row: dict[str, float] = {  # a rank recorded without shapes has no coverage, not 0%
            "perf_coverage": float(100 * dur_ns[mod].sum() / total)
            if total and rank in shaped
            else np.nan
        }
        if mod.any():
            call = owner[mod]
            group = found.group[call]
            family = groups["family"].to_numpy()[group]
            for fam in sorted(set(family.tolist())):
                pick = family == fam
                seconds = dur_ns[mod][pick].sum() * 1e-9
                once = np.unique(call[pick])  # each call's FLOPs once
                flops = groups["flops"].to_numpy(float)[found.group[once]].sum()
                row[f"tflops_{fam}"] = float(flops / seconds / 1e12) if seconds else np.nan
                if roof is not None:
                    roof_us = np.nansum(roof[found.group[once]])
                    row[f"pct_roofline_{fam}"] = float(roof_us / (seconds * 1e6) * 100)
        rows[rank] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("rank")


def shapes_recorded(trace: Trace) -> bool:
    """Whether any CPU op of the trace carries ``Input Dims`` (the profile was recorded with
    ``record_shapes=True``): without them no perf model applies, and no coverage is given.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> shapes_recorded(synthetic_trace([("cpu_op", "aten::mm", 0, 10)]))
    False
    >>> shapes_recorded(synthetic_trace([("cpu_op", "aten::mm", 0, 10, {"Input Dims": [[2, 2], [2, 2]]})]))
    True
    """
    rows = trace.op_rows
    return bool(rows.size) and bool((trace.column("input_dims")[rows] >= 0).any())


def coverage(summary: pd.DataFrame) -> float:
    """The share (0..1) of GPU op time that has a model, from :func:`perf_summary`'s table.

    Communication kernels (NCCL/RCCL) are left out of the total: they are measured against
    the network by :func:`~aorta.trace.collectives.collectives`, not against FLOPs and HBM.
    NaN when there is no other GPU time.

    Examples
    --------
    >>> coverage(pd.DataFrame({"kernel_us": [30.0, 10.0, 99.0], "has_model": [True, False, False],
    ...                        "family": ["GEMM", "other", "communication"]}))
    0.75
    """
    counted = summary[summary["family"] != "communication"]
    total = counted["kernel_us"].sum()
    if not total:
        return float("nan")
    return float(counted.loc[counted["has_model"].astype(bool), "kernel_us"].sum() / total)


def by_family(summary: pd.DataFrame) -> pd.DataFrame:
    """:func:`perf_summary` rolled up per family ("Against the hardware"): every GPU op once.

    Returns
    -------
    pandas.DataFrame
        ``family``, ``ops`` (distinct op rows), ``calls``, ``kernel_us``, ``percent`` (of the
        kernel time), ``tflops`` and ``tbps`` (achieved over the family), and with a device
        ``pct_roofline`` (summed roofline time / kernel time × 100); most time first.
        ``attrs`` carries ``coverage`` and ``device``.

    Examples
    --------
    >>> s = pd.DataFrame({"family": ["GEMM", "GEMM", "other"], "count": [2, 1, 4], "kernel_us": [10.0, 10.0, 5.0],
    ...                   "flops": [1e7, 2e7, np.nan], "bytes": [1e5, 1e5, np.nan], "has_model": [True, True, False],
    ...                   "roofline_us": [1.0, 2.0, np.nan]})
    >>> by_family(s)[["family", "calls", "kernel_us", "tflops", "pct_roofline"]].round(6).to_dict("list")
    {'family': ['GEMM', 'other'], 'calls': [3, 4], 'kernel_us': [20.0, 5.0], 'tflops': [2.0, nan], 'pct_roofline': [20.0, nan]}
    """
    frame = summary.assign(
        total_flops=summary["flops"] * summary["count"],
        total_bytes=summary["bytes"] * summary["count"],
        total_roofline=(summary["roofline_us"] * summary["count"])
        if "roofline_us" in summary
        else np.nan,
    )
    out = (
        frame.groupby("family", sort=False)
        .agg(
            ops=("family", "size"),
            calls=("count", "sum"),
            kernel_us=("kernel_us", "sum"),
            total_flops=("total_flops", lambda v: v.sum(min_count=1)),
            total_bytes=("total_bytes", lambda v: v.sum(min_count=1)),
            total_roofline=("total_roofline", lambda v: v.sum(min_count=1)),
        )
        .reset_index()
    )
    grand = out["kernel_us"].sum()
    out["percent"] = 100 * out["kernel_us"] / grand if grand else np.nan
    seconds = (out["kernel_us"] * 1e-6).where(out["kernel_us"] > 0)
    out["tflops"] = out["total_flops"] / seconds / 1e12
    out["tbps"] = out["total_bytes"] / seconds / 1e12
    columns = ["family", "ops", "calls", "kernel_us", "percent", "tflops", "tbps"]
    if "roofline_us" in summary:
        out["pct_roofline"] = (
            out["total_roofline"] / out["kernel_us"].where(out["kernel_us"] > 0) * 100
        )
        columns.append("pct_roofline")
    out = (
        out[columns].sort_values("kernel_us", ascending=False, kind="stable").reset_index(drop=True)
    )
    out.attrs = {
        "coverage": summary.attrs.get("coverage"),
        "device": summary.attrs.get("device"),
        "units": {"kernel_us": "us", "tflops": "TFLOP/s", "tbps": "TB/s", "pct_roofline": "%"},
    }
    return out
