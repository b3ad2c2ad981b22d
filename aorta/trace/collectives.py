"""Collectives: message sizes and bandwidths per call, and the same call matched across ranks.

Bandwidths follow nccl-tests (``doc/PERFORMANCE.md``), in decimal GB/s: ``algbw = bytes / time``
and ``busbw = algbw × factor`` with, for ``n`` ranks in the group, all_reduce ``2(n−1)/n``;
all_gather, reduce_scatter, all_to_all, gather, scatter ``(n−1)/n``; broadcast, reduce, send,
recv ``1``. ``bytes`` is the larger of the input and output message (``In``/``Out msg nelems``
× the dtype size): the full buffer that nccl-tests calls the size. The time is the
communication kernel's duration (it includes waiting for the other ranks).

Where the arguments come from: the NCCL kernel's own args (recent CUDA builds), else the CPU op
(``record_param_comms``) whose ``External id`` the launching runtime call carries (ROCm/RCCL,
and CUDA). Kernels with neither keep the collective named in the kernel (``AllReduce``,
``SendRecv``, ...) and NaN sizes. Host collectives (CPU-only runs, gloo; see
:mod:`aorta.trace.host`) take their sizes from the communication events' own ``Input Dims`` /
``Input type`` (gloo records the tensor it works on) and their time from the event's duration.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from .classify import GPU_CLASSES
from .host import communication_rows

if TYPE_CHECKING:
    from .model import Trace

__all__ = [
    "Alignment",
    "Device",
    "bus_factor",
    "canonical_collective",
    "clock_offsets",
    "collective_skew",
    "collectives",
    "dtype_size",
    "stragglers",
]

Alignment = Literal["base_time", "collective_end"]
#: Which collective calls: the GPU's communication kernels, the host's (gloo), or auto.
Device = Literal["auto", "gpu", "host"]
_COMM = GPU_CLASSES.index("communication")

# Checked in order on the name with everything but letters removed, lower-cased.
_CANONICAL: tuple[tuple[str, str], ...] = (
    ("allreduce", "all_reduce"),
    ("reducescatter", "reduce_scatter"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("sendrecv", "send_recv"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("send", "send"),
    ("recv", "recv"),
)
_DTYPE_SIZES: dict[str, int] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "int": 4, "int32": 4, "long": 8, "longint": 8, "int64": 8, "short": 2, "int16": 2,
    "char": 1, "signedchar": 1, "int8": 1, "byte": 1, "unsignedchar": 1, "uint8": 1, "bool": 1,
    "uint16": 2, "uint32": 4, "uint64": 8, "complexfloat": 8, "complexhalf": 4, "complexdouble": 16,
}  # fmt: skip


def canonical_collective(name: str) -> str:
    """``all_reduce``, ``all_gather``, ... for a collective or NCCL kernel name (else ``unknown``).

    Examples
    --------
    >>> canonical_collective("_allgather_base"), canonical_collective("ncclKernel_AllReduce_RING_LL_Sum_float")
    ('all_gather', 'all_reduce')
    >>> canonical_collective("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)")
    'unknown'
    """
    letters = re.sub(
        r"[^a-z]",
        "",
        re.sub(r"^(nccl|gloo|c10d|rccl):+", "", name.lower())
        .replace("nccldevkernel", "")
        .replace("ncclkernel", ""),
    )
    for needle, canonical in _CANONICAL:
        if needle in letters:
            return canonical
    return "unknown"


def dtype_size(dtype: str) -> float:
    """Bytes per element of a dtype as traces spell it (``BFloat16``, ``c10::Half``, ``float``...).

    Examples
    --------
    >>> dtype_size("BFloat16"), dtype_size("c10::Float8_e4m3fn"), dtype_size("long int")
    (2, 1, 8)
    """
    key = re.sub(r"[^a-z0-9]", "", dtype.lower().replace("c10::", "").replace("torch.", ""))
    if key.startswith("float8"):
        return 1
    return _DTYPE_SIZES.get(key, float("nan"))


def bus_factor(collective: str, n: float) -> float:
    """The nccl-tests bus-bandwidth factor of a canonical collective over ``n`` ranks.

    Examples
    --------
    >>> bus_factor("all_reduce", 8), bus_factor("all_gather", 8), bus_factor("broadcast", 8)
    (1.75, 0.875, 1.0)
    """
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n if n > 0 else float("nan")
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (n - 1) / n if n > 0 else float("nan")
    if collective in ("broadcast", "reduce", "send", "recv", "send_recv"):
        return 1.0
    return float("nan")


def _group_sizes(trace: Trace, frame: pd.DataFrame) -> np.ndarray:
    """Group size per call: its args, else the process group's size in pg_config, else world."""
    size: np.ndarray = frame["group_size"].to_numpy(dtype=float, copy=True)
    for i in np.flatnonzero(~(size > 0)):
        info = trace.info(int(frame["rank"].iat[i]))
        pg = {str(c.get("pg_name")): c.get("pg_size") for c in info.pg_config}.get(
            str(frame["pg"].iat[i])
        )
        size[i] = pg if isinstance(pg, int) else (info.world_size or np.nan)
    return size


def collectives(trace: Trace, *, device: Device = "auto") -> pd.DataFrame:
    """One row per collective call, with its arguments and bandwidths.

    Parameters
    ----------
    device
        ``"gpu"``: the communication kernels (NCCL/RCCL); ``"host"``: the host communication
        events of CPU-only runs (gloo's ``gloo:all_reduce``, ..., see :mod:`aorta.trace.host`);
        ``"auto"``: the GPU's when the trace has any communication kernel, else the host's.

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``pg`` (process group name, "" if unknown), ``pg_desc``, ``seq`` (the
        collective's ``Seq`` when recorded, else its order within (rank, pg)), ``collective``
        (canonical), ``dtype``, ``in_nelems``, ``out_nelems``, ``group_size``, ``bytes``,
        ``start``/``end`` (ns), ``dur`` (µs), ``algbw``/``busbw`` (decimal GB/s),
        ``device``, ``stream``, ``kernel`` and ``source`` (``kernel``, ``cpu_op`` or ``name``:
        where a GPU call's arguments came from; ``host`` for host calls). Empty, with
        ``attrs["note"]``, when there is no collective call.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 0, 1000,
    ...     {"Collective name": "allreduce", "In msg nelems": 1_000_000, "Out msg nelems": 1_000_000,
    ...      "dtype": "BFloat16", "Group size": 8})])
    >>> row = t.collectives().iloc[0]
    >>> int(row["bytes"]), float(row["algbw"]), float(row["busbw"])
    (2000000, 2.0, 3.5)
    >>> h = synthetic_trace([("user_annotation", "gloo:all_gather", 0, 1000,
    ...     {"Input Dims": [[250_000]], "Input type": ["float"]})], header={"distributedInfo": {"world_size": 4}})
    >>> row = h.collectives().iloc[0]
    >>> row["source"], int(row["bytes"]), float(row["busbw"])
    ('host', 4000000, 3.0)
    """
    if device == "auto":
        device = "gpu" if (trace.gpu_ops.cls == _COMM).any() else "host"
    if device == "host":
        frame = _host_calls(trace)
        note = "no host communication events (gloo:*) in the trace"
    else:
        frame = _gpu_calls(trace)
        note = "no communication kernels (nccl/rccl) in the trace"
    if frame.empty:
        empty = pd.DataFrame(columns=_COLUMNS)
        empty.attrs["note"] = note
        return empty
    return _derive(trace, frame)


def _gpu_calls(trace: Trace) -> pd.DataFrame:
    """The communication kernels with their arguments: the columns of :func:`collectives`
    before sizes and bandwidths are derived."""
    gpu = trace.gpu_ops
    pick = np.flatnonzero(gpu.cls == _COMM)
    if pick.size == 0:
        return pd.DataFrame()
    rows = gpu.row[pick]
    args = trace.comm_args.drop_duplicates("row").set_index("row")
    launch = gpu.launch[pick]
    linked_op = np.full(pick.size, -1, dtype=np.int64)
    has = launch >= 0
    linked_op[has] = trace.runtime_op[np.searchsorted(trace.runtime_rows, launch[has])]
    own = np.isin(rows, args.index.to_numpy())
    via_op = ~own & np.isin(linked_op, args.index.to_numpy())
    meta_row = np.where(own, rows, np.where(via_op, linked_op, -1))
    names = trace.categories("name")
    kernel_names = [names[c] for c in gpu.name[pick]]
    meta = args.reindex(meta_row)
    return pd.DataFrame(
        {
            "rank": gpu.rank[pick],
            "pg": meta["pg_name"].astype(object).fillna("").to_numpy(),
            "pg_desc": meta["pg_desc"].astype(object).fillna("").to_numpy(),
            "seq": meta["comm_seq"].fillna(-1).astype(np.int64).to_numpy(),
            "collective": [
                canonical_collective(c if isinstance(c, str) and c else k)
                for c, k in zip(meta["collective"], kernel_names, strict=True)
            ],
            "dtype": meta["dtype"].astype(object).fillna("").to_numpy(),
            "in_nelems": meta["in_nelems"].where(meta["in_nelems"] >= 0).to_numpy(dtype=float),
            "out_nelems": meta["out_nelems"].where(meta["out_nelems"] >= 0).to_numpy(dtype=float),
            "group_size": meta["group_size"].where(meta["group_size"] > 0).to_numpy(dtype=float),
            "start": gpu.ts[pick],
            "end": gpu.end[pick],
            "device": gpu.device[pick],
            "stream": gpu.stream[pick],
            "kernel": kernel_names,
            "source": np.where(own, "kernel", np.where(via_op, "cpu_op", "name")),
        }
    )


def _elements(dims: object, types: object) -> float:
    """Elements of the tensors in an ``Input Dims`` list (NaN when it names none)."""
    if not isinstance(dims, list):
        return np.nan
    kinds = types if isinstance(types, list) else [None] * len(dims)
    total, found = 0, False
    for shape, kind in zip(dims, kinds, strict=False):
        if kind in ("Scalar", "ScalarList", "GenericList", ""):
            continue
        if isinstance(shape, list) and all(isinstance(x, int) for x in shape):
            total += int(np.prod(shape)) if shape else 1
            found = True
    return float(total) if found else np.nan


def _first_type(types: object) -> str:
    for t in types if isinstance(types, list) else []:
        if isinstance(t, str) and t and t not in ("Scalar", "ScalarList", "TensorList"):
            return t.replace("c10::", "")
    return ""


def _parsed(trace: Trace, column: str, rows: np.ndarray) -> list[object]:
    cats, codes = trace.categories(column), trace.column(column)[rows]
    cache = {int(c): json.loads(cats[c]) for c in np.unique(codes) if c >= 0}
    return [cache.get(int(c)) for c in codes]


def _host_calls(trace: Trace) -> pd.DataFrame:
    """One row per host communication event (gloo), in the columns of :func:`_gpu_calls`.

    ``in_nelems`` counts the elements of the tensors the event records; ``out_nelems`` is
    left NaN (the collective's semantics fill it in); ``pg`` is ``""`` (gloo's events do not
    say which group); ``stream`` is the thread id; ``source`` is ``"host"``.
    """
    rows = communication_rows(trace)
    dims, types = _parsed(trace, "input_dims", rows), _parsed(trace, "input_type", rows)
    names = trace.categories("name")
    ts = trace.column("ts")[rows]
    kernel = [names[c] for c in trace.column("name")[rows]]
    return pd.DataFrame(
        {
            "rank": trace.column("rank")[rows],
            "pg": "",
            "pg_desc": "",
            "seq": np.full(rows.size, -1, dtype=np.int64),
            "collective": [canonical_collective(k) for k in kernel],
            "dtype": [_first_type(t) for t in types],
            "in_nelems": np.array([_elements(d, t) for d, t in zip(dims, types, strict=True)]),
            "out_nelems": np.full(rows.size, np.nan),
            "group_size": np.full(rows.size, np.nan),
            "start": ts,
            "end": ts + np.maximum(trace.column("dur")[rows], 0),
            "device": np.full(rows.size, -1, dtype=np.int64),
            "stream": trace.column("tid")[rows],
            "kernel": kernel,
            "source": "host",
        }
    )


def _out_elements(collective: str, in_nelems: float, n: float) -> float:
    """The output size a collective implies when the trace records only its input."""
    if collective in ("all_gather", "gather"):
        return in_nelems * n
    if collective in ("reduce_scatter", "scatter"):
        return in_nelems / n if n > 0 else float("nan")
    return in_nelems


def _derive(trace: Trace, frame: pd.DataFrame) -> pd.DataFrame:
    """Sequence numbers, group sizes, bytes and bandwidths of the calls in ``frame``."""
    frame = frame.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)
    order_in_pg = frame.groupby(["rank", "pg"], sort=False).cumcount().to_numpy()
    frame["seq"] = np.where(frame["seq"] >= 0, frame["seq"], order_in_pg)
    frame["group_size"] = _group_sizes(trace, frame)
    implied = [
        _out_elements(c, i, n)
        for c, i, n in zip(
            frame["collective"], frame["in_nelems"], frame["group_size"], strict=True
        )
    ]
    frame["out_nelems"] = frame["out_nelems"].fillna(pd.Series(implied, dtype=float))
    itemsize = np.array([dtype_size(d) if d else np.nan for d in frame["dtype"]], dtype=float)
    frame["bytes"] = np.fmax(frame["in_nelems"], frame["out_nelems"]) * itemsize
    frame["dur"] = (frame["end"] - frame["start"]) / 1e3
    seconds = (frame["end"] - frame["start"]).to_numpy() / 1e9
    frame["algbw"] = np.where(
        seconds > 0, frame["bytes"] / np.where(seconds > 0, seconds, 1) / 1e9, np.nan
    )
    frame["busbw"] = frame["algbw"] * [
        bus_factor(c, n) for c, n in zip(frame["collective"], frame["group_size"], strict=True)
    ]
    frame = frame[_COLUMNS]
    frame.attrs["units"] = {
        "bytes": "B",
        "start": "ns",
        "end": "ns",
        "dur": "us",
        "algbw": "GB/s (1e9 B/s)",
        "busbw": "GB/s (1e9 B/s)",
    }
    return frame


_COLUMNS = [
    "rank", "pg", "pg_desc", "seq", "collective", "dtype", "in_nelems", "out_nelems", "group_size", "bytes",
    "start", "end", "dur", "algbw", "busbw", "device", "stream", "kernel", "source",
]  # fmt: skip


def collective_skew(trace: Trace, *, device: Device = "auto") -> pd.DataFrame:
    """Each collective matched across ranks by (process group, sequence), one row per rank.

    A collective cannot finish before its last rank arrives, so the rank that starts last is
    the one the others wait for. ``device`` picks the calls as in :func:`collectives`.

    Returns
    -------
    pandas.DataFrame
        ``pg``, ``seq``, ``collective``, ``bytes``, ``rank``, ``start``, ``end`` (ns), ``dur``,
        ``lateness`` (this rank's start − the earliest start), ``wait`` (the latest start −
        this rank's start: time spent waiting for the others), and per collective ``ranks``
        (how many matched), ``start_skew``, ``end_skew`` (max − min, µs), ``last`` (True for
        the last rank to start). Only collectives seen on at least two ranks are kept;
        ``attrs["mismatched"]`` counts matches whose ranks disagree on the collective.

    Examples
    --------
    >>> from aorta.trace import Trace
    >>> from aorta.trace.testing import synthetic_trace
    >>> a = synthetic_trace([("kernel", "ncclKernel_AllReduce", 0, 100)], header={"distributedInfo": {"rank": 0}})
    >>> b = synthetic_trace([("kernel", "ncclKernel_AllReduce", 30, 70)], header={"distributedInfo": {"rank": 1}})
    >>> skew = collective_skew(Trace.concat([a, b]))
    >>> skew[["rank", "lateness", "wait", "last"]].to_dict("list")
    {'rank': [0, 1], 'lateness': [0.0, 30.0], 'wait': [30.0, 0.0], 'last': [False, True]}
    """
    calls = collectives(trace, device=device)
    columns = [
        "pg",
        "seq",
        "collective",
        "bytes",
        "rank",
        "start",
        "end",
        "dur",
        "lateness",
        "wait",
        "ranks",
        "start_skew",
        "end_skew",
        "last",
    ]
    if calls.empty or calls["rank"].nunique() < 2:
        empty = pd.DataFrame(columns=columns)
        empty.attrs["note"] = "needs collective calls from at least two ranks"
        return empty
    group = calls.groupby(["pg", "seq"], sort=False)
    calls = calls.assign(
        ranks=group["rank"].transform("nunique"),
        first_start=group["start"].transform("min"),
        last_start=group["start"].transform("max"),
        first_end=group["end"].transform("min"),
        last_end=group["end"].transform("max"),
        kinds=group["collective"].transform("nunique"),
    )
    calls = calls[calls["ranks"] >= 2].copy()
    calls["lateness"] = (calls["start"] - calls["first_start"]) / 1e3
    calls["wait"] = (calls["last_start"] - calls["start"]) / 1e3
    calls["start_skew"] = (calls["last_start"] - calls["first_start"]) / 1e3
    calls["end_skew"] = (calls["last_end"] - calls["first_end"]) / 1e3
    calls["last"] = calls["start"] == calls["last_start"]
    mismatched = int(calls.loc[calls["kinds"] > 1, ["pg", "seq"]].drop_duplicates().shape[0])
    out = calls.sort_values(["first_start", "pg", "seq", "rank"], kind="stable")[
        columns
    ].reset_index(drop=True)
    out.attrs["units"] = {"start": "ns", "end": "ns"} | dict.fromkeys(
        ("dur", "lateness", "wait", "start_skew", "end_skew"), "us"
    )
    out.attrs["mismatched"] = mismatched
    return out


def stragglers(trace: Trace, *, device: Device = "auto") -> pd.DataFrame:
    """Ranks ranked by how late they arrive at collectives (the straggler first).

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``collectives`` (matched calls), ``times_last`` (calls it started last),
        ``total_lateness``, ``mean_lateness``, ``mean_wait`` (µs); sorted by total lateness.

    Examples
    --------
    >>> from aorta.trace import Trace
    >>> from aorta.trace.testing import synthetic_trace
    >>> a = synthetic_trace([("kernel", "ncclKernel_AllReduce", 0, 100)], header={"distributedInfo": {"rank": 0}})
    >>> b = synthetic_trace([("kernel", "ncclKernel_AllReduce", 30, 70)], header={"distributedInfo": {"rank": 1}})
    >>> stragglers(Trace.concat([a, b]))["rank"].tolist()
    [1, 0]
    """
    skew = collective_skew(trace, device=device)
    columns = ["rank", "collectives", "times_last", "total_lateness", "mean_lateness", "mean_wait"]
    if skew.empty:
        empty = pd.DataFrame(columns=columns)
        empty.attrs["note"] = skew.attrs.get("note", "no matched collectives")
        return empty
    out = skew.groupby("rank").agg(
        collectives=("seq", "size"),
        times_last=("last", "sum"),
        total_lateness=("lateness", "sum"),
        mean_lateness=("lateness", "mean"),
        mean_wait=("wait", "mean"),
    )
    out = (
        out.reset_index()
        .sort_values(["total_lateness", "rank"], ascending=[False, True], kind="stable")
        .reset_index(drop=True)
    )
    out.attrs["units"] = dict.fromkeys(("total_lateness", "mean_lateness", "mean_wait"), "us")
    return out[columns]


def clock_offsets(trace: Trace, *, method: Alignment = "collective_end") -> dict[int, int]:
    """Per-rank shifts (ns, to add to ``ts``) that put the ranks on one clock.

    ``"base_time"``: each rank's ``baseTimeNanoseconds`` relative to the earliest (what
    :func:`~aorta.trace.load` does by default), less any shift already applied.
    ``"collective_end"``: matched collectives end together on every rank (the last rank's
    arrival releases them all), so each rank is shifted by the median difference between its
    end times and the lowest rank's.

    Examples
    --------
    >>> from aorta.trace import Trace
    >>> from aorta.trace.testing import synthetic_trace
    >>> a = synthetic_trace([("kernel", "ncclKernel_AllReduce", 0, 100)], header={"distributedInfo": {"rank": 0}})
    >>> b = synthetic_trace([("kernel", "ncclKernel_AllReduce", 1030, 70)], header={"distributedInfo": {"rank": 1}})
    >>> clock_offsets(Trace.concat([a, b]))
    {0: 0, 1: -1000000}
    """
    if method == "base_time":
        bases = {r: trace.info(r).base_time_ns for r in trace.ranks}
        known = [b for b in bases.values() if b is not None]
        first = min(known) if known else 0
        return {
            r: (b - first if b is not None else 0) - trace.info(r).offset_ns
            for r, b in bases.items()
        }
    skew = collective_skew(trace)
    offsets = dict.fromkeys(trace.ranks, 0)
    if skew.empty:
        return offsets
    ends = skew.pivot_table(index=["pg", "seq"], columns="rank", values="end", aggfunc="first")
    ref = ends.columns.min()
    for rank in ends.columns:
        diff = (ends[rank] - ends[ref]).dropna()
        if rank != ref and len(diff):
            offsets[int(rank)] = -int(np.median(diff.to_numpy()))
    return offsets
