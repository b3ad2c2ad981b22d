"""history.html in a real browser: a month of nights with a torch upgrade that slowed one cell
and an NCCL variable that made another fail; the page shows both change points with what
changed, the gate, and how many runs at what false-alarm rate — and names nothing outside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aorta.cli import main
from aorta.errors import ExitCode
from tests.chromium import look
from tests.history_runs import snapshot, write_night

pytestmark = pytest.mark.slow


def _month(root: Path) -> None:
    for night in range(24):
        upgraded = night >= 14
        env = {"NCCL_ALGO": "Tree"} if night >= 10 else {}
        write_night(
            root, night, cells=2, trials=12,
            level=lambda n, c: 100.0 * (1.25 if c == 0 and n >= 14 else 1.0),
            fail=lambda n, c: 0.5 if c == 1 and n >= 10 else 0.0,
            snap=snapshot("2.13.0" if upgraded else "2.12.0", env),
        )  # fmt: skip


def test_history_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "nightly"
    _month(root)
    assert main(["history", str(root), "--html", "--fail-on-regression"]) == ExitCode.GATE
    out = capsys.readouterr().out
    page = root / "history.html"
    assert f"wrote {page}" in out
    text = page.read_text()
    assert not re.search(r"(src|href)=\"(https?:)?//", text)
    assert "24 runs in 1 series" in text and "at most 0.05" in text
    seen = look(
        page.as_uri(), width=1280, height=900, profile=tmp_path / "profile",
        expression="[document.querySelectorAll('figure svg').length, document.body.innerText]",
    )  # fmt: skip
    figures, body = seen.value
    assert figures == 2
    assert "torch.version 2.12.0 → 2.13.0" in body and "env.NCCL_ALGO unset → Tree" in body
    assert "more failures" in body and "slower" in body and "REGRESSION" in body
    (tmp_path / "history.png").write_bytes(seen.full)
