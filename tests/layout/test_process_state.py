"""The suite's guard against one file's state reaching another in the same worker
(tests/process_state.py, run after each file by tests/conftest.py): what it sees, what it puts back."""

from __future__ import annotations

import os
import signal
import sys

from aorta.run import procs
from tests.process_state import State


def test_what_a_file_leaves_is_named_and_put_back(tmp_path):
    before = State.now()
    try:
        os.chdir(tmp_path)
        os.environ["AORTA_LEAK_PROBE"] = "1"
        sys.path.append(str(tmp_path))
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        child = procs.spawn(["sleep", "60"])
        changes = before.changes(State.now())
    finally:
        before.restore()
    assert changes == [
        f"the working directory: {before.cwd} -> {tmp_path}",
        "os.environ['AORTA_LEAK_PROBE']: None -> '1'",
        f"sys.path: added [{str(tmp_path)!r}], removed []",
        f"the SIGUSR1 handler: {before.handlers[signal.SIGUSR1]!r} -> {signal.SIG_IGN!r}",
        f"children aorta started, still running: [{child.pid}]",
    ]
    assert before.changes(State.now()) == []  # all of it put back
    assert child.returncode == -signal.SIGTERM  # the child stopped, not left running
