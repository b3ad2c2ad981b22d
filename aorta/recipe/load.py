"""The recipe read from YAML or JSON — text, a file or parsed data — and written back.

A recipe is a YAML (or JSON) document, schema version 1, compatible with upstream AORTA:

* **matrix mode** — a ``workload`` run over explicit ``cells`` (and/or an ``axes`` block that
  expands a cartesian product into cells) × ``trials`` × ``steps``;
* **probe mode** — ``mode: probe``: an arbitrary command (given after ``--`` on the command
  line) run over ``mitigation_axis`` × ``diagnostic_axis``, cells named ``<m>-<d>``.

:func:`load_recipe` validates everything that can be checked without the mitigation registry
and raises :class:`~aorta.errors.RecipeError`, whose problems each name their path inside the
document (``cells[2].mitigations: ...``). Registry checks (unknown mitigation, two mitigations
setting one variable) happen in :func:`aorta.plan`. :func:`dump_recipe` writes a document
that loads back to an equal :class:`Recipe`.

Examples
--------
>>> r = load_recipe_text('''
... workload: matmul
... trials: 2
... cells:
...   - {name: baseline, mitigations: [none]}
...   - {name: one-thread, mitigations: [none], extra_env: {OMP_NUM_THREADS: "1"}}
... ''')
>>> [c.name for c in r.expand_cells()], r.baseline_cell()
(['baseline', 'one-thread'], 'baseline')
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from aorta.errors import Problem, RecipeError
from aorta.recipe.checks import checked_recipe, is_missing_command
from aorta.recipe.model import Recipe
from aorta.recipe.yamldoc import parse_yaml

__all__ = [
    "canonical_json",
    "dump_recipe",
    "load_recipe",
    "load_recipe_pending_command",
    "load_recipe_text",
    "recipe_from_data",
    "recipe_to_data",
    "scrub_env_keys_of",
]


def recipe_from_data(data: Any, *, command: list[str] | None = None) -> Recipe:
    """Validate a parsed document into a :class:`Recipe` (see :func:`load_recipe`).

    Raises :class:`~aorta.errors.RecipeError` carrying every problem :func:`checked_recipe`
    finds, sorted by path.
    """
    checked = checked_recipe(data, command=command)
    if checked.problems:
        raise RecipeError(checked.problems, skipped=checked.skipped)
    assert checked.recipe is not None
    return checked.recipe


def load_recipe_text(
    text: str, *, command: list[str] | None = None, source: str | None = None
) -> Recipe:
    """Parse and validate a recipe from YAML/JSON text; see :func:`load_recipe`."""
    try:
        return recipe_from_data(parse_yaml(text), command=command)
    except RecipeError as exc:
        raise exc.with_source(source) if source else exc from None


def load_recipe(path: str | Path, *, command: list[str] | None = None) -> Recipe:
    """Load and validate a recipe file (YAML or JSON).

    Parameters
    ----------
    path
        The recipe file.
    command
        The argv given after ``--`` on the command line (probe mode); stored in the recipe so
        ``recipe.resolved.yaml`` reproduces the run.

    Raises
    ------
    RecipeError
        On any problem; ``err.problems`` lists each with its path in the document, e.g.
        ``cells[2].mitigations: must be a non-empty list of names, got 'tf32_off'``. Duplicate
        YAML keys, unknown keys, numbers or booleans where strings are expected (YAML's
        ``on``/``yes``), reserved names and an unresolvable baseline are all rejected here.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.yaml"
    >>> _ = p.write_text("workload: matmul\\ncells: [{name: a, mitigations: [none]}]\\n")
    >>> load_recipe(p).baseline_cell()
    'a'
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError([Problem("", "no such file")], source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError([Problem("", f"cannot read: {exc}")], source=str(path)) from None
    return load_recipe_text(text, command=command, source=str(path))


def scrub_env_keys_of(text: str | bytes) -> tuple[str, ...]:
    """A recipe text's ``redaction.scrub_env_keys``, read without validating the rest (``aorta
    launch`` redacts the nodes' snapshots with them; the node's sweep validates the recipe).

    Anything unreadable or of the wrong shape gives no keys.

    >>> scrub_env_keys_of("workload: matmul\\nredaction: {scrub_env_keys: [MY_*, 3]}\\n")
    ('MY_*',)
    >>> scrub_env_keys_of(b"{not yaml")
    ()
    """
    try:
        keys = yaml.safe_load(text)["redaction"]["scrub_env_keys"]
    except (yaml.YAMLError, KeyError, TypeError, IndexError):
        return ()
    return tuple(k for k in keys if isinstance(k, str)) if isinstance(keys, list) else ()


def recipe_to_data(recipe: Recipe) -> dict[str, Any]:
    """The recipe as plain data with every field explicit (what :func:`dump_recipe` writes)."""
    return recipe.model_dump(mode="json")


def load_recipe_pending_command(
    path: str | Path, *, command: list[str] | None = None
) -> tuple[Recipe, bool]:
    """:func:`load_recipe`, except that a probe recipe whose command is still to come (given
    after ``--`` when it runs) loads all the same, with ``command`` ``None``: what ``recipe
    show`` and ``sweep run --dry-run`` print. Returns ``(recipe, pending)``; ``pending`` says
    the command is missing. Every other problem raises :class:`~aorta.errors.RecipeError`.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "probe.yaml"
    >>> _ = p.write_text("mode: probe\\nmitigation_axis: [none, xnack]\\n")
    >>> recipe, pending = load_recipe_pending_command(p)
    >>> recipe.command, pending, recipe.mitigation_axis
    (None, True, ['none', 'xnack'])
    """
    try:
        return load_recipe(path, command=command), False
    except RecipeError as exc:
        only_missing = bool(exc.problems) and all(is_missing_command(p) for p in exc.problems)
        if command or not only_missing:
            raise
    recipe = load_recipe(path, command=["<pending>"])
    return recipe.model_copy(update={"command": None}), True


def dump_recipe(recipe: Recipe, *, explicit: bool = True) -> str:
    """YAML text of ``recipe`` with every field explicit; loads back to an equal :class:`Recipe`.

    ``explicit=False`` leaves out the fields at their defaults (what ``aorta recipe show``
    prints: the recipe as its author would write it).

    Examples
    --------
    >>> r = load_recipe_text("workload: matmul\\ncells: [{name: a, mitigations: [none]}]")
    >>> load_recipe_text(dump_recipe(r)) == r
    True
    >>> print(dump_recipe(r, explicit=False), end="")
    workload: matmul
    cells:
    - name: a
      mitigations:
      - none
    """
    if not explicit:
        data = recipe.model_dump(mode="json", exclude_defaults=True)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    # allow_unicode would emit U+0085 and friends raw, which YAML then reads as line breaks.
    return yaml.safe_dump(recipe_to_data(recipe), sort_keys=False, allow_unicode=False, width=100)


def canonical_json(data: Any) -> str:
    """Key-order-independent JSON, for hashing."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
