"""Perf-model families of our own, for what TraceLens leaves as "other": memory-bound models
from shapes (``Softmax``, ``Memory``, ``Pooling``). The ``Elementwise`` family reuses the
TraceLens elementwise formulas (:mod:`aorta.trace.perf.op_model`).
"""

from __future__ import annotations

import re
from typing import Any

from .args import Args, OpModel, bpe, concrete_at, dims_at, ints, numel, type_at

__all__ = ["FOREACH", "OWN_MODELS", "foreach"]


def _softmax(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, _ = args
    shape = dims_at(dims, 0)
    size = bpe(type_at(types, 0))
    if shape is None or size is None:
        return None
    n = numel(shape)
    backward = "backward" in op  # grad_output and output in, grad_input out
    flops, moved = (4 * n, 3 * n * size) if backward else (3 * n, 2 * n * size)
    return OpModel("Softmax", flops, moved, "vector", type_at(types, 0), {"op_shape": tuple(shape)})


def _tensors(dims: list[Any], types: list[Any]) -> list[tuple[int, int]]:
    """(elements, bytes per element) of every tensor input, TensorLists included."""
    out: list[tuple[int, int]] = []
    for d, t in zip(dims, types, strict=False):
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):  # TensorList
            size = bpe(t) or 0
            out.extend((numel(x), size) for x in d)
        elif (
            isinstance(d, list)
            and all(isinstance(x, int) for x in d)
            and bpe(t)
            and (d or t not in ("Scalar", "double", "long int", "long"))
        ):
            out.append((numel(d), bpe(t) or 0))
    return out


def _memory(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Data movement: read the inputs, write as much as ``out`` says (no FLOPs)."""
    dims, types, _ = args
    rule = _MEMORY[op]
    unrecorded = any(t == "TensorList" and d == [] for d, t in zip(dims, types, strict=False))
    # a cat/stack whose list Kineto wrote as []: any other tensor argument is not what it joins
    tensors = [] if rule == "sum" and unrecorded else _tensors(dims, types)
    if not tensors and rule == "sum" and "partner" in ctx:
        return _joined_gradients(ctx["partner"])
    if not tensors:
        return None
    read: float = sum(n * s for n, s in tensors)
    if rule == "gather":  # embedding/index: table rows picked by an index tensor
        table, index = tensors[0], tensors[1] if len(tensors) > 1 else (0, 8)
        shape = dims_at(dims, 0)
        row = table[0] / max(shape[0] if shape else 1, 1)
        written = index[0] * row * table[1]
        read = index[0] * index[1] + written
    elif rule == "scatter":  # embedding backward: grad rows added into a table
        grad, index = tensors[0], tensors[1] if len(tensors) > 1 else (0, 8)
        read = grad[0] * grad[1] + index[0] * index[1]
        written = grad[0] * grad[1]
    elif rule == "sum":  # cat/stack: the output is every input
        written = read
    elif rule == "write":  # fill_/zero_/normal_: write the tensor only
        read, written = 0, tensors[0][0] * tensors[0][1]
    else:  # "same": the output has the first input's size
        written = tensors[0][0] * tensors[0][1]
    shape = dims_at(dims, 0)
    params = {"op_shape": tuple(shape) if shape is not None else ()}
    return OpModel("Memory", 0.0, float(read + written), "vector", type_at(types, 0), params)


def _joined_gradients(partner: tuple[Any, ...]) -> OpModel | None:
    """A cat whose list Kineto wrote as ``[]``, the work of a backward node that concatenates
    its incoming gradients (:mod:`aorta.trace.perf.context`): it reads them and writes their
    concatenation, as the node's ``Input Dims``/``Input type`` record them."""
    dims, types = partner[0], partner[1]
    tensors = _tensors(dims, types)
    if not tensors:
        return None
    joined = sum(n * s for n, s in tensors)
    params = {"pieces": len(tensors), "elements": sum(n for n, _ in tensors)}
    return OpModel("Memory", 0.0, float(2 * joined), "vector", type_at(types, 0), params)


_MEMORY: dict[str, str] = {
    "aten::embedding": "gather",
    "aten::index_select": "gather",
    "aten::index": "gather",
    "aten::embedding_dense_backward": "scatter",
    "aten::embedding_backward": "scatter",
    "aten::cat": "sum",
    "aten::stack": "sum",
    "aten::fill_": "write",
    "aten::zero_": "write",
    "aten::normal_": "write",
    "aten::uniform_": "write",
    "aten::bernoulli_": "write",
    "aten::clone": "same",
    "aten::contiguous": "same",
    "aten::_to_copy": "same",
    "aten::to": "same",
    "aten::repeat": "same",
    "aten::index_put_": "same",
    "aten::masked_fill_": "same",
    "aten::masked_fill": "same",
    "aten::where": "same",
    "aten::scatter_": "same",
    "aten::scatter_add_": "same",
    "aten::gather": "same",
    "aten::roll": "same",
    "aten::flip": "same",
    "aten::tril": "same",
    "aten::triu": "same",
}


def _pool(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Pooling: every input element read once (one FLOP each), the output written."""
    dims, types, concrete = args
    x = dims_at(dims, 1 if op.endswith("_backward") else 0)
    size = bpe(type_at(types, 0))
    if x is None or size is None or len(x) < 3:
        return None
    if op.endswith("_backward"):  # grad_output in, grad_input (x's size) out
        g = dims_at(dims, 0) or x
        out_n = numel(g)
        flops, moved = numel(x), (out_n + numel(x)) * size + out_n * 8 * ("indices" in op)
    else:
        pooled = _pool_out(op, x, concrete)
        if pooled is None:
            return None
        out_n = pooled
        flops, moved = numel(x), (numel(x) + out_n) * size + out_n * 8 * ("indices" in op)
    return OpModel("Pooling", flops, moved, "vector", type_at(types, 0), {"op_shape": tuple(x)})


def _pool_out(op: str, x: list[int], concrete: list[str]) -> int | None:
    if "adaptive" in op:
        size = ints(concrete_at(concrete, 1))
        return x[0] * x[1] * numel(size) if size else None
    kernel, stride, pad = (ints(concrete_at(concrete, i)) or [] for i in (1, 2, 3))
    dil = ints(concrete_at(concrete, 4)) if "max" in op else None
    spatial = len(x) - 2
    if not kernel:
        return None
    kernel = kernel * spatial if len(kernel) == 1 else kernel
    stride = (stride * spatial if len(stride) == 1 else stride) or kernel
    pad = (pad * spatial if len(pad) == 1 else pad) or [0] * spatial
    dil = (dil * spatial if dil and len(dil) == 1 else dil) or [1] * spatial
    out = [x[0], x[1]]
    for d in range(spatial):
        out.append((x[2 + d] + 2 * pad[d] - dil[d] * (kernel[d] - 1) - 1) // stride[d] + 1)
    return numel(out)


#: Upsampling ops → (FLOPs per output element: the interpolation's taps × 2, nearest 1;
#: position of ``scale_factors`` in Concrete Inputs after ``output_size`` at 1).
_UPSAMPLE: dict[str, tuple[int, int]] = {
    **{f"aten::{p}nearest{d}d": (1, 2) for p in ("upsample_", "_upsample_") for d in (1, 2, 3)},
    **{f"aten::_upsample_nearest_exact{d}d": (1, 2) for d in (1, 2, 3)},
    "aten::upsample_linear1d": (4, 3),
    "aten::upsample_bilinear2d": (8, 3),
    "aten::_upsample_bilinear2d_aa": (8, 3),
    "aten::upsample_trilinear3d": (16, 3),
    "aten::upsample_bicubic2d": (32, 3),
}
_FLOAT = re.compile(r"-?\d+(?:\.\d*)?(?:e-?\d+)?")


def _upsample(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Upsampling (``UnaryElementwise``): the input read once and the output written once;
    per output element one FLOP for nearest, two per tap for (bi/tri)linear and bicubic. The
    output size is ``output_size`` (Concrete Inputs 1) or the input's times
    ``scale_factors``; a backward reads the output-sized gradient and writes the input-sized
    one (``input_size``, Concrete Inputs 2)."""
    dims, types, concrete = args
    backward = op.endswith("_backward")
    per, scales_at = _UPSAMPLE[op.removesuffix("_backward")]
    x, size = dims_at(dims, 0), bpe(type_at(types, 0))
    if x is None or size is None or len(x) < 3:
        return None
    spatial = len(x) - 2
    if backward:  # grad_output is output-sized; input_size is the whole input shape
        grad_in = ints(concrete_at(concrete, 2))
        if not grad_in or len(grad_in) != len(x):
            return None
        small, big = grad_in, x
    else:
        out = ints(concrete_at(concrete, 1))
        if not out:
            scales = [float(v) for v in _FLOAT.findall(concrete_at(concrete, scales_at))]
            scales = scales * spatial if len(scales) == 1 else scales
            if len(scales) != spatial:
                return None
            out = [int(n * f) for n, f in zip(x[2:], scales, strict=True)]
        if len(out) != spatial:
            return None
        small, big = x, [*x[:2], *out]
    n_out = numel(big)
    moved = (numel(small) + n_out) * size
    params = {"op_shape": tuple(x), "output_shape": tuple(small if backward else big)}
    family = "UnaryElementwise"
    return OpModel(family, float(per * n_out), float(moved), "vector", type_at(types, 0), params)


#: The name prefix of the ``torch._foreach_*`` ops (one kernel over a list of tensors).
FOREACH = "aten::_foreach_"
_FOREACH_REDUCE = ("aten::_foreach_norm", "aten::_foreach_max")


def foreach(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """A ``_foreach_*`` op: elementwise over every tensor of its lists (``Elementwise``).

    Kineto records each list's shapes (``[[128, 128], [128]]``) but not its element type
    (``TensorList``; older versions write ``[]``: no model): that comes from ``ctx["list_dtype"]`` (the caller reads it from the
    kernel the op launched), and without it there is no model. Bytes: every list read once and
    the first list's size written (``_foreach_zero_``: written only; ``_foreach_norm``/``_max``:
    one value per tensor written); one FLOP per element.
    """
    dims, types, _ = args
    dtype = ctx.get("list_dtype") or ""
    size = bpe(dtype)
    lists = [d for d, t in zip(dims, types, strict=False) if t == "TensorList"]
    if size is None or not lists or not all(isinstance(d, list) for d in lists):
        return None
    counts = [[numel(x) for x in d] for d in lists]
    first = sum(counts[0])
    if not first:  # older Kineto writes [] for every list: no shapes
        return None
    read = sum(sum(c) for c in counts) * size
    if op == "aten::_foreach_zero_":
        read, written = 0, first * size
    elif op in _FOREACH_REDUCE:
        written = len(counts[0]) * size
    else:
        written = first * size
    params = {"tensors": len(counts[0]), "elements": first}
    return OpModel("Elementwise", float(first), float(read + written), "vector", dtype, params)


#: Op name → model function of the families here.
OWN_MODELS = {
    **dict.fromkeys(
        (
            "aten::_softmax",
            "aten::softmax",
            "aten::_log_softmax",
            "aten::log_softmax",
            "aten::_softmax_backward_data",
            "aten::_log_softmax_backward_data",
        ),
        _softmax,
    ),
    **dict.fromkeys(_MEMORY, _memory),
    **dict.fromkeys(_UPSAMPLE, _upsample),
    **dict.fromkeys((f"{op}_backward" for op in _UPSAMPLE), _upsample),
    **dict.fromkeys(
        (
            "aten::max_pool2d_with_indices",
            "aten::max_pool2d_with_indices_backward",
            "aten::avg_pool2d",
            "aten::avg_pool2d_backward",
            "aten::adaptive_avg_pool2d",
            "aten::_adaptive_avg_pool2d",
            "aten::_adaptive_avg_pool2d_backward",
        ),
        _pool,
    ),
}
