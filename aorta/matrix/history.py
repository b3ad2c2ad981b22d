"""Many runs as data: the ``run × cell × trial`` Dataset of a history (:func:`load_history`),
its change points (:func:`detect`) and the regression gate (:func:`gate`).

The metric of a history is each trial's step time (or wall clock), or a trace metric of the
runs that recorded ``torch.profiler`` traces (:func:`trace_metric_names`): each trial's value
of the worst rank, read from the trials' metrics caches (:mod:`aorta.matrix.trace_metrics`),
so the drift of the GPU's busy share or of exposed communication across nights has the same
change points and gate as step time.

Finding the runs and reading their files is :mod:`aorta.store.history`'s; the statistics are
:mod:`aorta.matrix.changepoints` (where a series changed) and
:func:`aorta.matrix.stats.compare_groups` (by how much, and the gate), as for one run.

Examples
--------
>>> import tempfile
>>> from aorta.run.sweep import sweep
>>> from aorta.recipe import load_recipe_text
>>> r = load_recipe_text("trials: 2\\ncells: [{name: base, mitigations: [none]}]", command=["true"])
>>> root = tempfile.mkdtemp()
>>> _ = [sweep(r, output=root, progress="none") for _ in range(2)]
>>> ds = load_history([root])
>>> dict(ds.sizes), ds.attrs["metric"]
({'run': 2, 'cell': 1, 'trial': 2}, 'step_time_ms')
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import xarray as xr

from aorta.errors import UsageError
from aorta.matrix.changepoints import DEFAULT_RESAMPLES, can_change, segment
from aorta.matrix.dataset import text_array
from aorta.matrix.load import load_run
from aorta.matrix.stats import DEFAULT_ALPHA, Group, compare_groups, trial_medians, wilson_interval
from aorta.matrix.trace_metrics import trial_results
from aorta.store.history import RunInfo, find_runs, read_results
from aorta.trace.metrics import BUSBW, METRICS, PERF

__all__ = [
    "ChangePoint",
    "GateFinding",
    "HistoryMetric",
    "check_metric",
    "detect",
    "family_level",
    "gate",
    "load_history",
    "median_interval",
    "series_runs",
    "trace_metric_names",
    "worse_when",
]

#: ``step_time_ms``, ``wall_clock_s`` or a trace metric (:func:`trace_metric_names`).
HistoryMetric = str
#: The metrics every run has (the others come from its traces).
RUN_METRICS = ("step_time_ms", "wall_clock_s")
#: Trace metrics a history derives per rank from the trace metrics: what each is, and which
#: way is worse.
DERIVED_TRACE_METRICS: dict[str, tuple[str, str]] = {
    "busy_pct": ("GPU (or host) busy share of the profiled span, %: busy_ms / total_ms", "lower"),
    "trace_step_ms": ("mean ProfilerStep duration in the trace, ms", "higher"),
}
#: The metric of a change point in the failures (the other is the history's own metric).
FAILURE_RATE = "failure_rate"
#: Runs on each side of a change whose trials give its ratio and CI (and the gate's window).
WINDOW = 5
_PASSED, _FAILED = "passed", "failed"


#: The variables of ``results.nc`` each metric reads (beside ``cell`` and ``outcome``).
_WANTED = {"step_time_ms": ("step_time_ms", "warmup_steps"), "wall_clock_s": ("wall_clock_s",)}


@functools.lru_cache(maxsize=4096)
def _median_ranks(n: int, alpha: float) -> tuple[int, int] | None:
    # Distribution-free CI of a median: order statistics (l, n-1-l), 0-based, with
    # P(l < #below median ≤ n-1-l) ≥ 1 - alpha under Binomial(n, 1/2).
    if n < 1:
        return None
    total, cdf, best = 2**n, 0, None
    for j in range(n // 2 + 1):
        cdf += math.comb(n, j)
        if cdf / total > alpha / 2:
            break
        best = j
    return None if best is None else (best, n - 1 - best)


def median_interval(values: np.ndarray, *, alpha: float = DEFAULT_ALPHA) -> tuple[float, float]:
    """Distribution-free ``1 - alpha`` CI of the median of the finite ``values`` (order
    statistics; binomial coverage ≥ ``1 - alpha``); NaN when too few values (< 6 at 95%).

    >>> median_interval(np.arange(20.0))
    (5.0, 14.0)
    >>> median_interval(np.arange(5.0))
    (nan, nan)
    """
    x = np.sort(np.asarray(values, dtype=float))
    x = x[np.isfinite(x)]
    ranks = _median_ranks(int(x.size), alpha)
    return (math.nan, math.nan) if ranks is None else (float(x[ranks[0]]), float(x[ranks[1]]))


def trace_metric_names() -> list[str]:
    """The trace metrics a history takes by name (beside the patterns ``busbw_<collective>_gbps``,
    ``tflops_<family>`` and ``pct_roofline_<family>``).

    >>> [m for m in trace_metric_names() if m.startswith(("busy", "exposed_comm", "trace_step"))]
    ['exposed_comm_ms', 'busy_ms', 'busy_pct', 'trace_step_ms']
    """
    return [*METRICS, *DERIVED_TRACE_METRICS]


def worse_when(metric: str) -> Literal["higher", "lower"]:
    """Which way ``metric`` gets worse: ``higher`` for times, ``lower`` for rates and shares.

    >>> worse_when("step_time_ms"), worse_when("busy_pct"), worse_when("busbw_all_reduce_gbps")
    ('higher', 'lower', 'lower')
    """
    if metric in DERIVED_TRACE_METRICS:
        return "lower" if DERIVED_TRACE_METRICS[metric][1] == "lower" else "higher"
    if metric in METRICS:
        return "lower" if METRICS[metric][2] == "lower" else "higher"
    return "lower" if BUSBW.match(metric) or PERF.match(metric) else "higher"


def check_metric(metric: str) -> None:
    """Raise ``UsageError`` unless a history can read ``metric``.

    >>> check_metric("exposed_comm_ms")
    >>> try:
    ...     check_metric("gemm_tlfops")
    ... except UsageError as exc:
    ...     print(str(exc).split("(")[0], str(exc).split("got ")[1])
    --metric: a history reads step_time_ms, wall_clock_s or a trace metric  'gemm_tlfops'
    """
    if metric in RUN_METRICS or metric in trace_metric_names():
        return
    if BUSBW.match(metric) or PERF.match(metric):
        return
    names = ", ".join(trace_metric_names())
    raise UsageError(
        f"--metric: a history reads step_time_ms, wall_clock_s or a trace metric ({names}, "
        f"busbw_<collective>_gbps, tflops_<family>, pct_roofline_<family>), got {metric!r}"
    )


def _rank_value(metric: str, values: Mapping[str, Any], step: Mapping[str, Any]) -> float:
    if metric == "busy_pct":
        busy, total = values.get("busy_ms"), values.get("total_ms")
        return 100.0 * busy / total if busy is not None and total else math.nan
    if metric == "trace_step_ms":
        us = step.get("step_us")
        return float(us) / 1000.0 if us is not None and step.get("steps") else math.nan
    value = values.get(metric)
    return float(value) if value is not None else math.nan


def _trials(info: RunInfo) -> xr.Dataset:
    """The run's cells × trials with each trial's ``status`` and ``outcome``: what finding its
    traces needs, from ``results.nc`` by h5py when it has one (opening it as a Dataset costs
    ~10× more), else from the records."""
    data = read_results(info.path, variables=("cell", "trial", "status", "outcome"))
    if data is None:
        return load_run(info.path, source="records")
    dims = ("cell", "trial")
    return xr.Dataset(
        {"status": (dims, data["status"]), "outcome": (dims, data["outcome"])},
        coords={"cell": data["cell"], "trial": data["trial"]},
    )


def _trace_arrays(info: RunInfo, metric: str) -> tuple[list[str], np.ndarray, np.ndarray, str]:
    """A run's trace metric per cell × trial: the worst rank's, NaN where a rank's trace is
    unreadable (the rank left out could be the one that matters) or the run has none."""
    ds = _trials(info)
    cells = [str(c) for c in ds.cell.values.tolist()]
    trials = [int(t) for t in ds.trial.values.tolist()]
    values = np.full((len(cells), len(trials)), np.nan)
    results, *_ = trial_results(ds, info.path)
    worst = np.nanmax if worse_when(metric) == "higher" else np.nanmin
    for (cell, trial), doc in results.items():
        ranks = doc.get("ranks") or {}
        if not ranks or any(m.get("source") == "unreadable" for m in ranks.values()):
            continue
        steps = doc.get("steps") or {}
        got = [_rank_value(metric, m, steps.get(r) or {}) for r, m in ranks.items()]
        finite = [v for v in got if math.isfinite(v)]
        if finite:
            values[cells.index(cell), trials.index(trial)] = worst(finite)
    outcome = ds.outcome.transpose("cell", "trial").values.astype(str)
    source = "trace" if np.isfinite(values).any() else "no trace"
    return cells, np.where(outcome == _PASSED, values, np.nan), outcome, source


def _run_arrays(
    info: RunInfo, metric: HistoryMetric
) -> tuple[list[str], np.ndarray, np.ndarray, str]:
    """A run's cells, trial values (cell × trial) and outcomes, and the metric it gave."""
    if metric not in RUN_METRICS:
        return _trace_arrays(info, metric)
    wanted = ("cell", "outcome", *_WANTED[metric])
    data = read_results(info.path, variables=wanted)
    if data is None:
        ds = load_run(info.path, source="records")
        data = {
            "cell": ds.cell.values.astype(str),
            "step_time_ms": ds.step_time_ms.values,
            "warmup_steps": ds.warmup_steps.values,
            "wall_clock_s": ds.wall_clock_s.values,
            "outcome": ds.outcome.values.astype(str),
        }
    outcome = data["outcome"]
    passed = outcome == _PASSED
    source: str = metric
    if metric == "step_time_ms":
        values = trial_medians(data["step_time_ms"], data["warmup_steps"])
        if not np.isfinite(values[passed]).any():
            if "wall_clock_s" not in data:  # read only when the run has no step times
                data.update(read_results(info.path, variables=("wall_clock_s",)) or {})
            values, source = data["wall_clock_s"] * 1000.0, "wall_clock_ms"
    else:
        values = np.asarray(data["wall_clock_s"], dtype=float)
    values = np.where(passed, values, np.nan)
    return [str(c) for c in data["cell"]], values, outcome, source


def load_history(
    roots: Sequence[str | Path],
    *,
    metric: HistoryMetric = "step_time_ms",
    alpha: float = DEFAULT_ALPHA,
) -> xr.Dataset:
    """Every run under ``roots`` as one Dataset, ``run × cell × trial``, runs in series and
    start-time order.

    Parameters
    ----------
    roots
        Folders holding run directories at any depth (a ``triage_results/`` tree, a CI
        artifact store), or run directories.
    metric
        ``step_time_ms`` (each trial's median post-warm-up step; a run whose trials have no
        step times gives its wall clock in ms, named in ``metric_source``),
        ``wall_clock_s``, or a trace metric (:func:`trace_metric_names`: ``busy_pct``,
        ``exposed_comm_ms``, ``total_comm_ms``, ``trace_step_ms`` …) of the runs that
        recorded profiler traces — each trial's worst rank; ``metric_source`` is ``trace``,
        or ``no trace`` for a run without (its values NaN).
    alpha
        The per-run CIs are at ``1 - alpha``.

    Returns
    -------
    xarray.Dataset
        ``value`` (run, cell, trial): the metric of each trial that passed (NaN otherwise);
        ``failed`` (run, cell, trial): 1 failed, 0 passed, -1 did not count (errored, did not
        run, missing); per run × cell ``median`` with ``median_low``/``median_high`` (order
        statistics), ``n_timed``, ``n_ran``, ``n_failed``, ``failure_rate`` with
        ``failure_low``/``failure_high`` (Wilson). Coordinates along ``run``: ``series``
        (``<ticket>/<workload>``), ``started_at``, ``run_status``, ``recipe_sha256``,
        ``metric_source``; ``run`` is the run directory's path. A cell a run lacks is NaN / -1.

    Raises
    ------
    UsageError
        A root that does not exist, no run directory under ``roots``, or a metric a
        history cannot read (:func:`check_metric`).

    See Also
    --------
    detect : the change points of each series.
    gate : whether the newest run of each series regressed.
    """
    check_metric(metric)
    runs = find_runs(roots)
    if not runs:
        raise UsageError(f"no aorta run directory under {', '.join(map(str, roots))}")
    tables = [_run_arrays(r, metric) for r in runs]
    cells: list[str] = []
    for names, *_ in tables:
        cells += [c for c in names if c not in cells]
    width = max(max((v.shape[1] for _, v, _, _ in tables), default=0), 1)
    value = np.full((len(runs), len(cells), width), np.nan)
    failed = np.full(value.shape, -1, dtype=np.int8)
    index = {c: i for i, c in enumerate(cells)}
    for r, (names, values, outcome, _) in enumerate(tables):
        at = [index[c] for c in names]
        value[r, at, : values.shape[1]] = values
        codes = np.where(outcome == _FAILED, 1, np.where(outcome == _PASSED, 0, -1))
        failed[r, at, : values.shape[1]] = codes
    ds = xr.Dataset(
        {
            "value": (("run", "cell", "trial"), value),
            "failed": (("run", "cell", "trial"), failed),
        },
        coords={
            "run": text_array([str(r.path) for r in runs]),
            "cell": text_array(cells),
            "trial": np.arange(width),
            "series": ("run", text_array([r.series for r in runs])),
            "started_at": ("run", text_array([r.started_at for r in runs])),
            "run_status": ("run", text_array([r.status for r in runs])),
            "recipe_sha256": ("run", text_array([r.recipe_sha256 for r in runs])),
            "metric_source": ("run", text_array([t[3] for t in tables])),
        },
        attrs={"metric": metric, "alpha": alpha},
    )
    return _per_run(ds, alpha)


def _per_run(ds: xr.Dataset, alpha: float) -> xr.Dataset:
    value, failed = ds.value.values, ds.failed.values
    n_timed = np.isfinite(value).sum(axis=-1)
    n_ran = (failed >= 0).sum(axis=-1)
    n_failed = (failed == 1).sum(axis=-1)
    ordered = np.sort(value, axis=-1)  # NaN last
    median = trial_medians(value, 0)
    low = np.full(median.shape, np.nan)
    high = np.full(median.shape, np.nan)
    for n in np.unique(n_timed):
        ranks = _median_ranks(int(n), alpha)
        if ranks is None:
            continue
        where = n_timed == n
        low[where] = ordered[where][:, ranks[0]]
        high[where] = ordered[where][:, ranks[1]]
    rate = np.where(n_ran > 0, n_failed / np.maximum(n_ran, 1), np.nan)
    flo = np.full(rate.shape, np.nan)
    fhi = np.full(rate.shape, np.nan)
    for idx in zip(*np.nonzero(n_ran > 0), strict=True):
        flo[idx], fhi[idx] = wilson_interval(int(n_failed[idx]), int(n_ran[idx]), alpha=alpha)
    dims = ("run", "cell")
    out: xr.Dataset = ds.assign(
        median=(dims, median),
        median_low=(dims, low),
        median_high=(dims, high),
        n_timed=(dims, n_timed),
        n_ran=(dims, n_ran),
        n_failed=(dims, n_failed),
        failure_rate=(dims, rate),
        failure_low=(dims, flo),
        failure_high=(dims, fhi),
    )
    return out


def series_runs(ds: xr.Dataset) -> dict[str, dict[str, list[int]]]:
    """``{series: {cell: [run positions in time order]}}``: the runs of each series that hold
    the cell (a trial that counted for timing or failures)."""
    out: dict[str, dict[str, list[int]]] = {}
    series = ds.series.values.astype(str)
    counted = (ds.failed.values >= 0).any(axis=-1)
    for s in dict.fromkeys(series):
        rows = np.flatnonzero(series == s)
        out[s] = {
            str(c): [int(r) for r in rows if counted[r, j]]
            for j, c in enumerate(ds.cell.values)
            if counted[rows, j].any()
        }
    return out


@dataclass(frozen=True)
class ChangePoint:
    """Where a series' level changed: the last run of the earlier segment (``before``), the
    first of the later (``after``), which way, by how much, and what changed with it."""

    series: str
    cell: str
    #: The metric whose level changed: the one the history analysed (``step_time_ms``,
    #: ``wall_clock_s``, ``busy_pct`` …, its ``attrs["metric"]``), or ``failure_rate``.
    metric: str
    before: str
    after: str
    #: ``slower`` / ``faster`` (``higher`` / ``lower`` for a trace metric) /
    #: ``more_failures`` / ``fewer_failures``.
    direction: str
    #: The permutation p of the split, and the level it passed (``alpha / m``).
    p: float
    level: float
    #: Median of the later window over the earlier (step time), with its CI and band verdict.
    ratio: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    band: str = ""
    #: Failures / trials that ran, earlier and later window (failure rate).
    failures: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))
    #: Run positions (in the Dataset) of the two runs around the change.
    positions: tuple[int, int] = (0, 0)
    environment_changes: dict[str, Any] = field(default_factory=dict)
    #: Whether the change made things worse (slower, more failures, a lower busy share …).
    worse: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``aorta history --json`` prints."""
        (fb, rb), (fa, ra) = self.failures
        out: dict[str, Any] = {
            "series": self.series,
            "cell": self.cell,
            "metric": self.metric,
            "before": self.before,
            "after": self.after,
            "direction": self.direction,
            "worse": self.worse,
            "p": self.p,
            "level": self.level,
        }
        if self.metric != FAILURE_RATE:
            out.update(ratio=_num(self.ratio), ci=[_num(self.ci[0]), _num(self.ci[1])])
            out["band"] = self.band
        else:
            out["failure_rates"] = [fb / rb if rb else None, fa / ra if ra else None]
        out["failures"] = [[fb, rb], [fa, ra]]
        out["environment_changes"] = self.environment_changes
        return out


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _words(metric: str, difference: str) -> str:
    """A comparison's ``slower``/``faster`` (the ratio above / below 1) in the metric's own
    words: a trace metric is ``higher`` or ``lower``."""
    if metric in RUN_METRICS:
        return difference
    return {"slower": "higher", "faster": "lower"}.get(difference, difference)


def _worse(metric: str, difference: str) -> bool:
    """Whether ``difference`` (``slower``: the ratio above 1) is the metric getting worse."""
    return difference == ("slower" if worse_when(metric) == "higher" else "faster")


def _window(ds: xr.Dataset, rows: Sequence[int], cell: str) -> Group:
    j = _cell_index(ds, cell)
    values = ds.value.values[list(rows), j].ravel()
    failed = ds.failed.values[list(rows), j].ravel()
    return Group(cell, values, failures=int(np.sum(failed == 1)), ran=int(np.sum(failed >= 0)))


def _cell_index(ds: xr.Dataset, cell: str) -> int:
    # Positional, not .sel: a history has hundreds of windows and xarray's label lookup
    # costs more than the numbers.
    return int(np.flatnonzero(ds.cell.values == cell)[0])


def _series_threshold(thresholds: Mapping[str, float], series: str) -> float:
    return float(thresholds.get(series, 1.15))


def family_level(ds: xr.Dataset, alpha: float) -> float:
    """The level of each change-point test of a history: ``alpha / m``, m the series × cells
    × metrics (the history's, ``failure_rate``) with two runs or more that
    :func:`~aorta.matrix.changepoints.can_change` (Bonferroni: any false alarm at most
    ``alpha``). A constant series — no trial failed in any night, or every one did — has
    p = 1 under every run order and would only halve the others' level: it is left out.
    Still valid: whether a series is constant depends on its trials' values, not their
    order, so given it each counted test keeps its level under run-order permutation.

    >>> ds = xr.Dataset(
    ...     {"value": (("run", "cell", "trial"), np.arange(6.0).reshape(3, 2, 1)),
    ...      "failed": (("run", "cell", "trial"), np.zeros((3, 2, 1), dtype=np.int8))},
    ...     coords={"cell": ["a", "b"], "series": ("run", ["s", "s", "s"])})
    >>> family_level(ds, 0.05)  # 2 cells' step times; their failure rates are always 0
    0.025
    """
    name = str(ds.attrs.get("metric", "step_time_ms"))
    tested = 0
    for cells in series_runs(ds).values():
        for cell, rows in cells.items():
            if len(rows) > 1:
                series = _metric_series(ds, rows, cell, name)
                tested += sum(can_change(runs) for runs in series.values())
    return alpha / max(tested, 1)


def _metric_series(
    ds: xr.Dataset, rows: Sequence[int], cell: str, name: str
) -> dict[str, list[np.ndarray]]:
    """A cell's series of runs ``rows`` per metric: the history's own (``name``: the finite
    values) and ``failure_rate`` (1 per failed trial, 0 per trial that ran)."""
    j = _cell_index(ds, cell)
    value = ds.value.values[list(rows), j]
    failed = ds.failed.values[list(rows), j]
    return {
        name: [v[np.isfinite(v)] for v in value],
        FAILURE_RATE: [f[f >= 0].astype(float) for f in failed],
    }


def detect(
    ds: xr.Dataset,
    *,
    alpha: float = DEFAULT_ALPHA,
    thresholds: Mapping[str, float] | None = None,
    resamples: int | None = None,
    seed: int = 0,
) -> list[ChangePoint]:
    """The change points of every series × cell × metric (the history's own —
    ``ds.attrs["metric"]``, which each change point names — and ``failure_rate``) of a
    :func:`load_history` Dataset, by :func:`aorta.matrix.changepoints.segment` at level
    ``alpha / m`` (m: the series × cells × metrics tested, a constant one left out:
    :func:`family_level`), so that the chance of any change
    point in a history where nothing changed is at most ``alpha``.

    Each change point's ratio, CI and band (``thresholds``: each series' band, default 1.15)
    compare the trials of up to :data:`WINDOW` runs after the change with as many before, by
    :func:`aorta.matrix.stats.compare_groups`; its ``environment_changes`` are left empty (the
    caller diffs the two runs' snapshots).

    Raises ``ValueError`` for ``alpha`` outside (0, 1).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    thresholds = thresholds or {}
    runs = [(s, c, rows) for s, cells in series_runs(ds).items() for c, rows in cells.items()]
    level = family_level(ds, alpha)
    # Enough permutations that the smallest p is a quarter of the level (most tests stop
    # after one batch: only a real change draws them all).
    resamples = resamples or max(DEFAULT_RESAMPLES, math.ceil(4 / level))
    names = ds.run.values.astype(str)
    name = str(ds.attrs.get("metric", "step_time_ms"))
    found: list[ChangePoint] = []
    for s, cell, rows in runs:
        if len(rows) < 2:
            continue
        for metric, series in _metric_series(ds, rows, cell, name).items():
            if not can_change(series):
                continue  # p = 1 whatever the order; not counted in the level either
            splits = segment(series, level=level, resamples=resamples, seed=seed)
            edges = [0, *(k for k, _ in splits), len(rows)]
            for i, (k, p) in enumerate(splits):
                lo, hi = max(edges[i], k - WINDOW), min(edges[i + 2], k + WINDOW)
                before = _window(ds, rows[lo:k], cell)
                after = _window(ds, rows[k:hi], cell)
                found.append(
                    _change(
                        s, cell, metric, (rows[k - 1], rows[k]), names, p, level, before, after,
                        threshold=_series_threshold(thresholds, s), alpha=alpha,
                    )
                )  # fmt: skip
    return found


def _change(
    series: str,
    cell: str,
    metric: str,
    positions: tuple[int, int],
    names: np.ndarray,
    p: float,
    level: float,
    before: Group,
    after: Group,
    *,
    threshold: float,
    alpha: float,
) -> ChangePoint:
    (row,) = compare_groups(
        [after, before], [(0, 1)], threshold=threshold, alpha=alpha, resamples=2_000
    )
    failures = ((before.failures, before.ran), (after.failures, after.ran))
    if metric != FAILURE_RATE:
        med_a, med_b = np.nanmedian(after.finite()), np.nanmedian(before.finite())
        higher = "slower" if med_a > med_b else "faster"
        direction, worse = _words(metric, higher), _worse(metric, higher)
    else:
        rate_a = after.failures / max(after.ran, 1)
        rate_b = before.failures / max(before.ran, 1)
        direction = "more_failures" if rate_a > rate_b else "fewer_failures"
        worse = rate_a > rate_b
    return ChangePoint(
        series=series,
        cell=cell,
        metric=metric,
        before=str(names[positions[0]]),
        after=str(names[positions[1]]),
        direction=direction,
        p=p,
        level=level,
        ratio=row.ratio,
        ci=(row.ci_low, row.ci_high),
        band=row.band,
        failures=failures,
        positions=positions,
        worse=worse,
    )


@dataclass(frozen=True)
class GateFinding:
    """One comparison of the gate: the newest run of a series against a reference."""

    series: str
    cell: str
    newest: str
    #: The metric compared (the history's: ``step_time_ms``, ``busy_pct`` …); failures are
    #: compared beside it (``failures``).
    metric: str
    #: ``previous segment`` (since the last change point), ``previous runs`` (the runs just
    #: before the newest) or ``blessed``.
    against: str
    reference: str
    ratio: float
    ci: tuple[float, float]
    difference: str
    band: str
    failures: str
    tripped: bool

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "series": self.series,
            "cell": self.cell,
            "metric": self.metric,
            "newest": self.newest,
            "against": self.against,
            "reference": self.reference,
            "ratio": _num(self.ratio),
            "ci": [_num(self.ci[0]), _num(self.ci[1])],
            "difference": self.difference,
            "band": self.band,
            "failures": self.failures,
            "tripped": self.tripped,
        }


def gate(
    ds: xr.Dataset,
    changes: Sequence[ChangePoint],
    *,
    blessed: Mapping[str, str] | None = None,
    alpha: float = DEFAULT_ALPHA,
    thresholds: Mapping[str, float] | None = None,
) -> list[GateFinding]:
    """The newest run of each series × cell against its references: the segment before the
    last change point (the newest segment's latest runs, up to :data:`WINDOW`, against as many
    before the change), the runs just before the newest
    (up to :data:`WINDOW`, on the day a change happens, before it can be a change point), and
    the series' ``blessed`` run (``{series: run path}``). One family: Holm across every
    comparison, band CIs Bonferroni-adjusted (:func:`aorta.matrix.stats.compare_groups`).

    A finding trips when the newest run is ``slower`` *and* ``beyond band`` (for a trace
    metric: ``higher`` or ``lower``, whichever is worse, :func:`worse_when`), or fails more
    (Boschloo, adjusted) — what ``--fail-on-regression`` exits 4 on.
    """
    name = str(ds.attrs.get("metric", "step_time_ms"))
    blessed = blessed or {}
    thresholds = thresholds or {}
    names = ds.run.values.astype(str)
    plans: list[tuple[str, str, str, str, float, list[int], list[int]]] = []
    for s, cells in series_runs(ds).items():
        newest_run = int(np.flatnonzero(ds.series.values.astype(str) == s)[-1])
        for cell, rows in cells.items():
            if not rows or rows[-1] != newest_run:
                continue
            cuts = sorted(
                {rows.index(c.positions[1]) for c in changes if c.series == s and c.cell == cell}
            )
            start = cuts[-1] if cuts else 0
            th = _series_threshold(thresholds, s)
            if cuts:
                prev = cuts[-2] if len(cuts) > 1 else 0
                earlier = rows[max(prev, start - WINDOW) : start]
                latest = rows[start:][-WINDOW:]  # the newest segment's latest runs
                plans.append((s, cell, "previous segment", names[earlier[-1]], th, latest, earlier))
            before = rows[max(start, len(rows) - 1 - WINDOW) : len(rows) - 1]
            if before:
                plans.append((s, cell, "previous runs", names[before[-1]], th, rows[-1:], before))
            ref = blessed.get(s)
            where = np.flatnonzero(names == ref) if ref else np.zeros(0, dtype=int)
            if where.size and int(where[0]) != rows[-1] and int(where[0]) in rows:
                plans.append((s, cell, "blessed", ref or "", th, rows[-1:], [int(where[0])]))  # fmt: skip
    if not plans:
        return []
    groups: list[Group] = []
    for _, cell, *_, now, ref_rows in plans:
        groups += [_window(ds, now, cell), _window(ds, ref_rows, cell)]
    pairs = [(2 * i, 2 * i + 1) for i in range(len(plans))]
    # compare_groups takes one threshold: the family's band is each series' own, so the rows
    # are compared per threshold value and Holm is applied over all of them below.
    results = _compare_by_threshold(groups, pairs, [p[4] for p in plans], alpha)
    out = []
    for (s, cell, against, ref, _, now, _r), row in zip(plans, results, strict=True):
        slower = _worse(name, row.difference) and row.band == "beyond band"
        out.append(
            GateFinding(
                series=s,
                cell=cell,
                metric=name,
                newest=str(names[now[-1]]),
                against=against,
                reference=str(ref),
                ratio=row.ratio,
                ci=(row.ci_low, row.ci_high),
                difference=_words(name, row.difference),
                band=row.band,
                failures=row.failures_vs_baseline,
                tripped=slower or row.failures_vs_baseline == "more",
            )
        )
    return out


def _compare_by_threshold(
    groups: list[Group], pairs: list[tuple[int, int]], thresholds: list[float], alpha: float
) -> list[Any]:
    if len(set(thresholds)) == 1:
        return compare_groups(groups, pairs, threshold=thresholds[0], alpha=alpha, resamples=2_000)
    # Several bands: each pair at the level of the whole family (Bonferroni), one at a time.
    level = alpha / len(pairs)
    return [
        compare_groups(groups, [pair], threshold=th, alpha=level, resamples=2_000)[0]
        for pair, th in zip(pairs, thresholds, strict=True)
    ]
