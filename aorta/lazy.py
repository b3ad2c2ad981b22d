"""A package face whose public names load on first use: the one ``__getattr__``/``__dir__``
pair that ``aorta``, ``aorta.run``, ``aorta.store`` and ``aorta.report`` install, so that
importing a face stays cheap (``aorta --help`` never pays for xarray or matplotlib).

Each face keeps its own name → module table (``_LAZY``, and the root its submodules,
``_MODULES``) beside an ``if TYPE_CHECKING:`` block of the same names for type checkers;
``tests/layout/test_faces.py`` keeps the two in step.

Examples
--------
>>> namespace = {"__name__": "demo", "__all__": ["dumps"]}
>>> getattr_, dir_ = lazy_names(namespace, {"dumps": "json"})
>>> getattr_("dumps") is __import__("json").dumps, "dumps" in namespace  # loaded, then kept
(True, True)
>>> dir_()
['__all__', '__name__', 'dumps']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    namespace: dict[str, Any], names: Mapping[str, str], *, modules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A face's module ``__getattr__`` and ``__dir__``: a name of ``names`` is read from its
    module, one of ``modules`` is the face's submodule of that name; either is kept in
    ``namespace`` (the face's ``globals()``), so it loads once. Any other name raises
    ``AttributeError``; ``__dir__`` lists ``namespace`` and its ``__all__``.

    Parameters
    ----------
    namespace
        The face's ``globals()``: its ``__name__`` names it in errors, its ``__all__`` is
        read when ``__dir__`` is called.
    names
        Public name → the module that defines it (``{"RunDir": "aorta.store.rundir"}``).
    modules
        Submodules that are public names themselves (``aorta.plot`` as ``aorta.plot``).

    Returns
    -------
    tuple
        ``(__getattr__, __dir__)``, to assign at the face's module level.

    Examples
    --------
    >>> getattr_, _ = lazy_names({"__name__": "demo", "__all__": []}, {})
    >>> getattr_("missing")
    Traceback (most recent call last):
    ...
    AttributeError: module 'demo' has no attribute 'missing'
    """
    package, submodules = namespace["__name__"], frozenset(modules)

    def __getattr__(name: str) -> Any:
        if name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        elif name in names:
            value = getattr(importlib.import_module(names[name]), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace["__all__"]))

    return __getattr__, __dir__
