"""Options shared by several commands, each with its ``AORTA_*`` twin."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from aorta import envvars
from aorta.run.profiler import no_traces_hint

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


def traces_missing(runs: Sequence[Path]) -> list[str]:
    """For each run directory without any profiler trace, the line that says how to get some
    (``--traces``, ``--explain``); empty when every run has traces."""
    hints = [no_traces_hint(run) for run in runs if (Path(run) / "cells").is_dir()]
    return [h for h in hints if h]
