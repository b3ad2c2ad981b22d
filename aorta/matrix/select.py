"""Selection helpers at the bottom of the matrix: which trials count, one value per trial.

Everything above (:mod:`~aorta.matrix.compare`, :mod:`~aorta.matrix.summary`, the figures of
:mod:`aorta.plot`) picks its numbers out of a run's Dataset through :func:`trial_values`, so a
notebook, the CLI and the figures agree on what a trial's value is.

Examples
--------
>>> import xarray as xr
>>> check_dims(xr.Dataset())
Traceback (most recent call last):
...
ValueError: an aorta Dataset needs a 'cell' dimension; this one has []
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np

from aorta.matrix import stats
from aorta.recipe.blocks import DEFAULT_CONFOUND_THRESHOLD  # not on aorta.recipe's face
from aorta.store.record import outcome_of
from aorta.trace.metrics import BUSBW, METRICS, PERF

if TYPE_CHECKING:
    import xarray as xr

__all__ = [
    "DEFAULT_THRESHOLD",
    "TRACE_VARIABLE_PREFIXES",
    "RankReduction",
    "StepStat",
    "TrialSelection",
    "band_threshold",
    "check_dims",
    "default_metric",
    "is_trace_variable",
    "outcomes",
    "reduce_ranks",
    "trial_values",
]

#: Which trials' values count for timing: ``ok`` (default), ``ran`` (``ok`` and
#: ``workload_failed``), ``all`` (every recorded trial that has a value).
TrialSelection = Literal["ok", "ran", "all"]
#: How a per-rank metric (dims cell × trial × rank) becomes one value per trial: ``worst``
#: (the variable's ``rank_reduction``: the max for times, the min for rates), ``max``,
#: ``min``, ``mean``, ``median``, or a rank number (that rank's value).
RankReduction = Literal["worst", "max", "min", "mean", "median"] | int
#: Which statistic of a trial's post-warm-up steps is its ``step_time_ms`` value: ``median``
#: (default), ``mean``, ``p95`` (the 95th percentile: stalls show here first).
StepStat = Literal["median", "mean", "p95"]
#: The band of practical equivalence when neither the caller nor the run names one: the
#: recipe's own default (``confound.threshold``), defined once there.
DEFAULT_THRESHOLD = DEFAULT_CONFOUND_THRESHOLD
#: Names of the per-rank text variables trace metrics add (besides the metrics themselves).
TRACE_VARIABLE_PREFIXES = ("trace_source", "trace_file")
_BROKEN_TRACE = ("missing", "unreadable")


def check_dims(ds: xr.Dataset) -> None:
    """Raise ``ValueError`` naming the first of ``cell`` / ``trial`` that ``ds`` lacks.

    >>> import xarray as xr
    >>> check_dims(xr.Dataset(coords={"cell": ["a"], "trial": [0]}))
    """
    for dim in ("cell", "trial"):
        if dim not in ds.dims:
            raise ValueError(
                f"an aorta Dataset needs a {dim!r} dimension; this one has {list(ds.dims)}"
            )


def outcomes(ds: xr.Dataset) -> tuple[xr.DataArray, xr.DataArray]:
    """Each trial's outcome (``passed``, ``failed``, ``errored``, ``did_not_run``, ``missing``)
    and failure kind (``workload``, ``hang``, ``crash``, ``""``).

    Read from the Dataset's ``outcome`` / ``failure_kind``; a Dataset written before they were
    recorded gets them from ``status`` (:func:`aorta.store.record.outcome_of`, without knowing
    whether an infrastructure failure's work had started: such trials count as errors).

    >>> import numpy as np, xarray as xr
    >>> ds = xr.Dataset({"status": (("cell", "trial"), np.array([["ok", "timeout", "missing"]], dtype=object))})
    >>> [a.values.tolist() for a in outcomes(ds)]
    [[['passed', 'failed', 'missing']], [['', 'hang', '']]]
    """
    if "outcome" in ds and "failure_kind" in ds:
        return ds.outcome, ds.failure_kind
    status = ds.status.values.astype(str)
    out = np.empty(status.shape, dtype=object)
    kind = np.empty(status.shape, dtype=object)
    for idx, s in np.ndenumerate(status):
        o, k = ("missing", None) if s == "missing" else outcome_of(s)
        out[idx], kind[idx] = o, k or ""
    return ds.status.copy(data=out), ds.status.copy(data=kind)


def band_threshold(ds: xr.Dataset, threshold: float | None = None) -> float:
    """The band's upper edge: ``threshold`` if given, else the run's (``ds.attrs["threshold"]``,
    the recipe's ``confound.threshold``), else :data:`DEFAULT_THRESHOLD`.

    Raises ``ValueError`` when it is not a number > 1.

    >>> import xarray as xr
    >>> band_threshold(xr.Dataset(attrs={"threshold": 1.2})), band_threshold(xr.Dataset(), 1.05)
    (1.2, 1.05)
    """
    value = threshold if threshold is not None else ds.attrs.get("threshold", DEFAULT_THRESHOLD)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"threshold must be a number > 1, got {value!r}") from None
    if not value > 1:
        raise ValueError(f"threshold must be > 1, got {value}")
    return value


def default_metric(ds: xr.Dataset, baseline: str | None = None) -> str:
    """The metric a run is compared on when nobody names one — the matrix's choice, so
    ``matrix.md``, ``aorta compare``, ``aorta report`` and the gate read the same values:
    ``step_time_ms``, or ``wall_clock_s`` when the baseline (default the run's; any cell when
    the run has none) has no step time in a trial that ended ok (a probe's command without a
    ``step_time_regex``: its wall clock is all it has).

    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> def run(steps):
    ...     rec = TrialRecord(cell="a", cell_id="", trial=0, status="ok", passed=True,
    ...                       step_times_ms=steps, wall_clock_s=1.0)
    ...     return build_dataset([{"name": "a", "trials": 1}], [rec], attrs={"baseline": "a"})
    >>> default_metric(run([2.0, 3.0])), default_metric(run([]))
    ('step_time_ms', 'wall_clock_s')
    """
    baseline = baseline if baseline is not None else ds.attrs.get("baseline")
    steps = trial_values(ds, metric="step_time_ms", trials="ok")
    if baseline in [str(c) for c in ds.cell.values.tolist()]:
        steps = steps.sel(cell=baseline)
    return "step_time_ms" if bool(steps.notnull().any()) else "wall_clock_s"


def is_trace_variable(name: str) -> bool:
    """Whether ``name`` is one of the variables trace metrics add
    (:func:`aorta.matrix.trace_metrics.add_trace_metrics`).

    >>> is_trace_variable("exposed_comm_ms"), is_trace_variable("busbw_all_gather_gbps"), is_trace_variable("step_time_ms")
    (True, True, False)
    """
    return (
        name in METRICS
        or name in TRACE_VARIABLE_PREFIXES
        or bool(BUSBW.match(name))
        or bool(PERF.match(name))
    )


def reduce_ranks(ds: xr.Dataset, metric: str, ranks: RankReduction = "worst") -> xr.DataArray:
    """One value per trial of a per-rank variable (dims cell × trial × rank).

    A trial with a rank whose trace is missing or unreadable (``trace_source``) has no value
    of a trace metric: the rank left out could be the one that matters. Otherwise ranks without a value (a
    collective that rank never ran) are skipped.

    Raises ``ValueError`` for an unknown reduction or a rank not in the Dataset.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> ds = xr.Dataset({"idle_ms": (("cell", "trial", "rank"), np.array([[[1.0, 3.0], [2.0, np.nan]]]),
    ...                              {"rank_reduction": "max"})}, coords={"rank": [0, 1]})
    >>> reduce_ranks(ds, "idle_ms").values.tolist(), reduce_ranks(ds, "idle_ms", "mean").values.tolist()
    ([[3.0, 2.0]], [[2.0, 2.0]])
    >>> reduce_ranks(ds, "idle_ms", 1).values.tolist()
    [[3.0, nan]]
    """
    da = ds[metric]
    how = da.attrs.get("rank_reduction", "max") if ranks == "worst" else ranks
    if isinstance(how, int | np.integer) and not isinstance(how, bool):
        if int(how) not in ds["rank"].values.tolist():
            raise ValueError(f"no rank {how} in the Dataset (ranks {ds['rank'].values.tolist()})")
        out: xr.DataArray = da.sel(rank=int(how), drop=True)
    elif how in ("max", "min", "mean", "median"):
        out = getattr(da, str(how))("rank", skipna=True, keep_attrs=True)
    else:
        raise ValueError(
            f"ranks must be 'worst', 'max', 'min', 'mean', 'median' or a rank number, got {ranks!r}"
        )
    if "trace_source" in ds and is_trace_variable(metric):
        out = out.where(~ds.trace_source.isin(list(_BROKEN_TRACE)).any("rank"))
    which = f"rank {how}" if isinstance(how, int | np.integer) else f"{how} over ranks"
    out.attrs = {
        "long_name": f"{da.attrs.get('long_name', metric)} ({which})",
        "ranks": which,
        **({"units": da.attrs["units"]} if "units" in da.attrs else {}),
    }
    return out


def trial_values(
    ds: xr.Dataset,
    *,
    metric: str = "step_time_ms",
    trials: TrialSelection = "ok",
    ranks: RankReduction = "worst",
    stat: StepStat = "median",
) -> xr.DataArray:
    """One value per trial (dims of ``status``), NaN for trials that do not count.

    Parameters
    ----------
    metric
        ``step_time_ms``: the median of the trial's post-warm-up steps; a per-trial
        variable such as ``wall_clock_s`` or ``elapsed_s``; a name along ``metric``
        (a workload metric such as ``tflops``); or a per-rank trace metric such as
        ``exposed_comm_ms`` (``aorta.load_run(run, traces=True)``), reduced over ranks.
    trials
        ``ok`` (default): only trials that passed; ``ran``: passed and failed ones
        (:func:`outcomes`); ``all``: any trial with a value.
    ranks
        For a per-rank metric: see :func:`reduce_ranks` (default ``worst``: the max over
        ranks for times, the min for rates).
    stat
        For ``step_time_ms``: ``median`` (default), ``mean`` or ``p95`` of the post-warm-up
        steps (:func:`aorta.matrix.stats.trial_stat`).

    Raises
    ------
    ValueError
        An unknown ``metric`` (the message lists the choices), ``trials`` or ``ranks``.

    Examples
    --------
    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> ds = build_dataset([{"name": "x", "trials": 2}], [
    ...     TrialRecord(cell="x", cell_id="", trial=0, status="ok", passed=True, step_times_ms=[9.0, 2.0, 4.0], warmup_steps=1),
    ...     TrialRecord(cell="x", cell_id="", trial=1, status="workload_failed", passed=False, step_times_ms=[5.0])])
    >>> trial_values(ds).values.tolist(), trial_values(ds, trials="ran").values.tolist()
    ([[3.0, nan]], [[3.0, 5.0]])
    """
    check_dims(ds)
    per_trial = set(ds.status.dims)
    if stat not in ("median", "mean", "p95"):
        raise ValueError(f"stat must be 'median', 'mean' or 'p95', got {stat!r}")
    if metric == "step_time_ms":
        values = stats.trial_stat(ds.step_time_ms.values, ds.warmup_steps.values, stat=stat)
        da: xr.DataArray = ds.status.copy(data=values)
        da.attrs = {
            "long_name": f"{stat} post-warm-up step time",
            "units": "ms",
        }
    elif metric in ds.data_vars and set(ds[metric].dims) == per_trial:
        da = ds[metric].astype(float)
    elif metric in ds.data_vars and set(ds[metric].dims) == per_trial | {"rank"}:
        da = reduce_ranks(ds, metric, ranks).astype(float)
    elif "metric" in ds.dims and metric in ds.metric.values.tolist():
        da = ds.metrics.sel(metric=metric, drop=True)
        da.attrs = {"long_name": metric}
    else:
        raise ValueError(_unknown_metric(ds, metric, per_trial))
    if trials == "ok":
        keep = ds.status == "ok"
    elif trials == "ran":
        keep = outcomes(ds)[0].isin(["passed", "failed"])
    elif trials == "all":
        keep = ds.status != "missing"
    else:
        raise ValueError(f"trials must be 'ok', 'ran' or 'all', got {trials!r}")
    kept: xr.DataArray = da.where(keep)  # xarray types where() as Any
    return kept


def _unknown_metric(ds: xr.Dataset, metric: str, per_trial: set[str]) -> str:
    choices = ["step_time_ms", "wall_clock_s", "elapsed_s"]
    if "metric" in ds.dims:
        choices += [str(m) for m in ds.metric.values.tolist()]
    choices += [
        str(v)
        for v in ds.data_vars
        if set(ds[v].dims) == per_trial | {"rank"} and ds[v].dtype.kind == "f"
    ]
    hint = (
        " (a trace metric: load the run with load_run(run, traces=True), or pass --traces)"
        if is_trace_variable(metric) and metric not in ds
        else ""
    )
    return f"unknown metric {metric!r}{hint}; choose one of: {', '.join(choices)}"
