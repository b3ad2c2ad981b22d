"""``aorta --version`` / ``-V``, in-process and through the installed console script."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import aorta
from aorta.errors import ExitCode


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag_prints_the_version(run_cli, flag):
    code, out, err = run_cli(flag)
    assert (code, out, err) == (ExitCode.OK, f"aorta {aorta.__version__}\n", "")


def test_version_from_the_console_script():
    exe = Path(sys.executable).parent / "aorta"
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (ExitCode.OK, f"aorta {aorta.__version__}\n")


def test_bare_aorta_shows_help_without_an_empty_error_line(run_cli):
    code, out, err = run_cli()
    assert code == ExitCode.USAGE
    assert "--version" in out and "sweep" in out
    assert "Error" not in err


def test_the_version_has_one_home():
    """pyproject.toml reads the version from aorta/__init__.py (setuptools' dynamic ``attr``)
    instead of writing it a second time; the installed metadata says the same."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(aorta.__file__).parents[1] / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "aorta.__version__"}
    assert importlib.metadata.version("aorta") == aorta.__version__
