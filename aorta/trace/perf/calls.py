"""The modelled calls of a trace: which ``cpu_op`` rows have a model, the GPU work each one
launched (every GPU op — kernels, copies and fills — whose runtime call ran on the op's thread
during the op, as TraceLens counts it), its busy time, and the output row ("group") it falls in.

:mod:`aorta.trace.perf` builds its tables from :func:`calls`. A backward row (``SDPA_bwd``,
``Reduce_bwd``) is the forward op's model applied to the GPU work of the
``autograd::engine::evaluate_function`` that has the forward op's ``Sequence number``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import numpy as np
import pandas as pd

from .. import links
from .context import partners
from .op_model import BACKWARD_FAMILIES, BACKWARD_OPS, OpModel, has_model, op_model
from .own import FOREACH

if TYPE_CHECKING:
    from ..model import Trace

__all__ = [
    "GROUP_COLUMNS",
    "Calls",
    "Grouping",
    "Work",
    "busy",
    "calls",
    "group_columns",
    "grouped_columns",
    "launched",
    "strides_text",
    "union",
]

#: How :func:`calls` forms output rows: ``"args"`` as TraceLens does (op × the model's
#: parameters × the types and strides of the inputs it reads), ``"shape"`` by the parameters.
Grouping = Literal["args", "shape"]

_EVALUATE = "autograd::engine::evaluate_function:"
#: The element type a ``multi_tensor_apply`` kernel's functor is instantiated for (its first
#: template argument), as a Kineto ``Input type`` name.
_FUNCTOR_DTYPE = re.compile(r"Functor<(float|double|c10::Half|c10::BFloat16|long|int|bool)\s*,")
_LIST_DTYPES = ("float", "double", "c10::Half", "c10::BFloat16", "long int", "int", "bool")


# -- the calls ----------------------------------------------------------------------------------
def _decoded(trace: Trace, column: str, codes: np.ndarray) -> dict[int, Any]:
    """The JSON texts of a categorical column, decoded once per code present in ``codes``."""
    categories = trace.categories(column)
    wanted = [c for c in np.unique(codes).tolist() if c >= 0]
    try:  # one decode of them all as one array (one call, not one per text)
        return dict(
            zip(
                wanted,
                msgspec.json.decode(f"[{','.join(categories[c] for c in wanted)}]"),
                strict=True,
            )
        )
    except (msgspec.DecodeError, ValueError):
        pass
    out: dict[int, Any] = {}
    for code in wanted:  # a text that does not decode is None, the others as they are
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
    strides: bool = False,
) -> tuple[np.ndarray, list[OpModel | None], np.ndarray]:
    """For each op row, an index into the returned models (``backward``: the forward op's model
    of its backward work), and per model the first of its rows (a position in ``rows``);
    evaluated once per distinct (name, dims, types, concrete, training, ``list_dtype``: an
    index into ``_LIST_DTYPES`` per row, -1 for none; ``partner``: the event row completing the
    op's arguments, :func:`~aorta.trace.perf.context.partners`; with ``strides`` also the
    ``Input Strides``, so that all rows of a model share them)."""
    if rows.size == 0:
        return np.empty(0, np.int64), [], np.empty(0, np.int64)
    at: dict[str, int] = {}  # the key columns by name (only those that can vary are gathered)

    def add(name: str, values: np.ndarray) -> None:
        at[name] = len(cols)
        cols.append(values)

    cols: list[np.ndarray] = []
    for c in ("name", "input_dims", "input_type", "concrete"):
        add(c, trace.column(c)[rows])
    add("training", trace.column("seq")[rows] >= 0)
    if strides:
        add("strides", trace.column("input_strides")[rows])
    if list_dtype is not None:
        add("list_dtype", list_dtype)
    if partner is not None:  # the partner's dims, types and Concrete Inputs (-1: none)
        for c in ("input_dims", "input_type", "concrete"):
            add(f"partner_{c}", np.where(partner >= 0, trace.column(c)[np.maximum(partner, 0)], -1))
    key, first = _combine(*cols)
    firsts = {name: cols[i][first] for name, i in at.items()}
    partnered = partner is not None

    def decoded(column: str) -> dict[int, Any]:  # the op's own and its partner's, together
        codes = firsts[column]
        if partnered:
            codes = np.concatenate([codes, firsts[f"partner_{column}"]])
        return _decoded(trace, column, codes)

    dims, types, concrete = decoded("input_dims"), decoded("input_type"), decoded("concrete")
    names = trace.categories("name")
    listed = firsts.get("list_dtype", np.full(first.size, -1)).tolist()
    evaluated = []
    for i, (name, d, t, c, training) in enumerate(
        zip(
            *(
                firsts[k].tolist()
                for k in ("name", "input_dims", "input_type", "concrete", "training")
            ),
            strict=True,
        )
    ):
        pair = None
        if partnered and firsts["partner_input_dims"][i] >= 0:
            pair = tuple(
                table.get(int(firsts[f"partner_{column}"][i]))
                for table, column in (
                    (dims, "input_dims"),
                    (types, "input_type"),
                    (concrete, "concrete"),
                )
            )
        model = op_model(
            names[name],
            dims.get(d),
            types.get(t),
            concrete.get(c),
            backward=backward,
            training=bool(training),
            list_dtype=_LIST_DTYPES[listed[i]] if listed[i] >= 0 else None,
            partner=pair,
        )
        evaluated.append(model)
    # key codes are 0..k-1 in order of first appearance; ``first`` is sorted by key
    return key, evaluated, first


def _list_dtypes(trace: Trace, rows: np.ndarray, work: Work) -> np.ndarray:
    """For each op row, the element type of its ``TensorList`` inputs as an index into
    ``_LIST_DTYPES`` (-1: unknown or not a ``_foreach_*`` op), read from the functor of the
    first kernel the op launched (``BinaryOpListAlphaFunctor<float, ...>``; ``work``: the
    rows' :func:`launched` work): Kineto records the lists' shapes but not their type."""
    out = np.full(rows.size, -1, np.int64)
    names = trace.categories("name")
    if not names or work.gpu.size == 0:
        return out
    is_foreach = np.fromiter((n.startswith(FOREACH) for n in names), bool, len(names))
    mine = np.flatnonzero(is_foreach[trace.column("name")[rows]] & (work.hi > work.lo))
    kernels = trace.gpu_ops.name[work.gpu[work.lo[mine]]]  # the first GPU op each launched
    for e, g in zip(mine.tolist(), kernels.tolist(), strict=True):
        found = _FUNCTOR_DTYPE.search(names[g])
        if found:
            out[e] = _LIST_DTYPES.index({"long": "long int"}.get(found[1], found[1]))
    return out


@dataclass(frozen=True)
class Work:
    """The GPU work of host events: event ``i`` launched the GPU ops ``gpu[lo[i]:hi[i]]``
    (indices into :attr:`Trace.gpu_ops`), in launch order.

    ``gpu`` lists the GPU ops of every runtime call that launched one, the calls sorted by
    thread and time, so the work of an event — the calls on its thread during its span — is
    one contiguous range.
    """

    gpu: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def take(self, events: np.ndarray) -> Work:
        """The work of the events at positions ``events``."""
        return Work(self.gpu, self.lo[events], self.hi[events])

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(event position, GPU op index) for every GPU op of every event, by event."""
        event, pos = _expand(self.lo, self.hi - self.lo)
        return event, self.gpu[pos]


def launched(trace: Trace, rows: np.ndarray) -> Work:
    """The GPU work of each host event of ``rows``: every GPU op (kernels, copies and fills,
    as TraceLens counts them) whose runtime call ran on the event's thread within its span.

    Only the runtime calls that launched a GPU op are placed on the threads' time lines; when
    each launched one GPU op (the common case) the calls' order is the GPU ops' order.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::zero_", 0, 10), ("gpu_memset", "Memset (Device)", 12, 2, {"launch_ts": 2}),
    ...                      ("kernel", "fill", 15, 3, {"launch_ts": 5}), ("kernel", "later", 30, 3, {"launch_ts": 20})])
    >>> w = launched(t, t.find(cats=["cpu_op"]))
    >>> [t.categories("name")[t.gpu_ops.name[i]] for i in w.gpu[w.lo[0]:w.hi[0]]]
    ['Memset (Device)', 'fill']
    """
    gpu, rt = trace.gpu_ops, trace.runtime_rows
    nothing = np.zeros(rows.size, np.int64)
    linked = np.flatnonzero(gpu.linked)
    if rows.size == 0 or rt.size == 0 or linked.size == 0:
        return Work(np.empty(0, np.int64), nothing, nothing)
    launch_idx = gpu.launch_rt[linked]
    launches = np.bincount(launch_idx, minlength=rt.size)
    launcher = np.flatnonzero(launches)  # runtime calls that launched, in row order
    calls = rt[launcher]
    ts = trace.column("ts")
    group, call_group = links.thread_groups(trace, rows, calls)
    order, lo, hi = links.contained_ranges(
        group, ts[rows], ts[rows] + trace.column("dur")[rows], call_group, ts[calls]
    )
    if int(launches.max()) == 1:  # one GPU op per call: list them in the calls' order
        gpu_of = np.empty(rt.size, np.int64)
        gpu_of[launch_idx] = linked
        return Work(gpu_of[launcher[order]], lo, hi)
    # several per call (graph launches): each call's GPU ops together, in the calls' order
    rank_of = np.empty(rt.size, np.int64)
    rank_of[launcher[order]] = np.arange(order.size)
    listed = linked[np.lexsort((gpu.ts[linked], rank_of[launch_idx]))]
    offsets = np.r_[0, np.cumsum(launches[launcher[order]])]
    return Work(listed, offsets[lo], offsets[hi])


def _expand(start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges ``start[i] : start[i] + count[i]``: (i, position) of every element."""
    count = np.maximum(count, 0)
    total = int(count.sum())
    owner = np.repeat(np.arange(count.size), count)
    offsets = np.cumsum(count) - count
    return owner, np.arange(total) - offsets[owner] + start[owner]


def busy(trace: Trace, work: Work) -> np.ndarray:
    """Per event of ``work``: the busy time (ns) of its GPU ops, the length of the union of
    their intervals.

    Where an event's GPU ops, in launch order, each start after the previous one ended (one
    stream: nearly always) the union is their summed duration, a difference of prefix sums;
    only the other events' intervals are merged (:func:`union`).

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "op", 0, 10), ("kernel", "a", 12, 5, {"launch_ts": 2}),
    ...                      ("kernel", "b", 14, 5, {"launch_ts": 3, "stream": 9})])
    >>> busy(t, launched(t, t.find(cats=["cpu_op"]))).tolist()  # 12..19 µs: overlapping streams
    [7000]
    """
    gpu = trace.gpu_ops
    n = work.lo.size
    if work.gpu.size == 0 or n == 0:
        return np.zeros(n, np.int64)
    start, end = gpu.ts[work.gpu], gpu.end[work.gpu]
    summed = np.empty(start.size + 1, np.int64)  # prefix sums of the durations, in place
    summed[0] = 0
    np.subtract(end, start, out=summed[1:])
    np.cumsum(summed, out=summed)
    out: np.ndarray = summed[work.hi] - summed[work.lo]
    # the GPU ops that start before the one listed before them ends (few): an event whose range
    # holds one of them past its first op has overlapping intervals
    late = np.flatnonzero(start[1:] < end[:-1]) + 1
    tangled = np.flatnonzero(
        np.searchsorted(late, work.lo, "right") < np.searchsorted(late, work.hi, "left")
    )
    if tangled.size:
        owner, idx = work.take(tangled).pairs()
        out[tangled] = union(owner, gpu.ts[idx], gpu.end[idx], tangled.size)
    return out


def union(owner: np.ndarray, start: np.ndarray, end: np.ndarray, n: int) -> np.ndarray:
    """Per owner ``0..n-1``: the length (ns) of the union of its intervals.

    ``owner`` sorted and the starts of each owner in time order take no sort; otherwise one
    ``lexsort``.

    Examples
    --------
    >>> union(np.array([0, 0, 1]), np.array([0, 5, 0]), np.array([10, 12, 4]), 2).tolist()
    [12, 4]
    """
    out = np.zeros(n, np.int64)
    if owner.size == 0:
        return out
    t0 = int(start.min())
    span = int(end.max()) - t0 + 1
    if span * (n + 1) >= 2**62:  # too wide to pack: one owner at a time
        for i in np.unique(owner).tolist():
            mask = owner == i
            out[i] = union(np.zeros(int(mask.sum()), np.int64), start[mask], end[mask], 1)[0]
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


def _op_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``cpu_op`` rows with a model, those of them whose model may describe backward work
    too (:data:`BACKWARD_OPS`, a subset), and ``autograd::engine::evaluate_function`` rows:
    one lookup per event through a table over the unique names."""
    names = trace.categories("name")
    kind = np.fromiter(
        (
            (3 if n in BACKWARD_OPS else 1) if has_model(n) else 2 if n.startswith(_EVALUATE) else 0
            for n in names
        ),
        np.int8,
        len(names),
    )
    cats = trace.categories("cat")
    empty = np.empty(0, np.int64)
    if not names or "cpu_op" not in cats:
        return empty, empty, empty
    of_row = kind[trace.column("name")]  # every event: a small table, read in order
    found = np.flatnonzero(of_row)  # then the category of the few candidates only
    found = found[trace.column("cat")[found] == cats.index("cpu_op")]
    kinds = of_row[found]
    return found[kinds != 2], found[kinds == 3], found[kinds == 2]


def _backward(
    trace: Trace, rows: np.ndarray, capable: np.ndarray, bwd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Backward work linked to modelled forward ops by ``Sequence number``: positions in
    ``bwd`` (the ``evaluate_function`` rows, :func:`_op_rows`'s third) and in ``rows`` of their
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


def _may_link(trace: Trace, capable: np.ndarray, evaluate: np.ndarray) -> np.ndarray:
    """The ``evaluate_function`` rows whose (rank, sequence number) is that of an op of
    ``capable`` (the ops whose model may describe backward work): the only ones
    :func:`_backward` can link, so the others' GPU work is never looked up."""
    if evaluate.size == 0 or capable.size == 0:
        return evaluate[:0]
    seq, rank = trace.column("seq"), trace.column("rank")
    fwd = capable[seq[capable] >= 0]
    if fwd.size == 0:
        return evaluate[:0]
    return evaluate[links.lookup(rank[evaluate], seq[evaluate], rank[fwd], seq[fwd]) >= 0]


#: The columns of a group record (one output row): what identifies it, then its unit.
GROUP_COLUMNS = ("op", "family", "shape", "dtype", "dtypes", "strides", "flops", "bytes", "unit")
#: One group's values, in the order of :data:`GROUP_COLUMNS`.
Record = tuple[object, ...]


@dataclass
class Calls:
    """Modelled calls (forward ops, then backward work) and their output groups."""

    rows: np.ndarray  # event rows (the evaluate_function for backward work)
    group: np.ndarray  # index into ``records``
    kernel_ns: np.ndarray  # busy time of the GPU ops each call launched
    records: list[Record]  # per group: the values of GROUP_COLUMNS
    work: Work  # each call's GPU ops

    @property
    def groups(self) -> pd.DataFrame:
        """``records`` as a table (columns :data:`GROUP_COLUMNS`)."""
        return pd.DataFrame(group_columns(self.records))


class _Groups:
    """The output rows: one per distinct key, assigned to calls model by model."""

    def __init__(self, trace: Trace, by: Grouping) -> None:
        self.trace, self.by = trace, by
        self.table: dict[tuple[object, ...], int] = {}
        self.records: list[Record] = []

    def assign(
        self, rows: np.ndarray, ids: np.ndarray, models: list[OpModel | None], first: np.ndarray
    ) -> np.ndarray:
        """The group of each call: ``rows`` its event row, ``ids`` its index into ``models``
        (whose rows share the op name and, with ``by="args"``, the strides: :func:`_models`),
        ``first`` each model's first row (a position in ``rows``)."""
        if ids.size == 0:
            return np.empty(0, np.int64)
        names, name_codes = self.trace.categories("name"), self.trace.column("name")
        where = rows[first]
        if (
            self.by == "args"
        ):  # TraceLens's rows: the strides of the tensors the model reads count too
            codes = self.trace.column("input_strides")[where]
            texts = _decoded(self.trace, "input_strides", codes)
        mapping = np.full(len(models), -1, np.int64)
        for i, m in enumerate(models):
            if m is None:
                continue
            if self.by == "shape":
                extra = ("", "")
            else:
                extra = (",".join(m.dtypes), strides_text(texts.get(int(codes[i])), m.strided))
            key = (
                names[name_codes[where[i]]],
                m.family,
                m.shape,
                m.dtype,
                *extra,
                m.flops,
                m.bytes,
            )
            if key not in self.table:
                self.table[key] = len(self.records)
                self.records.append((*key, m.unit))
            mapping[i] = self.table[key]
        groups: np.ndarray = mapping[ids]
        return groups


def strides_text(strides: Any, positions: tuple[int, ...]) -> str:
    """The ``Input Strides`` at ``positions`` as text; ``""`` when the trace has none, ``-``
    for a position it does not have.

    >>> strides_text([[572416, 64, 1024, 1], [35776, 35776, 64, 1], []], (0, 1))
    '(572416,64,1024,1) (35776,35776,64,1)'
    >>> strides_text(None, (0,)), strides_text([[1]], (0, 3))
    ('', '(1) -')
    """
    if not isinstance(strides, list):
        return ""
    picked = [strides[i] if i < len(strides) else None for i in positions]
    return " ".join(
        "(" + ",".join(str(x) for x in s) + ")" if isinstance(s, list) else "-" for s in picked
    )


def calls(trace: Trace, *, by: Grouping = "args") -> Calls:
    """Every modelled call, with its group: op, family, shape, dtype, FLOPs and bytes, and with
    ``by="args"`` also the types and strides of the inputs the model reads (TraceLens's rows).

    The GPU work of every candidate (ops with a model, ``evaluate_function`` rows) is found in
    one pass (:func:`launched`) and serves the ``_foreach_*`` element types, the busy time
    and the owners of :func:`~aorta.trace.perf.perf_summary`.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::relu", 0, 10, {"Input Dims": [[8, 4]], "Input type": ["float"],
    ...                       "Input Strides": [[1, 8]]}), ("kernel", "relu", 12, 3, {"launch_ts": 2})])
    >>> found = calls(t)
    >>> found.groups[["op", "family", "shape", "strides"]].to_dict("records"), found.kernel_ns.tolist()
    ([{'op': 'aten::relu', 'family': 'Elementwise', 'shape': 'op_shape=(8,4)', 'strides': '(1,8)'}], [3000])
    """
    rows, backward_capable, evaluate = _op_rows(trace)
    evaluate = _may_link(trace, backward_capable, evaluate)
    candidates = np.concatenate([rows, evaluate]).astype(np.int64)
    work = launched(trace, candidates)
    list_dtype = _list_dtypes(trace, candidates, work)[: rows.size]
    partner = partners(trace, rows)
    ids, models, first = _models(
        trace,
        rows,
        list_dtype=list_dtype if (list_dtype >= 0).any() else None,
        partner=partner if (partner >= 0).any() else None,
        strides=by == "args",
    )
    groups = _Groups(trace, by)  # a backward row is named, shaped and strided as its forward op
    group = groups.assign(rows, ids, models, first)
    keep = np.flatnonzero(group >= 0)  # the calls with a model
    ids, group = ids[keep], group[keep]
    capable = np.array([m is not None and m.family in BACKWARD_FAMILIES for m in models], bool)
    capable_rows = capable[ids] if ids.size else np.zeros(0, bool)
    bwd, fwd_of = _backward(trace, rows[keep], capable_rows, evaluate)
    fwd_rows = rows[keep][fwd_of]
    bwd_ids, bwd_models, bwd_first = _models(trace, fwd_rows, backward=True, strides=by == "args")
    bwd_group = groups.assign(fwd_rows, bwd_ids, bwd_models, bwd_first)
    kept = bwd_group >= 0
    bwd, group = bwd[kept], np.concatenate([group, bwd_group[kept]])
    # calls as positions among the candidates
    position = np.concatenate([keep, rows.size + bwd]).astype(np.int64)
    mine = work.take(position)
    return Calls(
        rows=candidates[position],
        group=group,
        kernel_ns=busy(trace, mine),
        records=groups.records,
        work=mine,
    )


def group_columns(records: list[Record]) -> dict[str, np.ndarray]:
    """The records' columns as arrays (numbers inferred as pandas would: int64 when all are
    integers, else float64; text as object)."""
    if not records:
        return {c: np.empty(0, float if c in ("flops", "bytes") else object) for c in GROUP_COLUMNS}
    out: dict[str, np.ndarray] = {}
    for name, values in zip(GROUP_COLUMNS, zip(*records, strict=True), strict=True):
        if name in ("flops", "bytes"):
            out[name] = np.array(values)
        else:
            column = np.empty(len(values), object)
            column[:] = values
            out[name] = column
    return out


def grouped_columns(
    records: list[Record], group: np.ndarray, kernel_ns: np.ndarray
) -> dict[str, np.ndarray]:
    """Per group with calls: the group's columns (:func:`group_columns`), ``count`` (calls),
    summed ``kernel_us``, achieved ``tflops``/``tbps`` (over the calls that ran GPU work) and
    ``intensity``.

    >>> record = ("aten::mm", "GEMM", "M=2", "float", "float,float", "", 2e6, 1e3, "matrix")
    >>> out = grouped_columns([record], np.array([0, 0]), np.array([1000, 0]))
    >>> out["count"].tolist(), out["kernel_us"].tolist(), out["tflops"].tolist()  # one call ran 1 µs
    ([2], [1.0], [2.0])
    """
    n = len(records)
    count = np.bincount(group, minlength=n)
    timed = np.bincount(group, weights=(kernel_ns > 0).astype(float), minlength=n)
    kernel_us = np.bincount(group, weights=kernel_ns.astype(float), minlength=n) / 1e3
    out = group_columns(records)
    seconds = np.where(kernel_us > 0, kernel_us * 1e-6, np.nan)
    flops, moved = out["flops"].astype(float), out["bytes"].astype(float)
    out["count"] = count
    out["kernel_us"] = kernel_us
    out["tflops"] = flops * timed / seconds / 1e12
    out["tbps"] = moved * timed / seconds / 1e12
    out["intensity"] = flops / np.where(moved > 0, moved, np.nan)
    some = count > 0
    return {k: v[some] for k, v in out.items()}
