"""Every command's --help says its whole docstring, one paragraph as one paragraph.

Typer renders help as Rich markup, so ``[v0, …, vN]`` (bisect) and ``[memory]`` (trace
memory) vanished as unknown tags, and it keeps a docstring's source line breaks, so the help
came out ragged: a half-filled line, then "--mitigation-axis," alone on the next. Read at a
width of 1000 columns, each paragraph must be one line of the help, word for word."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer

from aorta.cli import app
from aorta.errors import ExitCode

_BOX = re.compile(r"[│╭╮╰╯─]")


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def _words(text: str) -> str:
    # ``x`` in a docstring is code; the help shows it as x.
    return " ".join(_BOX.sub(" ", text.replace("``", "")).split())


@pytest.mark.parametrize(
    ("path", "cmd"), COMMANDS, ids=[" ".join(p) or "aorta" for p, _ in COMMANDS]
)
def test_help_shows_every_paragraph_whole(run_cli, monkeypatch, path, cmd):
    monkeypatch.setenv("COLUMNS", "1000")
    code, out, err = run_cli(*path, "--help")
    assert code == ExitCode.OK, err
    lines = [_words(line) for line in out.splitlines()]
    wanted = [p for p in (cmd.help or "").split("\n\n") if p.strip()]
    # A group's panel shows each subcommand's first paragraph.
    wanted += [(s.help or "").split("\n\n")[0] for s in getattr(cmd, "commands", {}).values()]
    for paragraph in wanted:
        words = _words(paragraph)
        assert any(words in line for line in lines), (words, out)
