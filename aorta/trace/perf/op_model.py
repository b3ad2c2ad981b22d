"""FLOPs and bytes moved per op call, from the op's ``Input Dims``, ``Input type`` and
``Concrete Inputs`` (recorded with ``record_shapes=True``): one pure function per op family.

TraceLens-compatible where TraceLens is right (its formulas, its family names: ``GEMM``,
``SDPA_fwd``/``SDPA_bwd``, ``CONV_fwd``/``CONV_bwd``, ``UnaryElementwise``,
``BinaryElementwise``, ``Reduce_fwd``/``Reduce_bwd``, ``Normalization``), right where it is not
(see ``docs/traces.md``, "Against the hardware"), and with families of its own for what
TraceLens leaves out (``Elementwise`` here; ``Softmax``, ``Memory``, ``Pooling`` and
upsampling in :mod:`aorta.trace.perf.own`, FBGEMM's embedding ops in
:mod:`aorta.trace.perf.fbgemm`) — memory-bound models from shapes, so that nearly all kernel
time has a model. Attention is in :mod:`aorta.trace.perf.attention`, the library ops of
TraceLens's table in :mod:`aorta.trace.perf.libs`; the argument readers and :class:`OpModel`
live in :mod:`aorta.trace.perf.args`.

:func:`op_model` is the one entry point: op name + parsed arguments → :class:`OpModel` or
``None`` (not modelled, or arguments it cannot read).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .args import (
    Args,
    OpModel,
    bpe,
    broadcast,
    concrete_at,
    dims_at,
    flag,
    flags,
    ints,
    numel,
    precision,
    type_at,
)
from .attention import ATTENTION_MODELS, FORWARD_ATTENTION
from .fbgemm import FBGEMM_MODELS
from .libs import LIBRARY_FAMILIES, LIBRARY_MODELS
from .own import FOREACH, OWN_MODELS, foreach

__all__ = [
    "BACKWARD_FAMILIES",
    "BACKWARD_OPS",
    "FAMILIES",
    "OpModel",
    "bpe",
    "has_model",
    "modelled_ops",
    "op_model",
    "precision",
]


# -- GEMM ---------------------------------------------------------------------------------------
_GEMM_POS = {
    "aten::mm": (0, 1, False),
    "aten::addmm": (1, 2, True),
    "aten::bmm": (0, 1, False),
    "aten::baddbmm": (1, 2, True),
    "aten::_scaled_mm": (0, 1, False),
    # the same (A, B, ...) layout: TensorRT-LLM's cuBLAS FP8 GEMM, bitsandbytes' int8 GEMM
    "trtllm::cublas_scaled_mm": (0, 1, False),
    "bitsandbytes::int8_linear_matmul": (0, 1, False),
}
#: GEMMs of 1-byte inputs (FP8, int8) whose output is 16-bit (TraceLens's assumption).
_SCALED = frozenset(
    {"aten::_scaled_mm", "trtllm::cublas_scaled_mm", "bitsandbytes::int8_linear_matmul"}
)


def _gemm(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, _ = args
    i, j, bias = _GEMM_POS[op]
    a, b = dims_at(dims, i), dims_at(dims, j)
    if a is None or b is None or len(a) != len(b) or len(a) not in (2, 3) or a[-1] != b[-2]:
        return None
    batch = a[0] if len(a) == 3 else 1
    m, k, n = a[-2], a[-1], b[-1]
    size = bpe(type_at(types, i))
    if size is None:
        return None
    flops = batch * (2 * m * n * k + (m * n if bias else 0))
    out = 2 if op in _SCALED and size == 1 else size
    moved = batch * ((m * k + k * n + (n if bias else 0)) * size + m * n * out)
    params = {"B": batch, "M": m, "N": n, "K": k, "bias": bias}
    pos = (i, j)
    return OpModel("GEMM", flops, moved, "matrix", type_at(types, i), params, pos, pos)


# -- convolution --------------------------------------------------------------------------------
def _conv_out(c: _Conv) -> list[int]:
    x, w, spatial = c.x, c.w, len(c.x) - 2
    stride, pad, dil, out_pad = (
        (v * spatial if len(v) == 1 else v) for v in (c.stride, c.pad, c.dil, c.out_pad)
    )  # a 1-element list applies to every dimension
    out = [x[0], w[1] * 1 if c.transposed else w[0]]
    for d in range(spatial):
        k = w[2 + d]
        if c.transposed:
            out.append((x[2 + d] - 1) * stride[d] - 2 * pad[d] + dil[d] * (k - 1) + out_pad[d] + 1)
        else:
            out.append((x[2 + d] + 2 * pad[d] - dil[d] * (k - 1) - 1) // stride[d] + 1)
    return out


def _conv(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, concrete = args
    backward = op == "aten::convolution_backward"
    ix, iw = (1, 2) if backward else (0, 1)
    first = 4 if backward else 3  # stride, padding, dilation, transposed, output_padding, groups
    x, w = dims_at(dims, ix), dims_at(dims, iw)
    values = [concrete_at(concrete, first + i) for i in range(6)]
    stride, pad, dil = (ints(v) for v in values[:3])
    transposed, out_pad, groups = flag(values[3]), ints(values[4]), ints(values[5])
    if x is None or w is None or stride is None or pad is None or dil is None:
        return None
    if backward:  # TraceLens: bias_sizes (Concrete[3]) is '[0]' when there is no bias
        bias_n = (ints(concrete_at(concrete, 3)) or [0])[0]
    else:
        b = dims_at(dims, 2)
        bias_n = b[0] if b else 0  # TraceLens never counts the bias (docs/traces.md)
    shape = _Conv(
        x, w, stride, pad, dil, bool(transposed), out_pad or [0], groups[0] if groups else 1
    )
    return _conv_model(shape, bias_n, types, (ix, iw), backward=backward)


class _Conv(NamedTuple):
    x: list[int]
    w: list[int]
    stride: list[int]
    pad: list[int]
    dil: list[int]
    transposed: bool
    out_pad: list[int]
    groups: int


def _conv_model(
    c: _Conv, bias_n: int, types: list[Any], pos: tuple[int, int], *, backward: bool
) -> OpModel | None:
    """A convolution's FLOPs and bytes (``CONV_fwd``; ``CONV_bwd``: input and weight
    gradients, twice the forward), ``bias_n`` output channels of bias (0: none)."""
    x, w = c.x, c.w
    if len(x) < 3 or len(w) != len(x):
        return None
    out = _conv_out(c)
    if c.transposed:
        out[1] = w[1] * c.groups
    size = bpe(type_at(types, pos[0]))
    if size is None or min(out) <= 0:
        return None
    per_out = 2 * numel(w[1:])
    fwd_flops = (numel(x) if c.transposed else numel(out)) * per_out + (numel(out) if bias_n else 0)
    fwd_bytes = (numel(x) + numel(w) + numel(out) + bias_n) * size
    spatial = len(x) - 2
    params = {
        "input_shape": tuple(x),
        "filter_shape": tuple(w),
        "bias": bool(bias_n),
        "stride": tuple(c.stride * spatial if len(c.stride) == 1 else c.stride),
        "padding": tuple(c.pad * spatial if len(c.pad) == 1 else c.pad),
        "dilation": tuple(c.dil * spatial if len(c.dil) == 1 else c.dil),
        "transposed": c.transposed,
        "groups": c.groups,
    }
    dtype = type_at(types, pos[0])
    if backward:
        return OpModel("CONV_bwd", 2 * fwd_flops, 2 * fwd_bytes, "matrix", dtype, params, pos, pos)
    return OpModel("CONV_fwd", fwd_flops, fwd_bytes, "matrix", dtype, params, pos, pos)


def _conv_bias(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """apex's fused ``ConvBias_``/``ConvBiasReLU_(x, weight, bias, stride, padding)`` (one
    int each, for every spatial dimension; no dilation, one group). Their backward nodes
    record nothing of the forward: their arguments are the forward call's, found by
    ``Sequence number`` (:mod:`aorta.trace.perf.context`)."""
    backward = op.endswith("_Backward")
    if backward:
        partner = ctx.get("partner")
        if partner is None or len(partner) < 3:
            return None
        args = (partner[0], partner[1], partner[2] if isinstance(partner[2], list) else [])
    dims, types, concrete = args
    x, w = dims_at(dims, 0), dims_at(dims, 1)
    stride, pad = ints(concrete_at(concrete, 3)) or [1], ints(concrete_at(concrete, 4)) or [0]
    if x is None or w is None:
        return None
    shape = _Conv(x, w, stride[:1], pad[:1], [1], False, [0], 1)
    return _conv_model(shape, w[0], types, (0, 1), backward=backward)


# -- elementwise --------------------------------------------------------------------------------
_UNARY = (
    "aten::copy",
    "aten::copy_",
    "aten::clamp_min",
    "aten::clamp_min_",
    "aten::clamp_max",
    "aten::clamp_max_",
    "aten::sigmoid",
    "aten::rsqrt",
    "aten::silu",
    "aten::neg",
    "aten::pow",
)
_BINARY = (
    "aten::div",
    "aten::div_",
    "aten::mul",
    "aten::mul_",
    "aten::add",
    "aten::add_",
    "aten::sigmoid_backward",
    "aten::threshold_backward",
)


def _unary(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, _ = args
    shape = dims_at(dims, 0)
    size_in = bpe(type_at(types, 0))
    if shape is None or size_in is None:
        return None
    out = dims_at(dims, 1)
    size_out = bpe(type_at(types, 1)) if out else size_in
    n = numel(shape)
    params = {"op_shape": tuple(shape)}
    pos = (0, 1) if out else (0,)  # TraceLens: the output's type and strides when it is given
    return OpModel(
        ctx.get("family", "UnaryElementwise"),
        n,
        n * size_in + n * (size_out or size_in),
        "vector",
        type_at(types, 0),
        params,
        pos,
        pos,
    )


def _binary(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, _ = args
    a, b = dims_at(dims, 0), dims_at(dims, 1)
    size_a, size_b = bpe(type_at(types, 0)), bpe(type_at(types, 1))
    if a is None or size_a is None:
        return None
    if b is None or size_b is None:  # a Python number: one element of the Scalar size
        b, size_b = [], size_b or 4
    out_shape = broadcast(a, b)
    if out_shape is None:
        return None
    out_dims = dims_at(dims, 2)
    if out_dims:
        size_out = bpe(type_at(types, 2)) or max(size_a, size_b)
    else:  # the larger element size of the tensor inputs (a scalar does not widen the output)
        tensors = [s for s, d in ((size_a, a), (size_b, b)) if d]
        size_out = max(tensors) if tensors else max(size_a, size_b)
    n = numel(out_shape)
    moved = numel(a) * size_a + numel(b) * size_b + n * size_out
    params = {"shape_in1": tuple(a), "shape_in2": tuple(b)}
    pos = (0, 1, 2) if out_dims else (0, 1)
    family = ctx.get("family", "BinaryElementwise")
    return OpModel(family, n, moved, "vector", type_at(types, 0), params, pos, pos)


# -- reductions ---------------------------------------------------------------------------------
_REDUCE = (
    "aten::sum",
    "aten::mean",
    "aten::max",
    "aten::min",
    "aten::norm",
    "aten::linalg_norm",
    "aten::linalg_vector_norm",
    "aten::std",
    "aten::var",
    "aten::var_mean",
    "aten::std_mean",
    "aten::logsumexp",
    "aten::amax",
    "aten::amin",
    "aten::prod",
    "aten::argmax",
    "aten::argmin",
    "aten::any",
    "aten::all",
    "aten::cumsum",
    "aten::cumprod",
)


#: Reductions whose ``dim`` is not the second argument (``norm(self, p, dim, keepdim)``).
_DIM_AT = {"aten::norm": 2, "aten::linalg_norm": 2, "aten::linalg_vector_norm": 2}


def _reduce(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, concrete = args
    shape = dims_at(dims, 0)
    size = bpe(type_at(types, 0))
    if shape is None or size is None:
        return None
    n = numel(shape)
    if op in ("aten::cumsum", "aten::cumprod"):
        out = n
    else:  # the reduced dims and keepdim are strings: TraceLens reads them as "all" (out = 1)
        reduced = ints(concrete_at(concrete, _DIM_AT.get(op, 1))) if len(shape) else None
        out = 1
        if reduced is not None and reduced and shape:
            axes = {d % len(shape) for d in reduced}
            out = numel([s for i, s in enumerate(shape) if i not in axes])
    family = "Reduce_bwd" if ctx.get("backward") else "Reduce_fwd"
    kind = next(
        (t for t in ("mean", "max", "min", "norm") if t in op), "sum"
    )  # TraceLens's reduce_type
    params = {"num_input_elems": n, "num_output_elems": out, "reduce_type": kind}
    # TraceLens's reduce rows carry the input type, no strides
    return OpModel(family, n, n * size + out * size, "vector", type_at(types, 0), params, (0,), ())


# -- normalisation ------------------------------------------------------------------------------
def _norm_fwd(
    n: int, c: float, affine: bool, bias: bool, training: bool, s: int
) -> tuple[float, float]:
    flops = 6 * c + 2 * n + (3 * n if training else 0)
    tensors = 2 + (1 if affine else 0) + (1 if affine and bias else 0) + (2 if training else 0)
    return flops, 2 * n * s + tensors * c * s


def _norm_bwd(
    n: int, c: float, affine: bool, bias: bool, training: bool, mask0: bool, s: int
) -> tuple[float, float]:
    per = n / c
    flops = c * ((0 if training else 3) + 4 * per + (5 * per if mask0 and training else 0))
    if not mask0:
        flops += c * 2 * per
    moved = n * s + n * s * (2 if mask0 and training else 1) + (c * s if training else 0)
    if affine:
        moved += c * s + (c * s * (2 if bias else 1) if training else 0)
    return flops, moved


_NORM_FWD = {
    f"aten::{prefix}{kind}": kind
    for kind in ("batch_norm", "layer_norm", "group_norm", "instance_norm")
    for prefix in ("", "native_", "miopen_", "cudnn_")
}
_NORM_BWD = {
    f"aten::{prefix}{kind}_backward": kind
    for kind in ("batch_norm", "layer_norm", "group_norm")
    for prefix in ("", "native_", "miopen_", "cudnn_")
}


def _norm(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, concrete = args
    backward = op.endswith("_backward")
    kind = (_NORM_BWD if backward else _NORM_FWD)[op]
    ix = 0 if not backward or op in _BN_INPUT0 else 1
    shape = dims_at(dims, ix)
    size = bpe(type_at(types, ix))
    if shape is None or size is None or len(shape) < 2:
        return None
    n = numel(shape)
    mask0, mask = True, None
    affine, bias = True, True  # Kineto writes [] for an absent tensor: TraceLens sees affine
    if kind == "layer_norm":
        c: float = numel(ints(concrete_at(concrete, 2 if backward else 1)) or [])
        if not c:
            return None
        if backward:
            mask = flags(concrete_at(concrete, 7))
            if len(mask) == 3:
                mask0, affine, bias = mask
        # TraceLens counts LayerNorm as training always; here only when autograd records it
        training = ctx.get("training", True) if not backward else True
    elif kind == "group_norm":
        c = shape[1]
        training = True
        if backward:
            groups = ints(concrete_at(concrete, 8))
            if not groups:
                return None
            c = shape[1] / groups[0]
            mask = flags(concrete_at(concrete, 9))
            mask0 = bool(mask[0]) if mask else True
    else:  # batch_norm, instance_norm: the training flag is a string ('True'/'False')
        c = shape[1]
        if backward:
            training = False if op in _BN_INPUT0 else flag(concrete_at(concrete, 7)) is not False
        else:
            training = flag(concrete_at(concrete, 5)) is not False
    if backward:
        flops, moved = _norm_bwd(n, c, affine, bias, training, mask0, size)
    elif kind == "layer_norm" and not training:  # no saved statistics written in inference
        flops, moved = _norm_fwd(n, c, affine, bias, True, size)
        moved -= 2 * c * size
    else:
        flops, moved = _norm_fwd(n, c, affine, bias, training, size)
    params = {
        "op_shape": tuple(shape),
        "num_channels": c,
        "is_affine": affine,
        "is_training": training,
    }
    if mask is not None:
        params["output_mask"] = tuple(mask)
    return OpModel(
        "Normalization", flops, moved, "vector", type_at(types, ix), params, (ix,), (ix,)
    )


_BN_INPUT0 = ("aten::miopen_batch_norm_backward", "aten::cudnn_batch_norm_backward")


def _rms_norm(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, concrete = args
    backward = op.endswith("_backward")
    ix = 1 if backward else 0
    shape = dims_at(dims, ix)
    size = bpe(type_at(types, ix))
    c = numel(ints(concrete_at(concrete, 2 if backward else 1)) or [])
    if shape is None or size is None or not c:
        return None
    n = numel(shape)
    affine = True  # Kineto writes [] for an absent weight: TraceLens sees one always
    params: dict[str, Any] = {"op_shape": tuple(shape), "num_channels": c, "is_affine": affine}
    if not backward:
        flops = (n / c) * (2 * c + 2) + n * 2
        moved = 2 * n * size + c * size
        return OpModel(
            "Normalization", flops, moved, "vector", type_at(types, ix), params, (ix,), (ix,)
        )
    mask = flags(concrete_at(concrete, 5)) or [
        True,
        True,
    ]
    flops = 2 * n + (6 * n if mask[0] else 0)
    if len(mask) > 1 and mask[1]:
        flops += n + (n if n / c > 1 else 0)
    params["output_mask"] = tuple(mask)
    moved = 3 * n * size + 2 * c * size
    return OpModel(
        "Normalization", flops, moved, "vector", type_at(types, ix), params, (ix,), (ix,)
    )


#: Elementwise ops TraceLens has no model for: (unary or binary, their family).
_ELEMENTWISE_UNARY = (
    "aten::gelu",
    "aten::tanh",
    "aten::relu",
    "aten::relu_",
    "aten::exp",
    "aten::log",
    "aten::sqrt",
    "aten::abs",
    "aten::sin",
    "aten::cos",
    "aten::erf",
    "aten::reciprocal",
    "aten::sign",
    "aten::hardtanh_",
    "aten::leaky_relu",
    "aten::leaky_relu_",
    "aten::elu",
    "aten::native_dropout",
    "aten::dropout",
    "aten::bitwise_not",
    "aten::logical_not",
    "aten::square",
    "aten::silu_",
    "aten::sigmoid_",
    "aten::clamp",
    "aten::clamp_",
    "aten::nan_to_num",
    "aten::_foreach_sqrt",
    # in place: each element read and written once, as the out-of-place op reads and writes
    "aten::exp_",
    "aten::log_",
    "aten::log2",  # one read, one write per element, like aten::log
    "aten::logit",  # (self, eps): eps is a Scalar, so one tensor in, one of its size out
)
_ELEMENTWISE_BINARY = (
    "aten::sub",
    "aten::sub_",
    "aten::rsub",
    "aten::gelu_backward",
    "aten::tanh_backward",
    "aten::silu_backward",
    "aten::native_dropout_backward",
    "aten::eq",
    "aten::ne",
    "aten::lt",
    "aten::le",
    "aten::gt",
    "aten::ge",
    "aten::maximum",
    "aten::minimum",
    "aten::pow_",
    "aten::lerp_",
    "aten::addcmul_",
    "aten::addcdiv_",
    "aten::bitwise_and",
    "aten::logical_and",
    "aten::mse_loss",
    "aten::mse_loss_backward",
    "aten::nll_loss_forward",
    "aten::nll_loss_backward",
    "aten::hardtanh_backward",
    "aten::leaky_relu_backward",
    "aten::logit_backward",  # (grad_output, self, eps): two tensors in, one of their size out
)


Model = Callable[[str, Args, dict[str, Any]], "OpModel | None"]
_REGISTRY: dict[str, Model] = {
    **dict.fromkeys(_GEMM_POS, _gemm),
    **ATTENTION_MODELS,
    "aten::convolution": _conv,
    **dict.fromkeys(
        ("ConvBias_", "ConvBiasReLU_", "ConvBias_Backward", "ConvBiasReLU_Backward"), _conv_bias
    ),
    "aten::convolution_backward": _conv,
    **dict.fromkeys(_UNARY, _unary),
    **dict.fromkeys(_BINARY, _binary),
    **dict.fromkeys(_REDUCE, _reduce),
    **dict.fromkeys(_NORM_FWD, _norm),
    **dict.fromkeys(_NORM_BWD, _norm),
    "aten::_fused_rms_norm": _rms_norm,
    "aten::_fused_rms_norm_backward": _rms_norm,
    # TraceLens's RMSNormBwd names: the same (grad_out, input, normalized_shape, rstd,
    # weight, output_mask) schema
    **{f"aten::{p}rms_norm_backward": _rms_norm for p in ("", "native_", "miopen_", "cudnn_")},
    **OWN_MODELS,
    **FBGEMM_MODELS,
    **LIBRARY_MODELS,
}
_OWN_FAMILY = {
    **dict.fromkeys(_ELEMENTWISE_UNARY, ("Elementwise", _unary)),
    **dict.fromkeys(_ELEMENTWISE_BINARY, ("Elementwise", _binary)),
}

#: The families, TraceLens's sheet names first.
FAMILIES: tuple[str, ...] = (
    "GEMM",
    "SDPA_fwd",
    "SDPA_bwd",
    "CONV_fwd",
    "CONV_bwd",
    "UnaryElementwise",
    "BinaryElementwise",
    "Reduce_fwd",
    "Reduce_bwd",
    "Normalization",
    "Softmax",
    "Elementwise",
    "Memory",
    "Pooling",
    *LIBRARY_FAMILIES,
)
#: Forward ops whose model also describes the linked backward (``Sequence number``) work.
BACKWARD_FAMILIES: frozenset[str] = frozenset({"SDPA_fwd", "Reduce_fwd"})
#: The ops whose model can be of a family in :data:`BACKWARD_FAMILIES`.
BACKWARD_OPS: frozenset[str] = FORWARD_ATTENTION | frozenset(_REDUCE)


def modelled_ops() -> frozenset[str]:
    """The op names :func:`op_model` has a model for.

    Examples
    --------
    >>> "aten::addmm" in modelled_ops(), "aten::linear" in modelled_ops()
    (True, False)
    """
    return frozenset(_REGISTRY) | frozenset(_OWN_FAMILY)


def has_model(op: str) -> bool:
    """Whether :func:`op_model` has a model for ``op`` (a name of :func:`modelled_ops`, or a
    ``_foreach_*`` op).

    Examples
    --------
    >>> has_model("aten::addmm"), has_model("aten::_foreach_mul_"), has_model("aten::linear")
    (True, True, False)
    """
    return op in _REGISTRY or op in _OWN_FAMILY or op.startswith(FOREACH)


def op_model(
    op: str,
    dims: list[Any] | None,
    types: list[Any] | None,
    concrete: list[str] | None,
    *,
    backward: bool = False,
    training: bool = True,
    list_dtype: str | None = None,
    partner: tuple[Any, ...] | None = None,
) -> OpModel | None:
    """The model of one call of ``op`` with these ``Input Dims``/``Input type``/``Concrete
    Inputs``; ``None`` when ``op`` has no model or its arguments cannot be read.

    Parameters
    ----------
    backward
        Evaluate a forward op's model for its linked backward work (``SDPA_bwd``,
        ``Reduce_bwd``); ``None`` for ops without a backward model.
    training
        Whether autograd recorded the call (it has a ``Sequence number``): LayerNorm writes its
        saved statistics only then.
    list_dtype
        The element type of the op's ``TensorList`` inputs (Kineto records their shapes, not
        their type): a ``_foreach_*`` op has a model only with it.
    partner
        ``(Input Dims, Input type[, Concrete Inputs])`` of the event that records what the
        op's own arguments do not (:func:`aorta.trace.perf.context.partners`: an fbgemm
        backward node's forward call, apex's ``ConvBias_`` for its backward, the backward node
        whose gradients a ``cat`` concatenates).

    Examples
    --------
    >>> m = op_model("aten::addmm", [[512], [141, 512], [512, 512], [], []],
    ...              ["c10::BFloat16"] * 3 + ["Scalar"] * 2, ["", "", "", "1", "1"])
    >>> m.family, m.flops, m.bytes, m.shape
    ('GEMM', 73996800, 814080, 'B=1 M=141 N=512 K=512 bias=True')
    """
    if not isinstance(dims, list) or not isinstance(types, list):
        if partner is None:  # a node recording no argument of its own may have a partner
            return None
        dims, types = [], []
    concrete = concrete if isinstance(concrete, list) else []
    args: Args = (dims, types, concrete)
    ctx: dict[str, Any] = {"backward": backward, "training": training, "list_dtype": list_dtype}
    if partner is not None and isinstance(partner[0], list) and isinstance(partner[1], list):
        ctx["partner"] = partner
    fn = _REGISTRY.get(op)
    if fn is None and op.startswith(FOREACH):
        fn = foreach
    if fn is None and op in _OWN_FAMILY:
        ctx["family"], fn = _OWN_FAMILY[op]
    if fn is None:
        return None
    try:
        model = fn(op, args, ctx)
    except (ValueError, TypeError, IndexError, ZeroDivisionError):
        return None
    if model is None or (backward and model.family not in ("SDPA_bwd", "Reduce_bwd")):
        return None
    # the types of the inputs that key the row (a frozen field set once, as __post_init__ would)
    object.__setattr__(model, "dtypes", tuple(type_at(types, i) for i in model.typed))
    return model
