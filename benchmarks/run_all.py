"""Run every benchmark behind docs/performance.md, one after another (``make bench``).

    .venv/bin/python benchmarks/run_all.py            # the quick ones (a few minutes)
    .venv/bin/python benchmarks/run_all.py --full     # also HTA side by side (installs it in
                                                     # its own venv; tens of minutes)

Each script prints its numbers and the ratio against the peer it runs in the same process
tree; copy them into docs/performance.md with the command shown there.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

QUICK: list[list[str]] = [
    ["engine_overhead.py", "--trials", "200", "--process-trials", "10"],
    ["matrix_build.py", "--cells", "100", "--trials", "20", "--steps", "1000", "--repeat", "3"],
    ["trace_load.py", "--skip-hta", "--repeat", "3"],
    ["trace_matrix.py", "--repeat", "3"],
    ["launch_fanout.py", "--repeats", "3"],  # needs /usr/sbin/sshd
    ["failure_test.py", "--tables", "300", "--starts", "3"],
    ["profiled_trial.py", "--runs", "5"],
    ["comm_wait.py", "--runs", "10", "--steps", "40"],
]
FULL: list[list[str]] = [
    ["engine_overhead.py", "--trials", "200", "--process-trials", "10"],
    ["matrix_build.py", "--cells", "100", "--trials", "20", "--steps", "1000", "--repeat", "5"],
    ["trace_load.py", "--peer", "--repeat", "5"],
    ["trace_matrix.py", "--repeat", "3"],
    ["launch_fanout.py", "--repeats", "7"],
    ["failure_test.py", "--tables", "600", "--starts", "5"],
    ["profiled_trial.py", "--runs", "9"],
    ["comm_wait.py", "--runs", "20", "--steps", "40"],
    ["history.py", "history", "--runs", "365", "--cells", "20", "--trials", "40"],
    ["history.py", "bisect", "--values", "16", "--first-bad", "11"],
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--full", action="store_true", help="Run the slow peers too (HTA, json.load)."
    )
    args = parser.parse_args()
    failed = 0
    for script, *options in FULL if args.full else QUICK:
        path = HERE / script
        if not path.exists():
            continue
        print(f"\n=== {script} {' '.join(options)}", flush=True)
        start = time.monotonic()
        code = subprocess.call([sys.executable, str(path), *options])
        print(f"=== {script}: exit {code} after {time.monotonic() - start:.0f} s", flush=True)
        failed += code != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
