"""Bounds on what a recipe may ask for, and the checks of names that reach the outside world.

Pure functions, no pydantic: the recipe's models (:mod:`aorta.recipe.model`, its blocks and
fields) turn their findings into located recipe errors, and :mod:`aorta.recipe.registry` uses
the same checks for sidecar files.

Examples
--------
>>> image_ref_problem("rocm/pytorch:latest") is None, MAX_TRIALS
(True, 1000000)
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "MAX_CELLS",
    "MAX_NAME_BYTES",
    "MAX_STEPS",
    "MAX_TIMEOUT_S",
    "MAX_TOTAL_TRIALS",
    "MAX_TRIALS",
    "fit_name",
    "image_ref_problem",
    "name_bytes_problem",
]

# Bounds far beyond any real sweep: they catch typos and values no run could finish.
#: Trials per cell (``trials``, a cell's ``trials``, ``stop_after.max_trials``).
MAX_TRIALS = 1_000_000
#: Steps per trial.
MAX_STEPS = 10**9
#: Cells of one recipe (explicit cells plus the axes' product).
MAX_CELLS = 10_000
#: Trials of one run, all cells together.
MAX_TOTAL_TRIALS = 10_000_000
#: ``timeout_per_trial``, in seconds: 30 days.
MAX_TIMEOUT_S = 30 * 24 * 3600
#: Names that become file or folder names (cell, ticket, workload), in UTF-8 bytes; most
#: filesystems allow 255, and aorta adds suffixes such as ``.json``.
MAX_NAME_BYTES = 200


def name_bytes_problem(name: str) -> str | None:
    """Why ``name`` is too long to name a file or folder, or ``None``.

    >>> name_bytes_problem("a" * 200), name_bytes_problem("é" * 101)
    (None, 'is 202 bytes long (UTF-8); it names files and folders, which allows at most 200 bytes')
    """
    size = len(name.encode("utf-8", errors="surrogatepass"))
    if size <= MAX_NAME_BYTES:
        return None
    return (
        f"is {size} bytes long (UTF-8); it names files and folders, which allows at most "
        f"{MAX_NAME_BYTES} bytes"
    )


def fit_name(full: str) -> tuple[str, str | None]:
    """A generated cell name that fits :data:`MAX_NAME_BYTES`: ``(name, full name or None)``.

    A longer name keeps its head and ends in ``-<8 hex of blake2b(full name)>``, so the same
    recipe always gives the same names (a resumed run finds its cells).

    >>> fit_name("m_1")
    ('m_1', None)
    >>> name, full = fit_name("x" * 300)
    >>> len(name), name[-9:], full == "x" * 300
    (200, '-b12499e1', True)
    """
    raw = full.encode("utf-8", errors="surrogatepass")
    if len(raw) <= MAX_NAME_BYTES:
        return full, None
    digest = hashlib.blake2b(raw, digest_size=4).hexdigest()
    head = raw[: MAX_NAME_BYTES - len(digest) - 1].decode("utf-8", errors="ignore")
    return f"{head}-{digest}", full


_ALNUM = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_IMAGE_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_IMAGE_REF_RE = re.compile(
    rf"(?P<name>{_IMAGE_NAME})(?::(?P<tag>[\w][\w.-]{{0,127}}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?",
    re.ASCII,
)


def image_ref_problem(ref: str) -> str | None:
    """What is wrong with a docker image reference, or ``None`` when it is valid.

    A reference follows the grammar of docker's distribution/reference:
    ``[registry[:port]/]path[:tag][@digest]``, the path lowercase letters, digits and
    separators (``.``, ``_``, ``__``, ``-``), at most 255 characters for the name. Anything
    else is refused, in particular a leading ``-`` (``docker run`` would read it as an
    option) and whitespace.

    Examples
    --------
    >>> image_ref_problem("rocm/pytorch:rocm7.0"), image_ref_problem("localhost:5000/a/b@sha256:" + "0" * 64)
    (None, None)
    >>> image_ref_problem("-v/:/host")
    "not a docker image reference: must not start with '-' (docker run would read it as an option)"
    """
    if not isinstance(ref, str) or not ref:
        return "must be a docker image reference, e.g. rocm/pytorch:latest"
    why = ""
    if ref.startswith("-"):
        why = "must not start with '-' (docker run would read it as an option)"
    elif any(c.isspace() for c in ref):
        why = "must not contain whitespace"
    else:
        match = _IMAGE_REF_RE.fullmatch(ref)
        if match is None:
            why = (
                "expected [registry[:port]/]path[:tag][@digest], the path in lowercase "
                "letters, digits, '.', '_', '-' and '/'"
            )
        elif len(match["name"]) > 255:
            why = f"the name is {len(match['name'])} characters long, at most 255"
    return f"not a docker image reference: {why}" if why else None
