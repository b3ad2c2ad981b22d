"""Upstream AORTA's ``matrix.json`` keys, beside aorta's own: scripts written for upstream
read aorta's file unchanged.

:func:`with_upstream_keys` adds to the document :func:`aorta.report.matrix_files.matrix_json`
builds (nothing of aorta's is removed):

* top level — ``baseline_cell``, ``trials_per_cell``, ``steps_per_trial``, ``run_timestamp``,
  ``confound: {threshold, baseline_cell_configured}``;
* per cell — ``passed_count``, ``failed_count``, ``error_count``, ``mean_step_time_ms`` (the
  matrix's mean step) with ``std/min/max/p50/p90/p99_step_time_ms`` over ``step_times_ms``
  (every step of the trials that ran, warm-up included, as upstream; the per-trial values when
  the source is not ``per_step``), ``step_time_source``, ``step_time_ratio`` (cell mean /
  baseline mean, as upstream defines it; shown by no aorta output, whose ratio and confound
  are both the median's), ``mean_wall_clock_sec``, ``exit_status_counts`` (statuses as upstream names
  them: ``workload_setup_failed``), ``resolved_env_vars`` (the cell's overlay, redacted),
  ``error_rate`` (errors / recorded trials), ``unreliable`` (error rate ≥
  :data:`UNRELIABLE_ERROR_RATE`), ``trial_paths`` — and ``confound`` in upstream's vocabulary
  (:func:`upstream_confound`).

Missing numbers are ``null`` (upstream wrote ``0.0``): a script can tell "no timing" from
"zero".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from aorta.matrix.dataset import MISSING
from aorta.matrix.select import DEFAULT_THRESHOLD, outcomes
from aorta.matrix.summary import confound_tag, finite_or_none
from aorta.store.record import TrialStatus
from aorta.store.rundir import trial_relpath
from aorta.store.secrets import redact_env

__all__ = [
    "CONFOUND_VOCABULARY",
    "UNRELIABLE_ERROR_RATE",
    "upstream_confound",
    "with_upstream_keys",
]

#: A cell whose error rate reaches this is flagged ``unreliable`` (upstream's threshold).
UNRELIABLE_ERROR_RATE = 0.10
#: Upstream's ``confound`` tags (``speed (+N%)`` carries the percentage).
CONFOUND_VOCABULARY = ("(baseline)", "-", "no effect", "speed (+N%)", "n/a", "did_not_run", "error")
_PERCENTILES = (50, 90, 99)


def upstream_confound(
    row: Mapping[str, Any], base: Mapping[str, Any], *, is_baseline: bool, threshold: float
) -> tuple[str, float | None]:
    """Upstream's ``confound`` tag and the step-time ratio: the matrix's own
    (:func:`aorta.matrix.summary.confound_tag`), so ``matrix.md`` and ``matrix.json`` agree.

    >>> base = {"n_ok": 4, "n_failed": 4, "n_errors": 0, "did_not_run": 0, "ratio": 1.0,
    ...         "step_source": "per_step", "failure_rate": 0.5}
    >>> upstream_confound({**base, "ratio": 1.2}, base, is_baseline=False, threshold=1.15)
    ('speed (+20%)', 1.2)
    """
    return confound_tag(row, base, is_baseline=is_baseline, threshold=threshold)


def _mean_ratio(row: Mapping[str, Any], base: Mapping[str, Any]) -> float | None:
    """Upstream's ``step_time_ratio``: the cell's mean step over the baseline's, same source."""
    mean, base_mean = finite_or_none(row["mean_step_ms"]), finite_or_none(base["mean_step_ms"])
    if mean is None or not base_mean or row["step_source"] != base["step_source"]:
        return None
    return mean / base_mean


def _step_times(ds: xr.Dataset, cell: str, source: str) -> list[float]:
    """The samples behind the cell's mean step: every step of the trials that ended ok
    (per_step), else each ok trial's value from the cell's source."""
    ran = outcomes(ds)[0].sel(cell=cell).values.astype(str) == "passed"
    if source == "per_step":
        steps = ds.step_time_ms.sel(cell=cell).transpose("trial", "step").values[ran]
        return [float(v) for v in steps.ravel() if math.isfinite(v)]
    if source == "elapsed_per_iter":
        elapsed = ds.elapsed_s.sel(cell=cell).values[ran]
        iters = ds.executed_iterations.sel(cell=cell).values[ran].astype(float)
        values = elapsed * 1000.0 / np.where(iters > 0, iters, np.nan)
    elif source == "wall_clock_total":
        values = ds.wall_clock_s.sel(cell=cell).values[ran] * 1000.0
    else:
        return []
    return [float(v) for v in values if math.isfinite(v)]


def _spread(samples: list[float]) -> dict[str, float | None]:
    if not samples:
        out: dict[str, float | None] = {"std_step_time_ms": None, "min_step_time_ms": None}
        out["max_step_time_ms"] = None
        out.update({f"p{q}_step_time_ms": None for q in _PERCENTILES})
        return out
    arr = np.asarray(samples, dtype=float)
    out = {
        "std_step_time_ms": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "min_step_time_ms": float(arr.min()),
        "max_step_time_ms": float(arr.max()),
    }
    out.update({f"p{q}_step_time_ms": float(np.percentile(arr, q)) for q in _PERCENTILES})
    return out


def _overlay(ds: xr.Dataset, cell: str) -> dict[str, str]:
    if "env_var" not in ds.dims:
        return {}
    names = [str(v) for v in ds.env_var.values]
    values = ds.env_value.sel(cell=cell).values
    is_set = ds.env_set.sel(cell=cell).values
    return redact_env({n: str(v) for n, v, s in zip(names, values, is_set, strict=True) if s})


def _cell_keys(
    entry: Mapping[str, Any],
    row: pd.Series,
    base: pd.Series,
    ds: xr.Dataset,
    *,
    is_baseline: bool,
    threshold: float,
) -> dict[str, Any]:
    cell = str(entry["name"])
    status = [str(s) for s in ds.status.sel(cell=cell).values if str(s) != MISSING]
    counts: dict[str, int] = {}
    for s in status:
        name = TrialStatus(s).upstream_name
        counts[name] = counts.get(name, 0) + 1
    source = str(row["step_source"])
    samples = _step_times(ds, cell, source)
    wall = ds.wall_clock_s.sel(cell=cell).values
    wall = wall[np.isfinite(wall)]
    errors = int(row["n_errors"])
    error_rate = errors / len(status) if status else None
    confound, _ = upstream_confound(row, base, is_baseline=is_baseline, threshold=threshold)
    ratio = _mean_ratio(row, base) if not is_baseline else None
    trials = ds.trial.values[ds.status.sel(cell=cell).values.astype(str) != MISSING]
    return {
        "passed_count": int(row["n_ok"]),
        "failed_count": int(row["n_failed"]),
        "error_count": errors,
        "mean_step_time_ms": finite_or_none(row["mean_step_ms"]),
        **_spread(samples),
        "step_times_ms": samples,
        "step_time_source": source,
        "step_time_ratio": ratio,
        "mean_wall_clock_sec": float(wall.mean()) if wall.size else None,
        "exit_status_counts": dict(sorted(counts.items())),
        "resolved_env_vars": _overlay(ds, cell),
        "error_rate": error_rate,
        "unreliable": bool(
            errors and error_rate is not None and error_rate >= UNRELIABLE_ERROR_RATE
        ),
        "confound": confound,
        "trial_paths": [trial_relpath(cell, int(t)) for t in trials],
    }


def with_upstream_keys(
    doc: Mapping[str, Any], summary: pd.DataFrame, ds: xr.Dataset
) -> dict[str, Any]:
    """``doc`` (a ``matrix.json`` document) with upstream's keys added to it and to each cell
    (see the module docstring); ``summary`` is the frame the document was built from."""
    threshold = float(
        summary.attrs.get("threshold") or ds.attrs.get("threshold") or DEFAULT_THRESHOLD
    )
    baseline = str(doc.get("baseline") or summary.attrs.get("baseline") or "")
    base = summary.loc[baseline] if baseline in summary.index else None
    cells = []
    for entry in doc.get("cells", []):
        row = summary.loc[entry["name"]]
        extra = _cell_keys(
            entry,
            row,
            base if base is not None else row,
            ds,
            is_baseline=entry["name"] == baseline,
            threshold=threshold,
        )
        cells.append({**entry, **extra})
    steps = [int(s) for s in np.unique(ds.n_steps.values) if s > 0] if "n_steps" in ds else []
    out = dict(doc)
    out.update(
        baseline_cell=baseline or None,
        trials_per_cell=int(summary["n_trials"].max()) if len(summary) else 0,
        steps_per_trial=steps[0] if len(steps) == 1 else None,
        run_timestamp=ds.attrs.get("started_at"),
        confound={"threshold": threshold, "baseline_cell_configured": baseline or None},
        cells=cells,
    )
    return out
