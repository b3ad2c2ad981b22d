"""Regular expressions from outside aorta, with a bound: RE2.

Every pattern aorta matches against what a trial printed — the recipe's ``custom_patterns``
and ``step_time_regex``, the built-in and plugin failure signatures — and every
trace-classification rule (:class:`aorta.trace.Rule`) is compiled here with
RE2 (`google-re2 <https://github.com/google/re2>`_). RE2 matches by automaton, never by
backtracking: time is linear in the text whatever the pattern (``^(a+)+$`` on a long line of
``a`` takes as long as ``a``), and the compiled program is bounded by :data:`MAX_PROGRAM_BYTES`
(a pattern over it is refused when the recipe loads). The price is two features Python's
``re`` has and RE2 lacks, refused with the reason named:

* backreferences (``\\1``, ``(?P=name)``);
* lookaround (``(?=…)``, ``(?!…)``, ``(?<=…)``, ``(?<!…)``).

Other differences: ``\\Z`` is spelled ``\\z``; a repetition count is at most 1,000
(``a{1001}`` and ``a{99999999999}`` are refused, where RE2 alone would read the latter as
literal text). The full syntax: https://github.com/google/re2/wiki/Syntax.

Patterns are matched one line at a time (``^``/``$`` are line ends; nothing matches a
newline). ``text="bytes"`` compiles for raw log bytes (a ``.`` is one byte, as Python's
``re`` on bytes; the pattern is UTF-8; group names come back as bytes); ``text="str"`` for
decoded text.

Examples
--------
>>> rx = compile_regex(r"took (?P<ms>[0-9.]+) ms")
>>> rx.search(b"step 3 took 12.5 ms").groupdict()
{b'ms': b'12.5'}
>>> compile_regex(r"(a)\\1")
Traceback (most recent call last):
...
aorta.regex.RegexError: backreferences (\\1, (?P=name)) are not supported: aorta matches with RE2, which runs in linear time and has none
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import re2

__all__ = [
    "MAX_PROGRAM_BYTES",
    "MAX_REPEAT",
    "Regex",
    "RegexError",
    "compile_alternation",
    "compile_regex",
]

#: Memory RE2 may use to compile one pattern (its program and its DFA cache).
MAX_PROGRAM_BYTES = 8 << 20
#: Memory for the one automaton that finds candidate lines for a whole signature library.
MAX_ALTERNATION_BYTES = 64 << 20
#: Largest repetition count (``{n}``, ``{n,m}``), RE2's own limit.
MAX_REPEAT = 1000
#: Longest pattern text accepted.
MAX_PATTERN_CHARS = 10_000

Regex = Any  # re2._Regexp: the binding has no public name for it


class RegexError(ValueError):
    """A pattern RE2 cannot compile, or one over a bound; the message says which and why."""


def _options(*, text: Literal["bytes", "str"], capture: bool, max_mem: int) -> re2.Options:
    opts = re2.Options()
    opts.log_errors = False  # RE2 would print to stderr; the error is raised instead
    opts.never_nl = True  # a match never crosses a line end
    opts.never_capture = not capture
    opts.max_mem = max_mem
    if text == "bytes":
        opts.encoding = re2.Options.Encoding.LATIN1
    return opts


def _big_repeat(pattern: str) -> str | None:
    """The first ``{n}``/``{n,m}`` count over :data:`MAX_REPEAT` outside classes and escapes."""
    i, in_class, n = 0, False, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":  # []] and [^]] hold a literal ]
                i += 1
            elif pattern[i + 1 : i + 3] == "^]":
                i += 2
        elif c == "{":
            end = pattern.find("}", i)
            body = pattern[i + 1 : end] if end > 0 else ""
            parts = body.split(",")
            if (
                1 <= len(parts) <= 2
                and parts[0].isdigit()
                and (len(parts) == 1 or parts[1] == "" or parts[1].isdigit())
            ) and any(p and int(p) > MAX_REPEAT for p in parts):
                return "{" + body + "}"
        i += 1
    return None


def _explain(pattern: str, message: str) -> str:
    if message.startswith("invalid perl operator") and any(
        s in pattern for s in ("(?=", "(?!", "(?<=", "(?<!")
    ):
        return (
            "lookaround ((?=…), (?!…), (?<=…), (?<!…)) is not supported: aorta matches with "
            "RE2, which runs in linear time and has none; match the line and put the rest in "
            "a condition, or spell the alternatives out"
        )
    if "(?P=" in pattern or (
        message.startswith("invalid escape sequence: \\") and message[-1:].isdigit()
    ):
        return (
            "backreferences (\\1, (?P=name)) are not supported: aorta matches with RE2, which "
            "runs in linear time and has none"
        )
    if message.startswith("invalid escape sequence: \\Z"):
        return "\\Z is spelled \\z in RE2 (the end of the text)"
    if "too large" in message or "out of memory" in message:
        return (
            f"the pattern compiles to more than {MAX_PROGRAM_BYTES >> 20} MiB "
            f"(RE2's bound; simplify its repetitions)"
        )
    syntax = "https://github.com/google/re2/wiki/Syntax"
    return f"not a valid regular expression (RE2 syntax, {syntax}): {message}"


def compile_regex(
    pattern: str,
    *,
    text: Literal["bytes", "str"] = "bytes",
    capture: bool = True,
) -> Regex:
    """Compile ``pattern`` with RE2 for one-line, linear-time matching.

    Parameters
    ----------
    pattern
        The regular expression (RE2 syntax, which is Python's ``re`` without backreferences
        and lookaround). ``^``/``$`` match at line ends.
    text
        ``"bytes"``: matched against raw log bytes (``.`` is one byte); ``"str"``: against
        text.
    capture
        ``False`` drops capturing groups (faster when only the match position is wanted).

    Returns
    -------
    re2._Regexp
        With ``search``, ``finditer``, ``match`` as in Python's ``re``.

    Raises
    ------
    RegexError
        The pattern is empty, longer than :data:`MAX_PATTERN_CHARS`, uses a feature RE2
        lacks (named), repeats more than :data:`MAX_REPEAT` times, or compiles to more than
        :data:`MAX_PROGRAM_BYTES`.

    Examples
    --------
    >>> compile_regex("^(a+)+$").search(b"a" * 100_000 + b"b") is None
    True
    >>> compile_regex("a{99999999999}")
    Traceback (most recent call last):
    ...
    aorta.regex.RegexError: the repetition {99999999999} is over RE2's limit of 1000
    """
    if not isinstance(pattern, str) or not pattern:
        raise RegexError("must be a non-empty regular expression")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise RegexError(f"a pattern is at most {MAX_PATTERN_CHARS:,} characters")
    big = _big_repeat(pattern)
    if big is not None:
        raise RegexError(f"the repetition {big} is over RE2's limit of {MAX_REPEAT}")
    opts = _options(text=text, capture=capture, max_mem=MAX_PROGRAM_BYTES)
    source: str | bytes = pattern.encode() if text == "bytes" else pattern
    multiline: str | bytes = b"(?m)" + pattern.encode() if text == "bytes" else "(?m)" + pattern
    try:
        return re2.compile(multiline, opts)
    except re2.error:
        pass
    try:  # again without the (?m) prefix, so the error quotes the pattern as written
        re2.compile(source, opts)
        detail: Any = "the pattern cannot be matched line by line"
    except re2.error as exc:
        detail = exc.args[0] if exc.args else str(exc)
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    raise RegexError(_explain(pattern, str(detail))) from None


def compile_alternation(patterns: Sequence[str]) -> Regex | None:
    """One automaton matching a line when any of ``patterns`` does (bytes, no captures).

    Every pattern must already compile alone (:func:`compile_regex`). ``None`` when the
    union is over :data:`MAX_ALTERNATION_BYTES`: match the patterns one by one then.

    >>> rx = compile_alternation(["NCCL error", "^Traceback"])
    >>> rx.search(b"ok\\nTraceback (most recent call last):").start()
    3
    """
    if not patterns:
        return None
    union = b"(?m)" + b"|".join(b"(?:" + p.encode() + b")" for p in patterns)
    opts = _options(text="bytes", capture=False, max_mem=MAX_ALTERNATION_BYTES)
    try:
        return re2.compile(union, opts)
    except re2.error:
        return None
