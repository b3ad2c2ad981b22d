"""FLOPs and bytes moved per op call, from the op's ``Input Dims``, ``Input type`` and
``Concrete Inputs`` (recorded with ``record_shapes=True``): one pure function per op family.

TraceLens-compatible where TraceLens is right (its formulas, its family names: ``GEMM``,
``SDPA_fwd``/``SDPA_bwd``, ``CONV_fwd``/``CONV_bwd``, ``UnaryElementwise``,
``BinaryElementwise``, ``Reduce_fwd``/``Reduce_bwd``, ``Normalization``), right where it is not
(see ``docs/traces.md``, "Perf model"), and with families of its own for what TraceLens leaves
out (``Softmax``, ``Elementwise``, ``Memory``, ``Pooling``, ``Loss``) — memory-bound models from
shapes, so that nearly all kernel time has a model.

:func:`op_model` is the one entry point: op name + parsed arguments → :class:`OpModel` or
``None`` (not modelled, or arguments it cannot read).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BACKWARD_FAMILIES",
    "FAMILIES",
    "OpModel",
    "bpe",
    "modelled_ops",
    "op_model",
    "precision",
]

#: Bytes per element of each ``Input type`` name (``Scalar`` is TraceLens's 4 bytes).
_BPE: dict[str, int] = {
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "float": 4,
    "double": 8,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "Scalar": 4,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}
_PRECISION: dict[str, str] = {
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "float": "fp32",
    "double": "fp64",
    "signed char": "int8",
}


def bpe(dtype: str | None) -> int | None:
    """Bytes per element of a Kineto ``Input type`` name (``None`` when unknown).

    Examples
    --------
    >>> bpe("c10::BFloat16"), bpe("float"), bpe("c10::Float8_e4m3fn"), bpe("TensorList")
    (2, 4, 1, None)
    """
    if not dtype:
        return None
    if dtype in _BPE:
        return _BPE[dtype]
    if "Float8" in dtype:
        return 1
    return None


def precision(dtype: str | None) -> str | None:
    """The roofline precision (``bf16``, ``fp16``, ``fp32``, ``fp64``, ``fp8``, ``int8``) of a dtype.

    Examples
    --------
    >>> precision("c10::BFloat16"), precision("c10::Float8_e4m3fnuz"), precision("long int")
    ('bf16', 'fp8', None)
    """
    if not dtype:
        return None
    if "Float8" in dtype:
        return "fp8"
    return _PRECISION.get(dtype)


@dataclass(frozen=True)
class OpModel:
    """The model of one op call: ``family``, ``flops`` and ``bytes`` per call, the roofline
    ``unit`` (``matrix`` or ``vector``) and ``dtype`` (the first input's), and the shape
    parameters (``params``, in the family's order)."""

    family: str
    flops: float
    bytes: float
    unit: str
    dtype: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> str:
        """The parameters as one readable string (``M=141 N=512 K=512 bias=True``)."""
        return " ".join(f"{k}={_fmt(v)}" for k, v in self.params.items())


def _fmt(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "(" + ",".join(str(v) for v in value) + ")"
    return str(value)


# -- argument helpers ---------------------------------------------------------------------------
_INT, _INT_LIST, _BOOL = (
    re.compile(r"-?\d+"),
    re.compile(r"[\[\]\d,\s-]*"),
    re.compile(r"True|False"),
)
Args = tuple[list[Any], list[Any], list[str]]  # dims, types, concrete


def _dims(dims: list[Any], i: int) -> list[int] | None:
    """``Input Dims[i]`` when it is a tensor shape (a list of ints), else None."""
    if i < len(dims) and isinstance(dims[i], list) and all(isinstance(x, int) for x in dims[i]):
        return dims[i]
    return None


def _type(types: list[Any], i: int) -> str:
    return types[i] if i < len(types) and isinstance(types[i], str) else ""


def _concrete(concrete: list[str], i: int) -> str:
    return concrete[i] if i < len(concrete) and isinstance(concrete[i], str) else ""


def _ints(text: str) -> list[int] | None:
    """A ``Concrete Inputs`` list string (``'[1, 1]'``) or int (``'1'``) as a list of ints."""
    found = _INT.findall(text)
    return [int(x) for x in found] if found and _INT_LIST.fullmatch(text) else None


def _flag(text: str) -> bool | None:
    """A ``Concrete Inputs`` boolean string (``'True'``/``'False'``); ``None`` when absent."""
    return {"True": True, "False": False, "1": True, "0": False}.get(text.strip())


def _n(shape: Sequence[int] | None) -> int:
    return math.prod(shape) if shape is not None else 0


def _broadcast(a: Sequence[int], b: Sequence[int]) -> list[int] | None:
    width = max(len(a), len(b))
    a2, b2 = [1] * (width - len(a)) + list(a), [1] * (width - len(b)) + list(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a2, b2, strict=True)):
        return None
    return [max(x, y) for x, y in zip(a2, b2, strict=True)]


# -- GEMM ---------------------------------------------------------------------------------------
_GEMM_POS = {
    "aten::mm": (0, 1, False),
    "aten::addmm": (1, 2, True),
    "aten::bmm": (0, 1, False),
    "aten::baddbmm": (1, 2, True),
    "aten::_scaled_mm": (0, 1, False),
}


def _gemm(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, _ = args
    i, j, bias = _GEMM_POS[op]
    a, b = _dims(dims, i), _dims(dims, j)
    if a is None or b is None or len(a) != len(b) or len(a) not in (2, 3) or a[-1] != b[-2]:
        return None
    batch = a[0] if len(a) == 3 else 1
    m, k, n = a[-2], a[-1], b[-1]
    size = bpe(_type(types, i))
    if size is None:
        return None
    flops = batch * (2 * m * n * k + (m * n if bias else 0))
    moved = batch * (m * k + k * n + m * n + (n if bias else 0)) * size
    params = {"B": batch, "M": m, "N": n, "K": k, "bias": bias}
    return OpModel("GEMM", flops, moved, "matrix", _type(types, i), params)


# -- SDPA ---------------------------------------------------------------------------------------
#: SDPA ops: (layout of Q/K/V, position of dropout and is_causal in Concrete Inputs).
_SDPA = {
    "aten::_scaled_dot_product_flash_attention": ("BHND", 3, 4),
    "aten::_scaled_dot_product_efficient_attention": ("BHND", 5, 6),
    "aten::_scaled_dot_product_cudnn_attention": ("BHND", 5, 6),
    "flash_attn::_flash_attn_forward": ("BNHD", 3, 5),
    "aiter::_flash_attn_forward": ("BNHD", 3, 5),
}


def _sdpa(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, concrete = args
    layout, p_drop, p_causal = _SDPA[op]
    q, k, v = _dims(dims, 0), _dims(dims, 1), _dims(dims, 2)
    if q is None or k is None or v is None or not (len(q) == len(k) == len(v) == 4):
        return None
    if layout == "BHND":
        (b, hq, nq, dqk), (_, hkv, nkv, _), dv = q, k, v[3]
    else:
        (b, nq, hq, dqk), (_, nkv, hkv, _), dv = q, k, v[3]
    causal = bool(_flag(_concrete(concrete, p_causal)))
    dropout = _concrete(concrete, p_drop)
    size = bpe(_type(types, 0))
    if size is None:
        return None
    qk, pv = 2 * nq * nkv * dqk, 2 * nq * nkv * dv
    backward = ctx.get("backward", False)
    if backward:  # recomputed scores, dV, dP, dQ, dK; GQA sums the heads sharing K/V
        flops = b * hq * (3 * qk + 2 * pv)
        flops += b * nkv * hkv * max(hq // max(hkv, 1) - 1, 0) * (dqk + dv)
    else:
        flops = b * hq * (qk + pv)
    if causal:
        flops /= 2
    elements = b * nq * hq * dqk + b * nkv * hkv * dqk + b * nkv * hkv * dv + b * nq * hq * dv
    if backward:  # Q, K, V, dO in; dQ, dK, dV out (TraceLens's 7 tensors)
        elements += b * nq * hq * dqk + b * nkv * hkv * (dqk + dv)
    params = {
        "B": b,
        "N_Q": nq,
        "H_Q": hq,
        "N_KV": nkv,
        "H_KV": hkv,
        "d_h_qk": dqk,
        "d_h_v": dv,
        "dropout": dropout,
        "causal": causal,
    }
    family = "SDPA_bwd" if backward else "SDPA_fwd"
    return OpModel(family, flops, elements * size, "matrix", _type(types, 0), params)


# -- convolution --------------------------------------------------------------------------------
def _conv_out(x: list[int], w: list[int], stride, pad, dil, transposed, out_pad) -> list[int]:
    spatial = len(x) - 2
    stride, pad, dil = (
        (v * spatial if len(v) == 1 else v) for v in (stride, pad, dil)
    )  # a 1-element list applies to every dimension
    out_pad = out_pad * spatial if len(out_pad) == 1 else out_pad
    out = [x[0], w[1] * 1 if transposed else w[0]]
    for d in range(spatial):
        k = w[2 + d]
        if transposed:
            out.append((x[2 + d] - 1) * stride[d] - 2 * pad[d] + dil[d] * (k - 1) + out_pad[d] + 1)
        else:
            out.append((x[2 + d] + 2 * pad[d] - dil[d] * (k - 1) - 1) // stride[d] + 1)
    return out


def _conv(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, concrete = args
    backward = op == "aten::convolution_backward"
    ix, iw = (1, 2) if backward else (0, 1)
    first = 4 if backward else 3  # stride, padding, dilation, transposed, output_padding, groups
    x, w = _dims(dims, ix), _dims(dims, iw)
    values = [_concrete(concrete, first + i) for i in range(6)]
    stride, pad, dil = (_ints(v) for v in values[:3])
    transposed, out_pad, groups = _flag(values[3]), _ints(values[4]), _ints(values[5])
    if x is None or w is None or len(x) < 3 or len(w) != len(x) or None in (stride, pad, dil):
        return None
    transposed = bool(transposed)
    out = _conv_out(x, w, stride, pad, dil, transposed, out_pad or [0])
    if groups and transposed:
        out[1] = w[1] * groups[0]
    size = bpe(_type(types, ix))
    if size is None or min(out) <= 0:
        return None
    if backward:  # TraceLens: bias_sizes (Concrete[3]) is '[0]' when there is no bias
        bias_n = (_ints(_concrete(concrete, 3)) or [0])[0]
    else:
        b = _dims(dims, 2)
        bias_n = b[0] if b else 0  # TraceLens never counts the bias (docs/traces.md)
    per_out = 2 * _n(w[1:])
    fwd_flops = (_n(x) if transposed else _n(out)) * per_out + (_n(out) if bias_n else 0)
    fwd_bytes = (_n(x) + _n(w) + _n(out) + bias_n) * size
    params = {
        "input_shape": tuple(x),
        "filter_shape": tuple(w),
        "bias": bool(bias_n),
        "stride": tuple(stride),
        "padding": tuple(pad),
        "dilation": tuple(dil),
        "transposed": transposed,
        "groups": groups[0] if groups else 1,
    }
    if backward:
        return OpModel("CONV_bwd", 2 * fwd_flops, 2 * fwd_bytes, "matrix", _type(types, ix), params)
    return OpModel("CONV_fwd", fwd_flops, fwd_bytes, "matrix", _type(types, ix), params)


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
    shape = _dims(dims, 0)
    size_in = bpe(_type(types, 0))
    if shape is None or size_in is None:
        return None
    out = _dims(dims, 1)
    size_out = bpe(_type(types, 1)) if out else size_in
    n = _n(shape)
    params = {"op_shape": tuple(shape)}
    return OpModel(
        ctx.get("family", "UnaryElementwise"),
        n,
        n * size_in + n * (size_out or size_in),
        "vector",
        _type(types, 0),
        params,
    )


def _binary(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, _ = args
    a, b = _dims(dims, 0), _dims(dims, 1)
    size_a, size_b = bpe(_type(types, 0)), bpe(_type(types, 1))
    if a is None or size_a is None:
        return None
    if b is None or size_b is None:  # a Python number: one element of the Scalar size
        b, size_b = [], size_b or 4
    out_shape = _broadcast(a, b)
    if out_shape is None:
        return None
    out_dims = _dims(dims, 2)
    if out_dims:
        size_out = bpe(_type(types, 2)) or max(size_a, size_b)
    else:  # the larger element size of the tensor inputs (a scalar does not widen the output)
        tensors = [s for s, d in ((size_a, a), (size_b, b)) if d]
        size_out = max(tensors) if tensors else max(size_a, size_b)
    n = _n(out_shape)
    moved = _n(a) * size_a + _n(b) * size_b + n * size_out
    params = {"shape_in1": tuple(a), "shape_in2": tuple(b)}
    return OpModel(
        ctx.get("family", "BinaryElementwise"), n, moved, "vector", _type(types, 0), params
    )


# -- reductions ---------------------------------------------------------------------------------
_REDUCE = (
    "aten::sum",
    "aten::mean",
    "aten::max",
    "aten::min",
    "aten::norm",
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


def _reduce(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, concrete = args
    shape = _dims(dims, 0)
    size = bpe(_type(types, 0))
    if shape is None or size is None:
        return None
    n = _n(shape)
    if op in ("aten::cumsum", "aten::cumprod"):
        out = n
    else:  # the reduced dims and keepdim are strings: TraceLens reads them as "all" (out = 1)
        reduced = _ints(_concrete(concrete, 1)) if len(shape) else None
        out = 1
        if reduced is not None and reduced and shape:
            axes = {d % len(shape) for d in reduced}
            out = _n([s for i, s in enumerate(shape) if i not in axes])
    family = "Reduce_bwd" if ctx.get("backward") else "Reduce_fwd"
    kind = next(
        (t for t in ("mean", "max", "min", "norm") if t in op), "sum"
    )  # TraceLens's reduce_type
    params = {"num_input_elems": n, "num_output_elems": out, "reduce_type": kind}
    return OpModel(family, n, n * size + out * size, "vector", _type(types, 0), params)


# -- normalisation ------------------------------------------------------------------------------
def _norm_fwd(n: int, c: float, affine: bool, bias: bool, training: bool, s: int):
    flops = 6 * c + 2 * n + (3 * n if training else 0)
    tensors = 2 + (1 if affine else 0) + (1 if affine and bias else 0) + (2 if training else 0)
    return flops, 2 * n * s + tensors * c * s


def _norm_bwd(n: int, c: float, affine: bool, bias: bool, training: bool, mask0: bool, s: int):
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
    shape = _dims(dims, ix)
    size = bpe(_type(types, ix))
    if shape is None or size is None or len(shape) < 2:
        return None
    n = _n(shape)
    mask0, mask = True, None
    affine, bias = True, True  # Kineto writes [] for an absent tensor: TraceLens sees affine
    if kind == "layer_norm":
        c = _n(_ints(_concrete(concrete, 2 if backward else 1)) or [])
        if not c:
            return None
        if backward:
            mask = [bool(_flag(x)) for x in _BOOL.findall(_concrete(concrete, 7))]
            if len(mask) == 3:
                mask0, affine, bias = mask
        # TraceLens counts LayerNorm as training always; here only when autograd records it
        training = ctx.get("training", True) if not backward else True
    elif kind == "group_norm":
        c = shape[1]
        training = True
        if backward:
            groups = _ints(_concrete(concrete, 8))
            if not groups:
                return None
            c = shape[1] / groups[0]
            mask = [bool(_flag(x)) for x in _BOOL.findall(_concrete(concrete, 9))]
            mask0 = bool(mask[0]) if mask else True
    else:  # batch_norm, instance_norm: the training flag is a string ('True'/'False')
        c = shape[1]
        if backward:
            training = False if op in _BN_INPUT0 else _flag(_concrete(concrete, 7)) is not False
        else:
            training = _flag(_concrete(concrete, 5)) is not False
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
    return OpModel("Normalization", flops, moved, "vector", _type(types, ix), params)


_BN_INPUT0 = ("aten::miopen_batch_norm_backward", "aten::cudnn_batch_norm_backward")


def _rms_norm(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, concrete = args
    backward = op.endswith("_backward")
    ix = 1 if backward else 0
    shape = _dims(dims, ix)
    size = bpe(_type(types, ix))
    c = _n(_ints(_concrete(concrete, 2 if backward else 1)) or [])
    if shape is None or size is None or not c:
        return None
    n = _n(shape)
    affine = True  # Kineto writes [] for an absent weight: TraceLens sees one always
    params: dict[str, Any] = {"op_shape": tuple(shape), "num_channels": c, "is_affine": affine}
    if not backward:
        flops = (n / c) * (2 * c + 2) + n * 2
        return OpModel(
            "Normalization", flops, 2 * n * size + c * size, "vector", _type(types, ix), params
        )
    mask = [bool(_flag(x)) for x in _BOOL.findall(_concrete(concrete, 5))] or [
        True,
        True,
    ]
    flops = 2 * n + (6 * n if mask[0] else 0)
    if len(mask) > 1 and mask[1]:
        flops += n + (n if n / c > 1 else 0)
    params["output_mask"] = tuple(mask)
    return OpModel(
        "Normalization", flops, 3 * n * size + 2 * c * size, "vector", _type(types, ix), params
    )


# -- families of our own (memory-bound models from shapes) --------------------------------------
def _softmax(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    dims, types, _ = args
    shape = _dims(dims, 0)
    size = bpe(_type(types, 0))
    if shape is None or size is None:
        return None
    n = _n(shape)
    backward = "backward" in op  # grad_output and output in, grad_input out
    flops, moved = (4 * n, 3 * n * size) if backward else (3 * n, 2 * n * size)
    return OpModel("Softmax", flops, moved, "vector", _type(types, 0), {"op_shape": tuple(shape)})


def _tensors(dims: list[Any], types: list[Any]) -> list[tuple[int, int]]:
    """(elements, bytes per element) of every tensor input, TensorLists included."""
    out = []
    for d, t in zip(dims, types, strict=False):
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):  # TensorList
            size = bpe(t) or 0
            out.extend((_n(x), size) for x in d)
        elif (
            isinstance(d, list)
            and all(isinstance(x, int) for x in d)
            and bpe(t)
            and (d or t not in ("Scalar", "double", "long int"))
        ):
            out.append((_n(d), bpe(t) or 0))
    return out


def _memory(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Data movement: read the inputs, write as much as ``out`` says (no FLOPs)."""
    dims, types, _ = args
    tensors = _tensors(dims, types)
    if not tensors:
        return None
    rule = _MEMORY[op]
    read = sum(n * s for n, s in tensors)
    if rule == "gather":  # embedding/index: table rows picked by an index tensor
        table, index = tensors[0], tensors[1] if len(tensors) > 1 else (0, 8)
        row = table[0] / max(_dims(dims, 0)[0] if _dims(dims, 0) else 1, 1)
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
    shape = _dims(dims, 0)
    params = {"op_shape": tuple(shape) if shape is not None else ()}
    return OpModel("Memory", 0.0, float(read + written), "vector", _type(types, 0), params)


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
)


def _pool(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Pooling: every input element read once (one FLOP each), the output written."""
    dims, types, concrete = args
    x = _dims(dims, 1 if op.endswith("_backward") else 0)
    size = bpe(_type(types, 0))
    if x is None or size is None or len(x) < 3:
        return None
    if op.endswith("_backward"):  # grad_output in, grad_input (x's size) out
        g = _dims(dims, 0) or x
        out_n = _n(g)
        flops, moved = _n(x), (out_n + _n(x)) * size + out_n * 8 * ("indices" in op)
    else:
        out_n = _pool_out(op, x, concrete)
        if out_n is None:
            return None
        flops, moved = _n(x), (_n(x) + out_n) * size + out_n * 8 * ("indices" in op)
    return OpModel("Pooling", flops, moved, "vector", _type(types, 0), {"op_shape": tuple(x)})


def _pool_out(op: str, x: list[int], concrete: list[str]) -> int | None:
    if "adaptive" in op:
        size = _ints(_concrete(concrete, 1))
        return x[0] * x[1] * _n(size) if size else None
    kernel, stride, pad = (_ints(_concrete(concrete, i)) or [] for i in (1, 2, 3))
    dil = _ints(_concrete(concrete, 4)) if "max" in op else None
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
    return _n(out)


Model = Callable[[str, Args, dict[str, Any]], "OpModel | None"]
_REGISTRY: dict[str, Model] = {
    **dict.fromkeys(_GEMM_POS, _gemm),
    **dict.fromkeys(_SDPA, _sdpa),
    "aten::convolution": _conv,
    "aten::convolution_backward": _conv,
    **dict.fromkeys(_UNARY, _unary),
    **dict.fromkeys(_BINARY, _binary),
    **dict.fromkeys(_REDUCE, _reduce),
    **dict.fromkeys(_NORM_FWD, _norm),
    **dict.fromkeys(_NORM_BWD, _norm),
    "aten::_fused_rms_norm": _rms_norm,
    "aten::_fused_rms_norm_backward": _rms_norm,
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
)
#: Forward ops whose model also describes the linked backward (``Sequence number``) work.
BACKWARD_FAMILIES: frozenset[str] = frozenset({"SDPA_fwd", "Reduce_fwd"})


def modelled_ops() -> frozenset[str]:
    """The op names :func:`op_model` has a model for.

    Examples
    --------
    >>> "aten::addmm" in modelled_ops(), "aten::linear" in modelled_ops()
    (True, False)
    """
    return frozenset(_REGISTRY) | frozenset(_OWN_FAMILY)


def op_model(
    op: str,
    dims: list[Any] | None,
    types: list[Any] | None,
    concrete: list[str] | None,
    *,
    backward: bool = False,
    training: bool = True,
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

    Examples
    --------
    >>> m = op_model("aten::addmm", [[512], [141, 512], [512, 512], [], []],
    ...              ["c10::BFloat16"] * 3 + ["Scalar"] * 2, ["", "", "", "1", "1"])
    >>> m.family, m.flops, m.bytes, m.shape
    ('GEMM', 73996800, 814080, 'B=1 M=141 N=512 K=512 bias=True')
    """
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    concrete = concrete if isinstance(concrete, list) else []
    args: Args = (dims, types, concrete)
    ctx: dict[str, Any] = {"backward": backward, "training": training}
    fn = _REGISTRY.get(op)
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
    return model
