"""Arguments an op's model needs from another event, where its own ``Input Dims`` fall short.

Two cases, each a rule about which event records what the op's arguments do not:

- **A custom autograd Function's backward node** (``torch::autograd::CppNode<...>``) records
  only its incoming gradient; what the backward reads (indices, tables) is in the arguments of
  the forward call that created the node. The forward call of the op in
  :data:`PAIRED_FORWARD` carries no ``Sequence number`` (its op is not dispatched through
  autograd), but every autograd-dispatched op records the *next* sequence number
  (``at::sequence_number::peek()``), and the node the forward call creates takes exactly that
  number. So the forward call's number is the one recorded by the last op before it on its
  thread that has one; the node with sequence number ``s`` pairs with the latest forward call
  of the same rank whose number is ``<= s`` (the latest: a number read before an earlier node
  was created is too low, never too high), and only when the node's gradient has the forward
  output's batch size (``[B, total_D]``, ``B`` = bags / tables).
- **A Python autograd Function's backward** (apex's ``ConvBias_Backward``) records nothing of
  the forward: it pairs with the forward call of :data:`SEQUENCE_FORWARD` that has its
  ``Sequence number`` (rank, number; the latest before it), as TraceLens pairs them.
- **A ``cat`` whose inputs Kineto wrote as ``[]``** (a ``TensorList`` in older versions),
  directly inside a backward node of :data:`CAT_OF_GRADIENTS`: that node's work is the
  concatenation of its incoming gradients, which its own ``Input Dims`` record (autograd's
  ``SplitBackward0``/``SplitWithSizesBackward0`` are ``cat(grads)``; TorchRec's
  ``All2All_Pooled_WaitBackward`` concatenates the per-rank column blocks of its one
  gradient). Only when the node launched no other ``cat``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from .. import links

if TYPE_CHECKING:
    from ..model import Trace

__all__ = ["CAT_OF_GRADIENTS", "PAIRED_FORWARD", "SEQUENCE_FORWARD", "partners"]

#: Backward node of a custom autograd Function → the op whose call creates it.
PAIRED_FORWARD: dict[str, str] = {
    "torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>": (
        "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function"
    ),
}
#: Backward of a Python autograd Function → its forward, which has the same Sequence number.
SEQUENCE_FORWARD: dict[str, str] = {
    "ConvBias_Backward": "ConvBias_",
    "ConvBiasReLU_Backward": "ConvBiasReLU_",
}
#: Backward nodes whose work is ``cat`` of their incoming gradients (``Input Dims``).
CAT_OF_GRADIENTS: frozenset[str] = frozenset(
    {"SplitBackward0", "SplitWithSizesBackward0", "All2All_Pooled_WaitBackward"}
)
_CAT = "aten::cat"
# the lookup's schema: D_offsets (T + 1 entries) and offsets (B·T + 1 entries)
_D_OFFSETS = 6
_OFFSETS = 12


def partners(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For each op row, the event row whose ``Input Dims``/``Input type`` complete the op's own
    (its forward call, or the backward node a ``cat`` concatenates the gradients of); -1 for
    none. Costs one look at the name table when the trace has none of these ops.
    """
    out = np.full(rows.size, -1, np.int64)
    names = trace.categories("name")
    code = {n: i for i, n in enumerate(names)}
    nodes = [code[n] for n in PAIRED_FORWARD if n in code]
    if nodes:
        _pair_forward(trace, rows, nodes, out)
    for node, forward in SEQUENCE_FORWARD.items():
        if node in code and forward in code:
            _pair_sequence(trace, rows, code[node], code[forward], out)
    parents = [code[n] for n in CAT_OF_GRADIENTS if n in code]
    if _CAT in code and parents:
        _cat_parent(trace, rows, code[_CAT], parents, out)
    return out


def _pair_forward(trace: Trace, rows: np.ndarray, nodes: list[int], out: np.ndarray) -> None:
    names, name_col = trace.categories("name"), trace.column("name")
    seq, rank, ts = trace.column("seq"), trace.column("rank"), trace.column("ts")
    mine = np.flatnonzero(np.isin(name_col[rows], nodes) & (seq[rows] >= 0))
    forward = trace.find(cats=["cpu_op"], names=lambda n: n in PAIRED_FORWARD.values())
    if mine.size == 0 or forward.size == 0:
        return
    peeked = _number_before(trace, forward)
    for i in mine.tolist():
        node = rows[i]
        want = names.index(PAIRED_FORWARD[names[name_col[node]]])
        pick = np.flatnonzero(
            (name_col[forward] == want)
            & (rank[forward] == rank[node])
            & (peeked >= 0)
            & (peeked <= seq[node])
            & (ts[forward] < ts[node])
        )
        if pick.size == 0:
            continue
        best = forward[pick[np.lexsort((ts[forward[pick]], peeked[pick]))[-1]]]
        if _same_batch(trace, node, best):
            out[i] = best


def _pair_sequence(
    trace: Trace, rows: np.ndarray, node: int, forward: int, out: np.ndarray
) -> None:
    """Each ``node`` row pairs with the latest ``forward`` call before it with its (rank,
    Sequence number)."""
    name_col, seq, rank, ts = (trace.column(c) for c in ("name", "seq", "rank", "ts"))
    mine = np.flatnonzero((name_col[rows] == node) & (seq[rows] >= 0))
    calls = trace.op_rows[(name_col[trace.op_rows] == forward) & (seq[trace.op_rows] >= 0)]
    for i in mine.tolist():
        r = rows[i]
        pick = calls[(rank[calls] == rank[r]) & (seq[calls] == seq[r]) & (ts[calls] <= ts[r])]
        if pick.size:
            out[i] = pick[np.argmax(ts[pick])]


def _number_before(trace: Trace, forward: np.ndarray) -> np.ndarray:
    """For each forward call, the ``Sequence number`` of the last CPU op on its thread that
    started before it and has one (-1 for none)."""
    seq, ts = trace.column("seq"), trace.column("ts")
    numbered = trace.op_rows[seq[trace.op_rows] >= 0]
    group, ref = links.thread_groups(trace, forward, numbered)
    order = np.lexsort((ts[numbered], ref))
    ref, numbered = ref[order], numbered[order]
    out = np.full(forward.size, -1, np.int64)
    for i, (g, t) in enumerate(zip(group.tolist(), ts[forward].tolist(), strict=True)):
        lo, hi = np.searchsorted(ref, g, "left"), np.searchsorted(ref, g, "right")
        before = lo + int(np.searchsorted(ts[numbered[lo:hi]], t, "left")) - 1
        if before >= lo:
            out[i] = seq[numbered[before]]
    return out


def _same_batch(trace: Trace, node: int, forward: int) -> bool:
    """Whether the node's gradient ``[B, total_D]`` has the forward output's ``B``."""
    grad, fwd = _dims(trace, node), _dims(trace, forward)
    try:
        tables = _numel(fwd[_D_OFFSETS]) - 1
        bags = _numel(fwd[_OFFSETS]) - 1
        return len(grad[0]) == 2 and tables > 0 and bags == grad[0][0] * tables
    except (IndexError, TypeError):
        return False


def _cat_parent(
    trace: Trace, rows: np.ndarray, cat: int, parents: list[int], out: np.ndarray
) -> None:
    """Cats with no recorded tensor, each the only one directly inside a node of
    :data:`CAT_OF_GRADIENTS`."""
    name_col, ts, dur = trace.column("name"), trace.column("ts"), trace.column("dur")
    unrecorded = _unrecorded_codes(trace)
    mine = np.flatnonzero(
        (name_col[rows] == cat) & np.isin(trace.column("input_dims")[rows], unrecorded)
    )
    nodes = trace.op_rows[np.isin(name_col[trace.op_rows], parents)]
    if mine.size == 0 or nodes.size == 0:
        return
    ops = trace.op_rows
    node_group, op_group = links.thread_groups(trace, nodes, ops)
    order, lo, hi = links.contained_ranges(
        node_group, ts[nodes], ts[nodes] + dur[nodes], op_group, ts[ops]
    )
    position = {int(r): i for i, r in zip(mine.tolist(), rows[mine].tolist(), strict=True)}
    for k, node in enumerate(nodes.tolist()):
        inner = ops[order[lo[k] : hi[k]]]
        inner = inner[(inner != node) & (ts[inner] + dur[inner] <= ts[node] + dur[node])]
        cats = [int(r) for r in inner.tolist() if name_col[r] == cat]
        if len(cats) != 1 or cats[0] not in position:
            continue
        c = cats[0]
        # a direct child: no other op inside the node encloses the cat
        enclosing = (ts[inner] <= ts[c]) & (ts[inner] + dur[inner] >= ts[c] + dur[c])
        if int(enclosing.sum()) == 1:
            out[position[c]] = node


def _unrecorded_codes(trace: Trace) -> list[int]:
    """The ``Input Dims`` codes that hold no tensor shape at all (``[[], []]``)."""
    return [
        i
        for i, text in enumerate(trace.categories("input_dims"))
        if not any(c.isdigit() for c in text)
    ]


def _dims(trace: Trace, row: int) -> list[Any]:
    code = int(trace.column("input_dims")[row])
    if code < 0:
        return []
    value = msgspec.json.decode(trace.categories("input_dims")[code])
    return value if isinstance(value, list) else []


def _numel(shape: list[int]) -> int:
    return int(np.prod(shape)) if shape else 0
