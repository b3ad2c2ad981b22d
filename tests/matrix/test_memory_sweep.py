"""Memory per rank from real profiled runs (issue 47): a real torchrun sweep (2 ranks, gloo on
CPU, ``profile_memory: true``) where rank 1 holds 8 MiB more during each step
(tests/memory_hog.py). Each rank's peak from its trace's ``[memory]`` events — checked
against a plain ``json`` reading of the file — lands in ``load_run(traces=True)``,
``compare(metric="peak_allocated_bytes")`` and a finding that names rank 1."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import aorta
from aorta.cli import main
from aorta.errors import ExitCode
from aorta.report.findings import finding_text, run_findings
from tests.processes import only_run_dir, torchrun

pytestmark = pytest.mark.slow

EXTRA = 8 << 20


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("memory")
    recipe = root / "r.yaml"
    recipe.write_text(
        "workload: tests.memory_hog:MemoryHog\ntimeout_per_trial: 300\nsteps: 4\ntrials: 2\n"
        "collect: [{torch_profiler: {wait: 0, warmup: 1, active: 2, profile_memory: true}}]\n"
        "cells:\n"
        "  - {name: baseline, mitigations: [none], workload_config: {extra_mib: 0}}\n"
        "  - {name: hog, mitigations: [none], workload_config: {rank: 1, extra_mib: 8}}\n"
    )
    proc = torchrun(recipe, root / "out", nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run_dir(root / "out")


def _plain_peak(path: Path) -> int:
    """The CPU's peak allocated, read with nothing but gzip and json."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return max(
        e["args"]["Total Allocated"]
        for e in events
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0
    )


def test_trace_memory_agrees_with_a_plain_json_reading(run, capsys):
    path = run / "cells" / "hog" / "trial_0000" / "trace" / "rank1.pt.trace.json.gz"
    assert main(["trace", "memory", str(path), "--json"]) == ExitCode.OK
    [cpu] = json.loads(capsys.readouterr().out)["devices"]
    assert cpu["device"] == "cpu" and cpu["peak_allocated_bytes"] == _plain_peak(path)
    assert cpu["peak_allocated_bytes"] >= EXTRA and cpu["peak_step"].startswith("ProfilerStep#")


def test_load_run_has_each_ranks_peak(run):
    ds = aorta.load_run(run, traces=True)
    peaks = ds.peak_allocated_bytes
    for trial in (0, 1):
        for cell in ("baseline", "hog"):
            for rank in (0, 1):
                path = (
                    run
                    / "cells"
                    / cell
                    / f"trial_{trial:04d}"
                    / "trace"
                    / f"rank{rank}.pt.trace.json.gz"
                )
                assert peaks.sel(cell=cell, trial=trial, rank=rank) == _plain_peak(path)
        hog = peaks.sel(cell="hog", trial=trial)
        assert float(hog.sel(rank=1) - hog.sel(rank=0)) >= EXTRA


def test_compare_and_the_finding_name_the_rank(run):
    ds = aorta.load_run(run, traces=True)
    df = aorta.compare(ds, metric="peak_allocated_bytes")
    assert df.loc["hog", "ratio"] > 1.5  # the worst rank's peak, against the baseline's
    lines = [finding_text(f, style="text") for f in run_findings(ds) if f.kind == "memory"]
    assert len(lines) == 1 and lines[0].startswith("hog: rank 1's peak allocated is"), lines
    assert "above the other ranks' median in 2/2 trials" in lines[0]
