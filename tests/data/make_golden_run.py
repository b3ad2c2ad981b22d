"""Write tests/data/golden_run/: a fixed run directory for the golden matrix.md.

Run from the repository root: ``.venv/bin/python tests/data/make_golden_run.py``; then
``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_matrix_golden.py`` rewrites the golden
files. Five cells against ``baseline`` (8 trials of 20 steps, 2 of them warm-up):
``slow`` (30% slower), ``same`` (as fast), ``flaky`` (7 of 8 trials fail: 5 report a failure,
2 hang past the deadline), ``few`` (2 trials, 20% slower). Trials ran interleaved: round ``r``
runs trial ``r`` of every cell (``run_order`` in each record).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

ROOT = Path(__file__).parent / "golden_run"
RECIPE = """\
schema_version: 1
ticket: GOLDEN-1
workload: matmul
trials: 8
steps: 18
confound:
  threshold: 1.15
cells:
- name: baseline
  mitigations: [none]
- name: slow
  mitigations: [omp_num_threads_1]
- name: same
  mitigations: [tf32_off]
- name: flaky
  mitigations: [xnack]
- name: few
  mitigations: [hsa_no_sdma]
  trials: 2
"""
CELLS = [
    # name, mitigations, env, centre (ms), trials, failing trials
    ("baseline", ["none"], {}, 10.0, 8, ()),
    ("slow", ["omp_num_threads_1"], {"OMP_NUM_THREADS": "1"}, 13.0, 8, ()),
    ("same", ["tf32_off"], {"DISABLE_TF32": "1"}, 10.0, 8, ()),
    ("flaky", ["xnack"], {"HSA_XNACK": "1"}, 10.0, 8, (0, 1, 2, 3, 4, 5, 6)),
    ("few", ["hsa_no_sdma"], {"HSA_ENABLE_SDMA": "0"}, 12.0, 2, ()),
]


def main() -> None:
    shutil.rmtree(ROOT, ignore_errors=True)
    rng = np.random.default_rng(7)
    (ROOT / "cells").mkdir(parents=True)
    (ROOT / "recipe.resolved.yaml").write_text(RECIPE)
    manifest = {
        "schema_version": 1,
        "status": "complete",
        "ticket": "GOLDEN-1",
        "workload": "matmul",
        "host": "golden",
        "isolation": "in_process",
        "n_cells": len(CELLS),
        "n_trials": sum(c[4] for c in CELLS),
        "schedule": "interleaved",
        "started_at": "2026-01-01T00:00:00.000Z",
        "finished_at": "2026-01-01T00:10:00.000Z",
    }
    (ROOT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for index, (name, mitigations, env, centre, trials, failing) in enumerate(CELLS):
        cell_dir = ROOT / "cells" / name
        cell_dir.mkdir()
        cell = {
            "name": name,
            "cell_id": f"{index:012d}",
            "index": index,
            "workload": "matmul",
            "mitigations": mitigations,
            "environment": {"name": "local", "kind": "local", "image": None, "env": {}},
            "env": env,
            "workload_config": {"m": 512, "n": 512, "k": 512, "warmup_steps": 2},
            "trials": trials,
            "steps": 18,
        }
        (cell_dir / "cell.json").write_text(json.dumps(cell, indent=1) + "\n")
        for trial in range(trials):
            level = centre * rng.lognormal(0.0, 0.02)
            steps = [30.0, 20.0, *(level * rng.lognormal(0.0, 0.01, 18))]
            failed = trial in failing
            hung = failed and name == "flaky" and trial in (5, 6)
            status = "timeout" if hung else "workload_failed" if failed else "ok"
            error = "the GEMM produced non-finite values" if failed else None
            record = {
                "cell": name,
                "cell_id": cell["cell_id"],
                "trial": trial,
                "seed": trial,
                "workload": "matmul",
                "status": status,
                "run_order": trial * len(CELLS) + index,
                "main_work_started": True,
                "passed": not failed,
                "step_times_ms": [round(float(s), 3) for s in steps],
                "warmup_steps": 2,
                "elapsed_sec": round(sum(steps) / 1000, 4),
                "wall_clock_s": round(sum(steps) / 1000 + 0.5, 4),
                "executed_iterations": 20,
                "metrics": {"tflops": round(2 * 512**3 * 4 / (level / 1000) / 1e12, 4)},
                "error": "deadline passed during run()" if hung else error,
            }
            path = cell_dir / f"trial_{trial:04d}.json"
            path.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
