"""Kernel, copy and runtime-call classification on CUDA and ROCm names; user rules."""

from __future__ import annotations

import pytest

from aorta.regex import RegexError
from aorta.trace import Rule, default_rules
from aorta.trace.testing import synthetic_trace
from tests.trace_helpers import shipped

RULES = default_rules()


@pytest.mark.parametrize(
    ("name", "cat", "cls"),
    [
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "kernel", "communication"),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "kernel",
            "communication",
        ),
        ("rcclGenericKernel<1, false>", "kernel", "communication"),
        (
            "void ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "kernel",
            "communication",
        ),
        ("__amd_rocclr_copyBuffer.kd", "kernel", "memcpy"),
        ("__amd_rocclr_fillBufferAligned.kd", "kernel", "memset"),
        ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", "memcpy"),
        ("Memset (Device)", "gpu_memset", "memset"),
        ("Cijk_Alik_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT16x16x256", "kernel", "compute"),
        ("void at::native::vectorized_elementwise_kernel<4>", "kernel", "compute"),
    ],
)
def test_gpu_classes(name, cat, cls):
    assert RULES.gpu_class(name, cat) == cls


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("Cijk_Ailk_Bljk_BBS_BH_MT32x32x64_MI16x16x16x1_SN_1LDSB0", "tensile"),
        ("Cijk_Alik_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT16x16x256", "hipblaslt"),
        ("_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weight", "ck"),
        ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm>", "ck"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "nvjet"),
        (
            "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>",
            "cutlass",
        ),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "xmma"),
        ("ampere_sgemm_128x64_nn", "ampere"),
        # the family is the architecture in the name, not the device's: volta_sgemm runs on A100s
        ("volta_sgemm_128x64_nn", "volta"),
        ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", "turing"),
        ("maxwell_sgemm_128x64_nt", "maxwell"),
        ("triton_tem_fused_addmm_0", "triton"),
        ("void gemmk1_kernel<float, 256, 5>", "gemm"),
        ("void fbgemm_gpu::permute_2D_lengths_kernel<int>", None),
        ("void at::native::reduce_kernel<512, 1>", None),
    ],
)
def test_gemm_families(name, family):
    assert RULES.gemm_family(name, "kernel") == family


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("cudaLaunchKernel", "launch"),
        ("cuLaunchKernel", "launch"),
        ("hipLaunchKernel", "launch"),
        ("hipExtModuleLaunchKernel", "launch"),
        ("hipModuleLaunchKernel", "launch"),
        ("hipExtLaunchKernel", "launch"),
        ("cudaGraphLaunch", "launch"),
        ("cudaMemcpyAsync", "memcpy"),
        (
            "hipMemcpyAsync",
            "memcpy",
        ),  # a copy, not communication (HTA's `^hip` rule says otherwise)
        ("hipMemcpyWithStream", "memcpy"),
        ("hipMemsetAsync", "memset"),
        ("cudaDeviceSynchronize", "sync"),
        ("hipStreamWaitEvent", "sync"),
        ("hipGetDevicePropertiesR0600", "other"),
    ],
)
def test_runtime_kinds(name, kind):
    assert RULES.runtime_kind(name) == kind


def test_user_rules_come_first_and_are_not_global():
    mine = RULES.extend(
        gpu=[Rule(r"^my_allreduce", "communication", cats=("kernel",))],
        gemm=[Rule("^myblas_", "myblas")],
    )
    assert mine.gpu_class("my_allreduce_bf16", "kernel") == "communication"
    assert RULES.gpu_class("my_allreduce_bf16", "kernel") == "compute"
    trace = synthetic_trace(
        [("kernel", "my_allreduce_bf16", 0, 10), ("kernel", "myblas_gemm", 20, 10)]
    )
    assert trace.gpu_timeline().set_index("type").loc["total_comm_time", "time ms"] == 0
    mine_trace = trace.with_rules(mine)
    assert mine_trace.gpu_timeline().set_index("type").loc["total_comm_time", "time ms"] == 0.01
    assert set(mine_trace.kernels()["gemm_family"]) == {"", "myblas"}
    last = RULES.extend(gpu=[Rule("nccl", "memcpy")], where="last")
    assert last.gpu_class("ncclKernel_x", "kernel") == "communication"


def test_rocm_runtime_calls_are_classified_in_a_real_trace():
    trace = shipped("mi300_rccl_resnet_rank0.json.gz")
    names = trace.categories("name")
    kinds = {
        names[trace.column("name")[r]]: k
        for r, k in zip(trace.runtime_rows, trace.runtime_kind, strict=True)
    }
    assert (
        kinds["hipExtModuleLaunchKernel"] == 0
        and kinds["hipMemcpyAsync"] == 1
        and kinds["hipMemsetAsync"] == 2
    )


def test_a_rule_re2_cannot_take_fails_where_it_is_made_naming_the_rule():
    with pytest.raises(RegexError, match=r"rule 'mine' \(pattern '\(a\)\\\\1'\): backreferences"):
        Rule(r"(a)\1", "mine")
    with pytest.raises(RegexError, match=r"rule 'gemm' .*lookaround"):
        default_rules().extend(gemm=[Rule(r"(?<!fb)gemm", "gemm")])


def test_rules_match_in_linear_time_on_a_catastrophic_pattern():
    """``^(a+)+$`` on a long name that almost matches: Python's ``re`` backtracks for ages,
    RE2 answers in one pass (no time assertion; it would not return before the timeout)."""
    rules = default_rules().extend(gpu=[Rule(r"^(a+)+$", "communication")])
    name = "a" * 50_000 + "b"
    assert rules.gpu_class(name, "kernel") == "compute"
    assert rules.gpu_class("a" * 50_000, "kernel") == "communication"


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("fbgemm::quantize_kernel", None),
        ("FBGEMM_pack", None),
        ("gemm_kernel", "gemm"),
        ("xgemm", "gemm"),
        ("sgemm_fb", "gemm"),
        ("fbgemm_then_gemm_kernel", "gemm"),
        ("batched_gemv", "gemm"),
    ],
)
def test_the_generic_gemm_rule_leaves_fbgemm_out_without_lookbehind(name, family):
    assert default_rules().gemm_family(name) == family
