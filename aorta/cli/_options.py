"""Options shared by several commands — the sweep's (sweep run, launch), the statistics flags
(compare, report), the output ones —, each with its ``AORTA_*`` twin, and the flags that have
none (:data:`NO_TWIN`)."""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, Literal

import typer
from typer.models import OptionInfo

import aorta
from aorta import envvars
from aorta.run import no_traces_hint
from aorta.store import Redactor  # loaded with the CLI anyway (store.bundle, aorta bundle)

if TYPE_CHECKING:
    from aorta import StatsOptions

#: What this command's output is redacted with: the secrets of the files and runs it read.
_PRINTING: contextvars.ContextVar[Redactor | None] = contextvars.ContextVar(
    "aorta_printing", default=None
)


class _Redacting:
    """A text stream whose every write is redacted first (each write whole: ``print``
    writes its text in one call, so a secret is never cut between two)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        redactor = _PRINTING.get()
        if redactor is not None and text.strip():
            text = redactor.text(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def redacted_output() -> Iterator[None]:
    """Everything the command prints (stdout, stderr: results, warnings, errors) redacted
    with the run's rules — secret names and credential shapes, the secrets of this shell's
    environment, and those of every recipe, cluster file and run the command reads
    (:func:`redact_secrets_of`)."""
    token = _PRINTING.set(Redactor.for_run(env=os.environ).printing())
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Redacting(out), _Redacting(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
        _PRINTING.reset(token)


def redact_secrets_of(*sources: Path | str | Redactor | None) -> None:
    """Redact this command's output with the secrets of these recipe or cluster files, run
    directories or redactors too (``None`` is skipped)."""
    current = _PRINTING.get()
    if current is None:
        return
    for source in sources:
        if source is None:
            continue
        if isinstance(source, Redactor):
            more = source
        elif Path(source).is_dir():
            more = Redactor.of_run(source, env={})
        else:
            more = Redactor.of_file(source)
        current = current.joined(more.printing())
    _PRINTING.set(current)


def option(flags: str, twin: str | None, help: str, **typer_options: Any) -> OptionInfo:
    """A flag as every command declares it: its names (``"--output -o"``), its ``AORTA_*``
    twin (``None``: a flag of :data:`NO_TWIN`), its help, and typer's other keywords
    (``min=``, ``dir_okay=``, ``rich_help_panel=`` …)."""
    info: OptionInfo = typer.Option(*flags.split(), envvar=twin, help=help, **typer_options)
    return info


Command = Annotated[
    list[str] | None,
    typer.Argument(
        help="Probe mode: the command every trial runs, after '--'.", show_default=False
    ),
]
RecipeFile = Annotated[
    Path | None,
    option("--recipe -r", envvars.RECIPE, "The recipe to sweep.", dir_okay=False),
]
Output = Annotated[
    Path,
    option("--output -o", envvars.OUTPUT, "Root of the run directories (here)."),
]
Ticket = Annotated[
    str | None,
    option("--ticket", envvars.TICKET, "Override the recipe's ticket."),
]
MitigationsFiles = Annotated[
    list[Path] | None,
    option(
        "--mitigations-file",
        envvars.MITIGATIONS_FILE,
        "Extra mitigations/environments (YAML or JSON); repeatable.",
        dir_okay=False,
    ),
]
Verbose = Annotated[
    bool,
    option("--verbose -v", envvars.VERBOSE, "Stream per-trial lines to stderr."),
]
Json = Annotated[bool, option("--json", envvars.JSON_OUTPUT, "Print JSON instead of text.")]
Strict = Annotated[
    bool,
    option("--strict", envvars.STRICT, "Exit 4 when any cell has failing or erroring trials."),
]

# -- the statistics flags of compare and report ----------------------------------------------
# The statistics flags default to None, "not given": the defaults are StatsOptions' (one
# place; importing it here would load the matrix stage for `aorta --help`). The shown
# defaults are its values, held equal by tests/cli/test_stats_flags.py.

Baseline = Annotated[
    str | None,
    option(
        "--baseline",
        envvars.BASELINE,
        "The reference cell (default: the recipe's baseline). One run only.",
    ),
]
Alpha = Annotated[
    float | None,
    option(
        "--alpha",
        envvars.ALPHA,
        "Significance level; CIs are at 1 - alpha.",
        min=0.0,
        max=1.0,
        show_default="0.05",
    ),
]
Metric = Annotated[
    str | None,
    option(
        "--metric",
        envvars.METRIC,
        "step_time_ms (median of post-warm-up steps per trial), wall_clock_s, elapsed_s, or a workload metric (default: the matrix's, step_time_ms or, for a run without step times, wall_clock_s).",
    ),
]
Traces = Annotated[
    bool,
    option(
        "--traces",
        envvars.TRACES,
        "Analyse the runs' profiler traces, so --metric can be a trace metric (exposed_comm_ms, idle_ms, gemm_tflops, busbw_all_reduce_gbps, ...).",
    ),
]
Ranks = Annotated[
    str | None,
    option(
        "--ranks",
        envvars.RANKS,
        "A trace metric's value per trial: worst (max for times, min for rates), max, min, mean, median, or a rank number.",
        show_default="worst",
    ),
]
Seed = Annotated[
    int | None,
    option("--seed", envvars.BOOTSTRAP_SEED, "Seed of the bootstrap.", show_default="0"),
]
Resamples = Annotated[
    int | None,
    option(
        "--resamples",
        envvars.BOOTSTRAP_RESAMPLES,
        "Bootstrap resamples.",
        min=1,
        show_default="10000",
    ),
]
Stat = Annotated[
    Literal["median", "mean", "p95"] | None,
    option(
        "--stat",
        envvars.STAT,
        "For step_time_ms: each trial's median (default), mean or p95 (stalls) of its post-warm-up steps.",
        show_default="median",
    ),
]


def rank_reduction(text: str) -> str | int:
    """``--ranks`` as :func:`aorta.compare` takes it: a rank number or a reduction's name."""
    return int(text) if text.strip().isdigit() else text.strip()


def stats_flags(
    *,
    alpha: float | None,
    seed: int | None,
    resamples: int | None,
    ranks: str | None,
    stat: str | None = None,
) -> StatsOptions:
    """The one :class:`~aorta.matrix.options.StatsOptions` of a command's statistics flags:
    each flag given replaces its default (``aorta.StatsOptions`` loads on first use)."""
    flags: dict[str, Any] = {"alpha": alpha, "seed": seed, "resamples": resamples, "stat": stat}
    flags["ranks"] = None if ranks is None else rank_reduction(ranks)
    return aorta.StatsOptions(**{k: v for k, v in flags.items() if v is not None})


#: The flags without an ``AORTA_*`` twin (``"<command> --flag"``), each with why: a variable is
#: a setting that holds for every later command of a shell, and these are not settings. Every
#: other flag of every command has one (``envvar=`` on its option); tests/cli/test_twins.py
#: walks the command both ways. ``--help`` (``-h``) has none anywhere.
NO_TWIN: dict[str, str] = {
    "--version": "prints the version and exits: an action, not a setting",
    "sweep run --dry-run": "left set, it would turn every later sweep into a plan that runs "
    "nothing and exits 0 (a CI gate passing without a trial)",
    "launch --dry-run": "as sweep run --dry-run: every later launch would start nothing",
    "sweep run --resume": "names one run directory: every later sweep run would resume it "
    "instead of starting a run (aorta sweep resume RUN says it in one word)",
    "launch --attach": "names one Slurm job: every later launch would follow it instead of "
    "submitting its own",
    "launch --in-job": "hidden: written by aorta into its own sbatch script, not a user's flag",
    "trace summarize --csv": "where this one summary's tables go: every later summary would "
    "overwrite them",
    "trace diff --csv": "this one diff's file: every later diff would overwrite it",
    "trace merge --output": "this one merge's file: every later merge would overwrite it",
    "trace memory --plot": "this one trace's figure: every later plot would overwrite it",
}


def say_warnings(warnings: Iterable[str]) -> None:
    """Print each of ``warnings`` as one ``warning:`` line on stderr: the one writer of those
    lines, for aorta's own warnings (:mod:`aorta.cli`'s ``showwarning``), for what ``recipe
    validate`` finds and for what a refused recipe carries (``LocatedError.warnings``), so
    every command that checks a recipe shows the same lines."""
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def traces_missing(runs: Sequence[Path]) -> list[str]:
    """For each run directory without any profiler trace, the line that says how to get some
    (``--traces``, ``--explain``); empty when every run has traces."""
    hints = [no_traces_hint(run) for run in runs if (Path(run) / "cells").is_dir()]
    return [h for h in hints if h]
