"""Hang forensics, capture side (aorta.run.forensics): real processes with aorta's listener
loaded as sitecustomize, real gloo process groups, real py-spy — no torchrun here (the sweep
tests in tests/run/test_hang_forensics.py run the faults under torchrun)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from aorta import envvars
from aorta.recipe.blocks import Forensics
from aorta.run.forensics import SHIM_DIR, Capture, request_dump, watchdog_lines
from aorta.store.rundir import HANG_DIR, NCCL_DUMP_PREFIX, evidence_name, evidence_rank_dir
from tests.processes import capture_a_sleeper

TOKEN = "tok-test"
#: Rank 0's own evidence folder, relative to the trial folder.
RANK0 = f"{HANG_DIR}/{evidence_rank_dir(0)}"


def _capture(tmp_path: Path, **kw) -> Capture:
    return Capture(
        kw.pop("options", Forensics()),
        folder=tmp_path / "trial",
        token=TOKEN,
        rank=0,
        local_rank=0,
        host="node-a",
        logs=[tmp_path / "trial" / "stdout.log"],
        **kw,
    )


def _start(
    tmp_path: Path, body: str, capture: Capture, *, ready: str = "READY"
) -> subprocess.Popen:
    """A Python started as a trial's would be: the arming variables, its token, its log."""
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(body))
    (tmp_path / "trial").mkdir(exist_ok=True)
    env = {**os.environ, envvars.TRIAL_TOKEN: TOKEN}
    env.update(capture.arming_env(env))
    log = open(tmp_path / "trial" / "stdout.log", "wb")  # noqa: SIM115 - the child holds it
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    end = time.monotonic() + 120
    while ready not in (tmp_path / "trial" / "stdout.log").read_text():
        assert proc.poll() is None, (tmp_path / "trial" / "stdout.log").read_text()
        assert time.monotonic() < end, "the rank never got ready"
        time.sleep(0.05)
    return proc


_ONE_RANK = """
    import os, sys, time, tempfile
    import torch, torch.distributed as dist
    store = dist.FileStore(tempfile.mktemp(), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    t = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(t)
    print("[rank0]: Watchdog caught collective operation timeout: WorkGloo(SeqNum=3)", flush=True)
    print("READY", flush=True)
    def wait_here():
        time.sleep(600)
    wait_here()
"""


@pytest.mark.slow
def test_a_stuck_rank_gives_its_dump_stacks_and_log_lines_before_the_kill(tmp_path):
    capture = _capture(tmp_path)
    proc = _start(tmp_path, _ONE_RANK, capture)
    try:
        start = time.monotonic()
        capture(proc.pid, "hang")
        took = time.monotonic() - start
    finally:
        proc.kill()
        proc.wait()
        capture.close()
    hang = tmp_path / "trial" / RANK0
    dump = json.loads((hang / evidence_name("fr", 0)).read_text())
    assert [e["collective_seq_id"] for e in dump["entries"]] == [1, 2, 3]
    # gloo's completion mark races the dump even after the rank saw it (CI, twice): the third
    # is enqueued for sure, completed one way or the other.
    assert dump["pg_status"]["0"]["last_enqueued_collective"] == "3"
    assert dump["pg_status"]["0"]["last_completed_collective"] in ("2", "3")
    threads = json.loads((hang / evidence_name("stacks", 0)).read_text())
    main = next(t for t in threads if t["thread_name"] == "MainThread")
    assert main["frames"][0]["name"] == "wait_here"
    assert any(t["thread_name"] == "aorta-fr-listener" for t in threads)
    meta = json.loads((hang / evidence_name("capture", 0)).read_text())
    assert meta["reason"] == "hang" and meta["pid"] == proc.pid and meta["host"] == "node-a"
    (evidence,) = capture.evidence
    assert evidence.rank == 0 and evidence.notes == []
    assert evidence.fr["entries"][-1]["collective_seq_id"] == 3
    assert any("Watchdog caught" in line for line in evidence.log_lines)
    assert sorted(evidence.files) == sorted(
        f"{RANK0}/{evidence_name(k, 0)}" for k in ("fr", "stacks", "capture")
    )
    assert capture.reason == "hang" and took < 10, took
    # A second call (the same trial killed for another reason) takes nothing more.
    capture(proc.pid, "deadline")
    assert len(capture.evidence) == 1


_GIL_HOLDER = """
    import ctypes, time
    import torch.distributed
    print("READY", flush=True)
    def hold_the_gil():
        ctypes.PyDLL(None).sleep(600)
    hold_the_gil()
"""


@pytest.mark.slow
def test_a_rank_holding_the_gil_answers_no_dump_but_py_spy_reads_it_in_bounded_time(tmp_path):
    capture = _capture(tmp_path, dump_timeout_s=1.0, stacks_timeout_s=20.0)
    proc = _start(tmp_path, _GIL_HOLDER, capture)
    try:
        time.sleep(0.3)  # past the print, into the C call
        start = time.monotonic()
        capture(proc.pid, "hang")
        took = time.monotonic() - start
    finally:
        proc.kill()
        proc.wait()
        capture.close()
    (evidence,) = capture.evidence
    assert evidence.fr is None
    assert "no flight-recorder dump within 1 s" in evidence.notes[0]
    assert "GIL" in evidence.notes[0]
    main = next(t for t in evidence.stacks if t["thread_name"] == "MainThread")
    assert main["owns_gil"] is True and main["frames"][0]["name"] == "hold_the_gil"
    assert took < 1.0 + 20.0


def test_without_py_spy_the_record_says_so(tmp_path):
    capture = _capture(tmp_path, py_spy="")
    capture_a_sleeper(capture)
    (evidence,) = capture.evidence
    assert evidence.stacks is None
    assert any("py-spy is not installed" in n for n in evidence.notes)
    assert any("no flight-recorder listener" in n for n in evidence.notes)


def test_arming_leaves_the_recipes_own_choices_and_puts_the_listener_first(tmp_path):
    capture = _capture(tmp_path)
    env = capture.arming_env({"TORCH_FR_BUFFER_SIZE": "0", "PYTHONPATH": "/mine"})
    try:
        assert "TORCH_FR_BUFFER_SIZE" not in env  # the recipe turned the recorder off: it stays off
        assert env["PYTHONPATH"] == f"{SHIM_DIR}{os.pathsep}/mine"
        assert env[envvars.FR_LISTEN] == TOKEN
        assert env["TORCH_FR_DUMP_TEMP_FILE"].endswith(f"{RANK0}/{NCCL_DUMP_PREFIX}")
        assert (tmp_path / "trial" / RANK0).is_dir()  # NCCL writes there without creating it
    finally:
        capture.close()
    assert not (tmp_path / "trial" / HANG_DIR).exists()  # nothing came: no empty folder left
    off = _capture(tmp_path, options=Forensics(flight_recorder=False))
    assert off.arming_env({}) == {}


def test_the_listener_chains_to_the_sitecustomize_it_shadows(tmp_path):
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    env = {
        **os.environ,
        "PYTHONPATH": f"{SHIM_DIR}{os.pathsep}{other}",
        envvars.FR_LISTEN: TOKEN,
    }
    out = subprocess.run(
        [sys.executable, "-c", "import os, sys; print(os.environ.get('CHAINED'), "
         "any(type(f).__name__ == 'type' and f.__name__ == '_WhenDistributedLoads' "
         "for f in sys.meta_path))"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    # The other sitecustomize ran; the listener waits for torch.distributed, nothing started.
    assert out.stdout.split() == ["yes", "True"]


def test_a_process_that_never_imports_torch_distributed_has_no_listener(tmp_path):
    # A stand-in torch.distributed (no torch): importing it is what starts the listener.
    fake = tmp_path / "fake"
    (fake / "torch" / "distributed").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("")
    (fake / "torch" / "distributed" / "__init__.py").write_text("")
    capture = _capture(tmp_path)
    body = f"""
        import sys, time
        sys.path.insert(0, {str(fake)!r})
        if len(sys.argv) > 1:
            import torch.distributed
        print("READY", flush=True)
        time.sleep(600)
    """
    for with_import, listener in ((False, False), (True, True)):
        script = tmp_path / "p.py"
        script.write_text(textwrap.dedent(body))
        env = {**os.environ, envvars.TRIAL_TOKEN: TOKEN}
        env.update(capture.arming_env(env))
        proc = subprocess.Popen(
            [sys.executable, str(script), *(["x"] if with_import else [])],
            env=env, stdout=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"READY"
            got = request_dump(f"aorta-fr.{TOKEN}.{proc.pid}", time.monotonic() + 5, 5)
        finally:
            proc.kill()
            proc.wait()
        assert got["listener"] is listener
        if listener:  # the stand-in has no flight recorder: the reply says why, the rank lives on
            assert "Error" in got["error"] or "error" in got["error"].lower()
    capture.close()


def test_watchdog_lines_are_picked_from_a_log():
    lines = [
        "step 10 loss 2.1",
        "[rank3]:[E1203 05:01:02] ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=4027, OpType=ALLTOALL_BASE, NumelIn=8, Timeout(ms)=600000)",
        "[Rank 3] last enqueued work: 4028, last completed work: 4026",
    ]
    assert watchdog_lines(lines) == lines[1:]


def test_nccls_own_dump_becomes_the_ranks_json_dump(tmp_path):
    # NCCL's watchdog wrote its pickle (TORCH_FR_DUMP_TEMP_FILE) and the rank answers no
    # listener: the capture reads the pickle without running it, and keeps it as JSON.
    pickled = Path(__file__).parents[1] / "data" / "hang" / "pickle" / "fr_trace_rank_0"
    capture = _capture(tmp_path, py_spy="")
    hang = tmp_path / "trial" / RANK0
    hang.mkdir(parents=True)
    (hang / f"{NCCL_DUMP_PREFIX}0").write_bytes(pickled.read_bytes())
    capture_a_sleeper(capture)
    (evidence,) = capture.evidence
    assert evidence.fr["entries"], evidence.notes
    dump = json.loads((hang / evidence_name("fr", 0)).read_text())
    assert dump["entries"] and f"{RANK0}/{NCCL_DUMP_PREFIX}0" in evidence.files


_ANOTHER_USER = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect("\\0" + sys.argv[1])
try:
    s.sendall(b'{"path": "/tmp/aorta-overwritten"}\\n')
except BrokenPipeError:  # another user's connection is refused and closed before any read
    pass
print(s.recv(4096).decode().strip())
"""


@pytest.mark.slow
@pytest.mark.skipif(os.getuid() != 0, reason="needs root to ask as another user")
def test_the_listener_answers_only_its_own_user_and_writes_only_into_the_trial(tmp_path):
    # The socket's name is public (/proc/net/unix): another user who finds it must not make the
    # rank write anything, anywhere; a request's path is never used.
    capture = _capture(tmp_path)
    proc = _start(tmp_path, _ONE_RANK, capture)
    target = Path("/tmp/aorta-overwritten")
    target.unlink(missing_ok=True)
    try:
        name = f"aorta-fr.{TOKEN}.{proc.pid}"
        # A Python that user can run (this one may live under root's home).
        other = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
        nobody = subprocess.run(
            [other, "-c", _ANOTHER_USER, name], capture_output=True, text=True,
            user=65534, group=65534, check=False, cwd="/",
        )  # fmt: skip
        assert "refused: another user asked" in nobody.stdout, nobody.stderr
        mine = subprocess.run(
            [sys.executable, "-c", _ANOTHER_USER, name], capture_output=True, text=True, check=True
        )
        assert json.loads(mine.stdout)["rank"] == 0
        # ... into the trial's folder, under the listener's own name
        assert (tmp_path / "trial" / RANK0 / f".fr.{TOKEN}.{proc.pid}.json").is_file()
    finally:
        proc.kill()
        proc.wait()
        capture.close()
    assert not target.exists()


@pytest.mark.slow
def test_a_sweep_stopped_by_sigterm_takes_its_trials_evidence_first(tmp_path):
    # What a launcher's run deadline or Slurm's time limit does: SIGTERM, SIGKILL ~5 s later.
    # The engine takes a quick look at the live trial before it stops it; the run is resumable.
    from tests.processes import AORTA, torchrun_env

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "workload: tests.workloads_fixture:Sleeper\ntrial_isolation: process\n"
        "timeout_per_trial: 600\nworkload_config: {seconds: 600}\n"
        "cells: [{name: a, mitigations: [none]}]\n"
    )
    proc = subprocess.Popen(
        [AORTA, "sweep", "run", "--recipe", str(recipe), "-o", str(tmp_path / "out")],
        env=torchrun_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    phase = None
    end = time.monotonic() + 120
    while time.monotonic() < end and phase is None:
        for scratch in Path(tempfile.gettempdir()).glob("aorta-trial-*/phase"):
            with contextlib.suppress(OSError):
                if scratch.read_text() == "run" and str(tmp_path) in _request_of(scratch):
                    phase = scratch
        time.sleep(0.1)
    assert phase is not None, "the trial never started"
    time.sleep(0.5)
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    (hang,) = tmp_path.glob(f"out/*/*/*/cells/a/trial_0000/{RANK0}")
    meta = json.loads((hang / evidence_name("capture", 0)).read_text())
    assert meta["reason"] == "interrupted"
    # The evidence is on disk inside the grace; the rest of the stop (the matrix, the
    # interpreter's exit) is no look's doing and, on a loaded machine, takes what it takes.
    assert meta["taken_at"] - sent < 5.0, "the look held the stop back past a launcher's grace"
    threads = json.loads((hang / evidence_name("stacks", 0)).read_text())
    main = next(t for t in threads if t["thread_name"] == "MainThread")
    assert any(f["name"] == "Sleeper.run" for f in main["frames"]), main["frames"]


def _request_of(phase: Path) -> str:
    try:
        return (phase.parent / "request.json").read_text()
    except OSError:
        return ""
