"""The README's tour works in a fresh shell (#45.6): it starts by activating the venv, and its
cheap lines then run as written — in a shell whose PATH does not hold aorta."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
#: The tour's lines that run in seconds and write nothing (the rest run sweeps).
CHEAP = re.compile(
    r"^(\. \.venv/bin/activate|aorta (recipe validate|workloads list|mitigations list|--version)"
    r"|aorta sweep run --recipe \S+ --dry-run)"
)


def _tour() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## A tour", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.strip().splitlines()]


@pytest.mark.slow
def test_the_tour_runs_in_a_fresh_shell() -> None:
    lines = _tour()
    assert lines[0] == ". .venv/bin/activate"
    cheap = [line for line in lines if CHEAP.match(line)]
    assert len(cheap) >= 6, cheap
    if (ROOT / ".venv/bin").resolve() != VENV_BIN.resolve():
        pytest.skip("the tests do not run from the checkout's .venv")
    # A fresh shell: no venv on PATH, no aorta there.
    path = os.pathsep.join(
        p
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if Path(p).resolve() != VENV_BIN.resolve()
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = path or "/usr/bin:/bin"
    bare = subprocess.run(
        ["bash", "-c", "command -v aorta"], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert bare.returncode != 0  # the premise: without the first line, `aorta` is not found
    script = "set -e\n" + "\n".join(cheap) + "\n"
    done = subprocess.run(
        ["bash", "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "recipes/cpu-smoke.yaml: OK" in done.stdout and "aorta " in done.stdout
