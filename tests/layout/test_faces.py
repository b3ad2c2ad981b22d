"""The public faces: every lazily loaded name is also imported for type checkers, and loads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aorta
import aorta.report
import aorta.run
import aorta.store

LAZY_FACES = [aorta, aorta.report, aorta.run, aorta.store]


def _type_checking_names(module) -> set[str]:
    tree = ast.parse(Path(module.__file__).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    names |= {a.asname or a.name.split(".")[-1] for a in stmt.names}
    return names


@pytest.mark.parametrize("face", LAZY_FACES, ids=lambda m: m.__name__)
def test_lazy_names_are_typed(face):
    lazy = set(face._LAZY) | set(getattr(face, "_MODULES", ()))
    assert _type_checking_names(face) == lazy


@pytest.mark.parametrize("face", LAZY_FACES, ids=lambda m: m.__name__)
def test_every_public_name_loads(face):
    for name in face.__all__:
        assert getattr(face, name) is not None, name
