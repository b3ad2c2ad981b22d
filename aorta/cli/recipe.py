"""``aorta recipe validate|show``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from aorta.errors import ExitCode, RecipeError

from ._options import MitigationsFiles

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
        try:
            recipe = recipes.load_recipe(file, command=command or None)
        except RecipeError as exc:
            # A probe recipe gets its command at run time: check the rest, and say so.
            if command or not exc.problems or any(p.path != "command" for p in exc.problems):
                raise
            recipe = recipes.load_recipe(file, command=["<command>"])
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
        typer.Option(
            "--resolved", help="Every field explicit, as written to recipe.resolved.yaml."
        ),
    ] = False,
) -> int:
    """Print a recipe as aorta reads it."""
    import aorta.recipe as recipes

    recipe = recipes.load_recipe(file)
    sys.stdout.write(recipes.dump_recipe(recipe, explicit=resolved))
    return ExitCode.OK
