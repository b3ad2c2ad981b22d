"""Reading YAML for recipes and sidecar files: duplicate keys and syntax errors are located.

PyYAML silently keeps the last of two equal keys; :func:`parse_yaml` refuses them, naming the
path and both lines, and turns every YAML error into a :class:`~aorta.errors.RecipeError`
(never another exception), whatever the input.

>>> parse_yaml("a: 1\\nb: [x, y]\\n")
{'a': 1, 'b': ['x', 'y']}
"""

from __future__ import annotations

from typing import Any

import yaml

from aorta.errors import Problem, RecipeError

__all__ = ["parse_yaml"]


class _Loader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (YAML silently keeps the last one)."""


def _walk_duplicates(node: yaml.Node, path: str, out: list[Problem]) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            child = f"{path}.{key}" if path else str(key)
            if key in seen:
                out.append(
                    Problem(
                        child,
                        f"duplicate key {key!r} (lines {seen[key]} and {key_node.start_mark.line + 1})",
                    )
                )
            else:
                seen[key] = key_node.start_mark.line + 1
            _walk_duplicates(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk_duplicates(item, f"{path}[{i}]", out)


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
        dups: list[Problem] = []
        _walk_duplicates(node, "", dups)
        if dups:
            raise RecipeError(dups)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise RecipeError([Problem("", f"{where}not valid YAML: {exc.problem or exc}")]) from None
    except (yaml.YAMLError, RecursionError, TypeError, ValueError) as exc:
        raise RecipeError([Problem("", f"not valid YAML: {exc}")]) from None
    finally:
        loader.dispose()
