"""`aorta history`'s two subcommands: `show` (the word may be left out) and `bless`, so a
ROOT folder named `bless` is spelled `show bless` or `./bless` and is never blessed by
mistake, and `bless` takes exactly one run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aorta.cli import main
from aorta.errors import ExitCode
from aorta.store.history import BLESSED
from tests.history_runs import write_night


@pytest.fixture
def bless_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "bless"  # a store that happens to be named like the subcommand
    for night in range(2):
        write_night(root, night, cells=1, trials=3, level=lambda n, c: 10.0)
    monkeypatch.chdir(tmp_path)
    return root


def _runs(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    capsys.readouterr()
    assert main(["history", *args, "--json"]) == ExitCode.OK
    return [r["run"] for r in json.loads(capsys.readouterr().out)["runs"]]


def test_a_root_named_bless(bless_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shown = _runs(capsys, "show", "bless")
    assert len(shown) == 2 and _runs(capsys, "./bless") == shown == _runs(capsys, str(bless_folder))
    # `bless` is always the subcommand: it wants one run directory, not a store.
    assert main(["history", "bless"]) == ExitCode.USAGE
    assert main(["history", "bless", "bless"]) == ExitCode.USAGE
    assert "not an aorta run directory" in capsys.readouterr().err
    assert not list(bless_folder.rglob(BLESSED))
    assert main(["history", "bless", shown[0]]) == ExitCode.OK
    assert (Path(shown[0]).parent / BLESSED).is_file()
    assert f"blessed {Path(shown[0]).name}" in capsys.readouterr().out
