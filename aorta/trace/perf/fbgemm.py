"""Memory-bound models of FBGEMM-GPU's embedding and sparse-feature ops (``Memory`` family), read
from their ``Input Dims`` / ``Input type``: table-batched embedding lookups, FP8/HFP8
(de)quantisation, permutes of pooled embeddings and of sparse features, index bounds checks.

Each model counts the bytes the op must move at least (its inputs read once, its outputs
written once) and no FLOPs but the lookup's additions. What the trace does not record is never
guessed: a model returns ``None`` when an output size depends on a value Kineto did not write
(for example a permute that repeats features, whose output length is a runtime sum).
"""

from __future__ import annotations

from typing import Any

from .args import Args, OpModel, bpe, concrete_at, dims_at, ints, numel, type_at

__all__ = ["FBGEMM_MODELS"]

#: ``fbgemm_gpu.split_table_batched_embeddings_ops_training``'s ``SparseType`` codes → bytes.
_SPARSE_TYPE_BYTES = {0: 4, 1: 2, 2: 1, 5: 2, 6: 1}
# positions in split_embedding_codegen_lookup_rowwise_adagrad_function's schema
_DEV_W, _UVM_W, _D_OFFSETS, _INDICES, _OFFSETS, _POOLING, _WEIGHTS = 1, 2, 6, 11, 12, 13, 14
_M1_DEV, _M1_UVM, _OUTPUT_DTYPE = 20, 21, 29


def _shape(dims: list[Any], i: int) -> list[int]:
    shape = dims_at(dims, i)
    if shape is None:
        raise ValueError(f"input {i} is not a tensor")
    return shape


def _lookup(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Forward of a table-batched embedding-bag lookup with the row-wise Adagrad optimizer.

    The embedding dimension ``D`` is not in the arguments; row-wise Adagrad keeps one momentum
    value per table row, so ``D`` = weight elements / momentum elements (the mean over rows:
    exact when every table has the same ``D``). Bytes: indices and offsets (and per-sample
    weights) read, ``L`` rows of ``D`` gathered, ``B·T`` pooled rows of ``D`` written in the
    output precision (FP32 unless ``Concrete Inputs`` say otherwise). FLOPs: one addition per
    gathered element (two when weighted).
    """
    dims, types, concrete = args
    weights = numel(_shape(dims, _DEV_W)) + numel(_shape(dims, _UVM_W))
    rows = numel(_shape(dims, _M1_DEV)) + numel(_shape(dims, _M1_UVM))
    lookups, bags = numel(_shape(dims, _INDICES)), numel(_shape(dims, _OFFSETS)) - 1
    size_w = bpe(type_at(types, _DEV_W))
    size_i, size_o = bpe(type_at(types, _INDICES)), bpe(type_at(types, _OFFSETS))
    pooling = ints(concrete_at(concrete, _POOLING))
    if not rows or bags <= 0 or size_w is None or size_i is None or size_o is None:
        return None
    if pooling is not None and pooling != [0] and pooling != [1]:  # not SUM/MEAN: no bag sums
        return None
    if len(dims) > _OUTPUT_DTYPE:  # the output precision is an argument: read it or give up
        code = ints(concrete_at(concrete, _OUTPUT_DTYPE))
        size_out = _SPARSE_TYPE_BYTES.get(code[0]) if code and len(code) == 1 else None
        if size_out is None:
            return None
    else:
        size_out = 4  # fbgemm's default output_dtype, SparseType.FP32
    d = weights / rows
    per_sample = dims_at(dims, _WEIGHTS)
    weighted = bool(per_sample) and numel(per_sample) == lookups
    moved = lookups * size_i + (bags + 1) * size_o + lookups * d * size_w + bags * d * size_out
    if weighted:
        moved += lookups * (bpe(type_at(types, _WEIGHTS)) or 4)
    params = {"L": lookups, "bags": bags, "D": d, "weighted": weighted}
    return OpModel(
        "Memory",
        lookups * d * (2 if weighted else 1),
        moved,
        "vector",
        type_at(types, _DEV_W),
        params,
    )


def _lookup_backward(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """The fused backward and row-wise Adagrad update of a lookup (its autograd ``CppNode``),
    with the forward call's arguments (``ctx["partner"]``, paired by
    :mod:`aorta.trace.perf.context`): the node itself records only the gradient ``[B, total_D]``.

    fbgemm linearises and sorts the ``L`` lookups by table row, then accumulates, for each
    lookup, its bag's gradient row (``D`` values) into the row it looked up; a weighted lookup
    also reads its per-sample weight and writes that weight's gradient (the dot product of the
    lookup's table row and gradient row). Counted: indices and offsets read, ``L`` gradient rows
    read, and for weighted lookups ``L`` weights read, ``L`` table rows read and ``L`` weight
    gradients written; FLOPs: one addition per gradient element (plus a multiplication, and the
    dot product's two, when weighted). Not counted, so the bytes are a lower bound: the update
    of each distinct row (its ``D`` weights and momentum read and written) — how many distinct
    rows the lookups hit is computed on the GPU and recorded nowhere — and the sort's passes.
    """
    dims, types, _ = args
    forward = ctx.get("partner")
    grad, size_g = dims_at(dims, 0), bpe(type_at(types, 0))
    if forward is None or grad is None or len(grad) != 2 or size_g is None:
        return None
    fdims, ftypes = forward[0], forward[1]
    weights = numel(_shape(fdims, _DEV_W)) + numel(_shape(fdims, _UVM_W))
    rows = numel(_shape(fdims, _M1_DEV)) + numel(_shape(fdims, _M1_UVM))
    lookups, bags = numel(_shape(fdims, _INDICES)), numel(_shape(fdims, _OFFSETS)) - 1
    size_w = bpe(type_at(ftypes, _DEV_W))
    size_i, size_o = bpe(type_at(ftypes, _INDICES)), bpe(type_at(ftypes, _OFFSETS))
    if not rows or bags <= 0 or size_w is None or size_i is None or size_o is None:
        return None
    d = weights / rows  # as in the forward: one momentum value per table row
    per_sample = dims_at(fdims, _WEIGHTS)
    weighted = bool(per_sample) and numel(per_sample) == lookups
    moved = lookups * size_i + (bags + 1) * size_o + lookups * d * size_g
    flops = lookups * d
    if weighted:
        size_s = bpe(type_at(ftypes, _WEIGHTS)) or 4
        moved += lookups * size_s + lookups * d * size_w + lookups * size_g
        flops += 3 * lookups * d
    params = {"L": lookups, "bags": bags, "D": d, "weighted": weighted, "grad": tuple(grad)}
    return OpModel("Memory", flops, moved, "vector", type_at(types, 0), params)


def _convert(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """(De)quantisation: the input read once, the output written once.

    FP8 row-wise rows carry two floats after the values, padded to 4 bytes
    (``ceil4(cols) + 8`` bytes per row); HFP8 is one byte per element. The dequantised output
    is FP32 when the op has no ``output_dtype`` argument (fbgemm's default).
    """
    dims, types, _ = args
    x = _shape(dims, 0)
    n = numel(x)
    size = bpe(type_at(types, 0))
    if size is None:
        return None
    if op == "fbgemm::FloatToFP8RowwiseQuantized":
        if len(x) != 2:
            return None
        written = x[0] * (-(-x[1] // 4) * 4 + 8)
    elif op == "fbgemm::FP8RowwiseQuantizedToFloat":
        if len(x) != 2 or x[1] <= 8 or len(dims) > 2:
            return None
        written = x[0] * (x[1] - 8) * 4
    elif op == "fbgemm::FloatToHFP8Quantized":
        written = n
    else:  # HFP8QuantizedToFloat
        written = n * 4
    params = {"op_shape": tuple(x)}
    return OpModel("Memory", 0.0, float(n * size + written), "vector", type_at(types, 0), params)


def _permute_pooled(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """A permute of pooled embeddings ``[B, total_D]`` (forward, or its backward node whose
    input is the gradient of the same shape): read once, written once, plus the offset
    tensors of the forward."""
    dims, types, _ = args
    x = _shape(dims, 0)
    size = bpe(type_at(types, 0))
    if size is None or len(x) != 2:
        return None
    extra = sum(
        numel(dims_at(dims, i)) * (bpe(type_at(types, i)) or 0)
        for i in range(1, len(dims))
        if dims_at(dims, i)
    )
    params = {"op_shape": tuple(x)}
    return OpModel(
        "Memory", 0.0, float(2 * numel(x) * size + extra), "vector", type_at(types, 0), params
    )


def _permute_sparse(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """A permute of sparse features (``permute``, ``lengths [T, B]``, ``indices``, optional
    ``weights``): lengths and values read once and written once. Only when the permute keeps
    every feature once (``len(permute) == T``): otherwise the output length is a runtime sum
    the trace does not record."""
    dims, types, _ = args
    permute, lengths, values = _shape(dims, 0), _shape(dims, 1), _shape(dims, 2)
    if len(lengths) < 1 or numel(permute) != lengths[0]:
        return None
    sizes = [bpe(type_at(types, i)) for i in range(3)]
    if any(s is None for s in sizes):
        return None
    s_p, s_l, s_v = (s or 0 for s in sizes)
    moved = numel(permute) * s_p + 2 * numel(lengths) * s_l + 2 * numel(values) * s_v
    w = dims_at(dims, 3)
    if w:
        moved += 2 * numel(w) * (bpe(type_at(types, 3)) or 4)
    params = {"lengths": tuple(lengths), "values": numel(values)}
    return OpModel("Memory", 0.0, float(moved), "vector", type_at(types, 2), params)


def _read_inputs(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """``bounds_check_indices``: every tensor input read once; nothing written for valid
    indices (the trace cannot say how many were not)."""
    dims, types, _ = args
    read = 0
    for i in range(len(dims)):
        shape, size = dims_at(dims, i), bpe(type_at(types, i))
        if shape and size and type_at(types, i) != "Scalar":
            read += numel(shape) * size
    if not read:
        return None
    params = {"indices": numel(dims_at(dims, 1))}
    return OpModel("Memory", 0.0, float(read), "vector", type_at(types, 1), params)


def _cumsum(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """``asynchronous_complete_cumsum``: ``n`` read, ``n + 1`` written; one add per element."""
    dims, types, _ = args
    x = _shape(dims, 0)
    size = bpe(type_at(types, 0))
    if size is None or len(x) != 1:
        return None
    n = numel(x)
    return OpModel(
        "Memory", float(n), float((2 * n + 1) * size), "vector", type_at(types, 0), {"n": n}
    )


#: Op name → model function (FBGEMM-GPU ops).
FBGEMM_MODELS = {
    "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function": _lookup,
    "torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>": _lookup_backward,
    "fbgemm::FloatToFP8RowwiseQuantized": _convert,
    "fbgemm::FP8RowwiseQuantizedToFloat": _convert,
    "fbgemm::FloatToHFP8Quantized": _convert,
    "fbgemm::HFP8QuantizedToFloat": _convert,
    "fbgemm::permute_pooled_embs_auto_grad": _permute_pooled,
    "fbgemm::permute_pooled_embs": _permute_pooled,
    "torch::autograd::CppNode<fbgemm_gpu::PermutePooledEmbsFunction"
    "<&fbgemm_gpu::permute_pooled_embs_gpu> >": _permute_pooled,
    "fbgemm::permute_2D_sparse_data": _permute_sparse,
    "fbgemm::permute_sparse_features": _permute_sparse,
    "fbgemm::bounds_check_indices": _read_inputs,
    "fbgemm::asynchronous_complete_cumsum": _cumsum,
}
