"""Shared paths and loaders for the trace tests (never writes beside tests/data)."""

from __future__ import annotations

import fcntl
import os
import shutil
from functools import cache
from pathlib import Path

import pytest

import aorta.trace
from aorta.trace import Trace
from tests.processes import only_run_dir, torchrun

DATA = Path(__file__).parent / "data" / "traces"
GOLDEN = DATA / "tracelens_golden"
ALL_TRACES = sorted(p.name for p in DATA.iterdir() if p.name.endswith((".json", ".json.gz")))


@cache
def shipped(*names: str) -> Trace:
    """A shipped trace (or several, as ranks), parsed once per test session, no cache file."""
    return aorta.trace.load([DATA / n for n in names], cache="off")


def profiled_sweep(root: Path, recipe_text: str) -> Path:
    """Run ``recipe_text`` under torchrun (2 ranks, gloo) in ``root``; its run directory."""
    recipe = root / "r.yaml"
    recipe.write_text(recipe_text)
    proc = torchrun(recipe, root / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return only_run_dir(root / "out")


#: The session's shared profiled sweep: race workload, FSDP and DDP cells, 2 trials each,
#: torch.profiler on both ranks (gloo on CPU: host traces, collectives, no GPU kernels).
TWO_RANK_RECIPE = """
workload: race
ticket: TRACES
trials: 2
steps: 4
timeout_per_trial: 120
workload_config: {mode: fsdp, fsdp_shard_size: 4096, num_layers: 2, dtype: float32, model_dim: 64, simulate_compute: true}
collect: [{torch_profiler: {wait: 0, warmup: 1, active: 3}}]
cells:
  - {name: fsdp, mitigations: [none]}
  - {name: ddp, mitigations: [none], workload_config: {mode: ddp}}
"""


def shared_profiled_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`profiled_sweep` of :data:`TWO_RANK_RECIPE`, once per test session, whichever
    xdist worker asks first (a lock in the temp folder the workers share; the others wait).

    A torchrun sweep costs ~45 s of CPU on two cores; the test files that need one share it.
    The run is read-only: take :func:`copy_without_caches` of it before loading its traces
    (that writes caches beside them) or changing files.
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # each worker's basetemp is a child of the session's
    root = base / "shared-two-rank-sweep"
    with open(root.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "run_dir.txt"
        if done.is_file():
            return Path(done.read_text())
        shutil.rmtree(root, ignore_errors=True)  # a worker's failed attempt
        root.mkdir()
        run = profiled_sweep(root, TWO_RANK_RECIPE)
        done.write_text(str(run))
        return run


def copy_without_caches(run: Path, target: Path) -> Path:
    """A copy of a run directory without its trace-metrics caches (so a test re-analyses)."""
    shutil.copytree(run, target, ignore=shutil.ignore_patterns("*.aorta-cache"))
    return target
