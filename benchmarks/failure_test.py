"""Boschloo's failure test and the drift check's Kendall tau: aorta's against scipy.stats.

    .venv/bin/python benchmarks/failure_test.py [--tables 300] [--seed 1] [--starts 3]

* per call: ``aorta.matrix.boschloo.boschloo_p`` against ``scipy.stats.boschloo_exact`` on the
  same random tables (1-60 trials a group), and ``aorta.matrix.rank_tests.kendall_tau_p`` against
  ``scipy.stats.kendalltau`` (8-60 timed trials); with the largest relative difference;
* per process: a fresh interpreter, aorta.matrix imported, that computes one p-value each way:
  CPU (user + system), alternated — what a sweep's rank 0 or an ``aorta report`` pays where failures differ.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time

import numpy as np
from scipy import stats as sps

from aorta.matrix.boschloo import boschloo_p
from aorta.matrix.rank_tests import kendall_tau_p

# Both first import what every process that compares holds already (aorta.matrix: numpy,
# pandas, xarray); the clock covers the p-values and what they import.
FRESH = """
import os, json
import numpy as np
import aorta.matrix.stats
start = os.times()
if {scipy}:
    from scipy.stats import boschloo_exact, kendalltau
    boschloo_exact([[3, 0], [7, 10]]).pvalue
    kendalltau(np.arange(12.0), np.sin(np.arange(12.0))).pvalue
else:
    from aorta.matrix.boschloo import boschloo_p
    from aorta.matrix.rank_tests import kendall_tau_p
    boschloo_p(3, 10, 0, 10)
    kendall_tau_p(np.arange(12.0), np.sin(np.arange(12.0)))
t = os.times()
print(json.dumps(t.user + t.system - start.user - start.system))
"""


def fresh(scipy: bool) -> float:
    out = subprocess.run(
        [sys.executable, "-c", FRESH.format(scipy=scipy)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(json.loads(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tables: list[tuple[int, int, int, int]] = []
    while len(tables) < args.tables:
        n, m = rng.randint(1, 60), rng.randint(1, 60)
        fa, fb = rng.randint(0, n), rng.randint(0, m)
        if 0 < fa + fb < n + m:
            tables.append((fa, n, fb, m))

    t0 = time.process_time()
    ours = [boschloo_p(*t) for t in tables]
    t_ours = time.process_time() - t0
    t0 = time.process_time()
    theirs = [
        min(1.0, sps.boschloo_exact([[fa, fb], [n - fa, m - fb]]).pvalue) for fa, n, fb, m in tables
    ]
    t_theirs = time.process_time() - t0
    diff = max(abs(a - b) / b for a, b in zip(ours, theirs, strict=True))

    gen = np.random.default_rng(args.seed)
    pairs = [(np.arange(float(k)), gen.normal(size=k)) for k in gen.integers(8, 61, args.tables)]
    t0 = time.process_time()
    k_ours = [kendall_tau_p(x, y) for x, y in pairs]
    k_t_ours = time.process_time() - t0
    t0 = time.process_time()
    k_theirs = [float(sps.kendalltau(x, y).pvalue) for x, y in pairs]
    k_t_theirs = time.process_time() - t0
    k_diff = max(abs(a - b) / b for a, b in zip(k_ours, k_theirs, strict=True))

    cold_ours, cold_theirs = [], []
    for _ in range(args.starts):
        cold_ours.append(fresh(False))
        cold_theirs.append(fresh(True))

    print("| what | aorta | scipy (same run) | ratio | largest relative difference |")
    print("|---|---|---|---|---|")
    print(
        f"| Boschloo, {len(tables)} tables | {1e3 * t_ours / len(tables):.1f} ms | "
        f"{1e3 * t_theirs / len(tables):.1f} ms | {t_ours / t_theirs:.2f} | {diff:.1e} |"
    )
    print(
        f"| Kendall, {len(pairs)} series | {1e3 * k_t_ours / len(pairs):.2f} ms | "
        f"{1e3 * k_t_theirs / len(pairs):.2f} ms | {k_t_ours / k_t_theirs:.2f} | {k_diff:.1e} |"
    )
    a, b = statistics.median(cold_ours), statistics.median(cold_theirs)
    print(
        f"| a fresh process: one of each, imports included (median of {args.starts}) | {a:.2f} CPU-s | "
        f"{b:.2f} CPU-s | {a / b:.2f} | |"
    )


if __name__ == "__main__":
    main()
