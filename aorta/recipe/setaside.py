"""A recipe document checked past its first bad value, so one pass reports every problem.

Pydantic stops a model at an unknown key, and the rules across fields (duplicate cell names,
the baseline, the trial total) need a model that validated: one bad value would hide every
problem of a later stage. :func:`set_aside` takes the values a validation refused out of a
copy of the document — a key deleted (its default takes its place), a cell whose required
fields are broken replaced by a stand-in (its name and mitigations as written where they
stand, made up where not) — so the next validation sees the rest. :func:`covered` then tells
which later problems would only be echoes of what was set aside (a required key now missing,
a baseline that may have been a cell whose name was made up), so each problem is reported
once and nothing is made up.

>>> doc = {"trials": 0, "cells": [{"name": "a", "mitigations": ["none"], "colour": "red"}]}
>>> fixed, aside = set_aside(doc, [Problem("trials", "must be ≥ 1"),
...                                Problem("cells[0]", "unknown key 'colour' (allowed: name)")])
>>> fixed, aside
({'cells': [{'name': 'a', 'mitigations': ['none']}]}, ['trials', 'cells[0].colour'])
>>> covered(Problem("cells[0].colour", "x"), aside), covered(Problem("cells[0].name", "x"), aside)
(True, False)
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterable, Sequence
from typing import Any

from aorta.errors import Problem, path_parts

__all__ = ["BASELINE", "SHAPE_KEYS", "covered", "hides_cells", "made_up", "set_aside"]

_UNKNOWN_KEY = re.compile(r"^unknown key (.+?)(?:; did you mean .*)? \(allowed: ")
_MEANT = re.compile(r"; did you mean '([A-Za-z0-9_]+)'\?")
_IN_CELL = re.compile(r"^cells\[(\d+)\]")
#: A cell's fields the rules across cells read: made up in a stand-in, they hide the cell.
_MADE_UP = re.compile(r"^cells\[\d+\](?:\.(?:name|mitigations))?$")
#: Paths never set aside: a document that is not a mapping, or of another schema version, has
#: nothing else worth checking against this schema.
_KEPT = frozenset({"", "schema_version"})
#: Top-level keys that together say what a recipe runs (its mode and its cells): when one of
#: them is set aside whole, the rules between them would speak of a recipe nobody wrote
#: ("a matrix recipe needs at least one cell" once a broken ``axes`` block is gone).
SHAPE_KEYS = frozenset(
    {"mode", "workload", "command", "cells", "axes", "mitigation_axis", "diagnostic_axis"}
)
#: Where the baseline's problems are reported.
BASELINE = "confound.baseline_cell"
#: The prefix of a stand-in cell's name (followed by its index).
_STAND_IN = "_set_aside_"


def _parts(path: str) -> list[str | int] | None:
    """``cells[2].extra_env`` → ``['cells', 2, 'extra_env']``; ``None`` when the path does not
    read back (a key holding ``.`` or ``[``)."""
    parts = path_parts(path)
    rebuilt = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    return parts if rebuilt.removeprefix(".") == path else None


def _node(doc: Any, parts: Sequence[str | int]) -> Any:
    for part in parts:
        if isinstance(part, int):
            if not (isinstance(doc, list) and part < len(doc)):
                return None
        elif not (isinstance(doc, dict) and part in doc):
            return None
        doc = doc[part]
    return doc


def _stand_in(cell: Any, index: int) -> tuple[dict[str, Any], list[str]]:
    """A cell to check the others against in place of ``cell``, whose required fields are
    broken: its name and mitigations as written where they still stand (the duplicate names,
    the baseline and the registry see them; one still bad is set aside next round), made up
    where not — and the paths of the made-up ones. One trial: the recipe's total is then a
    lower bound, never a made-up excess."""
    at = f"cells[{index}]"
    if not isinstance(cell, dict):
        return {"name": f"{_STAND_IN}{index}", "mitigations": ["none"], "trials": 1}, [at]
    out: dict[str, Any] = {"trials": 1}
    made_up = []
    name = cell.get("name")
    if isinstance(name, str):
        out["name"] = name
    else:
        out["name"] = f"{_STAND_IN}{index}"
        made_up.append(f"{at}.name")
    mitigations = cell.get("mitigations")
    if isinstance(mitigations, list) and all(isinstance(m, str) for m in mitigations):
        out["mitigations"] = mitigations
    else:
        out["mitigations"] = ["none"]
        made_up.append(f"{at}.mitigations")
    # The other fields as written were set aside already or are fine: keep what is left.
    return out, made_up


def _aside_one(doc: dict[str, Any], problem: Problem) -> list[str]:
    """Set aside in ``doc`` (in place) what ``problem`` names; the paths set aside."""
    unknown = _UNKNOWN_KEY.match(problem.message)
    if unknown is not None:
        try:
            key = ast.literal_eval(unknown.group(1))
        except (ValueError, SyntaxError):
            return []
        parts = _parts(problem.path)
        node = _node(doc, parts) if parts is not None else None
        if not (isinstance(node, dict) and key in node):
            return []
        del node[key]
        at = f"{problem.path}." if problem.path else ""
        # The key it suggests was written, misspelt: its "required key is missing" is an echo.
        meant = _MEANT.search(problem.message)
        misspelt = meant is not None and meant.group(1) not in node
        return [f"{at}{key}", *([f"{at}{meant.group(1)}"] if meant and misspelt else [])]
    if problem.path in _KEPT:
        return []
    return _aside_value(doc, problem)


def _aside_value(doc: dict[str, Any], problem: Problem) -> list[str]:
    """Set aside the bad value at ``problem.path``: its key, its cell or its top-level key."""
    parts = _parts(problem.path)
    if parts and isinstance(parts[-1], str):
        parent = _node(doc, parts[:-1])
        if isinstance(parent, dict) and parts[-1] in parent:
            del parent[parts[-1]]
            return [problem.path]
    cells = doc.get("cells")
    in_cell = _IN_CELL.match(problem.path)
    if in_cell is not None and isinstance(cells, list) and int(in_cell[1]) < len(cells):
        index = int(in_cell[1])
        cells[index], made_up = _stand_in(cells[index], index)
        return made_up
    top = parts[0] if parts else problem.path.split(".")[0].split("[")[0]
    if isinstance(top, str) and top in doc and top not in _KEPT:
        if top in {"mitigation_axis", "diagnostic_axis"} and "mode" not in doc:
            doc["mode"] = "probe"  # what the axes implied (Recipe._infer_mode) stays so
        del doc[top]
        return [top]
    return []


def set_aside(doc: Any, problems: Iterable[Problem]) -> tuple[Any, list[str]]:
    """A copy of ``doc`` without the values ``problems`` name, and the paths set aside (none:
    ``doc`` itself, nothing more can be set aside).

    Each problem sets aside the most precise thing that holds it: the key it names (an unknown
    key, a bad value: the field's default then applies), else the cell it sits in (replaced by
    a stand-in of one trial with mitigations ``[none]``), else its top-level key.
    """
    if not isinstance(doc, dict):
        return doc, []
    out = copy.deepcopy(doc)
    aside: list[str] = []
    for problem in problems:
        aside += [path for path in _aside_one(out, problem) if path not in aside]
    return (out, aside) if aside else (doc, [])


def _parent(path: str) -> str:
    """``cells[1].environment.docker`` → ``cells[1].environment``; ``cells[1]`` → ``cells``."""
    cut = max(path.rfind("."), path.rfind("["))
    return path[:cut] if cut > 0 else ""


def covered(problem: Problem, aside: Sequence[str]) -> bool:
    """Whether ``problem``, found once ``aside`` was set aside, only echoes it: at or under a
    path set aside, at the mapping that held it (a ``{docker: …}`` without its bad ``docker``
    is no longer an environment) unless it is another unknown key there or the document's
    top (its rules across fields are not echoes of a field set aside), a rule between the
    shape keys when one was set aside whole, or the baseline when cells were taken out
    (:func:`hides_cells`: the baseline may have been one of them).

    >>> echo = lambda path, aside: covered(Problem(path, "bad"), aside)
    >>> echo("cells[1].name", ["cells[1]"]), echo("cells", ["axes"]), echo("trials", ["axes"])
    (True, True, False)
    >>> echo("cells[1].environment", ["cells[1].environment.docker"]), echo("cells", ["cells[0].trials"])
    (True, False)
    >>> echo(BASELINE, ["cells[0]"]), echo(BASELINE, ["cells"]), echo(BASELINE, ["trials"])
    (True, True, False)
    >>> covered(Problem("cells[0]", "unknown key 'b' (allowed: name)"), ["cells[0].a"])
    False
    """
    path = problem.path
    for a in aside:
        if path == a or path.startswith((f"{a}.", f"{a}[")):
            return True
        if path and path == _parent(a) and _UNKNOWN_KEY.match(problem.message) is None:
            return True
        if a in SHAPE_KEYS and path in SHAPE_KEYS:
            return True
        if path == BASELINE and hides_cells([a]):
            return True
    return False


def made_up(aside: Sequence[str], field: str) -> set[int]:
    """The cells whose ``field`` (``name`` or ``mitigations``) a stand-in made up.

    >>> made_up(["cells[2].mitigations", "cells[4]", "cells[5].name"], "mitigations")
    {2, 4}
    """
    found = (re.match(rf"^cells\[(\d+)\](?:\.{field})?$", a) for a in aside)
    return {int(m[1]) for m in found if m is not None}


def hides_cells(aside: Sequence[str]) -> bool:
    """Whether ``aside`` took out cells the user wrote (a cell replaced by a stand-in, a whole
    ``cells``, ``axes`` or probe axis): which one is the baseline cannot be told then.

    >>> hides_cells(["cells[2].name"]), hides_cells(["axes"]), hides_cells(["cells[2].trials"])
    (True, True, False)
    """
    return any(_MADE_UP.match(a) or a in SHAPE_KEYS for a in aside)
