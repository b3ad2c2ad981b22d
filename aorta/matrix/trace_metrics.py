"""Traces in the matrix: each trial's trace metrics as Dataset variables (cell × trial × rank).

A sweep with ``collect: [torch_profiler]`` leaves ``cells/<cell>/trial_NNNN/trace/rank<N>.pt.trace.json.gz``
per rank per trial. :func:`add_trace_metrics` analyses every trial's traces once — one call of
:func:`aorta.trace.metrics.rank_metrics` per trial, trials in parallel processes (``forkserver``,
never ``fork``; as many as the cores this process may use) — and adds:

=========================================  ===================  ==============================
variable                                   dims                 meaning
=========================================  ===================  ==============================
``computation_ms``, ``exposed_comm_ms``,   cell, trial, rank    the time breakdown of the
``exposed_memcpy_ms``, ``busy_ms``,                             profiled window (GPU, or host
``idle_ms``, ``total_ms``,                                      for a trace without GPU events)
``total_comm_ms``
``gemm_tflops``                            cell, trial, rank    Σ GEMM FLOPs / Σ GEMM time
``busbw_<collective>_gbps``                cell, trial, rank    bus bandwidth, one variable per
                                                                collective type seen
``straggler_wait_ms``                      cell, trial, rank    time spent at collectives
                                                                waiting for the last rank
``last_to_enter_pct``                      cell, trial, rank    % of matched collectives
                                                                the rank entered last
``profiled_steps``                         cell, trial, rank    ProfilerStep annotations
``trace_source``                           cell, trial, rank    ``gpu``, ``host``, ``none``,
                                                                ``missing``, ``unreadable``
``trace_file``                             cell, trial, rank    the file, relative to the run
=========================================  ===================  ==============================

Each metric's ``attrs`` give ``long_name``, ``units`` and ``rank_reduction`` (``max`` for times,
``min`` for rates: the worst rank, what :func:`aorta.compare` uses by default).

Caches: each trace's parse is kept beside it (``<file>.aorta-cache``, see
:func:`aorta.trace.load`) and each trial's metrics in ``trace/metrics.aorta-cache`` (JSON, keyed
by the trace files' sizes and mtimes), so a second load reads a few small files. A missing or
unreadable trace gives NaN for its rank, a :class:`~aorta.errors.TraceWarning` naming the file,
and a line in ``ds.attrs["trace_diagnostics"]``; the rest loads.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import xarray as xr

import aorta.trace
from aorta.errors import TraceError, TraceWarning
from aorta.matrix.dataset import build_dataset, text_array
from aorta.matrix.select import DEFAULT_THRESHOLD, is_trace_variable
from aorta.store.metrics_cache import read_cached, write_cached
from aorta.store.record import RAN, TrialRecord, TrialStatus
from aorta.store.rundir import CELL_JSON, RunDir, trace_file_name
from aorta.trace.items import ITEMS_BY, step_items
from aorta.trace.memory import memory_peaks, memory_report
from aorta.trace.metrics import BUSBW, METRICS, PERF, rank_metrics
from aorta.trace.tracelens import read_tracelens

__all__ = [
    "PARALLEL_MIN_BYTES",
    "TRACE_METRICS_VERSION",
    "add_trace_metrics",
    "analyse_trial",
    "available_cores",
    "load_tracelens",
    "rank_files",
    "trace_variables",
    "trial_results",
]

#: Bump when what :func:`analyse_trial` computes changes: older metrics caches are ignored.
#: 2: the per-item per-step tables of :func:`aorta.trace.items.step_items` (``items``, ``steps``).
#: 3: the perf-model metrics (``perf_coverage``, ``tflops_<family>``, ``pct_roofline_<family>``).
#: 4: ``last_to_enter_pct`` (who entered each matched collective last).
#: 5: the perf model's op times count fills (memsets) and rows group by strides and types.
#: 6: ``peak_allocated_bytes`` / ``peak_reserved_bytes`` from the ``[memory]`` events.
TRACE_METRICS_VERSION = 6
_RANK_FILE = re.compile(r"^rank(\d+)(?:\.pt\.trace)?\.json(?:\.gz)?$")
_NO_TRACE_STATUSES = ("missing", "did_not_run")
CacheMode = Literal["use", "refresh", "off"]


# --- one trial -------------------------------------------------------------------------------


def rank_files(trace_dir: Path) -> dict[int, Path]:
    """The first profiling cycle's file of each rank in a trial's ``trace/`` folder."""
    if not trace_dir.is_dir():
        return {}
    found = {}
    for path in trace_dir.iterdir():
        match = _RANK_FILE.match(path.name)
        if match and path.is_file():
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def _without_path(message: str, path: Path) -> str:
    for prefix in (f"{path}: ", f"{path.name}: "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def _load(files: Mapping[int, Path], cache: CacheMode) -> tuple[Any, dict[int, str]]:
    """One trace of the readable files, and why each other file could not be read."""
    try:
        return aorta.trace.load(list(files.values()), cache=cache), {}
    except TraceError:
        pass
    bad: dict[int, str] = {}
    for rank, path in files.items():
        try:
            aorta.trace.load(path, cache=cache)
        except TraceError as exc:
            bad[rank] = _without_path(str(exc), path)
    good = [p for r, p in files.items() if r not in bad]
    return (aorta.trace.load(good, cache=cache) if good else None), bad


def analyse_trial(files: Mapping[int, str | Path], *, cache: CacheMode = "use") -> dict[str, Any]:
    """The metrics of one trial's rank traces: a pure function of the files (runs in a worker).

    Parameters
    ----------
    files
        The trace file of each rank (by the rank in its name).
    cache
        The parse cache mode of :func:`aorta.trace.load`.

    Returns
    -------
    dict
        ``{"ranks": {rank: {"source": ..., "file": name, metric: value, ...}}, "problems":
        [[name, why], ...], "steps": {rank: {"steps": n, "step_us": mean}}, "items": {by:
        {rank: [[item, class, µs per step, calls per step], ...]}}}`` — JSON data (NaN as
        ``None``), file names without their folder; ``items`` for each ``by`` of
        :func:`aorta.trace.items.step_items` (what :func:`aorta.explain` reads). An unreadable
        file gives its rank ``source: "unreadable"`` and a problem; the others are analysed
        together (stragglers need every rank).
    """
    paths = {int(r): Path(p) for r, p in files.items()}
    trace, bad = _load(paths, cache)
    ranks: dict[str, dict[str, Any]] = {}
    problems = [[paths[r].name, why] for r, why in sorted(bad.items())]
    for rank in bad:
        ranks[str(rank)] = {"source": "unreadable", "file": paths[rank].name}
    if trace is not None:
        by_path = {str(trace.info(r).path): r for r in trace.ranks}
        table = rank_metrics(trace)
        for rank, path in paths.items():
            if rank in bad:
                continue
            row = table.loc[by_path.get(str(path), rank)].to_dict()
            row |= _memory(path)
            ranks[str(rank)] = {"file": path.name} | {
                k: (v if isinstance(v, str) else None if math.isnan(v) else float(v))
                for k, v in row.items()
            }
    good = (
        {by_path.get(str(p), r): r for r, p in paths.items() if r not in bad}
        if trace is not None
        else {}
    )
    return {"ranks": ranks, "problems": problems} | _items_payload(trace, good)


def _memory(path: Path) -> dict[str, float]:
    """The rank's memory peaks (:func:`aorta.trace.memory.memory_peaks`); NaN where unreadable."""
    try:
        return memory_peaks(memory_report(path))
    except TraceError:
        return {"peak_allocated_bytes": math.nan, "peak_reserved_bytes": math.nan}


def _items_payload(trace: Any, ranks: Mapping[int, int]) -> dict[str, Any]:
    """The per-step item tables of each readable rank (``ranks``: trace rank → file rank)."""
    steps: dict[str, Any] = {}
    items: dict[str, dict[str, list[list[Any]]]] = {by: {} for by in ITEMS_BY}
    if trace is None:
        return {"steps": steps, "items": items}
    for by in ITEMS_BY:
        table = step_items(trace, by=by)  # type: ignore[arg-type]
        for rank, info in table.attrs["steps"].items():
            if rank in ranks:
                steps[str(ranks[rank])] = info
        for rank, rows in table.groupby("rank", sort=True):
            if int(rank) in ranks:
                items[by][str(ranks[int(rank)])] = [
                    [i, c, float(p), float(n)]
                    for i, c, p, n in zip(
                        rows["item"], rows["class"], rows["per_step"], rows["calls"], strict=True
                    )
                ]
    return {"steps": steps, "items": items}


# --- many trials -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    cell: str
    trial: int
    trace_dir: Path
    files: dict[int, Path]
    expected: tuple[int, ...]
    warn_missing: bool


def _cache_key(job: _Job) -> dict[str, Any]:
    stats = {}
    for path in job.files.values():
        st = path.stat()
        stats[path.name] = [st.st_size, st.st_mtime_ns]
    return {"version": TRACE_METRICS_VERSION, "files": stats}


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS says, else cpu_count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _pool_context() -> Any:
    # Never fork: the parent may hold torch, threads or locks. forkserver forks from a clean
    # server process; spawn where there is none.
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _failed(job: _Job, exc: BaseException) -> dict[str, Any]:
    why = f"analysis failed: {type(exc).__name__}: {exc}"
    return {
        "ranks": {str(r): {"source": "unreadable", "file": p.name} for r, p in job.files.items()},
        "problems": [[p.name, why] for p in job.files.values()],
    }


#: Below this much trace JSON to parse (gzip counted at 8×), trials are analysed in this process.
PARALLEL_MIN_BYTES = 64 * 2**20


def _json_bytes(job: _Job) -> int:
    sizes = ((p.stat().st_size, p.name.endswith(".gz")) for p in job.files.values())
    return sum(size * (8 if gz else 1) for size, gz in sizes)


def _serial(jobs: Sequence[_Job], cache: CacheMode) -> Iterable[tuple[_Job, dict[str, Any]]]:
    for job in jobs:
        try:
            yield job, analyse_trial(job.files, cache=cache)
        except Exception as exc:  # a bug in one trial's analysis must not lose the others
            yield job, _failed(job, exc)


def _analyse_all(
    jobs: Sequence[_Job],
    *,
    cache: CacheMode,
    workers: int | None,
    notes: list[str],
    executor: Executor | None = None,
) -> Iterable[tuple[_Job, dict[str, Any]]]:
    """Each job with its result, in parallel processes when there are several jobs and cores,
    or as tasks of ``executor`` when one is given (its workers read the files by path).

    When the pool breaks (a worker killed, or an interpreter that cannot start workers, such
    as a script read from stdin), the trials not done yet are analysed in this process.
    """
    if executor is not None:
        if jobs:
            yield from _submitted(executor, jobs, cache, set())
        return
    if workers is None:  # starting workers costs about a second: worth it for big traces only
        small = sum(_json_bytes(job) for job in jobs) < PARALLEL_MIN_BYTES
        workers = 1 if small else available_cores()
    n = min(workers, len(jobs))
    if n <= 1:
        yield from _serial(jobs, cache)
        return
    done: set[int] = set()
    try:
        with ProcessPoolExecutor(max_workers=n, mp_context=_pool_context()) as pool:
            yield from _submitted(pool, jobs, cache, done)
    except BrokenProcessPool as exc:
        notes.append(f"trace analysis workers failed ({exc}); the rest ran in this process")
        yield from _serial([job for job in jobs if id(job) not in done], cache)


def _submitted(
    pool: Executor, jobs: Sequence[_Job], cache: CacheMode, done: set[int]
) -> Iterable[tuple[_Job, dict[str, Any]]]:
    """Each job run as a task of ``pool``, as they complete; ``done`` collects finished ids."""
    futures = {pool.submit(analyse_trial, job.files, cache=cache): job for job in jobs}
    for future in as_completed(futures):
        job = futures[future]
        try:
            result = future.result()
        except BrokenProcessPool:
            raise
        except Exception as exc:
            result = _failed(job, exc)
        done.add(id(job))
        yield job, result


def _trial_results(
    jobs: Sequence[_Job],
    *,
    cache: CacheMode = "use",
    workers: int | None = None,
    executor: Executor | None = None,
) -> tuple[dict[tuple[str, int], dict[str, Any]], list[str]]:
    """Every job's result (from its metrics cache when valid) and notes on unwritable caches."""
    results: dict[tuple[str, int], dict[str, Any]] = {}
    keys: dict[tuple[str, int], dict[str, Any]] = {}
    todo: list[_Job] = []
    for job in jobs:
        if not job.files:
            results[(job.cell, job.trial)] = {"ranks": {}, "problems": []}
            continue
        key = keys[(job.cell, job.trial)] = _cache_key(job)
        cached = read_cached(job.trace_dir, key) if cache == "use" else None
        if cached is None:
            todo.append(job)
        else:
            results[(job.cell, job.trial)] = cached
    notes: list[str] = []
    analysed = _analyse_all(todo, cache=cache, workers=workers, notes=notes, executor=executor)
    for job, result in analysed:
        results[(job.cell, job.trial)] = result
        if cache != "off" and (
            note := write_cached(job.trace_dir, keys[(job.cell, job.trial)], result)
        ):
            notes.append(note)
    return results, notes


# --- the Dataset -----------------------------------------------------------------------------


def _collected(run_dir: Path) -> dict[str, bool]:
    """Per cell: whether its plan collects torch_profiler traces (from ``cell.json``)."""
    out = {}
    for path in RunDir(run_dir).cells_dir.glob(f"*/{CELL_JSON}"):
        try:
            cell = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        collect = cell.get("collect") or []
        out[str(cell.get("name", path.parent.name))] = any(
            (c.get("name") if isinstance(c, dict) else c) == "torch_profiler" for c in collect
        )
    return out


def _jobs(ds: xr.Dataset, run_dir: Path, world_size: int) -> list[_Job]:
    collects = _collected(run_dir)
    rd = RunDir(run_dir)
    status = ds.status.transpose("cell", "trial").values
    jobs = []
    for i, cell in enumerate(str(c) for c in ds.cell.values.tolist()):
        for j, trial in enumerate(int(t) for t in ds.trial.values.tolist()):
            if status[i, j] in _NO_TRACE_STATUSES:
                continue
            trace_dir = rd.trace_dir(cell, trial)
            files = rank_files(trace_dir)
            warn = collects.get(cell, False) and status[i, j] in RAN
            if files or warn:
                expected = tuple(range(world_size)) if warn else ()
                jobs.append(_Job(cell, trial, trace_dir, files, expected, warn))
    return jobs


def _problems(
    jobs: Sequence[_Job], results: Mapping[tuple[str, int], Mapping[str, Any]]
) -> list[str]:
    """One line per file that was expected and is missing or could not be used."""
    lines = []
    for job in jobs:
        result = results[(job.cell, job.trial)]
        for name, why in result["problems"]:
            lines.append(f"{job.trace_dir / name}: {why}")
        for rank in job.expected:
            if rank not in job.files:
                lines.append(f"{job.trace_dir / trace_file_name(rank)}: no such file")
    return lines


def _variable_attrs(name: str) -> dict[str, str]:
    if match := BUSBW.match(name):
        collective = match.group("collective")
        return {
            "long_name": f"{collective} bus bandwidth",
            "units": "GB/s",
            "rank_reduction": "min",
            "description": f"Σ bytes × nccl-tests bus factor / Σ time of the trial's {collective} calls",
        }
    if match := PERF.match(name):
        family = match.group("family")
        if match.group("kind") == "tflops":
            return {
                "long_name": f"{family} achieved throughput",
                "units": "TFLOP/s",
                "rank_reduction": "min",
                "description": f"Σ FLOPs / Σ kernel time of the trial's {family} ops",
            }
        return {
            "long_name": f"{family} share of the roofline",
            "units": "%",
            "rank_reduction": "min",
            "description": f"Σ roofline time / Σ kernel time × 100 of the trial's {family} ops",
        }
    long_name, units, worse = METRICS[name]
    out = {"long_name": long_name, "rank_reduction": "max" if worse == "higher" else "min"}
    return out | ({"units": units} if units else {})


def trace_variables(
    ds: xr.Dataset,
    results: Mapping[tuple[str, int], Mapping[str, Any]],
    *,
    n_ranks: int,
) -> dict[str, xr.DataArray]:
    """The per-rank DataArrays (dims cell × trial × rank) of the trials' results (``file``: the
    path to show in ``trace_file``)."""
    cells = [str(c) for c in ds.cell.values.tolist()]
    trials = [int(t) for t in ds.trial.values.tolist()]
    names = list(METRICS) + sorted(
        {
            k
            for r in results.values()
            for m in r["ranks"].values()
            for k in m
            if BUSBW.match(k) or PERF.match(k)
        }
    )
    shape = (len(cells), len(trials), n_ranks)
    values = {name: np.full(shape, np.nan) for name in names}
    source = np.full(shape, "missing", dtype=object)
    files = np.full(shape, "", dtype=object)
    for (cell, trial), result in results.items():
        i, j = cells.index(cell), trials.index(trial)
        for rank_text, metrics in result["ranks"].items():
            k = int(rank_text)
            source[i, j, k] = str(metrics.get("source", "missing"))
            files[i, j, k] = str(metrics.get("file") or "")
            for name in names:
                value = metrics.get(name)
                values[name][i, j, k] = np.nan if value is None else value
    dims = ("cell", "trial", "rank")
    out = {
        name: xr.DataArray(v, dims=dims, attrs=_variable_attrs(name)) for name, v in values.items()
    }
    out["trace_source"] = xr.DataArray(
        text_array(source.ravel().tolist(), shape),
        dims=dims,
        attrs={
            "long_name": "trace source",
            "description": "gpu: GPU time breakdown; host: host-side breakdown (no GPU events); "
            "tracelens: a TraceLens report; none: a trace with nothing to break down; "
            "missing: no trace file; unreadable: the file could not be loaded",
        },
    )
    out["trace_file"] = xr.DataArray(
        text_array(files.ravel().tolist(), shape),
        dims=dims,
        attrs={"long_name": "trace file", "description": "relative to the run directory"},
    )
    return out


def trial_results(
    ds: xr.Dataset,
    run_dir: str | Path,
    *,
    cache: CacheMode = "use",
    workers: int | None = None,
    executor: Executor | None = None,
) -> tuple[dict[tuple[str, int], dict[str, Any]], list[str], list[str], int]:
    """Every trial's :func:`analyse_trial` document, from its metrics cache when valid.

    Returns ``(results, problems, notes, world_size)``: ``{(cell, trial): document}`` (file
    names relative to the trial's ``trace/`` folder), one line per expected file that is
    missing or unusable, notes on caches not written, and the run's world size. The options
    are those of :func:`add_trace_metrics`.
    """
    rd = RunDir.open(run_dir)
    world_size = int(rd.manifest().get("world_size") or 1)
    jobs = _jobs(ds, rd.path.absolute(), world_size)
    results, notes = _trial_results(jobs, cache=cache, workers=workers, executor=executor)
    return results, _problems(jobs, results), notes, world_size


def add_trace_metrics(
    ds: xr.Dataset,
    run_dir: str | Path,
    *,
    cache: CacheMode = "use",
    workers: int | None = None,
    executor: Executor | None = None,
) -> xr.Dataset:
    """``ds`` with the trace metrics of every trial of the run in ``run_dir`` (see the module
    docstring), replacing any it had.

    Parameters
    ----------
    ds
        The run's Dataset (:func:`aorta.load_run`).
    run_dir
        The run directory whose ``cells/*/trial_*/trace/`` folders hold the traces.
    cache
        ``use``: parse and metrics caches are read and written; ``refresh``: both rebuilt;
        ``off``: neither read nor written.
    workers
        Processes analysing trials. Default: the cores this process may use, at most one per
        trial — or none (this process) when there is less than :data:`PARALLEL_MIN_BYTES` of
        trace JSON to parse, since starting workers costs about a second. ``1``: this process.
    executor
        Any :class:`concurrent.futures.Executor` (a ``dask.distributed`` client's
        ``get_executor()``, Ray's, an MPI pool) to analyse the trials whose metrics are not
        cached, one task per trial, instead of aorta's own processes (``workers`` is then
        ignored). Each task reads its trial's files by absolute path and returns the small
        metrics document; the caches are written beside the traces by the task (parse cache)
        and by this process (metrics cache), so the workers must see the run directory at the
        same path.

    Warns
    -----
    TraceWarning
        Once per trace file that a trial which ran should have and that is missing or
        unreadable (its rank's values are NaN).
    """
    rd = RunDir.open(run_dir)
    results, problems, notes, world_size = trial_results(
        ds, rd.path, cache=cache, workers=workers, executor=executor
    )
    for line in problems:
        warnings.warn(line, TraceWarning, stacklevel=3)
    for (cell, trial), result in list(results.items()):  # file names → paths in the run
        folder = rd.trace_dir(cell, trial).relative_to(rd.path)
        ranks = {
            r: m | {"file": (folder / m["file"]).as_posix()} if m.get("file") else m
            for r, m in result["ranks"].items()
        }
        results[(cell, trial)] = {**result, "ranks": ranks}
    found = [int(r) for res in results.values() for r in res["ranks"]]
    n_ranks = max([world_size, *(r + 1 for r in found)])
    ds = ds.drop_vars([v for v in ds.data_vars if is_trace_variable(str(v))])
    if "rank" in ds.dims:  # the workloads' own per-rank variables stay, on the traces' ranks
        kept = any("rank" in ds[v].dims for v in ds.data_vars)
        n_ranks = max(n_ranks, ds.sizes["rank"]) if kept else n_ranks
        ds = ds.reindex(rank=np.arange(n_ranks)) if kept else ds.drop_dims("rank")
    variables = trace_variables(ds, results, n_ranks=n_ranks)
    ds = ds.assign(variables).assign_coords(
        rank=xr.Variable("rank", np.arange(n_ranks, dtype=np.int64), {"long_name": "rank"})
    )
    ds.attrs["trace_metrics_version"] = TRACE_METRICS_VERSION
    ds.attrs["trace_run_dir"] = str(rd.path)
    ds.attrs["trace_diagnostics"] = json.dumps(problems + notes, ensure_ascii=False)
    return ds


# --- TraceLens reports -----------------------------------------------------------------------

TraceLensSource = str | Path | Mapping[tuple[Any, ...], str | Path]


def _number(name: str) -> int | None:
    match = re.search(r"(\d+)$", name)
    return int(match.group(1)) if match else None


def _tracelens_layout(root: Path) -> dict[tuple[str, int, int], Path]:
    """``<root>/<cell>/<trial>/[<rank>/]`` → {(cell, trial, rank): report folder}."""
    out: dict[tuple[str, int, int], Path] = {}
    for cell_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for trial_dir in sorted(p for p in cell_dir.iterdir() if p.is_dir()):
            trial = _number(trial_dir.name)
            if trial is None:
                continue
            rank_dirs = {_number(p.name): p for p in trial_dir.iterdir() if p.is_dir()}
            rank_dirs.pop(None, None)
            if any(trial_dir.glob("*.csv")) or not rank_dirs:
                out[(cell_dir.name, trial, 0)] = trial_dir
            for rank, folder in rank_dirs.items():
                out[(cell_dir.name, trial, int(rank))] = folder  # type: ignore[arg-type]
    return out


def _tracelens_entries(source: TraceLensSource) -> dict[tuple[str, int, int], Path]:
    if isinstance(source, str | Path):
        root = Path(source)
        if not root.is_dir():
            raise TraceError(f"{root}: no such directory")
        return _tracelens_layout(root)
    entries = {}
    for key, folder in source.items():
        if not isinstance(key, tuple) or len(key) not in (2, 3):
            raise ValueError(f"keys are (cell, trial) or (cell, trial, rank), got {key!r}")
        cell, trial, rank = (*key, 0) if len(key) == 2 else key
        entries[(str(cell), int(trial), int(rank))] = Path(folder)
    return entries


def load_tracelens(
    source: TraceLensSource,
    *,
    baseline: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    prefix: str | None = None,
) -> xr.Dataset:
    """TraceLens perf reports of a sweep as a Dataset that :func:`aorta.compare` takes.

    Parameters
    ----------
    source
        A folder laid out ``<cell>/<trial>/`` (each trial folder holding one report's CSVs) or
        ``<cell>/<trial>/<rank>/`` (one report per rank); trial and rank folders are numbered
        by the digits they end with (``trial_0003``, ``3``, ``rank1``). Or a mapping
        ``{(cell, trial): folder}`` / ``{(cell, trial, rank): folder}``.
    baseline
        The reference cell (default: the first, in folder or mapping order).
    threshold
        The band of practical equivalence for the verdicts, as a recipe's
        ``confound.threshold``.
    prefix
        Passed to :func:`aorta.trace.read_tracelens` for folders holding several reports.

    Returns
    -------
    xarray.Dataset
        Dims ``cell`` × ``trial`` × ``rank``: ``status`` ``ok`` for every report found
        (``missing`` for gaps), and the trace metrics of :func:`add_trace_metrics` with
        ``trace_source`` ``tracelens`` (``unreadable`` for a folder that is not a report, with
        a :class:`~aorta.errors.TraceWarning`). No step times: compare on a trace metric.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for cell, comm in (("base", 3), ("nccl-tuned", 1)):
    ...     for trial in range(2):
    ...         folder = root / cell / f"trial_{trial}"
    ...         folder.mkdir(parents=True)
    ...         _ = (folder / "gpu_timeline.csv").write_text(
    ...             f"type,time ms\\ncomputation_time,6\\nexposed_comm_time,{comm + trial / 10}\\n")
    >>> ds = load_tracelens(root)
    >>> ds.exposed_comm_ms.sel(rank=0).values.tolist()
    [[3.0, 3.1], [1.0, 1.1]]
    >>> import aorta
    >>> aorta.compare(ds, metric="exposed_comm_ms")["median"].tolist()
    [3.05, 1.05]
    """
    entries = _tracelens_entries(source)
    cells = list(dict.fromkeys(cell for cell, _, _ in entries))
    if not cells:
        raise TraceError(f"{source}: no TraceLens reports found")
    results: dict[tuple[str, int], dict[str, Any]] = {}
    problems: list[str] = []
    for (cell, trial, rank), folder in entries.items():
        result = results.setdefault((cell, trial), {"ranks": {}, "problems": []})
        try:
            frame = read_tracelens(folder, prefix=prefix).metrics()
        except TraceError as exc:
            problems.append(str(exc))
            result["ranks"][str(rank)] = {"source": "unreadable", "file": str(folder)}
            continue
        row = frame.iloc[0].to_dict()
        result["ranks"][str(rank)] = {"file": str(folder)} | {
            k: v if isinstance(v, str) else (None if math.isnan(v) else float(v))
            for k, v in row.items()
        }
    for line in problems:
        warnings.warn(line, TraceWarning, stacklevel=2)
    records = [
        TrialRecord(cell=cell, cell_id="", trial=trial, status=TrialStatus.OK, passed=True)
        for cell, trial in results
    ]
    attrs = {"baseline": baseline or cells[0], "threshold": threshold, "source": "tracelens"}
    ds: xr.Dataset = build_dataset([{"name": c} for c in cells], records, attrs=attrs)
    n_ranks = 1 + max(rank for _, _, rank in entries)
    ds = ds.assign(trace_variables(ds, results, n_ranks=n_ranks))
    ds = ds.assign_coords(rank=("rank", np.arange(n_ranks, dtype=np.int64), {"long_name": "rank"}))
    ds.attrs["trace_diagnostics"] = json.dumps(problems, ensure_ascii=False)
    return ds
