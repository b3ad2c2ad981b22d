"""``aorta.trace.diff`` and ``aorta trace diff`` on the shipped traces (and modified copies)."""

from __future__ import annotations

import gzip
import json
import math

import pandas as pd
import pytest

import aorta.trace
from aorta.cli import main
from aorta.errors import ExitCode
from aorta.trace.diff import normalize_kernel_name
from tests.trace_helpers import DATA, shipped

RCCL = "mi300_rccl_resnet_rank0.json.gz"
A100 = ("a100_nccl_sampled_rank-0.json.gz", "a100_nccl_sampled_rank-1.json.gz")


def _scaled_copy(tmp_path, name: str, kernel: str, factor: float):
    """A copy of a shipped trace with every ``kernel`` event's duration times ``factor``."""
    doc = json.loads(gzip.decompress((DATA / name).read_bytes()))
    hits = 0
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel" and event.get("name") == kernel:
            event["dur"] = event["dur"] * factor
            hits += 1
    assert hits
    path = tmp_path / f"scaled_{name}"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


@pytest.mark.parametrize("by", ["kernel", "op", "class", "collective"])
def test_a_trace_against_itself_is_all_zeros(by):
    trace = shipped(RCCL)
    table = aorta.trace.diff(trace, trace, by=by)
    assert len(table) > 0
    assert (table["delta"] == 0).all() and (table["share"] == 0).all()
    assert (table["total_a"] == table["total_b"]).all()
    assert (table["count_a"] == table["count_b"]).all()
    assert (table["only_in"] == "").all()
    assert all(row["delta"] == 0 for row in table.attrs["breakdown"])
    assert table.attrs["total_delta"] == 0 and table.attrs["units"]["delta"] == "us"


@pytest.mark.slow
def test_one_scaled_kernel_comes_first_with_its_delta(tmp_path):
    kernels = shipped(RCCL).kernels()
    compute = kernels[kernels["class"] == "compute"]
    name = compute["name"].iloc[1]  # the second-longest compute kernel
    scaled = _scaled_copy(tmp_path, RCCL, name, 1.5)
    table = aorta.trace.diff(shipped(RCCL), scaled)  # a path would get a cache beside it
    first = table.iloc[0]
    assert name in first["raw_names"]
    assert first["item"] == normalize_kernel_name(name)
    expected = 0.5 * compute["total"].iloc[1]  # µs
    count = compute["count"].iloc[1]
    assert first["delta"] == pytest.approx(expected, abs=1e-3 * count)  # ns rounding per event
    assert first["share"] == pytest.approx(1.0)
    assert (table["delta"].iloc[1:] == 0).all()
    breakdown = {row["type"]: row for row in table.attrs["breakdown"]}
    assert breakdown["busy_time"]["b"] >= breakdown["busy_time"]["a"]


def test_per_step_divides_by_the_profiled_steps():
    trace = shipped(RCCL)
    table = aorta.trace.diff(trace, trace, by="class", per_step=True)
    steps = table.attrs["steps"]["a"]
    assert steps == 3
    row = table.set_index("item").loc["compute"]
    assert row["per_step_a"] == pytest.approx(row["total_a"] / steps)
    assert table.attrs["breakdown"][0]["a"] == pytest.approx(
        trace.timeline().set_index("type")["time ms"]["computation_time"] / steps
    )


def test_items_in_one_side_only_are_flagged():
    table = aorta.trace.diff(
        shipped("mi300_bert_small.json.gz"), shipped("h100_bert_small.json.gz")
    )
    only = table.set_index("item")["only_in"]
    assert only["attn_fwd"] == "a"  # the ROCm attention kernel
    assert only["pytorch_flash::flash_fwd_kernel<…>"] == "b"
    assert set(only) == {"a", "b", ""}
    row = table.set_index("item").loc["attn_fwd"]
    assert row["count_b"] == 0 and row["total_b"] == 0 and row["delta"] == -row["total_a"]
    assert math.isclose(table["share"].sum(), 1.0)


def test_ranks_are_averaged():
    pair = shipped(*A100)
    table = aorta.trace.diff(pair, pair).set_index("item")
    per_rank = pair.kernels(by_rank=True)
    per_rank["item"] = [normalize_kernel_name(n) for n in per_rank["name"]]
    expected = per_rank.groupby("item")["total"].sum() / 2
    pd.testing.assert_series_equal(
        table["total_a"].sort_index(), expected.sort_index(), check_names=False
    )
    assert table.attrs["ranks"] == {"a": [0, 1], "b": [0, 1]}


def test_paths_and_lists_of_paths_are_loaded(tmp_path):
    # copies: loading a path writes its parse cache beside it, never beside tests/data
    paths = [tmp_path / n for n in A100]
    for path in paths:
        path.write_bytes((DATA / path.name).read_bytes())
    table = aorta.trace.diff(paths, paths[0], by="collective")
    assert table.attrs["ranks"] == {"a": [0, 1], "b": [0]}


def test_unknown_by_is_a_value_error():
    with pytest.raises(ValueError, match="by must be one of"):
        aorta.trace.diff(shipped(RCCL), shipped(RCCL), by="stream")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
            "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>) "
            "[clone .kd]",
            "at::native::vectorized_elementwise_kernel<…>",
        ),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
        ),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_Generic"),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize#x#x#_warpgroupsize#x#x#_execute",
        ),
        ("__amd_rocclr_fillBufferAligned.kd", "__amd_rocclr_fillBufferAligned"),
        ("my_kernel_at_0x7f3a2b", "my_kernel_at_0x#"),
        ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
    ],
)
def test_kernel_name_normalisation(raw, normal):
    assert normalize_kernel_name(raw) == normal


@pytest.mark.slow
def test_cli_diff_text_json_and_csv(tmp_path, capsys):
    scaled = _scaled_copy(tmp_path, RCCL, shipped(RCCL).kernels()["name"].iloc[0], 1.5)
    base = tmp_path / RCCL
    base.write_bytes((DATA / RCCL).read_bytes())
    args = ["trace", "diff", str(base), str(scaled), "--cache", "off"]
    assert main([*args, "--top", "3"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "== time breakdown" in out and "ncclDevKernel_Generic" in out
    assert main([*args, "--json", "--by", "collective", "--per-step"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["by"] == "collective" and doc["per_step"] is True and doc["items"][0]["delta"] > 0
    assert {row["type"] for row in doc["breakdown"]} >= {"computation_time", "idle_time"}
    csv = tmp_path / "diff.csv"
    assert main([*args, "--csv", str(csv)]) == ExitCode.OK
    frame = pd.read_csv(csv)
    assert frame["item"].iloc[0] == "ncclDevKernel_Generic" and frame["delta"].iloc[0] > 0
    assert main([*args, "--csv", str(csv), "--json"]) == ExitCode.USAGE
