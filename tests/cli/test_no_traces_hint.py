"""``--traces`` / ``--explain`` on a run that recorded no profiler trace say how to record
them (``collect: [torch_profiler]`` and the workloads that write traces), on a real sweep."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from aorta.run.profiler import no_traces_hint
from aorta.store.rundir import RunDir, trace_file_name

RECIPE = "mode: probe\nticket: NOTRACE\ntrials: 2\nmitigation_axis: [none, xnack]\n"
TRACES = Path(__file__).parents[1] / "data" / "traces"


@pytest.fixture(scope="module")
def untraced_run(tmp_path_factory) -> Path:
    import aorta
    from aorta.recipe import load_recipe_text

    root = tmp_path_factory.mktemp("notrace")
    recipe = load_recipe_text(RECIPE, command=["true"])
    return Path(aorta.sweep(recipe, output=root, progress="none").run_dir)


def _one_error(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--traces"], "--traces"),
        (["--traces", "--metric", "idle_ms"], "--traces"),
        (["--explain", "xnack-none"], "--explain"),
    ],
)
def test_compare_without_traces_says_how_to_record_them(untraced_run, run_cli, argv, flag):
    code, out, err = run_cli("compare", untraced_run, *argv)
    assert code == ExitCode.USAGE and out == ""
    line = _one_error(err)
    assert line.startswith(f"Error: {flag}: no profiler traces in {untraced_run}: ")
    assert "add `collect: [torch_profiler]` to the recipe" in line
    recorders = line.split("workloads that record traces: ")[1].rstrip(")").split(", ")
    assert {"race", "training"} <= set(recorders)


@pytest.mark.slow
def test_report_traces_writes_the_report_and_warns(untraced_run, run_cli):
    code, _out, err = run_cli("report", untraced_run, "--traces", "--resamples", "200")
    assert code == ExitCode.OK, err
    assert (untraced_run / "report" / "report.md").is_file()
    assert "warning: --traces: no profiler traces in" in err
    assert "collect: [torch_profiler]" in err


def test_a_run_with_a_trace_gets_no_hint(tmp_path):
    rd = RunDir.create(tmp_path, ticket=None, workload="training")
    assert no_traces_hint(rd.path) is not None
    folder = rd.trace_dir("base", 0)
    folder.mkdir(parents=True)
    source = next(p for p in sorted(TRACES.rglob("*.json*")) if p.is_file())
    shutil.copyfile(source, folder / trace_file_name(0))
    assert no_traces_hint(rd.path) is None
