"""Hang forensics never cost a healthy sweep, and nothing a trial or another user can reach
bends the capture (issue 44): ranks of one node each own their evidence folder, the pipes'
temp folder goes on every exit path, the listener checks its peer before reading, the capture
checks who answers and what, passes FIFOs and links by, and the shim loads in any Python."""

from __future__ import annotations

import ast
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aorta import envvars
from aorta.recipe.blocks import Forensics
from aorta.run.forensics import SHIM_DIR, Capture, checked_reply, request_dump
from aorta.run.hangfiles import EvidenceDir, clear_stale_pipes, pipes_prefix
from aorta.store.rundir import HANG_DIR, evidence_name
from tests.processes import TORCHRUN, sweep_run, torchrun_env

TOKEN = "tok-safety"


def _capture(trial: Path, *, rank: int = 0, **kw) -> Capture:
    return Capture(
        kw.pop("options", Forensics()),
        folder=trial,
        token=kw.pop("token", TOKEN),
        rank=rank,
        local_rank=rank,
        host="node-a",
        logs=kw.pop("logs", [trial / "stdout.log"]),
        **kw,
    )


# --- ranks of one node ----------------------------------------------------------------------


def _arm_and_close(trial: str, rank: int, rounds: int) -> str | None:
    """One rank's arming and cleanup, ``rounds`` times over the shared trial folder."""
    try:
        for n in range(rounds):
            capture = _capture(Path(trial), rank=rank, token=f"t{rank}-{n}")
            env = capture.arming_env({})
            own = Path(env[envvars.FR_DIR])
            # While armed, this rank's folder is there to write into, whatever the others do.
            (own / f"nccl_trace_rank_{rank}").write_bytes(b"x")
            (own / f"nccl_trace_rank_{rank}").unlink()
            capture.close()
    except Exception as exc:  # reported to the test, which names it
        return f"{type(exc).__name__}: {exc}"
    return None


def test_ranks_sharing_a_trial_folder_never_remove_what_another_uses(tmp_path):
    # Four processes arm and clean the same trial folder as fast as they can: before issue 44
    # one rank's cleanup removed hang/ under another (FileNotFoundError within ~100 rounds).
    trial = tmp_path / "trial_0000"
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        errors = pool.starmap(_arm_and_close, [(str(trial), r, 150) for r in range(4)])
    assert errors == [None] * 4
    assert not (trial / HANG_DIR).exists()  # nothing came: no folder left, nor hang/


@pytest.mark.slow
def test_four_ranks_of_one_node_sweep_true_with_every_record_and_nothing_left(tmp_path):
    # The short variant of benchmarks/fr_soak.py (4 ranks x 300 trials there).
    trials = 24
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"command: ['true']\ntrials: {trials}\ntimeout_per_trial: 120\n"
        "cells: [{name: probe, mitigations: [none]}]\n"
    )
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run(
        [TORCHRUN, "--nproc-per-node=4", "--standalone", *sweep_run(recipe, tmp_path / "out")],
        env=torchrun_env({"TMPDIR": str(tmp)}), capture_output=True, text=True, timeout=600,
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    records = sorted(tmp_path.glob("out/*/*/*/cells/probe/trial_*.json"))
    assert [json.loads(p.read_text())["status"] for p in records] == ["ok"] * trials
    assert not list(tmp_path.glob("out/*/*/*/cells/probe/trial_*/hang"))
    assert [p.name for p in tmp.iterdir() if p.name.startswith("aorta-")] == []


# --- the pipes' temp folder -----------------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_pipes_folders_of_gone_processes_are_cleared_and_no_other(tmp_path):
    prefix = pipes_prefix()
    ns = prefix[len("aorta-fr-") :].split(".")[0]
    dead = tmp_path / f"aorta-fr-{ns}.{_dead_pid()}-abc"
    live = tmp_path / f"{prefix}def"  # this process's
    elsewhere = tmp_path / f"aorta-fr-{int(ns) + 1}.{_dead_pid()}-ghi"  # another pid namespace
    old, young = tmp_path / "aorta-fr-a1b2c3d4", tmp_path / "aorta-fr-e5f6g7h8"  # named before
    for folder in (dead, live, elsewhere, old, young):
        folder.mkdir()
        (folder / "pipe_rank_0").touch()
    os.utime(old, (time.time() - 3 * 86400, time.time() - 3 * 86400))
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").touch()
    (tmp_path / f"aorta-fr-{ns}.{_dead_pid()}-lnk").symlink_to(target)  # a link: never followed
    assert clear_stale_pipes(tmp_path) == 2
    assert not dead.exists() and not old.exists()
    assert live.is_dir() and elsewhere.is_dir() and young.is_dir() and (target / "keep").exists()


def test_a_sweep_starts_by_clearing_what_gone_sweeps_left(tmp_path, monkeypatch):
    import tempfile

    from aorta.run.orphans import OrphanGuard

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ns = pipes_prefix()[len("aorta-fr-") :].split(".")[0]
    stale = tmp_path / f"aorta-fr-{ns}.{_dead_pid()}-xyz"
    stale.mkdir()
    with OrphanGuard():
        assert not stale.exists()


_KILLED = """
import os, signal, sys
from aorta.run.hangfiles import make_pipes_folder
from aorta.run.orphans import OrphanGuard
with OrphanGuard():
    print(make_pipes_folder(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_a_sweep_killed_with_sigkill_leaves_no_pipes_folder(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _KILLED], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.parent == tmp_path and folder.name.startswith(pipes_prefix(0)[:9])
    end = time.monotonic() + 60
    while folder.exists() and time.monotonic() < end:  # the guard wakes on the closed pipe
        time.sleep(0.1)
    assert not folder.exists()


def test_a_trial_that_ends_leaves_no_pipes_folder_even_when_hang_went_first(tmp_path):
    capture = _capture(tmp_path / "trial")
    env = capture.arming_env({})
    pipes = Path(env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"]).parent
    assert pipes.is_dir() and pipes.name.startswith(pipes_prefix())
    shutil.rmtree(tmp_path / "trial" / HANG_DIR)  # what another rank's cleanup did
    capture.close()
    assert not pipes.exists()


# --- the listener and who answers -----------------------------------------------------------

_RANK = """
import sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
print("READY", flush=True)
time.sleep(600)
"""


def _start(body: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)], env=env,
                            stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"READY"
    return proc


def _silent_client(name: str) -> str:
    return (
        "import socket, sys, time\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        f"s.connect('\\0{name}')\n"
        "s.settimeout(20)\n"
        "print(s.recv(4096).decode().strip() or 'closed', flush=True)\n"
        "time.sleep(30)\n"
    )


@pytest.mark.slow
def test_a_silent_client_of_any_user_holds_up_no_dump(tmp_path):
    trial = tmp_path / "trial"
    capture = _capture(trial)
    env = {**os.environ, envvars.TRIAL_TOKEN: TOKEN, **capture.arming_env(os.environ)}
    proc = _start(_RANK, env)
    name = f"aorta-fr.{TOKEN}.{proc.pid}"
    blockers = []
    try:
        # One of this user that connects and says nothing, and, as root, one of another user:
        # the listener refuses that one at once, before reading anything.
        blockers.append(subprocess.Popen([sys.executable, "-c", _silent_client(name)],
                                         stdout=subprocess.PIPE, text=True))  # fmt: skip
        if os.getuid() == 0:
            other = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
            blockers.append(subprocess.Popen([other, "-c", _silent_client(name)], user=65534,
                                             group=65534, cwd="/", stdout=subprocess.PIPE,
                                             text=True))  # fmt: skip
        time.sleep(0.5)
        start = time.monotonic()
        got = request_dump(name, time.monotonic() + 20, 20)
        took = time.monotonic() - start
        assert got["listener"] is True and got.get("rank") == 0 and got.get("bytes"), got
        assert took < 10, took  # not the 30 s a silent client held the one connection before
        if os.getuid() == 0:
            assert blockers[1].stdout is not None
            assert "refused: another user asked" in blockers[1].stdout.readline()
    finally:
        for p in [*blockers, proc]:
            p.kill()
            p.wait()
        capture.close()


_SQUATTER = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\\0" + sys.argv[1])
s.listen(4)
print("READY", flush=True)
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(sys.argv[2].encode() + b"\\n")
    c.close()
"""


def _squat(name: str, reply: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", _SQUATTER, name, reply],
                            stdout=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"READY"
    return proc


def test_a_squatted_listener_name_is_not_asked_and_the_capture_goes_on(tmp_path):
    trial = tmp_path / "trial"
    trial.mkdir()
    capture = _capture(trial, py_spy="")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               start_new_session=True)  # fmt: skip
    squatter = _squat(f"aorta-fr.{TOKEN}.{sleeper.pid}", '{"rank": "x", "bytes": 12}')
    try:
        capture(sleeper.pid, "hang")
    finally:
        for p in (squatter, sleeper):
            p.kill()
            p.wait()
    assert capture.failure is None
    (evidence,) = capture.evidence
    assert any(f"held by another process (pid {squatter.pid}" in n for n in evidence.notes)
    assert (trial / evidence.files[-1]).is_file()


_OWN_BAD_LISTENER = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\\0aorta-fr.%s.%d" % (sys.argv[1], os.getpid()))
s.listen(4)
print("READY", flush=True)
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(b'{"rank": "x", "world_size": true, "bytes": 3}\\n')
    c.close()
"""


def test_a_reply_with_a_bad_rank_costs_its_fields_never_the_capture(tmp_path):
    trial = tmp_path / "trial"
    trial.mkdir()
    capture = _capture(trial, py_spy="")
    proc = subprocess.Popen([sys.executable, "-c", _OWN_BAD_LISTENER, TOKEN],
                            stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"READY"
        capture(proc.pid, "hang")
    finally:
        proc.kill()
        proc.wait()
    assert capture.failure is None
    (evidence,) = capture.evidence
    assert evidence.rank == 0 and evidence.fr is None
    assert any("invalid rank, world_size" in n for n in evidence.notes), evidence.notes


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.sampled_from(["rank", "world_size", "bytes", "pid", "error", "path"]),
                       _JSON) | _JSON)  # fmt: skip
def test_property_a_checked_reply_holds_only_its_fields_each_of_its_type(got):
    out = checked_reply(got)
    assert set(out) <= {"rank", "world_size", "bytes", "pid", "error"}
    for key in ("rank", "world_size", "bytes", "pid"):
        if key in out:
            assert type(out[key]) is int and 0 <= out[key] < 2**31
    assert isinstance(out.get("error", ""), str)


# --- what a trial can put in the way --------------------------------------------------------


def test_a_fifo_named_like_the_log_or_a_dump_is_passed_over_not_waited_on(tmp_path):
    trial = tmp_path / "trial"
    own = EvidenceDir(trial, 0)
    own.make()
    os.mkfifo(trial / "stdout.log")
    os.mkfifo(own.path / "nccl_trace_rank_0")
    capture = _capture(trial, py_spy="")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               start_new_session=True)  # fmt: skip
    try:
        start = time.monotonic()
        capture(sleeper.pid, "hang")
        took = time.monotonic() - start
    finally:
        sleeper.kill()
        sleeper.wait()
    assert took < 15, took
    (evidence,) = capture.evidence
    assert evidence.log_lines == [] and evidence.fr is None
    assert (own.path / evidence_name("capture", 0)).is_file()


@pytest.mark.parametrize("link", [HANG_DIR, f"{HANG_DIR}/rank0"])
def test_the_capture_never_writes_through_a_link_in_the_trial_folder(tmp_path, link):
    trial = tmp_path / "trial"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (trial / link).parent.mkdir(parents=True, exist_ok=True)
    (trial / link).symlink_to(elsewhere)
    capture = _capture(trial, py_spy="")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               start_new_session=True)  # fmt: skip
    try:
        capture(sleeper.pid, "hang")
    finally:
        sleeper.kill()
        sleeper.wait()
        capture.close()
    assert capture.failure is None
    (evidence,) = capture.evidence
    assert any("no evidence written to disk" in n for n in evidence.notes), evidence.notes
    assert evidence.files == []
    assert list(elsewhere.rglob("*")) == [] and (trial / link).is_symlink()


# --- the shim in any Python -----------------------------------------------------------------


def _old_pythons() -> list[str]:
    found = []
    for version in ("2.7", "3.6", "3.7"):
        candidates = [shutil.which(f"python{version}") or ""]
        candidates += sorted(
            str(p) for p in Path.home().glob(f".pyenv/versions/{version}*/bin/python")
        )
        for exe in filter(None, candidates):
            ok = subprocess.run([exe, "-c", "pass"], capture_output=True, check=False, timeout=30)
            if ok.returncode == 0:
                found.append(exe)
                break
    return found


def test_the_shim_is_grammar_every_python_since_3_4_reads_and_ascii():
    src = (SHIM_DIR / "sitecustomize.py").read_text()
    assert src.isascii()  # Python 2 reads a file without a coding line as ASCII
    tree = ast.parse(src, feature_version=(3, 4))  # no f-strings, no annotations
    assert not any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body)


@pytest.mark.parametrize("python", _old_pythons() or [pytest.param("", marks=pytest.mark.skip(
    reason="no Python 2.7, 3.6 or 3.7 here"))])  # fmt: skip
def test_an_old_python_child_starts_and_still_runs_the_sitecustomize_it_shadows(tmp_path, python):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    env = {**os.environ, "PYTHONPATH": f"{SHIM_DIR}{os.pathsep}{site}", envvars.FR_LISTEN: TOKEN}
    done = subprocess.run([python, "-c", "import os; print(os.environ.get('CHAINED'))"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "yes", done.stderr
    assert "sitecustomize" not in done.stderr, done.stderr


def test_a_shim_twice_on_the_path_runs_once_and_chains_once(tmp_path):
    alias = tmp_path / "alias"
    alias.symlink_to(SHIM_DIR)  # the same folder by another name
    copy = tmp_path / "copy"  # another aorta's shim
    shutil.copytree(SHIM_DIR, copy)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nos.environ['CHAINED'] = os.environ.get('CHAINED', '') + 'x'\n"
    )
    path = os.pathsep.join(str(p) for p in (SHIM_DIR, alias, copy, SHIM_DIR, site))
    env = {**os.environ, "PYTHONPATH": path, envvars.FR_LISTEN: TOKEN}
    done = subprocess.run(
        [sys.executable, "-c", "import os, sys; print(os.environ.get('CHAINED'), "
         "sum(getattr(f, '__name__', '') == '_WhenDistributedLoads' for f in sys.meta_path))"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["x", "1"]  # the other ran once; one listener waits


def test_arming_twice_puts_the_shim_on_the_path_once(tmp_path):
    outer, inner = _capture(tmp_path / "trial"), _capture(tmp_path / "trial", rank=1)
    try:
        once = outer.arming_env({"PYTHONPATH": "/mine"})["PYTHONPATH"]
        twice = inner.arming_env({"PYTHONPATH": once})  # a trial that runs aorta itself
        assert twice["PYTHONPATH"] == f"{SHIM_DIR}{os.pathsep}/mine"
    finally:
        outer.close()
        inner.close()
    assert not (tmp_path / "trial" / HANG_DIR).exists()


# --- readers: the per-rank layout and runs from before it -----------------------------------


@pytest.mark.parametrize("layout", ["hang/rank{r}", "hang"])
def test_readers_find_the_evidence_in_either_layout(tmp_path, layout):
    from aorta.hang import CulpritFrame, HangReport, load_evidence
    from aorta.store.bundle import _kind
    from aorta.store.rundir import RunDir

    trial = tmp_path / "cells" / "c" / "trial_0000"
    for r in (0, 1):
        folder = trial / layout.format(r=r)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"capture_{r}.json").write_text(
            json.dumps({"rank": r, "pid": 100 + r, "host": "h", "notes": [f"note {r}"]})
        )
        frames = [{"name": "step", "filename": "train.py", "line": 10 + r}]
        (folder / f"stacks_{r}.json").write_text(json.dumps([{"thread_name": "MainThread",
                                                               "frames": frames}]))  # fmt: skip
    got = {e.rank: e.notes for e in load_evidence([trial])}
    assert got == {0: ("note 0",), 1: ("note 1",)}
    # A version-1 record's culprit gets its stacks from the rank's file, in either layout.
    v1 = HangReport(summary="s", kind="none", frames=(CulpritFrame(1, "x", "stacks"),))
    (frame,) = RunDir(tmp_path).forensics_of_version(1, "c", 0, v1).frames
    assert frame.stack_file == f"{layout.format(r=1)}/stacks_1.json"
    assert frame.stack and "train.py:11" in frame.stack[0]
    rel = (trial / layout.format(r=1) / "capture_1.json").relative_to(tmp_path).as_posix()
    assert _kind(rel) == "core"  # a bundle always carries it


@pytest.mark.slow
def test_a_capture_that_fails_says_so_and_never_blames_enabled_false(tmp_path, monkeypatch):
    from aorta.recipe import load_recipe_text
    from aorta.run import forensics
    from aorta.run.sweep import sweep
    from aorta.store.rundir import RunDir

    def broken(self, *args, **kwargs):
        raise RuntimeError("a bug in the capture")

    monkeypatch.setattr(forensics.Capture, "_take", broken)
    recipe = load_recipe_text(
        "trials: 1\ntimeout_per_trial: 60\nhang_after: 1\ncells: [{name: a, mitigations: [none]}]\n",
        command=["sh", "-c", "exec sleep 60"],
    )
    result = sweep(recipe, output=tmp_path, progress="none")
    (record,) = RunDir(result.run_dir).trial_records()
    assert record.status.value == "timeout" and record.forensics is None
    assert "the capture found nothing to read" in (record.signature_hint or "")
    assert "enabled: false" not in (record.signature_hint or "")
    assert any(
        "the capture failed: RuntimeError: a bug in the capture" in w for w in record.warnings
    )
