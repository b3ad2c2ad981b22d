"""Text renderings for the terminal: the dry-run plan, the end-of-run summary.

Pure functions returning strings; the CLI prints them.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pandas as pd

from aorta.matrix.findings import findings
from aorta.recipe.plan import Plan
from aorta.report.comparison import comparison_json, verdict_text
from aorta.report.findings import SCREEN_LINES_TEXT, finding_json, findings_lines
from aorta.store.record import TrialRecord, TrialStatus
from aorta.store.rundir import trial_file_name, trial_relpath
from aorta.text import printable

__all__ = ["format_plan", "format_summary", "plan_to_dict", "summary_to_dict"]

#: What a plan or a printed recipe says in place of a probe recipe's command still to come.
COMMAND_PENDING = (
    "none yet: a probe recipe's command comes after '--' (aorta sweep run --recipe R -- cmd args…)"
)


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
    elif r.mode == "probe":
        head.append(f"  command: {COMMAND_PENDING}")
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


def _signature_frame(summary: pd.DataFrame, records: Sequence[TrialRecord]) -> pd.DataFrame:
    """Trials per cell × failure signature, from the records (as
    :func:`aorta.matrix.signatures.signature_counts` counts them in a Dataset)."""
    pairs = [(r.cell, r.signature) for r in records if getattr(r, "signature", None)]
    table = pd.DataFrame(
        0, index=pd.Index([str(c) for c in summary.index], name="cell"), columns=[]
    )
    for cell, name in pairs:
        if cell in table.index:
            if name not in table.columns:
                table[name] = 0
            table.loc[cell, name] += 1
    order = sorted(table.columns, key=lambda s: (-int(table[s].sum()), s))
    return table[order].astype(int)


def _cell_problems(
    cell: str, row: pd.Series, records: Sequence[TrialRecord], run_dir: Any
) -> list[str]:
    """The summary's lines for a cell with failing or erroring trials: counts, the first bad
    trial's record and its error."""
    failures, errors = int(row["n_failed"]), int(row["n_errors"])
    mine = sorted((r for r in records if r.cell == cell), key=lambda r: r.trial)
    parts = []
    if failures:
        parts.append(f"{failures}/{failures + int(row['n_ok'])} failed")
    if errors:
        kinds = Counter(r.status.value for r in mine if r.outcome == "errored")
        parts.append(", ".join(f"{n} {s}" for s, n in sorted(kinds.items())))
    first_bad = next(
        (r for r in mine if r.status not in (TrialStatus.OK, TrialStatus.DID_NOT_RUN)), None
    )
    where = f"{run_dir}/{trial_relpath(cell)}/"
    if first_bad is not None:
        where += trial_file_name(first_bad.trial)
    lines = [f"  {cell}: {'; '.join(parts)} → {where}"]
    if first_bad is not None and first_bad.error:
        lines.append(f"    {printable(first_bad.error[:200])}")
    if first_bad is not None and first_bad.signature_line:
        # What the job said, not only how it ended ("the command exited 1").
        said = printable(first_bad.signature_line[:200])
        lines.append(f"    {first_bad.signature or 'signature'}: {said}")
    return lines


def format_summary(result: Any) -> str:
    """The end-of-run summary of a :class:`~aorta.run.sweep.SweepResult`: counts, the findings
    (:func:`aorta.matrix.findings.findings`: failures and hangs first, then timing), a line
    per non-clean cell with its files, the run dir."""
    summary: pd.DataFrame = result.summaries
    lines = [
        f"{len(summary)} cells — {len(result.clean)} clean, {len(result.failing)} with failing "
        f"trials, {len(result.erroring)} with errors"
    ]
    found = findings(summary, _signature_frame(summary, result.records))
    if found:
        lines.append("Findings (failures and hangs first):")
        lines += findings_lines(
            found, run=result.run_dir, style="text", limit=SCREEN_LINES_TEXT, bullet="  "
        )
    problems = [
        line
        for cell, row in summary.iterrows()
        if int(row["n_failed"]) or int(row["n_errors"])
        for line in _cell_problems(str(cell), row, result.records, result.run_dir)
    ]
    if problems:
        lines += ["Failing trials (first record of each cell):", *problems]
    if result.exit_code.name == "INCOMPLETE":
        lines.append(
            f"warning: the baseline {result.baseline!r} has no trial that ran: comparisons are impossible"
        )
    elif result.baseline in summary.index and int(summary.loc[result.baseline, "n_timed"]) == 0:
        lines.append(
            f"note: the baseline {result.baseline!r} has no timed trial: failures are compared, timing is not"
        )
    lines.append(f"Wrote matrix to {result.run_dir}")
    return "\n".join(lines)


def summary_to_dict(result: Any, *, exit_code: int | None = None) -> dict[str, Any]:
    """The end-of-run summary as plain data (``aorta sweep run --json``): the run directory,
    its status and exit code, the clean / failing / erroring cells, and per cell the trial
    counts (``statuses`` by status) with every column of the summary frame
    (:func:`aorta.matrix.summary.summarize`: failure rate, mean step, confound, ratio and its
    CI, p_adj, verdict …), and the ``findings`` (failures and hangs first). ``exit_code`` is the command's (``--strict`` may turn OK into GATE);
    default the sweep's."""
    code = result.exit_code if exit_code is None else exit_code
    statuses: dict[str, Counter[str]] = {}
    for rec in result.records:
        statuses.setdefault(rec.cell, Counter())[rec.status.value] += 1
    frame = comparison_json(result.summaries)
    # The rows are plain dicts here, without the frame's attrs: the band's threshold is given.
    threshold = getattr(result.summaries, "attrs", {}).get("threshold")
    cells = [
        {
            **cell,
            "verdict": verdict_text(cell, threshold=threshold),
            "statuses": dict(sorted(statuses.get(cell["cell"], Counter()).items())),
        }
        for cell in frame["cells"]
    ]
    return {
        "run_dir": str(result.run_dir),
        "status": result.status,
        "exit_code": int(code),
        "exit_status": getattr(code, "name", str(code)),
        "baseline": result.baseline,
        "clean": list(result.clean),
        "failing": list(result.failing),
        "erroring": list(result.erroring),
        "statistics": frame["statistics"],
        "cells": cells,
        "findings": [
            finding_json(f, run=result.run_dir)
            for f in findings(result.summaries, _signature_frame(result.summaries, result.records))
        ],
    }
