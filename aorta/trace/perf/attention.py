"""Perf models of attention (``SDPA_fwd``/``SDPA_bwd``): ATen's scaled-dot-product ops,
flash-attention 2 and 3 (fixed-length and varlen), AITER's attention entry points and
DeepSpeed's Evoformer attention, with TraceLens's formulas.

FLOPs ``B·H_Q·(2·N_Q·N_KV·d_qk + 2·N_Q·N_KV·d_v)``, halved when causal (softmax not
counted); the backward recomputes the scores and computes dV, dP, dQ, dK (2.5× the forward,
plus the sums over the query heads that share a K/V head under GQA). Bytes: Q, K, V read and
O written (backward: Q, K, V, dO read, dQ, dK, dV written) at the real element size — where
TraceLens assumes 2 bytes whatever the dtype.

Each op is an :class:`_Attn`: where Q, K and V are and in which layout, where dropout and
``causal`` are among the Concrete Inputs, whether the op is a backward itself, and which
inputs' types and strides key TraceLens's rows.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .args import Args, OpModel, bpe, concrete_at, dims_at, flag, ints, type_at

__all__ = ["ATTENTION_MODELS", "FORWARD_ATTENTION"]


class _Attn(NamedTuple):
    layout: str  # BHND, BNHD, THD (varlen: tokens of every sequence, heads, head dim), EVO
    q: int = 0  # position of Q (K, V follow)
    dropout: int = -1  # positions in Concrete Inputs (-1: none)
    causal: int = -1
    backward: bool = False  # the op computes the gradients itself
    causal_default: bool = False  # when Concrete Inputs do not say (flash_attn's backward)
    seqs: tuple[int, int] = (-1, -1)  # varlen: positions of cu_seqlens_q/_k (Input Dims)
    longest: tuple[int, int] = (-1, -1)  # varlen: max_seqlen_q/_k (Concrete Inputs)
    typed: tuple[int, ...] = (0, 1)  # TraceLens's dtype_A_B
    strided: tuple[int, ...] = ()  # TraceLens's q/k/v strides (flash_attn only)


_QKV = (0, 1, 2)
_NONE: tuple[int, ...] = ()  # AITER's rows carry neither types nor strides
#: Op name → where its arguments are (the ops' schemas, as TraceLens reads them).
_OPS: dict[str, _Attn] = {
    "aten::_scaled_dot_product_flash_attention": _Attn("BHND", 0, 3, 4),
    "aten::_scaled_dot_product_efficient_attention": _Attn("BHND", 0, 5, 6),
    "aten::_scaled_dot_product_cudnn_attention": _Attn("BHND", 0, 5, 6),
    "flash_attn::_flash_attn_forward": _Attn("BNHD", 0, 3, 5, strided=_QKV),
    "FlashAttnFunc": _Attn("BNHD", 0, 3, 5, strided=_QKV),
    "flash_attn::_flash_attn_backward": _Attn(
        "BNHD", 1, 8, 10, backward=True, causal_default=True, strided=(1, 2, 3)
    ),
    "flash_attn::_flash_attn_varlen_forward": _Attn(
        "THD", 0, 7, 9, seqs=(3, 4), longest=(5, 6), strided=_QKV
    ),
    "flash_attn::_flash_attn_varlen_backward": _Attn(
        "THD", 1, 13, 15, backward=True, seqs=(9, 10), longest=(11, 12), strided=(1, 2, 3)
    ),
    "flash_attn_3::fwd": _Attn("BNHD", 0, -1, 24, typed=()),
    "aiter::_flash_attn_forward": _Attn("BNHD", 0, 3, 5, typed=_NONE),
    "aiter::_flash_attn_backward": _Attn("BNHD", 0, 10, 12, backward=True, typed=_NONE),
    "aiter::mha_fwd": _Attn("BNHD", 0, 3, 5, typed=_NONE),
    "aiter::fmha_v3_fwd": _Attn("BNHD", 0, 3, 5, typed=_NONE),
    "aiter::mha_bwd": _Attn("BNHD", 1, 6, 8, backward=True, typed=_NONE),
    "aiter::wrapper_fmha_v3_fwd": _Attn("BNHD", 1, 4, 6, typed=_NONE),
    "aiter::wrapper_fmha_v3_bwd": _Attn("BNHD", 1, 7, 9, backward=True, typed=_NONE),
    "EvoformerAttention": _Attn("EVO", typed=(0,)),
}
#: Forward attention ops: their model also describes the linked backward work.
FORWARD_ATTENTION: frozenset[str] = frozenset(n for n, a in _OPS.items() if not a.backward)


def _shapes(spec: _Attn, dims: list[Any]) -> tuple[int, ...] | None:
    """(B, N_Q, H_Q, N_KV, H_KV, d_qk, d_v) from Q, K, V in the op's layout."""
    q, k, v = (dims_at(dims, spec.q + i) for i in range(3))
    if q is None or k is None or v is None or not len(q) == len(k) == len(v):
        return None
    if spec.layout == "THD" and len(q) == 3:
        return (1, q[0], q[1], k[0], k[1], q[2], v[2])
    if spec.layout == "EVO" and len(q) == 5:  # [B, N_seq, N_res, H, D]: N_seq folds into B
        return (q[0] * q[1], q[2], q[3], k[2], k[3], q[4], v[4])
    if len(q) != 4:
        return None
    if spec.layout == "BHND":
        return (q[0], q[2], q[1], k[2], k[1], q[3], v[3])
    return (q[0], q[1], q[2], k[1], k[2], q[3], v[3])


def _flops(
    b: int, nq: int, hq: int, nkv: int, hkv: int, dqk: int, dv: int, backward: bool
) -> float:
    qk, pv = 2 * nq * nkv * dqk, 2 * nq * nkv * dv
    if not backward:
        return b * hq * (qk + pv)
    # recomputed scores, dV, dP, dQ, dK; GQA sums the heads sharing K/V
    return b * hq * (3 * qk + 2 * pv) + b * nkv * hkv * max(hq // max(hkv, 1) - 1, 0) * (dqk + dv)


def _varlen_flops(
    spec: _Attn, dims: list[Any], concrete: list[str], shape: tuple[int, ...], backward: bool
) -> float | None:
    """flash-attention's varlen ops pack every sequence into the token dimension and record
    only the number of sequences and the longest: a lower bound (TraceLens's) — the longest
    sequence, and the other tokens in sequences of equal length."""
    _, tq, hq, tkv, hkv, dqk, dv = shape
    cu_q, cu_k = dims_at(dims, spec.seqs[0]), dims_at(dims, spec.seqs[1])
    longest = [ints(concrete_at(concrete, i).split(".")[0]) for i in spec.longest]
    if not cu_q or not cu_k or not longest[0] or not longest[1]:
        return None
    seqs_q, seqs_k = cu_q[0] - 1, cu_k[0] - 1
    mq, mk = longest[0][0], longest[1][0]
    flops = _flops(1, mq, hq, mk, hkv, dqk, dv, backward)
    if seqs_q > 1 and seqs_k > 1:
        rest_q, rest_k = (tq - mq) // (seqs_q - 1), (tkv - mk) // (seqs_k - 1)
        flops += (seqs_q - 1) * _flops(1, rest_q, hq, rest_k, hkv, dqk, dv, backward)
    return flops


def attention(op: str, args: Args, ctx: dict[str, Any]) -> OpModel | None:
    """The model of one attention call (``ctx["backward"]``: of the forward op's linked
    backward work)."""
    dims, types, concrete = args
    spec = _OPS[op]
    shape = _shapes(spec, dims)
    size = bpe(type_at(types, spec.q))
    if shape is None or size is None:
        return None
    b, nq, hq, nkv, hkv, dqk, dv = shape
    causal_text = concrete_at(concrete, spec.causal)
    causal = flag(causal_text) if causal_text else None
    causal = spec.causal_default if causal is None else causal
    dropout = concrete_at(concrete, spec.dropout) if spec.dropout >= 0 else "0."
    backward = spec.backward or bool(ctx.get("backward", False))
    flops: float | None
    if spec.layout == "THD":
        flops = _varlen_flops(spec, dims, concrete, shape, backward)
        if flops is None:
            return None
    else:
        flops = _flops(b, nq, hq, nkv, hkv, dqk, dv, backward)
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
    dtype = type_at(types, spec.q)
    return OpModel(
        family, flops, elements * size, "matrix", dtype, params, spec.typed, spec.strided
    )


#: Op name → model function.
ATTENTION_MODELS = dict.fromkeys(_OPS, attention)
