"""Slurm launch: time until every node's torchrun has started, 2 nodes vs 1.

    .venv/bin/python benchmarks/launch_slurm.py [--repeats 5]

Needs root and Debian's slurm-wlm + munge: starts the two-node test cluster of tests/slurm.py
(both "nodes" on this machine). Each launch is what ``aorta launch --slurm --nodes K`` does:
the checks before submitting (``sinfo``), writing and submitting the sbatch script, the job's
own step (port probe on the first node, each node's ``run.sh``), ``srun``; torchrun runs
``python -m this`` with one process per node. "Started" is the latest ``started.<task>`` time a
node's srun task wrote right before it ran torchrun, measured from the call (the same clock:
one machine). 1- and 2-node launches alternate; medians are compared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aorta.launch import LaunchFailed, LaunchSpec, new_run_id, slurm  # noqa: E402
from tests.slurm import SlurmCluster, slurm_missing  # noqa: E402


def one(nodes: int, output: Path) -> float:
    spec = LaunchSpec(argv=("-m", "this"), nproc_per_node=1)
    t = time.time()
    slurm.check_request(nodes=nodes, partition=None, time_limit="5")
    job = slurm.SlurmJob(output, new_run_id())
    job.submit(spec, nodes=nodes, options=["--time=5"])
    try:
        result = job.follow(on_line=lambda n, s: None, emit=lambda s: None, timeout=120)
    except LaunchFailed as exc:
        raise SystemExit(f"launch failed: {exc}") from None
    if result.run_dir is None:
        raise SystemExit("the launch wrote no run directory")
    record = json.loads((result.run_dir / "launch.json").read_text())
    return float(result.timings["all_started"] + record["slurm"]["t0"] - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if slurm_missing():
        raise SystemExit(f"skipped: {slurm_missing()}")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = SlurmCluster(root=Path(tmp) / "slurm").start()
        os.environ["SLURM_CONF"] = str(cluster.conf)
        os.chdir(tmp)
        try:
            times: dict[int, list[float]] = {1: [], 2: []}
            one(1, Path(tmp) / "out")  # warm-up: first job, cold caches
            for _ in range(args.repeats):
                for n in (1, 2):
                    times[n].append(one(n, Path(tmp) / "out"))
        finally:
            cluster.stop()
    med = {n: statistics.median(v) for n, v in times.items()}
    load = os.getloadavg()[0]
    print(
        f"slurm launch, every node's torchrun started (median of {args.repeats}, load {load:.1f})"
    )
    for n in (1, 2):
        print(
            f"  {n} node(s): {med[n] * 1000:.0f} ms   ({', '.join(f'{t * 1000:.0f}' for t in times[n])})"
        )
    print(f"  2 / 1: {med[2] / med[1]:.2f}x")


if __name__ == "__main__":
    main()
