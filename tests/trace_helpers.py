"""Shared paths and loaders for the trace tests (never writes beside tests/data)."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

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


def copy_without_caches(run: Path, target: Path) -> Path:
    """A copy of a run directory without its trace-metrics caches (so a test re-analyses)."""
    shutil.copytree(run, target, ignore=shutil.ignore_patterns("*.aorta-cache"))
    return target
