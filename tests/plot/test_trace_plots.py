"""Trace figures: each returns a Figure, draws into a given axes, copes with empty tables."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from aorta.plot import trace as tplot
from tests.trace_helpers import shipped


@pytest.fixture(scope="module")
def pair():
    return shipped("a100_nccl_sampled_rank-0.json.gz", "a100_nccl_sampled_rank-1.json.gz")


@pytest.mark.slow
def test_every_plot_returns_a_figure_and_honours_ax(pair):
    rccl = shipped("mi300_rccl_resnet_rank0.json.gz")
    start = int(rccl.gpu_ops.ts.min())
    figures = [
        tplot.gpu_breakdown(pair.gpu_timeline(by="device")),
        tplot.timeline(rccl, start_ns=start, end_ns=start + 5_000_000),
        tplot.gemm_tflops(pair.gemms()),
        tplot.collective_bandwidth(rccl.collectives()),
        tplot.straggler_heatmap(pair.collective_skew()),
    ]
    assert all(isinstance(f, Figure) for f in figures)
    host = Figure()
    ax = host.add_subplot()
    assert tplot.gemm_tflops(pair.gemms(), ax=ax) is host


def test_empty_tables_draw_a_message():
    cpu = shipped("cpu_only_gloo.pt.trace.json.gz")
    for fig in (
        tplot.gpu_breakdown(cpu.gpu_timeline()),
        tplot.timeline(cpu),
        tplot.gemm_tflops(cpu.gemms()),
        tplot.collective_bandwidth(cpu.collectives(device="gpu")),
        tplot.straggler_heatmap(cpu.collective_skew()),  # one rank: nothing to match
    ):
        assert fig.axes[0].texts, "an empty plot should say why"
