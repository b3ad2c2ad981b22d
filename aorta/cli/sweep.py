"""``aorta sweep run|resume|status``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from aorta import envvars
from aorta.errors import ExitCode, UsageError

from ._options import Json, MitigationsFiles, Verbose

app = typer.Typer(help="Run a recipe's matrix of cells × trials.", no_args_is_help=True)


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="Probe mode: the command to run in every trial, after '--'.", show_default=False),
    ] = None,
    recipe: Annotated[
        Path | None, typer.Option("--recipe", "-r", envvar=envvars.RECIPE, help="The recipe file.", dir_okay=False)
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and check it; run nothing.")] = False,
    output: Annotated[
        Path, typer.Option("--output", "-o", envvar=envvars.OUTPUT, help="Root of the run directories.")
    ] = Path("triage_results"),
    ticket: Annotated[str | None, typer.Option("--ticket", envvar=envvars.TICKET, help="Override the recipe's ticket.")] = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", envvar=envvars.TIMEOUT, help="Deadline per trial in seconds (overrides the recipe).", min=0.001),
    ] = None,
    isolation: Annotated[
        Literal["auto", "in_process", "process"] | None,
        typer.Option("--isolation", envvar=envvars.ISOLATION, help="Override the recipe's trial_isolation."),
    ] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Resume this run directory instead of starting a new one.", file_okay=False)
    ] = None,
    mitigations_file: MitigationsFiles = None,
    verbose: Verbose = False,
    as_json: Json = False,
) -> int:
    """Run every cell × trial of a recipe (or print the plan with --dry-run)."""
    from aorta.console import format_plan, plan_to_dict
    from aorta.engine import prepare

    if recipe is None and resume is None:
        raise UsageError("give --recipe FILE (or --resume RUN_DIR)")
    if resume is not None:
        raise UsageError("--resume is not available yet")
    prepared = prepare(
        recipe,
        command=command or None,
        ticket=ticket,
        timeout_s=timeout,
        isolation=isolation,
        mitigations_files=mitigations_file or (),
    )
    if dry_run:
        if as_json:
            print(json.dumps(plan_to_dict(prepared.plan, isolation=prepared.isolation, warnings=prepared.warnings), indent=2))
        else:
            print(format_plan(prepared.plan, isolation=prepared.isolation, warnings=prepared.warnings))
        return ExitCode.OK
    raise UsageError("running sweeps is not available yet; use --dry-run")
