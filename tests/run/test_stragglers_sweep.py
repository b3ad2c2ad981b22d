"""Who is slow, for real: a 2-rank torchrun sweep (gloo on loopback) of ``race`` in which one
rank sleeps in every iteration (``straggler_rank`` / ``straggler_ms``), rank 0 in one cell and
rank 1 in the other — so a finding that always named one rank by its number would fail — and
the finding naming it in matrix.md, the console summary and report.html, first from the
workload's own clocks (what the sweep writes), then from the profiler traces of the same run
(``aorta report --traces``). The clock itself is tested without torchrun below."""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from pathlib import Path

import pytest

import aorta
from aorta.plugins import CommClock, straggler_delay
from aorta.report.matrix_files import write_matrix
from aorta.report.page.write import html
from tests.processes import only_run_dir, torchrun

# 4 trials x 2 ranks, tiny collectives: the 120 ms sleep is most of each iteration, so the other
# rank waits for the sleeper in every step even on a loaded machine (a 25 ms sleep did not: with
# ~20 processes on 2 cores a step's compute varied by more than 25 ms between the ranks, and the
# sleeper waited longer than its peer in one trial).
RECIPE = """
workload: race
ticket: STRAGGLER
trials: 2
steps: 5
timeout_per_trial: 120
workload_config: {mode: fsdp, fsdp_shard_size: 1024, num_layers: 2, dtype: float32,
                  warmup_iterations: 1, straggler_ms: 120}
collect: [{torch_profiler: {wait: 0, warmup: 1, active: 3}}]
cells:
  - {name: slow0, mitigations: [none], workload_config: {straggler_rank: 0}}
  - {name: slow1, mitigations: [none], workload_config: {straggler_rank: 1}}
"""
LINE = re.compile(
    r"^- `(slow\d)`: \*\*rank (\d)\*\* (.*) in (\d)/(\d) trials, \+([\d.]+) ms per step \((.*)\)$"
)


@pytest.fixture(scope="module")
def straggler_sweep(tmp_path_factory) -> tuple[Path, str]:
    """The run directory and the sweep's console output (rank 0's summary)."""
    root = tmp_path_factory.mktemp("stragglers")
    (root / "r.yaml").write_text(RECIPE)
    proc = torchrun(root / "r.yaml", root / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return only_run_dir(root / "out"), proc.stdout


@pytest.fixture(scope="module")
def straggler_run(straggler_sweep) -> Path:
    return straggler_sweep[0]


def straggler_lines(matrix_md: Path) -> dict[str, tuple[int, str, int, int, float, str]]:
    found = {}
    for line in matrix_md.read_text().splitlines():
        if m := LINE.match(line):
            cell, rank, what, k, n, ms, source = m.groups()
            found[cell] = (int(rank), what, int(k), int(n), float(ms), source)
    return found


@pytest.mark.slow
def test_the_sweep_names_the_slow_rank_from_its_own_clocks(straggler_sweep):
    straggler_run, console = straggler_sweep
    ds = aorta.load_run(straggler_run)
    # every rank's split is in the Dataset: the sleeper spends the least time in collectives
    wait = ds.comm_wait_ms.transpose("cell", "trial", "rank").values
    assert (wait[0, :, 0] < wait[0, :, 1]).all() and (wait[1, :, 1] < wait[1, :, 0]).all()
    lines = straggler_lines(straggler_run / "matrix.md")
    assert sorted(lines) == ["slow0", "slow1"], (straggler_run / "matrix.md").read_text()
    for cell, rank in (("slow0", 0), ("slow1", 1)):
        got_rank, what, k, n, ms, source = lines[cell]
        assert (got_rank, k, n, source) == (rank, 2, 2, "workload timing")
        assert what == "waited least at collectives (computed longest)"
        # the 120 ms sleep, less what the sleeper's peer computes meanwhile; on a loaded machine
        # the peer's own steps stretch too, and the sleeper's lead shrinks or grows with them
        assert 20 < ms < 250
    cells = {c["name"]: c for c in json.loads((straggler_run / "matrix.json").read_text())["cells"]}
    assert cells["slow1"]["straggler"]["rank"] == 1
    assert cells["slow1"]["straggler"]["source"] == "workload"
    for cell, rank in (("slow0", 0), ("slow1", 1)):
        assert f"  {cell}: rank {rank} waited least at collectives" in console, console
    page = html(straggler_run).read_text()
    assert re.search(r'<span class="topic">straggler</span><div>slow1: rank 1 waited least', page)


@pytest.mark.slow
def test_the_traces_name_the_same_rank_and_who_entered_last(straggler_run, tmp_path):
    run = Path(shutil.copytree(straggler_run, tmp_path / "run"))
    ds = aorta.load_run(run, traces=True, trace_workers=1)
    assert ds.last_to_enter_pct.dims == ("cell", "trial", "rank")
    assert "comm_wait_ms" in ds  # the workload's split survives the trace metrics
    write_matrix(run, ds)
    lines = straggler_lines(run / "matrix.md")
    for cell, rank in (("slow0", 0), ("slow1", 1)):
        got_rank, what, k, n, ms, source = lines[cell]
        assert (got_rank, k, n, source) == (rank, 2, 2, "traces")
        share = float(re.fullmatch(r"was the last to enter (\d+)% of collectives", what)[1])
        assert share == pytest.approx(
            ds.last_to_enter_pct.sel(cell=cell, rank=rank).median(), abs=1
        )
        assert 20 < ms < 250


# --- the clock, without torchrun -------------------------------------------------------------


def test_the_clock_sums_each_steps_collectives_and_means_them_after_warmup():
    clock = CommClock(cuda=False)
    for span_s in (0.03, 0.004, 0.006):
        t0 = time.perf_counter()
        clock.start()
        time.sleep(span_s / 2)
        clock.stop()
        clock.stop()  # a second stop adds nothing
        clock.start()
        time.sleep(span_s / 2)
        clock.end_step((time.perf_counter() - t0) * 1000 + 1.0)  # closes the open span
    # each step's collectives: at least what they slept, never more than the step
    for comm, step, span_s in zip(clock.comm_ms, clock.step_ms, (0.03, 0.004, 0.006), strict=True):
        assert span_s * 1000 <= comm <= step
    m = clock.metrics(warmup=1)  # means over the steps after the first
    assert m["comm_wait_ms"] == pytest.approx(sum(clock.comm_ms[1:]) / 2)
    assert m["comm_wait_ms"] + m["compute_ms"] == pytest.approx(sum(clock.step_ms[1:]) / 2)
    assert all(math.isnan(v) for v in CommClock(cuda=False).metrics(warmup=0).values())


def test_a_second_start_moves_the_start_and_comm_never_exceeds_the_step():
    clock = CommClock(cuda=False)
    clock.start()
    time.sleep(0.02)
    clock.start()  # DDP: the last gradient's hook counts, not the first
    clock.stop()
    clock.end_step(100.0)
    assert clock.comm_ms[0] < 5
    clock.start()
    time.sleep(0.005)
    clock.end_step(1.0)
    assert clock.comm_ms[1] == 1.0


def test_the_fault_injection_knobs_are_checked():
    assert straggler_delay({"straggler_rank": 0, "straggler_ms": 5}, rank=0) == 0.005
    assert straggler_delay({"straggler_rank": 0, "straggler_ms": 5}, rank=1) == 0.0
    with pytest.raises(ValueError, match="straggler_ms must be ≥ 0"):
        straggler_delay({"straggler_rank": 0, "straggler_ms": -1}, rank=0)
    with pytest.raises(ValueError, match="straggler_rank must be an integer"):
        straggler_delay({"straggler_rank": "x"}, rank=0)
