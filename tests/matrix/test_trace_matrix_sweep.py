"""Traces in the matrix on a real profiled sweep: 2 ranks under torchrun, gloo on loopback.

One sweep (``tests.trace_helpers.TWO_RANK_RECIPE``: race workload, FSDP and DDP cells, 2 trials
each, torch.profiler on every rank) is shared by the session; the module works on a copy.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import aorta
import aorta.trace
from aorta.errors import ExitCode, TraceWarning
from aorta.matrix.trace_metrics import rank_files
from aorta.trace.metrics import rank_metrics
from tests.trace_helpers import copy_without_caches, shared_profiled_sweep

pytestmark = pytest.mark.slow

TIMES = ("computation_ms", "exposed_comm_ms", "idle_ms", "busy_ms", "total_ms", "total_comm_ms")


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory):
    shared = shared_profiled_sweep(tmp_path_factory)
    return copy_without_caches(shared, tmp_path_factory.mktemp("profiled") / "run")


@pytest.fixture
def run_copy(profiled_run, tmp_path):
    return copy_without_caches(profiled_run, tmp_path / "run")


def test_every_trial_and_rank_has_trace_metrics(profiled_run):
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        ds = aorta.load_run(profiled_run, traces=True)
    assert ds.sizes["rank"] == 2 and (ds.status == "ok").all()
    assert (ds.trace_source == "host").all()  # gloo on CPU: no GPU events
    for name in (*TIMES, "straggler_wait_ms", "busbw_all_reduce_gbps", "gemm_tflops"):
        assert np.isfinite(ds[name]).all(), name
        assert (ds[name] >= 0).all(), name
    assert (ds.computation_ms > 0).all() and (ds.total_comm_ms > 0).all()
    assert np.isfinite(ds.busbw_all_gather_gbps.sel(cell="fsdp")).all()  # FSDP gathers shards
    assert (ds.profiled_steps == 3).all()
    parts = ds.computation_ms + ds.exposed_comm_ms + ds.exposed_memcpy_ms + ds.idle_ms
    np.testing.assert_allclose(parts, ds.total_ms, rtol=1e-9)
    assert json.loads(ds.attrs["trace_diagnostics"]) == []


def test_values_are_those_of_aorta_trace_load_on_the_same_files(profiled_run):
    ds = aorta.load_run(profiled_run, traces=True)
    for cell in ("fsdp", "ddp"):
        for trial in (0, 1):
            folder = profiled_run / "cells" / cell / f"trial_{trial:04d}" / "trace"
            trace = aorta.trace.load(list(rank_files(folder).values()), cache="off")
            timeline = trace.host_timeline()
            expected = rank_metrics(trace)
            for rank in (0, 1):
                got = ds.sel(cell=cell, trial=trial, rank=rank)
                parts = timeline[timeline["rank"] == rank].set_index("type")["time ms"]
                assert got.computation_ms.item() == pytest.approx(parts["computation_time"])
                assert got.exposed_comm_ms.item() == pytest.approx(parts["exposed_comm_time"])
                assert got.idle_ms.item() == pytest.approx(parts["idle_time"])
                for name in ("gemm_tflops", "straggler_wait_ms", "busbw_all_reduce_gbps"):
                    assert got[name].item() == pytest.approx(
                        expected.loc[rank, name], nan_ok=True
                    ), name
                assert got.trace_file.item() == (
                    f"cells/{cell}/trial_{trial:04d}/trace/rank{rank}.pt.trace.json.gz"
                )


def test_missing_and_corrupt_rank_traces(run_copy):
    gone = run_copy / "cells/ddp/trial_0000/trace/rank1.pt.trace.json.gz"
    gone.unlink()
    bad = run_copy / "cells/fsdp/trial_0001/trace/rank0.pt.trace.json.gz"
    bad.write_bytes(b"\x1f\x8b" + bad.read_bytes()[2:40])  # a gzip stream cut short
    with pytest.warns(TraceWarning) as caught:
        ds = aorta.load_run(run_copy, traces=True)
    assert sorted(str(w.message).split(":", 1)[0] for w in caught) == sorted([str(gone), str(bad)])
    assert ds.trace_source.sel(cell="ddp", trial=0).values.tolist() == ["host", "missing"]
    assert ds.trace_source.sel(cell="fsdp", trial=1).values.tolist() == ["unreadable", "host"]
    assert np.isnan(ds.exposed_comm_ms.sel(cell="ddp", trial=0, rank=1))
    assert np.isnan(ds.exposed_comm_ms.sel(cell="fsdp", trial=1, rank=0))
    assert np.isfinite(ds.exposed_comm_ms.sel(cell="fsdp", trial=0)).all()  # the rest loads
    # the other rank of a broken trial still has its own numbers (not its straggler wait)
    assert np.isfinite(ds.computation_ms.sel(cell="ddp", trial=0, rank=0))
    assert np.isnan(ds.straggler_wait_ms.sel(cell="ddp", trial=0, rank=0))


def test_compare_and_report_with_traces(profiled_run, run_copy, run_cli):
    ds = aorta.load_run(profiled_run, traces=True)
    df = aorta.compare(ds, metric="exposed_comm_ms")
    assert df.loc["fsdp", "difference"] == "baseline"
    # 2 trials per cell cannot tell
    assert df.loc["ddp", ["difference", "band"]].tolist() == ["no difference detected", "undecided"]
    assert df.loc["ddp", "n_timed"] == 2 and df.attrs["units"] == "ms"
    code, out, _ = run_cli("report", run_copy, "--traces")
    assert code == ExitCode.OK
    report = run_copy / "report"
    for name in ("traces.csv", "time_breakdown.png", "exposed_comm_vs_step.png", "report.md"):
        assert (report / name).is_file(), name
    code, _, _ = run_cli("report", run_copy, "--traces", "--ranks", "mean")  # again: replaced
    matrix = (run_copy / "matrix.md").read_text()
    assert matrix.count("## Traces") == 1 and matrix.index("## Findings") < matrix.index(
        "## Traces"
    )
    assert "| ddp | 2 | host |" in matrix and "mean over ranks" in matrix
    traces = json.loads((run_copy / "matrix.json").read_text())["traces"]
    assert [c["cell"] for c in traces["cells"]] == ["fsdp", "ddp"]
    code, out, _ = run_cli("compare", run_copy, "--traces", "--metric", "idle_ms", "--ranks", "0")
    assert code == ExitCode.OK and "idle_ms per trial, rank 0" in out
