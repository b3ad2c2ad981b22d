"""Perf models of the library ops TraceLens models beyond ATen: GEMMs of Transformer Engine,
vLLM, Primus-Turbo (hipBLASLt FP8/FP4) and AITER (FP4), Primus-Turbo's grouped GEMMs,
Liger's fused SiLU·mul, Primus-Turbo's FP8/MXFP4 quantisers, Primus's fused LayerNorm +
modulation, Mamba's causal conv1d and SSD scan, Transformer Engine's fused RoPE and cross
entropy, and MoE token dispatch/combine — each in TraceLens's family (``GEMM``,
``GroupedGEMM``, ``BinaryElementwise``, ``UnaryElementwise``, ``Normalization``, ``SSM``,
``RoPE``, ``CrossEntropy``, ``MoE_comm``) with its formulas.

Argument positions are each library's op schema, as TraceLens reads them; the library
attention ops and apex's fused convolutions are in :mod:`aorta.trace.perf.op_model` with their
ATen relatives. No trace here holds these ops (they need the libraries and a GPU): the tests
check each model on arguments laid out as its schema says.
"""

from __future__ import annotations

import math
from typing import Any

from .args import Args, OpModel, bpe, concrete_at, dims_at, flag, ints, numel, type_at

__all__ = ["LIBRARY_FAMILIES", "LIBRARY_MODELS", "TRACELENS_UNMODELLED"]

#: Families of this module that TraceLens's sheets name but aorta's ATen models do not use.
LIBRARY_FAMILIES: tuple[str, ...] = ("GroupedGEMM", "SSM", "RoPE", "CrossEntropy", "MoE_comm")


def _gemm(
    m: int,
    n: int,
    k: int,
    sizes: tuple[int, int, int],
    dtype: str,
    pos: tuple[int, ...],
    *,
    bias_size: int = 0,
) -> OpModel:
    """A GEMM of ``M×K`` by ``K×N`` with element sizes (A, B, output) and a bias of ``N``
    elements when ``bias_size``: ``2·M·N·K`` (+ ``M·N``) FLOPs, each matrix moved once."""
    a, b, out = sizes
    flops = 2 * m * n * k + (m * n if bias_size else 0)
    moved = m * k * a + k * n * b + m * n * out + n * bias_size
    params = {"B": 1, "M": m, "N": n, "K": k, "bias": bool(bias_size)}
    return OpModel("GEMM", flops, moved, "matrix", dtype, params, pos, pos)


def _te_gemm(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """``tex_ts::te_gemm_ts``: A, B, D at inputs 0, 5, 10 (column-major, cuBLASLt's
    convention: ``transa``/``transb`` at Concrete Inputs 4 and 9), the bias at 14 (empty:
    none), its type at input 18."""
    dims, types, concrete = args
    a, b = dims_at(dims, 0), dims_at(dims, 5)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    trans_a, trans_b = concrete_at(concrete, 4) == "1", concrete_at(concrete, 9) == "1"
    m, k = (a[0], a[1]) if trans_a else (a[1], a[0])
    n = b[1] if trans_b else b[0]
    sizes = tuple(bpe(type_at(types, i)) for i in (0, 5, 10))
    bias = concrete_at(concrete, 14) != ""
    bias_size = (bpe(type_at(types, 18)) or sizes[0] or 0) if bias else 0
    if any(s is None for s in sizes):
        return None
    return _gemm(m, n, k, sizes, type_at(types, 0), (0, 5), bias_size=bias_size)  # type: ignore[arg-type]


def _dynamic_quant_gemm(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """``vllm::gemm_with_dynamic_quant``: x ``[M, K]`` and weight ``[N, K_packed]``, the
    first two 2-D inputs; every matrix at the activation's element size (TraceLens's)."""
    dims, types, _ = args
    shapes = [(i, d) for i, d in enumerate(dims) if isinstance(d, list) and len(d) == 2]
    size = bpe(type_at(types, 0))
    if len(shapes) < 2 or size is None:
        return None
    (ia, a), (ib, b) = shapes[0], shapes[1]
    return _gemm(a[0], b[0], a[1], (size, size, size), type_at(types, 0), (ia, ib))


def _trans(concrete: list[str], i: int) -> bool:
    return bool(flag(concrete_at(concrete, i)))


def _hipblaslt(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Primus-Turbo's ``hipblaslt_gemm_fp8``/``_fp4(A, scaleA_inv, B, scaleB_inv, out_dtype,
    transA, transB, transC, granularity)``: ``transC`` swaps A and B (and their transposes),
    as the binding does; the output is 16-bit. FP4 packs two values per byte (``K`` is twice
    the recorded width) and reads one E8M0 scale per 32 elements of each row."""
    dims, types, concrete = args
    a, b = dims_at(dims, 0), dims_at(dims, 2)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    trans_a, trans_b = _trans(concrete, 5), _trans(concrete, 6)
    if _trans(concrete, 7):
        a, b, trans_a, trans_b = b, a, not trans_b, not trans_a
    m, k = (a[1], a[0]) if trans_a else (a[0], a[1])
    n = b[0] if trans_b else b[1]
    return _low_precision(op.endswith("fp4"), m, n, k, types, (0, 1, 2, 3))


def _gemm_a4w4(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """AITER's ``gemm_a4w4(A, B, scaleA, scaleB, out, ...)`` (and the ``_gemm_a4w4_asm`` leaf):
    MXFP4 in the NT layout only, A ``[M, K/2]``, B ``[N, K/2]``."""
    dims, types, _ = args
    a, b = dims_at(dims, 0), dims_at(dims, 1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    return _low_precision(True, a[0], b[0], a[1], types, (0, 2, 1, 3))


def _low_precision(
    fp4: bool, m: int, n: int, k: int, types: list[Any], where: tuple[int, int, int, int]
) -> OpModel | None:
    """An FP8 or MXFP4 GEMM (``where``: positions of A, its scale, B, its scale); ``k`` is
    the recorded width of A (packed for FP4)."""
    ia, isa, ib, isb = where
    size_a, size_b = bpe(type_at(types, ia)), bpe(type_at(types, ib))
    if size_a is None or size_b is None:
        return None
    if not fp4:
        out = 2 if size_a == 1 else size_a
        return _gemm(m, n, k, (size_a, size_b, out), type_at(types, ia), (ia, ib))
    k *= 2  # two FP4 values per byte
    blocks = -(-k // 32)  # one E8M0 scale per 32 elements of a row
    scale_a, scale_b = bpe(type_at(types, isa)) or 1, bpe(type_at(types, isb)) or 1
    moved = m * (k // 2) * size_a + n * (k // 2) * size_b + m * n * 2
    moved += m * blocks * scale_a + n * blocks * scale_b
    params = {"B": 1, "M": m, "N": n, "K": k, "bias": False}
    pos = (ia, ib)
    return OpModel("GEMM", 2 * m * n * k, moved, "matrix", type_at(types, ia), params, pos, pos)


def _grouped(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Primus-Turbo's grouped GEMM, X ``[M, K]`` by ``G`` weights ``[K, N]`` (or ``[N, K]``):
    ``2·M·K·N`` FLOPs, ``(M·K + G·K·N)·bpe_in + M·N·bpe_out`` bytes, ``bpe_out`` from the
    second input's type (TraceLens's). ``*_variable_k``: each group its own ``K`` (a list of
    per-group shapes, or the aggregate ``[M, K]``, ``[M, N]``)."""
    dims, types, _ = args
    size_in = bpe(type_at(types, 0))
    size_out = bpe(type_at(types, 1)) or size_in
    if size_in is None or size_out is None or len(dims) < 2:
        return None
    pairs = _group_pairs(dims[0], dims[1], variable=op.endswith(("variable_k", "variable_k_impl")))
    if not pairs:
        return None
    flops = sum(2 * m * k * n for m, k, n, _ in pairs)
    moved = sum((m * k + g * k * n) * size_in + m * n * size_out for m, k, n, g in pairs)
    m, k, n = sum(p[0] for p in pairs), pairs[0][1], pairs[0][2]
    params = {"G": sum(p[3] for p in pairs), "M": m, "N": n, "K": k}
    return OpModel("GroupedGEMM", flops, moved, "matrix", type_at(types, 0), params, (0, 1), ())


def _group_pairs(x: Any, w: Any, *, variable: bool) -> list[tuple[int, int, int, int]]:
    """(M, K, N, G) per group of weights: one entry for the compact forms, one per group for
    the lists of per-group shapes."""
    if _is_shape(x) and _is_shape(w) and len(x) == 2:
        if variable and len(w) == 2:  # aggregate [M, K], [M, N]: one effective group
            return [(x[0], x[1], w[1], 1)]
        if not variable and len(w) == 3:
            n = w[2] if w[1] == x[1] else w[1] if w[2] == x[1] else None
            return [(x[0], x[1], n, w[0])] if n is not None else []
        return []
    lhs, rhs = _matrices(x), _matrices(w)
    if not lhs or len(lhs) != len(rhs) or any(a[1] != b[0] for a, b in zip(lhs, rhs, strict=True)):
        return []
    if variable:
        return [(a[0], a[1], b[1], 1) for a, b in zip(lhs, rhs, strict=True)]
    if any(a[1] != lhs[0][1] or b[1] != rhs[0][1] for a, b in zip(lhs, rhs, strict=True)):
        return []
    return [(sum(a[0] for a in lhs), lhs[0][1], rhs[0][1], len(lhs))]


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) for v in value)


def _matrices(value: Any) -> list[list[int]]:
    """The 2-D shapes in a (nested) TensorList's recorded dims."""
    if _is_shape(value) and len(value) == 2:
        return [value]
    if isinstance(value, list):
        return [m for v in value for m in _matrices(v)]
    return []


def _silu_mul(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Liger's ``LigerSiLUMulFunction(a, b)``: ``SiLU(a) · b``, one output of a's shape."""
    dims, types, _ = args
    a, b = dims_at(dims, 0), dims_at(dims, 1)
    size_a, size_b = bpe(type_at(types, 0)), bpe(type_at(types, 1))
    if a is None or b is None or size_a is None or size_b is None or numel(a) != numel(b):
        return None
    n = numel(a)
    params = {"shape_in1": tuple(a), "shape_in2": tuple(b)}
    moved = n * size_a + n * size_b + n * max(size_a, size_b)
    return OpModel(
        "BinaryElementwise", n, moved, "vector", type_at(types, 0), params, (0, 1), (0, 1)
    )


def _quantize(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Primus-Turbo's quantisers of input 0: ``quantize_fp8_tensorwise`` reads it and writes
    one byte per element; ``quantize_mxfp4_dual`` writes it twice in FP4 (row- and
    column-wise, half a byte per element) with one E8M0 scale per 32 elements of each."""
    dims, types, _ = args
    shape, size = dims_at(dims, 0), bpe(type_at(types, 0))
    if shape is None or size is None:
        return None
    n = numel(shape)
    if op.endswith("fp8_tensorwise"):
        moved = n * size + n
    elif len(shape) == 2:
        rows, cols = shape
        moved = n * size + 2 * ((n + 1) // 2) + rows * -(-cols // 32) + cols * -(-rows // 32)
    else:
        return None
    params = {"op_shape": tuple(shape)}
    return OpModel("UnaryElementwise", n, moved, "vector", type_at(types, 0), params, (0,), (0,))


def _ln_modulate(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Primus's fused LayerNorm + scale/shift of ``x [T, B, H]`` (DiT blocks): forward reads
    x, scale and shift and writes y and the float32 mean and rstd per row (12 FLOPs per
    element); backward reads the gradient, x̂, mean, rstd and the modulation gradient and
    writes x's, scale's and shift's gradients (15)."""
    dims, types, _ = args
    shape, size = dims_at(dims, 0), bpe(type_at(types, 0))
    if shape is None or size is None or len(shape) != 3:
        return None
    t, b, h = shape
    n = t * b * h
    if op.endswith("_backward"):
        flops, moved = 15 * n, 3 * n * size + 2 * t * b * 4 + 3 * b * h * size
    else:
        flops, moved = 12 * n, 2 * n * size + 2 * b * h * size + 2 * t * b * 4
    params = {"op_shape": tuple(shape), "num_channels": h, "is_affine": True}
    return OpModel("Normalization", flops, moved, "vector", type_at(types, 0), params, (0,), (0,))


def _causal_conv1d(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """DaoAILab's depthwise ``causal_conv1d_fwd(x [B, C, L], weight [C, W], bias [C])``:
    ``2·B·C·L·W`` FLOPs; x, weight, bias read and y written once."""
    dims, types, _ = args
    x, w, size = dims_at(dims, 0), dims_at(dims, 1), bpe(type_at(types, 0)) or 2
    if x is None or w is None or len(x) != 3 or len(w) != 2:
        return None
    batch, channels, length = x
    bias = dims_at(dims, 2)
    moved = (2 * numel(x) + numel(w) + (channels if bias else 0)) * size
    params = {"batch": batch, "channels": channels, "seq_len": length, "kernel_size": w[1]}
    flops = 2 * numel(x) * w[1]
    return OpModel("SSM", flops, moved, "matrix", type_at(types, 0), params, (0,), ())


def _mamba_ssd(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """``MambaSplitConv1dScanCombinedFn(zxbcdt [B, T, D], conv1d_weight [C, W], conv1d_bias,
    dt_bias [H], A [H], D [H], chunk_size, …, headdim, ngroups)`` (Mamba-2's SSD): the state
    size ``N`` follows from ``D = 2·H·P + 2·G·N + H``; FLOPs are the conv1d and the four
    chunked matmuls, bytes the input, parameters and the ``[B, T, H·P]`` output."""
    dims, types, concrete = args
    z, w, heads = dims_at(dims, 0), dims_at(dims, 1), dims_at(dims, 3)
    if z is None or w is None or heads is None or len(z) != 3 or len(w) != 2 or len(heads) != 1:
        return None
    size = bpe(type_at(types, 0)) or 2
    (b, t, width), (channels, d_conv), h = z, w, heads[0]
    chunk, p, g = (
        (ints(concrete_at(concrete, i)) or [d])[0] for i, d in ((6, 128), (15, 64), (16, 1))
    )
    inner = h * p
    if width - 2 * inner - h <= 0 or (width - 2 * inner - h) % (2 * g):
        return None
    n = (width - 2 * inner - h) // (2 * g)
    flops = 2 * b * channels * t * d_conv + 2 * b * g * t * chunk * n + 2 * b * h * t * chunk * p
    flops += 4 * b * h * t * n * p
    params_bytes = h * ((bpe(type_at(types, 3)) or 4) + (bpe(type_at(types, 4)) or 4))
    params_bytes += h * (bpe(type_at(types, 5)) or size)
    moved = b * t * width * size + channels * (d_conv + 1) * size + params_bytes
    moved += b * t * inner * size
    params = {"B": b, "T": t, "H": h, "P": p, "G": g, "N": n, "C": chunk}
    return OpModel("SSM", flops, moved, "matrix", type_at(types, 0), params, (0,), ())


def _rope(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Transformer Engine's ``FusedRoPEFunc(t [S, B, H, D], freqs, …)``: 6 FLOPs per pair of
    elements (3 per element), t read and written once."""
    dims, types, _ = args
    shape, size = dims_at(dims, 0), bpe(type_at(types, 0)) or 2
    if shape is None or len(shape) != 4:
        return None
    n = numel(shape)
    params = {"op_shape": tuple(shape)}
    return OpModel("RoPE", 3 * n, 2 * n * size, "vector", type_at(types, 0), params, (0,), ())


def _cross_entropy(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """Transformer Engine's ``CrossEntropyFunction(logits [B, …, V], targets)``: an online
    softmax and the loss, ~5 FLOPs per logit; logits read once, int64 targets read, one
    float32 loss per row written."""
    dims, types, _ = args
    logits, size = dims_at(dims, 0), bpe(type_at(types, 0)) or 2
    if logits is None or len(logits) < 2:
        return None
    batch, vocab = logits[0], logits[-1]
    moved = numel(logits) * size + batch * 8 + batch * 4
    params = {"batch": batch, "vocab_size": vocab}
    return OpModel(
        "CrossEntropy", 5 * batch * vocab, moved, "vector", type_at(types, 0), params, (0,), ()
    )


def _moe_comm(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """MoE token dispatch/combine: ``[tokens, hidden]`` moved between ranks, no FLOPs. Its
    bandwidth is the network's, not HBM's: no roofline (``unit`` ``network``)."""
    dims, types, _ = args
    tokens, size = dims_at(dims, 0), bpe(type_at(types, 0))
    if tokens is None or len(tokens) < 2 or size is None:
        return None
    params = {"num_tokens": tokens[0], "hidden_dim": tokens[1]}
    moved = math.prod(tokens[:2]) * size
    return OpModel("MoE_comm", 0.0, moved, "network", type_at(types, 0), params, (0,), ())


_PRIMUS = ("primus_turbo::", "primus_turbo_cpp_extension::")
#: Op name → model function.
LIBRARY_MODELS = {
    "tex_ts::te_gemm_ts": _te_gemm,
    "vllm::gemm_with_dynamic_quant": _dynamic_quant_gemm,
    **{f"{p}hipblaslt_gemm_{kind}": _hipblaslt for p in _PRIMUS for kind in ("fp8", "fp4")},
    "aiter::gemm_a4w4": _gemm_a4w4,
    "aiter::_gemm_a4w4_asm": _gemm_a4w4,
    **dict.fromkeys(
        (
            "primus_turbo::grouped_gemm",
            "primus_turbo::grouped_gemm_impl",
            "primus_turbo_cpp_extension::grouped_gemm",
            "primus_turbo_cpp_extension::ck_grouped_gemm",
            "primus_turbo::grouped_gemm_variable_k",
            "primus_turbo::grouped_gemm_variable_k_impl",
            "primus_turbo_cpp_extension::grouped_gemm_variable_k",
            "primus_turbo_cpp_extension::ck_grouped_gemm_variable_k",
        ),
        _grouped,
    ),
    "LigerSiLUMulFunction": _silu_mul,
    **{f"{p}quantize_fp8_tensorwise": _quantize for p in _PRIMUS},
    **{f"{p}quantize_mxfp4_dual": _quantize for p in (*_PRIMUS, "primus::")},
    "primus::fused_ln_modulate": _ln_modulate,
    "primus::fused_ln_modulate_backward": _ln_modulate,
    "DaoAILab::_causal_conv1d_fwd_cpp": _causal_conv1d,
    "MambaSplitConv1dScanCombinedFn": _mamba_ssd,
    "FusedRoPEFunc": _rope,
    "CrossEntropyFunction": _cross_entropy,
    "MoEDispatch": _moe_comm,
    "MoECombine": _moe_comm,
}

_TE_PSEUDO = (
    "a pseudo op TraceLens builds from Transformer Engine 2's GEMM kernels: not an event of "
    "the trace (the kernels count under the TE module op that launched them)"
)
#: The ops of TraceLens's op → model table (``TraceLens/PerfModel/torch_op_mapping.py``) that
#: have no model here, and why.
TRACELENS_UNMODELLED: dict[str, str] = {
    **dict.fromkeys(
        (
            "_Linear_yfwd_mm",
            "_LinearBackward_xgrad_mm",
            "_LinearBackward_wgrad_mm",
            "_LayerNormLinear_yfwd_mm",
            "_LayerNormLinearBackward_xgrad_mm",
            "_LayerNormLinearBackward_wgrad_mm",
        ),
        _TE_PSEUDO,
    ),
    "vllm::unified_attention_with_output": (
        "its FLOPs need the per-batch sums of context and generated tokens, which vLLM writes "
        "in an annotation outside the op; its own Input Dims hold only Q and the paged KV cache"
    ),
    **dict.fromkeys(
        (f"aten::{p}instance_norm_backward" for p in ("", "native_", "miopen_", "cudnn_")),
        "not a PyTorch op (instance norm's backward runs as batch norm's); TraceLens's own "
        "model raises NotImplementedError",
    ),
}
