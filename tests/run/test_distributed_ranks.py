"""Distributed sweeps under a real torchrun (2 ranks, gloo on loopback): what the ranks do
together — training modes, a crashing rank, static launchers, resume, two torchrun nodes.
The race workload's own checks are in test_distributed.py (split so two workers share them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from aorta.run.ports import rendezvous_port
from tests.processes import AORTA, TORCHRUN, only_run_dir, sweep_run, torchrun, torchrun_env
from tests.run.test_distributed import records

pytestmark = pytest.mark.slow


CRASHES = [("run", "workload_failed"), ("setup", "setup_failed")]


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory) -> tuple[Path, float]:
    """One torchrun: a clean cell, then rank 1 dying in each phase while rank 0 would hang."""
    root = tmp_path_factory.mktemp("crash")
    recipe = root / "r.yaml"
    crashing = ", ".join(
        f"{{name: {phase}, mitigations: [none], workload_config: {{phase: {phase}}}}}"
        for phase, _ in CRASHES
    )
    recipe.write_text(
        "workload: tests.workloads_fixture:DistHang\ntimeout_per_trial: 300\n"
        "workload_config: {crash_rank: 1}\n"
        "cells: [{name: baseline, mitigations: [none], workload_config: {crash_rank: -1}}, "
        f"{crashing}]\n"
    )
    start = time.monotonic()
    proc = torchrun(recipe, root / "out")
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    return only_run_dir(root / "out"), elapsed


@pytest.mark.parametrize("phase, status", CRASHES)
def test_a_crashing_rank_does_not_hang_the_other(crash_run, phase, status):
    run_dir, elapsed = crash_run
    # The deadline is 300 s a trial: a run of three trials under it means each crash released
    # the other rank (a trial that waited ends past it). Quiet, the whole run takes ~15 s;
    # in the first minutes of `make test` on 2 cores it took 174 s.
    assert elapsed < 300, f"took {elapsed:.0f}s: the surviving rank waited for its deadline"
    rec = records(run_dir)[(phase, 0)]
    assert rec["status"] == status
    assert rec["error"].startswith("rank 1: the worker crashed")
    assert "rank 1's trial ended" in rec["ranks"][0]["error"]


def _static_launch(
    recipe: Path, out: Path, extra_env: dict[str, str]
) -> list[subprocess.CompletedProcess]:
    """Two ranks started by hand, as srun or a static launcher would (no agent store)."""
    common = {
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(rendezvous_port()),
        **extra_env,
    }
    procs = [
        subprocess.Popen(
            sweep_run(recipe, out),
            env=torchrun_env({**common, "RANK": str(r), "LOCAL_RANK": str(r)}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    results = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=420)  # a safety net, as torchrun()'s
        results.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return results


TWO_TRIALS = (
    "workload: race\nsteps: 2\ntrials: 2\nworkload_config: {fsdp_shard_size: 256, num_layers: 1}\n"
    "cells: [{name: a, mitigations: [none]}]\n"
)


@pytest.fixture(scope="module")
def static_run(tmp_path_factory) -> tuple[list[subprocess.CompletedProcess], Path]:
    """Two race trials on two ranks started by hand with a reserved port range: the static
    launcher's run, and the finished run the resume test resumes under torchrun (one
    two-trial torchrun fewer: ~20 CPU-s)."""
    root = tmp_path_factory.mktemp("static")
    recipe = root / "r.yaml"
    recipe.write_text(TWO_TRIALS)
    # below the ephemeral range and torch's 29500
    base = 10_000 + rendezvous_port() % 18_000
    results = _static_launch(recipe, root / "out", {"AORTA_TRIAL_MASTER_PORT_BASE": str(base)})
    return results, root / "out"


def test_static_launcher_uses_the_reserved_port_range(static_run):
    results, out = static_run
    assert [r.returncode for r in results] == [0, 0], results[0].stderr + results[1].stderr
    recs = records(only_run_dir(out))
    assert [r["status"] for r in recs.values()] == ["ok", "ok"]


def test_static_launcher_without_port_base_is_told_what_to_set(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("workload: race\ncells: [{name: a, mitigations: [none]}]\n")
    results = _static_launch(recipe, tmp_path / "out", {})
    for r in results:
        assert r.returncode == ExitCode.USAGE
        assert "export AORTA_TRIAL_MASTER_PORT_BASE" in r.stderr


def test_distributed_resume_reruns_only_missing_trials(static_run, tmp_path):
    results, out = static_run
    assert [r.returncode for r in results] == [0, 0], results[0].stderr + results[1].stderr
    shutil.copytree(out, tmp_path / "out")  # the static run stays as its own test saw it
    run_dir = only_run_dir(tmp_path / "out")
    victim = run_dir / "cells/a/trial_0001.json"
    victim.unlink()
    kept = (run_dir / "cells/a/trial_0000.json").stat().st_mtime_ns
    cmd = [TORCHRUN, "--nproc-per-node=2", "--standalone", AORTA, "sweep", "resume", str(run_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, env=torchrun_env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(victim.read_text())["status"] == "ok"
    assert (run_dir / "cells/a/trial_0000.json").stat().st_mtime_ns == kept
    assert only_run_dir(tmp_path / "out") == run_dir


def test_training_ddp_and_fsdp_in_process_across_two_torchrun_nodes(tmp_path):
    # Two torchrun agents with a static rendezvous, two ranks each, trials in the engine
    # process: DDP/FSDP objects must let go of each trial's group before the next one (the
    # ddp cell's trial, then the fsdp cell's, in one process). The training workload's own
    # distributed checks too (a fresh worker per trial and rank: tests/launch/test_cli.py).
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "workload: training\ntrials: 1\nsteps: 3\ntrial_isolation: in_process\n"
        "workload_config: {model_dim: 16, num_layers: 1, batch_size: 2}\n"
        "cells: [{name: ddp, mitigations: [none], workload_config: {mode: ddp}}, "
        "{name: fsdp, mitigations: [none], workload_config: {mode: fsdp}}]\n"
    )
    port = str(rendezvous_port())
    procs = [
        subprocess.Popen(
            [
                TORCHRUN,
                "--nnodes=2",
                "--nproc-per-node=2",
                f"--node-rank={n}",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                *sweep_run(recipe, tmp_path / "out"),
            ],
            env=torchrun_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (0, 1)
    ]
    outs = [p.communicate(timeout=420) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    recs = records(only_run_dir(tmp_path / "out"))
    assert sorted(recs) == [("ddp", 0), ("fsdp", 0)]
    assert all(r["status"] == "ok" and r["isolation"] == "in_process" for r in recs.values())
    for cell in ("ddp", "fsdp"):
        rec = recs[(cell, 0)]
        assert len(rec["step_times_ms"]) == 4 and rec["warmup_steps"] == 1
        assert rec["info"]["mode"] == cell
        assert [r["rank"] for r in rec["ranks"]] == [0, 1, 2, 3]
        assert all(r["metrics"]["final_loss"] is not None for r in rec["ranks"])
