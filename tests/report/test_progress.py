"""Sweep progress: per-cell counts on plain lines (a real interleaved sweep), and progress modes
that are not modes refused before anything runs."""

from __future__ import annotations

import re

import pytest

import aorta
from aorta.errors import ExitCode, UsageError
from aorta.recipe import load_recipe_text

# Interleaved (the default): every cell's trials run in rounds, so the three cells all finish
# in the last round — the case where one running count showed `13 ok` for a 5-trial cell.
RECIPE = """
mode: probe
ticket: PROGRESS
trials: 5
schedule: interleaved
mitigation_axis: [none, xnack, hsa_no_sdma]
"""


@pytest.mark.slow
def test_non_tty_lines_count_each_cells_own_trials(tmp_path, run_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    # xnack fails its odd trials: the counts must split by status within the cell too.
    script = 'if [ -n "$HSA_XNACK" ] && [ $((AORTA_TRIAL % 2)) = 1 ]; then exit 3; fi'
    code, _, err = run_cli(
        "sweep", "run", "--recipe", recipe, "-o", tmp_path / "out", "--", "bash", "-c", script
    )
    assert code == ExitCode.OK, err
    # The order within a round is shuffled: compare the lines without their [n/15].
    lines = [line for line in err.splitlines() if re.match(r"\[1[3-5]/15\] ", line)]
    assert sorted(line.split("] ", 1)[1] for line in lines) == [
        "hsa_no_sdma-none: 5 ok",
        "none-none: 5 ok",
        "xnack-none: 3 ok, 2 workload_failed",
    ], err


@pytest.mark.parametrize("mode", ["off", "quiet", "", None, False])
def test_unknown_progress_mode_is_refused_before_anything_runs(tmp_path, mode):
    recipe = load_recipe_text("cells: [{name: base, mitigations: [none]}]", command=["true"])
    with pytest.raises(UsageError, match=r"progress=.*not a progress mode; choose one of auto, "):
        aorta.sweep(recipe, output=tmp_path / "out", progress=mode)
    assert not (tmp_path / "out").exists()  # no run directory was started


@pytest.mark.slow
def test_progress_none_prints_nothing(tmp_path, capsys):
    recipe = load_recipe_text("cells: [{name: base, mitigations: [none]}]", command=["true"])
    result = aorta.sweep(recipe, output=tmp_path / "out", progress="none")
    assert result.exit_code == ExitCode.OK
    assert capsys.readouterr() == ("", "")


def test_an_imported_ipykernel_is_not_a_running_kernel():
    # nbmake imports ipykernel into pytest's own process; progress then drew bars into
    # the logs of the tests that ran after it on the same worker.
    import io

    import ipykernel  # noqa: F401

    from aorta.report.progress import LineReporter, choose_reporter

    assert isinstance(choose_reporter("auto", stream=io.StringIO()), LineReporter)


def test_one_bar_rich_in_a_terminal_and_in_jupyter(monkeypatch):
    """One progress implementation (rich): a kernel gets rich's live widget where ipywidgets is
    installed, plain lines where it is not (rich draws nothing live without it); ``tqdm``, an
    older mode, is the rich bar. The kernel is faked: no Jupyter server runs in this test."""
    import io

    from aorta.report import progress
    from aorta.report.progress import LineReporter, RichReporter, choose_reporter

    assert isinstance(choose_reporter("tqdm", stream=io.StringIO()), RichReporter)
    monkeypatch.setattr(progress, "_in_jupyter", lambda: True)
    monkeypatch.setattr(progress, "_has_widgets", lambda: True)
    assert isinstance(choose_reporter("auto", stream=io.StringIO()), RichReporter)
    monkeypatch.setattr(progress, "_has_widgets", lambda: False)
    assert isinstance(choose_reporter("auto", stream=io.StringIO()), LineReporter)
