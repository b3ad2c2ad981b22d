"""Perf model formulas, the documented differences from TraceLens, devices, busy time, links."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.trace import devices
from aorta.trace.perf import coverage
from aorta.trace.perf.calls import union
from aorta.trace.perf.op_model import op_model
from aorta.trace.testing import synthetic_trace

BF16, F32 = "c10::BFloat16", "float"


def test_sdpa_bytes_use_the_real_element_size():
    """TraceLens assumes 2 bytes per element: for float32 the bytes double, FLOPs stay."""
    dims = [[4, 12, 197, 64]] * 3 + [[]] * 4
    concrete = ["", "", "", "0.", "False", "False", ""]
    bf = op_model("aten::_scaled_dot_product_flash_attention", dims, [BF16] * 3, concrete)
    fp = op_model("aten::_scaled_dot_product_flash_attention", dims, [F32] * 3, concrete)
    assert bf.flops == fp.flops == pytest.approx(0.476885e9, rel=1e-6)  # the reference check
    assert bf.bytes / 2**20 == pytest.approx(4.617, rel=1e-3)
    assert fp.bytes == 2 * bf.bytes


def test_sdpa_causal_halves_and_backward_is_two_and_a_half():
    dims, types = [[1, 8, 128, 64]] * 3, [BF16] * 3
    fwd = op_model(
        "aten::_scaled_dot_product_flash_attention", dims, types, ["", "", "", "0.", "False"]
    )
    causal = op_model(
        "aten::_scaled_dot_product_flash_attention", dims, types, ["", "", "", "0.", "True"]
    )
    bwd = op_model(
        "aten::_scaled_dot_product_flash_attention",
        dims,
        types,
        ["", "", "", "0.", "False"],
        backward=True,
    )
    assert causal.flops == fwd.flops / 2
    assert bwd.family == "SDPA_bwd" and bwd.flops == 2.5 * fwd.flops
    assert bwd.bytes == pytest.approx(fwd.bytes * 7 / 4)  # Q K V dO dQ dK dV


def _conv(bias: list[int]):
    dims = [[10, 64, 56, 56], [64, 64, 3, 3], bias, [], [], [], [], [], []]
    types = [
        BF16,
        BF16,
        BF16 if bias else "",
        "ScalarList",
        "ScalarList",
        "ScalarList",
        "Scalar",
        "ScalarList",
        "Scalar",
    ]
    concrete = ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    return op_model("aten::convolution", dims, types, concrete)


def test_conv_bias_is_counted():
    """TraceLens never counts a bias: + prod(out) FLOPs, + C_out elements."""
    plain, biased = _conv([]), _conv([64])
    assert plain.flops == 2312110080  # TraceLens's 2.31211 GFLOPs
    assert biased.flops - plain.flops == 10 * 64 * 56 * 56
    assert biased.bytes - plain.bytes == 64 * 2


def test_batch_norm_training_flag_is_parsed():
    """TraceLens reads 'False' as True (string truthiness): inference is not training here."""
    dims = [[8, 16, 32, 32], [16], [16], [16], [16], [], [], [], []]
    types = [F32] * 5 + ["Scalar"] * 4
    train = op_model(
        "aten::batch_norm", dims, types, ["", "", "", "", "", "True", "0.1", "1e-05", "True"]
    )
    infer = op_model(
        "aten::batch_norm", dims, types, ["", "", "", "", "", "False", "0.1", "1e-05", "True"]
    )
    n, c = 8 * 16 * 32 * 32, 16
    assert train.flops - infer.flops == 3 * n
    assert train.bytes - infer.bytes == 2 * c * 4


def test_layer_norm_inference_writes_no_statistics():
    dims = [[4, 197, 768], [], [768], [768], [], []]
    types = [BF16, "ScalarList", BF16, BF16, "Scalar", "Scalar"]
    concrete = ["", "[768]", "", "", "1e-05", "True"]
    train = op_model("aten::layer_norm", dims, types, concrete, training=True)
    infer = op_model("aten::layer_norm", dims, types, concrete, training=False)
    assert (train.flops, train.bytes) == (3030528, 2429952)  # the reference check
    assert infer.flops == train.flops and train.bytes - infer.bytes == 2 * 768 * 2


def test_reduction_writes_its_output():
    dims, types = [[10, 512, 7, 7], [], [], []], [BF16, "ScalarList", "Scalar", ""]
    keep = op_model("aten::mean", dims, types, ["", "[-1, -2]", "True", ""])
    whole = op_model("aten::sum", [[10, 1000]], [BF16], [""])
    assert keep.bytes == 250880 * 2 + 5120 * 2  # TraceLens: 250880·2 + 1·2
    assert whole.bytes == 10000 * 2 + 2


def test_unmodelled_or_unreadable_is_none():
    assert op_model("aten::nonzero", [[4]], [F32], [""]) is None
    assert op_model("aten::mm", [[4, 5], [6, 7]], [F32, F32], ["", ""]) is None  # K mismatch
    assert op_model("aten::mm", None, None, None) is None
    assert (
        op_model("aten::addmm", [[5], [4, 5], [5, 5]], [F32] * 3, [""] * 3, backward=True) is None
    )


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 1000), st.integers(0, 200)),
        min_size=1,
        max_size=40,
    )
)
def test_busy_time_is_the_union(intervals):
    owner = np.array([o for o, _, _ in intervals])
    start = np.array([s for _, s, _ in intervals], dtype=np.int64)
    end = start + np.array([d for _, _, d in intervals], dtype=np.int64)
    got = union(owner, start, end, 4)
    for o in range(4):
        covered = set()
        for (oo, s, _), e in zip(intervals, end, strict=True):
            if oo == o:
                covered.update(range(s, int(e)))
        assert got[o] == len(covered)


def _trace_with_backward():
    shape = {
        "Input Dims": [[8, 64], [], [], []],
        "Input type": [F32, "ScalarList", "Scalar", ""],
        "Concrete Inputs": ["", "[1]", "False", ""],
    }
    return synthetic_trace(
        [
            ("cpu_op", "aten::mean", 0, 10, {**shape, "Sequence number": 7}),
            ("kernel", "reduce_kernel", 12, 5, {"launch_ts": 2}),
            (
                "cpu_op",
                "autograd::engine::evaluate_function: MeanBackward1",
                100,
                20,
                {"Sequence number": 7, "tid": 200},
            ),
            (
                "cpu_op",
                "aten::div",
                101,
                10,
                {"tid": 200, "Input Dims": [[8, 64], []], "Input type": [F32, "Scalar"]},
            ),
            ("kernel", "div_kernel", 112, 4, {"launch_ts": 102, "launch_tid": 200}),
            ("kernel", "div_kernel2", 114, 4, {"launch_ts": 103, "launch_tid": 200}),
        ]
    )


def test_backward_rows_come_from_the_linked_forward_op():
    trace = _trace_with_backward()
    # the runtime calls of the backward kernels run on the backward thread
    ops = trace.perf_ops(device=False)
    bwd = ops[ops["family"] == "Reduce_bwd"].iloc[0]
    fwd = ops[ops["family"] == "Reduce_fwd"].iloc[0]
    assert bwd["op"] == "aten::mean" and bwd["flops"] == fwd["flops"] == 512
    assert bwd["bytes"] == 512 * 4 + 8 * 4
    assert fwd["kernel_us"] == 5.0
    assert bwd["kernel_us"] == 6.0  # the union of [112, 116) and [114, 118)


def test_summary_counts_each_kernel_once_under_the_outermost_model():
    trace = _trace_with_backward()
    summary = trace.perf_summary(device=False)
    assert summary["kernel_us"].sum() == pytest.approx(
        sum((trace.gpu_ops.end - trace.gpu_ops.ts) / 1e3)
    )
    assert summary.attrs["coverage"] == 1.0
    assert coverage(pd.DataFrame({"kernel_us": [], "has_model": [], "family": []})) != coverage(
        summary
    )


def test_devices_table_has_sources_and_all_devices():
    names = devices.device_names()
    for wanted in ("H100", "H200", "B200", "A100", "MI300X", "MI325X", "MI355X", "MI250X"):
        assert wanted in names
        entry = devices.get_device(wanted)
        assert entry["mem_bw_gbps"] > 0 and entry["sources"]
        assert all(s.startswith(("NVIDIA", "AMD", "Same", "An ", "Each")) for s in entry["sources"])
        assert {"matrix_bf16", "matrix_fp16", "vector_fp32"} <= set(entry["max_achievable_tflops"])
    assert devices.get_device("NVIDIA A100-SXM4-80GB")["name"] == "A100"
    assert devices.get_device("AMD Instinct MI250X / MI250")["name"] == "MI250X"
    with pytest.raises(ValueError, match="unknown device 'TPUv5'"):
        devices.get_device("TPUv5")


def test_an_entry_edited_by_its_caller_leaves_the_table_alone():
    # The peaks were the cached table's own dict: one caller's edit was every later caller's.
    entry = devices.get_device("MI300X")
    entry["max_achievable_tflops"]["matrix_bf16"] = 1.0
    assert devices.get_device("MI300X")["max_achievable_tflops"]["matrix_bf16"] == 1307.4


def test_device_from_trace_name_and_arch_file(tmp_path):
    op = (
        "cpu_op",
        "aten::mm",
        0,
        10,
        {"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": [BF16, BF16]},
    )
    kernel = ("kernel", "gemm", 12, 100, {"launch_ts": 2})
    props = {"deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X VF"}]}
    trace = synthetic_trace([op, kernel], header=props)
    assert trace.perf_ops().attrs["device"] == "MI300X"
    assert "roofline_us" not in synthetic_trace([op, kernel]).perf_ops().columns
    arch = {"name": "MI300X", "mem_bw_gbps": 5300, "max_achievable_tflops": {"matrix_bf16": 708}}
    row = trace.perf_ops(device=arch).iloc[0]
    assert row["roofline_us"] == pytest.approx(2 * 1024**3 / 708e6)
    assert row["bound"] == "compute"
    assert row["pct_roofline"] == pytest.approx(row["roofline_us"] / 100 * 100)
    with pytest.raises(ValueError, match="mem_bw_gbps"):
        trace.perf_ops(device={"max_achievable_tflops": {}})
    assert json.dumps(devices.get_device("H100"))  # plain data


def test_rank_metrics_carry_perf_coverage_and_family_metrics():
    """What load_run(traces=True) keeps per trial and rank (dims cell × trial × rank)."""
    from aorta.matrix.select import is_trace_variable
    from aorta.matrix.trace_metrics import _variable_attrs
    from aorta.trace.metrics import rank_metrics
    from tests.trace_helpers import shipped

    row = rank_metrics(shipped("mi300_rccl_resnet_rank0.json.gz")).loc[0]
    assert row["perf_coverage"] == pytest.approx(99.5, abs=0.05)
    assert 0 < row["pct_roofline_CONV_fwd"] < 100 and row["tflops_CONV_fwd"] > 10
    assert is_trace_variable("pct_roofline_SDPA_fwd") and is_trace_variable("tflops_GEMM")
    assert _variable_attrs("pct_roofline_SDPA_fwd")["units"] == "%"
    assert _variable_attrs("tflops_GEMM")["rank_reduction"] == "min"
