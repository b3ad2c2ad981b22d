"""``aorta sweep extend``: grow a finished run in place.

:func:`record_extension` writes the request into the run's manifest (``trials_override``,
``extensions``); :func:`aorta.run.sweep.sweep` (``resume=RUN, extend_to=N``) records it and
resumes the run, and applies ``trials_override`` to the plan on every later resume too, so an
interrupted extension finishes like any run.

Choosing to add trials after seeing the results is *optional stopping*: the p-values of the
grown run are then optimistic (docs/statistics.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from aorta.errors import UsageError
from aorta.recipe.limits import MAX_TRIALS
from aorta.store.rundir import RunDir, utc_now

__all__ = ["record_extension"]


def record_extension(run_dir: str | Path, *, trials: int, cells: Sequence[str] | None) -> None:
    """Record in the run's manifest that ``cells`` (default: all) grow to ``trials`` trials.

    The run is locked while the request is checked and written: a run another sweep holds
    (:class:`~aorta.store.rundir.RunLocked`, "in use") is left exactly as it was.

    Raises
    ------
    UsageError
        Not a run directory, an unknown cell, ``trials`` outside 1 … :data:`MAX_TRIALS` (the
        recipe's bound) or not above every chosen cell's planned count; ``RunLocked`` when
        another sweep holds the run.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= MAX_TRIALS:
        raise UsageError(f"--trials must be an integer from 1 to {MAX_TRIALS:,}, got {trials!r}")
    rd = RunDir.open(run_dir)
    with rd.lock():
        _record(rd, trials=trials, cells=cells)


def _record(rd: RunDir, *, trials: int, cells: Sequence[str] | None) -> None:
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
            f"--trials {trials} does not add trials: the cells already plan "
            f"{max(planned.values())} (an interrupted extension finishes with: "
            f"aorta sweep resume {rd.path})"
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
