"""``aorta history ROOT...``: when each cell changed across runs, what changed with it, and a
gate on the newest run; ``aorta history bless RUN``: the series' reference run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from aorta import envvars
from aorta.errors import ExitCode, UsageError

from ._options import Alpha, Json, option


def history(
    roots: Annotated[
        list[str],
        typer.Argument(
            help="Folders holding run directories at any depth (or run directories); `bless RUN` marks RUN as its series' reference.",
            show_default=False,
        ),
    ],
    as_json: Json = False,
    html: Annotated[
        bool,
        option(
            "--html",
            envvars.HTML,
            "Also write history.html (self-contained) into the first ROOT.",
        ),
    ] = False,
    fail_on_regression: Annotated[
        bool,
        option(
            "--fail-on-regression",
            envvars.FAIL_ON_REGRESSION,
            "Exit 4 when the newest run of a series is slower beyond the band, or fails more, than the previous segment, the runs just before it or the blessed run.",
        ),
    ] = False,
    metric: Annotated[
        str,
        option(
            "--metric",
            envvars.METRIC,
            "step_time_ms (each trial's median post-warm-up step; the wall clock where a run has none) or wall_clock_s.",
        ),
    ] = "step_time_ms",
    alpha: Alpha = None,
) -> int:
    """Change points of every series × cell across runs (step time and failure rate; the
    chance of any false alarm in the whole history at most --alpha), each with the environment
    changes between the runs on either side, and a regression gate on the newest run."""
    if roots and roots[0] == "bless":
        return _bless(roots[1:])
    from aorta.matrix import HistoryMetric
    from aorta.matrix import analyze_history as analyze

    if metric not in ("step_time_ms", "wall_clock_s"):
        raise UsageError(
            f"--metric: aorta history reads step_time_ms or wall_clock_s, got {metric!r}"
        )
    chosen: HistoryMetric = "wall_clock_s" if metric == "wall_clock_s" else "step_time_ms"
    found = analyze(roots, metric=chosen, alpha=0.05 if alpha is None else alpha)
    doc = found.to_json()
    if html:
        from aorta.report import write_history_html

        doc["html"] = str(write_history_html(found, Path(roots[0])))
    if as_json:
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        from aorta.report import history_text

        print(history_text(doc))
        if html:
            print(f"\nwrote {doc['html']}")
    if fail_on_regression and found.regressed:
        return ExitCode.GATE
    return ExitCode.OK


def _bless(runs: list[str]) -> int:
    if len(runs) != 1:
        raise UsageError("aorta history bless takes one run directory")
    from aorta.store import bless

    path = bless(runs[0])
    print(f"blessed {Path(runs[0]).absolute().name}: {path}")
    return ExitCode.OK
