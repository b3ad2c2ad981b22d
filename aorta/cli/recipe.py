"""``aorta recipe validate|show``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from aorta import envvars
from aorta.errors import ExitCode, RecipeError
from aorta.recipe import load_recipe_pending_command

from ._options import MitigationsFiles, option

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
    """Check a recipe against the schema and the mitigation registry; list every problem."""
    import aorta.recipe as recipes

    note = ""
    try:
        # A probe recipe gets its command at run time: check the rest, and say so.
        recipe, pending = load_recipe_pending_command(file, command=command or None)
        if pending:
            note = "; probe recipe: give the command after '--' when you run it"
        p = recipes.plan(recipe, registry=recipes.Registry.load(files=mitigations_file or ()))
    except RecipeError as exc:
        source = exc.source or str(file)
        for problem in exc.problems:
            print(f"Error: {source}: {problem}", file=sys.stderr)
        return ExitCode.USAGE
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
    import aorta.recipe as recipes

    recipe, pending = load_recipe_pending_command(file)
    if pending:
        from aorta.report import COMMAND_PENDING

        print(f"# command: {COMMAND_PENDING}")
    sys.stdout.write(recipes.dump_recipe(recipe, explicit=resolved))
    return ExitCode.OK
