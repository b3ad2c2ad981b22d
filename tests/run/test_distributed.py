"""Distributed sweeps under a real torchrun (2 ranks, gloo on loopback)."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from tests.conftest import UPSTREAM_RECIPES
from tests.processes import AORTA, TORCHRUN, only_run_dir, torchrun, torchrun_env

pytestmark = pytest.mark.slow


def records(run_dir: Path) -> dict[tuple[str, int], dict]:
    return {
        (p.parent.name, int(p.stem.split("_")[1])): json.loads(p.read_text())
        for p in sorted(run_dir.glob("cells/*/trial_*.json"))
    }


@pytest.mark.parametrize("name", ["race_smoke.yaml", "example-fsdp-smoke.yaml"])
def test_upstream_race_recipes_pass_on_two_ranks(tmp_path, name):
    out = tmp_path / "out"
    proc = torchrun(UPSTREAM_RECIPES / name, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = only_run_dir(out)  # one run directory, however many ranks
    recs = records(run_dir)
    assert recs and all(r["status"] == "ok" for r in recs.values())
    for rec in recs.values():
        assert rec["world_size"] == 2
        assert [r["rank"] for r in rec["ranks"]] == [0, 1]
        assert all(r["metrics"]["layer_checksum_mismatches"] == 0 for r in rec["ranks"])
        assert rec["metrics"]["layers_verified"] > 0
        assert rec["info"]["backend"] == "gloo"
    matrix = json.loads((run_dir / "matrix.json").read_text())
    assert matrix["world_size"] == 2 and matrix["status"] == "complete"
    assert proc.stdout.count("Wrote matrix to") == 1  # only rank 0 reports


RACE = """
workload: race
ticket: RACE
steps: {steps}
timeout_per_trial: 120
workload_config: {{mode: {mode}, fsdp_shard_size: 2048, num_layers: 3, dtype: {dtype}}}
cells:
  - {{name: baseline, mitigations: [none]}}
  - name: corrupted
    mitigations: [none]
    workload_config: {{fault_injection: {{rank: 1, iteration: 2, layer: 1, collective: {collective}, index: 77}}}}
"""


@pytest.mark.parametrize(
    "mode, collective, dtype",
    [
        ("fsdp", "all_gather", "float32"),
        ("fsdp", "reduce_scatter", "bfloat16"),
        ("ddp", "all_reduce", "float16"),
    ],
)
def test_injected_corruption_is_detected(tmp_path, mode, collective, dtype):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RACE.format(steps=4, mode=mode, collective=collective, dtype=dtype))
    proc = torchrun(recipe, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path / "out")
    recs = records(run_dir)
    assert recs[("baseline", 0)]["status"] == "ok"
    bad = recs[("corrupted", 0)]
    assert bad["status"] == "workload_failed" and bad["passed"] is False
    (detail,) = bad["failure_details"]
    assert detail["message"].startswith(
        f"iteration 2 layer 1 {collective}: 1 element(s) differ on rank 1 (first at index 77"
    )
    assert (
        detail["rank"] == 1
        and detail["iteration"] == 2
        and "silent data corruption" in detail["hint"]
    )
    rank1 = bad["ranks"][1]["metrics"]
    assert (
        rank1["first_corrupted_iteration"],
        rank1["corrupted_elements"],
        rank1["layer_checksum_mismatches"],
    ) == (2.0, 1.0, 1.0)
    assert bad["ranks"][0]["status"] == "ok"
    matrix = (run_dir / "matrix.md").read_text()
    assert "| corrupted | none | local | 1/1 | 100% (1/1) | 1 (1 workload) | 0 |" in matrix
    assert "corrupted: 1/1 failed" in proc.stdout


def test_stop_on_first_corruption_stops_every_rank(tmp_path):
    recipe = tmp_path / "r.yaml"
    text = RACE.format(steps=30, mode="fsdp", collective="all_gather", dtype="float32")
    recipe.write_text(
        text.replace("num_layers: 3,", "num_layers: 3, stop_on_first_corruption: true,")
    )
    proc = torchrun(recipe, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    bad = records(only_run_dir(tmp_path / "out"))[("corrupted", 0)]
    assert bad["status"] == "workload_failed"
    assert [r["executed_iterations"] for r in bad["ranks"]] == [3, 3]


def test_training_ddp_and_fsdp(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "workload: training\nsteps: 3\nworkload_config: {model_dim: 32, num_layers: 2, batch_size: 4}\n"
        "cells: [{name: ddp, mitigations: [none], workload_config: {mode: ddp}}, "
        "{name: fsdp, mitigations: [none], workload_config: {mode: fsdp}}]\n"
    )
    proc = torchrun(recipe, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    recs = records(only_run_dir(tmp_path / "out"))
    for cell in ("ddp", "fsdp"):
        rec = recs[(cell, 0)]
        assert rec["status"] == "ok", rec["error"]
        assert len(rec["step_times_ms"]) == 4 and rec["warmup_steps"] == 1
        assert rec["info"]["mode"] == cell
        losses = [r["metrics"]["final_loss"] for r in rec["ranks"]]
        assert all(v is not None for v in losses)


@pytest.mark.parametrize("phase, status", [("run", "workload_failed"), ("setup", "setup_failed")])
def test_a_crashing_rank_does_not_hang_the_other(tmp_path, phase, status):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "workload: tests.workloads_fixture:DistHang\ntimeout_per_trial: 90\n"
        f"workload_config: {{crash_rank: 1, phase: {phase}}}\n"
        "cells: [{name: baseline, mitigations: [none], workload_config: {crash_rank: -1}}, {name: a, mitigations: [none]}]\n"
    )
    start = time.monotonic()
    proc = torchrun(recipe, tmp_path / "out")
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    # The deadline is 90 s: anything well under it means the crash released the other rank
    # (torchrun itself takes tens of seconds to start on a loaded 2-core box).
    assert elapsed < 80, f"took {elapsed:.0f}s: the surviving rank waited for its deadline"
    rec = records(only_run_dir(tmp_path / "out"))[("a", 0)]
    assert rec["status"] == status
    assert rec["error"].startswith("rank 1: the worker crashed")
    assert "rank 1's trial ended" in rec["ranks"][0]["error"]


def test_profiler_traces_per_rank_with_collectives(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "workload: race\nsteps: 3\ncollect: [{torch_profiler: {wait: 0, warmup: 0, active: 2}}]\n"
        "workload_config: {mode: default, fsdp_shard_size: 512, num_layers: 2}\ncells: [{name: a, mitigations: [none]}]\n"
    )
    proc = torchrun(recipe, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path / "out")
    rec = records(run_dir)[("a", 0)]
    for rank in (0, 1):
        rel = rec["artifacts"][f"trace/rank{rank}.pt.trace.json.gz"]
        trace = json.loads(gzip.decompress((run_dir / rel).read_bytes()))
        names = {e.get("name") for e in trace["traceEvents"]}
        assert {"gloo:all_gather", "gloo:all_reduce"} <= names
        assert (
            trace["distributedInfo"]["rank"] == rank and trace["distributedInfo"]["world_size"] == 2
        )


def test_matmul_under_torchrun_reports_the_straggler_spread(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "workload: matmul\nsteps: 3\nworkload_config: {m: 64, n: 64, k: 64}\ncells: [{name: a, mitigations: [none]}]\n"
    )
    proc = torchrun(recipe, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    rec = records(only_run_dir(tmp_path / "out"))[("a", 0)]
    m = rec["metrics"]
    assert rec["isolation"] == "in_process" and rec["status"] == "ok"
    assert m["straggler_spread"] >= 1.0 and m["straggler_rank"] in (0.0, 1.0)
    assert m["rank_median_max_ms"] >= m["rank_median_min_ms"] > 0


def test_distributed_workload_refused_below_min_world_size(tmp_path, run_cli):
    code, _, err = run_cli(
        "sweep", "run", "--recipe", UPSTREAM_RECIPES / "race_smoke.yaml", "-o", tmp_path
    )
    assert code == ExitCode.USAGE
    assert "workload 'race' needs at least 2 ranks, WORLD_SIZE is 1" in err
    assert "torchrun --nproc-per-node=2 $(command -v aorta) sweep run --recipe" in err
    assert not any(tmp_path.iterdir())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _static_launch(
    recipe: Path, out: Path, extra_env: dict[str, str]
) -> list[subprocess.CompletedProcess]:
    """Two ranks started by hand, as srun or a static launcher would (no agent store)."""
    common = {
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        **extra_env,
    }
    procs = [
        subprocess.Popen(
            [AORTA, "sweep", "run", "--recipe", str(recipe), "-o", str(out)],
            env=torchrun_env({**common, "RANK": str(r), "LOCAL_RANK": str(r)}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    results = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=180)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return results


def test_static_launcher_uses_the_reserved_port_range(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "workload: race\nsteps: 2\ntrials: 2\nworkload_config: {fsdp_shard_size: 256, num_layers: 1}\ncells: [{name: a, mitigations: [none]}]\n"
    )
    base = 20000 + _free_port() % 20000
    results = _static_launch(recipe, tmp_path / "out", {"AORTA_TRIAL_MASTER_PORT_BASE": str(base)})
    assert [r.returncode for r in results] == [0, 0], results[0].stderr + results[1].stderr
    recs = records(only_run_dir(tmp_path / "out"))
    assert [r["status"] for r in recs.values()] == ["ok", "ok"]


def test_static_launcher_without_port_base_is_told_what_to_set(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("workload: race\ncells: [{name: a, mitigations: [none]}]\n")
    results = _static_launch(recipe, tmp_path / "out", {})
    for r in results:
        assert r.returncode == ExitCode.USAGE
        assert "export AORTA_TRIAL_MASTER_PORT_BASE" in r.stderr


def test_distributed_resume_reruns_only_missing_trials(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "workload: race\nsteps: 2\ntrials: 3\nworkload_config: {fsdp_shard_size: 256, num_layers: 1}\ncells: [{name: a, mitigations: [none]}]\n"
    )
    assert torchrun(recipe, tmp_path / "out").returncode == 0
    run_dir = only_run_dir(tmp_path / "out")
    victim = run_dir / "cells/a/trial_0001.json"
    victim.unlink()
    kept = (run_dir / "cells/a/trial_0000.json").stat().st_mtime_ns
    cmd = [TORCHRUN, "--nproc-per-node=2", "--standalone", AORTA, "sweep", "resume", str(run_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=torchrun_env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(victim.read_text())["status"] == "ok"
    assert (run_dir / "cells/a/trial_0000.json").stat().st_mtime_ns == kept
    assert only_run_dir(tmp_path / "out") == run_dir


def test_in_process_distributed_trials_across_two_torchrun_nodes(tmp_path):
    # Two torchrun agents with a static rendezvous, two ranks each, trials in the engine
    # process: DDP/FSDP objects must let go of each trial's group before the next one.
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "workload: training\ntrials: 2\nsteps: 2\ntrial_isolation: in_process\n"
        "workload_config: {model_dim: 16, num_layers: 1, batch_size: 2}\n"
        "cells: [{name: ddp, mitigations: [none], workload_config: {mode: ddp}}, "
        "{name: fsdp, mitigations: [none], workload_config: {mode: fsdp}}]\n"
    )
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [
                TORCHRUN,
                "--nnodes=2",
                "--nproc-per-node=2",
                f"--node-rank={n}",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                AORTA,
                "sweep",
                "run",
                "--recipe",
                str(recipe),
                "-o",
                str(tmp_path / "out"),
            ],
            env=torchrun_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (0, 1)
    ]
    outs = [p.communicate(timeout=150) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    recs = records(only_run_dir(tmp_path / "out"))
    assert sorted(recs) == [("ddp", 0), ("ddp", 1), ("fsdp", 0), ("fsdp", 1)]
    assert all(r["status"] == "ok" and r["isolation"] == "in_process" for r in recs.values())
