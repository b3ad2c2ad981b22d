"""Reading YAML for recipes and sidecar files: duplicate keys and syntax errors are located.

PyYAML silently keeps the last of two equal keys; :func:`parse_yaml` refuses them, naming the
path and both lines, and turns every YAML error into a :class:`~aorta.errors.RecipeError`
(never another exception), whatever the input.

Aliases (``*name``) and merge keys (``<<: *base``) work, but the document they expand to is
bounded: a "billion laughs" document (nine levels of nine aliases each expand to 9⁹ nodes) is
refused when its aliases add more than :data:`MAX_ALIAS_EXPANSION` nodes, and an alias inside
its own anchor (a recursive document) is refused too. Checking takes one pass over the nodes
as written, whatever they expand to.

>>> parse_yaml("a: 1\\nb: [x, y]\\n")
{'a': 1, 'b': ['x', 'y']}
"""

from __future__ import annotations

from typing import Any

import yaml

from aorta.errors import Problem, RecipeError

__all__ = ["MAX_ALIAS_EXPANSION", "parse_yaml"]

#: The most nodes the aliases of one document may add to it once expanded.
MAX_ALIAS_EXPANSION = 100_000
# Expanded sizes saturate here: past the bound the exact count does not matter.
_SATURATE = 10**15


class _Loader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (YAML silently keeps the last one)."""


def _children(node: yaml.Node, path: str) -> list[tuple[yaml.Node, str]]:
    if isinstance(node, yaml.MappingNode):
        out = []
        for key_node, value_node in node.value:
            child = f"{path}.{key_node.value}" if path else str(key_node.value)
            out += [(key_node, path), (value_node, child)]
        return out
    if isinstance(node, yaml.SequenceNode):
        return [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
    return []


def _duplicates(node: yaml.MappingNode, path: str) -> list[Problem]:
    out = []
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue  # the constructor names unhashable keys itself
        key = (key_node.tag, key_node.value)
        child = f"{path}.{key_node.value}" if path else str(key_node.value)
        line = key_node.start_mark.line + 1
        if key in seen:
            out.append(
                Problem(child, f"duplicate key {key_node.value!r} (lines {seen[key]} and {line})")
            )
        else:
            seen[key] = line
    return out


def _check_nodes(root: yaml.Node) -> list[Problem]:
    """Duplicate keys, recursive aliases and alias bombs, visiting each node once.

    A node reached again through an alias is not walked again: its duplicate keys are reported
    once, at the path where it first appears, and its expanded size is remembered.
    """
    size: dict[int, int] = {}  # id(node) -> nodes it expands to
    open_: set[int] = set()  # the nodes on the current path (a cycle is a recursive alias)
    problems: list[Problem] = []
    stack: list[tuple[yaml.Node, str, bool]] = [(root, "", False)]
    while stack:
        node, path, finished = stack.pop()
        nid = id(node)
        if finished:
            open_.discard(nid)
            total = 1 + sum(size[id(child)] for child, _ in _children(node, path))
            size[nid] = min(total, _SATURATE)
            continue
        if nid in size:
            continue
        if nid in open_:
            return [Problem(path, "an alias refers to its own anchor (a recursive document)")]
        open_.add(nid)
        if isinstance(node, yaml.MappingNode):
            problems += _duplicates(node, path)
        stack.append((node, path, True))
        stack.extend((child, cpath, False) for child, cpath in reversed(_children(node, path)))
    added = size[id(root)] - len(size)
    if added > MAX_ALIAS_EXPANSION:
        shown = f"{added:,}" if added < _SATURATE - len(size) else f"over {_SATURATE:,}"
        problems.insert(
            0,
            Problem(
                "",
                f"too many alias expansions: the aliases (*name) add {shown} nodes to the "
                f"document, over the limit of {MAX_ALIAS_EXPANSION:,}; write the repeated parts out "
                "or use fewer levels of aliases",
            ),
        )
    return problems


def parse_yaml(text: str) -> Any:
    """Parse one YAML (or JSON) document; raise :class:`RecipeError` for anything wrong."""
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:  # the reader refuses control characters up front
        raise RecipeError([Problem("", f"not valid YAML: {exc}")]) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        problems = _check_nodes(node)
        if problems:
            raise RecipeError(problems)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise RecipeError([Problem("", f"{where}not valid YAML: {exc.problem or exc}")]) from None
    except (yaml.YAMLError, RecursionError, TypeError, ValueError) as exc:
        raise RecipeError([Problem("", f"not valid YAML: {exc}")]) from None
    finally:
        loader.dispose()
