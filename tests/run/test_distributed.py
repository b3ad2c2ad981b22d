"""Distributed sweeps under a real torchrun (2 ranks, gloo on loopback): the race workload on
the upstream recipes, injected corruption, profiler traces, the straggler spread. What the
ranks do together is in test_distributed_ranks.py."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from tests.conftest import UPSTREAM_RECIPES
from tests.processes import only_run_dir, torchrun
from tests.trace_helpers import shared_profiled_sweep

pytestmark = pytest.mark.slow


def records(run_dir: Path) -> dict[tuple[str, int], dict]:
    return {
        (p.parent.name, int(p.stem.split("_")[1])): json.loads(p.read_text())
        for p in sorted(run_dir.glob("cells/*/trial_*.json"))
    }


# The upstream files as they are, but for their size: example-fsdp-smoke's 2 trials x 100 steps
# of 3 cells cost a minute of CPU and test nothing 1 x 10 does not.
SIZE_CUTS = {
    "example-fsdp-smoke.yaml": [("trials: 2\n", "trials: 1\n"), ("steps: 100\n", "steps: 10\n")]
}


@pytest.mark.parametrize("name", ["race_smoke.yaml", "example-fsdp-smoke.yaml"])
def test_upstream_race_recipes_pass_on_two_ranks(tmp_path, name):
    text = (UPSTREAM_RECIPES / name).read_text()
    for old, new in SIZE_CUTS.get(name, []):
        assert text.count(old) == 1, (name, old)
        text = text.replace(old, new)
    recipe = tmp_path / name
    recipe.write_text(text)
    out = tmp_path / "out"
    proc = torchrun(recipe, out)
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


# The baseline is a corrupted cell, as in triage (the bug reproduces there, the "mitigation"
# cells are what is tried): a complete matrix with a failing baseline exits 0 on every rank.
RACE = """
workload: race
ticket: RACE
steps: 4
timeout_per_trial: 120
workload_config: {mode: fsdp, fsdp_shard_size: 2048, num_layers: 3, dtype: float32}
confound: {baseline_cell: ddp-all_reduce-float16}
cells:
  - {name: clean, mitigations: [none]}
"""

CORRUPTIONS = [
    ("fsdp", "all_gather", "float32"),
    ("fsdp", "reduce_scatter", "bfloat16"),
    ("ddp", "all_reduce", "float16"),
]


@pytest.fixture(scope="module")
def corruption_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One torchrun for every injected corruption: a clean cell, one cell per case and one
    that stops at the first corruption (a torchrun each cost ~20 s of CPU apiece for the same
    start-up and clean cell); its baseline is one of the corrupted cells."""
    root = tmp_path_factory.mktemp("corruption")
    cells = "".join(
        f"  - name: {mode}-{collective}-{dtype}\n"
        "    mitigations: [none]\n"
        f"    workload_config: {{mode: {mode}, dtype: {dtype}, fault_injection: "
        f"{{rank: 1, iteration: 2, layer: 1, collective: {collective}, index: 77}}}}\n"
        for mode, collective, dtype in CORRUPTIONS
    )
    # Stopping at the first corruption: the same fault, a run long enough to notice the stop.
    cells += (
        "  - name: stop-first\n    mitigations: [none]\n    steps: 30\n"
        "    workload_config: {stop_on_first_corruption: true, fault_injection: "
        "{rank: 1, iteration: 2, layer: 1, collective: all_gather, index: 77}}\n"
    )
    recipe = root / "r.yaml"
    recipe.write_text(RACE + cells)
    proc = torchrun(recipe, root / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return only_run_dir(root / "out"), proc


@pytest.mark.parametrize("mode, collective, dtype", CORRUPTIONS)
def test_injected_corruption_is_detected(corruption_run, mode, collective, dtype):
    run_dir, proc = corruption_run
    cell = f"{mode}-{collective}-{dtype}"
    recs = records(run_dir)
    assert recs[("clean", 0)]["status"] == "ok"
    bad = recs[(cell, 0)]
    assert bad["info"]["mode"] == mode
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
    assert f"| {cell} | none | local | 1/1 | 100% (1/1) | 1 (1 workload) | 0 |" in matrix
    assert f"{cell}: 1/1 failed" in proc.stdout


def test_a_failing_baseline_exits_0_on_every_rank(corruption_run):
    # The bug reproducing in the baseline is the normal triage case, not an error of the run.
    run_dir, proc = corruption_run  # which asserts torchrun's exit 0
    assert "ChildFailedError" not in proc.stderr
    matrix = json.loads((run_dir / "matrix.json").read_text())
    cells = {c["name"]: c for c in matrix["cells"]}
    assert matrix["baseline"] == "ddp-all_reduce-float16"
    assert cells["ddp-all_reduce-float16"]["failures"] == 1 and cells["clean"]["failures"] == 0
    assert matrix["world_size"] == 2 and matrix["status"] == "complete"


def test_stop_on_first_corruption_stops_every_rank(corruption_run):
    run_dir, _ = corruption_run
    bad = records(run_dir)[("stop-first", 0)]
    assert bad["status"] == "workload_failed"
    assert [r["executed_iterations"] for r in bad["ranks"]] == [3, 3]


def test_profiler_traces_per_rank_with_collectives(tmp_path_factory):
    # The session's shared profiled sweep (tests/trace_helpers.py: TWO_RANK_RECIPE).
    run_dir = shared_profiled_sweep(tmp_path_factory)
    rec = records(run_dir)[("fsdp", 0)]
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
    assert "torchrun --standalone --nproc-per-node=2 $(command -v aorta) sweep run --recipe" in err
    assert not any(tmp_path.iterdir())
