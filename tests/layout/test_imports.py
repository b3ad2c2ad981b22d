"""The stage order of docs/architecture.md, held on the imports (ast, no import of the code).

A stage imports only from the stages its table lists below it, at module level and in function
bodies alike (a lazy import is still an edge of the package graph); the upward imports the page
documents are the only ones allowed (:data:`DOCUMENTED_UPWARD`, empty now). One under
``TYPE_CHECKING`` is for annotations and does not count. The package root's lazily loaded names count as such too: at
module level it imports only the lowest stage, which this file checks as well.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aorta"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: The modules of the package's top level (errors.py, envvars.py, …): one stage, the lowest.
TOP = "top level"
#: The faces: above every stage (the notebook API, the plugin API, ``python -m aorta``).
FACES = {"aorta", "aorta.plugins", "aorta.__main__"}

#: (importer, imported) → why; each is written in docs/architecture.md, naming both files.
DOCUMENTED_UPWARD: dict[tuple[str, str], str] = {}


def stage_order(text: str) -> list[str]:
    """The stages of the architecture table, top to bottom; the top-level modules' rows as one
    stage, the last."""
    order: list[str] = []
    for line in text.splitlines():
        if m := re.match(r"\| `(\w+)/` \|", line):
            order.append(m.group(1))
        elif re.match(r"\| `\w+\.py` \|", line) and TOP not in order:
            order.append(TOP)
    return order


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _stage(module: str, mods: dict[str, Path]) -> str | None:
    """``aorta.run.sweep`` (and ``aorta.run``) → ``run``; ``aorta.errors`` → the top level; a
    face → None."""
    if module in FACES:
        return None
    parts = module.split(".")
    path = mods.get(module)
    return TOP if len(parts) == 2 and path is not None and path.name != "__init__.py" else parts[1]


def _module_level_imports(
    tree: ast.Module, *, functions: bool = False
) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module does: not under TYPE_CHECKING, and with ``functions``
    those in function bodies too (a lazy import is still an edge of the package graph)."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
        elif functions or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom, mods) -> Iterator[str]:
    """The aorta modules an import reads (``from aorta.run import sweep``: ``aorta.run.sweep``)."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names if a.name.split(".")[0] == "aorta")
        return
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    if base.split(".")[0] != "aorta":
        return
    for alias in node.names:
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base


def _imports_in(
    root: Path, package: str
) -> Iterator[tuple[str, ast.Import | ast.ImportFrom, list[str]]]:
    """Each import that runs in a module of ``package`` (at module level or in a function, not
    under ``TYPE_CHECKING``): ``("file:line", the import, the aorta modules it reads)``."""
    mods = _modules(root)
    for module, path in sorted(mods.items()):
        if module.startswith(package):
            tree = ast.parse(path.read_text(), str(path))
            for node in _module_level_imports(tree, functions=True):
                where = f"{path.relative_to(root.parent).as_posix()}:{node.lineno}"
                yield where, node, list(_targets(module, path, node, mods))


def upward_imports(root: Path, order: list[str]) -> dict[tuple[str, str], str]:
    """Every module-level import of a module under ``root`` (the package folder) from a stage
    above its own: ``(importer, imported) → "file:line"``. An import of ``aorta.plugins`` counts
    as the imports it makes; of the package root, only its own eager names are allowed (it
    imports errors alone at module level, its other names load on first use)."""
    mods = _modules(root)
    found: dict[tuple[str, str], str] = {}
    for module, path in sorted(mods.items()):
        source = _stage(module, mods)
        if source is None:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in _module_level_imports(tree, functions=True):
            for target in _targets(module, path, node, mods):
                for real in _through_faces(target, mods):
                    to = _stage(real, mods)
                    if to is not None and to != source and order.index(to) < order.index(source):
                        rel = path.relative_to(root.parent).as_posix()
                        found.setdefault((module, real), f"{rel}:{node.lineno}")
    return found


def _through_faces(target: str, mods: dict[str, Path]) -> Iterator[str]:
    """``target``, or for a face the stage modules it imports at module level."""
    if target not in FACES:
        yield target
        return
    tree = ast.parse(mods[target].read_text())
    for node in _module_level_imports(tree):
        for inner in _targets(target, mods[target], node, mods):
            if inner not in FACES:
                yield inner


def test_the_stage_order_is_the_architecture_tables():
    order = stage_order(ARCHITECTURE.read_text())
    assert order[0] == "cli" and order[-1] == TOP and len(order) == len(set(order)) > 8


def test_each_stage_imports_only_from_the_stages_below_it():
    order = stage_order(ARCHITECTURE.read_text())
    found = upward_imports(PACKAGE, order)
    undocumented = {f"{where}: {a} imports {b}" for (a, b), where in found.items()}
    undocumented -= {f"{found[k]}: {k[0]} imports {k[1]}" for k in DOCUMENTED_UPWARD if k in found}
    assert not undocumented, (
        "an import points up the stages of docs/architecture.md (import inside the function "
        f"that needs it, or move the code; a real exception is documented there): {sorted(undocumented)}"
    )
    gone = set(DOCUMENTED_UPWARD) - set(found)
    assert not gone, (
        f"documented upward imports that no longer exist (drop them, and the docs'): {gone}"
    )


@pytest.mark.parametrize(("importer", "imported"), sorted(DOCUMENTED_UPWARD))
def test_every_allowed_upward_import_is_documented(importer, imported):
    files = [f"`{m.removeprefix('aorta.').replace('.', '/')}.py`" for m in (importer, imported)]
    text = ARCHITECTURE.read_text()
    assert any(all(f in para for f in files) and "upward" in para for para in text.split("\n\n"))


def test_the_package_root_imports_only_the_bottom_stage():
    """So that `from aorta import __version__` anywhere pulls nothing from above."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    mods = _modules(PACKAGE)
    targets = {
        t
        for n in _module_level_imports(tree)
        for t in _targets("aorta", PACKAGE / "__init__.py", n, mods)
    }
    assert targets and {_stage(t, mods) for t in targets} == {TOP}, targets


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"matrix/a.py": "from aorta.run import b\n", "run/b.py": ""},
            {("aorta.matrix.a", "aorta.run.b")},
        ),
        (
            {"matrix/a.py": "from ..run.b import x\n", "run/b.py": "x = 1\n"},
            {("aorta.matrix.a", "aorta.run.b")},
        ),
        (
            {"matrix/a.py": "import aorta.run.b\n", "run/b.py": ""},
            {("aorta.matrix.a", "aorta.run.b")},
        ),
        (
            {"matrix/a.py": "def f():\n    from aorta.run import b\n", "run/b.py": ""},
            {("aorta.matrix.a", "aorta.run.b")},
        ),
        (
            {
                "matrix/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aorta.run import b\n",
                "run/b.py": "",
            },
            set(),
        ),
        ({"run/a.py": "from aorta.matrix import b\n", "matrix/b.py": ""}, set()),
        (
            {
                "matrix/a.py": "from aorta.plugins import W\n",
                "plugins.py": "from aorta.run.b import W\n",
                "run/b.py": "",
            },
            {("aorta.matrix.a", "aorta.run.b")},
        ),
        (
            {"errors.py": "from aorta.matrix import b\n", "matrix/b.py": ""},
            {("aorta.errors", "aorta.matrix.b")},
        ),
    ],
)
def test_the_direction_check_sees_each_kind_of_import(tmp_path, files, expected):
    order = ["run", "matrix", TOP]
    assert set(upward_imports(_package(tmp_path, files), order)) == expected


def _package(root: Path, files: dict[str, str]) -> Path:
    """A package ``aorta`` under ``root`` holding ``files`` (path → text), each folder a package."""
    package = root / "aorta"
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
        (package / name).parent.joinpath("__init__.py").touch()
    return package


#: What a workload may import of aorta: the plugin author's face, and its own package's helpers.
WORKLOAD_FACE = ("aorta.plugins", "aorta.workloads")


def workload_reaches(root: Path) -> dict[str, str]:
    """Every import of aorta by a module of ``root/workloads/`` — at module level or in a
    function, not under ``TYPE_CHECKING`` — that is neither :mod:`aorta.plugins` nor another
    workload module: ``"file:line" → imported``. Built-in workloads are written as a
    third-party one is, through the face (docs/workloads.md)."""
    found: dict[str, str] = {}
    for where, node, targets in _imports_in(root, "aorta.workloads"):
        for target in targets:
            if target != "aorta" and not target.startswith(WORKLOAD_FACE):
                found[where] = target
        if isinstance(node, ast.ImportFrom) and node.module == "aorta" and not node.level:
            for alias in node.names:  # `from aorta import errors`: a module past the face
                found[where] = f"aorta.{alias.name}"
    return found


def test_workloads_import_only_the_plugin_face():
    found = workload_reaches(PACKAGE)
    assert not found, (
        "a built-in workload imports aorta past aorta.plugins (export what it needs there, so a "
        f"third-party workload can do the same): {found}"
    )


@pytest.mark.parametrize(
    ("source", "reaches"),
    [
        ("from aorta.plugins import Workload\n", set()),
        ("from aorta.workloads.helper import x\n", set()),
        ("from .helper import x\n", set()),
        ("from aorta.run.ranks import init_process_group\n", {"aorta.run.ranks"}),
        ("import aorta.run.ranks\n", {"aorta.run.ranks"}),
        ("from aorta import envvars\n", {"aorta.envvars"}),
        ("from ..run import ranks\n", {"aorta.run.ranks"}),
        ("def f():\n    from aorta.store import rundir\n", {"aorta.store.rundir"}),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aorta.run.ranks import X\n",
            set(),
        ),
    ],
)
def test_the_workload_check_sees_each_kind_of_import(tmp_path, source, reaches):
    files = {
        "plugins.py": "",
        "envvars.py": "",
        "run/ranks.py": "",
        "store/rundir.py": "",
        "workloads/helper.py": "x = 1\n",
        "workloads/mine.py": source,
    }
    assert set(workload_reaches(_package(tmp_path, files)).values()) == reaches


#: Modules the CLI may import past their package's face, each named after a function of its own
#: that a face attribute would shadow once the module loads (the comment at the import says so).
CLI_PAST_THE_FACE = {"aorta.run.bisect", "aorta.run.prepare", "aorta.trace.summary"}


def cli_reaches(root: Path) -> dict[str, str]:
    """Every import by a module of ``root/cli/`` (module level or in a function, not under
    ``TYPE_CHECKING``) of a module inside another package, past the package's face:
    ``"file:line" → imported``. ``aorta``, ``aorta.<package>`` and the top-level modules are
    faces; :data:`CLI_PAST_THE_FACE` are the documented exceptions."""
    found: dict[str, str] = {}
    for where, _, targets in _imports_in(root, "aorta.cli"):
        for target in targets:
            parts = target.split(".")
            past = len(parts) > 2 and parts[1] != "cli"
            if past and target not in CLI_PAST_THE_FACE:
                found[where] = target
    return found


def test_the_cli_imports_package_faces():
    found = cli_reaches(PACKAGE)
    assert not found, (
        "the CLI imports a package's module, not its face (export the name from the package; "
        f"where a face would be wrong, add it to CLI_PAST_THE_FACE and say why there): {found}"
    )


@pytest.mark.parametrize(
    ("source", "reaches"),
    [
        ("from aorta.launch import run\n", set()),
        ("from aorta import envvars\n", set()),
        ("from ._options import option\n", set()),
        ("from aorta.launch.slurm import SlurmJob\n", {"aorta.launch.slurm"}),
        ("from aorta.launch import slurm\n", {"aorta.launch.slurm"}),
        ("def f():\n    import aorta.launch.slurm\n", {"aorta.launch.slurm"}),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aorta.launch.slurm import X\n",
            set(),
        ),
    ],
)
def test_the_cli_check_sees_each_kind_of_import(tmp_path, source, reaches):
    files = {"envvars.py": "", "launch/slurm.py": "", "cli/_options.py": "", "cli/mine.py": source}
    assert set(cli_reaches(_package(tmp_path, files)).values()) == reaches
