"""Options shared by several commands, each with its ``AORTA_*`` twin."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from aorta import envvars

MitigationsFiles = Annotated[
    list[Path] | None,
    typer.Option(
        "--mitigations-file",
        envvar=envvars.MITIGATIONS_FILE,
        help="Extra mitigations/environments (YAML or JSON); repeatable.",
        dir_okay=False,
    ),
]
Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", envvar=envvars.VERBOSE, help="Stream per-trial lines to stderr."
    ),
]
Json = Annotated[
    bool, typer.Option("--json", envvar=envvars.JSON_OUTPUT, help="Print JSON instead of text.")
]
