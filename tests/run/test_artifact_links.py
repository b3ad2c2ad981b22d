"""A trial's folder holding links (a ``latest`` checkpoint link to anywhere): the sweep lists
the folder without following them, and any error handling a trial's files leaves the run
resumable (issue 24; real sweeps, real links)."""

from __future__ import annotations

import json
import os

import pytest

from aorta.errors import AortaError, ExitCode
from aorta.recipe import load_recipe_text
from aorta.run.runner import TrialRunner
from aorta.run.sweep import sweep
from aorta.store.rundir import RunDir

PROBE = "mode: probe\ntrials: 2\nmitigation_axis: [none]\n"


def _links_script(outside) -> list[str]:
    # A checkpoint, a link to it, a `latest` link out of the run, a link to a folder out of
    # the run (never walked), and a dangling link.
    return [
        "bash",
        "-c",
        'cd "$AORTA_ARTIFACT_DIR" && echo w > ckpt_1.pt && ln -s ckpt_1.pt here'
        f" && ln -s {outside / 'ckpt.pt'} latest && ln -s {outside} outdir && ln -s nowhere gone",
    ]


def test_links_out_of_the_run_are_kept_as_links_and_not_followed(tmp_path, run_cli):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "ckpt.pt").write_text("weights")
    (outside / "deep.txt").write_text("must not be listed")
    recipe = load_recipe_text(PROBE, command=_links_script(outside))
    result = sweep(recipe, output=tmp_path / "out", progress="none")
    assert result.exit_code == ExitCode.OK
    rd = RunDir.open(result.run_dir)
    assert rd.manifest()["status"] == "complete"
    for record in result.records:
        assert record.status.value == "ok", record.error
        assert "ckpt_1.pt" in record.artifacts and "here" in record.artifacts
        assert not {"latest", "outdir", "outdir/deep.txt"} & set(record.artifacts)
        assert all(not os.path.isabs(p) and ".." not in p for p in record.artifacts.values())
        (warning,) = [w for w in record.warnings if "outside the run" in w]
        assert "latest ->" in warning and "outdir ->" in warning
        folder = rd.artifact_dir(record.cell, record.trial)
        assert (folder / "latest").is_symlink()  # kept as the trial left it
    assert (outside / "ckpt.pt").read_text() == "weights"
    # The report and the bundle read the run as it is.
    code, _, err = run_cli("sweep", "status", result.run_dir)
    assert code == ExitCode.OK, err


def test_an_unexpected_error_handling_a_trials_files_leaves_the_run_resumable(
    tmp_path, monkeypatch
):
    # Fault injection: whatever the next surprise in artifact handling is, it must not leave
    # the manifest `running` with no sweep behind it.
    real = TrialRunner._artifacts
    calls = []

    def flaky(self, art, warnings):
        calls.append(art)
        if len(calls) == 2:
            raise ValueError("a surprise in artifact handling")
        return real(self, art, warnings)

    monkeypatch.setattr(TrialRunner, "_artifacts", flaky)
    recipe = load_recipe_text(PROBE, command=["true"])
    with pytest.raises(AortaError, match=r"unexpected error.*resumable: aorta sweep resume"):
        sweep(recipe, output=tmp_path, progress="none")
    (run_dir,) = (tmp_path / "_no_ticket_" / "command").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    again = sweep(resume=run_dir, progress="none")
    assert again.exit_code == ExitCode.OK and len(again.records) == 2
    assert RunDir.open(run_dir).manifest()["status"] == "complete"
