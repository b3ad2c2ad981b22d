"""``aorta launch --slurm --dry-run`` with no Slurm at all, and the values that reach
``aorta.sbatch`` (issue 24: a newline in ``--account`` injected a shell line). Real files, real
bash; no Slurm cluster is needed — that is the point."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from aorta.cli import main
from aorta.errors import ExitCode, UsageError
from aorta.launch import LaunchOptions, LaunchSpec, run
from aorta.launch.slurm import SlurmJob

PROBE = "schema_version: 1\nmode: probe\nticket: SLURM\ntrials: 1\nmitigation_axis: [none]\n"


@pytest.fixture(autouse=True)
def _no_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without Slurm: PATH holds no sbatch/squeue/sinfo, no allocation, no config."""
    for name in [n for n in os.environ if n.startswith(("SLURM_", "AORTA_SLURM_"))]:
        monkeypatch.delenv(name)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "probe.yaml").write_text(PROBE)


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_dry_run_prints_the_script_without_slurm(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["launch", "--slurm", "--nodes", "2", "--partition", "gpu", "--time", "0:30"]
    argv += ["--account", "team-a", "--sbatch-arg=--exclusive", "--dry-run"]
    code = main([*argv, "-r", "probe.yaml", "-o", "out", "--", "bash", "-c", "echo hi"])
    captured = capsys.readouterr()
    assert code == ExitCode.OK, captured.err
    lines = captured.out.splitlines()
    assert lines[0] == "#!/bin/bash"
    for line in ("#SBATCH --nodes=2", "#SBATCH --partition=gpu", "#SBATCH --time=0:30"):
        assert line in lines
    assert "#SBATCH --account=team-a" in lines and "#SBATCH --exclusive" in lines
    assert "-m aorta launch --slurm --in-job" in lines[-1]
    assert not Path("out").exists()  # nothing staged, nothing submitted


def test_the_entry_point_picks_slurm_from_the_options_and_returns_the_script() -> None:
    """The Python face of the same dry run: one frozen LaunchOptions, one call, text back."""
    events: list[str] = []
    opts = LaunchOptions(recipe="probe.yaml", output="out", slurm=True, nodes=2, dry_run=True)
    opts = replace(opts, time_limit="0:30", sbatch_args=("--exclusive",))
    launched = run(opts, on_event=events.append)
    assert launched.result is None and launched.exit_code == 0 and not events
    lines = launched.text.splitlines()
    assert lines[0] == "#!/bin/bash" and "#SBATCH --nodes=2" in lines
    assert lines.index("#SBATCH --time=0:30") < lines.index("#SBATCH --exclusive")
    assert "-m aorta launch --slurm --in-job" in lines[-1] and not Path("out").exists()
    with pytest.raises(UsageError, match="runs over SSH"):
        run(replace(opts, container="img:1"))


def test_dry_run_still_checks_what_needs_no_slurm(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["launch", "--slurm", "--nodes", "1", "--time", "1:2:3:4", "--dry-run"]
    assert main([*argv, "-r", "probe.yaml"]) == ExitCode.USAGE
    assert "--time '1:2:3:4': not a Slurm time" in _one_error(capsys.readouterr().err)
    assert main(["launch", "--slurm", "--dry-run", "-r", "probe.yaml"]) == ExitCode.USAGE
    assert "give --nodes" in _one_error(capsys.readouterr().err)


def test_a_real_submission_still_needs_the_tools(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--slurm", "--nodes", "1", "-r", "probe.yaml"]) == ExitCode.USAGE
    assert "Slurm client tools not found on PATH: sbatch" in _one_error(capsys.readouterr().err)


INJECTED = "team\ntouch INJECTED"


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--account", INJECTED], {}, "--account (or AORTA_SLURM_ACCOUNT)"),
        ([], {"AORTA_SLURM_ACCOUNT": INJECTED}, "--account (or AORTA_SLURM_ACCOUNT)"),
        (["--partition", "gpu\rtouch INJECTED"], {}, "--partition (or AORTA_SLURM_PARTITION)"),
        ([f"--sbatch-arg=--comment={INJECTED}"], {}, "--sbatch-arg (or AORTA_SLURM_SBATCH_ARGS)"),
        (["--account", "team\x1b[2J"], {}, "--account (or AORTA_SLURM_ACCOUNT)"),
        (["-o", "out\ntouch INJECTED"], {}, "--output (or AORTA_OUTPUT)"),
    ],
)
def test_control_characters_in_sbatch_values_are_refused(
    args: list[str],
    env: dict[str, str],
    named: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    argv = ["launch", "--slurm", "--nodes", "1", "--dry-run", "-r", "probe.yaml", *args]
    assert main(argv) == ExitCode.USAGE
    captured = capsys.readouterr()
    error = _one_error(captured.err)
    assert error.startswith(f"Error: {named} ") and "contains " in error and "(U+00" in error
    assert captured.out == ""  # no script printed
    assert not Path("INJECTED").exists()


def test_the_library_refuses_a_line_break_in_any_sbatch_option(tmp_path: Path) -> None:
    job = SlurmJob(tmp_path / "out", "r1")
    spec = LaunchSpec(argv=("-m", "aorta", "sweep", "run"))
    with pytest.raises(UsageError, match=r"sbatch option '--account=team\\ntouch INJECTED'"):
        job.script(spec, nodes=1, options=[f"--account={INJECTED}"])


@pytest.mark.slow
def test_the_rendered_script_runs_nothing_a_value_carries(tmp_path: Path) -> None:
    """Shell metacharacters are allowed (sbatch and bash see them quoted): render the script
    with them, run it with bash, and nothing they spell runs."""
    hostile = ["--account=a'; touch INJECTED1; '", "--comment=$(touch INJECTED2)`touch INJECTED3`"]
    job = SlurmJob(tmp_path / "out", "r1")
    script = job.script(LaunchSpec(argv=("-m", "aorta")), nodes=1, options=hostile)
    (tmp_path / "aorta.sbatch").write_text(script)
    sbatch_lines = [line for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert len(sbatch_lines) == 6  # job name, nodes, tasks, the two options, output
    # Everything before the first shell line is a comment to bash: the options are inert.
    done = subprocess.run(
        ["/bin/bash", "aorta.sbatch"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    # The step itself refuses to run outside a batch job, with one line and no traceback.
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert done.stderr.startswith("Error: --in-job ") and "Traceback" not in done.stderr
    assert not list(tmp_path.glob("INJECTED*"))
