"""GEMM shapes, FLOPs, leaf detection (no double counting) and TFLOP/s."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aorta.trace.gemm import gemm_shape
from aorta.trace.links import segment_argmax
from aorta.trace.tables import launched_gpu_time
from aorta.trace.testing import synthetic_trace
from tests.trace_helpers import shipped


@pytest.mark.parametrize(
    ("op", "dims", "shape"),
    [
        ("aten::mm", [[128, 64], [64, 32]], (1, 128, 32, 64)),
        ("aten::addmm", [[32], [128, 64], [64, 32], [], []], (1, 128, 32, 64)),
        ("aten::bmm", [[4, 128, 64], [4, 64, 32]], (4, 128, 32, 64)),
        ("aten::baddbmm", [[4, 128, 32], [4, 128, 64], [4, 64, 32], [], []], (4, 128, 32, 64)),
        ("aten::_scaled_mm", [[128, 64], [64, 32], [], [], [], []], (1, 128, 32, 64)),
        ("aten::linear", [[2, 8, 64], [32, 64], [32]], (1, 16, 32, 64)),
        ("aten::matmul", [[64], [64, 32]], (1, 1, 32, 64)),
        ("aten::matmul", [[3, 128, 64], [64]], (3, 128, 1, 64)),
        ("aten::matmul", [[64], [64]], (1, 1, 1, 64)),
    ],
)
def test_shapes(op, dims, shape):
    assert gemm_shape(op, dims) == shape


@pytest.mark.parametrize(
    ("op", "dims"),
    [
        ("aten::mm", [[2, 3], [4, 5]]),
        ("aten::mm", None),
        ("aten::relu", [[2, 2]]),
        ("aten::linear", [[2, 3], [4, 5]]),
    ],
)
def test_unknown_shapes_are_nan(op, dims):
    assert all(math.isnan(v) for v in gemm_shape(op, dims))


def _mm(name, ts, dur, dims, **extra):
    return (
        "cpu_op",
        name,
        ts,
        dur,
        {"Input Dims": dims, "Input type": ["c10::BFloat16", "c10::BFloat16"], **extra},
    )


def test_nested_linear_matmul_mm_counts_once_and_leaf_linear_counts():
    trace = synthetic_trace(
        [
            _mm("aten::linear", 0, 50, [[256, 512], [1024, 512], []]),
            _mm("aten::matmul", 1, 40, [[256, 512], [512, 1024]]),
            _mm("aten::mm", 2, 30, [[256, 512], [512, 1024]]),
            ("kernel", "nvjet_tst_128x64", 60, 10, {"launch_ts": 5}),
            _mm("aten::linear", 100, 20, [[64, 512], [128, 512], []]),  # a leaf: launches directly
            ("kernel", "Cijk_Alik_Bljk_SB_MT64", 130, 2, {"launch_ts": 105}),
        ]
    )
    calls = trace.gemms(by="call")
    assert calls["op"].tolist() == ["aten::mm", "aten::linear"]
    mm, linear = calls.iloc[0], calls.iloc[1]
    assert mm["flops"] == 2 * 256 * 1024 * 512 and mm["gpu_time"] == 10.0
    assert mm["tflops"] == pytest.approx(2 * 256 * 1024 * 512 / 10e-6 / 1e12)
    assert (mm["family"], linear["family"], mm["dtype"]) == ("nvjet", "tensile", "BFloat16")
    assert linear["flops"] == 2 * 64 * 128 * 512


def test_shape_table_aggregates_calls():
    trace = shipped("mi300_bert_small.json.gz")
    table = trace.gemms()
    assert table["count"].sum() == 26  # the 26 addmm under 26 aten::linear, never both
    top = table.iloc[0]
    assert (top["op"], top["M"], top["N"], top["K"], top["family"]) == (
        "aten::addmm",
        141,
        512,
        512,
        "hipblaslt",
    )
    assert top["tflops"] == pytest.approx(
        top["flops"] * top["count"] / (top["gpu_time"] * 1e-6) / 1e12
    )


def test_ops_without_shapes_have_nan_flops_but_gpu_time():
    table = shipped("mi350x_rocm7_single.pt.trace.json").gemms()
    assert (
        table["flops"].isna().all()
        and table["tflops"].isna().all()
        and (table["gpu_time"] > 0).all()
    )


def test_same_model_on_both_stacks_finds_the_same_gemms():
    nv, amd = (
        shipped("h100_bert_small.json.gz").gemms(),
        shipped("mi300_bert_small.json.gz").gemms(),
    )
    key = ["op", "M", "N", "K", "count"]
    assert sorted(map(tuple, nv[key].to_numpy().tolist())) == sorted(
        map(tuple, amd[key].to_numpy().tolist())
    )


def test_gpu_work_of_nested_ops_and_their_longest_kernel():
    trace = synthetic_trace(
        [
            ("cpu_op", "outer", 0, 100),
            ("cpu_op", "inner", 10, 20),
            ("kernel", "short", 200, 5, {"launch_ts": 15}),
            ("kernel", "long", 210, 50, {"launch_ts": 50}),
            ("cpu_op", "idle", 300, 5),
        ]
    )
    ops = trace.find(cats=["cpu_op"])
    gpu_ns, count, longest = launched_gpu_time(trace, ops)
    names = [trace.categories("name")[trace.column("name")[r]] if r >= 0 else None for r in longest]
    assert gpu_ns.tolist() == [55_000, 5_000, 0] and count.tolist() == [2, 1, 0]
    assert names == ["long", "short", None]
    values = np.array([3, 9, 1, 7])
    got = segment_argmax(
        values, np.array([0, 2, 1, 3]), np.array([4, 4, 1, 4]), np.array([10, 11, 12, 13])
    )
    assert got.tolist() == [11, 13, -1, 13]
