"""The statistics flags of ``aorta compare`` and ``aorta report`` build one StatsOptions; a
flag not given keeps StatsOptions' default, which is also what ``--help`` shows."""

from __future__ import annotations

import dataclasses

import pytest
import typer.main

from aorta.cli import app
from aorta.cli._options import stats_flags
from aorta.matrix.options import StatsOptions

FLAGS = {"alpha": "--alpha", "seed": "--seed", "resamples": "--resamples", "ranks": "--ranks"}
COMMANDS = {"compare": {**FLAGS, "stat": "--stat"}, "report": FLAGS}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_shown_defaults_are_the_options_defaults(name):
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    params = {p.opts[0]: p for p in command.params}
    defaults = StatsOptions()
    for field, flag in COMMANDS[name].items():
        param = params[flag]
        assert param.default is None, flag  # not given: the options' default applies
        assert param.show_default == str(getattr(defaults, field)), flag


def test_flags_not_given_are_the_defaults():
    assert stats_flags(alpha=None, seed=None, resamples=None, ranks=None) == StatsOptions()


def test_flags_given_replace_their_field():
    opts = stats_flags(alpha=0.01, seed=5, resamples=300, ranks="3", stat="p95")
    assert opts == dataclasses.replace(
        StatsOptions(), alpha=0.01, seed=5, resamples=300, ranks=3, stat="p95"
    )
    assert stats_flags(alpha=None, seed=None, resamples=None, ranks=" max ").ranks == "max"
