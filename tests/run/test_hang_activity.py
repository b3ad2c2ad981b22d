"""What counts as a trial's activity for ``hang_after`` (issue 24): a worker that left the
trial's process group and session but carries its token, and writes to files in the trial's
own folder (real sweeps, real processes)."""

from __future__ import annotations

import subprocess

import pytest

from aorta.recipe import load_recipe_text
from aorta.run.hang import HangWatch, folder_state
from aorta.run.sweep import sweep


def _recipe(isolation: str) -> str:
    return (
        "mode: probe\nmitigation_axis: [none]\nhang_after: 2\ntimeout_per_trial: 120\n"
        f"trial_isolation: {isolation}\n"
    )


def _run(tmp_path, isolation: str, script: str):
    recipe = load_recipe_text(_recipe(isolation), command=["bash", "-c", script])
    return sweep(recipe, output=tmp_path / "out", progress="none").records[0]


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["in_process", "process"])
def test_a_double_forked_setsid_worker_burning_cpu_is_not_a_hang(tmp_path, isolation):
    # The subshell exits at once: the setsid worker is orphaned (re-parented to the sweep),
    # in its own session and process group; only the trial token says it is the trial's.
    # The trial's first process sleeps (idle) while the worker computes.
    burn = "end=$((SECONDS+60)); while [ $SECONDS -lt $end ]; do :; done"
    script = f"(setsid bash -c '{burn}' &); sleep 6"
    rec = _run(tmp_path, isolation, script)
    assert rec.status.value == "ok", rec.error
    assert rec.failure_kind is None
    # The sweep still reaps the worker when the trial ends, and says so.
    assert any("outside its process group" in w for w in rec.warnings), rec.warnings


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["in_process", "process"])
def test_a_trial_logging_only_to_a_file_in_its_folder_is_not_a_hang(tmp_path, isolation):
    script = (
        'for i in $(seq 12); do echo "step $i" >> "$AORTA_ARTIFACT_DIR/train/progress.txt";'
        " sleep 0.5; done"
    )
    script = f'mkdir -p "$AORTA_ARTIFACT_DIR/train"; {script}'
    rec = _run(tmp_path, isolation, script)
    assert rec.status.value == "ok", rec.error


def test_writes_under_the_folder_are_activity_and_links_are_not_followed(tmp_path):
    folder = tmp_path / "trial"
    (folder / "sub").mkdir(parents=True)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x")
    (folder / "latest").symlink_to(outside)
    first = folder_state(folder)
    outside.write_bytes(b"x" * 100)  # behind a link: not the trial's folder
    assert folder_state(folder) == first
    (folder / "sub" / "log.txt").write_text("step 1\n")
    assert folder_state(folder) != first
    # The watch on an idle process: idle logs, idle CPU, but the folder grows → no hang.
    idle = subprocess.Popen(["sleep", "60"])
    try:
        now = [0.0]
        watch = HangWatch(
            idle.pid, [], hang_after=2, folders=[folder], clock=lambda: now[0], sample_s=0
        )
        for i in range(6):
            now[0] += 1.0
            (folder / "sub" / "log.txt").write_text(f"step {i}\n" * (i + 2))
            assert watch() is None
        # Then the folder is quiet too: a hang once hang_after has passed.
        reasons = []
        for _ in range(4):
            now[0] += 1.0
            reasons.append(watch())
        assert reasons[0] is None and reasons[-1] is not None, reasons
        assert "no output and no CPU use" in reasons[-1]
    finally:
        idle.kill()
        idle.wait()
