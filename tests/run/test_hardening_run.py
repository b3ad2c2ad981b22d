"""Hardening of the sweep on unlucky runs: huge output, bad manifests, changed commands, name
clashes (real sweeps, real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aorta.errors import ExitCode, UsageError
from aorta.store.rundir import RunDir

AORTA = str(Path(sys.executable).parent / "aorta")

PROBE = """
mode: probe
ticket: HARD
trials: 1
mitigation_axis: [none]
step_time_regex: 'step ([0-9.]+) ms'
"""


def _aorta(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([AORTA, *args], capture_output=True, text=True, timeout=180, **kw)


def _peak_rss_kb(tmp_path: Path, name: str, script: str) -> tuple[int, Path]:
    """Run a one-trial probe sweep in a fresh interpreter; its peak RSS and its output root."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(PROBE)
    out = tmp_path / name
    code = (
        "import resource, sys; from aorta.cli import main; "
        f"rc = main(['sweep', 'run', '--recipe', {str(recipe)!r}, '-o', {str(out)!r},"
        f" '--', 'bash', '-c', {script!r}]); "
        "print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == ExitCode.OK, proc.stderr
    return int(proc.stdout.split("MAXRSS")[1].split()[0]), out


@pytest.mark.slow
def test_a_trial_printing_hundreds_of_megabytes_is_parsed_in_bounded_memory(tmp_path):
    # One 200 MB line between the step lines; the sweep must not hold the log whole. Measured
    # against the same sweep with a tiny log, so the interpreter's own size does not count.
    steps = 'echo "step 1.5 ms"; {}; echo; echo "step 2.5 ms"'
    small, _ = _peak_rss_kb(tmp_path, "small", steps.format("echo x"))
    big, out = _peak_rss_kb(
        tmp_path, "big", steps.format('head -c 200000000 /dev/zero | tr "\\0" x')
    )
    assert big - small < 100_000, f"peak RSS {big} kB for a 200 MB log, {small} kB for a tiny one"
    (record,) = out.rglob("trial_0000.json")
    assert json.loads(record.read_text())["step_times_ms"] == [1.5, 2.5]


def test_a_manifest_that_is_json_but_not_an_object_is_a_clear_error(tmp_path, run_cli):
    rd = RunDir.create(tmp_path, ticket=None, workload="w")
    rd.manifest_path.write_text("[1, 2]")
    with pytest.raises(UsageError, match="not an aorta manifest"):
        rd.manifest()
    code, _, err = run_cli("sweep", "status", str(rd.path))
    assert code == ExitCode.USAGE
    assert "not an aorta manifest" in err and "Traceback" not in err


@pytest.mark.slow
def test_resume_refuses_a_different_command(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(PROBE)
    first = _aorta("sweep", "run", "--recipe", str(recipe), "-o", str(tmp_path), "--", "true")
    assert first.returncode == ExitCode.OK, first.stderr
    (run_dir,) = (tmp_path / "HARD" / "command").iterdir()
    other = _aorta("sweep", "run", "--resume", str(run_dir), "--", "./other.sh")
    assert other.returncode == ExitCode.USAGE
    assert "keeps its command" in other.stderr and "./other.sh" in other.stderr
    same = _aorta("sweep", "run", "--resume", str(run_dir), "--", "true")
    assert same.returncode == ExitCode.OK, same.stderr


@pytest.mark.slow
def test_collect_paths_keeps_two_files_of_the_same_name(tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "dmesg.log").write_text(f"from {sub}\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(PROBE + f"collect_paths: ['{tmp_path}/a/*.log', '{tmp_path}/b/*.log']\n")
    proc = _aorta(
        "sweep", "run", "--recipe", str(recipe), "-o", str(tmp_path / "out"), "--", "true"
    )
    assert proc.returncode == ExitCode.OK, proc.stderr
    (record,) = (tmp_path / "out").rglob("trial_0000.json")
    collected = record.with_suffix("") / "collected"
    assert {p.name: p.read_text() for p in collected.iterdir()} == {
        "dmesg.log": "from a\n",
        "dmesg-2.log": "from b\n",
    }
    warnings = json.loads(record.read_text())["warnings"]
    assert any("same name" in w and "dmesg-2.log" in w for w in warnings), warnings


@pytest.fixture
def tiny_fs(tmp_path):
    """A 3 MB tmpfs (needs root and mount; skipped where either is missing)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.slow
def test_a_full_disk_stops_the_run_resumably_with_one_line(tmp_path, tiny_fs):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(PROBE.replace("trials: 1", "trials: 12"))
    # Each trial writes ~400 kB of log: the 3 MB file system fills up part way.
    script = 'echo "step 1.5 ms"; head -c 400000 /dev/zero | tr "\\0" x; echo'
    full = _aorta(
        "sweep", "run", "--recipe", str(recipe), "-o", str(tiny_fs), "--", "bash", "-c", script
    )
    assert full.returncode == ExitCode.ERROR
    assert "No space left on device" in full.stderr and "aorta sweep resume" in full.stderr
    assert "Traceback" not in full.stderr
    (run_dir,) = (tiny_fs / "HARD" / "command").iterdir()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    written = {p.name for p in run_dir.rglob("trial_*.json")}
    assert 0 < len(written) < 12
    # Space comes back: the run finishes where it stopped, every trial with its full log.
    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_fs)], check=True)
    resumed = _aorta("sweep", "resume", str(run_dir))
    assert resumed.returncode == ExitCode.OK, resumed.stderr
    records = [json.loads(p.read_text()) for p in run_dir.rglob("trial_*.json")]
    assert len(records) == 12
    assert {r["status"] for r in records} == {"ok"}
    assert all(r["step_times_ms"] == [1.5] for r in records)


@pytest.mark.slow
def test_an_unreadable_record_is_said_not_dropped_silently(tmp_path, run_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(PROBE.replace("trials: 1", "trials: 3"))
    proc = _aorta("sweep", "run", "--recipe", str(recipe), "-o", str(tmp_path), "--", "true")
    assert proc.returncode == ExitCode.OK, proc.stderr
    (run_dir,) = (tmp_path / "HARD" / "command").iterdir()
    (run_dir / "results.nc").unlink()  # read the records, not the finished Dataset
    (run_dir / "cells" / "none-none" / "trial_0001.json").write_text('{"cell": "none-n')
    code, _, err = run_cli("compare", str(run_dir))
    assert code == ExitCode.OK
    assert "warning:" in err and "trial_0001.json" in err and "could not be read" in err
