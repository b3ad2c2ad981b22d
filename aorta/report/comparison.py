"""A comparison as people read it: the text of ratios, verdicts and p-values, the table and JSON
of ``aorta compare``, and :func:`compare_paths`, its run-directory edge.

The one owner of how a comparison row reads: ``matrix.md``, the trace section, ``report.md``,
the terminal and the end-of-run summary all use :func:`ratio_text`, :func:`verdict_text`,
:func:`ci_text`, :func:`p_text` and :func:`number_text`. A row is one row of
:func:`aorta.compare` (or of :func:`aorta.matrix.summary.summarize`, which has its columns).

Examples
--------
>>> import pandas as pd
>>> row = pd.Series({"difference": "no difference detected", "band": "undecided", "ratio": 1.234,
...                  "ratio_ci_low": 0.9, "ratio_ci_high": 1.5, "delta": 2.0, "trials_needed": None})
>>> ratio_text(row), verdict_text(row, threshold=1.15)
('1.23 [0.9, 1.5]', 'no difference detected +23% [-10, +50] — undecided: the CI crosses the band edge +15%')
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import xarray as xr

from aorta.errors import UsageError
from aorta.matrix.compare import compare, compare_runs, require_baseline
from aorta.matrix.findings import undecided_reason
from aorta.matrix.load import load_run
from aorta.matrix.options import StatsOptions
from aorta.matrix.select import default_metric

__all__ = [
    "ci_text",
    "compare_datasets",
    "compare_paths",
    "comparison_json",
    "comparison_table",
    "failures_text",
    "is_missing",
    "level_text",
    "markdown_table",
    "ms_text",
    "number_text",
    "p_text",
    "percent_text",
    "plain",
    "ratio_text",
    "statistics_line",
    "verdict_text",
]


# --- one value -------------------------------------------------------------------------------


def is_missing(v: Any) -> bool:
    """Whether ``v`` is no value: ``None``, ``pd.NA`` or NaN.

    >>> is_missing(None), is_missing(float("nan")), is_missing(0)
    (True, True, False)
    """
    return v is None or v is pd.NA or (isinstance(v, float | np.floating) and math.isnan(v))


def number_text(v: Any, fmt: str = ".3g") -> str:
    """``v`` formatted by ``fmt``, or ``—`` when missing.

    >>> number_text(3.14159), number_text(float("nan"))
    ('3.14', '—')
    """
    return "—" if is_missing(v) else format(v, fmt)


def p_text(v: Any) -> str:
    """A p-value with two significant digits (``—`` when missing).

    >>> p_text(0.000623), p_text(None)
    ('0.00062', '—')
    """
    return number_text(v, ".2g")


def ms_text(v: Any) -> str:
    """A time: three significant digits below 100, whole numbers above (``—`` when missing).

    >>> ms_text(11.43), ms_text(1234.5), ms_text(None)
    ('11.4', '1234', '—')
    """
    if is_missing(v):
        return "—"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def level_text(level: Any) -> str:
    """A confidence level as people write it: ``95%``, ``97.5%``, ``98.75%``.

    >>> level_text(0.95), level_text(0.975), level_text(1 - 0.05 / 4)
    ('95%', '97.5%', '98.75%')
    """
    return f"{float(level) * 100:.4g}%"


def percent_text(v: Any) -> str:
    """A rate as a whole percentage (``—`` when missing).

    >>> percent_text(0.875), percent_text(float("nan"))
    ('88%', '—')
    """
    return "—" if is_missing(v) else f"{v:.0%}"


# --- one row ---------------------------------------------------------------------------------


def ci_text(row: Any) -> str:
    """`` [low, high]`` of the row's ratio CI, or ``""`` without one.

    >>> ci_text({"ratio_ci_low": 1.2, "ratio_ci_high": 1.45})
    ' [1.2, 1.45]'
    """
    if is_missing(row["ratio_ci_low"]) or is_missing(row["ratio_ci_high"]):
        return ""
    return f" [{row['ratio_ci_low']:.3g}, {row['ratio_ci_high']:.3g}]"


def ratio_text(row: Any) -> str:
    """``1.32 [1.20, 1.45]`` for a comparison row (``1`` for the baseline, ``—`` without data).

    >>> ratio_text({"difference": "baseline", "ratio": 1.0})
    '1'
    """
    if row["difference"] == "baseline":
        return "1"
    if is_missing(row["ratio"]):
        return "—"
    return f"{row['ratio']:.3g}{ci_text(row)}"


def _pct(ratio: float) -> str:
    v = (ratio - 1) * 100
    return f"{v:+.0f}" if abs(v) >= 0.95 else f"{v:+.1f}"


def _band_ci(row: Any) -> tuple[float, float, float | None]:
    """The CI the band is judged on (``band_ci_*`` at ``band_ci_level``), else the ratio's."""
    lo, hi, level = (row.get(k) for k in ("band_ci_low", "band_ci_high", "band_ci_level"))
    if not (is_missing(lo) or is_missing(hi)):
        return float(lo), float(hi), None if is_missing(level) else float(level)
    return row["ratio_ci_low"], row["ratio_ci_high"], None


def verdict_text(row: Any, *, reason: str = "", threshold: float | None = None) -> str:
    """One readable verdict from a row's two answers: ``slower +9%, 97.5% CI [+6, +12] —
    within band``.

    The percentages are the ratio and the CI the band is judged on (``band_ci_*``, at
    ``1 - alpha / m`` — its level named — or, without it, the ratio's ``1 - alpha`` CI) as
    changes; with a zero baseline median the difference itself (``slower +3.2 vs baseline
    0``); ``(≥ N trials per cell)`` when no p at these trial counts could reach significance.
    An ``undecided`` band says why (``reason``, default
    :func:`aorta.matrix.findings.undecided_reason` of the row and the band's ``threshold``;
    default the threshold of the frame the row came from, ``row.attrs["threshold"]``, which
    ``DataFrame.iterrows`` and ``.loc`` carry: every output words a verdict the same).

    >>> verdict_text({"difference": "slower", "band": "within band", "ratio": 1.09,
    ...     "ratio_ci_low": 1.06, "ratio_ci_high": 1.12, "delta": 0.9, "trials_needed": None})
    'slower +9% [+6, +12] — within band'
    >>> verdict_text({"difference": "faster", "band": "undecided", "ratio": 0.19, "ratio_ci_low": 0.18,
    ...     "ratio_ci_high": 0.73, "band_ci_low": 0.17, "band_ci_high": 0.95, "band_ci_level": 0.975,
    ...     "delta": -4.0, "trials_needed": None}, threshold=1.15)
    'faster -81%, 97.5% CI [-83, -5] — undecided: the 97.5% CI crosses the band edge -13%'
    >>> verdict_text({"difference": "no difference detected", "band": "undecided", "ratio": 1.2,
    ...     "ratio_ci_low": float("nan"), "ratio_ci_high": float("nan"), "delta": 2.0, "trials_needed": 5})
    'no difference detected +20% (≥ 5 trials per cell) — undecided: no CI below 5 timed trials per group'
    """
    difference = str(row["difference"])
    if difference in ("baseline", "no data"):
        return difference
    ratio = row["ratio"]
    lo, hi, level = _band_ci(row)
    if ratio is not None and math.isfinite(ratio):
        text = f"{difference} {_pct(ratio)}%"
        if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
            label = f", {level * 100:.4g}% CI " if level is not None else " "
            text += f"{label}[{_pct(lo)}, {_pct(hi)}]"
    else:
        delta = row["delta"]
        text = f"{difference} {delta:+.3g} vs baseline 0" if delta == delta else difference
    needed = row["trials_needed"]
    if needed is not None and needed is not pd.NA and needed == needed:
        text += f" (≥ {int(needed)} trials per cell)"
    band = str(row["band"])
    if band == "undecided":
        if threshold is None:
            # Without it the reason could only say "a band edge", where matrix.md, compare
            # and the findings name the edge or say the CI spans the whole band.
            attrs = getattr(row, "attrs", None) or {}
            threshold = attrs.get("threshold")
        return f"{text} — undecided: {reason or undecided_reason(row, threshold)}"
    return f"{text} — {band}"


def failures_text(row: Any) -> str:
    """``3 (2 hang, 1 workload)``: a row's failed trials and their kinds.

    >>> failures_text({"n_failed": 3, "n_failed_workload": 1, "n_failed_hang": 2, "n_failed_crash": 0})
    '3 (1 workload, 2 hang)'
    """
    n = int(row["n_failed"])
    kinds = [
        f"{int(row[f'n_failed_{k}'])} {k}"
        for k in ("workload", "hang", "crash")
        if int(row[f"n_failed_{k}"])
    ]
    return f"{n} ({', '.join(kinds)})" if kinds else str(n)


def _failure_text(row: Any) -> str:
    ran = int(row["n_ok"]) + int(row["n_failed"])
    if not ran:
        return "—"
    text = f"{percent_text(row['failure_rate'])} ({int(row['n_failed'])}/{ran})"
    text += f" [{percent_text(row['failure_ci_low'])}, {percent_text(row['failure_ci_high'])}]"
    if row["failures_vs_baseline"] in ("more", "fewer"):
        text += f" {row['failures_vs_baseline']} (p_adj {row['failure_p_adj']:.2g})"
    return text


# --- a whole comparison ----------------------------------------------------------------------


def _looks(stats: Mapping[str, Any], anytime: str, planned: str, *, failures: bool = False) -> str:
    """An anytime-valid test's looks in words (``compare(sequential=True)``): the anytime
    one, and the planned ones (the failures' interim looks, the look at ``max_trials``), each
    with its share of α."""
    key = "failure_anytime_share" if failures else "anytime_share"
    # Runs judged before the failures had their own split stored one share for both.
    share = float(stats.get(key) or stats.get("anytime_share") or 1.0)
    cap = stats.get("max_trials")
    if cap is None:
        return anytime
    looks = stats.get("failure_looks") if failures else None
    if not looks:
        looks = [[cap, 1 - share]]
    at = " and ".join(f"at {int(t)} trials with {float(part):.0%}" for t, part in looks)
    return f"{anytime} with {share:.0%} of α and {planned} {at}"


def statistics_line(stats: Mapping[str, Any]) -> str:
    """One markdown bullet saying how the statistics were computed ("" without statistics).

    ``stats`` is a comparison's ``attrs`` (:func:`aorta.compare`).
    """
    if not stats:
        return ""
    band = stats.get("band") or [None, None]
    value = stats.get("trial_value", "")
    units = f" ({stats['units']})" if stats.get("units") else ""
    level = float(stats.get("ci_level", 0.95))
    if stats.get("sequential"):  # aorta.compare(sequential=True): an adaptive run's verdicts
        timing_looks = _looks(stats, "the sequence", "Mann–Whitney")
        failure_looks = _looks(
            stats, "an e-process on the pairs (safe 2x2 test)", "Boschloo", failures=True
        )
        return (
            f"- statistics (anytime-valid): trial value = {value}{units}, trials that ended "
            f"{stats.get('trials')}, trial k of a cell paired with trial k of the baseline; "
            f"ratio = geometric mean of the paired ratios, {level:.0%} confidence sequence "
            "(scale-invariant normal mixture on the log ratios); "
            f"band [{band[0]:.3g}, {band[1]:.3g}] on the "
            f"{float(stats.get('band_ci_level', level)):.2%} confidence sequence (Bonferroni over "
            f"{stats.get('family_size')} cells); slower/faster: {timing_looks}, Holm over the "
            f"cells; failures: {failure_looks}, Holm over the cells; settled as more/fewer, within "
            f"±{stats.get('failure_margin')}, or for futility (changes of "
            f"±{stats.get('futility_difference')} or more ruled out at "
            f"{1 - float(stats.get('futility_level') or 0):.0%}, not before "
            f"{stats.get('futility_min_pairs')} pairs)"
        )
    return (
        f"- statistics: trial value = {value}{units}, trials that ended {stats.get('trials')}; "
        f"ratio = cell median / baseline median, {level_text(level)} bootstrap CI "
        f"({stats.get('resamples')} resamples, seed {stats.get('seed')}; 1 − α/m over the "
        "cells with a CI: every interval shown is this one); "
        f"p_adj = Mann–Whitney, Holm over {stats.get('family_size')} cells; "
        f"slower/faster at α = {stats.get('alpha')}; band [{band[0]:.3g}, {band[1]:.3g}] judged "
        f"on that CI, from "
        f"{stats.get('min_timed')} timed trials per group; "
        f"below {stats.get('min_trials')} trials per cell no test can reach significance; "
        "failures (workload, hang, crash): Boschloo's exact test, Holm-adjusted"
    )


def comparison_table(df: pd.DataFrame, *, style: Literal["text", "markdown"] = "text") -> str:
    """A comparison as a table for a terminal (``text``) or a document (``markdown``): the
    failure columns (rate with its Wilson CI, failures by kind, Boschloo p_adj) before timing.

    Raises ``ValueError`` for another ``style``.

    Examples
    --------
    >>> row = dict(n=3, n_ok=3, n_failed=0, n_failed_workload=0, n_failed_hang=0, n_failed_crash=0,
    ...            n_timed=3, failure_rate=0.0, failure_ci_low=0.0,
    ...            failure_ci_high=0.56, median=4.0, iqr=0.5, cv=0.1, ratio=1.0,
    ...            ratio_ci_low=float("nan"), ratio_ci_high=float("nan"), p_adj=float("nan"),
    ...            failure_p_adj=float("nan"), failures_vs_baseline="baseline", difference="baseline",
    ...            band="baseline", delta=0.0, trials_needed=None)
    >>> print(comparison_table(pd.DataFrame([row], index=pd.Index(["base"], name="cell")), style="markdown"))
    | cell | n_ok/n | failure rate [CI] | failures | failure p_adj | median | IQR | CV | ratio [CI] | p_adj | verdict |
    |---|---|---|---|---|---|---|---|---|---|---|
    | base | 3/3 | 0% (0/3) [0%, 56%] | 0 | — | 4 | 0.5 | 10% | 1 | — | baseline |
    """
    if style not in ("text", "markdown"):
        raise ValueError(f"style must be 'text' or 'markdown', got {style!r}")
    head = ["cell", "n_ok/n", "failure rate [CI]", "failures", "failure p_adj", "median", "IQR"]
    head += ["CV", "ratio [CI]", "p_adj", "verdict"]
    threshold = df.attrs.get("threshold")
    body = []
    for cell, row in df.iterrows():
        body.append(
            [
                str(cell),
                f"{int(row['n_ok'])}/{int(row['n'])}",
                _failure_text(row),
                failures_text(row),
                p_text(row["failure_p_adj"]),
                number_text(row["median"]),
                number_text(row["iqr"]),
                percent_text(row["cv"]),
                ratio_text(row),
                p_text(row["p_adj"]),
                verdict_text(row, threshold=threshold),
            ]
        )
    if style == "markdown":
        return markdown_table(head, body)
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head).rstrip()] + [fmt.format(*r).rstrip() for r in body]
    return "\n".join(lines)


def markdown_table(head: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A markdown table of ``head`` and the rows of ``body`` (cells as given).

    >>> print(markdown_table(["a", "b"], [["1", "2"]]))
    | a | b |
    |---|---|
    | 1 | 2 |
    """
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def plain(v: Any) -> Any:
    """``v`` as plain JSON data: numpy scalars as Python numbers, missing values as ``None``.

    >>> plain([np.float64(1.5), np.int64(2), float("nan")])
    [1.5, 2, None]
    """
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    if is_missing(v):
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
    >>> df = pd.DataFrame({"ratio": [float("nan")]}, index=pd.Index(["a"], name="cell"))
    >>> df.attrs = {"seed": 0}
    >>> comparison_json(df)
    {'statistics': {'seed': 0}, 'cells': [{'cell': 'a', 'ratio': None}]}
    """
    cells = []
    for cell, row in df.iterrows():
        cells.append({"cell": str(cell), **{k: plain(v) for k, v in row.items()}})
    return {"statistics": {k: plain(v) for k, v in df.attrs.items()}, "cells": cells}


# --- from run directories --------------------------------------------------------------------


def compare_paths(
    runs: Sequence[str | Path],
    *,
    baseline: str | None = None,
    metric: str | None = None,
    options: StatsOptions | None = None,
    traces: bool = False,
    signature: str | None = None,
) -> pd.DataFrame:
    """One run's cells against its baseline, or two runs' shared cells (B against A), on
    ``metric`` (default the matrix's: :func:`aorta.matrix.select.default_metric` of the first
    run).

    ``traces`` loads the runs' trace metrics (:func:`aorta.load_run`), so ``metric`` can be
    one of them, reduced over ranks by the options' ``ranks``. ``options``: the statistics
    (:class:`~aorta.matrix.options.StatsOptions`, default its defaults). ``signature`` (one
    run): the failure comparison counts trials with that failure signature
    (:func:`aorta.compare`).

    Raises
    ------
    UsageError
        Not one or two runs; ``baseline`` or ``signature`` with two runs; a path that is not a
        run; an
        unknown baseline cell, metric or rank; ``alpha`` outside (0, 1).
    IncompleteMatrix
        The baseline has no trial that ran, or two runs share no cell.
    """
    if len(runs) not in (1, 2):
        raise UsageError(f"give one run (cells vs its baseline) or two (A B), got {len(runs)}")
    if len(runs) == 2 and baseline is not None:
        raise UsageError(
            "--baseline applies to one run; with two runs each cell of B is compared with the same cell of A"
        )
    if len(runs) == 2 and signature is not None:
        raise UsageError("--signature applies to one run (its cells against its baseline)")
    df = compare_datasets(
        [load_run(p, traces=traces) for p in runs],
        baseline=baseline,
        metric=metric,
        options=options,
        signature=signature,
    )
    df.attrs["runs"] = [str(p) for p in runs]
    return df


def compare_datasets(
    datasets: Sequence[xr.Dataset],
    *,
    baseline: str | None = None,
    metric: str | None = None,
    options: StatsOptions | None = None,
    signature: str | None = None,
) -> pd.DataFrame:
    """:func:`aorta.compare` of one run (which needs a usable baseline) or
    :func:`aorta.compare_runs` of two, with a bad option as a :class:`~aorta.errors.UsageError`;
    ``metric`` default the matrix's (:func:`aorta.matrix.select.default_metric`).

    Raises as :func:`compare_paths`.
    """
    if metric is None:
        # A probe without steps has only its wall clock: step_time_ms said "no data" for every
        # cell (and the gate could not fire) where matrix.md compared the wall clocks.
        metric = default_metric(datasets[0], baseline if len(datasets) == 1 else None)
    kw: dict[str, Any] = {"metric": metric, "options": options}
    try:
        if len(datasets) == 1:
            df = compare(datasets[0], baseline, signature=signature, **kw)
            require_baseline(df)
        else:
            df = compare_runs(datasets[0], datasets[1], **kw)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return df
