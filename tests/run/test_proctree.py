"""aorta.run.proctree: find processes by a marker in their environment, stop them with a grace
period, reap them. Real processes (short sleeps), unique markers per test."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from aorta.run import proctree

PACKAGE = Path(proctree.__file__).resolve().parents[1]
# Shipped as source to nodes where aorta may be missing, or run with `python -I -S`.
SHIPPED = ["run/proctree.py", "store/hostenv.py", "store/secrets.py", "launch/_remote.py"]

# Ignores SIGTERM (a process that must be SIGKILLed), says when it is ready.
STUBBORN = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"
)
SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"


def _start(code: str, marker: bytes | None = None, **kw) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if marker is not None:
        name, value = marker.decode().split("=", 1)
        env[name] = value
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, **kw
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def marker() -> bytes:
    return proctree.mark("AORTA_TEST_PROCTREE", uuid.uuid4().hex)


@pytest.mark.slow  # real processes and whole-/proc scans: seconds on a loaded machine
def test_find_by_marker_spares_and_unless(marker):
    other = proctree.mark("AORTA_TEST_PROCTREE", uuid.uuid4().hex)
    a, b, c = _start(SLEEPER, marker), _start(SLEEPER, other), _start(SLEEPER, marker)
    try:
        assert sorted(proctree.find([marker])) == sorted([a.pid, c.pid])
        assert proctree.find([marker], spare=[a.pid]) == [c.pid]
        assert proctree.find([marker], among=[b.pid, c.pid]) == [c.pid]
        assert proctree.find([marker, other]) == []  # every marker must be there
        assert proctree.find([marker], unless=marker) == []
        assert proctree.find() == []  # no marker, no session: nothing, not everything
    finally:
        for p in (a, b, c):
            p.kill()
            p.wait()


def test_find_by_session(marker):
    leader = _start(SLEEPER, start_new_session=True)
    try:
        assert proctree.find(session=leader.pid) == [leader.pid]
    finally:
        leader.kill()
        leader.wait()


def test_zombies_are_never_found(marker):
    proc = _start(SLEEPER, marker)
    proc.kill()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert proctree.find([marker]) == []  # dead, though not reaped yet
    proc.wait()


@pytest.mark.slow  # real processes and whole-/proc scans: seconds on a loaded machine
def test_stop_terms_then_kills_what_ignores_sigterm(marker):
    polite, stubborn = _start(SLEEPER, marker), _start(STUBBORN, marker)
    report = proctree.stop(lambda: proctree.find([marker]), grace_s=0.5)
    assert report == {"terminated": 2, "killed": 1, "left": []}
    assert polite.wait(timeout=30) == -signal.SIGTERM
    assert stubborn.wait(timeout=30) == -signal.SIGKILL


@pytest.mark.slow  # real processes and whole-/proc scans: seconds on a loaded machine
def test_stop_reaps_only_the_processes_it_signalled(marker):
    # A marked child is reaped by stop (an orphan the sweep adopted has no Popen to do it);
    # an unmarked child keeps its exit status for its own Popen.
    marked = _start(SLEEPER, marker)
    bystander = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    report = proctree.stop(
        lambda: proctree.find([marker], among=proctree.children()), grace_s=5.0, reap=True
    )
    assert report["terminated"] == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(marked.pid, os.WNOHANG)  # reaped already
    marked.returncode = -signal.SIGTERM  # its Popen must not wait for it again
    marked.stdout.close()
    assert bystander.wait(timeout=30) == 7


def test_nothing_to_stop_returns_at_once():
    assert proctree.stop(lambda: [], grace_s=60.0) == {"terminated": 0, "killed": 0, "left": []}


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_sources_run_on_python_38_with_the_standard_library_only(name):
    path = PACKAGE / name
    tree = ast.parse(path.read_text(), feature_version=(3, 8))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            roots = [(node.module or "").split(".")[0]] if node.level == 0 else ["<relative>"]
        else:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and _shipped(node.module):
            continue  # shipped beside it (hostenv imports aorta.store.secrets)
        bad = [r for r in roots if r not in sys.stdlib_module_names]
        assert not bad, f"{name}:{node.lineno} imports {bad}: it is shipped as source"


def _shipped(module: str) -> bool:
    return module.startswith("aorta.") and module[6:].replace(".", "/") + ".py" in SHIPPED
