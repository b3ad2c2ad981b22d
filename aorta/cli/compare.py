"""``aorta compare RUN [RUN_B]``: cells against the baseline, or two runs cell by cell."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from aorta import envvars
from aorta import report as pages  # light: explain_text loads on first use
from aorta.errors import ExitCode, UsageError

from ._options import (
    Alpha,
    Baseline,
    Json,
    Metric,
    Ranks,
    Resamples,
    Seed,
    Stat,
    Traces,
    option,
    stats_flags,
    traces_missing,
)

if TYPE_CHECKING:
    from aorta import StatsOptions


def compare(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="One run directory (its cells against its baseline) or two, A B (each cell of B against the same cell of A).",
            exists=True,
            show_default=False,
        ),
    ],
    baseline: Baseline = None,
    alpha: Alpha = None,
    metric: Metric = None,
    fail_on_regression: Annotated[
        bool,
        option(
            "--fail-on-regression",
            envvars.FAIL_ON_REGRESSION,
            "Exit 4 when a cell is slower and beyond the band: the whole CI of its ratio above the threshold (a CI regression gate).",
        ),
    ] = False,
    stat: Stat = None,
    seed: Seed = None,
    resamples: Resamples = None,
    traces: Traces = False,
    ranks: Ranks = None,
    explain: Annotated[
        str | None,
        option(
            "--explain",
            envvars.EXPLAIN,
            "Where CELL's step time went against the baseline: per kernel/op/class from the trial traces, with bootstrap CIs and the residual. One run.",
            metavar="CELL",
        ),
    ] = None,
    by: Annotated[
        Literal["kernel", "op", "class"],
        option(
            "--by",
            envvars.EXPLAIN_BY,
            "With --explain: GPU kernels, host ops (self time; CPU-only runs), or classes.",
        ),
    ] = "kernel",
    signature: Annotated[
        str | None,
        option(
            "--signature",
            envvars.SIGNATURE,
            "Count trials with this failure signature (nccl_error, hang, out_of_memory, custom:<id> ...) as the failure event: is it more or less frequent than in the baseline? One run.",
            metavar="NAME",
        ),
    ] = None,
    as_json: Json = False,
) -> int:
    """Compare cells: is there a difference (Holm-adjusted Mann–Whitney: slower / faster / no
    difference detected) and does it matter (the ratio's CI against the band: beyond / within
    band / undecided); failures (workload, hang, crash) by Boschloo's exact test. With
    --explain CELL: where the cell's step time went against the baseline, item by item."""
    if (traces or explain is not None) and (missing := traces_missing(runs)):
        raise UsageError(f"{'--explain' if explain is not None else '--traces'}: {missing[0]}")
    options = stats_flags(alpha=alpha, seed=seed, resamples=resamples, ranks=ranks, stat=stat)
    if explain is not None:
        return _explain(runs, explain, baseline=baseline, by=by, options=options, as_json=as_json)
    from aorta.matrix import gate_regressions
    from aorta.report import (
        compare_paths,
        comparison_json,
        comparison_table,
        statistics_line,
    )

    df = compare_paths(
        runs,
        baseline=baseline,
        metric=metric,
        options=options,
        traces=traces,
        signature=signature,
    )
    found = pages.comparison_findings(df, runs)
    if as_json:
        doc = comparison_json(df)
        doc["findings"] = [pages.finding_json(f, run=runs[-1]) for f in found]
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        what = f"{runs[1]} against {runs[0]}" if len(runs) == 2 else str(runs[0])
        event = f" — failure event: signature {signature}" if signature else ""
        print(f"{what} — baseline: {df.attrs['baseline']}{event}")
        print(statistics_line(df.attrs).removeprefix("- "))
        if found:
            print("\nFindings (failures and hangs first):")
            print("\n".join(pages.findings_lines(found, run=runs[-1], style="text", bullet="  ")))
        print()
        print(comparison_table(df))
    if df.attrs.get("drift"):
        print(
            f"warning: the baseline drifts over the run order (Kendall p = {df.attrs['drift_p']:.2g}): "
            "a trend in time can look like a cell effect",
            file=sys.stderr,
        )
    slow = gate_regressions(df)
    if fail_on_regression and slow:
        print(
            f"regression: slower beyond the band (CI above {df.attrs['threshold']:.3g}): {', '.join(slow)}",
            file=sys.stderr,
        )
        return ExitCode.GATE
    return ExitCode.OK


def _explain(
    runs: list[Path],
    cell: str,
    *,
    baseline: str | None,
    by: str,
    options: StatsOptions,
    as_json: bool,
) -> int:
    if len(runs) != 1:
        raise UsageError("--explain takes one run directory")
    reduction = options.ranks
    if reduction == "worst":  # the compare default: explain's is the mean over ranks
        reduction = "mean"
    try:
        text = pages.explain_text(
            runs[0],
            cell,
            baseline,
            as_json=as_json,
            by=by,
            ranks=reduction,
            options=options,
        )
    except ValueError as exc:
        raise UsageError(f"--explain: {exc}") from None
    print(text)
    return ExitCode.OK
