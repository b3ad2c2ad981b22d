"""``aorta report RUN``: tables and figures into ``RUN/report/``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from aorta.errors import ExitCode

from .compare import Alpha, Baseline, Metric, Resamples, Seed


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
) -> int:
    """Write the comparison (CSV, JSON), the trials (CSV), PNG figures and report.md into RUN/report/."""
    from aorta.report import write_report

    for path in write_report(
        run, baseline=baseline, metric=metric, alpha=alpha, seed=seed, resamples=resamples
    ):
        print(path)
    return ExitCode.OK
