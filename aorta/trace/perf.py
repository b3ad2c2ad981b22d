"""Per-op performance tables: FLOPs, bytes, achieved TFLOP/s and TB/s, roofline against a device.

``perf_ops`` is TraceLens's per-family sheets in one table (every modelled op, nested or not);
``perf_summary`` is its ``unified_perf_summary``: every GPU op counted once, under the outermost
op that has a model, else under the op that launched it. The formulas are in
:mod:`aorta.trace.perf_model`; the device peaks in :mod:`aorta.trace.devices`.

Kernel time of one call is the *busy time* of the GPU ops launched from inside the op (the
union of their intervals, as TraceLens does); a backward row (``SDPA_bwd``, ``Reduce_bwd``) is
the forward op's model applied to the GPU work of the ``autograd::engine::evaluate_function``
that has the forward op's ``Sequence number``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pandas as pd

from . import links
from .classify import GPU_CLASSES
from .devices import Device, resolve_device
from .perf_context import partners
from .perf_launchers import unmodelled_rows
from .perf_model import (
    BACKWARD_FAMILIES,
    BACKWARD_OPS,
    OpModel,
    has_model,
    op_model,
    precision,
)
from .perf_own import FOREACH

if TYPE_CHECKING:
    from .model import Trace

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

_EVALUATE = "autograd::engine::evaluate_function:"
_COMM, _MEMSET = GPU_CLASSES.index("communication"), GPU_CLASSES.index("memset")
#: The element type a ``multi_tensor_apply`` kernel's functor is instantiated for (its first
#: template argument), as a Kineto ``Input type`` name.
_FUNCTOR_DTYPE = re.compile(r"Functor<(float|double|c10::Half|c10::BFloat16|long|int|bool)\s*,")
_LIST_DTYPES = ("float", "double", "c10::Half", "c10::BFloat16", "long int", "int", "bool")
#: The columns of :func:`perf_ops` (without a device; ``add_roofline`` adds the roofline ones).
PERF_COLUMNS: tuple[str, ...] = (
    "op",
    "family",
    "shape",
    "dtype",
    "count",
    "flops",
    "bytes",
    "kernel_us",
    "tflops",
    "tbps",
    "intensity",
)
_ROOFLINE_COLUMNS = ("spec", "roofline_us", "bound", "pct_roofline")
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


# -- the calls ----------------------------------------------------------------------------------
def _decoded(trace: Trace, column: str, codes: np.ndarray) -> dict[int, Any]:
    """The JSON texts of a categorical column, decoded once per code present in ``codes``."""
    categories = trace.categories(column)
    out: dict[int, Any] = {}
    for code in np.unique(codes).tolist():
        if code < 0:
            continue
        try:
            out[code] = msgspec.json.decode(categories[code])
        except msgspec.DecodeError:
            out[code] = None
    return out


def _combine(*codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One code per distinct tuple of the integer columns ``codes`` (codes 0..k-1 in order of
    first appearance); and the first row of each (sorted by code).

    The columns are packed into one int64 (:func:`aorta.trace.links.pack`) and factorized
    once.

    >>> key, first = _combine(np.array([5, 5, 7, 5]), np.array([-1, 0, 0, -1]))
    >>> key.tolist(), first.tolist()
    ([0, 1, 2, 0], [0, 1, 2])
    """
    n = codes[0].size
    key = pd.factorize(links.pack(*codes))[0].astype(np.int64)
    # codes come in order of first appearance: a row is a first where its code tops all before
    seen = np.maximum.accumulate(key) if n else key
    return key, np.flatnonzero(key > np.r_[np.int64(-1), seen[:-1]])


def _models(
    trace: Trace,
    rows: np.ndarray,
    *,
    backward: bool = False,
    list_dtype: np.ndarray | None = None,
    partner: np.ndarray | None = None,
) -> tuple[np.ndarray, list[OpModel | None]]:
    """For each op row, an index into the returned models (``backward``: the forward op's model
    of its backward work); evaluated once per distinct (name, dims, types, concrete, training,
    ``list_dtype``: an index into ``_LIST_DTYPES`` per row, -1 for none; ``partner``: the event
    row completing the op's arguments, :func:`~aorta.trace.perf_context.partners`)."""
    if rows.size == 0:
        return np.empty(0, np.int64), []
    cols = [trace.column(c)[rows] for c in ("name", "input_dims", "input_type", "concrete")]
    cols.append(trace.column("seq")[rows] >= 0)
    cols.append(list_dtype if list_dtype is not None else np.full(rows.size, -1))
    if partner is not None:  # the partner's dims and types (-1: none)
        for c in ("input_dims", "input_type"):
            cols.append(np.where(partner >= 0, trace.column(c)[np.maximum(partner, 0)], -1))
    key, first = _combine(*cols)
    uniques = np.stack([c[first] for c in cols], axis=1).tolist()
    names = trace.categories("name")
    # the op's own dims and types (columns 1, 2) and its partner's (6, 7), decoded together
    dims = _decoded(trace, "input_dims", np.concatenate([c[first] for c in cols[1:2] + cols[6:7]]))
    types = _decoded(trace, "input_type", np.concatenate([c[first] for c in cols[2:3] + cols[7:8]]))
    concrete = _decoded(trace, "concrete", cols[3][first])
    evaluated = [
        op_model(
            names[u[0]],
            dims.get(u[1]),
            types.get(u[2]),
            concrete.get(u[3]),
            backward=backward,
            training=bool(u[4]),
            list_dtype=_LIST_DTYPES[u[5]] if u[5] >= 0 else None,
            partner=(dims.get(u[6]), types.get(u[7])) if len(u) > 6 and u[6] >= 0 else None,
        )
        for u in uniques
    ]
    # key codes are 0..k-1 in order of first appearance; ``first`` is sorted by key
    return key, evaluated


def _list_dtypes(
    trace: Trace, rows: np.ndarray, event: np.ndarray, gpu_idx: np.ndarray
) -> np.ndarray:
    """For each op row, the element type of its ``TensorList`` inputs as an index into
    ``_LIST_DTYPES`` (-1: unknown or not a ``_foreach_*`` op), read from the functor of the
    first kernel the op launched (``BinaryOpListAlphaFunctor<float, ...>``; ``event``,
    ``gpu_idx``: :func:`_launched`'s pairs for ``rows``): Kineto records the lists' shapes but
    not their type."""
    out = np.full(rows.size, -1, np.int64)
    names = trace.categories("name")
    if not names or event.size == 0:
        return out
    is_foreach = np.fromiter((n.startswith(FOREACH) for n in names), bool, len(names))
    mine = np.flatnonzero(is_foreach[trace.column("name")[rows[event]]])
    if mine.size == 0:
        return out
    event, gpu_idx = event[mine], gpu_idx[mine]
    gpu = trace.gpu_ops
    order = np.lexsort((gpu.ts[gpu_idx], event))  # each op's first kernel first
    event, kernel = event[order], gpu.name[gpu_idx[order]]
    first = np.r_[True, event[1:] != event[:-1]]
    for e, g in zip(event[first].tolist(), kernel[first].tolist(), strict=True):
        found = _FUNCTOR_DTYPE.search(names[g])
        if found:
            out[e] = _LIST_DTYPES.index({"long": "long int"}.get(found[1], found[1]))
    return out


def _launched(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (position in ``rows``, GPU op index) for every GPU op launched inside each host
    event (its runtime call ran on the same thread within the event's span), sorted by
    position. Fills (``gpu_memset``) are left out, as TraceLens does.

    Only the runtime calls that launched a counted GPU op are placed on the threads' time
    lines; when each launched one GPU op (the common case) no second expansion is needed.
    """
    gpu, rt = trace.gpu_ops, trace.runtime_rows
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    linked = np.flatnonzero(gpu.linked & (gpu.cls != _MEMSET))
    if rows.size == 0 or rt.size == 0 or linked.size == 0:
        return empty
    launch_idx = gpu.launch_rt[linked]
    launches = np.bincount(launch_idx, minlength=rt.size)
    launcher = np.flatnonzero(launches)  # runtime calls that launched, in time order
    if int(launches.max()) == 1:  # one GPU op each (the common case): no sort, no expansion
        gpu_of = np.empty(rt.size, np.int64)
        gpu_of[launch_idx] = linked
        gpu_sorted, first, count = gpu_of[launcher], None, None
    else:  # one entry per launching runtime call: its first GPU op in gpu_sorted and how many
        gpu_sorted = linked[np.argsort(launch_idx, kind="stable")]
        count = launches[launcher]
        first = np.cumsum(count) - count
    calls = rt[launcher]
    ts = trace.column("ts")
    group, call_group = links.thread_groups(trace, rows, calls)
    order, lo, hi = links.contained_ranges(
        group, ts[rows], ts[rows] + trace.column("dur")[rows], call_group, ts[calls]
    )
    event, pos = _expand(lo, hi - lo)
    call = order[pos]
    if first is None or count is None:
        return event, gpu_sorted[call]
    event2, gpos = _expand(first[call], count[call])
    return event[event2], gpu_sorted[gpos]


def _expand(start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges ``start[i] : start[i] + count[i]``: (i, position) of every element."""
    count = np.maximum(count, 0)
    total = int(count.sum())
    owner = np.repeat(np.arange(count.size), count)
    offsets = np.cumsum(count) - count
    return owner, np.arange(total) - offsets[owner] + start[owner]


def _busy(owner: np.ndarray, start: np.ndarray, end: np.ndarray, n: int) -> np.ndarray:
    """Per owner ``0..n-1``: the length (ns) of the union of its intervals.

    ``owner`` sorted (as :func:`_launched` gives it) and the starts of each owner in time
    order (as one stream launches them) take no sort; otherwise one ``lexsort``.
    """
    out = np.zeros(n, np.int64)
    if owner.size == 0:
        return out
    t0 = int(start.min())
    span = int(end.max()) - t0 + 1
    if span * (n + 1) >= 2**62:  # too wide to pack: one owner at a time
        for i in np.unique(owner).tolist():
            mask = owner == i
            out[i] = _busy(np.zeros(int(mask.sum()), np.int64), start[mask], end[mask], 1)[0]
        return out
    # each owner on its own stretch of one time line: owner * span + (time - t0)
    base = np.multiply(owner, span, dtype=np.int64)
    base -= t0
    s2, e2 = start + base, end + base
    if owner.size > 1 and not bool(np.all(s2[1:] >= s2[:-1])):
        order = np.lexsort((start, owner))
        s2, e2, base, owner = s2[order], e2[order], base[order], owner[order]
    reach = np.maximum.accumulate(e2)
    prev = np.empty_like(reach)  # how far the intervals before reach, in place from here
    prev[0] = np.iinfo(np.int64).min
    prev[1:] = reach[:-1]
    np.maximum(prev, base, out=prev)  # nothing before an owner's first interval
    np.maximum(prev, s2, out=prev)
    np.subtract(e2, prev, out=prev)
    np.maximum(prev, 0, out=prev)  # the part of each interval not yet covered
    return np.bincount(owner, weights=prev, minlength=n).astype(np.int64)


def _op_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """``cpu_op`` rows with a model, and ``autograd::engine::evaluate_function`` rows: one
    lookup per event through a table over the unique names."""
    names = trace.categories("name")
    kind = np.fromiter(
        (1 if has_model(n) else 2 if n.startswith(_EVALUATE) else 0 for n in names),
        np.int8,
        len(names),
    )
    cats = trace.categories("cat")
    if not names or "cpu_op" not in cats:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    of_row = kind[trace.column("name")]  # every event: a small table, read in order
    of_row[trace.column("cat") != cats.index("cpu_op")] = 0
    return np.flatnonzero(of_row == 1), np.flatnonzero(of_row == 2)


def _backward(
    trace: Trace, rows: np.ndarray, capable: np.ndarray, bwd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Backward work linked to modelled forward ops by ``Sequence number``: positions in
    ``bwd`` (the ``evaluate_function`` rows, :func:`_op_rows`'s second) and in ``rows`` of their
    forward ops (among the candidates ``rows[capable]`` with the same (rank, sequence number),
    the latest-starting one)."""
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    seq, rank = trace.column("seq"), trace.column("rank")
    fwd = np.flatnonzero(capable & (seq[rows] >= 0))
    if fwd.size == 0:
        return empty
    back = np.flatnonzero(seq[bwd] >= 0)
    if back.size == 0:
        return empty
    ts = trace.column("ts")
    f = rows[fwd]
    fwd = fwd[np.lexsort((-ts[f], seq[f], rank[f]))]  # latest first per (rank, seq)
    pos = links.lookup(rank[bwd[back]], seq[bwd[back]], rank[rows[fwd]], seq[rows[fwd]])
    hit = pos >= 0
    return back[hit], fwd[pos[hit]]


def _may_link(trace: Trace, rows: np.ndarray, evaluate: np.ndarray) -> np.ndarray:
    """The ``evaluate_function`` rows whose (rank, sequence number) is that of an op in
    ``rows`` that may have a backward model (:data:`BACKWARD_OPS`): the only ones
    :func:`_backward` can link, so the others' GPU work is never looked up."""
    names = trace.categories("name")
    if evaluate.size == 0 or not names:
        return evaluate
    capable = np.fromiter((n in BACKWARD_OPS for n in names), bool, len(names))
    seq, rank = trace.column("seq"), trace.column("rank")
    fwd = rows[capable[trace.column("name")[rows]] & (seq[rows] >= 0)]
    if fwd.size == 0:
        return evaluate[:0]
    return evaluate[links.lookup(rank[evaluate], seq[evaluate], rank[fwd], seq[fwd]) >= 0]


@dataclass
class _Calls:
    """Modelled calls (forward ops, then backward work) and their output groups."""

    rows: np.ndarray  # event rows (the evaluate_function for backward work)
    group: np.ndarray  # index into ``records``
    kernel_ns: np.ndarray  # busy time of the GPU ops each call launched
    records: list[tuple]  # per group: op, family, shape, dtype, flops, bytes, unit
    event: np.ndarray  # with ``gpu_idx``: (call, GPU op) for every GPU op each call launched
    gpu_idx: np.ndarray

    @property
    def groups(self) -> pd.DataFrame:
        """``records`` as a table (columns :data:`_GROUP_COLUMNS`)."""
        return pd.DataFrame(_group_columns(self.records))


def _calls(trace: Trace) -> _Calls:
    """Every modelled call, with its group (op, family, shape, dtype, FLOPs, bytes).

    The GPU work of every candidate (ops with a model, ``evaluate_function`` rows) is found in
    one pass (:func:`_launched`) and serves the ``_foreach_*`` element types, the busy time
    and :func:`_owners`.
    """
    rows, evaluate = _op_rows(trace)
    evaluate = _may_link(trace, rows, evaluate)
    candidates = np.concatenate([rows, evaluate]).astype(np.int64)
    event, gpu_idx = _launched(trace, candidates)
    list_dtype = _list_dtypes(trace, candidates, event, gpu_idx)[: rows.size]
    partner = partners(trace, rows)
    ids, models = _models(
        trace,
        rows,
        list_dtype=list_dtype if (list_dtype >= 0).any() else None,
        partner=partner if (partner >= 0).any() else None,
    )
    ok = np.array([m is not None for m in models], dtype=bool)
    keep = np.flatnonzero(ok[ids]) if ids.size else np.empty(0, np.int64)
    ids = ids[keep]
    capable = np.array([m is not None and m.family in BACKWARD_FAMILIES for m in models], bool)
    capable_rows = capable[ids] if ids.size else np.zeros(0, bool)
    bwd, fwd_of = _backward(trace, rows[keep], capable_rows, evaluate)
    fwd_rows = rows[keep][fwd_of]
    bwd_ids, bwd_models = _models(trace, fwd_rows, backward=True)
    bwd_ok = np.array([m is not None for m in bwd_models], dtype=bool)
    kept = bwd_ok[bwd_ids] if bwd_ids.size else np.zeros(0, bool)
    bwd, fwd_rows, bwd_ids = bwd[kept], fwd_rows[kept], bwd_ids[kept]
    # the op name of each distinct model: the forward op's (first row of each id)
    names, name_codes = trace.categories("name"), trace.column("name")
    table: dict[tuple, int] = {}
    records: list[tuple] = []

    def group_of(id_rows: np.ndarray, ids_: np.ndarray, models_: list) -> np.ndarray:
        first_row = np.full(len(models_), -1, np.int64)
        first_row[ids_[::-1]] = id_rows[::-1]
        mapping = np.full(len(models_), -1, np.int64)
        for i, m in enumerate(models_):
            if m is None or first_row[i] < 0:
                continue
            key = (names[name_codes[first_row[i]]], m.family, m.shape, m.dtype, m.flops, m.bytes)
            if key not in table:
                table[key] = len(records)
                records.append((*key, m.unit))
            mapping[i] = table[key]
        return mapping[ids_] if ids_.size else np.empty(0, np.int64)

    group = np.concatenate(
        [group_of(rows[keep], ids, models), group_of(fwd_rows, bwd_ids, bwd_models)]
    )
    # calls as positions among the candidates; the pairs of the other candidates dropped
    position = np.concatenate([keep, rows.size + bwd]).astype(np.int64)
    call_of = np.full(candidates.size, -1, np.int64)
    call_of[position] = np.arange(position.size)
    call = call_of[event]
    mine = call >= 0
    event, gpu_idx = call[mine], gpu_idx[mine]
    gpu = trace.gpu_ops
    return _Calls(
        rows=candidates[position],
        group=group.astype(np.int64),
        kernel_ns=_busy(event, gpu.ts[gpu_idx], gpu.end[gpu_idx], position.size),
        records=records,
        event=event,
        gpu_idx=gpu_idx,
    )


_GROUP_COLUMNS = ("op", "family", "shape", "dtype", "flops", "bytes", "unit")


def _group_columns(records: list[tuple]) -> dict[str, np.ndarray]:
    """The records' columns as arrays (numbers inferred as pandas would: int64 when all are
    integers, else float64; text as object)."""
    if not records:
        return {
            c: np.empty(0, float if c in ("flops", "bytes") else object) for c in _GROUP_COLUMNS
        }
    out: dict[str, np.ndarray] = {}
    for name, values in zip(_GROUP_COLUMNS, zip(*records, strict=True), strict=True):
        if name in ("flops", "bytes"):
            out[name] = np.array(values)
        else:
            column = np.empty(len(values), object)
            column[:] = values
            out[name] = column
    return out


def _grouped_columns(
    records: list[tuple], group: np.ndarray, kernel_ns: np.ndarray
) -> dict[str, np.ndarray]:
    """Per group with calls: the group's columns, ``count`` (calls), summed ``kernel_us``,
    achieved ``tflops``/``tbps`` (over the calls that ran GPU work) and ``intensity``."""
    n = len(records)
    count = np.bincount(group, minlength=n)
    timed = np.bincount(group, weights=(kernel_ns > 0).astype(float), minlength=n)
    kernel_us = np.bincount(group, weights=kernel_ns.astype(float), minlength=n) / 1e3
    out = _group_columns(records)
    seconds = np.where(kernel_us > 0, kernel_us * 1e-6, np.nan)
    flops, moved = out["flops"].astype(float), out["bytes"].astype(float)
    out["count"] = count
    out["kernel_us"] = kernel_us
    out["tflops"] = flops * timed / seconds / 1e12
    out["tbps"] = moved * timed / seconds / 1e12
    out["intensity"] = flops / np.where(moved > 0, moved, np.nan)
    some = count > 0
    return {k: v[some] for k, v in out.items()}


def _grouped(records: list[tuple], group: np.ndarray, kernel_ns: np.ndarray) -> pd.DataFrame:
    """:func:`_grouped_columns` as a table."""
    return pd.DataFrame(_grouped_columns(records, group, kernel_ns))


def perf_ops(trace: Trace, *, device: Device = None) -> pd.DataFrame:
    """FLOPs, bytes, achieved TFLOP/s and TB/s per op name and shape (TraceLens's per-family
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

    Returns
    -------
    pandas.DataFrame
        One row per (``op``, ``family``, ``shape``, ``dtype``), most kernel time first:
        ``count`` (calls), ``flops`` and ``bytes`` (per call), ``kernel_us`` (busy time of the
        GPU ops each call launched, summed over calls), ``tflops``, ``tbps`` (achieved, over
        the calls with GPU work), ``intensity`` (FLOP/byte), ``unit`` (matrix/vector); with a
        device also ``spec`` (``matrix_bf16``, ...), ``roofline_us`` (per call),
        ``bound`` (compute/memory) and ``pct_roofline`` (roofline time × count / kernel time
        × 100). A wrapper op and its ``native_*`` child both appear, as in TraceLens.
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
    calls = _calls(trace)
    columns = _grouped_columns(calls.records, calls.group, calls.kernel_ns)
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
    """:func:`add_roofline`'s columns from a table's columns as arrays."""
    peaks = device.get("max_achievable_tflops", {}) or {}
    bandwidth = float(device.get("mem_bw_gbps") or np.nan)
    spec = [
        f"{unit}_{p}" if (p := precision(dtype)) else ""
        for unit, dtype in zip(table["unit"].tolist(), table["dtype"].tolist(), strict=True)
    ]
    peak = np.array([float(peaks.get(s) or np.nan) if s else np.nan for s in spec])
    compute_us = table["flops"].astype(float) / (peak * 1e6)
    memory_us = table["bytes"].astype(float) / (bandwidth * 1e3)
    roofline = np.where(np.isnan(compute_us), np.nan, np.fmax(compute_us, memory_us))
    bound = np.where(np.isnan(roofline), "", np.where(compute_us >= memory_us, "compute", "memory"))
    kernel = table["kernel_us"].astype(float)
    kernel = np.where(kernel > 0, kernel, np.nan)
    spec_column = np.empty(len(spec), object if spec else float)  # as pandas makes of []
    spec_column[:] = spec
    return {
        "spec": spec_column,
        "roofline_us": roofline,
        "bound": bound,
        "pct_roofline": roofline * table["count"] / kernel * 100,
    }


# -- every GPU op once --------------------------------------------------------------------------
def perf_summary(trace: Trace, *, device: Device = None) -> pd.DataFrame:
    """Every GPU op counted once: under the outermost op with a model, else the op that
    launched it (TraceLens's ``unified_perf_summary``).

    Returns
    -------
    pandas.DataFrame
        One row per (``op``, ``family``, ``shape``, ``dtype``): ``count`` (calls), ``kernel_us``
        (summed duration of the GPU ops counted there), ``flops``/``bytes`` per call and
        ``has_model``; ``family`` is ``"other"`` for ops without a model (``"communication"``
        when their GPU ops are NCCL/RCCL kernels). The op that launched a GPU op is the
        innermost ``cpu_op`` around its runtime call on the call's thread
        (:func:`~aorta.trace.perf_launchers.launching_ops`); a GPU op with none is a row of its
        own (``op`` = the GPU op's name). With a device
        (see :func:`perf_ops`) also the roofline columns. ``attrs["coverage"]`` is the share of
        GPU op time with a model (see :func:`coverage`); ``attrs["shapes_recorded"]`` is
        :func:`shapes_recorded` (when False, the coverage is 0 because no model can apply).

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
    calls = _calls(trace)
    gpu = trace.gpu_ops
    linked = np.flatnonzero(gpu.linked & (gpu.cls != _MEMSET))
    owner = _owners(trace, calls)
    modelled = owner >= 0
    dur_ns = gpu.end - gpu.ts
    frames = []
    if modelled.any():
        idx = np.flatnonzero(modelled)
        per_call = np.bincount(owner[idx], weights=dur_ns[idx], minlength=calls.rows.size)
        owning = np.flatnonzero(np.bincount(owner[idx], minlength=calls.rows.size))
        frames.append(
            _grouped(calls.records, calls.group[owning], per_call[owning]).assign(has_model=True)
        )
    rest = linked[~modelled[linked]]  # sorted, as setdiff1d gave it, without a sort
    if rest.size:
        frames.append(unmodelled_rows(trace, rest))
    columns = ["op", "family", "shape", "dtype", "count", "kernel_us", "flops", "bytes"]
    columns += ["has_model", "unit"]
    if frames:
        out = pd.concat([f.reindex(columns=columns) for f in frames], ignore_index=True)
    else:
        out = pd.DataFrame({c: [] for c in columns})
    out["has_model"] = out["has_model"].astype(bool)
    out = out.sort_values("kernel_us", ascending=False, kind="stable").reset_index(drop=True)
    out.attrs["coverage"] = coverage(out)
    out.attrs["shapes_recorded"] = shapes_recorded(trace)
    resolved = resolve_device(trace, device)
    if resolved is not None:
        out = add_roofline(out, resolved)
        out.attrs["device"] = resolved.get("name", "")
        out.attrs["peaks"] = "datasheet" if "sources" in resolved else "given"
    out.attrs["units"] = _UNITS
    return out


def _owners(trace: Trace, calls: _Calls) -> np.ndarray:
    """For each GPU op, the index of the outermost modelled call that launched it, or -1."""
    owner = np.full(len(trace.gpu_ops), -1, np.int64)
    if calls.rows.size:
        event, gpu_idx = calls.event, calls.gpu_idx
        ts, dur = trace.column("ts")[calls.rows], trace.column("dur")[calls.rows]
        outer = np.empty(calls.rows.size, np.int64)  # each call's rank: earliest, then longest
        outer[np.lexsort((-dur, ts))] = np.arange(calls.rows.size)
        key = gpu_idx.astype(np.int64) * max(calls.rows.size, 1) + outer[event]
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
    calls = _calls(trace)
    gpu = trace.gpu_ops
    owner = _owners(trace, calls)
    counted = gpu.linked & (gpu.cls != _MEMSET) & (gpu.cls != _COMM)
    dur_ns = (gpu.end - gpu.ts).astype(float)
    resolved = resolve_device(trace, device)
    groups = calls.groups.assign(count=1, kernel_us=1.0)
    if resolved is not None and len(groups):
        groups = add_roofline(groups, resolved)
    roof = groups["roofline_us"].to_numpy(float) if "roofline_us" in groups else None
    rows = {}
    for rank in trace.ranks:
        mine = counted & (gpu.rank == rank)
        total = dur_ns[mine].sum()
        mod = mine & (owner >= 0)
        row: dict[str, float] = {
            "perf_coverage": float(100 * dur_ns[mod].sum() / total) if total else np.nan
        }
        if mod.any():
            call = owner[mod]
            group = calls.group[call]
            family = groups["family"].to_numpy()[group]
            for fam in sorted(set(family.tolist())):
                pick = family == fam
                seconds = dur_ns[mod][pick].sum() * 1e-9
                once = np.unique(call[pick])  # each call's FLOPs once
                flops = groups["flops"].to_numpy(float)[calls.group[once]].sum()
                row[f"tflops_{fam}"] = float(flops / seconds / 1e12) if seconds else np.nan
                if roof is not None:
                    roof_us = np.nansum(roof[calls.group[once]])
                    row[f"pct_roofline_{fam}"] = float(roof_us / (seconds * 1e6) * 100)
        rows[rank] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("rank")


def shapes_recorded(trace: Trace) -> bool:
    """Whether any CPU op of the trace carries ``Input Dims`` (the profile was recorded with
    ``record_shapes=True``): without them no perf model applies and the coverage is 0.

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
