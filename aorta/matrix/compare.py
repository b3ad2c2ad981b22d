"""Compare cells: a run's Dataset in, one row per cell out (:func:`compare`, :func:`compare_runs`).

The numbers come from :mod:`aorta.matrix.stats`; this module picks the trial values out of the
Dataset, forms the comparison family, and lays the results out as a
:class:`pandas.DataFrame` whose ``attrs`` record how they were computed (seed, resamples,
alpha, band, metric). :func:`comparison_table` and :func:`comparison_json` render it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from aorta.errors import IncompleteMatrix
from aorta.matrix import stats

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

__all__ = [
    "COLUMNS",
    "RankReduction",
    "TrialSelection",
    "compare",
    "compare_runs",
    "comparison_json",
    "comparison_table",
    "reduce_ranks",
    "regressions",
    "require_baseline",
    "trial_values",
]

#: Which trials' values count for timing: ``ok`` (default), ``ran`` (``ok`` and
#: ``workload_failed``), ``all`` (every recorded trial that has a value).
TrialSelection = Literal["ok", "ran", "all"]
#: How a per-rank metric (dims cell × trial × rank) becomes one value per trial: ``worst``
#: (the variable's ``rank_reduction``: the max for times, the min for rates), ``max``,
#: ``min``, ``mean``, ``median``, or a rank number (that rank's value).
RankReduction = Literal["worst", "max", "min", "mean", "median"] | int
_BROKEN_TRACE = ("missing", "unreadable")
_TIME_UNITS = ("ms", "s")
_RAN = ("ok", "workload_failed")
_ERRORS = ("setup_failed", "infrastructure_failed", "timeout")

#: The columns of a comparison, in order.
COLUMNS: tuple[str, ...] = (
    "mitigations",
    "environment",
    "n",
    "n_ok",
    "n_failed",
    "n_errors",
    "n_timed",
    "failure_rate",
    "failure_ci_low",
    "failure_ci_high",
    "median",
    "iqr",
    "cv",
    "baseline_median",
    "baseline_failure_rate",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "p",
    "p_method",
    "p_adj",
    "fisher_p",
    "fisher_p_adj",
    "failures_vs_baseline",
    "verdict",
    "trials_needed",
    "note",
)


def _check_dims(ds: xr.Dataset) -> None:
    for dim in ("cell", "trial"):
        if dim not in ds.dims:
            raise ValueError(
                f"an aorta Dataset needs a {dim!r} dimension; this one has {list(ds.dims)}"
            )


def reduce_ranks(ds: xr.Dataset, metric: str, ranks: RankReduction = "worst") -> xr.DataArray:
    """One value per trial of a per-rank variable (dims cell × trial × rank).

    A trial with a rank whose trace is missing or unreadable (``trace_source``) has no value:
    the rank left out could be the one that matters. Otherwise ranks without a value (a
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
        out = da.sel(rank=int(how), drop=True)
    elif how in ("max", "min", "mean", "median"):
        out = getattr(da, str(how))("rank", skipna=True, keep_attrs=True)
    else:
        raise ValueError(
            f"ranks must be 'worst', 'max', 'min', 'mean', 'median' or a rank number, got {ranks!r}"
        )
    if "trace_source" in ds:
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
        ``ok`` (default): only trials that ended ``ok``; ``ran``: ``ok`` and
        ``workload_failed``; ``all``: any trial with a value.
    ranks
        For a per-rank metric: see :func:`reduce_ranks` (default ``worst``: the max over
        ranks for times, the min for rates).

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
    _check_dims(ds)
    per_trial = set(ds.status.dims)
    if metric == "step_time_ms":
        values = stats.trial_medians(ds.step_time_ms.values, ds.warmup_steps.values)
        da = ds.status.copy(data=values)
        da.attrs = {
            "long_name": "median post-warm-up step time",
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
        choices = ["step_time_ms", "wall_clock_s", "elapsed_s"]
        if "metric" in ds.dims:
            choices += [str(m) for m in ds.metric.values.tolist()]
        choices += [
            str(v)
            for v in ds.data_vars
            if set(ds[v].dims) == per_trial | {"rank"} and ds[v].dtype.kind == "f"
        ]
        from aorta.matrix.trace_metrics import is_trace_variable

        hint = (
            " (a trace metric: load the run with load_run(run, traces=True), or pass --traces)"
            if is_trace_variable(metric) and metric not in ds
            else ""
        )
        raise ValueError(f"unknown metric {metric!r}{hint}; choose one of: {', '.join(choices)}")
    if trials == "ok":
        keep = ds.status == "ok"
    elif trials == "ran":
        keep = ds.status.isin(list(_RAN))
    elif trials == "all":
        keep = ds.status != "missing"
    else:
        raise ValueError(f"trials must be 'ok', 'ran' or 'all', got {trials!r}")
    return da.where(keep)


def _counts(status: np.ndarray) -> dict[str, int]:
    s = status.astype(str)
    return {
        "n": int(np.sum((s != "missing") & (s != "did_not_run"))),
        "n_ok": int(np.sum(s == "ok")),
        "n_failed": int(np.sum(s == "workload_failed")),
        "n_errors": int(np.sum(np.isin(s, _ERRORS))),
    }


def _cell_rows(
    ds: xr.Dataset, values: xr.DataArray, *, alpha: float, key_prefix: str = ""
) -> tuple[list[dict[str, Any]], list[stats.Group]]:
    rows, groups = [], []
    status = ds.status.transpose("cell", "trial").values
    vals = values.transpose("cell", "trial").values
    for i, cell in enumerate(ds.cell.values.tolist()):
        counts = _counts(status[i])
        ran = counts["n_ok"] + counts["n_failed"]
        summary = stats.summarize_values(vals[i])
        lo, hi = stats.wilson_interval(counts["n_failed"], ran, alpha=alpha)
        rows.append(
            {
                "cell": cell,
                "mitigations": str(ds.mitigations.values[i]) if "mitigations" in ds.coords else "",
                "environment": str(ds.environment.values[i]) if "environment" in ds.coords else "",
                **counts,
                "n_timed": summary.n,
                "failure_rate": counts["n_failed"] / ran if ran else math.nan,
                "failure_ci_low": lo,
                "failure_ci_high": hi,
                "median": summary.median,
                "iqr": summary.iqr,
                "cv": summary.cv,
            }
        )
        groups.append(stats.Group(f"{key_prefix}{cell}", vals[i], counts["n_failed"], ran))
    return rows, groups


def _frame(
    rows: list[dict[str, Any]],
    results: dict[int, stats.PairResult],
    refs: dict[int, dict[str, Any]],
    *,
    baseline_index: int | None,
    words: tuple[str, str],
) -> pd.DataFrame:
    import pandas as pd

    out = []
    for i, row in enumerate(rows):
        res = results.get(i)
        ref = refs.get(i, {})
        row = {
            **row,
            "baseline_median": ref.get("median", math.nan),
            "baseline_failure_rate": ref.get("failure_rate", math.nan),
        }
        if res is None:
            verdict = "baseline" if i == baseline_index else "no data"
            row.update(
                ratio=1.0 if i == baseline_index else math.nan,
                ratio_ci_low=math.nan,
                ratio_ci_high=math.nan,
                p=math.nan,
                p_method="",
                p_adj=math.nan,
                fisher_p=math.nan,
                fisher_p_adj=math.nan,
                failures_vs_baseline=verdict,
                verdict=verdict,
                trials_needed=None,
                note="",
            )
        else:
            verdict = {"slower": words[0], "faster": words[1]}.get(res.verdict, res.verdict)
            row.update(
                ratio=res.ratio,
                ratio_ci_low=res.ci_low,
                ratio_ci_high=res.ci_high,
                p=res.p,
                p_method=res.p_method,
                p_adj=res.p_adj,
                fisher_p=res.fisher_p,
                fisher_p_adj=res.fisher_p_adj,
                failures_vs_baseline=res.failures_vs_baseline,
                verdict=verdict,
                trials_needed=res.trials_needed,
                note=res.note,
            )
        out.append(row)
    df = pd.DataFrame(out, columns=["cell", *COLUMNS]).set_index("cell")
    df["trials_needed"] = df["trials_needed"].astype("Int64")
    return df


def _attrs(
    *,
    metric: str,
    units: str,
    trials: str,
    alpha: float,
    threshold: float,
    seed: int,
    resamples: int,
    family: int,
    baseline: str,
    values: xr.DataArray | None = None,
) -> dict[str, Any]:
    level = alpha / max(family, 1)
    value = "median of post-warm-up steps" if metric == "step_time_ms" else f"{metric} per trial"
    if values is not None and "ranks" in values.attrs:
        value += f", {values.attrs['ranks']}"
    return {
        "metric": metric,
        "units": units,
        "trial_value": value,
        "trials": trials,
        "baseline": baseline,
        "alpha": alpha,
        "ci_level": 1 - alpha,
        "threshold": threshold,
        "band": [1 / threshold, threshold],
        "seed": seed,
        "resamples": resamples,
        "test": "Mann–Whitney U, two-sided, exact; permutation test where values tie",
        "adjustment": "Holm",
        "family_size": family,
        "min_trials": stats.trials_for_level(level),
    }


def _words(da: xr.DataArray) -> tuple[str, str]:
    return ("slower", "faster") if da.attrs.get("units") in _TIME_UNITS else ("higher", "lower")


def _threshold(ds: xr.Dataset, threshold: float | None) -> float:
    value = threshold if threshold is not None else ds.attrs.get("threshold", 1.15)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"threshold must be a number > 1, got {value!r}") from None
    if not value > 1:
        raise ValueError(f"threshold must be > 1, got {value}")
    return value


def compare(
    ds: xr.Dataset,
    baseline: str | None = None,
    *,
    metric: str = "step_time_ms",
    alpha: float = 0.05,
    threshold: float | None = None,
    trials: TrialSelection = "ok",
    ranks: RankReduction = "worst",
    seed: int = stats.DEFAULT_SEED,
    resamples: int = stats.DEFAULT_RESAMPLES,
) -> pd.DataFrame:
    """Every cell of a run against its baseline cell.

    Each trial is one value (``metric``; by default the median of its post-warm-up step
    times). Per cell: trial counts, failure rate with its Wilson interval, median, IQR, CV.
    Against the baseline: the ratio of medians with a seeded bootstrap CI, the exact
    Mann–Whitney p (Holm-adjusted across cells), Fisher's exact test on failures
    (Holm-adjusted), and a verdict. See :mod:`aorta.matrix.stats` and ``docs/statistics.md``.

    Parameters
    ----------
    ds
        A run's Dataset (:func:`aorta.load_run`).
    baseline
        The reference cell (default: ``ds.attrs["baseline"]``, the recipe's).
    metric
        ``step_time_ms``, ``wall_clock_s``, ``elapsed_s``, a workload metric name, or a trace
        metric of ``aorta.load_run(run, traces=True)`` such as ``exposed_comm_ms``.
    alpha
        Significance level of the tests; the CIs are at ``1 - alpha``.
    threshold
        The band of practical equivalence is ``[1/threshold, threshold]`` (default: the
        recipe's ``confound.threshold``, ``ds.attrs["threshold"]``).
    trials
        Which trials' values count for timing: ``ok``, ``ran`` or ``all``.
    ranks
        How a per-rank trace metric becomes one value per trial (:func:`reduce_ranks`):
        ``worst`` (default: max over ranks for times, min for rates), ``max``, ``min``,
        ``mean``, ``median`` or a rank number.
    seed, resamples
        The bootstrap's seed and number of resamples (both recorded in ``attrs``).

    Returns
    -------
    pandas.DataFrame
        One row per cell (index ``cell``), columns :data:`COLUMNS`. ``verdict`` is one of
        ``baseline``, ``slower``, ``faster`` (``higher``/``lower`` for metrics that are not
        times), ``no change``, ``inconclusive``, ``no data``; ``failures_vs_baseline`` one of
        ``baseline``, ``more``, ``fewer``, ``not significant``, ``no data``. ``attrs`` record
        metric, units, alpha, band, seed, resamples, the family size and ``min_trials``.

    Raises
    ------
    ValueError
        Unknown ``baseline`` cell, ``metric`` or ``trials``; ``alpha`` outside (0, 1);
        ``threshold`` ≤ 1; a Dataset without the ``cell`` / ``trial`` dims.

    See Also
    --------
    compare_runs : the same cells of two runs.

    Examples
    --------
    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> times = {"base": [10.0, 10.2, 9.9, 10.1, 10.03], "slow": [13.0, 13.4, 12.9, 13.1, 13.2]}
    >>> ds = build_dataset([{"name": c, "trials": 5} for c in times],
    ...     [TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True, step_times_ms=[v])
    ...      for c, vs in times.items() for t, v in enumerate(vs)],
    ...     attrs={"baseline": "base", "threshold": 1.15})
    >>> df = compare(ds)
    >>> df[["n_ok", "median", "ratio", "p_adj", "verdict"]].round(3)  # doctest: +NORMALIZE_WHITESPACE
          n_ok  median  ratio  p_adj   verdict
    cell
    base     5   10.03  1.000    NaN  baseline
    slow     5   13.10  1.306  0.008    slower
    >>> df.attrs["seed"], df.attrs["resamples"]
    (0, 10000)
    """
    _check_dims(ds)
    cells = [str(c) for c in ds.cell.values.tolist()]
    baseline = baseline if baseline is not None else ds.attrs.get("baseline")
    if baseline not in cells:
        raise ValueError(
            f"baseline cell {baseline!r} is not in the run (cells: {', '.join(cells)})"
        )
    thr = _threshold(ds, threshold)
    values = trial_values(ds, metric=metric, trials=trials, ranks=ranks)
    rows, groups = _cell_rows(ds, values, alpha=alpha)
    b = cells.index(baseline)
    others = [i for i in range(len(cells)) if i != b]
    results = stats.compare_groups(
        groups,
        [(i, b) for i in others],
        threshold=thr,
        alpha=alpha,
        seed=seed,
        resamples=resamples,
    )
    by_index = dict(zip(others, results, strict=True))
    family = sum(1 for r in results if not math.isnan(r.p))
    df = _frame(
        rows,
        by_index,
        dict.fromkeys(range(len(cells)), rows[b]),
        baseline_index=b,
        words=_words(values),
    )
    df.attrs = _attrs(
        metric=metric,
        units=str(values.attrs.get("units", "")),
        trials=trials,
        alpha=alpha,
        threshold=thr,
        seed=seed,
        resamples=resamples,
        family=family,
        baseline=baseline,
        values=values,
    )
    return df


def compare_runs(
    a: xr.Dataset,
    b: xr.Dataset,
    *,
    metric: str = "step_time_ms",
    alpha: float = 0.05,
    threshold: float | None = None,
    trials: TrialSelection = "ok",
    ranks: RankReduction = "worst",
    seed: int = stats.DEFAULT_SEED,
    resamples: int = stats.DEFAULT_RESAMPLES,
) -> pd.DataFrame:
    """The cells two runs share, each of run ``b`` against the same cell of run ``a``.

    Same columns, rules and ``attrs`` as :func:`compare`; the rows describe ``b``, the
    ``baseline_*`` columns ``a``'s cell, and the family for Holm is the shared cells. The
    band comes from ``a`` (the reference run) unless ``threshold`` is given.

    Raises
    ------
    IncompleteMatrix
        The runs have no cell in common.
    ValueError
        As :func:`compare`.

    Examples
    --------
    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> def run(times):
    ...     return build_dataset([{"name": "x", "trials": len(times)}],
    ...         [TrialRecord(cell="x", cell_id="", trial=t, status="ok", passed=True, step_times_ms=[v])
    ...          for t, v in enumerate(times)], attrs={"threshold": 1.15})
    >>> df = compare_runs(run([10.0, 10.1, 9.9, 10.2, 9.8]), run([12.0, 12.2, 11.9, 12.1, 12.3]))
    >>> row = df.loc["x"]
    >>> print(f"{row.ratio:.2f} [{row.ratio_ci_low:.2f}, {row.ratio_ci_high:.2f}] {row.p_adj:.4f} {row.verdict}")
    1.21 [1.18, 1.24] 0.0079 slower
    """
    _check_dims(a)
    _check_dims(b)
    a_cells = [str(c) for c in a.cell.values.tolist()]
    b_cells = [str(c) for c in b.cell.values.tolist()]
    shared = [c for c in b_cells if c in a_cells]
    if not shared:
        raise IncompleteMatrix(
            f"the runs share no cell (A: {', '.join(a_cells) or '-'}; B: {', '.join(b_cells) or '-'})"
        )
    thr = _threshold(a, threshold)
    a_sel, b_sel = a.sel(cell=shared), b.sel(cell=shared)
    va = trial_values(a_sel, metric=metric, trials=trials, ranks=ranks)
    vb = trial_values(b_sel, metric=metric, trials=trials, ranks=ranks)
    rows_a, groups_a = _cell_rows(a_sel, va, alpha=alpha, key_prefix="A/")
    rows_b, groups_b = _cell_rows(b_sel, vb, alpha=alpha, key_prefix="B/")
    n = len(shared)
    results = stats.compare_groups(
        [*groups_b, *groups_a],
        [(i, n + i) for i in range(n)],
        threshold=thr,
        alpha=alpha,
        seed=seed,
        resamples=resamples,
    )
    family = sum(1 for r in results if not math.isnan(r.p))
    df = _frame(
        rows_b,
        dict(enumerate(results)),
        dict(enumerate(rows_a)),
        baseline_index=None,
        words=_words(vb),
    )
    df.attrs = _attrs(
        metric=metric,
        units=str(vb.attrs.get("units", "")),
        trials=trials,
        alpha=alpha,
        threshold=thr,
        seed=seed,
        resamples=resamples,
        family=family,
        baseline="run A (same cell)",
        values=vb,
    )
    return df


def regressions(df: pd.DataFrame) -> list[str]:
    """The cells of a comparison whose verdict is ``slower`` (significantly, beyond the band).

    Only times regress this way: for a metric that is not a time (verdicts ``higher`` /
    ``lower``) whether higher is worse depends on the metric, so none is listed.

    Examples
    --------
    >>> import pandas as pd
    >>> regressions(pd.DataFrame({"verdict": ["slower", "no change"]}, index=["a", "b"]))
    ['a']
    """
    return [str(c) for c in df.index[df["verdict"] == "slower"]]


# --- rendering -------------------------------------------------------------------------------


def _missing(v: Any) -> bool:
    import pandas as pd

    return v is None or v is pd.NA or (isinstance(v, float | np.floating) and math.isnan(v))


def _num(v: Any, fmt: str = ".3g") -> str:
    return "—" if _missing(v) else format(v, fmt)


def _pct(v: float) -> str:
    return "—" if math.isnan(v) else f"{v:.0%}"


def ratio_text(row: Any) -> str:
    """``1.32 [1.20, 1.45]`` for a comparison row (``1`` for the baseline, ``—`` without data)."""
    if row["verdict"] == "baseline":
        return "1"
    if math.isnan(row["ratio"]):
        return "—"
    ci = (
        ""
        if math.isnan(row["ratio_ci_low"])
        else f" [{row['ratio_ci_low']:.3g}, {row['ratio_ci_high']:.3g}]"
    )
    return f"{row['ratio']:.3g}{ci}"


def verdict_text(row: Any) -> str:
    """The row's verdict in words, with the trials an inconclusive one needs when known."""
    verdict = str(row["verdict"])
    if verdict == "inconclusive":
        needed = row["trials_needed"]
        if not _missing(needed):
            return f"inconclusive — add trials (≥ {int(needed)} per cell)"
        return "inconclusive — add trials"
    return verdict


def _failure_text(row: Any) -> str:
    ran = int(row["n_ok"]) + int(row["n_failed"])
    text = "—" if not ran else f"{_pct(row['failure_rate'])} ({int(row['n_failed'])}/{ran})"
    if ran:
        text += f" [{_pct(row['failure_ci_low'])}, {_pct(row['failure_ci_high'])}]"
    if row["failures_vs_baseline"] in ("more", "fewer"):
        text += f" {row['failures_vs_baseline']} (p_adj {row['fisher_p_adj']:.2g})"
    return text


def comparison_table(df: pd.DataFrame, *, style: Literal["text", "markdown"] = "text") -> str:
    """A comparison as a table for a terminal (``text``) or a document (``markdown``).

    Raises ``ValueError`` for another ``style``.

    Examples
    --------
    >>> import pandas as pd
    >>> row = dict(n=3, n_ok=3, n_failed=0, n_timed=3, failure_rate=0.0, failure_ci_low=0.0,
    ...            failure_ci_high=0.56, median=4.0, iqr=0.5, cv=0.1, ratio=1.0,
    ...            ratio_ci_low=float("nan"), ratio_ci_high=float("nan"), p_adj=float("nan"),
    ...            fisher_p_adj=float("nan"), failures_vs_baseline="baseline", verdict="baseline",
    ...            trials_needed=None)
    >>> print(comparison_table(pd.DataFrame([row], index=pd.Index(["base"], name="cell")), style="markdown"))
    | cell | n_ok/n | median | IQR | CV | failure rate [CI] | ratio [CI] | p_adj | verdict |
    |---|---|---|---|---|---|---|---|---|
    | base | 3/3 | 4 | 0.5 | 10% | 0% (0/3) [0%, 56%] | 1 | — | baseline |
    """
    if style not in ("text", "markdown"):
        raise ValueError(f"style must be 'text' or 'markdown', got {style!r}")
    head = ["cell", "n_ok/n", "median", "IQR", "CV", "failure rate [CI]", "ratio [CI]", "p_adj"]
    head.append("verdict")
    body = []
    for cell, row in df.iterrows():
        body.append(
            [
                str(cell),
                f"{int(row['n_ok'])}/{int(row['n'])}",
                _num(row["median"]),
                _num(row["iqr"]),
                _pct(row["cv"]),
                _failure_text(row),
                ratio_text(row),
                _num(row["p_adj"], ".2g"),
                verdict_text(row),
            ]
        )
    if style == "markdown":
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head).rstrip()] + [fmt.format(*r).rstrip() for r in body]
    return "\n".join(lines)


def _plain(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if _missing(v):
        return None
    if isinstance(v, float | np.floating):
        return float(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def comparison_json(df: pd.DataFrame) -> dict[str, Any]:
    """A comparison as plain JSON data: ``{"statistics": attrs, "cells": [row, …]}`` (NaN → null).

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"ratio": [float("nan")]}, index=pd.Index(["a"], name="cell"))
    >>> df.attrs = {"seed": 0}
    >>> comparison_json(df)
    {'statistics': {'seed': 0}, 'cells': [{'cell': 'a', 'ratio': None}]}
    """
    cells = []
    for cell, row in df.iterrows():
        cells.append({"cell": str(cell), **{k: _plain(v) for k, v in row.items()}})
    return {"statistics": {k: _plain(v) for k, v in df.attrs.items()}, "cells": cells}


def require_baseline(df: pd.DataFrame) -> None:
    """Raise :class:`~aorta.errors.IncompleteMatrix` when the baseline has no timed trial."""
    base = df[df["verdict"] == "baseline"]
    if len(base) and int(base["n_timed"].iloc[0]) == 0:
        raise IncompleteMatrix(
            f"baseline cell {base.index[0]!r} has no usable trial: nothing to compare against"
        )


from aorta.matrix import accessor as _accessor  # noqa: E402  registers ds.aorta

del _accessor
