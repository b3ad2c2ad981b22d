"""The ``condition`` of a recipe's ``custom_patterns`` entry: a small, safe expression.

A condition is checked after the pattern's regex matched a line, with these names only:
``capture`` (the regex's named groups, text), ``exit_code`` (int or ``None``),
``walltime_sec`` (float) and ``peak_vram_mib`` (``None``: aorta does not measure it). Allowed:
literals, comparisons, ``and``/``or``/``not``, arithmetic, ``capture["name"]`` and the calls
``float``, ``int``, ``len``. Anything else (attributes, other names, lambdas, comprehensions,
string formatting with ``%``) is refused when the recipe loads, so a recipe cannot run code.

Bounds, so a condition evaluated on every matched line cannot take the sweep's memory or
time: at most :data:`MAX_CONDITION_CHARS` characters nested at most :data:`MAX_DEPTH` deep;
a string it builds (``'a' * n``, ``s + s``) at most :data:`MAX_STRING_CHARS` characters and a
number at most :data:`MAX_INT_BITS` bits. A bound crossed by constants alone is refused when
the recipe loads; one crossed by a captured value makes the condition false for that line,
said in ``errors`` (a warning in the trial's record).

Examples
--------
>>> code = compile_condition('float(capture["ms"]) > 2 * 100 and exit_code != 0')
>>> evaluate(code, capture={"ms": "250.5"}, exit_code=1, walltime_sec=3.0)
True
>>> compile_condition("__import__('os').system('x')")
Traceback (most recent call last):
...
ValueError: not allowed in a condition: a call other than float, int, len
>>> compile_condition("len('a' * 2000000000) > 0")
Traceback (most recent call last):
...
ValueError: the string 'a' * 2000000000 would be 2,000,000,000 characters (a condition builds at most 100,000)
"""

from __future__ import annotations

import ast
import contextlib
import operator
from collections.abc import Callable, Mapping
from types import CodeType
from typing import Any

__all__ = ["CONDITION_NAMES", "ConditionBoundError", "compile_condition", "evaluate"]

#: The names a condition may read.
CONDITION_NAMES = ("capture", "exit_code", "walltime_sec", "peak_vram_mib")
_CALLS = {"float": float, "int": int, "len": len}
#: Longest condition text accepted.
MAX_CONDITION_CHARS = 1000
#: Deepest nesting of a condition's expression (``-(-(-…))``, ``not not …``, parentheses).
MAX_DEPTH = 50
#: Longest string a condition may build.
MAX_STRING_CHARS = 100_000
#: Largest integer (in bits) a multiplication may produce.
MAX_INT_BITS = 64 * 1024
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


class ConditionBoundError(ValueError):
    """A condition would build a value over a bound (:data:`MAX_STRING_CHARS`, …)."""


_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_BINOP = "__aorta_binop"


def _binop(op: str, a: Any, b: Any) -> Any:
    """``a <op> b`` with the sizes of what it builds bounded (every ``BinOp`` runs here)."""
    if op == "Mod" and isinstance(a, str):
        raise ConditionBoundError("string formatting with % is not allowed in a condition")
    if op == "Mult":
        text, times = (a, b) if isinstance(a, str) else (b, a)
        if isinstance(text, str) and isinstance(times, int):
            size = len(text) * max(times, 0)
            if size > MAX_STRING_CHARS:
                raise ConditionBoundError(
                    f"the string {text[:20]!r} * {times} would be {size:,} characters "
                    f"(a condition builds at most {MAX_STRING_CHARS:,})"
                )
        elif (
            isinstance(a, int)
            and isinstance(b, int)
            and a.bit_length() + b.bit_length() > MAX_INT_BITS
        ):
            raise ConditionBoundError(
                f"a product of {a.bit_length():,}- and {b.bit_length():,}-bit integers is "
                f"over {MAX_INT_BITS:,} bits"
            )
    if (
        op == "Add"
        and isinstance(a, str)
        and isinstance(b, str)
        and len(a) + len(b) > MAX_STRING_CHARS
    ):
        raise ConditionBoundError(
            f"a concatenation of {len(a) + len(b):,} characters "
            f"(a condition builds at most {MAX_STRING_CHARS:,})"
        )
    return _OPS[getattr(ast, op)](a, b)


class _Bounded(ast.NodeTransformer):
    """Every ``a <op> b`` becomes ``__aorta_binop('<Op>', a, b)``."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        call = ast.Call(
            func=ast.Name(id=_BINOP, ctx=ast.Load()),
            args=[ast.Constant(type(node.op).__name__), node.left, node.right],
            keywords=[],
        )
        return ast.copy_location(call, node)


def _depth(tree: ast.AST) -> int:
    """The nesting depth of ``tree``, without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _check_constants(tree: ast.AST) -> None:
    """Evaluate the operations on constants alone (children first), so a bound they cross
    (``'a' * 2000000000``, ``('a' * 1000) * 1000``) is refused when the recipe loads."""
    order, stack = [], [tree]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(ast.iter_child_nodes(node))
    known: dict[int, Any] = {}
    for node in reversed(order):  # every child before its parent
        if isinstance(node, ast.Constant):
            known[id(node)] = node.value
        elif isinstance(node, ast.UnaryOp) and id(node.operand) in known:
            with contextlib.suppress(Exception):
                known[id(node)] = _UNARY[type(node.op)](known[id(node.operand)])
        elif isinstance(node, ast.BinOp) and id(node.left) in known and id(node.right) in known:
            try:
                known[id(node)] = _binop(
                    type(node.op).__name__, known[id(node.left)], known[id(node.right)]
                )
            except ConditionBoundError as exc:
                raise ValueError(str(exc)) from None
            except Exception:  # 1/0, 'a' - 1: false when evaluated, as before
                continue


_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
}


def _refuse(what: str) -> ValueError:
    return ValueError(f"not allowed in a condition: {what}")


def compile_condition(text: str) -> CodeType:
    """Check ``text`` against the allowed forms and compile it.

    Raises
    ------
    ValueError
        A syntax error, the first form that is not allowed, nesting deeper than
        :data:`MAX_DEPTH`, or constants that cross a bound (``'a' * 2000000000``), named.
    """
    if len(text) > MAX_CONDITION_CHARS:
        raise ValueError(f"a condition is at most {MAX_CONDITION_CHARS} characters")
    too_deep = ValueError(f"a condition is nested at most {MAX_DEPTH} levels deep")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        if "too many nested" in str(exc.msg):
            raise too_deep from None
        raise ValueError(f"not a valid expression: {exc.msg}") from None
    except (RecursionError, MemoryError):  # the parser's own stack: a deeper nesting
        raise too_deep from None
    if _depth(tree) > MAX_DEPTH:
        raise too_deep
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
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Mod)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.left.value, str)
        ):
            raise _refuse("string formatting with %")
    _check_constants(tree)
    bounded = ast.fix_missing_locations(_Bounded().visit(tree))
    return compile(bounded, "<condition>", "eval")


def evaluate(
    code: CodeType,
    *,
    capture: Mapping[str, str],
    exit_code: int | None = None,
    walltime_sec: float | None = None,
    peak_vram_mib: float | None = None,
    errors: list[str] | None = None,
) -> bool:
    """The condition's truth for one match; an error while evaluating counts as false.

    A bound crossed (a string over :data:`MAX_STRING_CHARS`, …) counts as false too, and is
    said in ``errors`` when given: unlike a missing capture, it means the condition is wrong.

    >>> errors = []
    >>> code = compile_condition('len(capture["x"] * 1000000) > 3')
    >>> evaluate(code, capture={"x": "abc"}, errors=errors), errors
    (False, ["the string 'abc' * 1000000 would be 3,000,000 characters (a condition builds at most 100,000)"])
    """
    names: dict[str, Any] = {
        "__builtins__": {},
        _BINOP: _binop,
        **_CALLS,
        "capture": dict(capture),
        "exit_code": exit_code,
        "walltime_sec": walltime_sec,
        "peak_vram_mib": peak_vram_mib,
    }
    try:
        return bool(eval(code, names))  # only the forms compile_condition allows
    except ConditionBoundError as exc:
        if errors is not None:
            errors.append(str(exc))
        return False
    except Exception:
        return False
