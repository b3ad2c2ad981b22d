"""A recipe's ``bisect:`` block is ``aorta bisect``'s: ``aorta sweep run`` runs the cells as
written and says, once, that it does not search (it was silent, and a user waited for a search
that never started); a bisect step's own recipe has no such block, so it says nothing there."""

from __future__ import annotations

import pytest

from aorta.errors import ExitCode
from aorta.recipe import load_recipe_text
from aorta.run.bisect import step_recipe
from aorta.run.prepare import prepare

RECIPE = """
ticket: BIS
trials: 1
cells: [{name: base, mitigations: [none]}]
bisect: {variable: PROBE_BUILD, values: [a, b, c]}
"""
NOTE = (
    "bisect: ignored by a sweep, which runs the cells as written; "
    "'aorta bisect --recipe FILE' searches the 3 values of PROBE_BUILD"
)


def test_the_plan_says_a_sweep_does_not_bisect():
    recipe = load_recipe_text(RECIPE, command=["true"])
    assert prepare(recipe).warnings == [NOTE]
    assert not prepare(step_recipe(recipe, 1)).warnings  # what `aorta bisect` runs per step
    plain = load_recipe_text(RECIPE.split("bisect:")[0], command=["true"])
    assert not prepare(plain).warnings


@pytest.mark.slow  # a sweep, however small
def test_sweep_run_and_its_dry_run_say_so(tmp_path, run_cli):
    recipe = tmp_path / "bis.yaml"
    recipe.write_text(RECIPE)
    code, out, err = run_cli("sweep", "run", "--recipe", recipe, "--dry-run", "--", "true")
    assert code == ExitCode.OK and out.count(f"warning: {NOTE}") == 1, out + err
    code, out, err = run_cli(
        "sweep", "run", "--recipe", recipe, "-o", tmp_path / "out", "--", "true"
    )
    assert code == ExitCode.OK, out + err
    assert err.count(f"warning: {NOTE}") == 1, err
    assert len(list((tmp_path / "out").rglob("trial_0000.json"))) == 1  # the cell ran as written
