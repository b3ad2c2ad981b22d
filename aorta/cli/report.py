"""``aorta report RUN``: tables and figures into ``RUN/report/``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from aorta.errors import ExitCode

from .compare import Alpha, Baseline, Metric, Ranks, Resamples, Seed, Traces, rank_reduction


def report(
    run: Annotated[
        Path,
        typer.Argument(help="A run directory.", exists=True, file_okay=False, show_default=False),
    ],
    baseline: Baseline = None,
    alpha: Alpha = 0.05,
    metric: Metric = "step_time_ms",
    seed: Seed = 0,
    resamples: Resamples = 10_000,
    traces: Traces = False,
    ranks: Ranks = "worst",
) -> int:
    """Write the comparison (CSV, JSON), the trials (CSV), PNG figures and report.md into
    RUN/report/; with --traces also the trace metrics, and their section in RUN/matrix.md."""
    from aorta.report.report_dir import write_report

    for path in write_report(
        run,
        baseline=baseline,
        metric=metric,
        alpha=alpha,
        seed=seed,
        resamples=resamples,
        traces=traces,
        ranks=rank_reduction(ranks),  # type: ignore[arg-type]
    ):
        print(path)
    return ExitCode.OK
