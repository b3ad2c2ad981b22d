"""``atomic_write`` from several threads of one process at once (aorta/store/rundir.py)."""

from __future__ import annotations

from pathlib import Path

from aorta.store.rundir import atomic_write
from tests.threads import run_at_once


def test_threads_writing_one_file_each_leave_a_whole_one(tmp_path: Path) -> None:
    # A sweep's watchdog thread writes the files the main thread writes (a stuck trial's record,
    # the matrix, the manifest), and a notebook may load one run from two threads (its metrics
    # caches): each writer's temporary file was named by the process only, so two threads
    # truncated and wrote one file and the second's rename found it gone. A switch interval of a
    # microsecond interleaves the writers (every run failed before the name carried the thread).
    path = tmp_path / "manifest.json"
    payloads = [str(i) * (100 + 4000 * i) for i in range(6)]
    assert run_at_once(lambda payload: atomic_write(path, payload), payloads, rounds=50) == []
    assert path.read_text() in payloads
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temporary file left
