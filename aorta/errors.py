"""Exit codes and the exception hierarchy.

Every failure a user can cause has its own exception type; :mod:`aorta.cli` maps each type to
an :class:`ExitCode` in one place and prints one line, ``Error: <message>``.
"""

from __future__ import annotations

import enum

__all__ = [
    "AortaError",
    "ExitCode",
    "GateTripped",
    "IncompleteMatrix",
    "RecipeError",
    "RecipeProblem",
    "TraceError",
    "TraceWarning",
    "UsageError",
    "summarize_problems",
]


class ExitCode(enum.IntEnum):
    """Process exit codes of the ``aorta`` command.

    Tests and docs use the names, never the numbers.
    """

    #: The run completed; failing cells are findings, not errors.
    OK = 0
    #: A runtime error stopped the command (one line ``Error: ...`` says which).
    ERROR = 1
    #: Bad command line or bad recipe: nothing ran.
    USAGE = 2
    #: The matrix is incomplete: no usable baseline to compare against.
    INCOMPLETE = 3
    #: A gate tripped (``--strict``, ``--fail-on-regression``).
    GATE = 4
    #: Interrupted (Ctrl-C / SIGTERM); the run directory is resumable.
    INTERRUPTED = 130


class AortaError(Exception):
    """Base class of every error aorta raises on purpose; maps to :attr:`ExitCode.ERROR`."""

    exit_code: ExitCode = ExitCode.ERROR


class UsageError(AortaError):
    """The user asked for something that cannot be done as asked; nothing ran."""

    exit_code = ExitCode.USAGE


def summarize_problems(problems: list[str], *, source: str | None, empty: str) -> str:
    """One line for a list of located problems: the first (with its file) and a count of the rest.

    >>> summarize_problems(["a: bad", "b: worse"], source="r.yaml", empty="?")
    'r.yaml: a: bad (+1 more problem)'
    """
    head = problems[0] if problems else empty
    if source:
        head = f"{source}: {head}"
    extra = len(problems) - 1
    if extra > 0:
        head += f" (+{extra} more problem{'s' if extra > 1 else ''})"
    return head


class RecipeProblem:
    """One problem in a recipe: where (``cells[2].mitigations``) and what."""

    __slots__ = ("message", "path")

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def __repr__(self) -> str:
        return f"RecipeProblem({self.path!r}, {self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RecipeProblem) and (self.path, self.message) == (
            other.path,
            other.message,
        )

    def __hash__(self) -> int:
        return hash((self.path, self.message))


class RecipeError(UsageError):
    """A recipe that cannot be loaded or planned.

    ``problems`` lists every problem found, each naming its path inside the document;
    ``str(err)`` is the first one (with the file name when known) and a count of the rest.
    """

    def __init__(self, problems: list[RecipeProblem] | str, *, source: str | None = None) -> None:
        if isinstance(problems, str):
            problems = [RecipeProblem("", problems)]
        self.problems = list(problems)
        self.source = source
        super().__init__(self._summary())

    def _summary(self) -> str:
        return summarize_problems(
            [str(p) for p in self.problems], source=self.source, empty="invalid recipe"
        )

    def with_source(self, source: str) -> RecipeError:
        return RecipeError(self.problems, source=source)


class IncompleteMatrix(AortaError):
    """The matrix has no usable baseline (all its trials failed or none ran)."""

    exit_code = ExitCode.INCOMPLETE


class GateTripped(AortaError):
    """A gate such as ``--fail-on-regression`` or ``--strict`` tripped."""

    exit_code = ExitCode.GATE


class TraceError(AortaError):
    """A trace file that cannot be read; the message names the file and the byte offset."""


class TraceWarning(UserWarning):
    """A trace that could not be used where one was expected (missing, unreadable); the
    message names the file. Loading goes on without it (its numbers are NaN)."""
