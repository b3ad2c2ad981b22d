"""The models added for ops the perf model had not seen: read from a real CPU trace where the
op runs on a CPU (upsampling, ``linalg_norm``, two memory layouts of one ``mul``), from
arguments laid out as the library's schema says where it needs a GPU library; and TraceLens's
whole op → model table: a model of the same family here, or a stated reason."""

from __future__ import annotations

import gzip
import json
import math
import re

import pytest

from aorta.cli import main
from aorta.errors import ExitCode
from aorta.trace.perf.libs import TRACELENS_UNMODELLED
from aorta.trace.perf.op_model import modelled_ops, op_model
from aorta.trace.testing import synthetic_trace
from tests.trace_helpers import DATA, shipped

CPU = "cpu_perf_ops.pt.trace.json.gz"
BF16, FP8, F32 = "c10::BFloat16", "c10::Float8_e4m3fnuz", "float"


@pytest.fixture(scope="module")
def cpu_events() -> list[dict]:
    with gzip.open(DATA / CPU) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op"]


def _calls(events: list[dict], name: str) -> list[dict]:
    found = [e["args"] for e in events if e["name"] == name]
    assert found, name
    return found


@pytest.mark.parametrize(
    ("op", "per_output"),
    [
        ("aten::upsample_nearest1d", 1),
        ("aten::upsample_nearest2d", 1),
        ("aten::_upsample_nearest_exact2d", 1),
        ("aten::upsample_bilinear2d", 8),
    ],
)
def test_upsampling_from_a_real_trace(cpu_events, op, per_output):
    """``UnaryElementwise``: input read, output written (its size from ``output_size``, or the
    input's times ``scale_factors``, as recorded), one FLOP per output element for nearest,
    two per tap for bilinear (4 taps)."""
    ops = shipped(CPU).perf_ops(device=False)
    for args in _calls(cpu_events, op):
        x = args["Input Dims"][0]
        size_text = args["Concrete Inputs"][1]
        if size_text:
            out = [int(v) for v in re.findall(r"\d+", size_text)]
        else:
            scales = [float(v) for v in re.findall(r"[\d.]+", args["Concrete Inputs"][-1])]
            out = [int(n * s) for n, s in zip(x[2:], scales * (len(x) - 2), strict=False)]
        n_out = math.prod(x[:2]) * math.prod(out)
        row = ops[ops["op"] == op].iloc[0]
        assert row["family"] == "UnaryElementwise"
        assert row["bytes"] == (math.prod(x) + n_out) * 4  # float32
        assert row["flops"] == per_output * n_out


def test_linalg_norm_reduces_over_its_dim(cpu_events):
    """``linalg_norm(x, ord, dim, keepdim, dtype)`` (TraceLens: ``Reduce_fwd``): the reduced
    dims are the third argument, so the output keeps the others (4 norms of 32 values)."""
    ops = shipped(CPU).perf_ops(device=False)
    for op in ("aten::linalg_norm", "aten::linalg_vector_norm"):
        args = _calls(cpu_events, op)[0]
        assert args["Concrete Inputs"][2] == "[-1]" and args["Input Dims"][0] == [4, 32]
        row = ops[ops["op"] == op].iloc[0]
        assert (row["family"], row["flops"], row["bytes"]) == ("Reduce_fwd", 128, 128 * 4 + 4 * 4)


def test_two_layouts_of_one_shape_in_a_real_trace(cpu_events):
    """The same ``mul`` of (2,4,9,8) × (1,1,9,8) on a permuted view and on a contiguous
    tensor: Kineto records two stride patterns, and they are two rows of two calls each."""
    strides = {json.dumps(a["Input Strides"][0]) for a in _calls(cpu_events, "aten::mul")}
    assert {"[288, 8, 32, 1]", "[288, 72, 8, 1]"} <= strides
    ops = shipped(CPU).perf_ops(device=False)
    mul = ops[
        (ops["op"] == "aten::mul") & (ops["shape"] == "shape_in1=(2,4,9,8) shape_in2=(1,1,9,8)")
    ]
    assert sorted(mul["strides"]) == ["(288,72,8,1) (72,72,8,1)", "(288,8,32,1) (72,72,8,1)"]
    assert mul["count"].tolist() == [2, 2] and (mul["kernel_us"] == 0).all()


def test_a_cpu_trace_with_shapes_is_summarized(capsys):
    """Modelled ops that launched no GPU work (every op of a CPU trace): no coverage to give,
    no error (this used to raise an IndexError in perf_summary)."""
    summary = shipped(CPU).perf_summary(device=False)
    assert summary.empty and math.isnan(summary.attrs["coverage"])
    ops = shipped(CPU).perf_ops(device="MI300X")
    assert (ops["roofline_note"] == "no GPU work in the trace").all()
    assert main(["trace", "summarize", str(DATA / CPU), "--cache", "off"]) == ExitCode.OK
    assert "no compute GPU time to model" in capsys.readouterr().out


# -- library ops, on arguments laid out as their schemas say (no trace here holds them) -------
def test_flash_attention_backward_and_varlen():
    fwd = op_model(
        "flash_attn::_flash_attn_forward",
        [[2, 128, 8, 64]] * 3,
        [BF16] * 3,
        ["", "", "", "0.0", "0.125", "True"],
    )
    bwd_dims = [[2, 128, 8, 64]] * 4 + [[2, 128, 8, 64], [2, 8, 128]]
    bwd = op_model(
        "flash_attn::_flash_attn_backward",
        bwd_dims,
        [BF16] * 6,
        [""] * 8 + ["0.0", "0.125", "True"],
    )
    assert fwd is not None and bwd is not None
    assert fwd.flops == 2 * 8 * (2 * 128 * 128 * 64 * 2) / 2  # causal halves
    assert bwd.family == "SDPA_bwd" and bwd.flops == 2.5 * fwd.flops
    assert fwd.strided == (0, 1, 2) and bwd.strided == (1, 2, 3)
    # varlen: 3 sequences, 1000 tokens, the longest 500: 500² + 2·250² token pairs
    dims = [[1000, 8, 64]] * 3 + [[4], [4]]
    concrete = ["", "", "", "", "", "500", "500", "0.0", "0.125", "False"]
    varlen = op_model("flash_attn::_flash_attn_varlen_forward", dims, [BF16] * 5, concrete)
    assert varlen is not None
    per_pair = 8 * (2 * 64 + 2 * 64)
    assert varlen.flops == per_pair * (500 * 500 + 2 * 250 * 250)
    assert varlen.bytes == 4 * 1000 * 8 * 64 * 2


@pytest.mark.parametrize(
    ("op", "dims", "concrete", "family"),
    [
        ("FlashAttnFunc", [[1, 64, 4, 32]] * 3, ["", "", "", "0.", "", "False"], "SDPA_fwd"),
        ("aiter::mha_fwd", [[1, 64, 4, 32]] * 3, ["", "", "", "0.", "", "False"], "SDPA_fwd"),
        ("aiter::fmha_v3_fwd", [[1, 64, 4, 32]] * 3, ["", "", "", "0.", "", "False"], "SDPA_fwd"),
        (
            "aiter::wrapper_fmha_v3_fwd",
            [[]] + [[1, 64, 4, 32]] * 3,
            [""] * 4 + ["0.", "", "False"],
            "SDPA_fwd",
        ),
        (
            "aiter::_flash_attn_backward",
            [[1, 64, 4, 32]] * 3,
            [""] * 10 + ["0.", "", "False"],
            "SDPA_bwd",
        ),
        ("aiter::mha_bwd", [[1, 64, 4, 32]] * 4, [""] * 6 + ["0.", "", "False"], "SDPA_bwd"),
        (
            "aiter::wrapper_fmha_v3_bwd",
            [[1, 64, 4, 32]] * 4,
            [""] * 7 + ["0.", "", "False"],
            "SDPA_bwd",
        ),
        ("flash_attn_3::fwd", [[1, 64, 4, 32]] * 3, [""] * 24 + ["False"], "SDPA_fwd"),
    ],
)
def test_attention_entry_points(op, dims, concrete, family):
    """(B, N, H, d) = (1, 64, 4, 32) wherever each schema puts Q, K, V: the same forward
    FLOPs (the backward: 2.5 times) and bytes."""
    model = op_model(op, dims, [BF16] * len(dims), concrete)
    assert model is not None and model.family == family
    forward = 4 * (2 * 64 * 64 * 32 * 2)
    assert model.flops == (forward if family == "SDPA_fwd" else 2.5 * forward)
    elements = 64 * 4 * 32 * (4 if family == "SDPA_fwd" else 7)
    assert model.bytes == elements * 2


def test_evoformer_attention_folds_the_msa_depth_into_the_batch():
    m = op_model("EvoformerAttention", [[1, 16, 64, 4, 32]] * 3, [BF16] * 3, [])
    assert m is not None and m.params["B"] == 16 and m.flops == 16 * 4 * (2 * 64 * 64 * 32 * 2)


@pytest.mark.parametrize(
    ("op", "dims", "types", "concrete", "mnk", "moved"),
    [
        # TE (cuBLASLt's column-major view): A [K, M] not transposed, B [K, N] transposed,
        # D at input 10, the bias's type at 18
        (
            "tex_ts::te_gemm_ts",
            [[256, 128], [], [], [], [], [256, 64]] + [[]] * 4 + [[128, 64]] + [[]] * 8,
            [BF16] * 19,
            [""] * 9 + ["1"] + [""] * 9,
            (128, 64, 256),
            (128 * 256 + 256 * 64 + 128 * 64) * 2,
        ),
        (
            "vllm::gemm_with_dynamic_quant",
            [[128, 256], [64, 128]],
            [BF16, "c10::Float4_e2m1fn_x2"],
            [],
            (128, 64, 256),
            (128 * 256 + 256 * 64 + 128 * 64) * 2,
        ),
        (
            "primus_turbo_cpp_extension::hipblaslt_gemm_fp8",
            [[128, 256], [], [256, 64]] + [[]] * 6,
            [FP8, F32, FP8, F32] + ["Scalar"] * 5,
            ["", "", "", "", "15", "False", "False", "False", ""],
            (128, 64, 256),
            128 * 256 + 256 * 64 + 128 * 64 * 2,  # FP8 in, 16-bit out
        ),
        (
            "aten::_scaled_mm",
            [[128, 256], [256, 64]] + [[]] * 4,
            [FP8, FP8] + [F32] * 2 + [""] * 2,
            [""] * 6,
            (128, 64, 256),
            128 * 256 + 256 * 64 + 128 * 64 * 2,
        ),
    ],
)
def test_library_gemms(op, dims, types, concrete, mnk, moved):
    m = op_model(op, dims, types, concrete)
    assert m is not None and m.family == "GEMM"
    assert (m.params["M"], m.params["N"], m.params["K"]) == mnk
    assert m.flops == 2 * math.prod(mnk) and m.bytes == moved


def test_fp4_gemms_unpack_k_and_read_their_scales():
    fp4, e8 = "c10::Float4_e2m1fn_x2", "c10::Float8_e8m0fnu"
    a4w4 = op_model(
        "aiter::gemm_a4w4", [[128, 128], [64, 128], [128, 8], [64, 8]], [fp4, fp4, e8, e8], []
    )
    hip = op_model(
        "primus_turbo::hipblaslt_gemm_fp4",
        [[128, 128], [128, 8], [64, 128], [64, 8]] + [[]] * 5,
        [fp4, e8, fp4, e8] + ["Scalar"] * 5,
        ["", "", "", "", "", "False", "True", "False", ""],
    )
    for m in (a4w4, hip):
        assert m is not None and m.params["K"] == 256 and m.params["N"] == 64
        assert m.bytes == 128 * 128 + 64 * 128 + 128 * 64 * 2 + (128 + 64) * 8
        assert m.flops == 2 * 128 * 64 * 256


def test_grouped_gemm_both_layouts():
    compact = op_model(
        "primus_turbo::grouped_gemm_impl", [[512, 128], [4, 128, 256]], [BF16] * 2, []
    )
    zipped = op_model(
        "primus_turbo::grouped_gemm", [[[128, 128]] * 4, [[128, 256]] * 4], ["TensorList"] * 2, []
    )
    variable = op_model(
        "primus_turbo::grouped_gemm_variable_k",
        [[[100, 64], [28, 32]], [[64, 256], [32, 256]]],
        [BF16, BF16],
        [],
    )
    assert compact is not None and compact.family == "GroupedGEMM"
    assert compact.flops == 2 * 512 * 128 * 256
    assert compact.bytes == (512 * 128 + 4 * 128 * 256) * 2 + 512 * 256 * 2
    assert zipped is None  # a TensorList's element type is not recorded: no model, not a guess
    assert variable is not None and variable.flops == 2 * (100 * 64 + 28 * 32) * 256


@pytest.mark.parametrize(
    ("op", "dims", "types", "family", "flops", "moved"),
    [
        ("LigerSiLUMulFunction", [[8, 64], [8, 64]], [BF16] * 2, "BinaryElementwise", 512, 512 * 6),
        (
            "primus_turbo::quantize_fp8_tensorwise",
            [[8, 64], [], []],
            [BF16, F32, F32],
            "UnaryElementwise",
            512,
            512 * 3,
        ),
        (
            "primus::quantize_mxfp4_dual",
            [[64, 64]] + [[]] * 11,
            [BF16] + ["Scalar"] * 11,
            "UnaryElementwise",
            4096,
            4096 * 2 + 2 * 2048 + 2 * 64 * 2,
        ),
        (
            "primus::fused_ln_modulate",
            [[16, 2, 64], [2, 64], [2, 64], []],
            [BF16] * 3 + ["Scalar"],
            "Normalization",
            12 * 2048,
            2 * 2048 * 2 + 2 * 128 * 2 + 2 * 32 * 4,
        ),
        (
            "FusedRoPEFunc",
            [[16, 2, 4, 64], [16, 1, 1, 64]],
            [BF16, F32],
            "RoPE",
            3 * 8192,
            2 * 8192 * 2,
        ),
        (
            "CrossEntropyFunction",
            [[8, 1, 1000], [8, 1]],
            [BF16, "long int"],
            "CrossEntropy",
            5 * 8000,
            8000 * 2 + 8 * 12,
        ),
        ("MoEDispatch", [[256, 1024]], [BF16], "MoE_comm", 0, 256 * 1024 * 2),
        (
            "DaoAILab::_causal_conv1d_fwd_cpp",
            [[2, 64, 128], [64, 4], [64]],
            [BF16] * 3,
            "SSM",
            2 * 16384 * 4,
            (2 * 16384 + 256 + 64) * 2,
        ),
    ],
)
def test_library_elementwise_norm_and_other_families(op, dims, types, family, flops, moved):
    m = op_model(op, dims, types, [""] * len(dims))
    assert m is not None and (m.family, m.flops, m.bytes) == (family, flops, moved)


def test_mamba_ssd_finds_the_state_size_from_the_projection():
    # H = 8 heads of P = 64, G = 1 group, N = 16: D = 2·512 + 2·16 + 8 = 1064
    dims = [[2, 256, 1064], [544, 4], [544], [8], [8], [8]] + [[]] * 12
    concrete = [""] * 6 + ["128"] + [""] * 8 + ["64", "1"]
    m = op_model(
        "MambaSplitConv1dScanCombinedFn", dims, [BF16, BF16, BF16, F32, F32, BF16], concrete
    )
    assert m is not None and m.family == "SSM" and m.params["N"] == 16


def test_conv_bias_backward_takes_its_forward_by_sequence_number():
    """apex's ``ConvBias_Backward`` node records nothing of the forward: paired with the
    ``ConvBias_`` call of its Sequence number, it is that convolution's backward (2×)."""
    fwd_args = {
        "Input Dims": [[2, 16, 8, 8], [32, 16, 3, 3], [32], [], []],
        "Input type": [BF16, BF16, BF16, "Scalar", "Scalar"],
        "Concrete Inputs": ["", "", "", "1", "1"],
        "Sequence number": 41,
    }
    trace = synthetic_trace(
        [
            ("cpu_op", "ConvBias_", 0, 10, fwd_args),
            ("kernel", "conv_fwd", 12, 5, {"launch_ts": 2}),
            ("cpu_op", "ConvBias_Backward", 100, 20, {"Sequence number": 41, "tid": 200}),
            ("kernel", "conv_bwd", 122, 9, {"launch_ts": 102, "launch_tid": 200}),
        ]
    )
    ops = trace.perf_ops(device=False).set_index("family")
    out = 2 * 32 * 8 * 8
    assert ops.loc["CONV_fwd", "flops"] == out * 2 * 16 * 9 + out  # with the bias
    assert ops.loc["CONV_bwd", "flops"] == 2 * ops.loc["CONV_fwd", "flops"]
    assert (
        ops.loc["CONV_bwd", "op"] == "ConvBias_Backward" and ops.loc["CONV_bwd", "kernel_us"] == 9
    )


#: TraceLens's op → model table (``TraceLens/PerfModel/torch_op_mapping.py``, 2026): the
#: names of ``op_to_perf_model_class_map`` and of its unary, binary, norm and reduce lists.
TRACELENS_TABLE = (
    "aten::mm",
    "aten::addmm",
    "aten::_scaled_mm",
    "trtllm::cublas_scaled_mm",
    "bitsandbytes::int8_linear_matmul",
    "aten::bmm",
    "tex_ts::te_gemm_ts",
    "aten::baddbmm",
    "vllm::gemm_with_dynamic_quant",
    "FlashAttnFunc",
    "flash_attn::_flash_attn_forward",
    "flash_attn::_flash_attn_backward",
    "flash_attn::_flash_attn_varlen_forward",
    "flash_attn::_flash_attn_varlen_backward",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_flash_attention",
    "aten::convolution",
    "aten::convolution_backward",
    "ConvBias_",
    "ConvBiasReLU_",
    "ConvBias_Backward",
    "ConvBiasReLU_Backward",
    "aiter::_flash_attn_forward",
    "aiter::_flash_attn_backward",
    "aiter::wrapper_fmha_v3_fwd",
    "aiter::wrapper_fmha_v3_bwd",
    "aiter::mha_fwd",
    "aiter::fmha_v3_fwd",
    "aiter::mha_bwd",
    "flash_attn_3::fwd",
    "vllm::unified_attention_with_output",
    "EvoformerAttention",
    "LigerSiLUMulFunction",
    "primus_turbo::grouped_gemm",
    "primus_turbo::grouped_gemm_impl",
    "primus_turbo_cpp_extension::grouped_gemm",
    "primus_turbo::grouped_gemm_variable_k",
    "primus_turbo::grouped_gemm_variable_k_impl",
    "primus_turbo_cpp_extension::grouped_gemm_variable_k",
    "_Linear_yfwd_mm",
    "_LinearBackward_xgrad_mm",
    "_LinearBackward_wgrad_mm",
    "_LayerNormLinear_yfwd_mm",
    "_LayerNormLinearBackward_xgrad_mm",
    "_LayerNormLinearBackward_wgrad_mm",
    "primus_turbo_cpp_extension::ck_grouped_gemm",
    "primus_turbo_cpp_extension::ck_grouped_gemm_variable_k",
    "MoEDispatch",
    "MoECombine",
    "DaoAILab::_causal_conv1d_fwd_cpp",
    "FusedRoPEFunc",
    "CrossEntropyFunction",
    "MambaSplitConv1dScanCombinedFn",
    "primus_turbo_cpp_extension::hipblaslt_gemm_fp8",
    "primus_turbo::hipblaslt_gemm_fp8",
    "primus_turbo_cpp_extension::quantize_fp8_tensorwise",
    "primus_turbo::quantize_fp8_tensorwise",
    "primus_turbo_cpp_extension::hipblaslt_gemm_fp4",
    "primus_turbo::hipblaslt_gemm_fp4",
    "primus_turbo_cpp_extension::quantize_mxfp4_dual",
    "primus_turbo::quantize_mxfp4_dual",
    "primus::quantize_mxfp4_dual",
    "aiter::gemm_a4w4",
    "aiter::_gemm_a4w4_asm",
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
    "aten::div",
    "aten::div_",
    "aten::mul",
    "aten::mul_",
    "aten::add",
    "aten::add_",
    "aten::sigmoid_backward",
    "aten::threshold_backward",
    "aten::batch_norm",
    "aten::native_batch_norm",
    "aten::miopen_batch_norm",
    "aten::cudnn_batch_norm",
    "aten::layer_norm",
    "aten::native_layer_norm",
    "aten::miopen_layer_norm",
    "aten::cudnn_layer_norm",
    "aten::group_norm",
    "aten::native_group_norm",
    "aten::miopen_group_norm",
    "aten::cudnn_group_norm",
    "aten::instance_norm",
    "aten::native_instance_norm",
    "aten::miopen_instance_norm",
    "aten::cudnn_instance_norm",
    "aten::_fused_rms_norm",
    "aten::batch_norm_backward",
    "aten::native_batch_norm_backward",
    "aten::miopen_batch_norm_backward",
    "aten::cudnn_batch_norm_backward",
    "aten::layer_norm_backward",
    "aten::native_layer_norm_backward",
    "aten::miopen_layer_norm_backward",
    "aten::cudnn_layer_norm_backward",
    "aten::group_norm_backward",
    "aten::native_group_norm_backward",
    "aten::miopen_group_norm_backward",
    "aten::cudnn_group_norm_backward",
    "aten::instance_norm_backward",
    "aten::native_instance_norm_backward",
    "aten::miopen_instance_norm_backward",
    "aten::cudnn_instance_norm_backward",
    "aten::rms_norm_backward",
    "aten::native_rms_norm_backward",
    "aten::miopen_rms_norm_backward",
    "aten::cudnn_rms_norm_backward",
    "aten::_fused_rms_norm_backward",
    "primus::fused_ln_modulate",
    "primus::fused_ln_modulate_backward",
    "aten::sum",
    "aten::mean",
    "aten::max",
    "aten::min",
    "aten::norm",
    "aten::linalg_norm",
    "aten::std",
    "aten::var",
    "aten::logsumexp",
    "aten::cumsum",
    "aten::cumprod",
    "aten::amin",
    "aten::amax",
)


def test_every_op_tracelens_models_has_a_model_or_a_reason():
    covered = modelled_ops()
    missing = [op for op in TRACELENS_TABLE if op not in covered and op not in TRACELENS_UNMODELLED]
    assert not missing
    assert not set(TRACELENS_UNMODELLED) & covered  # a reason only where there is no model
    assert len(set(TRACELENS_TABLE)) == len(TRACELENS_TABLE)
