"""Two traces side by side: which kernels, ops, classes or collectives account for the difference.

:func:`diff` answers "B is slower than A — where did the time go?": per item (a kernel matched by
its normalised name, a CPU op, a GPU class or a collective type) the count and time in each
side, the difference and its share of the summed difference, plus the GPU time breakdown
(:meth:`Trace.timeline`) of both sides.

Kernel names are matched after :func:`normalize_kernel_name` folds what changes between builds
and launches without changing the kernel (template arguments, parameter lists, tuning and tile
suffixes, hex addresses, numeric suffixes); the raw names are kept in the ``raw_names`` column.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from .breakdown import BREAKDOWN_TYPES
from .classify import GPU_CLASSES, HOST_CLASSES
from .loader import load
from .model import Trace
from .steps import STEP_NAME

__all__ = ["DIFF_BY", "KERNEL_NAME_RULES", "diff", "normalize_kernel_name"]

DiffBy = Literal["kernel", "op", "class", "collective"]
#: The values ``diff(by=...)`` takes.
DIFF_BY: tuple[str, ...] = ("kernel", "op", "class", "collective")
Side = Trace | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

#: Ordered ``(pattern, replacement)`` rules of :func:`normalize_kernel_name`, applied after the
#: template arguments and the parameter list are folded (see its docstring).
KERNEL_NAME_RULES: tuple[tuple[str, str | Callable[[re.Match[str]], str]], ...] = (
    (r"^void\s+", ""),  # the return type of a demangled CUDA/HIP kernel
    (r"\s*\[clone [^\]]*\]", ""),  # ROCm: " [clone .kd]"
    (r"\.kd$", ""),  # ROCm code-object suffix
    (r"^(Cijk_[A-Za-z0-9]+_[A-Za-z0-9]+(?:_[A-Za-z]+)*?)_MT\d.*$", r"\1_MT…"),  # Tensile tuning
    (r"0x[0-9a-fA-F]+", "0x#"),  # addresses
    (r"\d+(?:x\d+)+", lambda m: re.sub(r"\d+", "#", m.group(0))),  # tile shapes 128x64x32
    (r"(?<=[A-Za-z_])_\d+$", "_#"),  # numeric suffixes: triton_poi_fused_add_0
    (r"\s+", " "),
)
_TEMPLATE = re.compile(r"<[^<>]*>")
_PARAMS = re.compile(
    r"(?<=[\w>])\((?:[^()]|\([^()]*\))*\)\s*(?:const)?(?=\s*(?:\[clone [^\]]*\])?\s*$)"
)


def normalize_kernel_name(
    name: str, *, rules: Sequence[tuple[str, object]] = KERNEL_NAME_RULES
) -> str:
    """The name under which :func:`diff` matches a GPU kernel across traces.

    In order: template arguments become ``<…>`` (however deeply nested); a parameter list
    directly after the name — ``(float*, int)``, not ``Memcpy HtoD (Pinned -> Device)`` — is
    dropped; then each ``(pattern, replacement)`` of ``rules`` is applied with :func:`re.sub`.
    The default :data:`KERNEL_NAME_RULES` drop a leading ``void``, ROCm's ``[clone .kd]`` and
    ``.kd``, cut Tensile names (``Cijk_...``) at their tuning suffix (``_MT…``), write hex
    addresses as ``0x#``, the numbers of tile shapes as ``#`` (``128x64x32`` → ``#x#x#``), a
    trailing ``_<digits>`` as ``_#``, and collapse whitespace.

    Parameters
    ----------
    name
        A raw GPU op name as Kineto recorded it.
    rules
        Ordered ``(pattern, replacement)`` pairs for :func:`re.sub` (a replacement may be a
        function of the match), applied after the template and parameter folding.

    Returns
    -------
    str
        The normalised name.

    Examples
    --------
    >>> normalize_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::"
    ...                       "FillFunctor<float>, std::array<char*, 1ul> >(int, std::array<char*, 1ul>)")
    'at::native::vectorized_elementwise_kernel<…>'
    >>> normalize_kernel_name("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0")
    'Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT…'
    >>> normalize_kernel_name("triton_poi_fused_add_17"), normalize_kernel_name("Memcpy HtoD (Pinned -> Device)")
    ('triton_poi_fused_add_#', 'Memcpy HtoD (Pinned -> Device)')
    """
    folded = name
    while True:
        inner = _TEMPLATE.sub("\x00", folded)
        if inner == folded:
            break
        folded = inner
    folded = re.sub("\x00+", "<…>", folded)
    folded = _PARAMS.sub("", folded)
    for pattern, replacement in rules:
        folded = re.sub(pattern, replacement, folded)  # type: ignore[call-overload]
    return folded.strip()


def diff(
    a: Side,
    b: Side,
    *,
    by: DiffBy = "kernel",
    per_step: bool = False,
    name_rules: Sequence[tuple[str, object]] = KERNEL_NAME_RULES,
) -> pd.DataFrame:
    """Where the time of trace ``b`` differs from trace ``a``, item by item.

    Parameters
    ----------
    a, b
        Each a :class:`Trace`, a trace file, a directory of rank files, or a list of files (one
        per rank), loaded with :func:`aorta.trace.load` defaults. **Ranks are averaged**: an
        item's count and time are summed over a side's ranks and divided by its number of
        ranks (the mean rank), so sides with different rank counts compare.
    by
        ``"kernel"``: GPU ops (kernels, copies, fills) matched by
        :func:`normalize_kernel_name`; ``"op"``: CPU ops (``cpu_op``) by name, host time
        inclusive of nested ops (nested ops each count, so compare rows of one level);
        ``"class"``: the GPU classes (compute, communication, memcpy, memset);
        ``"collective"``: collective calls by type (:meth:`Trace.collectives`, kernel time).
    per_step
        Take ``delta`` and ``share`` from the per-step times instead of the totals (for two
        traces that profiled different numbers of steps).
    name_rules
        The rules of :func:`normalize_kernel_name` (``by="kernel"`` only).

    Returns
    -------
    pandas.DataFrame
        One row per item, largest absolute ``delta`` first: ``item``; ``class`` (GPU ops:
        compute/communication/memcpy/memset; CPU ops: the host class compute/communication/
        other); ``count_a``, ``count_b``; ``total_a``,
        ``total_b``; ``per_step_a``, ``per_step_b`` (total / ``ProfilerStep#N`` annotations,
        NaN without any); ``delta`` (b − a, of totals or per step); ``share`` (``delta`` /
        the sum of all deltas; 0 when that sum is 0; above 1 or negative when items moved in
        opposite directions); ``only_in`` (``"a"``, ``"b"`` or ``""``);
        ``raw_names`` (the distinct raw names folded into the item, both sides).
        ``attrs``: ``units`` (times in µs), ``by``, ``per_step``, ``ranks`` and ``steps`` per
        side, ``total_delta`` (µs), ``breakdown`` (records ``type``, ``a``, ``b``, ``delta``
        in ms, per step with ``per_step``: the rows of :meth:`Trace.timeline` averaged over
        ranks) and ``notes`` (e.g. a side without steps or GPU events).

    Raises
    ------
    ValueError
        ``by`` is not one of :data:`DIFF_BY`.
    TraceError
        A file cannot be loaded.

    See Also
    --------
    Trace.kernels, Trace.ops, Trace.timeline

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> a = synthetic_trace([("kernel", "gemm_kernel_0", 0, 10), ("kernel", "ncclDevKernel_Generic", 10, 5)])
    >>> b = synthetic_trace([("kernel", "gemm_kernel_1", 0, 25), ("kernel", "ncclDevKernel_Generic", 25, 5)])
    >>> d = diff(a, b)
    >>> d[["item", "total_a", "total_b", "delta", "share", "raw_names"]].to_dict("records")[0]
    {'item': 'gemm_kernel_#', 'total_a': 10.0, 'total_b': 25.0, 'delta': 15.0, 'share': 1.0, 'raw_names': ('gemm_kernel_0', 'gemm_kernel_1')}
    >>> [(r["type"], round(r["delta"], 6)) for r in d.attrs["breakdown"]][:2]
    [('computation_time', 0.015), ('exposed_comm_time', 0.0)]
    """
    if by not in DIFF_BY:
        raise ValueError(f"by must be one of {', '.join(DIFF_BY)}, not {by!r}")
    sides = {"a": _as_trace(a), "b": _as_trace(b)}
    notes: list[str] = []
    aggregated, steps, ranks = {}, {}, {}
    for label, trace in sides.items():
        ranks[label] = trace.ranks
        steps[label] = _steps(trace)
        if not steps[label]:
            notes.append(f"{label}: no ProfilerStep annotations, per-step times are NaN")
        items = _items(trace, by=by, name_rules=name_rules)
        if items.empty:
            notes.append(f"{label}: no {_WHAT[by]} in the trace")
        aggregated[label] = _aggregate(items, n_ranks=len(trace.ranks), n_steps=steps[label])
    out = _side_by_side(
        aggregated["a"],
        aggregated["b"],
        per_step=per_step,
        has_steps={label: bool(n) for label, n in steps.items()},
    )
    out.attrs = {
        "units": dict.fromkeys(("total_a", "total_b", "per_step_a", "per_step_b", "delta"), "us"),
        "by": by,
        "per_step": per_step,
        "ranks": ranks,
        "steps": steps,
        "total_delta": float(out["delta"].sum()),
        "breakdown": _breakdown(sides, steps, per_step=per_step, notes=notes),
        "notes": notes,
    }
    return out


_WHAT = {
    "kernel": "GPU ops",
    "op": "cpu_op events",
    "class": "GPU ops",
    "collective": "collectives",
}


def _as_trace(side: Side) -> Trace:
    return side if isinstance(side, Trace) else load(side)


def _steps(trace: Trace) -> int:
    return int(trace.find(cats=["user_annotation", "cpu_op"], names=STEP_NAME.match).size)


def _items(trace: Trace, *, by: DiffBy, name_rules: Sequence[tuple[str, object]]) -> pd.DataFrame:
    """One row per occurrence: ``item``, ``raw``, ``class`` and ``dur`` (µs)."""
    if by == "collective":
        calls = trace.collectives()
        return pd.DataFrame(
            {
                "item": calls["collective"].astype(str),
                "raw": calls["collective"].astype(str),
                "class": "communication",
                "dur": calls["dur"].to_numpy(dtype=float),
            }
        )
    names = trace.categories("name")
    if by == "op":
        rows = trace.find(cats=["cpu_op"])
        codes = trace.column("name")[rows]
        raw = np.asarray(names, dtype=object)[codes] if len(names) else np.empty(0, object)
        host = (
            trace.host_cls[np.searchsorted(trace.op_rows, rows)]
            if rows.size
            else np.empty(0, object)
        )
        return pd.DataFrame(
            {
                "item": raw,
                "raw": raw,
                "class": np.asarray(HOST_CLASSES, dtype=object)[host],
                "dur": trace.column("dur")[rows] / 1e3,
            }
        )
    gpu = trace.gpu_ops
    cls = np.asarray(GPU_CLASSES, dtype=object)[gpu.cls] if len(gpu) else np.empty(0, object)
    raw = np.asarray(names, dtype=object)[gpu.name] if len(gpu) else np.empty(0, object)
    if by == "class":
        item = cls
    else:  # one normalisation per unique name
        unique, inverse = np.unique(gpu.name, return_inverse=True)
        folded = np.array(
            [normalize_kernel_name(names[u], rules=name_rules) for u in unique], dtype=object
        )
        item = folded[inverse] if unique.size else np.empty(0, object)
    return pd.DataFrame({"item": item, "raw": raw, "class": cls, "dur": (gpu.end - gpu.ts) / 1e3})


def _aggregate(items: pd.DataFrame, *, n_ranks: int, n_steps: int) -> pd.DataFrame:
    grouped = items.groupby("item", sort=True)
    out = pd.DataFrame(
        {
            "class": grouped["class"].first(),
            "count": grouped.size() / n_ranks,
            "total": grouped["dur"].sum() / n_ranks,
            "raw": grouped["raw"].agg(lambda s: frozenset(s)),
        }
    )
    out["per_step"] = out["total"] * n_ranks / n_steps if n_steps else np.nan
    return out


def _side_by_side(
    a: pd.DataFrame, b: pd.DataFrame, *, per_step: bool, has_steps: dict[str, bool]
) -> pd.DataFrame:
    both = a.add_suffix("_a").join(b.add_suffix("_b"), how="outer")
    only = np.where(both["count_b"].isna(), "a", np.where(both["count_a"].isna(), "b", ""))
    for column in ("count", "total"):
        both[[f"{column}_a", f"{column}_b"]] = both[[f"{column}_a", f"{column}_b"]].fillna(0.0)
    for side, other in (("a", "b"), ("b", "a")):  # absent from a side with steps: 0 per step
        if has_steps[side]:
            both.loc[only == other, f"per_step_{side}"] = 0.0
    measure = "per_step" if per_step else "total"
    delta = both[f"{measure}_b"] - both[f"{measure}_a"]
    total = float(delta.sum())
    out = pd.DataFrame(
        {
            "item": both.index.astype(str),
            "class": both["class_a"].fillna(both["class_b"]).astype(str).to_numpy(),
            "count_a": both["count_a"].to_numpy(dtype=float),
            "count_b": both["count_b"].to_numpy(dtype=float),
            "total_a": both["total_a"].to_numpy(dtype=float),
            "total_b": both["total_b"].to_numpy(dtype=float),
            "per_step_a": both["per_step_a"].to_numpy(dtype=float),
            "per_step_b": both["per_step_b"].to_numpy(dtype=float),
            "delta": delta.to_numpy(dtype=float),
            "share": (delta / total).to_numpy(dtype=float) if total else np.zeros(len(delta)),
            "only_in": only,
            "raw_names": [
                tuple(sorted(_union(x, y)))
                for x, y in zip(both["raw_a"], both["raw_b"], strict=True)
            ],
        }
    )
    order = np.lexsort((out["item"].to_numpy(), -np.abs(out["delta"].to_numpy())))
    return out.iloc[order].reset_index(drop=True)


def _union(x: object, y: object) -> frozenset[str]:
    return (x if isinstance(x, frozenset) else frozenset()) | (
        y if isinstance(y, frozenset) else frozenset()
    )


def _breakdown(
    sides: dict[str, Trace], steps: dict[str, int], *, per_step: bool, notes: list[str]
) -> list[dict[str, object]]:
    """The rows of :meth:`Trace.timeline` (mean over ranks, ms), a and b side by side."""
    values: dict[str, dict[str, float]] = {}
    for label, trace in sides.items():
        table = trace.timeline()
        if table.empty:
            notes.append(f"{label}: nothing to break down (no GPU or host events)")
            values[label] = dict.fromkeys(BREAKDOWN_TYPES, np.nan)
            continue
        mean = table.groupby("type")["time ms"].sum() / len(trace.ranks)
        if per_step:
            mean = mean * len(trace.ranks) / steps[label] if steps[label] else mean * np.nan
        values[label] = {t: float(mean.get(t, np.nan)) for t in BREAKDOWN_TYPES}
    return [
        {
            "type": t,
            "a": values["a"][t],
            "b": values["b"][t],
            "delta": values["b"][t] - values["a"][t],
        }
        for t in BREAKDOWN_TYPES
    ]
