"""A bundle redacts each file once: the write takes the bytes the plan's scan redacted (it used
to redact every file again, half the time of a bundle), unless the file changed since — then
it is redacted again, so nothing unredacted and nothing stale goes in. A run directory made by
hand (a log and a manifest: no sweep needed)."""

from __future__ import annotations

import os
import tarfile

from aorta.store.bundle import plan_bundle, write_bundle
from aorta.store.rundir import RunDir

SECRET = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


def _run(tmp_path):
    rd = RunDir.create(tmp_path / "runs", ticket="T", workload="command")
    rd.write_json(rd.manifest_path, {"status": "complete", "ticket": "T"})
    log = rd.path / "cells" / "base" / "trial_0000" / "stdout.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"step 1\ntoken {SECRET}\n")
    return rd, log


def _member(archive, name):
    with tarfile.open(archive) as tar:
        (member,) = [m for m in tar.getmembers() if m.name.endswith(name)]
        return tar.extractfile(member).read().decode()


def test_the_write_takes_what_the_scan_redacted(tmp_path):
    rd, log = _run(tmp_path)
    plan = plan_bundle(rd.path, env={})
    # The same size and mtime, other bytes: only a write that redacts again would see them.
    stat = log.stat()
    log.write_text(f"step 2\ntoken {SECRET}\n")
    os.utime(log, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    text = _member(write_bundle(plan, tmp_path / "out"), "stdout.log")
    assert text == "step 1\ntoken <redacted>\n"


def test_a_file_changed_since_the_scan_is_redacted_again(tmp_path):
    rd, log = _run(tmp_path)
    plan = plan_bundle(rd.path, env={})
    log.write_text(f"step 1\nstep 2, longer\ntoken {SECRET}\n")
    text = _member(write_bundle(plan, tmp_path / "out"), "stdout.log")
    assert text == "step 1\nstep 2, longer\ntoken <redacted>\n"
    assert SECRET not in text
