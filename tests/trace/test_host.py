"""The host-side breakdown and host collectives (CPU-only traces), on hand-built traces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.trace import Rule, Trace, default_rules
from aorta.trace.metrics import rank_metrics
from aorta.trace.testing import synthetic_trace
from tests.trace_helpers import shipped

MAIN, GLOO = {"tid": 100}, {"tid": 7}


def _ms(frame, rank=None):
    if rank is not None:
        frame = frame[frame["rank"] == rank]
    return frame.set_index("type")["time ms"].mul(1000).round(6).to_dict()  # µs


def gloo_step(offset=0, rank=0, world=2):
    """A main thread that computes, blocks inside an autograd wrapper, then computes again,
    beside a gloo thread running one all_reduce (times in µs)."""
    o = offset
    return synthetic_trace(
        [
            ("cpu_op", "aten::mm", o + 0, 10, MAIN),  # compute 0-10
            ("cpu_op", "autograd::engine::evaluate_function: AddBackward0", o + 10, 30, MAIN),
            ("cpu_op", "aten::add", o + 12, 6, MAIN),  # compute 12-18 (inside the wrapper)
            ("cpu_op", "c10d::allreduce_", o + 14, 1, MAIN),  # the call: not compute
            ("user_annotation", "gloo:all_reduce", o + 15, 20, GLOO | {"Input Dims": [[1000]], "Input type": ["float"]}),
            ("cpu_op", "aten::copy_", o + 20, 2, GLOO),  # gloo's own work: communication thread
            ("cpu_op", "aten::mul", o + 40, 10, MAIN),  # compute 40-50
        ],
        header={"distributedInfo": {"rank": rank, "world_size": world}},
    )  # fmt: skip


def test_hand_built_host_breakdown_has_known_answers():
    got = _ms(gloo_step().host_timeline())
    assert got == {
        "computation_time": 26.0,  # 0-10, 12-18, 40-50: the wrapper's wait is not compute
        "exposed_comm_time": 17.0,  # gloo 15-35 less the compute up to 18
        "exposed_memcpy_time": 0.0,
        "busy_time": 43.0,
        "idle_time": 7.0,  # 10-12 and 35-40
        "total_time": 50.0,
        "total_comm_time": 20.0,
        "total_memcpy_time": 0.0,
    }


def test_timeline_picks_host_for_ranks_without_gpu_ops():
    gpu = synthetic_trace(
        [("kernel", "gemm", 0, 10), ("kernel", "ncclKernel_AllReduce", 5, 10)],
        header={"distributedInfo": {"rank": 0}},
    )
    both = Trace.concat([gpu, gloo_step(rank=1)])
    table = both.timeline()
    assert table.groupby("rank")["source"].first().to_dict() == {0: "gpu", 1: "host"}
    assert _ms(table, 1)["exposed_comm_time"] == 17.0
    assert _ms(table, 0) == _ms(gpu.gpu_timeline())
    assert set(both.timeline(device="host")["source"]) == {"host"}
    assert set(both.timeline(device="gpu")["rank"]) == {0}  # rank 1 has no GPU ops


def test_custom_host_rules_change_what_counts():
    trace = synthetic_trace(
        [
            ("cpu_op", "aten::mm", 0, 10, MAIN),
            ("user_annotation", "mycomm:allreduce", 5, 20, GLOO),
        ]
    )
    assert _ms(trace.host_timeline())["total_comm_time"] == 0.0  # unknown: not communication
    rules = default_rules().extend(host=[Rule(r"^mycomm:", "communication")])
    assert _ms(trace.with_rules(rules).host_timeline())["exposed_comm_time"] == 15.0


def test_host_collectives_sizes_and_bandwidths():
    trace = synthetic_trace(
        [
            ("user_annotation", "gloo:all_gather", 0, 1000, {"Input Dims": [[250_000]], "Input type": ["float"]}),
            ("user_annotation", "gloo:all_reduce", 2000, 1000, {"Input Dims": [[250_000]], "Input type": ["c10::BFloat16"]}),
            ("user_annotation", "gloo:broadcast", 4000, 500, {"Input Dims": [[7]], "Input type": ["int"]}),
        ],
        header={"distributedInfo": {"rank": 0, "world_size": 4}},
    )  # fmt: skip
    calls = trace.collectives()
    assert calls[["collective", "in_nelems", "out_nelems", "bytes"]].values.tolist() == [
        ["all_gather", 250_000, 1_000_000, 4_000_000],  # nccl-tests' size: the gathered buffer
        ["all_reduce", 250_000, 250_000, 500_000],
        ["broadcast", 7, 7, 28],
    ]
    assert calls["busbw"].round(9).tolist() == [
        3.0,
        0.75,
        5.6e-05,
    ]  # 4 GB/s × 3/4; 0.5 × 6/4; 28 B / 0.5 ms
    assert set(calls["source"]) == {"host"} and calls["group_size"].tolist() == [4, 4, 4]
    assert trace.collectives(device="gpu").empty


def test_host_collectives_across_ranks_find_the_straggler():
    late = gloo_step(offset=30, rank=1)  # rank 1 reaches the all_reduce 30 µs later
    skew = Trace.concat([gloo_step(rank=0), late]).collective_skew()
    assert skew[["rank", "wait", "last"]].values.tolist() == [[0, 30.0, False], [1, 0.0, True]]
    metrics = rank_metrics(Trace.concat([gloo_step(rank=0), late]))
    assert metrics["straggler_wait_ms"].tolist() == [0.03, 0.0]


def test_rank_metrics_of_a_gloo_step():
    m = rank_metrics(gloo_step()).loc[0]
    assert m["source"] == "host"
    assert (m["computation_ms"], m["exposed_comm_ms"], m["idle_ms"]) == (0.026, 0.017, 0.007)
    assert m["busbw_all_reduce_gbps"] == pytest.approx(4000 * 2 * 1 / 2 / 20e-6 / 1e9)
    assert m["profiled_steps"] == 0 and m["gemm_tflops"] != m["gemm_tflops"]  # no shapes: NaN


def test_real_cpu_only_trace_adds_up():
    trace = shipped("cpu_only_gloo.pt.trace.json.gz")
    parts = trace.host_timeline().set_index("type")["time ms"]
    assert parts["total_comm_time"] > 0 and parts["computation_time"] > 0
    total = parts[["computation_time", "exposed_comm_time", "exposed_memcpy_time", "idle_time"]]
    assert total.sum() == pytest.approx(parts["total_time"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["aten::mm", "gloo:all_reduce", "c10d::allreduce_", "Wrapper"]),
            st.integers(0, 500),
            st.integers(0, 200),
            st.sampled_from([100, 101, 7]),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_host_parts_add_up_to_the_total(ops):
    trace = synthetic_trace(
        [
            (
                "user_annotation" if name.startswith("gloo") else "cpu_op",
                name,
                ts,
                dur,
                {"tid": tid},
            )
            for name, ts, dur, tid in ops
        ]
    )
    table = trace.host_timeline()
    if table.empty:
        return
    p = table.set_index("type")["time ms"]
    assert p["computation_time"] + p["exposed_comm_time"] + p["idle_time"] == pytest.approx(
        p["total_time"]
    )
    assert p["busy_time"] <= p["total_time"] + 1e-12
