"""The matrix: per-cell summaries of trial records, and the ``matrix.md`` / ``matrix.json`` files.

The columns and semantics follow upstream AORTA so its users recognise the table:

* **failure rate** = workload failures / trials that ran (``ok`` + ``workload_failed``);
  setup, infrastructure and timeout problems are counted as **errors** beside it;
* **mean step** from the best source every trial of the cell has, in this order:
  ``per_step`` (mean of the step times) → ``elapsed_per_iter`` (elapsed / executed
  iterations) → ``wall_clock_total`` (the trial's wall clock) → ``missing``;
* **confound**: ``speed (+N%)`` when the cell's mean step exceeds the baseline's by more than
  the recipe's threshold; ``n/a`` when the two cells' step sources differ.

Beside upstream's columns each row carries the statistics of :func:`aorta.compare` against
the baseline (trial value = median of post-warm-up steps; ratio of medians with a bootstrap
CI, Holm-adjusted exact Mann–Whitney p, verdict; Fisher's test on failures), and the
rendered files record how they were computed (``statistics``: seed, resamples, alpha, band).
When the baseline has no per-step times the statistics use each trial's wall clock.

Pure functions: :func:`summarize` and the renderers take records and return data or text.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from aorta.store.record import TrialRecord, TrialStatus

__all__ = [
    "CellSummary",
    "Matrix",
    "StepSource",
    "matrix_json",
    "matrix_markdown",
    "statistics_line",
    "summarize",
]

StepSource = Literal["per_step", "elapsed_per_iter", "wall_clock_total", "missing"]
_LADDER: tuple[StepSource, ...] = ("per_step", "elapsed_per_iter", "wall_clock_total")


@dataclass
class CellSummary:
    """One row of the matrix."""

    name: str
    cell_id: str
    mitigations: list[str]
    environment: str
    n_trials: int
    n_ran: int
    n_ok: int
    failures: int
    errors: int
    did_not_run: int
    failure_rate: float | None
    mean_step_ms: float | None
    step_source: StepSource
    confound: str
    statuses: dict[str, int] = field(default_factory=dict)
    trials: list[dict[str, Any]] = field(default_factory=list)
    # -- statistics against the baseline (aorta.matrix.compare.compare); None where undefined --
    #: Trials whose value counts for timing.
    n_timed: int = 0
    #: Median, IQR and CV of the trial values (the metric of ``Matrix.statistics``).
    median: float | None = None
    iqr: float | None = None
    cv: float | None = None
    #: Wilson interval of the failure rate.
    failure_ci: list[float] | None = None
    #: Cell median / baseline median, and its bootstrap CI.
    ratio: float | None = None
    ratio_ci: list[float] | None = None
    p: float | None = None
    p_adj: float | None = None
    fisher_p_adj: float | None = None
    #: ``more`` / ``fewer`` failures than the baseline (significant), ``not significant``…
    failures_vs_baseline: str = ""
    #: ``baseline``, ``slower``, ``faster``, ``no change``, ``inconclusive`` or ``no data``.
    verdict: str = ""
    #: For an inconclusive verdict: trials per cell at which the test can reach alpha.
    trials_needed: int | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Matrix(list[CellSummary]):
    """The rows of a matrix, in cell order, with ``statistics``: how the statistical columns
    were computed (metric, alpha, band, bootstrap seed and resamples, family size)."""

    statistics: dict[str, Any]

    def __init__(
        self, rows: Iterable[CellSummary] = (), statistics: Mapping[str, Any] | None = None
    ):
        super().__init__(rows)
        self.statistics = dict(statistics or {})


def _trial_step_ms(rec: TrialRecord, source: StepSource) -> float | None:
    if source == "per_step":
        return statistics.fmean(rec.step_times_ms) if rec.step_times_ms else None
    if source == "elapsed_per_iter":
        if rec.elapsed_sec is not None and rec.executed_iterations:
            return rec.elapsed_sec * 1000.0 / rec.executed_iterations
        return None
    if source == "wall_clock_total":
        return rec.wall_clock_s * 1000.0 if rec.wall_clock_s is not None else None
    return None


def _mean_step(records: Sequence[TrialRecord]) -> tuple[float | None, StepSource]:
    # Every trial that ran counts: a failing cell's timing is part of the finding.
    timed = [r for r in records if r.status in (TrialStatus.OK, TrialStatus.WORKLOAD_FAILED)]
    if not timed:
        return None, "missing"
    for source in _LADDER:
        values = [_trial_step_ms(r, source) for r in timed]
        if all(v is not None for v in values):
            return statistics.fmean(v for v in values if v is not None), source
    return None, "missing"


def summarize(
    cells: Sequence[Mapping[str, Any]],
    records: Iterable[TrialRecord],
    *,
    baseline: str,
    threshold: float,
    alpha: float = 0.05,
) -> Matrix:
    """Summarise ``records`` per cell, in the order of ``cells`` (dicts of :meth:`Cell.to_dict`),
    with the statistics of each cell against ``baseline`` at level ``alpha``.

    Examples
    --------
    >>> cells = [{"name": "a", "cell_id": "1", "mitigations": ["none"], "environment": {"name": "local"}, "trials": 1}]
    >>> recs = [TrialRecord(cell="a", cell_id="1", trial=0, status="ok", passed=True, step_times_ms=[2.0, 4.0])]
    >>> rows = summarize(cells, recs, baseline="a", threshold=1.15)
    >>> rows[0].mean_step_ms, rows[0].verdict, rows.statistics["metric"]
    (3.0, 'baseline', 'step_time_ms')
    """
    records = list(records)
    by_cell: dict[str, list[TrialRecord]] = {}
    for rec in records:
        by_cell.setdefault(rec.cell, []).append(rec)
    rows: list[CellSummary] = []
    for cell in cells:
        recs = sorted(by_cell.get(cell["name"], []), key=lambda r: r.trial)
        counts: dict[str, int] = {}
        for r in recs:
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        failures = counts.get("workload_failed", 0)
        n_ok = counts.get("ok", 0)
        ran = n_ok + failures
        errors = sum(counts.get(s, 0) for s in ("setup_failed", "infrastructure_failed", "timeout"))
        mean, source = _mean_step(recs)
        env = cell.get("environment")
        rows.append(
            CellSummary(
                name=cell["name"],
                cell_id=cell.get("cell_id", ""),
                mitigations=list(cell.get("mitigations", [])),
                environment=env.get("name", "") if isinstance(env, Mapping) else str(env or ""),
                n_trials=int(cell.get("trials", len(recs))),
                n_ran=ran,
                n_ok=n_ok,
                failures=failures,
                errors=errors,
                did_not_run=counts.get("did_not_run", 0),
                failure_rate=failures / ran if ran else None,
                mean_step_ms=mean,
                step_source=source,
                confound="",
                statuses=counts,
                trials=[
                    {"trial": r.trial, "status": r.status.value, "error": r.error} for r in recs
                ],
            )
        )
    base = next((r for r in rows if r.name == baseline), None)
    for row in rows:
        row.confound = _confound(row, base, threshold)
    out = Matrix(rows)
    if base is not None:
        out.statistics = _attach_statistics(
            out, cells, records, baseline=baseline, threshold=threshold, alpha=alpha
        )
    return out


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _attach_statistics(
    rows: Sequence[CellSummary],
    cells: Sequence[Mapping[str, Any]],
    records: Sequence[TrialRecord],
    *,
    baseline: str,
    threshold: float,
    alpha: float,
) -> dict[str, Any]:
    from aorta.matrix.compare import compare, comparison_json, trial_values
    from aorta.matrix.dataset import build_dataset

    ds = build_dataset(cells, records, attrs={"baseline": baseline, "threshold": threshold})
    steps = trial_values(ds, metric="step_time_ms", trials="ran").sel(cell=baseline)
    metric = "step_time_ms" if bool(steps.notnull().any()) else "wall_clock_s"
    df = compare(ds, baseline, metric=metric, alpha=alpha, threshold=threshold)
    for row in rows:
        if row.name not in df.index:
            continue
        r = df.loc[row.name]
        lo, hi = _finite(r["failure_ci_low"]), _finite(r["failure_ci_high"])
        rlo, rhi = _finite(r["ratio_ci_low"]), _finite(r["ratio_ci_high"])
        row.n_timed = int(r["n_timed"])
        row.median, row.iqr, row.cv = _finite(r["median"]), _finite(r["iqr"]), _finite(r["cv"])
        row.failure_ci = [lo, hi] if lo is not None and hi is not None else None
        row.ratio = _finite(r["ratio"])
        row.ratio_ci = [rlo, rhi] if rlo is not None and rhi is not None else None
        row.p, row.p_adj = _finite(r["p"]), _finite(r["p_adj"])
        row.fisher_p_adj = _finite(r["fisher_p_adj"])
        row.failures_vs_baseline = str(r["failures_vs_baseline"])
        row.verdict = str(r["verdict"])
        needed = r["trials_needed"]
        row.trials_needed = None if _finite(needed) is None else int(needed)
        row.note = str(r["note"])
    return comparison_json(df)["statistics"]


def _confound(row: CellSummary, base: CellSummary | None, threshold: float) -> str:
    if base is None or row is base:
        return "baseline" if row is base else ""
    if row.mean_step_ms is None or base.mean_step_ms is None:
        return ""
    if row.step_source != base.step_source:
        return "n/a"
    ratio = row.mean_step_ms / base.mean_step_ms if base.mean_step_ms > 0 else float("inf")
    return f"speed (+{(ratio - 1) * 100:.0f}%)" if ratio > threshold else ""


def matrix_json(rows: Sequence[CellSummary], *, header: Mapping[str, Any]) -> dict[str, Any]:
    """The ``matrix.json`` document: the run's header fields, how the statistics were computed
    (``statistics``, from a :class:`Matrix`) and one entry per cell."""
    return {
        "schema_version": 1,
        **header,
        "statistics": dict(getattr(rows, "statistics", {})),
        "cells": [r.to_dict() for r in rows],
    }


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def _fmt_p(v: float | None) -> str:
    return "—" if v is None else f"{v:.2g}"


def _fmt_ratio(r: CellSummary) -> str:
    if r.verdict == "baseline":
        return "1"
    if r.ratio is None:
        return "—"
    ci = f" [{r.ratio_ci[0]:.3g}, {r.ratio_ci[1]:.3g}]" if r.ratio_ci else ""
    return f"{r.ratio:.3g}{ci}"


def _fmt_verdict(r: CellSummary) -> str:
    if r.verdict == "inconclusive":
        more = f" (≥ {r.trials_needed} per cell)" if r.trials_needed else ""
        return f"inconclusive — add trials{more}"
    return r.verdict or "—"


def _fmt_rate(r: CellSummary) -> str:
    if r.failure_rate is None:
        return "—"
    text = f"{r.failure_rate:.0%} ({r.failures}/{r.n_ran})"
    if r.failures_vs_baseline in ("more", "fewer"):
        text = f"**{text} {r.failures_vs_baseline}**"
    return text


def statistics_line(stats: Mapping[str, Any]) -> str:
    """One markdown bullet saying how the statistics were computed ("" without statistics)."""
    if not stats:
        return ""
    band = stats.get("band") or [None, None]
    value = stats.get("trial_value", "")
    units = f" ({stats['units']})" if stats.get("units") else ""
    level = float(stats.get("ci_level", 0.95))
    return (
        f"- statistics: trial value = {value}{units}, trials that ended {stats.get('trials')}; "
        f"ratio = cell median / baseline median, {level:.0%} bootstrap CI "
        f"({stats.get('resamples')} resamples, seed {stats.get('seed')}); "
        f"p_adj = exact Mann–Whitney, Holm over {stats.get('family_size')} cells; "
        f"verdicts at α = {stats.get('alpha')} with band [{band[0]:.3g}, {band[1]:.3g}]; "
        f"below {stats.get('min_trials')} trials per cell no test can reach significance; "
        "failures: Fisher's exact test, Holm-adjusted"
    )


def _findings(rows: Sequence[CellSummary], stats: Mapping[str, Any]) -> list[str]:
    base = next((r for r in rows if r.verdict == "baseline"), None)
    out = []
    for r in rows:
        if r.failures_vs_baseline in ("more", "fewer") and base is not None:
            out.append(
                f"- `{r.name}`: **{r.failures_vs_baseline} failures** than the baseline — "
                f"{r.failures}/{r.n_ran} vs {base.failures}/{base.n_ran}, Fisher p_adj "
                f"{_fmt_p(r.fisher_p_adj)} (timing: {_fmt_verdict(r)})"
            )
    for r in rows:
        if r.verdict in ("slower", "faster") and r.ratio is not None:
            ci = f" [{r.ratio_ci[0]:.3g}, {r.ratio_ci[1]:.3g}]" if r.ratio_ci else ""
            out.append(
                f"- `{r.name}`: **{r.verdict}** — {r.ratio:.3g}× the baseline's median{ci}, "
                f"p_adj {_fmt_p(r.p_adj)}"
            )
        elif r.verdict == "inconclusive":
            out.append(f"- `{r.name}`: inconclusive — {r.note}")
    if not out and stats:
        out.append(
            f"- no cell differs from the baseline in failures or beyond the band at "
            f"α = {stats.get('alpha')}"
        )
    return out


def matrix_markdown(rows: Sequence[CellSummary], *, header: Mapping[str, Any]) -> str:
    """The ``matrix.md`` table: upstream's columns, then ratio [CI], p_adj and verdict, and a
    list of findings (significant failure-rate changes first, then timing verdicts)."""
    stats = dict(getattr(rows, "statistics", {}))
    title = header.get("ticket") or "(no ticket)"
    level = float(stats.get("ci_level", 0.95))
    lines = [
        f"# {title} — {header.get('workload', '')}",
        "",
        f"- run: `{header.get('run_dir', '')}`",
        f"- baseline: `{header.get('baseline', '')}`, confound threshold {header.get('threshold', '')}",
        f"- status: {header.get('status', '')}",
    ]
    if stats:
        lines.append(statistics_line(stats))
    lines += [
        "",
        "| cell | mitigations | env | trials | failure rate | failures | errors | mean step (ms) "
        f"| step source | confound | ratio [{level:.0%} CI] | p_adj | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        trials = f"{r.n_ran + r.errors}/{r.n_trials}"
        lines.append(
            f"| {r.name} | {'+'.join(r.mitigations)} | {r.environment} | {trials} | {_fmt_rate(r)} | {r.failures} | "
            f"{r.errors} | {_fmt_ms(r.mean_step_ms)} | {r.step_source} | {r.confound} | "
            f"{_fmt_ratio(r)} | {_fmt_p(r.p_adj)} | {_fmt_verdict(r)} |"
        )
    findings = _findings(rows, stats)
    if findings:
        lines += ["", "## Findings", "", *findings]
    return "\n".join(lines) + "\n"
