"""``aorta history show ROOT...`` (``show`` may be left out): when each cell changed across
runs, what changed with it, and a gate on the newest run; ``aorta history bless RUN``: the
series' reference run.

Two subcommands, so ``bless`` is never read as a ROOT: ``aorta history bless`` always blesses;
a folder named ``bless`` (or ``show``) is ``aorta history show bless`` or ``aorta history
./bless``. A first word that names no subcommand is a ROOT of ``show``, so ``aorta history
triage_results/`` reads as it always did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from aorta import envvars
from aorta.errors import ExitCode

from ._options import Alpha, Json, option


class _ShowByDefault(TyperGroup):
    """``aorta history ROOT...`` is ``aorta history show ROOT...``: a first argument that is
    no subcommand and no help flag starts ``show``'s arguments."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        # ctx: typer's vendored click Context (typer._click is private: not named here)
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["show", *args]
        result: list[str] = super().parse_args(ctx, args)
        return result


app = typer.Typer(
    cls=_ShowByDefault,
    help="Across runs: change points, what changed with them, the regression gate "
    "(`aorta history ROOT...` is `aorta history show ROOT...`), and the blessed reference run.",
    no_args_is_help=True,
)


@app.command("show")
def history(
    roots: Annotated[
        list[str],
        typer.Argument(
            help="Folders holding run directories at any depth (or run directories). A folder named like a subcommand: `aorta history show bless` or `./bless`.",
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
            "step_time_ms (each trial's median post-warm-up step; the wall clock where a run has none), wall_clock_s, or a trace metric of the runs that recorded profiler traces, the worst rank's: busy_pct, exposed_comm_ms, total_comm_ms, trace_step_ms, idle_ms, gemm_tflops, busbw_<collective>_gbps … (docs/history.md).",
        ),
    ] = "step_time_ms",
    alpha: Alpha = None,
) -> int:
    """Change points of every series × cell across runs (step time and failure rate; the
    chance of any false alarm in the whole history at most --alpha), each with the environment
    changes between the runs on either side, and a regression gate on the newest run."""
    from aorta.matrix import analyze_history as analyze

    found = analyze(roots, metric=metric, alpha=0.05 if alpha is None else alpha)
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


@app.command("bless")
def bless(
    run: Annotated[
        str,
        typer.Argument(
            help="The run directory that becomes its series' reference for --fail-on-regression.",
            show_default=False,
        ),
    ],
) -> int:
    """Mark RUN as its series' reference: aorta_blessed.json beside the series' runs, which
    `aorta history show --fail-on-regression` compares the newest run with too."""
    from aorta.store import bless as write_blessed

    path = write_blessed(run)
    print(f"blessed {Path(run).absolute().name}: {path}")
    return ExitCode.OK
