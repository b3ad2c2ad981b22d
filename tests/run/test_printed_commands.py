"""Commands that run (#45.4): every next command aorta prints is the line that works where the
user is — a distributed run's resume and extend hints carry the torchrun line it needs — and
the test runs the printed line for real."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from aorta.report.findings import finding_text
from aorta.run.ranks import DistEnv, launcher_of
from aorta.store.rundir import RunDir, aorta_command
from tests.processes import BIN, TORCHRUN, sweep_run, torchrun_env

RECIPE = """\
workload: command
command: [python3, -c, "import time; time.sleep(0.4)"]
trials: 4
cells:
  - {name: base, mitigations: [none]}
  - {name: x, mitigations: [tf32_off]}
"""


def test_the_launcher_is_read_from_the_environment_torchrun_srun_or_alone() -> None:
    two = DistEnv(rank=0, world_size=2)
    assert launcher_of(DistEnv(), {"TORCHELASTIC_RUN_ID": "x"}) == {"kind": "none"}
    assert launcher_of(two, {"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "2"}) == {
        "kind": "torchrun",
        "nnodes": 1,
        "nproc_per_node": 2,
    }
    four = DistEnv(rank=0, world_size=4, master_addr="head", master_port=29400)
    many = launcher_of(four, {"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "2"})
    assert many["nnodes"] == 2 and many["rdzv_endpoint"] == "head:29400"
    assert "--nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=head:29400" in (
        aorta_command("sweep resume r", many)
    )
    slurm = launcher_of(
        DistEnv(rank=0, world_size=4, port_base=31000), {"SLURM_JOB_ID": "7", "SLURM_NNODES": "2"}
    )
    assert slurm == {"kind": "srun", "nodes": 2, "ntasks_per_node": 2, "port_base": 31000}
    line = aorta_command("sweep resume r", slurm)
    assert line.startswith("AORTA_TRIAL_MASTER_PORT_BASE=31000 srun --kill-on-bad-exit=1 --nodes=2")
    assert line.endswith("MASTER_PORT=29500 aorta sweep resume r'")


def test_a_distributed_runs_extend_hint_is_its_torchrun_line(tmp_path: Path) -> None:
    from aorta.matrix.findings import findings
    from aorta.matrix.signatures import signature_counts
    from aorta.matrix.summary import summarize
    from tests.triage_records import triage_dataset

    ds = triage_dataset()
    fix = next(
        f
        for f in findings(summarize(ds, resamples=200), signature_counts(ds))
        if f.kind == "failures"
    )
    rd = RunDir.create(tmp_path, ticket=None, workload="race")
    rd.write_json(
        rd.manifest_path,
        {"launcher": {"kind": "torchrun", "nnodes": 1, "nproc_per_node": 2}},
    )
    text = finding_text(fix, run=rd.path, style="text")
    assert (
        f"torchrun --standalone --nproc-per-node=2 $(command -v aorta) sweep extend {rd.path} --trials "
        in text
    )
    # One more trial is one trial.
    one = dataclasses.replace(fix, trials_to_decide=max(fix.ran, fix.baseline_ran) + 1)
    assert "about 1 more trial per cell would decide" in finding_text(one, run="r", style="text")
    assert "about 2 more trials per cell" in finding_text(
        dataclasses.replace(one, trials_to_decide=one.trials_to_decide + 1), run="r", style="text"
    )


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (torchrun starts its ranks in sessions of their own)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += [child for child, parent in parents.items() if parent == pid]
    return found


def _wait_for(predicate, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s")


@pytest.mark.slow
def test_the_resume_hint_of_a_killed_torchrun_run_resumes_it(tmp_path: Path, run_cli) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "runs"
    env = {**torchrun_env(), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(
        [TORCHRUN, "--standalone", "--nproc-per-node=2", *sweep_run(recipe, out)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: any(out.glob("*/*/*/cells/*/trial_*.json")), timeout=400)
    finally:
        for pid in _tree(proc.pid):  # the whole job at once, as a lost node: agent, ranks, trials
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=60)
    (run,) = [p for p in out.glob("*/*/*") if p.is_dir()]
    code, said, _ = run_cli("sweep", "status", run)
    assert code == ExitCode.OK and ": interrupted" in said
    hint = re.search(r"resume with: (.+)$", said.strip()).group(1)
    assert (
        hint == f"torchrun --standalone --nproc-per-node=2 $(command -v aorta) sweep resume {run}"
    )
    done = subprocess.run(
        ["bash", "-c", hint], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500
    )
    assert done.returncode == ExitCode.OK, done.stderr[-3000:]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["launcher"]["kind"] == "torchrun"
    assert len(list(run.glob("cells/*/trial_*.json"))) == 8
