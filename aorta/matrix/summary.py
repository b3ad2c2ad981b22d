"""The matrix's result: one row per cell, the comparison against the baseline beside upstream
AORTA's columns.

:func:`summarize` is the single result model of a run's matrix: the frame of
:func:`aorta.compare` (trial counts, failure rate with its Wilson interval, ratio of medians
with its bootstrap CI, Holm-adjusted p, verdict) plus the columns upstream AORTA's users know:

* ``mean_step_ms`` from the best source every trial that **ended ok** has, in this order
  (``step_source``): ``per_step`` (mean of the step times) → ``elapsed_per_iter`` (elapsed /
  executed iterations) → ``wall_clock_total`` (the trial's wall clock) → ``missing``;
  ``no_ok_trial`` (and NaN) when trials ran but none ended ok: the wall clock until a hang's
  kill or a crash is not a step time;
* ``confound`` in upstream AORTA's vocabulary (:func:`confound_tag`), from those ok trials:
  ``(baseline)``, ``speed (+N%)`` when the cell's mean step exceeds the baseline's by more
  than the band's threshold, ``n/a`` without two comparable per-step means, ``-`` when the
  cell fails less often than the baseline, ``no effect``, ``error`` / ``did_not_run`` when
  none of its trials ran;
* ``n_trials`` (planned), ``did_not_run`` and ``cell_id``;
* ``p95_ratio`` and ``stalls``: the same comparison on each trial's 95th-percentile step time;
  ``stalls`` is True when that one is ``slower`` with a ratio beyond the band's threshold while
  the median's ``band`` is not ``beyond band`` — a few steps stall, the typical one does not;
* ``oom_*``, ``numerics_*`` and ``memory_*`` (:func:`aorta.matrix.rank_causes.with_rank_causes`):
  the rank that ran out of memory, went non-finite first or peaked above the others, in a line;
* the ``straggler_*`` columns (:data:`aorta.matrix.stragglers.STRAGGLER_COLUMNS`): the rank the
  others wait for across the cell's ok trials, or none (:func:`aorta.matrix.stragglers.stragglers`).

The statistics use each trial's median post-warm-up step time, or its wall clock when the
baseline has no per-step times. :mod:`aorta.report.matrix_files` renders the frame as ``matrix.md``
and ``matrix.json``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
import xarray as xr

from aorta.matrix.compare import compare
from aorta.matrix.options import StatsOptions, stats_options
from aorta.matrix.rank_causes import with_rank_causes
from aorta.matrix.select import band_threshold, check_dims, default_metric, outcomes
from aorta.matrix.stragglers import with_stragglers
from aorta.store.record import TrialStatus

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from aorta.matrix.options import StatsKeywords

__all__ = [
    "MATRIX_COLUMNS",
    "STEP_SOURCES",
    "StepSource",
    "confound_tag",
    "confound_text",
    "summarize",
]

#: Where a cell's mean step comes from (``missing``: no source every ok trial has;
#: ``no_ok_trial``: no trial of the cell ended ok).
StepSource = Literal["per_step", "elapsed_per_iter", "wall_clock_total", "missing", "no_ok_trial"]
#: The step sources in the order they are tried.
STEP_SOURCES: tuple[StepSource, ...] = ("per_step", "elapsed_per_iter", "wall_clock_total")
#: The columns :func:`summarize` adds to those of :func:`aorta.compare`.
MATRIX_COLUMNS: tuple[str, ...] = (
    "cell_id",
    "n_trials",
    "did_not_run",
    "mean_step_ms",
    "step_source",
    "confound",
    "confound_text",
    "p95_ratio",
    "stalls",
)


def summarize(
    ds: xr.Dataset,
    baseline: str | None = None,
    *,
    options: StatsOptions | None = None,
    **overrides: Unpack[StatsKeywords],
) -> pd.DataFrame:
    """One row per cell of a run: its comparison with the baseline and upstream's columns.

    Parameters
    ----------
    ds
        A run's Dataset (:func:`aorta.load_run`).
    baseline
        The reference cell (default: ``ds.attrs["baseline"]``, the recipe's).
    options, **overrides
        The statistics options, as in :func:`aorta.compare`. The band's ``threshold``
        (default: the recipe's ``confound.threshold``) is also the ``confound`` tag's. The
        matrix picks its own trial values: each trial's median post-warm-up step (its wall
        clock when the baseline has no step times) and the p95 for ``stalls``, over the trials
        that ended ok, so ``trials``, ``ranks`` and ``stat`` do not apply.

    Returns
    -------
    pandas.DataFrame
        Index ``cell``; the columns of :func:`aorta.compare`, then :data:`MATRIX_COLUMNS`,
        then the per-rank causes' (:func:`aorta.matrix.rank_causes.with_rank_causes`), then
        :data:`~aorta.matrix.stragglers.STRAGGLER_COLUMNS`.
        ``attrs``: the comparison's (metric, alpha, band, seed, resamples, family size).

    Raises
    ------
    ValueError
        As :func:`aorta.compare` (an unknown baseline cell, a bad threshold or alpha).

    Examples
    --------
    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> ds = build_dataset([{"name": "a", "cell_id": "1", "mitigations": ["none"], "trials": 1}],
    ...     [TrialRecord(cell="a", cell_id="1", trial=0, status="ok", passed=True, step_times_ms=[2.0, 4.0])],
    ...     attrs={"baseline": "a", "threshold": 1.15})
    >>> df = summarize(ds)
    >>> df[["mean_step_ms", "step_source", "confound", "difference", "stalls"]]  # doctest: +NORMALIZE_WHITESPACE
          mean_step_ms step_source  confound difference  stalls
    cell
    a              3.0    per_step  (baseline)   baseline   False
    >>> df.attrs["metric"]
    'step_time_ms'
    """
    check_dims(ds)
    baseline = baseline if baseline is not None else ds.attrs.get("baseline")
    opts = stats_options(options, **overrides)
    # The matrix's trial values are its own (see above): only the level, band and bootstrap.
    opts = StatsOptions(
        alpha=opts.alpha, threshold=opts.threshold, seed=opts.seed, resamples=opts.resamples
    )
    thr = band_threshold(ds, opts.threshold)
    cells = [str(c) for c in ds.cell.values.tolist()]
    metric = default_metric(ds, baseline) if baseline in cells else "step_time_ms"
    # An adaptive run stopped its cells on anytime-valid verdicts: fixed-n tests would not hold.
    sequential = ds.attrs.get("schedule") == "adaptive"
    df = compare(ds, baseline, metric=metric, options=opts, threshold=thr, sequential=sequential)
    status = ds.status.transpose("cell", "trial").values.astype(str)
    planned = ds["planned_trials"].values if "planned_trials" in ds.coords else np.zeros(len(cells))
    recorded = (status != "missing").sum(axis=1)
    mean, source = _mean_steps(ds)
    df["cell_id"] = [str(c) for c in ds.cell_id.values] if "cell_id" in ds.coords else ""
    df["n_trials"] = [int(p) or int(r) for p, r in zip(planned, recorded, strict=True)]
    df["did_not_run"] = _not_run(ds, status)
    df["mean_step_ms"] = mean
    df["step_source"] = source
    assert baseline is not None  # compare() refused a baseline that is not one of the cells
    b = cells.index(baseline)
    base = df.iloc[b]
    tags = [
        confound_tag(df.iloc[i], base, is_baseline=i == b, threshold=thr) for i in range(len(cells))
    ]
    df["confound"] = [tag for tag, _ in tags]
    df["confound_text"] = [confound_text(tag, ratio, threshold=thr) for tag, ratio in tags]
    df["p95_ratio"] = np.nan
    df["stalls"] = False
    if metric == "step_time_ms":
        tail = compare(ds, baseline, options=opts, threshold=thr, stat="p95", sequential=sequential)
        df["p95_ratio"] = tail["ratio"]
        df["stalls"] = (
            (tail["difference"] == "slower")
            & (tail["ratio"] > thr)
            & (df["band"] != "beyond band")
            & (df["difference"] != "baseline")
        )
    # Who hung, and where (the cell's commonest incident, one line): compare's hang_incident.
    return with_stragglers(with_rank_causes(df, ds), ds, threshold=thr)


def _per_trial_ms(ds: xr.Dataset) -> dict[StepSource, np.ndarray]:
    """Each step source's value per trial (cell × trial), NaN where the trial lacks it."""
    steps = ds.step_time_ms.transpose("cell", "trial", "step").values
    n_steps = ds.n_steps.transpose("cell", "trial").values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: trials without steps
        per_step = np.where(n_steps > 0, np.nanmean(steps, axis=2), np.nan)
    elapsed = ds.elapsed_s.transpose("cell", "trial").values
    if "executed_iterations" in ds:  # absent in results.nc written before it was recorded
        iterations = ds.executed_iterations.transpose("cell", "trial").values.astype(float)
    else:
        iterations = np.full(elapsed.shape, np.nan)
    counted = iterations > 0
    per_iter = np.where(counted, elapsed * 1000.0 / np.where(counted, iterations, 1.0), np.nan)
    wall = ds.wall_clock_s.transpose("cell", "trial").values * 1000.0
    return {"per_step": per_step, "elapsed_per_iter": per_iter, "wall_clock_total": wall}


def _mean_steps(ds: xr.Dataset) -> tuple[list[float], list[StepSource]]:
    """Per cell: the mean step over the trials that ended ok, from the first source all of
    them have. A failed trial's clock stops at a kill, a crash or an error, not at a step's
    end: it is left out (``no_ok_trial`` when nothing is left)."""
    outcome = outcomes(ds)[0].transpose("cell", "trial")
    ok = (outcome == "passed").values
    failed = (outcome == "failed").values
    values = _per_trial_ms(ds)
    means: list[float] = []
    sources: list[StepSource] = []
    for i in range(ok.shape[0]):
        found: tuple[float, StepSource] = (
            math.nan,
            "no_ok_trial" if failed[i].any() else "missing",
        )
        if ok[i].any():
            found = (math.nan, "missing")
            for source in STEP_SOURCES:
                v = values[source][i, ok[i]]
                if np.isfinite(v).all():
                    found = (float(np.mean(v)), source)
                    break
        means.append(found[0])
        sources.append(found[1])
    return means, sources


def finite_or_none(v: Any) -> float | None:
    """``v`` as a finite float, else ``None`` (a missing or non-numeric value, NaN, inf)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def confound_tag(
    row: Mapping[str, Any], base: Mapping[str, Any], *, is_baseline: bool, threshold: float
) -> tuple[str, float | None]:
    """Upstream AORTA's ``confound`` tag of a cell against the baseline, and the ratio it
    read: the comparison's own ``ratio`` (cell median / baseline median over the trials that
    ended ok), the one statistic the verdict uses too — not a ratio of means beside it.

    ``(baseline)`` for the baseline; ``did_not_run`` when none of the cell's trials ran and
    they were not run; ``error`` when none ran and they errored; ``n/a`` when there is no
    ratio (no trial ended ok in either), the step sources differ, or the times are not per
    step (a wall-clock ratio is mostly setup); ``speed (+N%)`` when the ratio exceeds
    ``threshold``; else ``-`` when the cell fails less often than the baseline, and
    ``no effect`` when it does not (upstream's words: :func:`confound_text` says what they mean).

    >>> base = {"n_ok": 4, "n_failed": 4, "n_errors": 0, "did_not_run": 0, "ratio": 1.0,
    ...         "step_source": "per_step", "failure_rate": 0.5}
    >>> confound_tag({**base, "ratio": 1.2}, base, is_baseline=False, threshold=1.15)
    ('speed (+20%)', 1.2)
    >>> confound_tag({**base, "n_failed": 0, "failure_rate": 0.0}, base, is_baseline=False, threshold=1.15)
    ('-', 1.0)
    >>> confound_tag({**base, "n_ok": 0, "ratio": float("nan"), "step_source": "no_ok_trial"},
    ...              base, is_baseline=False, threshold=1.15)
    ('n/a', None)
    """
    ran = int(row["n_ok"]) + int(row["n_failed"])
    ratio = finite_or_none(row["ratio"]) if row["step_source"] == base["step_source"] else None
    if is_baseline:
        return "(baseline)", None
    if ran == 0:
        if int(row["n_errors"]):
            return "error", None
        if int(row["did_not_run"]):
            return "did_not_run", None
        return "n/a", None
    if ratio is None or row["step_source"] != "per_step":
        # Upstream compares per-step times only: a wall-clock ratio is mostly setup time.
        return "n/a", ratio
    if ratio > threshold:
        return f"speed (+{round((ratio - 1) * 100)}%)", ratio
    rate, base_rate = finite_or_none(row["failure_rate"]), finite_or_none(base["failure_rate"])
    if rate is not None and base_rate is not None and rate < base_rate:
        return "-", ratio
    return "no effect", ratio


def confound_text(tag: str, ratio: float | None, *, threshold: float) -> str:
    """What a :func:`confound_tag` means, as ``matrix.md``, the console and the report show
    it: where the cell's median ratio stands against the confound line — never "no effect",
    which beside a "slower +14%" verdict reads as a contradiction (the line is a threshold,
    not a test).

    >>> confound_text("no effect", 1.14, threshold=1.15)
    'below the 1.15 confound line, ×1.14'
    >>> confound_text("speed (+29%)", 1.29, threshold=1.15)
    'above the 1.15 confound line, ×1.29'
    >>> confound_text("n/a", None, threshold=1.15)
    'n/a'
    """
    if ratio is None or tag in ("(baseline)", "n/a", "error", "did_not_run"):
        return tag
    side = "above" if tag.startswith("speed") else "below"
    return f"{side} the {threshold:g} confound line, ×{ratio:.3g}"


def _not_run(ds: xr.Dataset, status: np.ndarray) -> np.ndarray:
    """Per cell, trials not run: one ``did_not_run`` record stands for a cell's whole unrun
    remainder (its ``info`` ``not_run`` says how many); older runs wrote one per trial."""
    per: np.ndarray = status == TrialStatus.DID_NOT_RUN.value  # a record stands for one trial
    if "info" in ds and "not_run" in ds.info_key.values.tolist():
        counts = ds["info"].sel(info_key="not_run").transpose("cell", "trial").values.astype(str)
        per = np.where(per, [[int(c) if c.isdigit() else 1 for c in row] for row in counts], 0)
    return np.asarray(per.sum(axis=1))
