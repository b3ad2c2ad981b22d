"""Shared fixtures. Everything here is real: files, processes, the CLI in-process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

DATA = Path(__file__).parent / "data"
UPSTREAM_RECIPES = DATA / "upstream_recipes"

# Same examples everywhere; only the per-example deadline is sized for the suite's real
# conditions (xdist workers beside torchrun and Docker on two cores): hypothesis's 200 ms
# default failed a 2 ms example that was descheduled for 350 ms. Tests that set their own
# deadline keep it.
settings.register_profile("aorta", deadline=5000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "aorta"))


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def write(tmp_path):
    """Write text into tmp_path/name and return the path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return _write


@pytest.fixture
def run_cli(capsys):
    """Call ``aorta.cli.main`` in-process; return (code, stdout, stderr)."""
    from aorta.cli import main

    def _run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture(autouse=True)
def _quiet_ci(monkeypatch):
    # Progress bars draw plain lines under CI; make that the default for every test.
    monkeypatch.setenv("CI", os.environ.get("CI", "1"))
