"""Harness overhead of a trial, in process and in a fresh worker, against peers run side by side.

    .venv/bin/python benchmarks/engine_overhead.py [--trials 200] [--process-trials 10]

* in-process: a sweep of N no-op trials vs calling the workload's setup/run/cleanup N times
  directly; the difference per trial is what aorta adds (target ≤ 2 ms).
* process isolation: a sweep of trials whose workload imports torch vs a bare
  ``python -c "import torch"`` in a subprocess, alternated so both see the same machine state
  (target ≤ 1.3×).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_workloads import WORKLOADS, Noop

from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep
from aorta.run.workload import TrialContext


def in_process(n: int) -> tuple[float, float]:
    recipe = load_recipe_text(
        f"workload: bench_noop\ntrials: {n}\ncells: [{{name: a, mitigations: [none]}}]\n"
    )
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        sweep(recipe, output=out, progress="none", workloads=WORKLOADS)
        swept = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for i in range(n):
        w = Noop({}, TrialContext(cell="a", trial=i))
        w.setup()
        w.run()
        w.cleanup()
    direct = (time.perf_counter() - t0) / n
    return swept, direct


def process(n: int) -> tuple[list[float], list[float]]:
    recipe = load_recipe_text(
        "workload: bench_import_torch\ntrial_isolation: process\ncells: [{name: a, mitigations: [none]}]\n"
    )
    trial_s: list[float] = []
    bare_s: list[float] = []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import torch"], check=True)
            bare_s.append(time.perf_counter() - t0)
            result = sweep(recipe, output=out, progress="none", workloads=WORKLOADS)
            wall = result.records[0].wall_clock_s
            if wall is None:  # a trial that did not run has none: no number to report
                raise SystemExit(f"the trial did not run: {result.records[0].error}")
            trial_s.append(wall)
    return trial_s, bare_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--process-trials", type=int, default=10)
    args = parser.parse_args()

    in_process(10)  # warm imports and caches
    swept, direct = in_process(args.trials)
    overhead_ms = (swept - direct) * 1000
    print(
        f"in-process: {swept * 1000:.3f} ms/trial through aorta vs {direct * 1000:.4f} ms/trial direct "
        f"→ harness overhead {overhead_ms:.3f} ms/trial (target ≤ 2 ms) over {args.trials} trials"
    )

    trial_s, bare_s = process(args.process_trials)
    t, b = statistics.median(trial_s), statistics.median(bare_s)
    print(
        f"process isolation: {t * 1000:.0f} ms/trial (median of {len(trial_s)}) vs bare `python -c 'import torch'` "
        f"{b * 1000:.0f} ms → ratio {t / b:.2f} (target ≤ 1.3)"
    )


if __name__ == "__main__":
    main()
