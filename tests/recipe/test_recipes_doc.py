"""docs/recipes.md's field tables against the pydantic schema: one row per field, every field
documented, one unbroken table each, and the simple defaults as the schema has them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from aorta.recipe.blocks import CellSpec
from aorta.recipe.model import Recipe

DOC = Path(__file__).parents[2] / "docs" / "recipes.md"


def _table(heading: str) -> tuple[list[list[str]], list[str]]:
    """The rows of the first table under ``heading`` (header and rule dropped), and the lines
    from the table's end to the next heading."""
    lines = DOC.read_text().splitlines()
    at = lines.index(heading)
    start = next(i for i in range(at + 1, len(lines)) if lines[i].startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    after = []
    for line in lines[end:]:
        if line.startswith("#"):
            break
        after.append(line)
    # A cell may hold an escaped pipe (`a` \| `b`): split on the unescaped ones only.
    rows = [
        [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines[start + 2 : end]
    ]
    return rows, after


def _names(rows: list[list[str]]) -> list[str]:
    return [name for row in rows for name in re.findall(r"`([^`]+)`", row[0])]


@pytest.mark.parametrize(("heading", "model"), [("## Fields", Recipe), ("### Cells", CellSpec)])
def test_one_row_per_field_and_every_field_documented(heading: str, model: type[BaseModel]):
    rows, after = _table(heading)
    names = _names(rows)
    duplicated = sorted({n for n in names if names.count(n) > 1})
    assert not duplicated, f"{DOC.name} {heading}: more than one row for {duplicated}"
    fields = {f.alias or name for name, f in model.model_fields.items()}
    assert set(names) == fields, (
        f"undocumented: {sorted(fields - set(names))}; not in the schema: "
        f"{sorted(set(names) - fields)}"
    )
    # A blank line ends a Markdown table: rows after it render as stray text.
    stray = [line for line in after if line.startswith("|")]
    assert not stray, f"{heading}: table rows after a blank line: {stray}"


def test_the_documented_simple_defaults_are_the_schemas():
    rows, _ = _table("## Fields")
    documented = {name: row[2] for row in rows for name in _names([row])}
    checked = 0
    for name, field in Recipe.model_fields.items():
        default = field.default
        if default is PydanticUndefined or default is None:
            continue
        shown = json.dumps(default) if isinstance(default, bool) else str(default)
        assert f"`{shown}`" in documented[name], (name, default, documented[name])
        checked += 1
    assert checked >= 5  # schema_version, trials, trial_isolation, save_logs, seed, …
