"""mypy checks every module of aorta and every benchmark script strictly: pyproject.toml says
``strict``, and no override loosens it for a module of aorta or a benchmark (the one exclusion
is the flight-recorder listener, untyped on purpose and documented beside it)."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
MYPY = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def test_mypy_is_strict_over_the_whole_package():
    assert MYPY["strict"] is True
    # benchmarks/ too: a script that drifted from the API it times failed only when run.
    assert MYPY["files"] == ["aorta", "benchmarks"]
    assert MYPY["exclude"] == ["aorta/run/frshim/"]


def test_no_override_loosens_a_module_of_aorta():
    for override in MYPY.get("overrides", []):
        modules = override["module"]
        modules = [modules] if isinstance(modules, str) else modules
        # (a benchmark's module is its file's bare name: its siblings import it so)
        scripts = {f.stem for f in (ROOT / "benchmarks").glob("*.py")}
        ours = [m for m in modules if m in {"aorta", *scripts} or m.startswith("aorta.")]
        assert not ours, f"an override names aorta's own modules: {ours} ({override})"
