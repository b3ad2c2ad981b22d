"""The package's own rules, checked on its source (ast, no import of the code under test).

docs/architecture.md states them; these tests hold them, so a change that breaks one fails
here with the file and line instead of drifting silently.
"""

from __future__ import annotations

import ast
import collections
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from aorta.store import rundir

PACKAGE = Path(__file__).resolve().parents[2] / "aorta"

# Every file name a run directory holds, as store/rundir.py defines them.
RUN_FILE_NAMES = sorted(
    {
        rundir.MANIFEST,
        rundir.LOCK,
        rundir.RECIPE,
        rundir.HOST_ENV,
        rundir.LAUNCH_JSON,
        rundir.MATRIX_MD,
        rundir.MATRIX_JSON,
        rundir.RESULTS,
        rundir.CELL_JSON,
        rundir.BUNDLE_MANIFEST,
        rundir.REPORT_HTML,
        rundir.TRACE_SUFFIX,
    }
)


def modules(under: str = "") -> Iterator[Path]:
    yield from sorted((PACKAGE / under).rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are docstrings (they may name files freely)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


#: What an f-string's replacement fields become in its template (:func:`_strings`).
HOLE = "\x00"
#: Names of the run's layout that are built from a value (a trial number, a cell): the
#: trial's record or artifact folder ("trial_0007.json", f"trial_{t:04d}"), a cell's folder
#: (f"cells/{cell}/…"); rundir.trial_file_name / trial_relpath build them.
BUILT_RUN_NAMES = {
    "trial_NNNN(.json)": rf"(.*/)?trial_(\d+|{HOLE})(\.json)?(/.*)?",
    "cells/<cell>": rf"(.*/)?{rundir.CELLS}/{HOLE}(/.*)?",
}


def _template(node: ast.JoinedStr) -> str:
    """An f-string's text with each replacement field as :data:`HOLE`."""
    return "".join(str(v.value) if isinstance(v, ast.Constant) else HOLE for v in node.values)


def _strings(path: Path) -> Iterator[tuple[int, str]]:
    """Every string literal of ``path`` but docstrings; an f-string as its template."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _docstrings(tree)
    inner = set()  # the constant parts of f-strings (and of their format specs)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inner |= {id(v) for v in ast.walk(node) if v is not node}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and id(node) not in inner:
            yield node.lineno, _template(node)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip | inner
        ):
            yield node.lineno, node.value


def _names_a_run_file(text: str) -> str | None:
    for name in RUN_FILE_NAMES:
        # The name as a path or a path's last part ("matrix.md", "cells/x/matrix.md",
        # f"{run}/matrix.md"), or a glob/suffix built on it ("*.pt.trace.json.gz",
        # f"rank{r}.pt.trace.json.gz") — not prose that mentions it.
        if re.fullmatch(rf"(.*[/*{HOLE}])?{re.escape(name)}", text):
            return name
    for name, pattern in BUILT_RUN_NAMES.items():
        if re.fullmatch(pattern, text):
            return name
    return None


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ('f"{run_dir}/cells/{cell}/"', "cells/<cell>"),
        ('f"trial_{t:04d}.json"', "trial_NNNN(.json)"),
        ('f"cells/{c}/trial_{int(t):04d}.json"', "trial_NNNN(.json)"),
        ('"cells/x/trial_0007.json"', "trial_NNNN(.json)"),
        ('f"{root}/matrix.json"', rundir.MATRIX_JSON),
        ('f"rank{r}.pt.trace.json.gz"', rundir.TRACE_SUFFIX),
        ('f"{n} cells/{k} trials"', None),
        ('f"see matrix.md in {run}"', None),
        ('f"trial {t} of {n}"', None),
    ],
)
def test_the_name_check_sees_f_strings(tmp_path, source, named):
    module = tmp_path / "m.py"
    module.write_text(f"x = {source}\n")
    assert [_names_a_run_file(text) for _, text in _strings(module)] == [named]


def test_run_directory_names_come_only_from_store():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r} ({name}; use aorta.store.rundir)"
        for path in modules()
        if path.parent.name != "store"
        for line, text in _strings(path)
        if (name := _names_a_run_file(text))
    ]
    assert not offenders, "\n".join(offenders)


YAML_OWNERS = {"recipe", "store"}


def test_yaml_is_parsed_only_in_recipe_and_store():
    offenders = []
    for path in modules():
        if path.relative_to(PACKAGE).parts[0] in YAML_OWNERS:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name == "yaml" for a in node.names):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: import yaml")
            if isinstance(node, ast.ImportFrom) and node.module == "yaml":
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: from yaml")
    assert not offenders, "\n".join(offenders)


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
STAGES = [
    "cli",
    "launch",
    "workloads",
    "run",
    "report",
    "plot",
    "matrix",
    "store",
    "recipe",
    "trace",
    "hang",
]


def _architecture_rows() -> dict[str, str]:
    rows = {}
    for line in ARCHITECTURE.read_text().splitlines():
        if m := re.match(r"\| `(\w+)/` \|(.*)", line):
            rows[m.group(1)] = m.group(2)
    return rows


def test_architecture_table_lists_every_stage():
    assert sorted(_architecture_rows()) == sorted(STAGES)
    on_disk = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert on_disk == sorted(STAGES), "a stage folder was added or removed: update STAGES and docs"


def _stage_modules(stage: str) -> set[str]:
    """The modules of a stage folder as paths without ``.py``, its sub-folders' too
    (``rundir``, ``page/kit``, ``loader/__init__``)."""
    folder = PACKAGE / stage
    return {p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.py")}


#: A module as the architecture page names it: ``rundir.py``, ``page/kit.py``.
ARCHITECTURE_MODULE = re.compile(r"`([\w/]+)\.py`")


@pytest.mark.parametrize("stage", STAGES)
def test_architecture_names_only_modules_that_exist(stage):
    row = _architecture_rows()[stage]
    named = set(ARCHITECTURE_MODULE.findall(row))
    real = _stage_modules(stage)
    assert named <= real, f"docs/architecture.md names missing modules in {stage}/: {named - real}"


@pytest.mark.parametrize("stage", STAGES)
def test_architecture_names_every_module_of_listed_stages(stage):
    row = _architecture_rows()[stage]
    named = set(ARCHITECTURE_MODULE.findall(row))
    real = {m for m in _stage_modules(stage) if m.rpartition("/")[2] != "__init__"}
    assert real <= named, f"docs/architecture.md's {stage}/ row does not name: {real - named}"


# --- the top-level modules -------------------------------------------------------------------

README = PACKAGE.parent / "README.md"


def test_architecture_names_every_top_level_module():
    """The page is the one map (README links to it): the shared modules have rows of their own."""
    named = set(re.findall(r"^\| `(\w+)\.py` \|", ARCHITECTURE.read_text(), re.MULTILINE))
    real = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__", "plugins"}
    assert named == real, f"docs/architecture.md's top-level rows: {named ^ real}"


def test_readme_names_every_stage_and_links_the_map():
    text = README.read_text()
    assert "docs/architecture.md" in text
    assert all(f"`{stage}/`" in text for stage in STAGES)


# --- module names ----------------------------------------------------------------------------

#: Module names used in more than one folder, each for the same concept at its own stage; any
#: other reuse fails, so that a name says its room (``matrix/rank_tests.py``, the rank
#: statistics, is not a second ``ranks.py`` beside ``run/ranks.py``, torchrun's ranks).
SHARED_NAMES = {
    "bisect": "cli: the command; run: the plan and its sweeps",
    "bundle": "cli: the command; report: the listing; store: plan and write",
    "compare": "cli: the command; matrix: the comparison",
    "explain": "matrix: where the time went; report: its words",
    "findings": "matrix: the typed findings; report: as lines and JSON; report/page: its section",
    "hang": "cli: `aorta hang`; run: a hang detected while a trial runs",
    "history": "across runs — cli: the command; store: the runs' files; matrix: Dataset, change "
    "points, gate; plot: a series' figure; report: its text; report/page: its page",
    "load": "hang, matrix, recipe: the stage's files read into its model",
    "model": "hang, recipe, trace: the stage's data model",
    "options": "matrix: the statistics options; run: the run options (each stage's one frozen value)",
    "signatures": "run: matched on a trial's logs; matrix: counted per cell",
    "summary": "matrix: the result per cell; trace: a trace's tables at once",
    "sweep": "cli: the command; run: the loop",
    "trace": "cli: `aorta trace`; plot: a trace's figures",
}


def _reused_names() -> dict[str, list[str]]:
    by_name = collections.defaultdict(list)
    for path in modules():
        if path.stem not in {"__init__", "__main__"}:
            by_name[path.stem].append(path.relative_to(PACKAGE).as_posix())
    return {name: files for name, files in by_name.items() if len(files) > 1}


def test_a_module_name_is_reused_only_for_the_same_concept():
    reused = _reused_names()
    unlisted = {name: files for name, files in reused.items() if name not in SHARED_NAMES}
    assert not unlisted, f"one name, two meanings? rename, or say why in SHARED_NAMES: {unlisted}"
    assert set(SHARED_NAMES) <= set(reused), f"no longer shared: {set(SHARED_NAMES) - set(reused)}"


def test_no_module_family_outside_a_folder():
    """Three modules of one folder named ``x``, ``x_a``, ``x_b`` are a folder in disguise
    (``trace/perf/``, ``trace/loader/``, ``report/page/``)."""
    families = collections.Counter()
    for path in modules():
        if path.stem not in {"__init__", "__main__"}:
            prefix = path.stem.lstrip("_").split("_")[0]
            families[path.parent.relative_to(PACKAGE).as_posix(), prefix] += 1
    big = {f"{folder}/{prefix}*": n for (folder, prefix), n in families.items() if n >= 3}
    assert not big, f"make each family a folder of its stage: {big}"


# --- tests the docs cite ----------------------------------------------------------------------

#: ``tests/<stage>/test_x.py`` or ``tests/<stage>/test_x.py::test_name`` in a doc's prose.
TEST_CITATION = re.compile(r"tests/[\w/]+\.py(?:::\w+)?")


def _cited_tests() -> list[tuple[str, str]]:
    docs = [README, *sorted((PACKAGE.parent / "docs").glob("*.md"))]
    return [
        (doc.name, cited)
        for doc in docs
        for cited in sorted(set(TEST_CITATION.findall(doc.read_text())))
    ]


def test_docs_cite_tests_that_exist():
    """docs/reliability.md's "covered by" column and the like name real tests: a moved or
    renamed test file fails here instead of leaving the docs pointing nowhere."""
    root = PACKAGE.parent
    missing = []
    for doc, cited in _cited_tests():
        path, _, name = cited.partition("::")
        source = root / path
        if not source.is_file():
            missing.append(f"{doc}: {cited} (no such file)")
        elif name and not re.search(rf"^\s*(?:async )?def {name}\b", source.read_text(), re.M):
            missing.append(f"{doc}: {cited} (no such test)")
    assert _cited_tests(), "no doc cites a test: the pattern drifted"
    assert not missing, "\n".join(missing)


# --- pure stages write no files -----------------------------------------------------------------

#: Calls that write, move or remove files (methods of Path, pandas, xarray, matplotlib).
WRITING_METHODS = {
    "write_text",
    "write_bytes",
    "to_netcdf",
    "to_csv",
    "to_parquet",
    "to_json",
    "savefig",
    "mkdir",
    "unlink",
    "rmdir",
    "touch",
    "symlink_to",
    "hardlink_to",
}
#: Module functions that do the same (``os.replace``, ``shutil.copy``, ``atomic_write``).
WRITING_FUNCTIONS = {
    ("os", "replace"),
    ("os", "rename"),
    ("os", "remove"),
    ("os", "unlink"),
    ("os", "makedirs"),
    ("os", "mkdir"),
    ("os", "link"),
    ("os", "symlink"),
    ("shutil", "*"),
    ("tempfile", "*"),
}
#: Files in the pure stages that write by design, and why.
WRITERS_BY_DESIGN = {
    # The parse cache beside each trace (what makes a second load fast); written atomically.
    "trace/loader/cache.py",
    # ``aorta trace merge``: the merged trace is the output, streamed to disk as it is built.
    "trace/merge.py",
}


def _writes(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "atomic_write":
            yield f"{node.lineno}: atomic_write"
        if isinstance(func, ast.Name) and func.id == "open":
            modes = [a for a in node.args[1:2]] + [
                k.value for k in node.keywords if k.arg == "mode"
            ]
            if any(
                not isinstance(m, ast.Constant) or set(str(m.value)) & set("wax+") for m in modes
            ):
                yield f"{node.lineno}: open for writing"
        if isinstance(func, ast.Attribute):
            if func.attr in WRITING_METHODS:
                yield f"{node.lineno}: .{func.attr}()"
            if isinstance(func.value, ast.Name) and (
                (func.value.id, func.attr) in WRITING_FUNCTIONS
                or (func.value.id, "*") in WRITING_FUNCTIONS
            ):
                yield f"{node.lineno}: {func.value.id}.{func.attr}()"


@pytest.mark.parametrize("stage", ["matrix", "trace", "hang"])
def test_pure_stages_write_no_files(stage):
    """matrix/, trace/ and hang/ compute; store/ (or the caller) writes. Reading is theirs."""
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{where}"
        for path in modules(stage)
        if path.relative_to(PACKAGE).as_posix() not in WRITERS_BY_DESIGN
        for where in _writes(path)
    ]
    assert not offenders, "\n".join(offenders)


def test_the_writer_check_sees_writes(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import os, shutil\n"
        "def f(p, q, ds):\n"
        "    open(p, 'w')\n"
        "    p.write_text('x')\n"
        "    os.replace(p, q)\n"
        "    shutil.copy(p, q)\n"
        "    ds.to_netcdf(p)\n"
        "    open(p).read()\n"
        "    'a'.replace('a', 'b')\n"
    )
    assert [w.split(": ")[1] for w in _writes(module)] == [
        "open for writing",
        ".write_text()",
        "os.replace()",
        "shutil.copy()",
        ".to_netcdf()",
    ]


def test_the_makefile_installs_the_cluster_extra_pyproject_declares():
    # `make dev` puts the extra beside the venv (Makefile CLUSTER_EXTRA), so it names it again.
    tomllib = pytest.importorskip("tomllib")
    root = PACKAGE.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    (line,) = re.findall(r"^CLUSTER_EXTRA \?= (.+)$", (root / "Makefile").read_text(), re.M)
    assert [line.strip()] == extras["optional-dependencies"]["cluster"]


def test_the_pre_commit_hooks_run_what_make_lint_runs():
    """Each tool of `make lint` is a local pre-commit hook with the venv's binary (no network
    at commit time), over the folders `make lint` gives it."""
    root = PACKAGE.parent
    hooks = {
        h["id"]: h
        for repo in yaml.safe_load((root / ".pre-commit-config.yaml").read_text())["repos"]
        for h in repo["hooks"]
        if repo["repo"] == "local"
    }
    lint = re.search(r"^lint: dev\n((?:\t.*\n)+)", (root / "Makefile").read_text(), re.M)
    assert lint, "the Makefile's lint target moved"
    tomllib = pytest.importorskip("tomllib")
    mypy_files = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    for line in lint.group(1).split("\n"):
        if not line.strip():
            continue
        words = line.replace("$(BIN)/", "").split()
        tool = " ".join(w for w in words[:2] if not w.startswith("$("))
        hook = {"ruff format": "ruff-format", "ruff check": "ruff-check", "mypy": "mypy"}[tool]
        assert hooks[hook]["entry"].startswith(f".venv/bin/{tool}"), hooks[hook]
        folders = [w for w in words[2:] if not w.startswith(("-", "$("))]
        for folder in folders or mypy_files:  # mypy's files are pyproject's
            assert re.match(hooks[hook]["files"], f"{folder}/x.py"), (hook, folder)


@pytest.mark.parametrize(
    ("target", "args", "paths"),
    [
        ("test-fast", "", ["aorta", "tests"]),
        ("test-fast", "tests/trace -x", ["tests/trace"]),
        ("test-fast", "tests/trace/test_load.py::test_x", ["tests/trace/test_load.py::test_x"]),
        ("test-fast", "-k load -m 'not docker'", ["aorta", "tests"]),
        ("test", "", ["aorta", "tests", "notebooks"]),
        ("test", "tests/layout aorta/recipe", ["tests/layout", "aorta/recipe"]),
    ],
)
def test_a_path_in_pytest_args_replaces_the_targets_paths(target, args, paths):
    """`make test-fast PYTEST_ARGS=tests/trace` runs the trace tests, not everything plus them;
    options alone keep the default paths (what `make -n` would run, nothing started)."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    root = PACKAGE.parent
    # as from a shell, also when this test runs under `make test` (no MAKELEVEL, no -w lines)
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", target, f"PYTEST_ARGS={args}"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=60,
        env=env,
    )
    (out,) = [line for line in done.stdout.splitlines() if " -m pytest " in line]
    words = shlex.split(out.split(" -m pytest ", 1)[1])
    named = [w for w in words if w in {"aorta", "tests", "notebooks"} or "/" in w]
    assert named == paths, out


@pytest.mark.parametrize(
    "notebook", sorted(p.name for p in (PACKAGE.parent / "notebooks").glob("*.ipynb"))
)
def test_every_notebook_cell_has_an_id(notebook):
    # nbformat 4.5 wants them: without, every run warns (MissingIDFieldWarning), and a future
    # nbformat refuses the file.
    doc = json.loads((PACKAGE.parent / "notebooks" / notebook).read_text())
    assert (doc["nbformat"], doc["nbformat_minor"]) >= (4, 5)
    missing = [i for i, cell in enumerate(doc["cells"]) if not cell.get("id")]
    assert not missing, f"{notebook}: cells {missing} have no id"
