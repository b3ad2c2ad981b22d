"""Run directories → the matrix as data: :func:`load_run`, :func:`load_runs`, :func:`load_trials`.

The file-reading edge of :mod:`aorta.matrix`: a run directory's ``cells/*/cell.json``, trial
records, manifest and resolved recipe (or its ``results.nc``) become the Dataset of
:mod:`aorta.matrix.dataset`; with ``traces=True`` the trace metrics of
:mod:`aorta.matrix.trace_metrics` are added.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import xarray as xr

from aorta.errors import RecordWarning, UsageError
from aorta.matrix.dataset import MISSING, build_dataset, text_array, trials_frame, typed_hangs
from aorta.matrix.trace_metrics import add_trace_metrics
from aorta.recipe import load_recipe
from aorta.store.netcdf import read_netcdf, write_netcdf
from aorta.store.rundir import CELL_JSON, MANIFEST, RunDir

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Source",
    "TraceCache",
    "load_run",
    "load_runs",
    "load_trials",
    "run_attrs",
    "stack_runs",
    "write_results",
]


def _read_cells(rd: RunDir) -> list[dict[str, Any]]:
    cells = []
    root = rd.cells_dir
    for path in sorted(root.glob(f"*/{CELL_JSON}")) if root.is_dir() else []:
        try:
            cells.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    cells = [c for c in cells if isinstance(c, dict) and "name" in c]
    return sorted(cells, key=lambda c: (int(c.get("index", 1 << 30)), str(c["name"])))


def run_attrs(path: str | Path) -> dict[str, Any]:
    """The run's attributes: the manifest's fields, plus ``baseline`` and ``threshold`` from
    ``recipe.resolved.yaml`` (or, if that cannot be read, from ``matrix.json``: aorta's
    ``baseline``/``threshold`` or upstream's ``baseline_cell``/``confound.threshold``)."""
    rd = RunDir.open(path)
    attrs = dict(rd.manifest())
    try:
        recipe = load_recipe(rd.recipe_path)
        attrs["baseline"] = recipe.baseline_cell()
        attrs["threshold"] = float(recipe.confound.threshold)
        if recipe.is_adaptive:
            attrs["failure_margin"] = recipe.adaptive_settings.failure_margin
            attrs["max_trials"] = recipe.trials_cap[1]
    except (OSError, UsageError):
        try:
            matrix = json.loads(rd.matrix_json.read_text())
            # aorta's keys, else upstream AORTA's (baseline_cell, confound.threshold).
            confound = matrix.get("confound")
            upstream = confound.get("threshold") if isinstance(confound, dict) else None
            attrs["baseline"] = matrix.get("baseline") or matrix.get("baseline_cell")
            attrs["threshold"] = matrix.get("threshold") or upstream
        except (OSError, ValueError):
            pass
    return attrs


Source = Literal["auto", "records", "netcdf"]
TraceCache = Literal["use", "refresh", "off"]


def load_run(
    path: str | Path,
    *,
    source: Source = "auto",
    traces: bool = False,
    trace_cache: TraceCache = "use",
    trace_workers: int | None = None,
    executor: Executor | None = None,
) -> xr.Dataset:
    """Load a run directory (or a ``results.nc`` file) as an :class:`xarray.Dataset`.

    Parameters
    ----------
    path
        A run directory, or a netCDF file written by :func:`~aorta.store.netcdf.write_netcdf`.
    source
        ``auto``: ``results.nc`` when the run is complete and has one, else the trial
        records; ``records``: always rebuild from ``cells/*/trial_*.json`` (unreadable records
        count as missing trials); ``netcdf``: only ``results.nc``.
    traces
        Also analyse every trial's profiler traces (``collect: [torch_profiler]``) and add
        their metrics — computation, exposed communication, idle time, GEMM TFLOP/s, bus
        bandwidth per collective, the straggler wait — with dims ``cell`` × ``trial`` ×
        ``rank`` (see :mod:`aorta.matrix.trace_metrics`). Trials are analysed in parallel processes,
        once: the results are cached beside the traces. A missing or unreadable trace gives
        NaN and a :class:`~aorta.errors.TraceWarning` naming the file.
    trace_cache
        ``use`` (default), ``refresh`` or ``off``: the trace parse and metrics caches.
    trace_workers
        Processes analysing traces (default: the cores available, at most one per trial).
    executor
        Any :class:`concurrent.futures.Executor` to analyse the trials' traces instead of
        aorta's own processes — e.g. ``dask.distributed.Client(...).get_executor()`` to
        analyse a month of sweeps on a cluster: each task reads one trial's trace files by
        path and returns its small metrics; the caches stay beside the traces (see
        :func:`aorta.matrix.trace_metrics.add_trace_metrics`).

    Returns
    -------
    xarray.Dataset
        Dims ``cell`` × ``trial`` × ``step`` × ``metric`` × ``info_key`` × ``env_var`` (and
        ``rank`` with ``traces=True``); see :mod:`aorta.matrix.dataset` for every variable.
        ``ds.aorta`` gives the common calls.

    Raises
    ------
    UsageError
        ``path`` is neither a run directory nor a netCDF file, or ``source="netcdf"`` and
        there is no ``results.nc``; ``traces=True`` for a netCDF file outside its run
        directory.

    See Also
    --------
    load_runs : several runs along a new dimension.
    load_trials : one row per trial, as a DataFrame.
    aorta.compare : the statistics of a loaded run.

    Examples
    --------
    >>> import tempfile
    >>> from aorta.run.sweep import sweep
    >>> from aorta.recipe import load_recipe_text
    >>> r = load_recipe_text("trials: 2\\ncells: [{name: base, mitigations: [none]}]", command=["true"])
    >>> ds = load_run(sweep(r, output=tempfile.mkdtemp(), progress="none").run_dir)
    >>> ds.status.values.tolist(), ds.attrs["baseline"]
    ([['ok', 'ok']], 'base')
    """
    p = Path(path)
    if p.is_file():
        ds = typed_hangs(read_netcdf(p))
        if not traces:
            return ds
        if not (p.parent / MANIFEST).is_file():
            raise UsageError(f"{p}: trace metrics need the run directory this file belongs to")
        rd = RunDir.open(p.parent)
    else:
        rd = RunDir.open(p)
        nc = rd.results_path
        if source == "netcdf" or (
            source == "auto" and nc.is_file() and rd.manifest().get("status") == "complete"
        ):
            if not nc.is_file():
                raise UsageError(f"{nc}: no such file (the run has not completed)")
            ds = typed_hangs(read_netcdf(nc))
        else:
            unreadable: list[Path] = []
            records = list(rd.trial_records(unreadable=unreadable))
            ds = build_dataset(_read_cells(rd), records, attrs=run_attrs(rd.path))
            if unreadable:
                names = [rd.relative(f) for f in unreadable]
                ds.attrs["unreadable_records"] = json.dumps(names)
                warnings.warn(
                    RecordWarning(
                        f"{rd.path}: {len(names)} trial record(s) could not be read and are left "
                        f"out (as missing trials): {', '.join(names[:5])}"
                        f"{' …' if len(names) > 5 else ''}; `aorta sweep resume` runs them again"
                    ),
                    stacklevel=2,
                )
    if traces:
        ds = add_trace_metrics(
            ds, rd.path, cache=trace_cache, workers=trace_workers, executor=executor
        )
    return ds


_FILL: dict[str, Any] = {
    "status": MISSING,
    "error": "",
    "info": "",
    "passed": False,
    "n_steps": 0,
    "warmup_steps": 0,
    "seed": -1,
    "executed_iterations": -1,
    "env_value": "",
    "env_set": False,
    "mitigations": "",
    "environment": "",
    "cell_id": "",
    "planned_trials": 0,
    "trace_source": "missing",
    "trace_file": "",
    "hang_culprit_ranks": -1,
    "hang_seq": -1,
    "hang_node_cited": False,
    **dict.fromkeys(
        (
            "hang_kind",
            "hang_culprit_hosts",
            "hang_device_line",
            "hang_op",
            "hang_group",
            "hang_frame",
            "hang_summary",
        ),
        "",
    ),
    **dict.fromkeys(("hang_node_hosts", "hang_node_line"), ""),
}


#: The Dataset's dimensions of positions (no coordinate): a trial's culprits, its nodes.
_POSITIONAL = ("culprit", "node")


def load_runs(
    paths: Sequence[str | Path],
    *,
    dim: str = "run",
    labels: Sequence[str] | None = None,
    source: Source = "auto",
    traces: bool = False,
) -> xr.Dataset:
    """Several runs stacked along a new dimension ``dim`` (outer join of cells, trials, steps…).

    Runs that lack a cell or a trial get the padding of a missing trial (``status``
    ``missing``, NaN numbers, ``""`` text). Attributes the runs share are kept; each run's
    ``started_at`` and ``status`` become coordinates along ``dim``.

    Parameters
    ----------
    paths
        Run directories or ``results.nc`` files.
    dim
        Name of the new dimension.
    labels
        One label per run (default: the paths as given).
    source, traces
        As in :func:`load_run`.

    Raises
    ------
    ValueError
        No paths, or ``labels`` of another length or with repeats.

    Examples
    --------
    See Also
    --------
    stack_runs : the same for Datasets already loaded.
    """
    if not paths:
        raise ValueError("load_runs needs at least one path")
    labels = [str(p) for p in paths] if labels is None else [str(x) for x in labels]
    return stack_runs(
        [load_run(p, source=source, traces=traces) for p in paths], dim=dim, labels=labels
    )


def stack_runs(
    datasets: Sequence[xr.Dataset], *, dim: str = "run", labels: Sequence[str]
) -> xr.Dataset:
    """Runs' Datasets stacked along a new dimension ``dim``, as :func:`load_runs` does.

    Raises ``ValueError`` unless ``labels`` are as many as ``datasets`` and distinct.

    Examples
    --------
    >>> from aorta.store.record import TrialRecord
    >>> a = build_dataset([{"name": "x", "trials": 1}],
    ...     [TrialRecord(cell="x", cell_id="", trial=0, status="ok", passed=True)])
    >>> b = build_dataset([{"name": "x", "trials": 2}],
    ...     [TrialRecord(cell="x", cell_id="", trial=1, status="timeout", passed=False)])
    >>> stack_runs([a, b], dim="run", labels=["a", "b"]).status.values.tolist()
    [[['ok', 'missing']], [['missing', 'timeout']]]
    """
    if len(labels) != len(datasets) or len(set(labels)) != len(labels):
        raise ValueError(f"need {len(datasets)} distinct labels, got {list(labels)}")
    # ``culprit`` and ``node`` have no coordinate (a position, not a label): runs whose most
    # culprits or nodes differ would not align. Positions as a coordinate while they stack,
    # so the shorter runs are padded as a trial without any (-1, "", False).
    positional = sorted({d for ds in datasets for d in _POSITIONAL if d in ds.dims})
    datasets = [
        ds.assign_coords({d: np.arange(ds.sizes[d]) for d in positional if d in ds.dims})
        for ds in datasets
    ]
    aligned = xr.align(*datasets, join="outer", exclude=(), fill_value=_FILL)
    per_run: dict[str, list[Any]] = {"started_at": [], "run_status": []}
    for ds in datasets:
        per_run["started_at"].append(str(ds.attrs.get("started_at", "")))
        per_run["run_status"].append(str(ds.attrs.get("status", "")))
    out: xr.Dataset = xr.concat(
        aligned,
        dim=dim,
        data_vars="all",
        coords="different",
        compat="equals",
        join="outer",
        combine_attrs="drop_conflicts",
        fill_value=_FILL,
    )
    out = out.drop_vars(positional).assign_coords(
        {
            dim: (dim, text_array(labels)),
            "started_at": (dim, text_array(per_run["started_at"])),
            "run_status": (dim, text_array(per_run["run_status"])),
        }
    )
    return out


def load_trials(path: str | Path, *, source: Source = "auto", traces: bool = False) -> pd.DataFrame:
    """The tidy view of a run: one row per recorded trial.

    Parameters
    ----------
    path
        A run directory or a ``results.nc`` file.
    source
        As in :func:`load_run`: ``auto``, ``records`` or ``netcdf``.
    traces
        Add the trace metrics (:func:`load_run`), each reduced to its worst rank.

    Returns
    -------
    pandas.DataFrame
        Columns ``cell``, ``trial``, the per-cell coordinates (``mitigations``,
        ``environment``, ``config_*`` …), ``status``, ``passed``, ``error``, ``seed``,
        ``n_steps``, ``warmup_steps``, ``step_time_ms`` (the trial value: median of the
        post-warm-up steps), ``wall_clock_s``, ``elapsed_s`` and ``metric_<name>`` per metric.

    Raises
    ------
    UsageError
        As :func:`load_run`.

    See Also
    --------
    load_run : the same run as a Dataset.
    trials_frame : the same from a Dataset.

    Examples
    --------
    >>> import tempfile
    >>> from aorta.run.sweep import sweep
    >>> from aorta.recipe import load_recipe_text
    >>> r = load_recipe_text("trials: 2\\ncells: [{name: base, mitigations: [none]}]", command=["true"])
    >>> df = load_trials(sweep(r, output=tempfile.mkdtemp(), progress="none").run_dir)
    >>> df[["cell", "trial", "status"]].values.tolist()
    [['base', 0, 'ok'], ['base', 1, 'ok']]
    """
    return trials_frame(load_run(path, source=source, traces=traces))


def write_results(path: str | Path) -> Path:
    """Write the run directory's Dataset, rebuilt from its records, to ``results.nc``."""
    rd = RunDir.open(path)
    return write_netcdf(load_run(rd.path, source="records"), rd.results_path)
