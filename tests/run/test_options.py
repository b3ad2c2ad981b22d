"""The run options: one frozen value, its keywords in step with its fields, and
:func:`aorta.sweep`'s keywords overriding the value it is given."""

from __future__ import annotations

import dataclasses

import pytest

import aorta
from aorta.matrix.options import StatsKeywords, StatsOptions, stats_options
from aorta.recipe import load_recipe_text
from aorta.run.options import RunKeywords, RunOptions, run_options

PROBE = "mode: probe\nticket: T-0\nmitigation_axis: [none]\n"


@pytest.mark.parametrize(
    ("options", "keywords"), [(RunOptions, RunKeywords), (StatsOptions, StatsKeywords)]
)
def test_the_keywords_are_the_fields_each_documented(options, keywords):
    fields = [f.name for f in dataclasses.fields(options)]
    assert list(keywords.__annotations__) == fields
    params = options.__doc__.split("Parameters")[1].split("See Also")[0]
    assert all(name in params for name in fields)


def test_a_keyword_replaces_its_field_none_too():
    base = RunOptions(ticket="T-1", progress="none")
    assert run_options(base) is base
    assert run_options(base, verbose=True) == dataclasses.replace(base, verbose=True)
    assert run_options(base, ticket=None) == dataclasses.replace(base, ticket=None)
    # The statistics keywords: None is "not given" (the CLI's flags), the options' value stays.
    assert stats_options(StatsOptions(alpha=0.01), alpha=None).alpha == 0.01


def test_a_misspelt_keyword_runs_nothing(tmp_path):
    recipe = load_recipe_text(PROBE, command=["true"])
    with pytest.raises(
        TypeError, match=r"'outptu' \(the run options are backend, check_numerics, command"
    ):
        aorta.sweep(recipe, options=RunOptions(output=tmp_path), outptu=tmp_path / "x")
    assert not list(tmp_path.iterdir())


def test_a_keyword_overrides_the_options_it_is_given(tmp_path):
    recipe = load_recipe_text(PROBE, command=["true"])
    options = aorta.RunOptions(output=tmp_path / "a", ticket="T-1", progress="none")
    result = aorta.sweep(recipe, options=options, output=tmp_path / "b")
    assert result.run_dir.parent.parent == tmp_path / "b" / "T-1"
    assert result.exit_code is aorta.ExitCode.OK
    assert not (tmp_path / "a").exists()
