"""``aorta recipe validate|show``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from aorta import envvars
from aorta.errors import ExitCode, RecipeError
from aorta.recipe import dump_recipe, load_recipe_pending_command

from ._options import MitigationsFiles, option, redact_secrets_of, say_warnings

app = typer.Typer(help="Check and print recipes.", no_args_is_help=True)

RecipeFile = Annotated[Path, typer.Argument(help="The recipe (YAML or JSON).", dir_okay=False)]


@app.command()
def validate(
    file: RecipeFile,
    command: Annotated[
        list[str] | None,
        typer.Argument(help="Probe mode: the command the trials will run, after '--'."),
    ] = None,
    mitigations_file: MitigationsFiles = None,
) -> int:
    """Check a recipe: its structure, the names it uses (mitigations, environments) and what
    a run would refuse (isolation); list every problem, and warn of what a run only warns
    about (a workload not installed here, config keys it does not read)."""
    from aorta.run.prepare import validate_recipe

    redact_secrets_of(file, *(mitigations_file or ()))
    found = validate_recipe(file, command=command or None, mitigations_files=mitigations_file or ())
    if found.problems:
        # The lines every command that refuses a recipe prints (aorta.cli's error ladder):
        # its warnings, then its problems, as `sweep run` and its --dry-run refuse it.
        raise RecipeError(
            found.problems, source=str(file), skipped=found.skipped, warnings=found.warnings
        )
    # What the sweep only warns about is a warning here too (the same lines `sweep run
    # --dry-run` prints): a workload may be a plugin installed only where the run goes.
    say_warnings(found.warnings)
    p = found.plan
    assert p is not None
    note = (
        "; probe recipe: give the command after '--' when you run it"
        if found.pending_command
        else ""
    )
    print(f"{file}: OK — {len(p.cells)} cells, {p.n_trials} trials, baseline {p.baseline!r}{note}")
    return ExitCode.OK


@app.command()
def show(
    file: RecipeFile,
    resolved: Annotated[
        bool,
        option(
            "--resolved",
            envvars.RESOLVED,
            "Every field explicit, as written to recipe.resolved.yaml.",
        ),
    ] = False,
) -> int:
    """Print a recipe as aorta reads it (a probe recipe without its command too: that comes
    after '--' when it runs)."""
    redact_secrets_of(file)
    recipe, pending = load_recipe_pending_command(file)
    if pending:
        from aorta.report import COMMAND_PENDING

        print(f"# command: {COMMAND_PENDING}")
    sys.stdout.write(dump_recipe(recipe, explicit=resolved))
    return ExitCode.OK
