"""perf_ops rows as TraceLens forms them (strides and types split rows), every GPU activity an
op launched in its kernel time, every GPU op once in perf_summary, and a roofline figure or a
reason on every modelled row."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aorta.trace
from aorta.cli import main
from aorta.errors import ExitCode
from aorta.trace.testing import synthetic_trace
from tests.trace_helpers import DATA, GOLDEN, shipped

BERT = "mi300_bert_small.json.gz"
ADD_DIMS = [[1, 141, 512], [1, 141, 512], []]


def _events(name: str) -> list[dict]:
    with gzip.open(DATA / name) as f:
        return json.load(f)["traceEvents"]


def test_two_stride_patterns_are_two_rows_that_add_up(tmp_path):
    """A real-derived trace: the MI300X BERT trace with four of its nine ``aten::add`` calls on
    (1,141,512) × (1,141,512) given a transposed first input (strides (72192, 1, 141) instead
    of (72192, 512, 1)). TraceLens keeps one row per stride pattern; so does ``by="args"``,
    and the two rows' counts and kernel times add up to the one ``by="shape"`` row."""
    with gzip.open(DATA / BERT) as f:
        doc = json.load(f)
    adds = [
        e
        for e in doc["traceEvents"]
        if e.get("cat") == "cpu_op"
        and e["name"] == "aten::add"
        and e["args"].get("Input Dims") == ADD_DIMS
    ]
    assert len(adds) == 9 and all(e["args"]["Input Strides"][0] == [72192, 512, 1] for e in adds)
    for e in adds[:4]:
        e["args"]["Input Strides"][0] = [72192, 1, 141]
    path = tmp_path / "bert_two_layouts.json"
    path.write_text(json.dumps(doc))
    trace = aorta.trace.load(path, cache="off")
    shape = "shape_in1=(1,141,512) shape_in2=(1,141,512)"
    by_args = trace.perf_ops(device=False)
    by_args = by_args[(by_args["op"] == "aten::add") & (by_args["shape"] == shape)]
    by_shape = trace.perf_ops(device=False, by="shape")
    by_shape = by_shape[(by_shape["op"] == "aten::add") & (by_shape["shape"] == shape)]
    assert sorted(by_args["strides"]) == [
        "(72192,1,141) (72192,512,1)",
        "(72192,512,1) (72192,512,1)",
    ]
    assert sorted(by_args["count"]) == [4, 5] and by_shape["count"].tolist() == [9]
    assert by_args["kernel_us"].sum() == pytest.approx(by_shape["kernel_us"].iloc[0])
    assert (by_args["flops"] == by_shape["flops"].iloc[0]).all()
    # the shipped trace itself: one layout, one row either way
    original = shipped(BERT).perf_ops(device=False)
    assert (original["op"] + original["shape"]).tolist().count("aten::add" + shape) == 1


def test_scalar_operand_type_splits_a_row():
    """``aten::add`` with a ``double`` and with a ``long int`` Python scalar: TraceLens's
    ``dtype_in1_in2_out`` differs, so two rows (``by="shape"`` keeps one)."""

    def add(ts: float, scalar: str) -> list:
        args = {"Input Dims": [[64], [], []], "Input type": ["float", scalar, "Scalar"]}
        args["Input Strides"] = [[1], [], []]
        return [
            ("cpu_op", "aten::add", ts, 10, args),
            ("kernel", "add", ts + 12, 3, {"launch_ts": ts + 2}),
        ]

    trace = synthetic_trace([*add(0, "double"), *add(100, "long int"), *add(200, "double")])
    rows = trace.perf_ops(device=False)
    assert sorted(zip(rows["dtypes"], rows["count"], strict=True)) == [
        ("float,double", 2),
        ("float,long int", 1),
    ]
    assert trace.perf_ops(device=False, by="shape")["count"].tolist() == [3]


def _launched_from_raw(events: list[dict], op_name: str, cats: set[str]) -> tuple[float, int]:
    """Σ over the calls of ``op_name`` of the union (µs) of the GPU events of ``cats`` whose
    runtime call (by correlation) ran on the call's thread during the call; and the calls."""
    runtime = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    gpu = [
        (runtime[e["args"]["correlation"]], e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") in cats and e["args"].get("correlation") in runtime
    ]
    total, calls = 0.0, 0
    for op in (e for e in events if e.get("cat") == "cpu_op" and e["name"] == op_name):
        calls += 1
        spans = sorted(
            (s, t)
            for call, s, t in gpu
            if (call["pid"], call["tid"]) == (op["pid"], op["tid"])
            and op["ts"] <= call["ts"] <= op["ts"] + op["dur"]
        )
        reach = -math.inf
        for s, t in spans:  # the union of the intervals
            total += max(0.0, t - max(s, reach))
            reach = max(reach, t)
    return total, calls


@pytest.mark.parametrize("op", ["aten::convolution", "aten::convolution_backward"])
def test_fills_count_in_the_op_that_launched_them(op):
    """The ResNet trace's convolutions launch ``Memset (Device)`` fills (ROCm's workspace
    clears) before their kernels: their kernel time is the union of every GPU op their subtree
    launched — kernels, copies and fills — found here from the raw events alone."""
    events = _events("mi300_rccl_resnet_rank0.json.gz")
    every, calls = _launched_from_raw(events, op, {"kernel", "gpu_memcpy", "gpu_memset"})
    kernels_only, _ = _launched_from_raw(events, op, {"kernel", "gpu_memcpy"})
    assert every - kernels_only > 50  # µs of fills (81 fills of ~2-6 µs between the two ops)
    ops = shipped("mi300_rccl_resnet_rank0.json.gz").perf_ops(device=False)
    mine = ops[ops["op"] == op]
    assert mine["count"].sum() == calls
    assert mine["kernel_us"].sum() == pytest.approx(every, abs=1e-3 * calls)


@st.composite
def _host_and_gpu_ops(draw: st.DrawFn) -> list[tuple]:
    """Host ops in sequence on one thread — modelled (``aten::add``, sometimes with a modelled
    child), unmodelled (``aten::nonzero``) or none — each launching 0-3 GPU ops of any kind on
    one of two streams, some without a runtime call, durations that may overlap."""
    ops: list[tuple] = []
    t = 0
    shape = {"Input Dims": [[4], [4], []], "Input type": ["float", "float", "Scalar"]}
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["modelled", "nested", "unmodelled", "none"]))
        span = 40
        if kind == "modelled":
            ops.append(("cpu_op", "aten::add", t, span, shape))
        elif kind == "nested":
            ops.append(("cpu_op", "aten::add", t, span, shape))
            ops.append(("cpu_op", "aten::mul", t + 5, 20, shape))
        elif kind == "unmodelled":
            ops.append(("cpu_op", "aten::nonzero", t, span))
        for k in range(draw(st.integers(0, 3))):
            cat = draw(st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset"]))
            args = {
                "launch_ts": t + 6 + 3 * k,
                "stream": draw(st.sampled_from([7, 9])),
                "linked": draw(st.booleans()) or k > 0,
            }
            start = t + 50 + draw(st.integers(0, 20))
            ops.append((cat, f"{cat}_{k}", start, draw(st.integers(1, 30)), args))
        t += 200
    return ops


@settings(max_examples=120, deadline=None)
@given(_host_and_gpu_ops())
def test_perf_summary_counts_every_gpu_op_exactly_once(ops):
    trace = synthetic_trace(ops)
    gpu = trace.gpu_ops
    linked_us = float(((gpu.end - gpu.ts)[gpu.linked]).sum()) / 1e3
    for by in ("args", "shape"):
        summary = trace.perf_summary(device=False, by=by)
        assert summary["kernel_us"].sum() == pytest.approx(linked_us, abs=1e-9)
    modelled = summary.loc[summary["has_model"], "kernel_us"].sum()
    # the GPU time launched inside a modelled op, from the events themselves
    spans = [(op[2], op[2] + op[3]) for op in ops if op[0] == "cpu_op" and op[1] != "aten::nonzero"]
    inside = sum(
        op[3]
        for op in ops
        if op[0] in ("kernel", "gpu_memcpy", "gpu_memset")
        and op[4]["linked"]
        and any(s <= op[4]["launch_ts"] <= e for s, e in spans)
    )
    assert modelled == pytest.approx(inside, abs=1e-9)


def test_every_modelled_row_has_a_roofline_figure_or_a_reason():
    """``mi300_bert_small`` against TraceLens's MI300X arch file: ``aten::all`` (bool) and
    ``aten::eq`` (int64) have no peak of their precision, but are memory-bound at any vector
    peak the device lists: the memory time is their roofline, and the note says so."""
    arch = json.loads((GOLDEN / "perf" / "roofline" / "MI300X.json").read_text())
    ops = shipped(BERT).perf_ops(device=arch)
    missing = ops[ops["pct_roofline"].isna()]
    assert (missing["roofline_note"] != "").all()
    ran = ops["kernel_us"] > 0  # aten::dropout in inference launches nothing
    assert ops.loc[ran, "pct_roofline"].notna().all()
    assert (ops.loc[~ran, "roofline_note"] == "no GPU work in the trace").all() and (~ran).any()
    reduce = ops[ops["family"] == "Reduce_fwd"].iloc[0]
    assert reduce["op"] == "aten::all" and reduce["bound"] == "memory"
    assert reduce["roofline_us"] == pytest.approx(reduce["bytes"] / (arch["mem_bw_gbps"] * 1e3))
    assert "no vector bool peak for MI300X: memory-bound" in reduce["roofline_note"]
    figured = ops[ops["roofline_note"] == ""]
    assert (figured["spec"] != "").all() and figured["roofline_us"].notna().all()


def test_roofline_note_without_gpu_work_or_peak():
    mm = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}
    trace = synthetic_trace([("cpu_op", "aten::mm", 0, 10, mm)])  # no kernel in the trace
    row = trace.perf_ops(device="MI300X").iloc[0]
    assert math.isnan(row["pct_roofline"]) and row["roofline_note"] == "no GPU work in the trace"
    compute_bound = {"mem_bw_gbps": 5300, "max_achievable_tflops": {"vector_fp32": 1e-9}}
    row = trace.perf_ops(device=compute_bound | {"name": "slow"}).iloc[0]
    assert math.isnan(row["roofline_us"])
    assert row["roofline_note"].startswith("no matrix_fp32 peak for slow")


def test_summarize_says_a_trace_has_no_shapes(capsys):
    path = DATA / "mi350x_rocm7_single.pt.trace.json"
    summary = shipped(path.name).perf_summary(device=False)
    assert math.isnan(summary.attrs["coverage"]) and not summary.attrs["shapes_recorded"]
    assert main(["trace", "summarize", str(path), "--cache", "off", "--top", "2"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "recorded without record_shapes: no perf model possible" in out
    assert "0.0%" not in out[out.index("== against_the_hardware") :]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset"]),
            st.integers(0, 60),  # start after the op began
            st.integers(1, 25),  # duration
            st.sampled_from([7, 9]),  # stream
        ),
        min_size=0,
        max_size=8,
    )
)
def test_kernel_time_is_the_union_of_every_gpu_op_launched(gpu_ops):
    """One modelled call launching kernels, copies and fills on two streams, overlapping or
    not: its kernel time is the length of the union of their intervals, whatever their order
    (the prefix-sum path for the ops that do not overlap, the merge for those that do)."""
    ops = [("cpu_op", "aten::relu", 0, 100, {"Input Dims": [[64]], "Input type": ["float"]})]
    for k, (cat, start, dur, stream) in enumerate(gpu_ops):
        ops.append((cat, f"{cat}_{k}", 200 + start, dur, {"launch_ts": 1 + k, "stream": stream}))
    row = synthetic_trace(ops).perf_ops(device=False).iloc[0]
    covered = set()
    for _, start, dur, _ in gpu_ops:
        covered.update(range(200 + start, 200 + start + dur))
    assert row["kernel_us"] == pytest.approx(len(covered))


def test_tracelens_rows_of_a_real_qwen_trace_are_aorta_rows():
    """TraceLens's own rows for its H100 Qwen1.5-0.5B trace (tests/data/tracelens/): aorta's
    model of each row's recorded arguments gives TraceLens's FLOPs and bytes, and the rows
    TraceLens keeps apart — the same ``mul`` on a permuted and a contiguous layout, 1,538 µs
    against 1,142 µs for 48 calls each — are apart here too (one row ``by="shape"``)."""
    from aorta.trace.perf.calls import strides_text
    from aorta.trace.perf.op_model import op_model

    rows = json.loads((DATA.parent / "tracelens" / "qwen_h100_binary_rows.json").read_text())
    keys = set()
    for row in rows["rows"]:
        m = op_model(row["name"], row["Input Dims"], row["Input type"], row["Concrete Inputs"])
        assert m is not None and m.family == "BinaryElementwise"
        assert m.flops == pytest.approx(row["gflops"] * 1e9)
        assert m.bytes == pytest.approx(row["mib"] * 2**20)
        keys.add((row["name"], m.shape, m.dtypes, strides_text(row["Input Strides"], m.strided)))
    assert len(keys) == len(rows["rows"])
    muls = [k for k in keys if k[0] == "aten::mul"]
    assert len(muls) == 2 and muls[0][:3] == muls[1][:3]  # only the strides tell them apart
