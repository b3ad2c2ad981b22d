"""aorta.plot.roofline on a real trace: a Figure, ax= honoured, the device's ceilings."""

from __future__ import annotations

import json

import pandas as pd
from matplotlib.figure import Figure

import aorta.plot as aplot
from tests.trace_helpers import DATA, shipped


def test_roofline_of_a_real_trace_with_its_device():
    ops = shipped("mi300_bert_small.json.gz").perf_ops()
    fig = aplot.roofline(ops)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_title() == "Roofline — MI300X"
    # one scatter per family with GPU time, the HBM roof and one roof per precision used
    plotted = ops[(ops["tflops"] > 0) & (ops["intensity"] > 0)]
    assert len(ax.collections) == plotted["family"].nunique()
    assert len(ax.lines) == 1 + len({s for s in plotted["spec"] if s})
    labels = {t.get_text() for t in ax.texts}
    assert "HBM 5.3 TB/s" in labels and "matrix_bf16 1307.4" in labels


def test_roofline_draws_into_the_given_axes_with_an_arch_file():
    arch = json.loads((DATA / "tracelens_golden" / "perf" / "roofline" / "MI300X.json").read_text())
    host = Figure()
    ax = host.add_subplot()
    ops = shipped("mi300_bert_small.json.gz").perf_ops(device=arch)
    assert aplot.roofline(ops, device=arch, ax=ax) is host
    assert "matrix_bf16 708" in {t.get_text() for t in ax.texts}


def test_roofline_without_data_says_so():
    fig = aplot.roofline(
        pd.DataFrame({"intensity": [], "tflops": [], "kernel_us": [], "family": []})
    )
    assert fig.axes[0].texts[0].get_text() == "no modelled ops with GPU time"
