"""aorta.explain on a real profiled sweep: 2 ranks under torchrun, gloo on loopback.

The cells differ only by a 50 ms sleep inside ``record_function("injected")`` each step
(tests/explain_workload.py): explain must put ``injected`` first, with a CI that excludes 0.
The sleep is long against the scheduling noise of a loaded two-core box: a rank descheduled
for 10 ms slows the baseline's all-reduce but hides inside the other cell's sleep, so the
step clock's difference falls short of the sleep by about that noise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import aorta
import aorta.trace
from aorta.errors import ExitCode
from aorta.matrix import trace_metrics
from aorta.store.metrics_cache import METRICS_CACHE
from tests.processes import ROOT
from tests.trace_helpers import copy_without_caches, profiled_sweep

pytestmark = pytest.mark.slow

RECIPE = """
workload: tests.explain_workload:InjectedSleep
ticket: EXPLAIN
trials: 4
steps: 5
timeout_per_trial: 120
collect: [{torch_profiler: {wait: 0, warmup: 1, active: 3}}]
cells:
  - {name: base, mitigations: [none], workload_config: {sleep_ms: 0}}
  - {name: slow, mitigations: [none], workload_config: {sleep_ms: 50}}
"""


@pytest.fixture(scope="module")
def sleep_run(tmp_path_factory):
    return profiled_sweep(tmp_path_factory.mktemp("explain"), RECIPE)


@pytest.fixture
def run_copy(sleep_run, tmp_path):
    return copy_without_caches(sleep_run, tmp_path / "run")


def test_the_injected_block_comes_first_with_a_ci_that_excludes_zero(sleep_run):
    d = aorta.explain(sleep_run, "slow", by="op")
    top = d.iloc[0]
    assert top["item"] == "injected"
    assert 45 < top["delta"] < 80 and top["ci_low"] > 0  # 50 ms per step, ms (a sleep overshoots)
    assert top["ci_low"] <= top["delta"] <= top["ci_high"]
    assert d.attrs["trials"] == {"baseline": [0, 1, 2, 3], "cell": [0, 1, 2, 3]}
    step = d.attrs["step"]
    assert step["ci_low"] > 0 and top["share"] > 0.7
    total = d["delta"].sum() + d.attrs["residual"]["delta"]
    assert total == pytest.approx(step["delta"])
    assert d.attrs["notes"] == []
    # the workload's own clock says the same (what the verdict compares)
    clock = d.attrs["step_time_ms"]
    assert 25 < clock["cell"] - clock["baseline"] < 80  # the sleep, less the noise it hides
    by_class = aorta.explain(sleep_run, "slow", by="class")  # CPU-only: host classes
    assert set(by_class["item"]) <= {"compute", "communication", "other"}
    assert by_class.iloc[0]["item"] == "other" and by_class.iloc[0]["ci_low"] > 0
    rank1 = aorta.explain(sleep_run, "slow", by="op", ranks=1)
    assert rank1.iloc[0]["item"] == "injected"


def test_the_baseline_against_itself_is_all_zeros(sleep_run):
    d = aorta.explain(sleep_run, "base", "base", by="op")
    assert len(d) > 3
    assert (d[["delta", "ci_low", "ci_high", "share"]].to_numpy() == 0).all()
    assert d.attrs["step"]["delta"] == 0 and d.attrs["residual"]["delta"] == 0


def test_kernels_of_a_cpu_run_are_none_and_the_note_says_what_to_do(sleep_run):
    d = aorta.explain(sleep_run, "slow")
    assert d.empty and "try by='op'" in d.attrs["notes"][-1]


def test_explain_reads_the_metrics_cache_and_never_parses_again(run_copy, monkeypatch):
    ds = aorta.load_run(run_copy, traces=True)
    assert all(
        (run_copy / "cells" / c / f"trial_{t:04d}" / "trace" / METRICS_CACHE).is_file()
        for c in ("base", "slow")
        for t in range(4)
    )

    def no_parse(*args, **kwargs):
        raise AssertionError("a trace was parsed again")

    monkeypatch.setattr(aorta.trace, "load", no_parse)
    from_ds = ds.aorta.explain("slow", by="op")
    from_path = aorta.explain(run_copy, "slow", by="op")
    assert from_ds.equals(from_path) and from_ds.iloc[0]["item"] == "injected"


def test_an_old_metrics_cache_is_recomputed(run_copy):
    aorta.load_run(run_copy, traces=True)
    cache = run_copy / "cells/slow/trial_0000/trace" / METRICS_CACHE
    doc = json.loads(cache.read_text())
    doc["key"]["version"] = 1
    for key in ("items", "steps"):
        doc["result"].pop(key)
    cache.write_text(json.dumps(doc))
    d = aorta.explain(run_copy, "slow", by="op")
    assert d.attrs["trials"]["cell"] == [0, 1, 2, 3]
    assert json.loads(cache.read_text())["key"]["version"] == trace_metrics.TRACE_METRICS_VERSION


def test_an_executor_gives_what_the_default_path_gives(run_copy, tmp_path):
    other = tmp_path / "again"
    shutil.copytree(run_copy, other)
    default = aorta.load_run(run_copy, traces=True, trace_workers=1)
    with ProcessPoolExecutor(max_workers=2) as pool:
        pooled = aorta.load_run(other, traces=True, executor=pool)
    names = [v for v in default.data_vars if "rank" in default[v].dims and v != "trace_file"]
    for name in names:
        np.testing.assert_array_equal(default[name].values, pooled[name].values, err_msg=name)
    a = aorta.explain(run_copy, "slow", by="op")
    b = aorta.explain(other, "slow", by="op")
    assert a.equals(b)


#: Where `make dev` installs the `cluster` extra: beside the venv, so that only this test's
#: process has dask (with dask importable, every process that builds an xarray Dataset imports
#: dask.array). A user's environment with the extra installed needs no folder.
CLUSTER_SITE = Path(sys.prefix) / "cluster-extra"
#: The folder goes after the venv's packages (its own copies of pyyaml, psutil, … must not
#: shadow them); LocalCluster's worker processes start with this sys.path.
ON_A_LOCAL_CLUSTER = """
import sys
from pathlib import Path

sys.path.append(sys.argv[3])
import distributed

import aorta

run, out = Path(sys.argv[1]), Path(sys.argv[2])
with (
    distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster,
    distributed.Client(cluster) as client,
):
    got = aorta.explain(run, "slow", by="op", executor=client.get_executor())
    ds = aorta.load_run(run, traces=True, executor=client.get_executor())
got.to_pickle(out)
print(sorted(set(ds.trace_source.values.ravel().tolist())))
"""


def test_a_dask_localcluster_executor_gives_what_the_default_path_gives(run_copy, tmp_path):
    if importlib.util.find_spec("distributed") is None and not CLUSTER_SITE.is_dir():
        pytest.skip("dask.distributed is not installed (the cluster extra)")
    other = tmp_path / "dask"
    shutil.copytree(run_copy, other)
    expected = aorta.explain(run_copy, "slow", by="op", trace_workers=1)
    args = [str(other), str(tmp_path / "got.pkl"), str(CLUSTER_SITE)]
    done = subprocess.run(
        [sys.executable, "-c", ON_A_LOCAL_CLUSTER, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert pd.read_pickle(tmp_path / "got.pkl").equals(expected)
    assert (other / "cells/slow/trial_0003/trace" / METRICS_CACHE).is_file()  # beside the traces
    assert done.stdout.splitlines()[-1] == "['host']"  # every trace read, on the host clock


def test_compare_explain_and_report_where_the_time_went(run_copy, run_cli):
    code, out, _ = run_cli("compare", run_copy, "--explain", "slow", "--by", "op")
    assert code == ExitCode.OK
    assert out.startswith("slow vs base: step +") and out.splitlines()[3].split()[0] == "injected"
    code, out, _ = run_cli("compare", run_copy, "--explain", "slow", "--by", "op", "--json")
    assert code == ExitCode.OK and json.loads(out)["items"][0]["item"] == "injected"
    code, _, err = run_cli("compare", run_copy, "--explain", "nope")
    assert code == ExitCode.USAGE and "no cell 'nope'" in err
    code, _, _ = run_cli("report", run_copy, "--traces", "--html")
    assert code == ExitCode.OK
    report = run_copy / "report"
    md = (report / "report.md").read_text()
    assert "## Where the time went" in md and "### slow" in md and "| injected |" in md
    assert (report / "waterfall_slow.png").is_file()
    assert 'id="time-went"' in (report / "report.html").read_text()
