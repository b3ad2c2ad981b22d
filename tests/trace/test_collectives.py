"""Collective sizes and bandwidths (nccl-tests factors), the ROCm correlation join, cross-rank skew."""

from __future__ import annotations

import pytest

from aorta.trace import Trace
from aorta.trace.collectives import bus_factor, canonical_collective, clock_offsets, dtype_size
from aorta.trace.testing import synthetic_trace
from tests.trace_helpers import shipped

COMM = {
    "Collective name": "allreduce",
    "In msg nelems": 1_000_000,
    "Out msg nelems": 1_000_000,
    "dtype": "BFloat16",
    "Group size": 8,
    "Process Group Name": "0",
}


@pytest.mark.parametrize(
    ("collective", "n", "factor"),
    [
        ("all_reduce", 8, 1.75),
        ("all_reduce", 2, 1.0),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 4, 0.75),
        ("all_to_all", 8, 0.875),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("send", 2, 1.0),
    ],
)
def test_nccl_tests_bus_factors(collective, n, factor):
    assert bus_factor(collective, n) == factor


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("allreduce", "all_reduce"),
        ("nccl:all_reduce", "all_reduce"),
        ("_allgather_base", "all_gather"),
        ("allgather_into_tensor_coalesced", "all_gather"),
        ("_reduce_scatter_base", "reduce_scatter"),
        ("alltoall_base", "all_to_all"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "send_recv"),
        ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce_scatter"),
        ("broadcast", "broadcast"),
        ("ncclDevKernel_Generic", "unknown"),
    ],
)
def test_canonical_names(name, canonical):
    assert canonical_collective(name) == canonical


def test_dtype_sizes():
    assert [
        dtype_size(d)
        for d in ("Float", "BFloat16", "c10::Half", "Long", "unsigned char", "Float8_e5m2")
    ] == [4, 2, 2, 8, 1, 1]


def test_bandwidth_of_an_allreduce_on_the_kernel_args():
    row = (
        synthetic_trace([("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 0, 1000, COMM)])
        .collectives()
        .iloc[0]
    )
    assert (row["collective"], row["bytes"], row["source"], row["pg"]) == (
        "all_reduce",
        2_000_000,
        "kernel",
        "0",
    )
    assert row["algbw"] == pytest.approx(2.0) and row["busbw"] == pytest.approx(
        3.5
    )  # 2 MB / 1 ms; × 2·7/8


def test_rocm_style_args_come_through_the_correlation_join():
    # The kernel has no args of its own: hipExtLaunchKernel (External id 7) → record_param_comms (7).
    trace = synthetic_trace(
        [
            (
                "cpu_op",
                "record_param_comms",
                0,
                20,
                {
                    "External id": 7,
                    **COMM,
                    "Collective name": "_allgather_base",
                    "In msg nelems": 125,
                    "Out msg nelems": 1000,
                    "dtype": "Float",
                },
            ),
            (
                "kernel",
                "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
                30,
                2,
                {"External id": 7, "launch_ts": 5},
            ),
        ]
    )
    row = trace.collectives().iloc[0]
    assert (row["collective"], row["bytes"], row["source"]) == ("all_gather", 4000, "cpu_op")
    assert row["busbw"] == pytest.approx(4000 / 2e-6 / 1e9 * 7 / 8)


def test_unknown_sizes_stay_nan_and_group_size_falls_back_to_the_world():
    calls = shipped("a100_nccl_sampled_rank-0.json.gz").collectives()
    assert (
        len(calls) == 10
        and set(calls["collective"]) == {"send_recv"}
        and set(calls["source"]) == {"name"}
    )
    assert calls["bytes"].isna().all() and (calls["group_size"] == 128).all()


def test_real_rccl_trace():
    calls = shipped("mi300_rccl_resnet_rank0.json.gz").collectives()
    known = calls[calls["source"] != "name"]
    assert len(calls) == 17 and len(known) == 12
    assert known.groupby("collective")["bytes"].max().to_dict() == {
        "all_reduce": 17632384.0,
        "broadcast": 19200.0,
    }
    assert (known["seq"].tolist()) == list(range(12))


def _rank(rank, start, dur, *, seq_args=None, base=None):
    header = {"distributedInfo": {"rank": rank, "world_size": 2}}
    if base is not None:
        header["baseTimeNanoseconds"] = base
    ops = [
        ("kernel", "ncclKernel_AllReduce", s, d, seq_args or {})
        for s, d in zip(start, dur, strict=True)
    ]
    return synthetic_trace(ops, header=header, device=rank)


def test_skew_and_stragglers_across_ranks():
    trace = Trace.concat(
        [
            _rank(0, [0, 200, 400], [100, 100, 100]),
            _rank(1, [30, 210, 390], [70, 90, 110]),
            _rank(2, [5, 250, 400], [95, 50, 100]),
        ]
    )
    skew = trace.collective_skew()
    first = skew[skew["seq"] == 0].set_index("rank")
    assert first["lateness"].to_dict() == {0: 0.0, 1: 30.0, 2: 5.0}
    assert first["wait"].to_dict() == {0: 30.0, 1: 0.0, 2: 25.0}
    assert first["last"].to_dict() == {0: False, 1: True, 2: False}
    assert (first["start_skew"] == 30.0).all() and (first["ranks"] == 3).all()
    table = trace.stragglers()
    assert table["rank"].tolist() == [2, 1, 0]  # lateness 5+50+10=65, 30+10+0=40, 0
    assert table.set_index("rank")["times_last"].to_dict() == {2: 2, 1: 1, 0: 1}


def test_matching_uses_the_recorded_sequence_when_there_is_one():
    def call(ts, seq):
        return (
            "kernel",
            "ncclKernel_AllReduce",
            ts,
            50,
            {"Collective name": "allreduce", "Process Group Name": "0", "Seq": seq},
        )

    a = synthetic_trace([call(0, 4), call(100, 5)], header={"distributedInfo": {"rank": 0}})
    b = synthetic_trace(
        [call(130, 5)], header={"distributedInfo": {"rank": 1}}
    )  # rank 1 missed seq 4
    skew = Trace.concat([a, b]).collective_skew()
    assert skew["seq"].unique().tolist() == [5]
    assert skew.set_index("rank")["lateness"].to_dict() == {0: 0.0, 1: 30.0}


def test_clock_alignment_on_collective_ends():
    a, b = _rank(0, [0, 200], [100, 100]), _rank(1, [1030, 1210], [70, 90])
    trace = Trace.concat([a, b])
    assert clock_offsets(trace) == {0: 0, 1: -1_000_000}
    aligned = trace.align(method="collective_end")
    ends = aligned.collectives().groupby("rank")["end"].apply(list).to_dict()
    assert ends[0] == ends[1]
    assert aligned.info(1).offset_ns == -1_000_000
    based = Trace.concat([_rank(0, [0], [1], base=10_000), _rank(1, [0], [1], base=15_000)])
    assert clock_offsets(based, method="base_time") == {0: 0, 1: 5_000}


def test_real_two_rank_pair():
    trace = shipped("a100_nccl_sampled_rank-0.json.gz", "a100_nccl_sampled_rank-1.json.gz")
    assert trace.ranks == [0, 1]
    table = trace.stragglers()
    assert table["rank"].tolist() == [1, 0] and table["times_last"].tolist() == [8, 2]


def test_single_rank_has_no_skew():
    skew = shipped("mi300_rccl_resnet_rank0.json.gz").collective_skew()
    assert skew.empty and "two ranks" in skew.attrs["note"]


def test_selecting_a_rank_keeps_its_collective_arguments():
    both = Trace.concat([_rank(0, [0], [10], seq_args=COMM), _rank(1, [5], [5], seq_args=COMM)])
    one = both.select(ranks=[1])
    assert one.ranks == [1] and len(one.events) == len(both.events) // 2
    row = one.collectives().iloc[0]
    assert (row["rank"], row["bytes"], row["source"]) == (1, 2_000_000, "kernel")
    with pytest.raises(ValueError, match="no rank"):
        both.select(ranks=[7])
