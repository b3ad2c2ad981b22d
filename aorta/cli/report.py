"""``aorta report RUN [RUN_B]``: tables and figures into ``RUN/report/``; with ``--html`` the
self-contained page too, or, for two runs, the page comparing them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from aorta import envvars
from aorta import report as pages  # light: its html and compare_html load on first use
from aorta.errors import ExitCode, UsageError

from ._options import (
    Alpha,
    Baseline,
    Metric,
    Ranks,
    Resamples,
    Seed,
    Traces,
    option,
    say_warnings,
    stats_flags,
    traces_missing,
)

Html = Annotated[
    bool,
    option(
        "--html",
        envvars.HTML,
        "Also write report/report.html: one self-contained page (figures inline, no network). With two runs: the page comparing B with A.",
    ),
]


def report(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="A run directory; or two, A B, with --html (each cell of B against the same cell of A).",
            exists=True,
            file_okay=False,
            show_default=False,
        ),
    ],
    baseline: Baseline = None,
    alpha: Alpha = None,
    metric: Metric = None,
    seed: Seed = None,
    resamples: Resamples = None,
    traces: Traces = False,
    ranks: Ranks = None,
    html: Html = False,
) -> int:
    """Write the comparison (CSV, JSON), the trials (CSV), PNG figures and report.md into
    RUN/report/; with --traces also the trace metrics, and their section in RUN/matrix.md;
    with --html also report.html. Two runs with --html: RUN_B/report/compare_<A>.html."""
    from aorta.report import write_report

    if traces:  # the report is still worth writing: say why it has no trace section
        say_warnings(f"--traces: {hint}" for hint in traces_missing(runs))
    options = stats_flags(alpha=alpha, seed=seed, resamples=resamples, ranks=ranks)
    kw: dict[str, Any] = {"options": options, "traces": traces}
    if len(runs) > 2:
        raise UsageError(f"give one run, or two (A B) with --html; got {len(runs)}")
    if len(runs) == 2:
        if not html:
            raise UsageError(
                "two runs make a comparison page: add --html (`aorta compare A B` prints the table)"
            )
        if baseline is not None:
            raise UsageError(
                "--baseline applies to one run; with two runs each cell of B is compared with the same cell of A"
            )
        print(pages.compare_html(runs[0], runs[1], metric=metric, **kw))
        return ExitCode.OK
    for path in write_report(runs[0], baseline=baseline, metric=metric, **kw):
        print(path)
    if html:
        print(pages.html(runs[0], baseline=baseline, metric=metric, **kw))  # None: the matrix's
    return ExitCode.OK
