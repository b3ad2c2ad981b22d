"""The run-directory lock under contention: real processes racing for it."""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import time

import pytest

from aorta.store.rundir import RunDir

# Each racer takes the lock, says so, holds it a moment, and says it let go.
RACER = """
import sys, time
from aorta.store.rundir import RunDir, RunLocked
rd = RunDir(sys.argv[1])
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # start together, imports done
try:
    with rd.lock():
        print("held", time.monotonic(), flush=True)
        time.sleep(0.5)
        print("released", time.monotonic(), flush=True)
except RunLocked:
    print("refused", flush=True)
"""


@pytest.mark.slow
def test_concurrent_resumes_after_a_crash_have_one_holder_at_a_time(tmp_path):
    rd = RunDir.create(tmp_path, ticket=None, workload="w")
    for attempt in range(8):
        # What a kill -9 leaves: a lock file naming a dead process on this host.
        dead = subprocess.Popen(["true"])
        dead.wait()
        (rd.path / "run.lock").write_text(
            json.dumps({"host": socket.gethostname(), "pid": dead.pid})
        )
        start = time.time() + 2.0
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, str(rd.path), str(start)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        held = []
        for p in racers:
            out, _ = p.communicate(timeout=60)
            lines = [line.split() for line in out.splitlines()]
            if lines and lines[0][0] == "held":
                held.append((float(lines[0][1]), float(lines[1][1])))
        assert held, f"attempt {attempt}: nobody took the stale lock"
        # No two holding intervals overlap.
        spans = sorted(held)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
        assert not (rd.path / "run.lock").exists()
