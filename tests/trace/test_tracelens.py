"""read_tracelens on TraceLens's own golden CSVs and on hand-written sheets; load_tracelens.

Columns relied on (TraceLens's names, see tests/data/tracelens/README.md): gpu_timeline
``type``/``time ms``; ops_summary ``name``/``Count``/``total_direct_kernel_time_sum``; GEMM
``name``, ``param: M/N/K``, ``param: dtype_A_B``, ``GFLOPS_first``, ``Kernel Time (µs)_sum``,
``name_count``; coll_analysis ``Collective name``, ``Group size``, ``dtype``, ``In/Out msg
nelems``, ``dur_sum``, ``operation_count``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import aorta
from aorta.errors import TraceError, TraceWarning
from aorta.trace import read_tracelens
from aorta.trace.metrics import rank_metrics
from tests.conftest import DATA
from tests.trace_helpers import GOLDEN, shipped

FULL = DATA / "tracelens" / "full"
SHARED_GOLDEN = Path(__file__).resolve().parents[3] / "shared" / "traces" / "tracelens_golden"
GOLDEN_NAMES = ["h100_bert_small", "mi300_bert_small", "mi300_rccl_resnet_rank0"]


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_csvs_give_the_same_metrics_as_our_analysis_of_the_trace(name):
    folder = SHARED_GOLDEN if SHARED_GOLDEN.is_dir() else GOLDEN
    report = read_tracelens(folder, prefix=name)
    assert report.missing == ("ops_summary", "GEMM", "coll_analysis")
    theirs = report.metrics().loc[0]
    ours = rank_metrics(shipped(f"{name}.json.gz")).loc[0]
    assert theirs["source"] == "tracelens" and ours["source"] == "gpu"
    for metric in ("computation_ms", "exposed_comm_ms", "exposed_memcpy_ms", "idle_ms", "total_ms"):
        assert theirs[metric] == pytest.approx(ours[metric], abs=1e-5 * ours["total_ms"])
    assert np.isnan(theirs["gemm_tflops"])  # no GEMM sheet: NaN, not an error


def test_golden_directory_holds_several_reports():
    with pytest.raises(TraceError, match=r"several reports.*'h100_bert_small'"):
        read_tracelens(GOLDEN)
    with pytest.raises(TraceError, match="no TraceLens CSVs with prefix 'nope'"):
        read_tracelens(GOLDEN, prefix="nope")


def test_all_four_sheets_become_our_tables():
    report = read_tracelens(FULL)
    assert report.missing == ()
    timeline = report.gpu_timeline.set_index("type")["time ms"]
    assert timeline["idle_time"] == 25.0  # micro + macro idle
    assert report.ops.set_index("name")["gpu_mean"].to_dict() == {
        "aten::addmm": 300.0,
        "aten::mul": 25.0,
    }
    gemms = report.gemms.set_index("op")
    assert gemms.loc["aten::addmm", "tflops"] == pytest.approx(2 * 4096**3 * 50 / 0.01 / 1e12)
    assert (gemms.loc["aten::mm", ["M", "N", "K"]] == 1024).all()
    calls = report.collectives.set_index("collective")
    assert calls.loc["all_reduce", ["bytes", "count", "dur"]].tolist() == [1e9, 8, 1000.0]
    assert calls.loc["all_reduce", "busbw"] == pytest.approx(1750.0)  # 1 TB/s × 2·7/8
    assert calls.loc["all_gather", "bytes"] == 4e9  # the gathered buffer, as nccl-tests counts
    assert calls.loc["all_gather", "busbw"] == pytest.approx(1750.0)
    assert np.isnan(calls.loc["barrier", "bytes"])
    m = report.metrics().loc[0]
    assert (m["computation_ms"], m["exposed_comm_ms"], m["idle_ms"]) == (40.0, 30.0, 25.0)
    flops = 2 * 4096**3 * 50 + 2 * 1024**3 * 50
    assert m["gemm_tflops"] == pytest.approx(flops / 0.011 / 1e12)
    assert m["busbw_all_reduce_gbps"] == pytest.approx(1750.0)
    assert m["busbw_all_gather_gbps"] == pytest.approx(1750.0)


def test_missing_sheets_are_tolerated(tmp_path):
    shutil.copy(FULL / "GEMM.csv", tmp_path / "rank3_GEMM.csv")
    report = read_tracelens(tmp_path)
    assert report.gpu_timeline is None and report.collectives is None
    assert report.missing == ("gpu_timeline", "ops_summary", "coll_analysis")
    m = report.metrics().loc[0]
    assert np.isnan(m["computation_ms"]) and m["gemm_tflops"] > 600


def test_unusable_folders_say_which_file(tmp_path):
    with pytest.raises(TraceError, match="no such directory"):
        read_tracelens(tmp_path / "absent")
    with pytest.raises(TraceError, match="no TraceLens CSVs"):
        read_tracelens(tmp_path)
    (tmp_path / "coll_analysis.csv").write_text("a,b\n1,2\n")
    with pytest.raises(
        TraceError, match=r"coll_analysis\.csv: not a TraceLens coll_analysis sheet"
    ):
        read_tracelens(tmp_path)


def _report(folder: Path, comm: float) -> None:
    folder.mkdir(parents=True)
    text = (
        (FULL / "gpu_timeline.csv")
        .read_text()
        .replace("exposed_comm_time,30.0", f"exposed_comm_time,{comm}")
    )
    (folder / "gpu_timeline.csv").write_text(text)
    shutil.copy(FULL / "coll_analysis.csv", folder / "coll_analysis.csv")


@pytest.mark.slow
def test_a_sweep_of_reports_is_a_dataset_compare_takes(tmp_path):
    for cell, comm in (("baseline", 30.0), ("tuned", 10.0)):
        for trial in range(5):
            for rank in range(2):
                _report(tmp_path / cell / f"trial_{trial:04d}" / f"rank{rank}", comm + trial + rank)
    ds = aorta.load_tracelens(tmp_path)
    assert ds.sizes["step"] == 0  # no step times: compare on a trace metric
    assert ds.cell.values.tolist() == ["baseline", "tuned"] and ds.sizes["rank"] == 2
    assert (ds.trace_source == "tracelens").all() and (ds.status == "ok").all()
    assert ds.exposed_comm_ms.sel(cell="tuned", trial=2).values.tolist() == [12.0, 13.0]
    df = aorta.compare(ds, metric="exposed_comm_ms")
    assert df.loc["tuned", "difference"] == "faster" and df.attrs["baseline"] == "baseline"
    assert df.loc["tuned", "median"] == 13.0  # the worst rank (max) of each trial
    round_trip = aorta.load_run(ds.aorta.to_netcdf(tmp_path / "tl.nc"))
    xr.testing.assert_identical(round_trip, ds)


def test_a_mapping_of_reports_and_a_broken_one(tmp_path):
    _report(tmp_path / "a", 5.0)
    _report(tmp_path / "b", 7.0)
    (tmp_path / "c").mkdir()
    with pytest.warns(TraceWarning, match="no TraceLens CSVs"):
        ds = aorta.load_tracelens(
            {("x", 0): tmp_path / "a", ("x", 1): tmp_path / "c", ("y", 0): tmp_path / "b"},
            baseline="y",
        )
    assert ds.attrs["baseline"] == "y"
    assert ds.trace_source.sel(rank=0).values.tolist() == [
        ["tracelens", "unreadable"],
        ["tracelens", "missing"],
    ]
    assert ds.status.values.tolist() == [["ok", "ok"], ["ok", "missing"]]
    assert ds.exposed_comm_ms.sel(rank=0).values[0, 0] == 5.0
