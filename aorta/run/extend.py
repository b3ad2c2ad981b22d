"""``aorta sweep extend``: grow a finished run in place (:func:`extend`).

The request is recorded in the run's manifest (``trials_override``, ``extensions``), and the
run is resumed: :func:`aorta.run.sweep.sweep` applies ``trials_override`` to the plan on every
resume, so an interrupted extension finishes like any run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aorta.errors import UsageError
from aorta.run.ranks import DistEnv
from aorta.run.sweep import SweepResult, sweep
from aorta.store.rundir import RunDir, utc_now

__all__ = ["extend", "record_extension"]


def extend(
    run_dir: str | Path,
    *,
    trials: int,
    cells: Sequence[str] | None = None,
    **options: Any,
) -> SweepResult:
    """Grow a run in place: raise the trial count of ``cells`` (default: all) to ``trials``
    and run the new trials, in the same run directory (resumable like any run).

    The extension is recorded in the manifest (``trials_override``, and ``extensions``: when,
    how many, which cells), and ``matrix.md`` says the run was extended. Choosing to add
    trials after seeing the results is *optional stopping*: the p-values of the grown run are
    then optimistic (docs/statistics.md). ``options`` are :func:`sweep`'s (``progress``…).

    Raises
    ------
    UsageError
        Not a run directory, an unknown cell, or ``trials`` not above every chosen cell's
        planned count.
    """
    if DistEnv.from_environ().rank == 0:
        record_extension(run_dir, trials=trials, cells=cells)
    return sweep(resume=run_dir, **options)


def record_extension(run_dir: str | Path, *, trials: int, cells: Sequence[str] | None) -> None:
    """Write :func:`extend`'s request into the run's manifest (rank 0 only)."""
    rd = RunDir.open(run_dir)
    manifest = rd.manifest()
    known = list(manifest.get("cells") or {})
    chosen = list(cells) if cells else known
    unknown = [c for c in chosen if c not in known]
    if unknown:
        raise UsageError(
            f"no cell {', '.join(map(repr, unknown))} in {rd.path} (cells: {', '.join(known)})"
        )
    override = dict(manifest.get("trials_override") or {})
    planned = {}
    for name in chosen:
        try:
            planned[name] = int(json.loads(rd.cell_json(name).read_text()).get("trials") or 0)
        except (OSError, ValueError):
            planned[name] = 0
        planned[name] = max(planned[name], int(override.get(name, 0)))
    if all(trials <= n for n in planned.values()):
        raise UsageError(
            f"--trials {trials} does not add trials: the cells already plan {max(planned.values())}"
        )
    override.update({name: max(trials, n) for name, n in planned.items()})
    extensions = [
        *(manifest.get("extensions") or []),
        {
            "at": utc_now(),
            "trials": trials,
            "cells": list(cells) if cells else [],
            "previous": planned,
        },
    ]
    rd.update_manifest(trials_override=override, extensions=extensions, status="extending")
