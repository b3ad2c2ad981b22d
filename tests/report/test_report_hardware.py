""" "Against the hardware" in ``aorta report --traces`` and report.html.

The renderers on a real GPU trace from tests/data (pure functions), the "went from … to …"
sentence from a real :func:`aorta.compare` of per-trial ``pct_roofline_<family>`` values, and
a real profiled sweep (CPU: its traces hold no GPU kernels, which the section must say).
"""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import aorta.cli
from aorta.errors import ExitCode
from aorta.matrix.dataset import build_dataset
from aorta.report.page.hardware import hardware_html
from aorta.report.page.write import html
from aorta.report.perf import (
    NO_GPU_TEXT,
    cell_hardware,
    hardware_frame,
    hardware_markdown,
    representative_files,
    roofline_changes,
)
from aorta.store.record import TrialRecord
from tests.trace_helpers import DATA, copy_without_caches, shared_profiled_sweep, shipped

H100 = "h100_bert_small.json.gz"


@pytest.fixture(scope="module")
def h100_cell():
    return cell_hardware(shipped(H100), cell="base", file=f"traces/{H100}")


def _with_roofline(base: list[float], other: list[float]) -> xr.Dataset:
    """Two cells, 5 trials each, and a per-trial ``pct_roofline_SDPA_fwd`` (rank 0)."""
    cells = ("base", "x")
    records = [
        TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True, step_times_ms=[5.0, 1.0])
        for c in cells
        for t in range(5)
    ]
    ds = build_dataset(
        [{"name": c, "trials": 5} for c in cells], records, attrs={"baseline": "base"}
    )
    values = np.array([base, other], float)[:, :, None]
    attrs = {"long_name": "SDPA_fwd share of the roofline", "units": "%", "rank_reduction": "min"}
    ds["pct_roofline_SDPA_fwd"] = xr.DataArray(
        values, dims=("cell", "trial", "rank"), coords={"rank": [0]}, attrs=attrs
    )
    return ds


def test_the_section_shows_each_family_of_a_real_gpu_trace(h100_cell):
    c = h100_cell
    assert c.device == "H100" and c.coverage > 0.95
    gemm = c.families.set_index("family").loc["GEMM"]
    md = hardware_markdown([c], None, gpu=True, figures={"base": "roofline_base.png"})
    assert "## Against the hardware" in md
    assert f"`traces/{H100}` — H100, coverage {100 * c.coverage:.1f}% of kernel time" in md
    assert (
        f"| GEMM | {int(gemm['calls'])} | {gemm['kernel_us'] / 1e3:.3f} | {gemm['percent']:.1f} "
        f"| {gemm['tflops']:.3g} | {gemm['tbps']:.3g} | {gemm['pct_roofline']:.1f} |" in md
    )
    assert "![roofline base](roofline_base.png)" in md
    section = hardware_html([c], None, gpu=True, fmt="svg")
    assert section.id == "hardware" and section.title == "Against the hardware"
    assert 'id="fig-roofline-base"' in section.body and "<svg" in section.body
    assert "<td>SDPA_fwd</td>" in section.body and "H100" in section.body
    csv = hardware_frame([c])
    assert set(csv["family"]) == set(c.families["family"])
    assert (csv["cell"] == "base").all() and (csv["device"] == "H100").all()
    assert csv["kernel_us"].sum() == pytest.approx(c.families["kernel_us"].sum())


def test_a_detectable_change_of_a_family_reads_as_a_sentence(h100_cell):
    ds = _with_roofline([41.0, 42.0, 40.0, 41.5, 40.5], [28.0, 27.0, 29.0, 28.5, 27.5])
    changes = roofline_changes(ds, resamples=500)
    row = changes.set_index(["family", "cell"]).loc[("SDPA_fwd", "x")]
    assert row["difference"] == "lower"
    assert row["sentence"].startswith("SDPA_fwd went from 41% to 28% of roofline under cell x")
    md = hardware_markdown([h100_cell], changes, gpu=True)
    assert f"- {row['sentence']}" in md
    assert row["sentence"] in hardware_html([h100_cell], changes, gpu=True).body


def test_no_sentence_when_the_share_did_not_change(h100_cell):
    ds = _with_roofline([41.0, 42.0, 40.0, 41.5, 40.5], [41.2, 40.8, 42.1, 40.2, 41.0])
    changes = roofline_changes(ds, resamples=500)
    assert len(changes) == 1 and changes["sentence"].tolist() == [""]
    md = hardware_markdown([h100_cell], changes, gpu=True)
    assert "No family's share of the roofline changed detectably" in md


def test_the_representative_trace_is_the_median_gpu_trial():
    source = np.array([[["gpu", "gpu"], ["host", "host"], ["gpu", "gpu"], ["gpu", "missing"]]])
    files = np.array([[[f"t{t}r{r}" for r in range(2)] for t in range(4)]])
    busy = np.array([[[5.0, 9.0], [1.0, 1.0], [2.0, 3.0], [np.nan, 4.0]]])
    dims = ("cell", "trial", "rank")
    ds = xr.Dataset(
        {"trace_source": (dims, source), "trace_file": (dims, files), "busy_ms": (dims, busy)},
        coords={"cell": ["a"], "trial": range(4), "rank": [0, 1]},
    )
    # GPU trials 0 (worst rank 9), 2 (3), 3 (rank 0 only: NaN, last); the median is trial 0
    assert representative_files(ds) == {"a": "t0r0"}


def test_without_gpu_kernels_the_section_says_so_rather_than_nothing():
    assert NO_GPU_TEXT in hardware_markdown([], None, gpu=False)
    body = hardware_html([], None, gpu=False).body
    assert "no GPU kernels" in body and "no roofline" in body


@pytest.mark.slow
def test_report_traces_of_a_cpu_profiled_sweep_says_no_roofline_applies(
    tmp_path, tmp_path_factory, capsys
):
    # The session's shared profiled sweep (FSDP and DDP cells, 2 trials, 2 ranks, on CPU).
    run = copy_without_caches(shared_profiled_sweep(tmp_path_factory), tmp_path / "run")
    code = aorta.cli.main(["report", str(run), "--traces", "--html", "--resamples", "300"])
    assert code == ExitCode.OK
    md = (run / "report" / "report.md").read_text()
    section = md.split("## Against the hardware", 1)[1]
    assert NO_GPU_TEXT in section
    assert not (run / "report" / "hardware.csv").exists()
    page = (run / "report" / "report.html").read_text()
    assert '<section id="hardware">' in page
    hardware = page.split('<section id="hardware">', 1)[1].split("</section>", 1)[0]
    assert "no GPU kernels" in hardware
    ds = aorta.load_run(run, traces=True)
    assert (ds.trace_source == "host").all() and representative_files(ds) == {}
    assert roofline_changes(ds).empty
    assert isinstance(roofline_changes(ds), pd.DataFrame)

    # The same run with real GPU traces in place of the CPU ones (H100 BERT for the baseline,
    # MI300X BERT for the other cell, in trial 0; rank 1's file removed): the section has
    # numbers, from trial 0 (trial 1 keeps its CPU traces, which hold no GPU kernels).
    gpu_run = copy_without_caches(run, tmp_path / "gpu_run")
    for cell, name in (("fsdp", H100), ("ddp", "mi300_bert_small.json.gz")):
        trace_dir = gpu_run / "cells" / cell / "trial_0000" / "trace"
        for old in trace_dir.glob("rank*"):
            old.unlink()
        shutil.copy(DATA / name, trace_dir / "rank0.pt.trace.json.gz")
    capsys.readouterr()
    code = aorta.cli.main(["report", str(gpu_run), "--traces", "--html", "--resamples", "300"])
    assert code == ExitCode.OK
    # rank 1's trace is missing, on purpose: the command says so for each trial
    err = capsys.readouterr().err.splitlines()
    warned = {line.split("/gpu_run/", 1)[-1] for line in err if line.startswith("warning: ")}
    missing = "trial_0000/trace/rank1.pt.trace.json.gz: no such file"
    assert warned == {f"cells/{cell}/{missing}" for cell in ("fsdp", "ddp")}, err
    md = (gpu_run / "report" / "report.md").read_text().split("## Against the hardware", 1)[1]
    assert NO_GPU_TEXT not in md
    assert "`cells/fsdp/trial_0000/trace/rank0.pt.trace.json.gz` — H100, coverage" in md
    assert "`cells/ddp/trial_0000/trace/rank0.pt.trace.json.gz` — MI300X, coverage" in md
    assert "| GEMM |" in md and "![roofline fsdp](roofline_fsdp.png)" in md
    for cell in ("fsdp", "ddp"):
        assert (gpu_run / "report" / f"roofline_{cell}.png").stat().st_size > 1000
    csv = pd.read_csv(gpu_run / "report" / "hardware.csv")
    assert set(csv["cell"]) == {"fsdp", "ddp"} and set(csv["device"]) == {"H100", "MI300X"}
    expected = cell_hardware(shipped(H100), cell="fsdp", file="x").families
    base = csv[csv["cell"] == "fsdp"].set_index("family")["kernel_us"]
    assert base.to_dict() == pytest.approx(expected.set_index("family")["kernel_us"].to_dict())
    page = (gpu_run / "report" / "report.html").read_text()
    hardware = page.split('<section id="hardware">', 1)[1].split("</section>", 1)[0]
    assert 'id="fig-roofline-fsdp"' in hardware and 'id="fig-roofline-ddp"' in hardware
    assert "no GPU kernels" not in hardware


def test_the_page_of_an_in_memory_dataset_says_the_change_and_that_traces_are_not_located(
    tmp_path,
):
    """report.html's builder on a Dataset with GPU trace metrics but no run directory: the
    sentence from every trial's values, and no per-cell trace (nowhere to read one from)."""
    ds = _with_roofline([41.0, 42.0, 40.0, 41.5, 40.5], [28.0, 27.0, 29.0, 28.5, 27.5])
    dims = ("cell", "trial", "rank")
    ds["trace_source"] = xr.DataArray(np.full((2, 5, 1), "gpu", object), dims=dims)
    ds["trace_file"] = xr.DataArray(np.full((2, 5, 1), "x.json", object), dims=dims)
    for name in ("computation_ms", "exposed_comm_ms", "idle_ms", "busy_ms", "total_ms"):
        ds[name] = xr.DataArray(np.ones((2, 5, 1)), dims=dims, attrs={"rank_reduction": "max"})
    page = html(ds, output=tmp_path / "page.html", resamples=300).read_text()
    section = page.split('<section id="hardware">', 1)[1].split("</section>", 1)[0]
    assert "SDPA_fwd went from 41% to 28% of roofline under cell x" in section
    assert "The run directory is not known" in section
