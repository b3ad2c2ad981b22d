"""Rules with one home in aorta/: each test fails, naming the file and line, when a second
computation of the rule appears (ast, no import of the code under test)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "aorta"


def _nodes(tree: ast.AST, scope: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every node of ``tree`` with the qualified name of the class or function it is in."""
    for child in ast.iter_child_nodes(tree):
        yield scope, child
        inner = scope
        if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = f"{scope}.{child.name}" if scope else child.name
        yield from _nodes(child, inner)


def _where(root: Path) -> Iterator[tuple[str, str, ast.AST]]:
    """``(module path, scope, node)`` for every node of every module under ``root``."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for scope, node in _nodes(ast.parse(path.read_text(), str(path))):
            yield rel, scope, node


def _trial_count_reads(root: Path) -> list[str]:
    """Where the modules under ``root`` decide how many trials a cell runs: it reads a ``max_trials`` cap
    (``stop_after``'s, ``adaptive``'s) or takes ``spec.trials or recipe.trials``."""
    found = []
    for rel, scope, node in _where(root):
        cap = isinstance(node, ast.Attribute) and node.attr == "max_trials"
        fallback = (
            isinstance(node, ast.BoolOp)
            and isinstance(node.op, ast.Or)
            and all(isinstance(v, ast.Attribute) and v.attr == "trials" for v in node.values)
        )
        if (cap and isinstance(node.ctx, ast.Load)) or fallback:
            found.append(f"{rel}:{node.lineno} ({scope or 'module'})")
    return found


# The one home: the recipe's derived view, which the plan (Cell.trials) and the load-time bound
# on the total both call. The Adaptive model's own validator compares its two fields.
TRIAL_COUNT_HOME = {
    "Recipe.trials_cap": "recipe/model.py",
    "Recipe.planned_trials": "recipe/model.py",
    "Adaptive._order": "recipe/blocks.py",
}


def test_a_cells_trial_count_is_computed_in_one_place():
    found = _trial_count_reads(PACKAGE)
    elsewhere = [
        f
        for f in found
        if not any(
            f.startswith(f"{module}:") and f.endswith(f"({home})")
            for home, module in TRIAL_COUNT_HOME.items()
        )
    ]
    assert not elsewhere, (
        f"a second count of a cell's trials (use Recipe.planned_trials): {elsewhere}"
    )
    assert any("Recipe.planned_trials" in f for f in found), "the home moved: update this test"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("n = recipe.stop_after.max_trials\n", 1),
        ("def f(spec, r):\n    return spec.trials or r.trials\n", 1),
        ("recipe.adaptive.max_trials = 3\nx = spec.trials or 5\n", 0),
    ],
)
def test_the_count_check_sees_a_second_count(tmp_path, source, expected):
    (tmp_path / "m.py").write_text(source)
    assert len(_trial_count_reads(tmp_path)) == expected
