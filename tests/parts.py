"""Which real parts a test starts — sshd, Slurm, Docker, Chromium, torchrun — found at
collection, so each test carries a marker per part and ``-m "not docker"`` deselects before
anything runs.

A test starts a part when its code, its fixtures' code or the helpers of ``tests/`` they call
(followed through the names each function's code reads, transitively) reach a *starter*: the
helper that brings the part up (``SshdFarm``, ``SlurmCluster``, ``DockerDaemon``, ``look`` and
``chromium``, ``tests.processes.torchrun``). Nothing is labelled by hand: a new test that uses a helper gets its marker, and a new
helper that starts a part is one line in :func:`starters`. aorta's own code is not followed:
the torchrun a launch starts on its nodes is under the launch's part (sshd, slurm or docker).
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

#: Each part's marker and what it means, as pyproject.toml registers it.
PARTS = {
    "sshd": "starts real sshd nodes (tests/sshd.py)",
    "slurm": "starts a real Slurm cluster (tests/slurm.py)",
    "docker": "starts a real Docker daemon and containers (tests/docker_daemon.py)",
    "chromium": "drives a real headless Chromium (tests/chromium.py)",
    "torchrun": "starts a torchrun sweep here (tests/processes.py); a launch's is under its part",
}


@functools.cache
def starters() -> Mapping[int, str]:
    """``id(object) -> part`` of every starter (the helpers are imported on first use, at
    collection, so that importing conftest stays cheap)."""
    from tests import chromium, docker_daemon, processes, slurm, sshd

    table: dict[str, tuple[object, ...]] = {
        "sshd": (sshd.SshdFarm,),
        "slurm": (slurm.SlurmCluster,),
        "docker": (docker_daemon.DockerDaemon, docker_daemon.docker_fixture),
        "chromium": (chromium.chromium, chromium.look),
        "torchrun": (processes.torchrun, processes.TORCHRUN),
    }
    return {id(obj): part for part, objs in table.items() for obj in objs}


def _code_names(code: types.CodeType) -> Iterator[str]:
    """The global and attribute names ``code`` and the functions nested in it read."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


def _ours(obj: object) -> bool:
    """A function, class or module of the test suite (``tests.*``), whose code is followed."""
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    return isinstance(name, str) and (name == "tests" or name.startswith("tests."))


def _functions_of(cls: type) -> Iterator[Callable[..., Any]]:
    for value in vars(cls).values():
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        if inspect.isfunction(value):
            yield value


@functools.cache
def _reached(fn: Callable[..., Any]) -> frozenset[str]:
    """The parts ``fn`` starts, through every function of ``tests/`` it reaches."""
    parts: set[str] = set()
    stack, seen = [fn], set()
    table = starters()
    while stack:
        f = inspect.unwrap(stack.pop())
        code = getattr(f, "__code__", None)
        if code is None or id(f) in seen:
            continue
        seen.add(id(f))
        names = set(_code_names(code))
        scope = getattr(f, "__globals__", {})
        found = [scope[n] for n in names if n in scope]
        found += [c.cell_contents for c in getattr(f, "__closure__", None) or () if _filled(c)]
        # `from tests import sshd` then `sshd.SshdFarm(...)`: the attribute is a name too
        found += [
            getattr(m, n)
            for m in found
            if isinstance(m, types.ModuleType) and _ours(m)
            for n in names
            if hasattr(m, n)
        ]
        for obj in found:
            if id(obj) in table:
                parts.add(table[id(obj)])
            if not _ours(obj):
                continue
            if inspect.isfunction(obj) or inspect.ismethod(obj):
                stack.append(obj)
            elif inspect.isclass(obj):
                stack.extend(_functions_of(obj))
    return frozenset(parts)


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def parts_of(test: Callable[..., Any], fixtures: Iterable[Callable[..., Any]] = ()) -> set[str]:
    """The parts a test function starts, itself or through the fixture functions it uses."""
    fn = getattr(test, "__func__", test)
    out = set(_reached(fn))
    for fixture in fixtures:
        out |= _reached(getattr(fixture, "__func__", fixture))
    return out


def mark(items: Iterable[Any]) -> None:
    """Give each collected test a marker per part it starts (pytest items; doctests and
    notebooks start none of these and have no function to follow)."""
    import pytest

    for item in items:
        test = getattr(item, "obj", None)
        info = getattr(item, "_fixtureinfo", None)
        if test is None or info is None or not callable(test):
            continue
        fixtures = [d.func for defs in info.name2fixturedefs.values() for d in defs]
        for part in sorted(parts_of(test, fixtures)):
            item.add_marker(getattr(pytest.mark, part))
