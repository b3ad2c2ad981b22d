"""A history, whole: the runs under some folders, their Dataset, the change points with what
changed in the environment around each, and the gate — what ``aorta history`` prints and
``aorta.history`` returns (:func:`analyze`).

The parts are :mod:`aorta.matrix.history` (Dataset, change points, gate) and, for the files,
:mod:`aorta.store.history` (runs, snapshots, the blessed run) and
:func:`aorta.store.hostenv.environment_changes` (the one diff of snapshots, for nodes and runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from aorta.errors import UsageError
from aorta.matrix.history import (
    ChangePoint,
    GateFinding,
    HistoryMetric,
    detect,
    family_level,
    gate,
    load_history,
    series_runs,
)
from aorta.matrix.stats import DEFAULT_ALPHA
from aorta.store.history import blessed_run, run_snapshots
from aorta.store.hostenv import environment_changes
from aorta.store.rundir import RunDir

__all__ = ["History", "analyze", "history"]


@dataclass(frozen=True)
class History:
    """What :func:`analyze` found: the Dataset, change points, gate findings, the bands and
    blessed runs used, and the level that bounds false alarms."""

    ds: xr.Dataset
    change_points: list[ChangePoint]
    findings: list[GateFinding]
    thresholds: dict[str, float]
    blessed: dict[str, str]
    alpha: float
    #: Each run's environment changes against the run before it in its series.
    run_changes: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def regressed(self) -> list[GateFinding]:
        """The gate findings that trip ``--fail-on-regression``."""
        return [f for f in self.findings if f.tripped]

    def runs(self) -> list[dict[str, Any]]:
        """One entry per run: path, series, start, status, recipe hash, and the environment
        changes against the run before it in its series (``{}`` for the first)."""
        ds = self.ds
        return [
            {
                "run": str(r),
                "series": str(ds.series.values[i]),
                "started_at": str(ds.started_at.values[i]),
                "status": str(ds.run_status.values[i]),
                "recipe_sha256": str(ds.recipe_sha256.values[i]),
                "environment_changes": self.run_changes.get(str(r), {}),
            }
            for i, r in enumerate(ds.run.values)
        ]

    def series(self) -> list[dict[str, Any]]:
        """One entry per series × cell: its runs' medians and CIs, failure rates and CIs."""
        ds = self.ds
        out = []
        for s, cells in series_runs(ds).items():
            for cell, rows in cells.items():
                sub = ds.sel(cell=cell).isel(run=rows)
                out.append(
                    {
                        "series": s,
                        "cell": cell,
                        "threshold": self.thresholds.get(s),
                        "blessed": self.blessed.get(s),
                        "runs": [str(r) for r in sub.run.values],
                        "median": _floats(sub["median"].values),
                        "median_ci": [_floats(sub.median_low.values), _floats(sub.median_high.values)],
                        "failure_rate": _floats(sub.failure_rate.values),
                        "failure_ci": [_floats(sub.failure_low.values), _floats(sub.failure_high.values)],
                        "trials": [int(x) for x in sub.n_ran.values],
                    }
                )  # fmt: skip
        return out

    def to_json(self) -> dict[str, Any]:
        """``{"runs": [...], "series": [...], "change_points": [...], "gate": {...}}``."""
        level = family_level(self.ds, self.alpha)
        return {
            "metric": str(self.ds.attrs.get("metric")),
            "alpha": self.alpha,
            "false_alarm_bound": (
                f"at most {self.alpha:g}: the chance of any change point in this history "
                "if its runs were exchangeable (no change)"
            ),
            "level": level,
            "runs": self.runs(),
            "series": self.series(),
            "change_points": [c.to_dict() for c in self.change_points],
            "gate": {
                "regressed": bool(self.regressed),
                "findings": [f.to_dict() for f in self.findings],
            },
        }


def _floats(values: np.ndarray) -> list[float | None]:
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, dtype=float)]


def _thresholds(ds: xr.Dataset) -> dict[str, float]:
    from aorta.matrix.load import run_attrs

    out: dict[str, float] = {}
    series = ds.series.values.astype(str)
    for s in dict.fromkeys(series):
        newest = str(ds.run.values[np.flatnonzero(series == s)[-1]])
        try:
            threshold = run_attrs(newest).get("threshold")
        except UsageError:
            threshold = None
        out[s] = float(threshold) if isinstance(threshold, (int, float)) else 1.15
    return out


def _snapshots(run: str) -> dict[str, dict[str, Any]]:
    snaps = run_snapshots(run)
    try:
        sha = RunDir.open(run).manifest().get("recipe_sha256")
    except UsageError:
        sha = None
    # The recipe is part of what changed: a run whose recipe differs says so.
    return {host: {**snap, "recipe_sha256": sha} for host, snap in snaps.items()} or {
        "head": {"recipe_sha256": sha}
    }


def analyze(
    roots: Sequence[str | Path],
    *,
    metric: HistoryMetric = "step_time_ms",
    alpha: float = DEFAULT_ALPHA,
    resamples: int | None = None,
    seed: int = 0,
) -> History:
    """Load every run under ``roots``, find each series' change points and what changed in
    the environment with each, and run the gate against the previous segment, the runs just
    before the newest and the blessed run.

    Parameters
    ----------
    roots
        Folders holding run directories at any depth, or run directories.
    metric
        As in :func:`aorta.matrix.history.load_history`.
    alpha
        The history's false-alarm bound (change points) and the gate's level.
    resamples, seed
        Run-order permutations per test at most (default: 4,999, or more where the level
        needs them to reach a quarter of it), and their seed.

    Raises
    ------
    UsageError
        A root that does not exist, no run under ``roots``, ``alpha`` outside (0, 1).

    Examples
    --------
    >>> import tempfile
    >>> from aorta.run.sweep import sweep
    >>> from aorta.recipe import load_recipe_text
    >>> r = load_recipe_text("trials: 3\\ncells: [{name: base, mitigations: [none]}]", command=["true"])
    >>> root = tempfile.mkdtemp()
    >>> _ = [sweep(r, output=root, progress="none") for _ in range(3)]
    >>> h = analyze([root])
    >>> len(h.runs()), h.change_points, h.regressed
    (3, [], [])
    """
    if not 0 < alpha < 1:
        raise UsageError(f"--alpha must be in (0, 1), got {alpha}")
    ds = load_history(roots, metric=metric, alpha=alpha)
    thresholds = _thresholds(ds)
    changes = detect(ds, alpha=alpha, thresholds=thresholds, resamples=resamples, seed=seed)
    run_changes: dict[str, dict[str, Any]] = {}
    series = ds.series.values.astype(str)
    names = ds.run.values.astype(str)
    for s in dict.fromkeys(series):
        previous = None
        for run in names[series == s]:
            now = _snapshots(run)
            run_changes[run] = {} if previous is None else environment_changes(previous, now)
            previous = now
    with_env = []
    for c in changes:
        diff = environment_changes(_snapshots(c.before), _snapshots(c.after))
        with_env.append(dataclasses.replace(c, environment_changes=diff))
    blessed: dict[str, str] = {}
    for s in dict.fromkeys(series):
        newest = Path(str(ds.run.values[np.flatnonzero(series == s)[-1]]))
        found = blessed_run(newest.parent)
        if found is not None:
            blessed[s] = str(found)
    findings = gate(ds, with_env, blessed=blessed, alpha=alpha, thresholds=thresholds)
    return History(ds, with_env, findings, thresholds, blessed, alpha, run_changes)


#: The notebook face's name (``aorta.history(roots)``) for :func:`analyze`.
history = analyze
