"""The matrix: per-cell summaries of trial records, and the ``matrix.md`` / ``matrix.json`` files.

The columns and semantics follow upstream AORTA so its users recognise the table:

* **failure rate** = workload failures / trials that ran (``ok`` + ``workload_failed``);
  setup, infrastructure and timeout problems are counted as **errors** beside it;
* **mean step** from the best source every trial of the cell has, in this order:
  ``per_step`` (mean of the step times) → ``elapsed_per_iter`` (elapsed / executed
  iterations) → ``wall_clock_total`` (the trial's wall clock) → ``missing``;
* **confound**: ``speed (+N%)`` when the cell's mean step exceeds the baseline's by more than
  the recipe's threshold; ``n/a`` when the two cells' step sources differ.

Pure functions: :func:`summarize` and the renderers take records and return data or text.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from aorta.record import TrialRecord, TrialStatus

__all__ = ["CellSummary", "StepSource", "matrix_json", "matrix_markdown", "summarize"]

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
) -> list[CellSummary]:
    """Summarise ``records`` per cell, in the order of ``cells`` (dicts of :meth:`Cell.to_dict`).

    Examples
    --------
    >>> cells = [{"name": "a", "cell_id": "1", "mitigations": ["none"], "environment": {"name": "local"}, "trials": 1}]
    >>> recs = [TrialRecord(cell="a", cell_id="1", trial=0, status="ok", passed=True, step_times_ms=[2.0, 4.0])]
    >>> summarize(cells, recs, baseline="a", threshold=1.15)[0].mean_step_ms
    3.0
    """
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
    return rows


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
    """The ``matrix.json`` document: the run's header fields and one entry per cell."""
    return {"schema_version": 1, **header, "cells": [r.to_dict() for r in rows]}


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def matrix_markdown(rows: Sequence[CellSummary], *, header: Mapping[str, Any]) -> str:
    """The ``matrix.md`` table (upstream columns)."""
    title = header.get("ticket") or "(no ticket)"
    lines = [
        f"# {title} — {header.get('workload', '')}",
        "",
        f"- run: `{header.get('run_dir', '')}`",
        f"- baseline: `{header.get('baseline', '')}`, confound threshold {header.get('threshold', '')}",
        f"- status: {header.get('status', '')}",
        "",
        "| cell | mitigations | env | trials | failure rate | failures | errors | mean step (ms) | step source | confound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rate = "—" if r.failure_rate is None else f"{r.failure_rate:.0%} ({r.failures}/{r.n_ran})"
        trials = f"{r.n_ran + r.errors}/{r.n_trials}"
        lines.append(
            f"| {r.name} | {'+'.join(r.mitigations)} | {r.environment} | {trials} | {rate} | {r.failures} | "
            f"{r.errors} | {_fmt_ms(r.mean_step_ms)} | {r.step_source} | {r.confound} |"
        )
    return "\n".join(lines) + "\n"
