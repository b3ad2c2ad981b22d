"""``aorta sweep extend``: grow a finished run in place.

:func:`record_extension` writes the request into the run's manifest (``trials_override``,
``extensions``); :func:`aorta.run.sweep.sweep` (``resume=RUN, extend_to=N``) records it and
resumes the run, and applies ``trials_override`` to the plan on every later resume too, so an
interrupted extension finishes like any run.

Choosing to add trials after seeing the results is *optional stopping*: the p-values of the
grown run are then optimistic (docs/statistics.md).

An adaptive run (``schedule: adaptive``) is different: its verdicts are anytime-valid, made to
be looked at and continued. Extending it raises the cap (``max_trials``) of the chosen cells:
the ones still undecided run on under the same stopping rule (:mod:`aorta.run.adaptive`) until
settled or the new cap, the decided ones stay stopped, and the baseline is raised with them
(their trials pair with its). An extension none of whose cells is undecided is refused: it
could run nothing.
"""

from __future__ import annotations

import json
import shlex
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
    if manifest.get("schedule") == "adaptive":
        chosen = _adaptive_cells(rd, chosen)
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
            f"{rd.command(f'sweep resume {shlex.quote(str(rd.path))}')})"
        )
    override.update({name: max(trials, n) for name, n in planned.items()})
    extensions = [
        *(manifest.get("extensions") or []),
        {
            "at": utc_now(),
            "trials": trials,
            "cells": chosen if cells else [],
            "previous": planned,
        },
    ]
    rd.update_manifest(trials_override=override, extensions=extensions, status="extending")


def _adaptive_cells(rd: RunDir, chosen: list[str]) -> list[str]:
    """The cells an extension of an adaptive run raises: ``chosen`` with the baseline first;
    refused when every chosen cell is decided (as the run's ``matrix.json`` says: a decision
    is never withdrawn, so one that says so stays true)."""
    try:
        doc = json.loads(rd.matrix_json.read_text())
    except (OSError, ValueError):
        return chosen  # no summary to read: the sweep decides as it goes
    states = doc.get("adaptive") if isinstance(doc, dict) else None
    if not isinstance(states, dict):
        return chosen
    decided = {
        str(c): str(v.get("reason", ""))
        for c, v in states.items()
        if isinstance(v, dict) and v.get("decided")
    }
    if all(c in decided for c in chosen):
        said = "; ".join(f"{c}: {decided[c]}" for c in chosen)
        raise UsageError(
            f"{rd.path} is an adaptive run and every chosen cell is decided ({said}): more "
            "trials would run nothing (decided cells stay stopped). Extend an undecided cell, "
            "or run a new sweep with a fixed trial count for more trials of a decided one"
        )
    baseline = doc.get("baseline")
    return [baseline, *chosen] if baseline in states and baseline not in chosen else chosen
