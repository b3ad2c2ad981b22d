"""Nightly runs written as aorta writes them — run directory, manifest, ``host_env.json``,
``results.nc`` from real :class:`~aorta.store.record.TrialRecord` objects — without running a
sweep: the history page's test and ``benchmarks/history.py`` build a month (or a year) of
nights with a known change."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aorta.matrix.dataset import build_dataset
from aorta.store.netcdf import write_netcdf
from aorta.store.record import TrialRecord
from aorta.store.rundir import RunDir, trace_file_name

START = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def snapshot(
    torch: str = "2.12.0", env: Mapping[str, str] | None = None, host: str = "gpu-01"
) -> dict[str, Any]:
    """A host snapshot of the shape :func:`aorta.store.hostenv.snapshot` writes."""
    return {
        "taken_at": "",
        "host": host,
        "kernel": "6.8.0-45-generic",
        "python": "3.11.7",
        "torch": {"version": torch, "cuda": None, "hip": "6.2"},
        "drivers": {"amdgpu": "6.8.5", "rocm": "6.2.0"},
        "distributions": {"torch": torch, "numpy": "2.1.0"},
        "env": dict(env or {}),
    }


def write_night(
    root: Path,
    night: int,
    *,
    cells: int,
    trials: int,
    level: Callable[[int, int], float],
    fail: Callable[[int, int], float] = lambda night, cell: 0.0,
    snap: Mapping[str, Any] | None = None,
    steps: int = 4,
    seed: int = 0,
    trace: Path | None = None,
    noise: float = 0.02,
) -> Path:
    """One complete run of ``cells`` × ``trials``: cell ``c``'s step times around
    ``level(night, c)`` ms (``noise``: 2% per step unless told), a trial failing with ``fail(night, c)``;
    with ``trace``, a copy of that real profiler trace as rank 0's of every trial that passed
    (where a sweep with ``collect: [torch_profiler]`` leaves it)."""
    rng = np.random.default_rng(seed * 100_003 + night)
    rd = RunDir.create(
        root, ticket="NIGHTLY", workload="training", now=START + dt.timedelta(days=night)
    )
    names = [f"cell{c:02d}" for c in range(cells)]
    records = []
    for c, name in enumerate(names):
        for t in range(trials):
            failed = bool(rng.random() < fail(night, c))
            times = level(night, c) * (1 + rng.normal(0, noise, steps))
            records.append(
                TrialRecord(
                    cell=name, cell_id="", trial=t, passed=not failed,
                    status="workload_failed" if failed else "ok",
                    step_times_ms=[] if failed else times.tolist(), warmup_steps=1,
                    main_work_started=True,
                )
            )  # fmt: skip
    started = (START + dt.timedelta(days=night)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    manifest = {"status": "complete", "ticket": "NIGHTLY", "workload": "training",
                "recipe_sha256": "ab" * 32, "started_at": started}  # fmt: skip
    rd.update_manifest(**manifest)
    rd.write_json(rd.host_env_path, dict(snap or snapshot()))
    if trace is not None:
        for record in records:
            if record.passed:
                folder = rd.trace_dir(record.cell, record.trial)
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copy(trace, folder / trace_file_name(0))
    ds = build_dataset(
        [{"name": n, "trials": trials, "index": i} for i, n in enumerate(names)],
        records,
        attrs=manifest,
    )
    write_netcdf(ds, rd.results_path)
    return rd.path
