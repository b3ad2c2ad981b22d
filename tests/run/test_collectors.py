"""``collect: [torch_profiler]`` is never silently ignored (issue 24): ``matmul`` profiles its
own steps; ``command`` is told, at the start and per trial, that the command must write the
traces itself (real sweeps, real torch.profiler on CPU)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from aorta.errors import ExitCode
from aorta.recipe import load_recipe_text
from aorta.run.prepare import prepare
from aorta.run.sweep import sweep

MATMUL = """
workload: matmul
trials: 1
steps: 3
workload_config: {m: 32, n: 32, k: 32, iters_per_step: 2, warmup_steps: 1}
collect: [{torch_profiler: {wait: 0, warmup: 1, active: 2}}]
cells: [{name: base, mitigations: [none]}]
"""

PROBE = "mode: probe\ntrials: 1\nmitigation_axis: [none]\ncollect: [torch_profiler]\n"


@pytest.mark.slow
def test_matmul_profiles_its_steps(tmp_path):
    result = sweep(load_recipe_text(MATMUL), output=tmp_path, progress="none")
    assert result.exit_code == ExitCode.OK
    (record,) = result.records
    assert record.status.value == "ok", record.error
    (trace,) = (result.run_dir / "cells" / "base" / "trial_0000" / "trace").iterdir()
    assert trace.name == "rank0.pt.trace.json.gz"
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert any("aten::mm" in str(e.get("name")) for e in events)
    assert "trace/rank0.pt.trace.json.gz" in record.artifacts
    assert not any("collect" in w for w in record.warnings), record.warnings


def test_matmul_asks_nothing_more_of_the_recipe():
    assert not [w for w in prepare(load_recipe_text(MATMUL)).warnings if "collect" in w]


@pytest.mark.slow
def test_command_says_the_command_must_write_the_traces(tmp_path, run_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(PROBE)
    # Before anything runs: the dry run names the workload and where traces must go.
    code, out, err = run_cli("sweep", "run", "--dry-run", "-r", recipe, "--", "true")
    assert code == ExitCode.OK, err
    assert "collect: torch_profiler: workload 'command'" in out
    assert "$AORTA_ARTIFACT_DIR/trace/" in out
    # A trial that wrote no trace says so in its record; one that did, does not.
    result = sweep(load_recipe_text(PROBE, command=["true"]), output=tmp_path, progress="none")
    (record,) = result.records
    assert any("wrote no trace" in w for w in record.warnings), record.warnings
    writes = 'mkdir -p "$AORTA_ARTIFACT_DIR/trace" && echo {} > "$AORTA_ARTIFACT_DIR/trace/rank0.pt.trace.json"'
    result = sweep(
        load_recipe_text(PROBE, command=["bash", "-c", writes]), output=tmp_path, progress="none"
    )
    (record,) = result.records
    assert not any("wrote no trace" in w for w in record.warnings), record.warnings


PROFILED_STEPS = """
import sys, tempfile
import torch
from aorta.run.profiler import StepProfiler
from aorta.run.workload import TrialContext

def profiled(folder):
    ctx = TrialContext(cell="a", trial=0, artifact_dir=folder,
                       collect={"torch_profiler": {"wait": 1, "warmup": 1, "active": 2}})
    with StepProfiler(ctx, total_steps=5) as prof:
        for _ in range(5):
            torch.ones(8, 8) @ torch.ones(8, 8)
            prof.step()
    return len(prof.traces)

first = profiled(tempfile.mkdtemp())
unloaded = "torch._inductor" not in sys.modules and "torch._dynamo" not in sys.modules
lazy_again = torch._inductor.__name__  # the lazy attribute is back: it imports inductor
second = profiled(tempfile.mkdtemp())  # with inductor loaded, torch.profiler's own path
print(first, unloaded, lazy_again, second)
"""


@pytest.mark.slow
def test_a_profiled_trial_does_not_import_inductor():
    # A fresh interpreter: the test process may hold inductor already.
    proc = subprocess.run(
        [sys.executable, "-c", PROFILED_STEPS], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "True", "torch._inductor", "1"]
