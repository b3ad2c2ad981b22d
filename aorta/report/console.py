"""Text renderings for the terminal: the dry-run plan, the workload list.

Pure functions returning strings; the CLI prints them.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing only: the CLI imports this module to print a plan
    from aorta.recipe.plan import Plan

__all__ = ["format_plan", "plan_to_dict"]


def _fmt_env(env: dict[str, str]) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) or "(no variables)"


def _fmt_config(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, separators=(", ", ": ")) if config else "{}"


def plan_to_dict(
    plan: Plan, *, isolation: str | None = None, warnings: Sequence[str] = ()
) -> dict[str, Any]:
    """The plan as plain data (``aorta sweep run --dry-run --json``)."""
    return {
        "ticket": plan.recipe.ticket,
        "mode": plan.recipe.mode,
        "workload": plan.workload,
        "command": list(plan.command) if plan.command else None,
        "baseline": plan.baseline,
        "threshold": plan.threshold,
        "timeout_s": plan.timeout_s,
        "isolation": isolation or plan.isolation,
        "n_cells": len(plan.cells),
        "n_trials": plan.n_trials,
        "stop_after": plan.stop_after.model_dump() if plan.stop_after else None,
        "cells": [c.to_dict() for c in plan.cells],
        "warnings": list(warnings),
    }


def format_plan(plan: Plan, *, isolation: str | None = None, warnings: Sequence[str] = ()) -> str:
    """One block per cell (trials, steps, env overlay, merged workload_config, collectors),
    then the baseline, threshold, deadline and isolation."""
    r = plan.recipe
    head = [
        f"Plan: {len(plan.cells)} cells, {plan.n_trials} trials — workload {plan.workload!r}"
        + (f", ticket {r.ticket}" if r.ticket else ""),
    ]
    if plan.command:
        head.append(f"  command: {shlex.join(plan.command)}")
    width = max((len(c.name) for c in plan.cells), default=4)
    lines = []
    for c in plan.cells:
        mark = "*" if c.name == plan.baseline else " "
        steps = c.steps if c.steps is not None else "default"
        collect = ", ".join(x.name for x in c.collect) or "-"
        env_label = c.environment.name + (
            f" ({c.environment.image})" if c.environment.image else ""
        )
        lines.append(
            f"{mark} {c.name:<{width}}  trials={c.trials}  steps={steps}  env={env_label}  "
            f"mitigations={'+'.join(c.mitigations)}"
        )
        lines.append(f"  {'':<{width}}  overlay: {_fmt_env(dict(c.env))}")
        if c.workload_config:
            lines.append(
                f"  {'':<{width}}  workload_config: {_fmt_config(dict(c.workload_config))}"
            )
        if c.collect:
            lines.append(f"  {'':<{width}}  collect: {collect}")
    tail = [
        f"Baseline: {plan.baseline} (*)   confound threshold: {plan.threshold:g}   "
        f"deadline per trial: {plan.timeout_s:g} s   isolation: {isolation or plan.isolation}",
    ]
    if plan.stop_after:
        s = plan.stop_after
        tail.append(f"Stop a cell after {s.events} {s.event_verdict} trial(s)")
    tail += [f"warning: {w}" for w in warnings]
    return "\n".join(head + lines + tail)


def _verdict_lines(rows: Sequence[Any]) -> list[str]:
    """Timing against the baseline: each significant change, then what stays undecided."""
    lines = []
    for row in rows:
        verdict = getattr(row, "verdict", "")
        if verdict in ("slower", "faster") and row.ratio is not None:
            ci = f" [{row.ratio_ci[0]:.3g}, {row.ratio_ci[1]:.3g}]" if row.ratio_ci else ""
            lines.append(
                f"  {row.name}: {verdict}, {row.ratio:.3g}× the baseline's step time{ci} (p_adj {row.p_adj:.2g})"
            )
    undecided = [r for r in rows if getattr(r, "verdict", "") == "inconclusive"]
    if undecided:
        needed = max((r.trials_needed or 0) for r in undecided)
        more = f"; about {needed} trials per cell could decide" if needed else ""
        lines.append(f"  timing inconclusive for {len(undecided)} cell(s){more} (see matrix.md)")
    return lines


def format_summary(result: Any) -> str:
    """The end-of-run summary: counts, a line per non-clean cell with its files, the run dir."""
    rows = result.summaries
    clean = len(result.clean)
    failing = len(result.failing)
    erroring = len(result.erroring)
    lines = [
        f"{len(rows)} cells — {clean} clean, {failing} with failing trials, {erroring} with errors"
    ]
    for row in rows:
        if row.failures == 0 and row.errors == 0:
            continue
        parts = []
        if row.failures:
            parts.append(f"{row.failures}/{row.n_ran} failed")
        if row.errors:
            kinds = ", ".join(
                f"{n} {s}"
                for s, n in sorted(row.statuses.items())
                if s in ("setup_failed", "infrastructure_failed", "timeout")
            )
            parts.append(kinds)
        first_bad = next((t for t in row.trials if t["status"] not in ("ok", "did_not_run")), None)
        where = f"{result.run_dir}/cells/{row.name}/"
        if first_bad is not None:
            where += f"trial_{first_bad['trial']:04d}.json"
        lines.append(f"  {row.name}: {'; '.join(parts)} → {where}")
        if first_bad is not None and first_bad.get("error"):
            lines.append(f"    {first_bad['error'][:200]}")
    lines += _verdict_lines(rows)
    if result.exit_code.name == "INCOMPLETE":
        lines.append(
            f"warning: the baseline {result.baseline!r} has no successful trial: comparisons are impossible"
        )
    lines.append(f"Wrote matrix to {result.run_dir}")
    return "\n".join(lines)
