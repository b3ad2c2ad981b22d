"""perf_ops / perf_summary against TraceLens's own perf sheets (tests/data/traces/tracelens_golden/perf).

Where TraceLens is right, the numbers match (FLOPs and bytes within 1%, kernel time within 2%,
the same call counts); where it is wrong, the difference is exactly the one docs/traces.md
documents (``_tracelens_corrected`` applies it to TraceLens's row).
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import aorta.trace as at
from aorta.trace.perf_model import bpe

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
GOLDEN = DATA / "tracelens_golden" / "perf"
TRACES = [
    "mi300_bert_small",
    "h100_bert_small",
    "mi300_rccl_resnet_rank0",
    "mi300_normalization_layers",
]
SHEETS = [
    (name, path.name.split(".")[1])
    for name in TRACES
    for path in sorted(GOLDEN.glob(f"{name}.*.csv"))
    if "unified" not in path.name
]


@pytest.fixture(scope="module")
def traces() -> dict[str, at.Trace]:
    return {name: at.load(DATA / f"{name}.json.gz", cache="off") for name in TRACES}


def _tracelens_corrected(sheet: str, row: pd.Series, trace: at.Trace) -> tuple[float, float]:
    """TraceLens's (FLOPs, bytes) of a row with the documented corrections applied."""
    flops, moved = row["GFLOPS_first"] * 1e9, row["Data Moved (MB)_first"] * 2**20  # MiB
    input_dims = ast.literal_eval(row["Input Dims_first"])
    types = ast.literal_eval(row["Input type_first"])
    concrete = ast.literal_eval(row["Concrete Inputs_first"])
    if sheet.startswith("Reduce") and row["name"] not in ("aten::cumsum", "aten::cumprod"):
        # TraceLens writes 1 output element: the real output keeps the dims not reduced
        shape = list(input_dims[0])
        reduced = ast.literal_eval(concrete[1]) if len(concrete) > 1 and concrete[1] else None
        if reduced:
            axes = {d % len(shape) for d in reduced}
            out = math.prod(s for i, s in enumerate(shape) if i not in axes)
            moved += (out - 1) * bpe(types[0])
    if sheet == "Normalization" and row["name"] in ("aten::layer_norm", "aten::native_layer_norm"):
        training = (
            trace.column("seq")[trace.find(cats=["cpu_op"], names=[row["name"]])] >= 0
        ).any()
        if not training:  # TraceLens counts LayerNorm as training always
            moved -= 2 * row["param: num_channels"] * bpe(types[0])
    return flops, moved


@pytest.mark.parametrize(("name", "sheet"), SHEETS)
def test_sheet_matches_tracelens(traces, name, sheet):
    trace = traces[name]
    ours = trace.perf_ops(device=False)
    ours = ours[ours["family"] == sheet]
    golden = pd.read_csv(GOLDEN / f"{name}.{sheet}.csv")
    assert len(golden), "empty golden sheet"
    corrected = [_tracelens_corrected(sheet, row, trace) for _, row in golden.iterrows()]
    golden["flops"] = [f for f, _ in corrected]
    golden["bytes"] = [b for _, b in corrected]
    # TraceLens splits rows by strides and is_recompute: compare per (op, FLOPs, bytes)
    golden["key_f"], golden["key_b"] = golden["flops"].round(), golden["bytes"].round()
    theirs = golden.groupby(["name", "key_f", "key_b"]).agg(
        count=("name_count", "sum"), kernel=("Kernel Time (µs)_sum", "sum")
    )
    for (op, f, b), want in theirs.iterrows():
        same_op = ours[ours["op"] == op]
        assert len(same_op), f"{name} {sheet}: no row for {op}"
        # the nearest of our rows, which must be within 1% in FLOPs and bytes (it is exact)
        distance = abs(same_op["flops"] / max(f, 1) - 1) + abs(same_op["bytes"] / max(b, 1) - 1)
        mine = same_op[np.isclose(distance, distance.min())]
        assert mine["flops"].iloc[0] == pytest.approx(f, rel=0.01), (op, f, b)
        assert mine["bytes"].iloc[0] == pytest.approx(b, rel=0.01), (op, f, b)
        assert mine["count"].sum() == want["count"], (op, f, b)
        assert mine["kernel_us"].sum() == pytest.approx(want["kernel"], rel=0.02, abs=0.01), (
            op,
            f,
            b,
        )
    # and nothing of TraceLens's op names is left over on our side
    mine_keys = ours[ours["op"].isin(theirs.index.get_level_values(0))]
    assert mine_keys["count"].sum() == theirs["count"].sum()


def test_documented_differences_are_exact(traces):
    """Each documented difference, on a real row: the exact amount."""
    bert = traces["mi300_bert_small"].perf_ops(device=False)
    ln = bert[bert["op"] == "aten::layer_norm"].iloc[0]
    # (1,141,512) bf16, inference: TraceLens's 294,912 B less the 2·C·bpe of saved statistics
    assert ln["bytes"] == 294912 - 2 * 512 * 2
    assert ln["flops"] == 364032  # the statistics are computed either way
    resnet = traces["mi300_rccl_resnet_rank0"].perf_ops(device=False)
    mean = resnet[
        (resnet["op"] == "aten::mean")
        & (resnet["family"] == "Reduce_fwd")
        & (resnet["flops"] == 250880)
    ]
    assert mean["bytes"].tolist() == [250880 * 2 + 10 * 512 * 2]  # TraceLens: + 1·2
    bwd = resnet[(resnet["op"] == "aten::mean") & (resnet["family"] == "Reduce_bwd")]
    assert bwd["bytes"].tolist() == [250880 * 2 + 10 * 512 * 2] and bwd["count"].tolist() == [3]


def test_unified_summary_counts_every_kernel_once(traces):
    for name in TRACES:
        golden = pd.read_csv(GOLDEN / f"{name}.unified_perf_summary.csv")
        summary = traces[name].perf_summary(device=False)
        compute = summary[summary["family"] != "communication"]
        # TraceLens's summary leaves out NCCL/RCCL kernels and fills: the same total
        assert compute["kernel_us"].sum() == pytest.approx(
            golden["Kernel Time (µs)_sum"].sum(), rel=1e-4
        )
        # an op TraceLens models may sit inside one of our own families (relu_ over clamp_min_):
        # the time with a model only grows
        theirs = golden.loc[golden["has_perf_model"], "Kernel Time (µs)_sum"].sum()
        assert compute.loc[compute["has_model"], "kernel_us"].sum() >= theirs * (1 - 1e-4), name
        tl_coverage = (
            golden.loc[golden["has_perf_model"], "Kernel Time (µs)_sum"].sum()
            / golden["Kernel Time (µs)_sum"].sum()
        )
        assert summary.attrs["coverage"] >= max(tl_coverage, 0.95), name


def test_roofline_reproduces_tracelens_mi300x_sheets(traces):
    arch = json.loads((GOLDEN / "roofline" / "MI300X.json").read_text())
    trace = traces["mi300_bert_small"]
    ours = trace.perf_ops(device=arch)
    checked = 0
    for path in sorted((GOLDEN / "roofline").glob("mi300_bert_small.*.csv")):
        if "unified" in path.name:
            continue
        sheet = path.name.split(".")[1]
        for _, row in pd.read_csv(path).iterrows():
            flops, moved = _tracelens_corrected(sheet, row, trace)
            mine = ours[
                (ours["op"] == row["name"]) & np.isclose(ours["flops"], flops, rtol=1e-6)
            ].iloc[0]
            assert mine["spec"] == row["Compute Spec"]
            assert mine["bound"] == row["Roofline Bound_first"].split("_")[0].lower()
            # roofline time: the same, except where the bytes differ by design (then by that share)
            expected = (
                row["Roofline Time (µs)_first"] * moved / (row["Data Moved (MB)_first"] * 2**20)
            )
            assert mine["roofline_us"] == pytest.approx(expected, rel=1e-6)
            pct = expected * row["name_count"] / row["Kernel Time (µs)_sum"] * 100
            assert mine["pct_roofline"] == pytest.approx(pct, rel=0.02)
            checked += 1
    assert checked == 9
