"""mypy checks every module of aorta strictly: pyproject.toml says ``strict``, and no override
loosens it for a module of aorta (the one exclusion is the flight-recorder listener, untyped
on purpose and documented beside it)."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
MYPY = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def test_mypy_is_strict_over_the_whole_package():
    assert MYPY["strict"] is True
    assert MYPY["files"] == ["aorta"]
    assert MYPY["exclude"] == ["aorta/run/frshim/"]


def test_no_override_loosens_a_module_of_aorta():
    for override in MYPY.get("overrides", []):
        modules = override["module"]
        modules = [modules] if isinstance(modules, str) else modules
        ours = [m for m in modules if m == "aorta" or m.startswith("aorta.")]
        assert not ours, f"an override names aorta's own modules: {ours} ({override})"
