"""A history of a trace metric: nightly runs whose trials left real profiler traces — the
same BERT step recorded on an H100 for four nights, then on an MI300X (the platform changed
under the nightly) — read by `aorta history --metric busy_pct`: each run's busy share from
its traces, the change point where the trace changed with the environment change beside it,
the gate; step time (unchanged) finds nothing, and a run without traces reads as such."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aorta.cli import main
from aorta.errors import ExitCode, UsageError
from aorta.matrix.history import load_history
from aorta.matrix.series import analyze
from tests.history_runs import snapshot, write_night

pytestmark = pytest.mark.slow

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
H100, MI300 = TRACES / "h100_bert_small.json.gz", TRACES / "mi300_bert_small.json.gz"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("traces") / "store"
    for night in range(8):
        after = night >= 4
        write_night(
            root, night, cells=1, trials=2, level=lambda n, c: 100.0,
            snap=snapshot(env={"GPU": "MI300X" if after else "H100"}),
            trace=MI300 if after else H100,
        )  # fmt: skip
    return root


def test_trace_metric_history(store: Path) -> None:
    ds = load_history([store], metric="busy_pct")
    assert ds.attrs["metric"] == "busy_pct" and set(ds.metric_source.values) == {"trace"}
    # The busy share of each trace, as `aorta trace summarize` gives it (7.9% and 11.2%).
    medians = ds["median"].sel(cell="cell00").values
    assert medians[:4] == pytest.approx([7.87] * 4, abs=0.05)
    assert medians[4:] == pytest.approx([11.19] * 4, abs=0.05)

    h = analyze([store], metric="busy_pct")
    (change,) = [c for c in h.change_points if c.metric == "busy_pct"]
    assert (change.positions, change.direction, change.worse) == ((3, 4), "higher", False)
    assert change.environment_changes["env.GPU"] == ["H100", "MI300X"]
    # Higher busy share is better: the newest segment against the one before trips nothing.
    assert h.findings and not h.regressed
    assert {f.difference for f in h.findings if f.against == "previous segment"} == {"higher"}

    # The trace's step time fell (4.43 → 4.01 ms): lower, better.
    h = analyze([store], metric="trace_step_ms")
    (change,) = [c for c in h.change_points if c.metric == "trace_step_ms"]
    assert (change.direction, change.worse, change.ratio) == (
        "lower",
        False,
        pytest.approx(0.905, abs=0.01),
    )
    # The step times the runs recorded did not change.
    assert [c for c in analyze([store]).change_points if c.metric == "step_time_ms"] == []


def test_trace_metric_cli(store: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert (
        main(["history", "show", str(store), "--metric", "exposed_comm_ms", "--json"])
        == ExitCode.OK
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["metric"] == "exposed_comm_ms" and doc["series"][0]["median"] == [0.0] * 8
    # A run without traces has no value of a trace metric, named in metric_source.
    write_night(tmp_path / "plain", 0, cells=1, trials=2, level=lambda n, c: 10.0)
    ds = load_history([tmp_path / "plain"], metric="busy_pct")
    assert list(ds.metric_source.values) == ["no trace"] and int(ds.n_timed.sum()) == 0
    with pytest.raises(UsageError, match="busy_pct"):
        load_history([store], metric="busy_percent")


@pytest.mark.parametrize("metric", ["busy_pct", "trace_step_ms"])
def test_every_output_names_the_metric_analysed(
    store: Path, metric: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The JSON, the text, the page and its figure name the metric the history analysed —
    the same name, ``--metric``'s — for its change point and its gate findings, never
    ``step_time`` (which every timing change point read, whatever the metric)."""
    from aorta.plot.history import series_figure
    from aorta.report.page.history import history_page

    assert main(["history", "show", str(store), "--metric", metric, "--json"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    (change,) = doc["change_points"]
    assert change["metric"] == metric and change["ratio"] is not None
    assert doc["gate"]["findings"] and {f["metric"] for f in doc["gate"]["findings"]} == {metric}

    assert main(["history", "show", str(store), "--metric", metric]) == ExitCode.OK
    text = capsys.readouterr().out
    assert f"cell00 · {metric}: {change['direction']} ×" in text and "step_time" not in text

    page = history_page(analyze([store], metric=metric))
    assert f"{metric}: {change['direction']}" in page and "step_time" not in page
    fig = series_figure(doc["series"][0], [change], metric=doc["metric"])
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert fig.axes[0].get_ylabel() == metric and labels[0].startswith(f"{metric}: ")
