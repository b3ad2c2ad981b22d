"""Text from outside aorta (a trial's logs, a failed command's output) made safe and short to
show.

A log line may hold ANSI escape sequences, carriage returns, backspaces or Unicode bidi
overrides: echoed as they are, they recolour or clear the terminal, move the cursor over
aorta's own lines, or make a line read differently from what it holds. :func:`printable`
writes each such character as a visible escape; everything aorta quotes from a log (the
signature line, ``warn`` patterns, the console's trial lines) goes through it.
:func:`cause_lines` keeps the few lines of a failed command's output that say why, for a
one-line message. :func:`whole_number` reads a number written as text in someone else's file
(a dump's ``'31'``, a trace's ``"-1"``) without the ways ``int`` can fail on it.

Examples
--------
>>> printable("loss nan \\x1b[2J\\x1b[31mall good\\rok")
'loss nan \\\\x1b[2J\\\\x1b[31mall good\\\\x0dok'
>>> printable("tabs\\tstay, é too")
'tabs\\tstay, é too'
"""

from __future__ import annotations

import re

__all__ = ["cause_lines", "printable", "whole_number"]

#: C0 controls but the tab, DEL, C1 controls, and the bidi marks, embeddings, overrides and
#: isolates (U+061C, U+200E–F, U+202A–E, U+2066–9).
_CONTROL = [*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F, *range(0x80, 0xA0)]
_CONTROL += [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _CONTROL}
_FIND = re.compile("[" + "".join(f"\\u{c:04x}" for c in _CONTROL) + "]").search


def printable(text: str) -> str:
    """``text`` with control characters (but the tab) written as ``\\xNN``/``\\uNNNN``.

    Parameters
    ----------
    text
        Any text, typically a line from a trial's log.

    Returns
    -------
    str
        The same text when it holds no control character, else a copy with each one
        escaped; printing it cannot move the cursor, change colours or reorder text.

    Examples
    --------
    >>> printable("\\x1b]0;owned\\x07title")
    '\\\\x1b]0;owned\\\\x07title'
    """
    return text.translate(_ESCAPES) if _FIND(text) else text


#: A line of a failed command's output that says why (docker's ``Error response from daemon``,
#: ``No such file``, a Python exception), not what to do next (``Run 'docker run --help'``).
_CAUSE = re.compile(
    r"(?i)error|fatal|fail|denied|refused|cannot|can't|could not|unable|no such|not found"
    r"|invalid|unknown|permission|exception|killed|timed? ?out|no space|missing"
)


def cause_lines(text: str, *, most: int = 3, width: int = 200) -> str:
    """The lines of a failed command's output that say why, for a one-line message: the last
    ``most`` lines that look like a cause, else the last line; each cut to ``width``
    characters, joined with `` | `` (``""``: no output). Control characters are escaped
    (:func:`printable`): a remote command's colours or cursor moves never reach the terminal
    that prints the message. Secrets are the caller's to mask.

    >>> cause_lines("docker: Error response from daemon: no such device\\n"
    ...             "Run 'docker run --help' for more information")
    'docker: Error response from daemon: no such device'
    >>> cause_lines("step 1\\nstep 2"), cause_lines("")
    ('step 2', '')
    >>> cause_lines("\\x1b[31mError: no such image\\x1b[0m")
    '\\\\x1b[31mError: no such image\\\\x1b[0m'
    """
    lines = [s for s in map(str.strip, text.splitlines()) if s]
    picked = [s for s in lines if _CAUSE.search(s)][-most:] or lines[-1:]
    cut = [printable(s if len(s) <= width else s[: width - 1] + "…") for s in picked]
    return " | ".join(cut)


def whole_number(text: str, *, digits: int = 18) -> int | None:
    """``text`` as an ``int`` when it is one: an optional sign (one ``-``), then at most
    ``digits`` decimal digits, spaces around allowed; ``None`` otherwise — never the
    ``ValueError`` of ``int()`` on ``'--5'``, ``'²'`` or a 5,000-digit string.

    >>> whole_number(" 31 "), whole_number("-1"), whole_number("--284"), whole_number("2²")
    (31, -1, None, None)
    >>> whole_number("9" * 19), whole_number(""), whole_number("-")
    (None, None, None)
    """
    body = text.strip()
    digits_only = body[1:] if body.startswith("-") else body
    if not digits_only.isdecimal() or len(digits_only) > digits:
        return None
    return int(body)
