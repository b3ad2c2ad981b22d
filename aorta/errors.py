"""Exit codes and the exception hierarchy.

Every failure a user can cause has its own exception type; :mod:`aorta.cli` maps each type to
an :class:`ExitCode` in one place and prints one line, ``Error: <message>``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "AortaError",
    "AortaWarning",
    "ExitCode",
    "HangEvidenceError",
    "IncompleteMatrix",
    "LocatedError",
    "Problem",
    "RecipeError",
    "RecordWarning",
    "TraceError",
    "TraceWarning",
    "UsageError",
    "by_path",
    "describe_value",
    "invalid",
    "path_parts",
    "summarize_problems",
    "validation_problems",
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


def describe_value(value: object) -> str:
    """How a YAML or JSON user would name a value and its type: ``integer 1``, ``boolean true``.

    >>> describe_value(True), describe_value(3), describe_value("x"), describe_value([1])
    ('boolean true', 'integer 3', "string 'x'", 'a list')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


class Problem:
    """One problem in a document (a recipe, a cluster file): where (``cells[2].mitigations``)
    and what."""

    __slots__ = ("message", "path")

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def __repr__(self) -> str:
        return f"Problem({self.path!r}, {self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Problem) and (self.path, self.message) == (
            other.path,
            other.message,
        )

    def __hash__(self) -> int:
        return hash((self.path, self.message))


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def path_parts(path: str) -> list[str | int]:
    """A problem's path split into keys and list indices.

    >>> path_parts("cells[2].extra_env.X")
    ['cells', 2, 'extra_env', 'X']
    """
    return [int(i) if i else name for name, i in _PATH_PART.findall(path)]


def by_path(problems: Iterable[Problem]) -> list[Problem]:
    """``problems`` in the order of their paths, indices by number (``cells[2]`` before
    ``cells[10]``), problems at one path in the order they came.

    >>> [str(p) for p in by_path([Problem("workload", "w"), Problem("cells[10]", "b"),
    ...                           Problem("cells[2].name", "a"), Problem("", "top")])]
    ['top', 'cells[2].name: a', 'cells[10]: b', 'workload: w']
    """

    def key(p: Problem) -> list[tuple[str, int]]:
        return [(part, -1) if isinstance(part, str) else ("", part) for part in path_parts(p.path)]

    return sorted(problems, key=key)


class LocatedError(UsageError):
    """A document that cannot be used; every problem names its path inside the document.

    ``problems`` lists every problem found; ``str(err)`` is the first one (with the file name
    when known) and a count of the rest; :meth:`lines` is every problem, one line each.
    ``skipped`` names the checks that could not run until these problems are fixed (they
    need what the problems break); ``warnings`` what the document would only be warned about
    once it is fixed (an unknown workload, a config key nothing reads), so that whoever shows
    the problems shows those too, and a user who fixes the problems meets no warning they
    were never shown. Subclasses name the kind of document.
    """

    #: What the summary says when there is no problem to show.
    document = "invalid document"

    def __init__(
        self,
        problems: Sequence[Problem] | str,
        *,
        source: str | None = None,
        skipped: Sequence[str] = (),
        warnings: Sequence[str] = (),
    ) -> None:
        if isinstance(problems, str):
            problems = [Problem("", problems)]
        self.problems = list(problems)
        self.source = source
        self.skipped = tuple(skipped)
        self.warnings = tuple(warnings)
        super().__init__(
            summarize_problems(
                [str(p) for p in self.problems], source=self.source, empty=self.document
            )
        )

    def with_source(self, source: str) -> LocatedError:
        """The same problems, attributed to the file ``source``."""
        return type(self)(
            self.problems, source=source, skipped=self.skipped, warnings=self.warnings
        )

    def lines(self) -> list[str]:
        """Every problem on its own line (with the file name when known).

        >>> err = RecipeError([Problem("trials", "must be ≥ 1"), Problem("cells[1].name", "dup")],
        ...                   source="r.yaml", skipped=["the cell names"])
        >>> err.lines(), err.skipped_line()
        (['r.yaml: trials: must be ≥ 1', 'r.yaml: cells[1].name: dup'], '(not checked until these are fixed: the cell names)')
        """
        head = f"{self.source}: " if self.source else ""
        return [f"{head}{p}" for p in self.problems] or [str(self)]

    def skipped_line(self) -> str | None:
        """The line that names the checks skipped until the problems are fixed, if any."""
        if not self.skipped:
            return None
        return f"(not checked until these are fixed: {'; '.join(self.skipped)})"


def invalid(kind: str, message: str) -> Exception:
    """The error a pydantic validator raises to report ``message`` word for word.

    Pydantic formats ``{names}`` in templates and prefixes a plain ``ValueError`` with
    ``Value error,``; a ``PydanticCustomError`` holding the finished message does neither.
    """
    from pydantic_core import PydanticCustomError

    return PydanticCustomError(kind, "{message}", {"message": message})


_PLAIN_MESSAGES = {
    "string_type": "must be a string, got {got}",
    "int_type": "must be a whole number, got {got}",
    "float_type": "must be a number, got {got}",
    "bool_type": "must be true or false, got {got}",
    "list_type": "must be a list, got {got}",
    "tuple_type": "must be a list, got {got}",
    "dict_type": "must be a mapping, got {got}",
    "model_type": "must be a mapping, got {got}",
    "finite_number": "must be a finite number, got {got}",
    "missing": "required key is missing",
}


def _format_loc(loc: Sequence[Any], at: str) -> str:
    out = at
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def validation_problems(exc: Any, *, at: str = "", hide: Collection[str] = ()) -> list[Problem]:
    """The :class:`Problem`\\ s of a pydantic ``ValidationError``, one per path, in user words.

    ``at`` prefixes every path (the place of the validated object inside its document);
    ``hide`` names union members whose tags pydantic puts in a location (the user never wrote
    them); ``function-...``, ``list[...]`` and ``dict[...]`` tags are always dropped.

    >>> from pydantic import BaseModel, ValidationError
    >>> class Node(BaseModel):
    ...     port: int
    >>> try:
    ...     Node.model_validate({"port": [1]})
    ... except ValidationError as exc:
    ...     validation_problems(exc, at='node_dict["h"]')
    [Problem('node_dict["h"].port', 'must be a whole number, got a list')]
    """
    problems: dict[str, Problem] = {}
    for err in exc.errors(include_url=False):
        loc = [
            p
            for p in err["loc"]
            if not (
                isinstance(p, str) and (p in hide or p.startswith(("function-", "list[", "dict[")))
            )
        ]
        kind, got = err["type"], describe_value(err.get("input"))
        ctx = err.get("ctx") or {}
        if kind in _PLAIN_MESSAGES:
            msg = _PLAIN_MESSAGES[kind].format(got=got)
        elif kind in {"greater_than_equal", "greater_than"}:
            op = "≥" if kind == "greater_than_equal" else ">"
            msg = f"must be {op} {ctx.get('ge', ctx.get('gt'))}, got {got}"
        elif kind in {"less_than_equal", "less_than"}:
            op = "≤" if kind == "less_than_equal" else "<"
            bound = ctx.get("le", ctx.get("lt"))
            if isinstance(bound, float) and bound.is_integer():
                bound = int(bound)
            shown = f"{bound:,}" if isinstance(bound, int) else str(bound)
            msg = f"must be {op} {shown}, got {got}"
        elif kind == "literal_error":
            msg = f"must be one of {ctx.get('expected')}, got {got}"
        else:
            msg = err["msg"]
        # Unions report each alternative at one path: keep the first.
        path = _format_loc(loc, at)
        problems.setdefault(path, Problem(path, msg))
    return list(problems.values())


class RecipeError(LocatedError):
    """A recipe (or a mitigations sidecar file) that cannot be loaded or planned."""

    document = "invalid recipe"


class IncompleteMatrix(AortaError):
    """The matrix has no usable baseline (all its trials failed or none ran)."""

    exit_code = ExitCode.INCOMPLETE


class TraceError(AortaError):
    """A trace file that cannot be read; the message names the file and the byte offset."""


class HangEvidenceError(UsageError):
    """A hang's evidence file that cannot be read safely (a truncated or oversized dump, a
    pickle that names a global, a rank number no job has, more than the analysis may hold);
    the message names the file or folder, the byte offset when there is one, and what is
    wrong. Bad input, so :attr:`ExitCode.USAGE`: nothing was analysed."""


class AortaWarning(UserWarning):
    """The base of aorta's own warnings: something was left out and the work went on (the
    message names what). The CLI prints each as one ``warning:`` line; the tests make them
    errors unless a test expects one."""


class RecordWarning(AortaWarning):
    """Trial records that could not be read (truncated, not a record) and were left out of a
    run's Dataset; the message names them. ``aorta sweep resume`` runs those trials again."""


class TraceWarning(AortaWarning):
    """A trace that could not be used where one was expected (missing, unreadable); the
    message names the file. Loading goes on without it (its numbers are NaN)."""
