"""The ``aorta`` command.

Each subcommand lives in its own module and only parses options, calls the library and maps
errors to an :class:`~aorta.errors.ExitCode`. :func:`main` returns the code (tests call it
in-process); only :func:`entry`, the console script, exits.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer

from aorta import __version__
from aorta.errors import AortaError, AortaWarning, ExitCode, LocatedError

from . import bisect as _bisect
from . import bundle as _bundle
from . import compare as _compare
from . import hang as _hang
from . import history as _history
from . import info as _info
from . import launch as _launch
from . import recipe as _recipe
from . import report as _report
from . import sweep as _sweep
from . import trace as _trace
from . import workloads as _workloads
from ._options import option, redacted_output, say_warnings

__all__ = ["app", "entry", "main"]

app = typer.Typer(
    name="aorta",
    help="Triage GPU training problems: sweep mitigations, compare cells, analyse traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        print(f"aorta {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        option(
            "--version -V",
            None,
            "Print aorta's version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Triage GPU training problems: sweep mitigations, compare cells, analyse traces."""


app.add_typer(_recipe.app, name="recipe")
app.add_typer(_sweep.app, name="sweep")
app.add_typer(_trace.app, name="trace")
app.add_typer(_hang.app, name="hang")
app.add_typer(_workloads.app, name="workloads")
app.add_typer(_info.mitigations_app, name="mitigations")
app.add_typer(_history.app, name="history")
app.command("env")(_info.env)
app.command("compare")(_compare.compare)
app.command("report")(_report.report)
app.command("bundle")(_bundle.bundle)
app.command("bisect")(_bisect.bisect)
app.command("launch", context_settings=_launch.CONTEXT)(_launch.launch)


def _error(message: str) -> None:
    # One line, on stderr, whatever went wrong.
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    print(f"Error: {first}", file=sys.stderr)


def _warning_lines() -> Callable[..., None]:
    """A ``warnings.showwarning`` for one command: aorta's own warnings (a trace or record
    left out) as one ``warning:`` line each, every line once.

    Once by its text, not by Python's rule (once per place in the code): a command reads a
    run's records several times (``sweep resume``: what is done, then the matrix), and any
    ``catch_warnings`` on the way — numpy's, xarray's, ours — clears what Python remembers,
    so the same record's warning came back at each read.
    """
    said: set[str] = set()

    def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if not issubclass(category, AortaWarning):
            _default_showwarning(message, category, *args, **kwargs)
        elif (line := str(message)) not in said:
            said.add(line)
            say_warnings([line])

    return show


_default_showwarning = warnings.showwarning


def _click_error(name: str) -> type[Any]:
    """click's exception class ``name`` as the running typer raises it.

    typer vendors click since 0.26 (before, it used the click package); either way its public
    ``typer.BadParameter`` derives from that click's ``UsageError`` and ``ClickException``, so
    their classes are found without importing typer's private ``_click``.
    """
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


_UsageError = _click_error("UsageError")
_ClickException = _click_error("ClickException")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``aorta`` command with ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Everything it prints is redacted as the run's files are (secret names, credential shapes,
    the secrets of the recipes, cluster files and runs it reads)."""
    with redacted_output():
        return _main(argv)


def _readable(text: str) -> str:
    r"""A docstring as ``--help`` shows it: each paragraph one run of words (the terminal
    wraps it), code quotes dropped, and brackets kept.

    Typer renders help as Rich markup, which keeps a docstring's source line breaks (the help
    came out ragged) and drops what looks like a tag (``[v0, …, vN]``, ``[memory]``).

    >>> _readable("Find it: [v0, …, vN]\n(v0 good).\n\nSays ``running``.")
    'Find it: \\[v0, …, vN] (v0 good).\n\nSays running.'
    """
    from rich.markup import escape

    paragraphs = inspect.cleandoc(text).replace("``", "").split("\n\n")
    return escape("\n\n".join(" ".join(p.split()) for p in paragraphs))


def _readable_help(command: Any) -> Any:
    """``command`` and its subcommands with every help text :func:`_readable`."""
    if command.help:
        command.help = _readable(command.help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = _readable(param.help)
    for sub in getattr(command, "commands", {}).values():
        _readable_help(sub)
    return command


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = _readable_help(typer.main.get_command(app))
    try:
        with warnings.catch_warnings():
            # aorta's own warnings are this command's output, one line each, whatever filters
            # the caller's Python runs with (pytest makes them errors elsewhere).
            warnings.simplefilter("always", AortaWarning)  # _warning_lines says each once
            warnings.showwarning = _warning_lines()
            rv = command.main(args=args, prog_name="aorta", standalone_mode=False)
    except LocatedError as exc:
        # Every problem of a recipe or cluster file, one line each: the user fixes them in one
        # pass; what it would only be warned about comes first, as `recipe validate` says it
        # (fixing the problems uncovers nothing unseen); the checks they held back are said
        # last, not as an error.
        say_warnings(exc.warnings)
        for line in exc.lines():
            _error(line)
        if (skipped := exc.skipped_line()) is not None:
            print(skipped, file=sys.stderr)
        return int(exc.exit_code)
    except AortaError as exc:
        _error(str(exc))
        return int(exc.exit_code)
    except _UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            return int(ExitCode.USAGE)  # `aorta` or `aorta sweep` alone: the help was the answer
        hint = (
            f" (see 'aorta {' '.join(exc.ctx.command_path.split()[1:])} --help')" if exc.ctx else ""
        )
        _error(exc.format_message() + hint)
        return int(ExitCode.USAGE)
    except _ClickException as exc:
        _error(exc.format_message())
        return int(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        _error("interrupted")
        return int(ExitCode.INTERRUPTED)
    if rv is None:
        return int(ExitCode.OK)
    if rv == ExitCode.INTERRUPTED:
        # Typer turns a Ctrl-C outside the engine into a bare exit code: say what happened.
        _error("interrupted")
    return int(rv)


def entry() -> None:
    """Console-script entry point: run :func:`main` and exit with its code."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # `aorta ... | head`: the reader went away; exit quietly like other Unix tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = int(ExitCode.ERROR)
    sys.exit(code)
