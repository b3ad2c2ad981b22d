"""Compare cells: a run's Dataset in, one row per cell out (:func:`compare`, :func:`compare_runs`).

The numbers come from :mod:`aorta.matrix.stats`; this module picks the trial values out of the
Dataset, forms the comparison family, and lays the results out as a
:class:`pandas.DataFrame` whose ``attrs`` record how they were computed (seed, resamples,
alpha, band, metric). :mod:`aorta.report.comparison` renders it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from aorta.errors import IncompleteMatrix
from aorta.matrix import sequential as seq
from aorta.matrix import stats
from aorta.matrix.hangs import hang_incidents
from aorta.matrix.options import StatsOptions, stats_options
from aorta.matrix.select import band_threshold, check_dims, outcomes, trial_values

if TYPE_CHECKING:
    import xarray as xr
    from typing_extensions import Unpack

    from aorta.matrix.options import StatsKeywords

__all__ = [
    "COLUMNS",
    "SEQUENTIAL_COLUMNS",
    "compare",
    "compare_runs",
    "drift",
    "gate_regressions",
    "regressions",
    "require_baseline",
    "verdict_words",
]

_TIME_UNITS = ("ms", "s")

#: The columns of a comparison, in order.
COLUMNS: tuple[str, ...] = (
    "mitigations",
    "environment",
    "n",
    "n_ok",
    "n_failed",
    "n_errors",
    "n_failed_workload",
    "n_failed_hang",
    "n_failed_crash",
    "n_timed",
    "n_nonfinite",
    "n_negative",
    "failure_rate",
    "failure_ci_low",
    "failure_ci_high",
    "median",
    "iqr",
    "cv",
    "baseline_median",
    "baseline_failure_rate",
    "baseline_n_ran",
    "baseline_n_failed",
    "baseline_n_failed_workload",
    "baseline_n_failed_hang",
    "baseline_n_failed_crash",
    "delta",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "band_ci_low",
    "band_ci_high",
    "band_ci_level",
    "p",
    "p_method",
    "p_adj",
    "failure_p",
    "failure_p_adj",
    "failures_vs_baseline",
    "difference",
    "band",
    "trials_needed",
    "note",
    # Who hung and where, over the cell's hung trials (aorta.matrix.hangs): in the frame, so
    # matrix.md, `aorta compare`, the report and the console read one line, computed once.
    "hang_incident",
)

#: The columns :func:`compare` adds with ``sequential=True``.
SEQUENTIAL_COLUMNS: tuple[str, ...] = ("decided", "decided_after", "reason")


#: The failure counts of a row (all failures, then by kind); ``baseline_*`` beside them.
_FAILURE_COUNTS = ("n_failed", "n_failed_workload", "n_failed_hang", "n_failed_crash")


def _counts(outcome: np.ndarray, kind: np.ndarray) -> dict[str, int]:
    o, k = outcome.astype(str), kind.astype(str)
    failed = o == "failed"
    return {
        "n": int(np.sum(np.isin(o, ["passed", "failed", "errored"]))),
        "n_ok": int(np.sum(o == "passed")),
        "n_failed": int(np.sum(failed)),
        "n_errors": int(np.sum(o == "errored")),
        "n_failed_workload": int(np.sum(failed & (k == "workload"))),
        "n_failed_hang": int(np.sum(failed & (k == "hang"))),
        "n_failed_crash": int(np.sum(failed & (k == "crash"))),
    }


def _signature_events(ds: xr.Dataset, signature: str) -> np.ndarray:
    """Per cell: trials whose failure signature is ``signature``."""
    if "signature" not in ds:
        raise ValueError(
            "this run's Dataset has no 'signature' variable (recorded before signatures)"
        )
    matched: np.ndarray = ds.signature.transpose("cell", "trial").values.astype(str) == signature
    return np.asarray(matched.sum(axis=1))


def _cell_rows(
    ds: xr.Dataset,
    values: xr.DataArray,
    *,
    alpha: float,
    key_prefix: str = "",
    signature: str | None = None,
) -> tuple[list[dict[str, Any]], list[stats.Group]]:
    rows, groups = [], []
    outcome, kind = outcomes(ds)
    outcome = outcome.transpose("cell", "trial").values
    kind = kind.transpose("cell", "trial").values
    vals = values.transpose("cell", "trial").values.astype(float)
    negative = np.zeros(len(vals), dtype=int)
    if _is_time(values):
        # A negative duration is a broken clock or a parsing mistake, never a speed-up: left
        # out of every statistic (as a trial with no value), counted and said in the note.
        bad = vals < 0
        negative = bad.sum(axis=1)
        vals = np.where(bad, np.nan, vals)
    events = None if signature is None else _signature_events(ds, signature)
    for i, cell in enumerate(ds.cell.values.tolist()):
        counts = _counts(outcome[i], kind[i])
        if events is not None:
            # The event is the signature; every recorded trial is a chance for it (a hang is
            # a timeout too, and still counts).
            counts["n_failed"] = int(events[i])
            counts["n_ok"] = counts["n"] - counts["n_failed"]
            counts["n_errors"] = 0
        ran = counts["n_ok"] + counts["n_failed"]
        summary = stats.summarize_values(vals[i])
        lo, hi = stats.wilson_interval(counts["n_failed"], ran, alpha=alpha)
        group = stats.Group(
            f"{key_prefix}{cell}", vals[i], counts["n_failed"], ran, negative=int(negative[i])
        )
        rows.append(
            {
                "cell": cell,
                "mitigations": str(ds.mitigations.values[i]) if "mitigations" in ds.coords else "",
                "environment": str(ds.environment.values[i]) if "environment" in ds.coords else "",
                **counts,
                "n_timed": summary.n,
                "n_nonfinite": group.nonfinite,
                "n_negative": group.negative,
                "failure_rate": counts["n_failed"] / ran if ran else math.nan,
                "failure_ci_low": lo,
                "failure_ci_high": hi,
                "median": summary.median,
                "iqr": summary.iqr,
                "cv": summary.cv,
            }
        )
        groups.append(group)
    return rows, groups


def verdict_words(difference: str, *, time: bool = True) -> str:
    """A difference in the metric's words: ``slower``/``faster`` for times,
    ``higher``/``lower`` for other metrics.

    >>> verdict_words("slower", time=False), verdict_words("no difference detected", time=False)
    ('higher', 'no difference detected')
    """
    if time:
        return difference
    return {"slower": "higher", "faster": "lower"}.get(difference, difference)


def _frame(
    rows: list[dict[str, Any]],
    results: dict[int, stats.PairResult],
    refs: dict[int, dict[str, Any]],
    *,
    baseline_index: int | None,
    time: bool,
) -> pd.DataFrame:
    out = []
    for i, row in enumerate(rows):
        res = results.get(i)
        ref = refs.get(i, {})
        row = {
            **row,
            "baseline_median": ref.get("median", math.nan),
            "baseline_failure_rate": ref.get("failure_rate", math.nan),
            "baseline_n_ran": ref.get("n_ok", 0) + ref.get("n_failed", 0),
            **{f"baseline_{k}": ref.get(k, 0) for k in _FAILURE_COUNTS},
        }
        nan = math.nan
        if res is None:
            verdict = "baseline" if i == baseline_index else "no data"
            row.update(
                delta=0.0 if i == baseline_index else nan,
                ratio=1.0 if i == baseline_index else nan,
                ratio_ci_low=nan,
                ratio_ci_high=nan,
                band_ci_low=nan,
                band_ci_high=nan,
                band_ci_level=nan,
                p=nan,
                p_method="",
                p_adj=nan,
                failure_p=nan,
                failure_p_adj=nan,
                failures_vs_baseline=verdict,
                difference=verdict,
                band=verdict,
                trials_needed=None,
                note="",
            )
        else:
            row.update(
                delta=res.delta,
                ratio=res.ratio,
                # The interval every output shows is the one the band verdict was judged on
                # (1 - alpha / m): one interval, one level (attrs ci_level), never a 95% CI
                # beside a verdict read from a 97.5% one.
                ratio_ci_low=res.band_ci_low,
                ratio_ci_high=res.band_ci_high,
                band_ci_low=res.band_ci_low,
                band_ci_high=res.band_ci_high,
                band_ci_level=res.band_ci_level,
                p=res.p,
                p_method=res.p_method,
                p_adj=res.p_adj,
                failure_p=res.failure_p,
                failure_p_adj=res.failure_p_adj,
                failures_vs_baseline=res.failures_vs_baseline,
                difference=verdict_words(res.difference, time=time),
                band=res.band,
                trials_needed=res.trials_needed,
                note=res.note,
            )
        out.append(row)
    df = pd.DataFrame(out, columns=["cell", *COLUMNS]).set_index("cell")
    df["trials_needed"] = df["trials_needed"].astype("Int64")
    return df


def _values(ds: xr.Dataset, metric: str, opts: StatsOptions) -> xr.DataArray:
    """One value per trial of ``metric``, as ``opts`` picks and reduces them."""
    return trial_values(ds, metric=metric, trials=opts.trials, ranks=opts.ranks, stat=opts.stat)


def _attrs(
    opts: StatsOptions,
    *,
    metric: str,
    values: xr.DataArray,
    threshold: float,
    family: int,
    baseline: str,
    resamples: int | None = None,
    band_levels: list[float] | None = None,
) -> dict[str, Any]:
    """What a comparison records in its ``attrs``: the options it ran with (``resamples``: 0
    when no bootstrap ran) and what they led to."""
    alpha, stat = opts.alpha, opts.stat
    level = alpha / max(family, 1)
    judged = [v for v in band_levels or [] if math.isfinite(v)]
    band_level = judged[0] if judged else 1 - alpha / max(family, 1)
    value = f"{stat} of post-warm-up steps" if metric == "step_time_ms" else f"{metric} per trial"
    if "ranks" in values.attrs:
        value += f", {values.attrs['ranks']}"
    return {
        "metric": metric,
        "units": str(values.attrs.get("units", "")),
        "trial_value": value,
        "trials": opts.trials,
        "baseline": baseline,
        "alpha": alpha,
        # The level of the one interval shown (ratio_ci_*), which is the band's.
        "ci_level": band_level,
        # The failure rates' Wilson intervals stay at 1 - alpha.
        "failure_ci_level": 1 - alpha,
        "threshold": threshold,
        "band": [1 / threshold, threshold],
        "seed": opts.seed,
        "resamples": opts.resamples if resamples is None else resamples,
        "stat": stat,
        "test": (
            f"Mann–Whitney U, two-sided: exact up to {stats.EXACT_MAX_TOTAL} trials in the two "
            "groups (permutation where values tie), normal approximation with tie correction above"
        ),
        "failure_test": "Boschloo's exact test, two-sided",
        "adjustment": "Holm",
        "band_ci_level": band_level,
        "min_timed": stats.MIN_TIMED,
        "family_size": family,
        "min_trials": stats.trials_for_level(level),
    }


def _is_time(da: xr.DataArray) -> bool:
    return da.attrs.get("units") in _TIME_UNITS


def compare(
    ds: xr.Dataset,
    baseline: str | None = None,
    *,
    metric: str = "step_time_ms",
    options: StatsOptions | None = None,
    signature: str | None = None,
    sequential: bool = False,
    failure_margin: float | None = None,
    max_trials: int | None = None,
    **overrides: Unpack[StatsKeywords],
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
    options
        The statistics options (:class:`~aorta.matrix.options.StatsOptions`: ``alpha``,
        ``threshold``, ``trials``, ``ranks``, ``stat``, ``seed``, ``resamples``; default its
        defaults). The CIs are at ``1 - alpha``; the band is ``[1/threshold, threshold]``
        (default: the recipe's ``confound.threshold``, ``ds.attrs["threshold"]``); ``ranks``
        reduces a per-rank trace metric (:func:`reduce_ranks`); ``stat`` is the statistic of
        a trial's post-warm-up steps for ``step_time_ms``; seed and resamples are the
        bootstrap's (recorded in ``attrs``).
    signature
        Count trials with this failure signature (``out_of_memory``, ``hang``,
        ``custom:<id>`` …) as the event instead of failures: ``n_failed`` are those trials,
        ``n_ok`` the other recorded trials, and the failure test (Boschloo, Holm) says whether
        the signature is more or less frequent than in the baseline.
    sequential
        Anytime-valid verdicts (:mod:`aorta.matrix.sequential`), valid however often they are
        computed — after every trial or round of an adaptive sweep: trial ``k`` of a cell is
        paired with trial ``k`` of the baseline; ``ratio`` is the geometric mean of the paired
        ratios with its confidence sequence (``ratio_ci_*`` at ``alpha``, ``band_ci_*`` at
        ``alpha / K``, Bonferroni over the K cells), ``p`` / ``failure_p`` are p-values valid
        at any stopping time (the confidence sequence's / an e-process on the pairs, and at
        ``max_trials`` Mann–Whitney's / Boschloo's test; ``p_adj`` / ``failure_p_adj`` Holm
        over the cells), and the columns :data:`SEQUENTIAL_COLUMNS` say whether the cell is
        settled: ``decided`` (bool), ``decided_after`` (trials), ``reason`` (words, naming
        the open question).
    failure_margin
        With ``sequential``: the failure-rate difference that does not matter (default
        ``ds.attrs["failure_margin"]``, else 0.15).
    max_trials
        With ``sequential``: the planned looks — Mann–Whitney and Boschloo's test on the
        first ``max_trials`` trials, with 90% of ``alpha`` — once a cell and the baseline have
        run that many trials (default ``ds.attrs["max_trials"]``, an adaptive run's cap;
        ``None``: no look, the anytime tests get all of ``alpha``). Fix it before looking at
        the data.
    **overrides
        Any field of ``options`` as a keyword (``alpha=0.01``, ``resamples=2000`` …),
        replacing its value.

    Returns
    -------
    pandas.DataFrame
        One row per cell (index ``cell``), columns :data:`COLUMNS`. Two answers per cell:
        ``difference`` — is there one? — ``baseline``, ``slower``, ``faster``
        (``higher``/``lower`` for metrics that are not times), ``no difference detected``,
        ``no data``; ``band`` — does it matter? — ``baseline``, ``beyond band``,
        ``within band``, ``undecided``, ``no data``. ``failures_vs_baseline`` is one of
        ``baseline``, ``more``, ``fewer``, ``not significant``, ``no data``. ``attrs`` record
        metric, units, alpha, band, seed, resamples, the family size, ``min_trials`` and the
        drift check (:func:`drift`).

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
    >>> df[["n_ok", "median", "ratio", "p_adj", "difference", "band"]].round(3)  # doctest: +NORMALIZE_WHITESPACE
          n_ok  median  ratio  p_adj difference         band
    cell
    base     5   10.03  1.000    NaN   baseline     baseline
    slow     5   13.10  1.306  0.008     slower  beyond band
    >>> df.attrs["seed"], df.attrs["resamples"]
    (0, 10000)

    The statistics options as one value (:class:`~aorta.matrix.options.StatsOptions`), a
    keyword overriding a field:

    >>> from aorta.matrix.options import StatsOptions
    >>> opts = StatsOptions(alpha=0.01, resamples=2_000)
    >>> attrs = compare(ds, options=opts, seed=7).attrs
    >>> attrs["alpha"], attrs["resamples"], attrs["seed"]
    (0.01, 2000, 7)

    Anytime-valid, as an adaptive sweep decides after every round:

    >>> s = compare(ds, sequential=True)
    >>> s.loc["slow", ["difference", "band", "reason"]].tolist()
    ['slower', 'beyond band', 'slower after 4 trials; failures open after 5 trials (0/5 failed, baseline 0/5)']
    >>> bool(s.loc["slow", "decided"])
    False
    """
    check_dims(ds)
    cells = [str(c) for c in ds.cell.values.tolist()]
    b = _baseline_index(cells, baseline if baseline is not None else ds.attrs.get("baseline"))
    opts = stats_options(options, **overrides)
    thr = band_threshold(ds, opts.threshold)
    values = _values(ds, metric, opts)
    rows, groups = _cell_rows(ds, values, alpha=opts.alpha, signature=signature)
    # What both kinds of comparison say about their inputs in the frame's attrs.
    described: dict[str, Any] = dict(metric=metric, threshold=thr, baseline=cells[b], values=values)
    if sequential:
        if signature is not None:
            raise ValueError(
                "sequential=True does not take a signature (failures of any kind count)"
            )
        df = _compare_sequential(
            ds, rows, b, opts, described, failure_margin=failure_margin, max_trials=max_trials
        )
    else:
        df = _compare_fixed(rows, groups, b, opts, described)
    df.attrs.update(drift(ds, values.sel(cell=cells[b]), alpha=opts.alpha))
    if signature is not None:
        df.attrs["signature"] = signature
    return _with_hangs(df, ds)


def _baseline_index(cells: list[str], baseline: str | None) -> int:
    """The baseline's position among ``cells``; a cell the run lacks is a ValueError."""
    if baseline not in cells:
        raise ValueError(
            f"baseline cell {baseline!r} is not in the run (cells: {', '.join(cells)})"
        )
    return cells.index(baseline)


def _compare_sequential(
    ds: xr.Dataset,
    rows: list[dict[str, Any]],
    b: int,
    opts: StatsOptions,
    described: dict[str, Any],
    *,
    failure_margin: float | None,
    max_trials: int | None,
) -> pd.DataFrame:
    """The ``sequential=True`` frame, its failure margin and planned looks resolved."""
    margin = float(
        failure_margin
        if failure_margin is not None
        else ds.attrs.get("failure_margin", seq.DEFAULT_FAILURE_MARGIN)
    )
    return _sequential(
        ds,
        described["values"],
        rows,
        b,
        threshold=described["threshold"],
        alpha=opts.alpha,
        margin=margin,
        max_trials=max_trials if max_trials is not None else ds.attrs.get("max_trials"),
        attrs=_attrs(opts, **described, resamples=0, family=len(rows) - 1),
    )


def _compare_fixed(
    rows: list[dict[str, Any]],
    groups: list[stats.Group],
    b: int,
    opts: StatsOptions,
    described: dict[str, Any],
) -> pd.DataFrame:
    """The fixed-sample frame: each cell's tests against the baseline, Holm over the family."""
    others = [i for i in range(len(rows)) if i != b]
    results = _compare_groups(groups, [(i, b) for i in others], described["threshold"], opts)
    df = _frame(
        rows,
        dict(zip(others, results, strict=True)),
        dict.fromkeys(range(len(rows)), rows[b]),
        baseline_index=b,
        time=_is_time(described["values"]),
    )
    df.attrs = _attrs(
        opts,
        **described,
        family=sum(1 for r in results if not math.isnan(r.p)),
        band_levels=[r.band_ci_level for r in results],
    )
    return df


def _with_hangs(df: pd.DataFrame, ds: xr.Dataset) -> pd.DataFrame:
    """``df`` with each cell's ``hang_incident`` (``""`` where it did not hang or nothing was
    captured): :func:`aorta.matrix.hangs.hang_incidents` of ``ds``, the cells' run."""
    incidents = hang_incidents(ds)
    df["hang_incident"] = [incidents[c].line() if c in incidents else "" for c in df.index]
    return df


def _compare_groups(
    groups: list[stats.Group], pairs: list[tuple[int, int]], threshold: float, opts: StatsOptions
) -> list[stats.PairResult]:
    """:func:`aorta.matrix.stats.compare_groups` with ``opts``' level and bootstrap."""
    return stats.compare_groups(
        groups,
        pairs,
        threshold=threshold,
        alpha=opts.alpha,
        seed=opts.seed,
        resamples=opts.resamples,
    )


def _sequential(
    ds: xr.Dataset,
    values: xr.DataArray,
    rows: list[dict[str, Any]],
    b: int,
    *,
    threshold: float,
    alpha: float,
    margin: float,
    max_trials: int | None,
    attrs: dict[str, Any],
) -> pd.DataFrame:
    """The ``sequential=True`` comparison: every cell against the baseline by
    :func:`aorta.matrix.sequential.sequential_cells`, laid out as :func:`compare`'s frame plus
    :data:`SEQUENTIAL_COLUMNS`."""
    outcome = outcomes(ds)[0].transpose("cell", "trial").values.astype(str)
    vals = values.transpose("cell", "trial").values.astype(float)
    failed, ran = outcome == "failed", np.isin(outcome, ["passed", "failed"])
    recorded = np.isin(outcome, ["passed", "failed", "errored"])
    trials = [seq.CellTrials(vals[i], failed[i], ran[i], recorded[i]) for i in range(len(rows))]
    others = [i for i in range(len(rows)) if i != b]
    family = max(len(others), 1)
    found = seq.sequential_cells(
        {str(i): trials[i] for i in others},
        trials[b],
        threshold=threshold,
        alpha=alpha,
        failure_margin=margin,
        max_trials=max_trials,
    )
    by_index = {i: found[str(i)] for i in others}
    results = {
        i: _sequential_row(
            r, delta=float(rows[i]["median"] - rows[b]["median"]), alpha=alpha, family=family
        )
        for i, r in by_index.items()
    }
    df = _frame(
        rows,
        results,
        dict.fromkeys(range(len(rows)), rows[b]),
        baseline_index=b,
        time=_is_time(values),
    )
    all_done = all(r.decided for r in by_index.values())
    after = {
        i: max(r.timing.settled_at or 0, r.failures.settled_at or 0) if r.decided else None
        for i, r in by_index.items()
    }
    df["decided"] = [by_index[i].decided if i in by_index else all_done for i in range(len(rows))]
    df["decided_after"] = pd.array([after.get(i) for i in range(len(rows))], dtype="Int64")
    df["reason"] = [
        by_index[i].reason
        if i in by_index
        else ("baseline: every cell decided" if all_done else "baseline")
        for i in range(len(rows))
    ]
    attrs.update(
        sequential=True,
        failure_margin=margin,
        max_trials=max_trials,
        futility_difference=seq.futility_difference(margin),
        futility_level=seq.FUTILITY_LEVEL,
        anytime_share=seq.ANYTIME_SHARE if max_trials is not None else 1.0,
        failure_anytime_share=seq.FAILURE_ANYTIME_SHARE if max_trials is not None else 1.0,
        failure_looks=(
            [list(x) for x in seq.failure_looks(max_trials)] if max_trials is not None else []
        ),
        futility_min_pairs=seq.FUTILITY_MIN_PAIRS,
        test=(
            "confidence sequence: scale-invariant normal mixture on paired log ratios"
            + ("; Mann–Whitney at the planned look" if max_trials is not None else "")
        ),
        failure_test=(
            "safe 2x2 e-process on the pairs (Turner, Ly & Grünwald)"
            + ("; Boschloo at the interim and planned looks" if max_trials is not None else "")
        ),
        adjustment="Holm (slower/faster, failures); Bonferroni (band sequences)",
        resamples=0,
        min_trials=seq.MIN_PAIRS,
    )
    df.attrs = attrs
    return df


def _sequential_row(
    r: seq.SequentialResult, *, delta: float, alpha: float, family: int
) -> stats.PairResult:
    """One cell's anytime-valid answers in the columns of a fixed-n comparison."""
    t, f = r.timing, r.failures
    nan = math.nan
    return stats.PairResult(
        ratio=math.exp(t.estimate) if t.n else nan,
        ci_low=math.exp(t.low) if t.n else nan,
        ci_high=math.exp(t.high) if t.n else nan,
        band_ci_low=math.exp(t.band_low) if t.n else nan,
        band_ci_high=math.exp(t.band_high) if t.n else nan,
        band_ci_level=1 - alpha / family if t.n else nan,
        delta=delta,
        p=t.p,
        p_method=(
            "Mann–Whitney at max_trials" if t.via == "planned look" else "anytime (t mixture)"
        )
        if t.n
        else "",
        p_adj=t.p_adj if t.n else nan,
        failure_p=f.p,
        failure_p_adj=f.p_adj if f.n else nan,
        difference=t.difference,
        band=t.band,
        failures_vs_baseline=f.verdict,
        min_p=nan,
        attainable=True,
        trials_needed=None,
        note="",
    )


def compare_runs(
    a: xr.Dataset,
    b: xr.Dataset,
    *,
    metric: str = "step_time_ms",
    options: StatsOptions | None = None,
    **overrides: Unpack[StatsKeywords],
) -> pd.DataFrame:
    """The cells two runs share, each of run ``b`` against the same cell of run ``a``.

    Same columns, rules, ``attrs``, ``options`` and keywords as :func:`compare`; the rows
    describe ``b``, the ``baseline_*`` columns ``a``'s cell, and the family for Holm is the
    shared cells. The band comes from ``a`` (the reference run) unless ``threshold`` is given.

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
    >>> print(f"{row.ratio:.2f} [{row.ratio_ci_low:.2f}, {row.ratio_ci_high:.2f}] {row.p_adj:.4f} {row.difference}, {row.band}")
    1.21 [1.18, 1.24] 0.0079 slower, beyond band
    """
    check_dims(a)
    check_dims(b)
    a_cells = [str(c) for c in a.cell.values.tolist()]
    b_cells = [str(c) for c in b.cell.values.tolist()]
    shared = [c for c in b_cells if c in a_cells]
    if not shared:
        raise IncompleteMatrix(
            f"the runs share no cell (A: {', '.join(a_cells) or '-'}; B: {', '.join(b_cells) or '-'})"
        )
    opts = stats_options(options, **overrides)
    thr = band_threshold(a, opts.threshold)
    a_sel, b_sel = a.sel(cell=shared), b.sel(cell=shared)
    va, vb = _values(a_sel, metric, opts), _values(b_sel, metric, opts)
    rows_a, groups_a = _cell_rows(a_sel, va, alpha=opts.alpha, key_prefix="A/")
    rows_b, groups_b = _cell_rows(b_sel, vb, alpha=opts.alpha, key_prefix="B/")
    n = len(shared)
    results = _compare_groups([*groups_b, *groups_a], [(i, n + i) for i in range(n)], thr, opts)
    family = sum(1 for r in results if not math.isnan(r.p))
    df = _frame(
        rows_b,
        dict(enumerate(results)),
        dict(enumerate(rows_a)),
        baseline_index=None,
        time=_is_time(vb),
    )
    df.attrs = _attrs(
        opts,
        metric=metric,
        values=vb,
        threshold=thr,
        family=family,
        baseline="run A (same cell)",
        band_levels=[r.band_ci_level for r in results],
    )
    return _with_hangs(df, b_sel)


def drift(
    ds: xr.Dataset, values: xr.DataArray, *, alpha: float = stats.DEFAULT_ALPHA
) -> dict[str, Any]:
    """The drift check: is there a monotone trend of the baseline's trial values over the
    run order (Kendall's tau, :func:`aorta.matrix.stats.drift_p`)? A machine warming up, a
    neighbour's job or a clock change over a long run shows here first.

    Returns ``{"drift_p": p, "drift": bool}``; ``drift_p`` is NaN (and ``drift`` False) when
    the run order was not recorded or the baseline has fewer than 5 timed trials.
    """
    if "run_order" not in ds:
        return {"drift_p": math.nan, "drift": False}
    order = ds.run_order.sel(cell=values.cell.item()).values if "cell" in ds.run_order.dims else []
    p = stats.drift_p(np.asarray(values.values, dtype=float), np.asarray(order))
    return {"drift_p": p, "drift": bool(p < alpha)}


def regressions(df: pd.DataFrame) -> list[str]:
    """The cells of a comparison with a significant slowdown (``difference`` ``slower``),
    however small.

    Only times regress this way: for a metric that is not a time (``higher`` / ``lower``)
    whether higher is worse depends on the metric, so none is listed.

    Examples
    --------
    >>> import pandas as pd
    >>> regressions(pd.DataFrame({"difference": ["slower", "no difference detected"]}, index=["a", "b"]))
    ['a']
    """
    return [str(c) for c in df.index[df["difference"] == "slower"]]


def gate_regressions(df: pd.DataFrame) -> list[str]:
    """The cells that trip a regression gate: ``slower`` **and** ``beyond band`` — the whole
    (family-adjusted) CI of the ratio lies above the band's threshold, not just the point
    estimate.

    Examples
    --------
    >>> import pandas as pd
    >>> gate_regressions(pd.DataFrame({"difference": ["slower", "slower"],
    ...     "band": ["beyond band", "within band"], "band_ci_low": [1.3, 1.01]}, index=["a", "b"]))
    ['a']
    """
    hit = (df["difference"] == "slower") & (df["band"] == "beyond band") & (df["band_ci_low"] > 1)
    return [str(c) for c in df.index[hit]]


def require_baseline(df: pd.DataFrame) -> None:
    """Raise :class:`~aorta.errors.IncompleteMatrix` when no usable baseline exists for
    anything: the baseline has no trial that ran (passed or failed). A baseline whose trials
    all failed is usable — for the failure comparison; timing then says ``no data``.
    """
    base = df[df["difference"] == "baseline"]
    if len(base) and int(base["n_ok"].iloc[0]) + int(base["n_failed"].iloc[0]) == 0:
        raise IncompleteMatrix(
            f"baseline cell {base.index[0]!r} has no trial that ran: nothing to compare against"
        )
