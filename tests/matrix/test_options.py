"""StatsOptions: one frozen value for the statistics options, its defaults in one place, and
the public keywords as overrides of it (the same numbers either way)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pandas as pd
import pytest

import aorta
from aorta.matrix import stats
from aorta.matrix.compare import compare, compare_runs
from aorta.matrix.dataset import build_dataset
from aorta.matrix.options import StatsKeywords, StatsOptions, stats_options
from aorta.matrix.summary import summarize
from aorta.report.findings import run_findings
from aorta.store.record import TrialRecord

DOCS = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"
FIELDS = [f.name for f in dataclasses.fields(StatsOptions)]


def _ds(shift: float = 3.0):
    times = {
        "base": [10.0, 10.2, 9.9, 10.1, 10.03, 10.07],
        "slow": [v + shift for v in (10.0, 10.4, 9.9, 10.1, 10.2, 10.3)],
        "same": [10.05, 9.95, 9.85, 10.15, 10.02, 9.97],
    }
    return build_dataset(
        [{"name": c, "trials": 6} for c in times],
        [
            TrialRecord(
                cell=c, cell_id="", trial=t, status="ok", passed=True, step_times_ms=[v, v * 1.01]
            )
            for c, vs in times.items()
            for t, v in enumerate(vs)
        ],
        attrs={"baseline": "base", "threshold": 1.15},
    )


def test_defaults_are_the_stats_constants_and_the_options_are_frozen():
    o = StatsOptions()
    assert (o.alpha, o.seed, o.resamples) == (
        stats.DEFAULT_ALPHA,
        stats.DEFAULT_SEED,
        stats.DEFAULT_RESAMPLES,
    )
    assert (o.threshold, o.trials, o.ranks, o.stat) == (None, "ok", "worst", "median")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.alpha = 0.1  # type: ignore[misc]
    with pytest.raises(TypeError):
        StatsOptions(0.1)  # type: ignore[misc]  # keyword-only
    assert aorta.StatsOptions is StatsOptions


def test_the_keywords_are_the_fields():
    assert list(StatsKeywords.__annotations__) == FIELDS


def test_every_field_and_default_is_documented():
    text = DOCS.read_text()
    for f in dataclasses.fields(StatsOptions):
        default = f.default if not isinstance(f.default, str) else f'"{f.default}"'
        assert re.search(rf"^\| `{f.name}` \| `{default}` \|", text, re.M), f.name


def test_stats_options_replaces_only_what_is_given():
    base = StatsOptions(alpha=0.01, resamples=500)
    assert stats_options(base) is base
    assert stats_options(base, alpha=None, seed=None) is base
    assert stats_options(base, seed=4) == StatsOptions(alpha=0.01, resamples=500, seed=4)
    assert stats_options(resamples=7) == StatsOptions(resamples=7)
    with pytest.raises(TypeError, match="'alpah'"):
        stats_options(alpah=0.1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'alpah'"):
        stats_options(alpah=None)  # type: ignore[call-arg]


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a, b)
    assert a.attrs.keys() == b.attrs.keys()
    for k in a.attrs:
        x, y = a.attrs[k], b.attrs[k]
        assert x == y or (x != x and y != y), k  # NaN == NaN here


def test_options_and_keywords_give_the_same_comparison():
    ds = _ds()
    kw = {"alpha": 0.1, "seed": 3, "resamples": 300, "stat": "mean", "threshold": 1.2}
    by_options = compare(ds, options=StatsOptions(**kw))
    _same(by_options, compare(ds, **kw))
    assert by_options.attrs["alpha"] == 0.1 and by_options.attrs["resamples"] == 300
    assert by_options.attrs["stat"] == "mean" and by_options.attrs["threshold"] == 1.2
    # A keyword overrides the options' field; the others stay.
    mixed = compare(ds, options=StatsOptions(**kw), resamples=400)
    assert (mixed.attrs["resamples"], mixed.attrs["alpha"], mixed.attrs["seed"]) == (400, 0.1, 3)
    _same(mixed, compare(ds, **{**kw, "resamples": 400}))
    _same(ds.aorta.compare(options=StatsOptions(**kw)), by_options)


def test_the_defaults_are_what_no_options_give():
    ds = _ds()
    _same(compare(ds, resamples=200), compare(ds, options=StatsOptions(resamples=200)))
    _same(compare(ds, resamples=200, sequential=True), compare(ds, resamples=200, sequential=True))
    a, b = _ds(0.0), _ds(2.0)
    _same(
        compare_runs(a, b, resamples=200), compare_runs(a, b, options=StatsOptions(resamples=200))
    )


def test_the_matrix_takes_level_band_and_bootstrap_from_the_options():
    ds = _ds()
    opts = StatsOptions(alpha=0.1, seed=2, resamples=300, stat="mean", ranks="max")
    df = summarize(ds, options=opts)
    # the matrix's trial value is its own (the median step), whatever the options' stat
    assert df.attrs["stat"] == "median" and df.attrs["alpha"] == 0.1
    _same(df, summarize(ds, alpha=0.1, seed=2, resamples=300))
    found = run_findings(ds, options=opts)
    assert [f.kind for f in found] == [
        f.kind for f in run_findings(ds, alpha=0.1, seed=2, resamples=300)
    ]


def test_the_band_default_is_the_recipes_one():
    # Two literals (recipe schema and matrix) could drift apart: one is now the other.
    from aorta.matrix.select import DEFAULT_THRESHOLD
    from aorta.recipe.blocks import Confound

    assert Confound().threshold == DEFAULT_THRESHOLD
