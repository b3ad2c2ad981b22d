"""A process-isolated command runs in its worker's process group (``spawn(new_session=False)``),
so its pid leads no group: ``killpg`` on it reaches nothing. ``kill_group`` signals such a
child's process tree instead, and the worker leaves the shared deadline to the engine, which
takes the evidence first (``tests/run/test_worker_deadline.py``) and then stops the worker.
A group kill does not wait on the zombies a subreaper (the sweep) holds in the group."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from aorta.run import procs
from aorta.run.orphans import _set_subreaper


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def _tree_of(proc: object, n: int) -> list[int]:
    """The child's pid and its ``n`` children, once they exist."""
    pid = proc.pid  # type: ignore[attr-defined]
    end = time.monotonic() + 30
    while time.monotonic() < end:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if len(kids) >= n:
            return [pid, *map(int, kids)]
        time.sleep(0.02)
    raise AssertionError(f"{pid} never started {n} children")


@pytest.mark.parametrize("ignores_term", [False, True], ids=["plain", "ignores-sigterm"])
def test_kill_group_reaches_the_tree_of_a_child_in_our_group(ignores_term):
    trap = "trap '' TERM; " if ignores_term else ""
    proc = procs.spawn(["bash", "-c", f"{trap}sleep 60 & sleep 61; wait"], new_session=False)
    tree = _tree_of(proc, 2)
    assert os.getpgid(proc.pid) == os.getpgid(0)  # no group of its own
    try:
        t0 = time.monotonic()
        procs.kill_group(proc, grace_s=1.0)
        took = time.monotonic() - t0
        # It was ~7 s (1 s of polling, 5 s waiting) with every process left running.
        assert [p for p in tree if _running(p)] == []
        assert proc.returncode == (-signal.SIGKILL if ignores_term else -signal.SIGTERM)
        assert took < (3.0 if ignores_term else 1.0), took
    finally:
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_a_leader_of_its_own_group_is_still_killed_by_group(tmp_path):
    # A child in its own session keeps the group kill (its whole group, not a tree read).
    marker = tmp_path / "pid"
    proc = procs.spawn(["bash", "-c", f"sleep 60 & echo $! > {marker}; wait"])
    end = time.monotonic() + 30
    while not (marker.exists() and marker.read_text().strip()):
        assert time.monotonic() < end, "the grandchild never started"
        time.sleep(0.02)
    grandchild = int(marker.read_text())
    procs.kill_group(proc, grace_s=1.0)
    assert proc.returncode is not None and not _running(grandchild)


@pytest.mark.slow
def test_an_isolated_command_that_ignores_sigterm_lets_its_worker_report(tmp_path, run_cli):
    # At the deadline the engine takes the evidence, then SIGTERMs the worker's group; the
    # command ignores it. The worker's own kill now reaches the command (SIGKILL after its
    # 2 s grace), so the worker writes its outcome before the engine's SIGKILL (5 s): before,
    # its kill reached nothing and the engine killed it with the result unwritten.
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "mode: probe\nticket: ISO\ntrials: 1\nmitigation_axis: [none]\n"
        "timeout_per_trial: 2\ntrial_isolation: process\n"
    )
    command = "trap '' TERM; echo start; sleep 60 & wait; sleep 60"
    code, out, err = run_cli(
        "sweep", "run", "--recipe", recipe, "-o", tmp_path / "out", "--", "bash", "-c", command
    )
    assert code == ExitCode.OK, out + err
    (path,) = tmp_path.glob("out/*/*/*/cells/none-none/trial_0000.json")
    record = json.loads(path.read_text())
    assert record["status"] == "timeout"
    assert record["error"] == "deadline passed during run(); the worker was stopped"
    assert record["forensics"]["evidence"][0]["rank"] == 0  # the engine's capture came first


def test_a_subreapers_zombies_do_not_keep_the_group_alive():
    # A sweep is a child subreaper: a trial's process whose parent died first comes to it,
    # and once dead stays in the trial's group as its zombie. killpg(pgid, 0) counted those,
    # so every kill of such a trial waited out its whole grace (6 s, not 2, for a 2 s
    # deadline of `bash -c "sleep 30 & sleep 31; wait"` in a sweep).
    if not _set_subreaper(True):
        pytest.skip("no PR_SET_CHILD_SUBREAPER here")
    try:
        proc = procs.spawn(["bash", "-c", "sleep 60 & sleep 61; wait"])
        tree = _tree_of(proc, 2)
        t0 = time.monotonic()
        procs.kill_group(proc, grace_s=10.0)
        took = time.monotonic() - t0
    finally:
        _set_subreaper(False)
    assert proc.returncode == -signal.SIGTERM
    assert [p for p in tree if _running(p)] == []
    assert took < 5.0, took  # it was the grace and 2 s more: 12 s
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # the zombies were reaped: the group is gone


def _group_members(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(ValueError, OSError):
            if os.getpgid(int(entry.name)) == pgid:
                found.append(int(entry.name))
    return found


@pytest.fixture
def own_live_set(monkeypatch):
    """This test's children alone in procs' live set. reap_all acts on every group the process
    started, so a child another test of the same xdist worker left running would be counted
    (CI: 3 where 2 ran) and killed; the others' entries come back afterwards."""
    monkeypatch.setattr(procs, "_live", {})


def test_reap_all_waits_for_the_groups_and_reaps_their_zombies(own_live_set):
    # Ctrl-C's reap_all, beside a live trial and a dead entry (its leader gone, its background
    # child left in the group): it returned at once, leaving the subreaper's zombies in both
    # groups (killpg(pgid, 0) still answered) and a SIGTERMed child sometimes still running.
    if not _set_subreaper(True):
        pytest.skip("no PR_SET_CHILD_SUBREAPER here")
    try:
        live = procs.spawn(["bash", "-c", "sleep 60 & sleep 61; wait"])
        dead = procs.spawn(["bash", "-c", "sleep 62 & exit 0"])
        trees = _tree_of(live, 2)
        dead.wait(timeout=30)  # the leader has gone; its sleep stays in the group, now ours
        trees += _group_members(dead.pid)
        assert len(trees) == 4
        t0 = time.monotonic()
        assert procs.reap_all(grace_s=10.0) == 2
        took = time.monotonic() - t0
    finally:
        _set_subreaper(False)
    assert took < 5.0, took  # not the grace: nothing ignored SIGTERM
    assert [p for p in trees if Path(f"/proc/{p}").exists()] == []  # neither running nor zombie
    for proc in (live, dead):
        with pytest.raises(ProcessLookupError):
            os.killpg(proc.pid, 0)


def test_reap_all_forgets_a_child_its_caller_already_waited_for(own_live_set):
    # CI counted 3 groups where 2 ran: wait_exit's doctest, earlier in the same worker, had
    # waited for its child without kill_group, which left it in the live set; reap_all then
    # signalled a pid that was no longer its child and counted it.
    done = procs.spawn(["true"])
    procs._live[done.pid] = done  # as if it had been left there, as before wait_exit forgot
    done.wait(timeout=30)
    t0 = time.monotonic()
    assert procs.reap_all(grace_s=10.0) == 0
    assert time.monotonic() - t0 < 5.0
    assert done.pid not in procs._live  # forgotten: the set does not grow over a long sweep


def test_wait_exit_forgets_a_child_that_left_nothing_behind(own_live_set):
    # The doctest's way: spawn, wait_exit, no kill_group. The entry outlived the child and its
    # group, so a later reap_all (any test of the same worker, a notebook's Ctrl-C) could
    # signal whichever group took its freed pid next.
    done = procs.spawn(["true"])
    assert procs.wait_exit(done, 30.0) is not None and done.returncode == 0
    assert procs._live == {}


def test_a_child_its_caller_waited_for_itself_is_forgotten_at_the_next_spawn(own_live_set):
    # Popen.wait() bypasses procs; the next spawn drops what has ended, so the set holds what
    # runs however many children a long sweep or a notebook's kernel starts.
    done = [procs.spawn(["true"]) for _ in range(3)]
    for proc in done:
        proc.wait(timeout=30)
    live = procs.spawn(["sleep", "60"])
    try:
        assert list(procs._live) == [live.pid]
    finally:
        procs.kill_group(live, grace_s=1.0)
    assert procs._live == {}


def test_a_group_that_outlived_its_leader_is_still_reaped(own_live_set):
    # Forgetting waits for the group to empty: a leader that exited and left a background
    # child in its group is still reap_all's to kill, or a Ctrl-C would leave that child.
    if not _set_subreaper(True):  # the orphaned sleep comes to us, as in a sweep
        pytest.skip("no PR_SET_CHILD_SUBREAPER here")
    try:
        proc = procs.spawn(["bash", "-c", "sleep 60 & exit 0"])
        assert procs.wait_exit(proc, 30.0) is not None and proc.returncode == 0
        assert list(procs._live) == [proc.pid]
        assert procs.reap_all(grace_s=5.0) == 1
    finally:
        _set_subreaper(False)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
    assert procs._live == {}
