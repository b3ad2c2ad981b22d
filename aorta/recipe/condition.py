"""The ``condition`` of a recipe's ``custom_patterns`` entry: a small, safe expression.

A condition is checked after the pattern's regex matched a line, with these names only:
``capture`` (the regex's named groups, text), ``exit_code`` (int or ``None``),
``walltime_sec`` (float) and ``peak_vram_mib`` (``None``: aorta does not measure it). Allowed:
literals, comparisons, ``and``/``or``/``not``, arithmetic, ``capture["name"]`` and the calls
``float``, ``int``, ``len``. Anything else (attributes, other names, lambdas, comprehensions)
is refused when the recipe loads, so a recipe cannot run code.

Examples
--------
>>> code = compile_condition('float(capture["ms"]) > 2 * 100 and exit_code != 0')
>>> evaluate(code, capture={"ms": "250.5"}, exit_code=1, walltime_sec=3.0)
True
>>> compile_condition("__import__('os').system('x')")
Traceback (most recent call last):
...
ValueError: not allowed in a condition: a call other than float, int, len
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from types import CodeType
from typing import Any

__all__ = ["CONDITION_NAMES", "compile_condition", "evaluate"]

#: The names a condition may read.
CONDITION_NAMES = ("capture", "exit_code", "walltime_sec", "peak_vram_mib")
_CALLS = {"float": float, "int": int, "len": len}
#: Longest condition text accepted.
MAX_CONDITION_CHARS = 1000
_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.In,
    ast.NotIn,
    ast.Is,
    ast.IsNot,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Subscript,
    ast.Call,
)


def _refuse(what: str) -> ValueError:
    return ValueError(f"not allowed in a condition: {what}")


def compile_condition(text: str) -> CodeType:
    """Check ``text`` against the allowed forms and compile it.

    Raises
    ------
    ValueError
        A syntax error, or the first form that is not allowed, named.
    """
    if len(text) > MAX_CONDITION_CHARS:
        raise ValueError(f"a condition is at most {MAX_CONDITION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a valid expression: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise _refuse(type(node).__name__)
        if isinstance(node, ast.Name) and node.id not in (*CONDITION_NAMES, *_CALLS):
            raise _refuse(f"the name {node.id!r} (use {', '.join(CONDITION_NAMES)})")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in _CALLS and not node.keywords
        ):
            raise _refuse(f"a call other than {', '.join(_CALLS)}")
        if isinstance(node, ast.Name) and node.id in _CALLS:
            continue
        if isinstance(node, ast.Constant) and not isinstance(
            node.value, int | float | str | bool | type(None)
        ):
            raise _refuse(f"the constant {node.value!r}")
    return compile(tree, "<condition>", "eval")


def evaluate(
    code: CodeType,
    *,
    capture: Mapping[str, str],
    exit_code: int | None = None,
    walltime_sec: float | None = None,
    peak_vram_mib: float | None = None,
) -> bool:
    """The condition's truth for one match; an error while evaluating counts as false."""
    names: dict[str, Any] = {
        "__builtins__": {},
        **_CALLS,
        "capture": dict(capture),
        "exit_code": exit_code,
        "walltime_sec": walltime_sec,
        "peak_vram_mib": peak_vram_mib,
    }
    try:
        return bool(eval(code, names))  # only the forms compile_condition allows
    except Exception:
        return False
