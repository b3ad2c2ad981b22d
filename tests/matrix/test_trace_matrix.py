"""Traces in the matrix, on run directories with hand-built traces (no torchrun; fast).

A probe sweep gives a real run directory (records, cell.json with ``collect:
[torch_profiler]``); each trial then gets two rank traces whose answers are known: rank 1
reaches the all_reduce later in every trial, the ``slow`` cell computes twice as long.
"""

from __future__ import annotations

import gzip
import json
import shutil
import warnings

import numpy as np
import pytest
import xarray as xr

import aorta
from aorta.errors import TraceWarning
from aorta.matrix.trace_metrics import analyse_trial, rank_files
from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep
from aorta.store.metrics_cache import METRICS_CACHE
from aorta.trace.testing import kineto_json

RECIPE = """
ticket: TM-1
trials: 5
collect: [torch_profiler]
cells:
  - {name: base, mitigations: [none]}
  - {name: slow, mitigations: [none], extra_env: {SLOW: "1"}}
"""


def rank_trace(rank: int, *, compute_us: float, late_us: float, jitter: float = 0.0) -> bytes:
    """One profiled step on ``rank``: compute, then an all_reduce on gloo's thread (µs).

    Rank 1 computes ``late_us`` longer; rank 0's all_reduce waits for it, so both end together.
    """
    busy = compute_us + jitter + (late_us if rank == 1 else 0.0)
    end = compute_us + jitter + late_us + 100
    ops = [
        ("user_annotation", "ProfilerStep#0", 0, end + 10),
        ("cpu_op", "aten::mm", 0, busy,
         {"Input Dims": [[256, 256], [256, 256]], "Input type": ["float", "float"]}),
        ("user_annotation", "gloo:all_reduce", busy, end - busy,
         {"tid": 7, "Input Dims": [[250_000]], "Input type": ["float"]}),
    ]  # fmt: skip
    header = {"distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"}}
    return gzip.compress(kineto_json(ops, header=header))


def add_traces(run_dir, *, late_us=30.0):
    for cell, compute in (("base", 100.0), ("slow", 200.0)):
        for trial in range(5):
            folder = run_dir / "cells" / cell / f"trial_{trial:04d}" / "trace"
            folder.mkdir(parents=True, exist_ok=True)
            for rank in (0, 1):
                data = rank_trace(rank, compute_us=compute, late_us=late_us, jitter=trial)
                (folder / f"rank{rank}.pt.trace.json.gz").write_bytes(data)


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    recipe = load_recipe_text(RECIPE, command=["true"])
    run_dir = sweep(recipe, output=out, progress="none").run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["world_size"] = 2  # as a torchrun sweep records it
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    add_traces(run_dir)
    return run_dir


@pytest.fixture
def run_copy(traced_run, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(traced_run, target, ignore=shutil.ignore_patterns("*.aorta-cache"))
    return target


@pytest.mark.slow
def test_trace_variables_have_known_values(traced_run):
    ds = aorta.load_run(traced_run, traces=True, trace_workers=1)
    assert dict(ds.sizes)["rank"] == 2 and ds["rank"].values.tolist() == [0, 1]
    assert (ds.trace_source == "host").all()
    base = ds.sel(cell="base", trial=0)
    # rank 0 computes 0-100 µs, then waits inside the all_reduce for rank 1 (done at 130)
    assert base.computation_ms.values.tolist() == [0.1, 0.13]
    assert base.exposed_comm_ms.values.tolist() == [0.13, 0.1]
    assert base.idle_ms.values.tolist() == [0.0, 0.0]
    assert base.straggler_wait_ms.values.tolist() == [0.03, 0.0]
    assert base.profiled_steps.values.tolist() == [1, 1]
    assert base.busbw_all_reduce_gbps.values == pytest.approx(
        [1e6 / 130e-6 / 1e9, 1e6 / 100e-6 / 1e9]
    )
    assert base.gemm_tflops.values == pytest.approx(
        [2 * 256**3 / 100e-6 / 1e12, 2 * 256**3 / 130e-6 / 1e12]
    )
    assert ds.trace_file.sel(cell="slow", trial=4, rank=1).item() == (
        "cells/slow/trial_0004/trace/rank1.pt.trace.json.gz"
    )
    assert ds.computation_ms.attrs == {
        "long_name": "computation time",
        "rank_reduction": "max",
        "units": "ms",
    }
    assert ds.gemm_tflops.attrs["rank_reduction"] == "min"
    assert json.loads(ds.attrs["trace_diagnostics"]) == []


@pytest.mark.slow
def test_compare_on_a_trace_metric_gives_verdicts(traced_run):
    ds = aorta.load_run(traced_run, traces=True)
    df = aorta.compare(ds, metric="computation_ms")
    assert df.loc["slow", "difference"] == "slower" and df.loc["base", "difference"] == "baseline"
    assert df.loc["slow", "ratio"] == pytest.approx(230 / 130, rel=0.05)
    assert df.attrs["trial_value"] == "computation_ms per trial, max over ranks"
    assert df.attrs["units"] == "ms"
    tflops = aorta.compare(ds, metric="gemm_tflops")
    assert tflops.loc["slow", "difference"] == "lower"  # a rate: higher/lower, the min over ranks
    # the reduction is an option: rank 0 waits, rank 1 does not
    wait = {r: aorta.compare(ds, metric="straggler_wait_ms", ranks=r) for r in (0, 1, "mean")}
    assert wait[0].loc["base", "median"] == pytest.approx(0.03)
    assert wait[1].loc["base", "median"] == 0.0
    assert wait["mean"].loc["base", "median"] == pytest.approx(0.015)
    with pytest.raises(ValueError, match="no rank 5"):
        aorta.compare(ds, metric="idle_ms", ranks=5)
    with pytest.raises(ValueError, match="exposed_comm_ms"):
        aorta.compare(ds, metric="exposed_com_ms")  # the message lists the trace metrics


@pytest.mark.slow
def test_second_load_reads_the_metrics_cache(traced_run, monkeypatch):
    first = aorta.load_run(traced_run, traces=True)
    assert (traced_run / "cells/base/trial_0000/trace" / METRICS_CACHE).is_file()

    def boom(*args, **kwargs):
        raise AssertionError("analysed again despite a valid cache")

    monkeypatch.setattr("aorta.matrix.trace_metrics.analyse_trial", boom)
    xr.testing.assert_identical(aorta.load_run(traced_run, traces=True), first)


@pytest.mark.slow
def test_a_changed_trace_is_analysed_again(run_copy):
    aorta.load_run(run_copy, traces=True, trace_workers=1)
    path = run_copy / "cells/base/trial_0002/trace/rank0.pt.trace.json.gz"
    path.write_bytes(rank_trace(0, compute_us=400.0, late_us=30.0))
    ds = aorta.load_run(run_copy, traces=True, trace_workers=1)
    assert ds.computation_ms.sel(cell="base", trial=2, rank=0).item() == 0.4


@pytest.mark.slow
def test_missing_and_corrupt_traces_are_nan_with_a_warning(run_copy):
    missing = run_copy / "cells/base/trial_0001/trace/rank1.pt.trace.json.gz"
    missing.unlink()
    corrupt = run_copy / "cells/slow/trial_0003/trace/rank0.pt.trace.json.gz"
    corrupt.write_bytes(corrupt.read_bytes()[:200])  # a truncated gzip stream
    with pytest.warns(TraceWarning) as caught:
        ds = aorta.load_run(run_copy, traces=True)
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert messages[0].startswith(f"{missing}: no such file")
    assert messages[1].startswith(f"{corrupt}: ") and "truncated" in messages[1]
    assert ds.trace_source.sel(cell="base", trial=1).values.tolist() == ["host", "missing"]
    assert ds.trace_source.sel(cell="slow", trial=3).values.tolist() == ["unreadable", "host"]
    assert np.isnan(ds.idle_ms.sel(cell="base", trial=1, rank=1))
    assert np.isnan(ds.idle_ms.sel(cell="slow", trial=3, rank=0))
    # the other rank of a broken trial is still analysed, and the rest of the run loads
    assert ds.computation_ms.sel(cell="base", trial=1, rank=0).item() == pytest.approx(0.101)
    assert ds.computation_ms.sel(cell="slow", trial=3, rank=1).item() == pytest.approx(0.233)
    assert int(np.isfinite(ds.computation_ms).sum()) == 18
    assert sorted(json.loads(ds.attrs["trace_diagnostics"])) == messages
    # a trial missing a rank has no trial value: the missing rank could be the slow one
    df = aorta.compare(ds, metric="computation_ms")
    assert df["n_timed"].tolist() == [4, 4]


@pytest.mark.slow
def test_serial_and_parallel_analyses_agree(traced_run):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        serial = aorta.load_run(traced_run, traces=True, trace_workers=1, trace_cache="off")
        parallel = aorta.load_run(traced_run, traces=True, trace_workers=2, trace_cache="off")
    xr.testing.assert_identical(serial, parallel)


@pytest.mark.slow
def test_netcdf_round_trip_is_exact(traced_run, tmp_path):
    ds = aorta.load_run(traced_run, traces=True)
    path = ds.aorta.to_netcdf(tmp_path / "with_traces.nc")
    xr.testing.assert_identical(aorta.load_run(path), ds)


@pytest.mark.slow
def test_tidy_trials_carry_the_worst_rank(traced_run):
    df = aorta.load_trials(traced_run, traces=True)
    row = df[(df["cell"] == "base") & (df["trial"] == 0)].iloc[0]
    assert row["exposed_comm_ms"] == pytest.approx(0.13) and row["gemm_tflops"] > 0


@pytest.mark.slow
def test_a_run_without_profiling_has_no_trace_warnings(tmp_path):
    recipe = load_recipe_text(RECIPE.replace("collect: [torch_profiler]\n", ""), command=["true"])
    run_dir = sweep(recipe, output=tmp_path, progress="none").run_dir
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = aorta.load_run(run_dir, traces=True)
    assert (ds.trace_source == "missing").all() and ds.exposed_comm_ms.isnull().all()


@pytest.mark.slow
def test_analyse_trial_is_a_function_of_the_files(traced_run):
    files = rank_files(traced_run / "cells/slow/trial_0000/trace")
    result = analyse_trial(files, cache="off")
    assert result["problems"] == []
    assert {r: m["source"] for r, m in result["ranks"].items()} == {"0": "host", "1": "host"}
    assert result["ranks"]["1"]["computation_ms"] == 0.23
    assert json.loads(json.dumps(result)) == result  # JSON data: it is cached as is


@pytest.mark.slow
def test_trace_summary_section_and_figures(run_copy):
    from matplotlib.figure import Figure

    from aorta.report.matrix_files import trace_markdown, write_matrix

    ds = aorta.load_run(run_copy, traces=True)
    summary = ds.aorta.trace_summary()
    assert summary["traced"].tolist() == [5, 5] and summary["source"].tolist() == ["host", "host"]
    assert summary["computation_ms"].tolist() == pytest.approx([0.132, 0.232])
    # both cells wait the same 30 µs for rank 1: exposed comm did not change
    assert summary.loc["slow", ["difference", "band"]].tolist() == [
        "no difference detected",
        "within band",
    ]
    assert summary.loc["slow", "ratio"] == pytest.approx(1.0)
    text = trace_markdown(summary)
    assert text.startswith("## Traces") and "| slow | 5 | host |" in text
    before = (run_copy / "matrix.md").read_text()
    for _ in range(2):  # the one writer renders the whole matrix, the traces section with it
        write_matrix(run_copy, ds)
    after = (run_copy / "matrix.md").read_text()
    # the same matrix, now naming the directory it is in, and one traces section after it
    assert f"- run: `{run_copy}`" in after and after.count("## Traces") == 1
    head = before.split("\n", 3)[3].rstrip("\n")
    assert after.split("\n", 3)[3].startswith(head)
    assert json.loads((run_copy / "matrix.json").read_text())["traces"]["cells"][1]["band"] == (
        "within band"
    )
    host = Figure()
    ax = host.add_subplot()
    assert ds.aorta.plot_time_breakdown(ax=ax) is host
    fig = ds.aorta.plot_exposed_comm()
    assert isinstance(fig, Figure) and "per profiled step" in fig.axes[0].get_ylabel()
    with pytest.raises(ValueError, match="traces=True"):
        aorta.load_run(run_copy).aorta.trace_summary()


@pytest.mark.slow
def test_a_broken_worker_pool_falls_back_to_this_process(traced_run, monkeypatch):
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    class BrokenPool:  # what an interpreter that cannot start workers gives
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, *args, **kwargs):
            future = Future()
            future.set_exception(BrokenProcessPool("a worker died"))
            return future

    expected = aorta.load_run(traced_run, traces=True, trace_workers=1, trace_cache="off")
    monkeypatch.setattr("aorta.matrix.trace_metrics.ProcessPoolExecutor", BrokenPool)
    ds = aorta.load_run(traced_run, traces=True, trace_workers=2, trace_cache="off")
    xr.testing.assert_identical(ds.drop_attrs(), expected.drop_attrs())
    assert "the rest ran in this process" in json.loads(ds.attrs["trace_diagnostics"])[0]


@pytest.mark.slow
def test_a_trace_metric_without_traces_says_how_to_get_them(traced_run, run_cli):
    with pytest.raises(ValueError, match=r"load_run\(run, traces=True\)"):
        aorta.compare(aorta.load_run(traced_run), metric="exposed_comm_ms")
    code, _, err = run_cli("compare", traced_run, "--metric", "idle_ms")
    assert code == aorta.ExitCode.USAGE and "--traces" in err
