"""Record the hang goldens of ``tests/hang/``: real torchrun (gloo, CPU) runs with one injected
fault each, their flight-recorder dumps, py-spy stacks and logs taken while they hang.

Usage (from the repository root, with the dev venv; py-spy must be installed)::

    .venv/bin/python tests/data/hang/record.py            # every fault, ~3 minutes
    .venv/bin/python tests/data/hang/record.py sleep gil  # some of them
    .venv/bin/python tests/data/hang/record.py --out /tmp/h --quick sleep  # elsewhere, fast

Each fault ``F`` is re-recorded into ``tests/data/hang/F/`` laid out as an aorta trial folder
after a hang capture: ``rank<R>.stdout.log``/``rank<R>.stderr.log`` (each rank's own output,
the way aorta's trials write it), and ``hang/fr_<R>.json`` (the flight recorder's JSON dump),
``hang/stacks_<R>.json`` (``py-spy dump --json``) and ``hang/capture_<R>.json`` (rank, host,
pid, notes, exited) per rank. The ``sleep`` fault also writes pickled dumps with stack traces
(``_dump_fr_trace``), named as PyTorch names them, into ``tests/data/hang/pickle/``.

How one recording goes: torchrun starts the ranks (``TORCH_FR_BUFFER_SIZE=2000``, a gloo
timeout of :data:`GLOO_TIMEOUT_S`); every rank runs three ``all_reduce``\\ s, then its fault;
right before the call that blocks, it writes a marker with its pid. Once every rank has, the
driver waits a second, asks every rank's dump thread for a dump (a file in the control
folder: a thread that polls it needs the GIL, so a rank that holds it answers nothing), waits
up to :data:`DUMP_WAIT_S` for them, runs ``py-spy dump --json`` on each live rank, writes the
capture files, then lets gloo's own timeout end the run (its error lines are in the logs) or
kills it.

The faults (what really happens with gloo on torch 2.13 is in each docstring):
``sleep``, ``gil``, ``extra``, ``mismatch``, ``exit``, ``subgroup``, ``device``, ``device2``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: gloo's collective timeout: long enough for the capture, short enough to end the run.
GLOO_TIMEOUT_S = 25
#: How long the driver waits for a rank's dump before noting that none came.
DUMP_WAIT_S = 5.0
#: How long a fault holds its rank (longer than the timeout: torchrun's teardown ends it).
HOLD_S = 90

#: fault → number of ranks.
FAULTS = {"sleep": 3, "gil": 3, "extra": 3, "mismatch": 4, "exit": 3, "subgroup": 4}


# --- the ranks' side ------------------------------------------------------------------------


def _marker(ctl: Path, rank: int, **fields: object) -> None:
    """Tell the driver that this rank reached its blocking call (and its pid)."""
    tmp = ctl / f".stuck_{rank}.tmp"
    tmp.write_text(json.dumps({"pid": os.getpid(), **fields}))
    tmp.rename(ctl / f"stuck_{rank}")


def _dump_thread(ctl: Path, hang: Path, rank: int, *, pickles: Path | None) -> None:
    """Wait for the driver's request, then write this rank's flight-recorder dump(s)."""
    import torch

    c10d = torch._C._distributed_c10d
    while not (ctl / "go").exists():
        time.sleep(0.02)
    if (ctl / f"dumped_{rank}").exists():
        return  # a stopped rank's dump was taken before it stopped
    _dump_json(hang, rank)
    if pickles is not None:
        blob = c10d._dump_fr_trace(
            includeCollectives=True, includeStackTraces=True, onlyActive=False
        )
        (pickles / f"fr_trace_rank_{rank}").write_bytes(blob)
    (ctl / f"dumped_{rank}").touch()


def train_step(t, group=None) -> None:
    """One step of the fake training loop: one collective."""
    import torch.distributed as dist

    dist.all_reduce(t, group=group)


def slow_data_loader() -> None:
    """Fault ``sleep``: rank 2 stalls before its 4th collective (a slow read, a stuck file
    system); ranks 0 and 1 wait in ``all_reduce`` #4 until gloo's timeout."""
    time.sleep(HOLD_S)


def hold_gil() -> None:
    """Fault ``gil``: rank 1 calls a C function that keeps the GIL (``ctypes.PyDLL`` does not
    release it): its dump thread cannot run, so the capture gets its stacks only, where
    py-spy shows ``owns_gil``; ranks 0 and 2 wait in ``all_reduce`` #4."""
    ctypes.PyDLL(None).sleep(HOLD_S)


def log_metrics(t) -> None:
    """Fault ``extra``: only rank 1 reduces its metrics: an extra ``all_reduce`` #4 that no
    other rank issues; ranks 0 and 2 finished their three steps and idle."""
    import torch.distributed as dist

    dist.all_reduce(t)


def wait_for_next_epoch() -> None:
    """Where the ranks without the extra collective idle (``extra``)."""
    time.sleep(HOLD_S)


def _fault_sleep(rank: int, ctl: Path, t) -> None:
    _marker(ctl, rank)
    if rank == 2:
        slow_data_loader()
    else:
        train_step(t)


def _fault_gil(rank: int, ctl: Path, t) -> None:
    _marker(ctl, rank)
    if rank == 1:
        hold_gil()
    else:
        train_step(t)


def _fault_extra(rank: int, ctl: Path, t) -> None:
    _marker(ctl, rank)
    if rank == 1:
        log_metrics(t)
    else:
        wait_for_next_epoch()


def _fault_mismatch(rank: int, ctl: Path, t) -> None:
    """Fault ``mismatch``: at ``all_reduce`` #4 rank 1 passes 2 elements, the others 4. gloo
    completes it on rank 1 (with a wrong sum) and ranks 0, 2, 3 wait for the bytes that never
    come. (With 8 elements on rank 1 instead, its peer aborts at once: "Received data size
    doesn't match expected size".)"""
    import torch

    _marker(ctl, rank)
    train_step(torch.ones(2) if rank == 1 else t)
    if rank == 1:
        wait_for_next_epoch()


def _fault_exit(rank: int, ctl: Path, t) -> None:
    """Fault ``exit``: rank 2 exits (code 3) before its 4th collective. With gloo the others do
    not hang: their ``all_reduce`` #4 fails at once ("Connection reset by peer") and the
    recorder marks it retired; they keep their process (as a capture would find them before
    exiting) so the dumps can be read. With NCCL they would wait in #4."""
    if rank == 2:
        _marker(ctl, rank, exited=3)
        os._exit(3)
    try:
        train_step(t)
    except RuntimeError as exc:
        print(f"rank {rank}: all_reduce failed: {exc}", file=sys.stderr, flush=True)
    _marker(ctl, rank)
    wait_for_next_epoch()


def _fault_subgroup(rank: int, ctl: Path, t) -> None:
    """Fault ``subgroup``: expert-parallel groups [0, 1] and [2, 3] (``new_group``). Each step
    runs an ``all_reduce`` on the default group, then an ``all_to_all`` in the rank's expert
    group; in the 3rd step rank 3 stalls before its ``all_to_all``: rank 2 waits in it, ranks 0
    and 1 go on to the 4th step's ``all_reduce`` and wait there."""
    import torch
    import torch.distributed as dist

    groups = [dist.new_group([0, 1], group_desc="expert_parallel")]
    groups.append(dist.new_group([2, 3], group_desc="expert_parallel"))
    ep = groups[rank // 2]
    x = torch.arange(4.0)
    for step in range(1, 4):
        train_step(t)
        if step == 3:
            _marker(ctl, rank)
            if rank == 3:
                slow_data_loader()
        dispatch(x, ep)
    train_step(t)


def dispatch(x, group) -> None:
    """The expert-parallel exchange of ``subgroup``."""
    import torch
    import torch.distributed as dist

    dist.all_to_all_single(torch.empty_like(x), x, group=group)


def _dump_json(hang: Path, rank: int) -> None:
    import torch

    data = torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
    (hang / f".fr_{rank}.tmp").write_bytes(data)
    (hang / f".fr_{rank}.tmp").rename(hang / f"fr_{rank}.json")


def _stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("T", "t")


def _parallel_groups():
    """``device``/``device2``: tensor-parallel groups [0, 1], [2, 3] and data-parallel groups
    [0, 2], [1, 3] (every rank creates every group, in the same order)."""
    import torch.distributed as dist

    tp = [dist.new_group(r, group_desc="tensor_parallel") for r in ([0, 1], [2, 3])]
    dp = [dist.new_group(r, group_desc="data_parallel") for r in ([0, 2], [1, 3])]
    return tp, dp


def device_fault(ctl: Path, rank: int, work) -> None:
    """A faulted device's stand-in: the rank issued its collective (``work``, queued on
    gloo's worker) and stops for good before it can finish — SIGSTOP, the way a rank whose
    GPU died keeps its process but never completes a collective again. A stopped process
    answers no dump, so it takes its own first: its flight recorder says exactly what it
    would say later (the entry ``scheduled``, not retired), and nothing changes once it is
    stopped. Its peers send it their part only once it has stopped."""
    _dump_json(Path(os.environ["HANG_OUT"]) / "hang", rank)
    (ctl / f"dumped_{rank}").touch()
    _marker(ctl, rank, stopped=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    work.wait()  # never returns: the driver kills the stopped rank


def _wait_stopped(ctl: Path, rank: int) -> None:
    """Wait until ``rank`` has stopped (the driver's marker names its pid)."""
    marker = ctl / f"stuck_{rank}"
    while not (marker.exists() and _stopped(json.loads(marker.read_text())["pid"])):
        time.sleep(0.05)


def _device_steps(rank: int, ctl: Path, t, faulted: dict[int, int]) -> None:
    """Two steps of tensor-parallel ``broadcast`` (from the group's other rank to the faulted
    one), data-parallel ``all_reduce`` and default ``all_reduce``; in the third, each faulted
    rank (→ the rank that broadcasts to it) stops after issuing its ``broadcast``."""
    import torch
    import torch.distributed as dist

    tp, dp = _parallel_groups()
    mine_tp, mine_dp = tp[rank // 2], dp[rank % 2]
    peer = rank ^ 1
    src = next((s for f, s in faulted.items() if rank in (f, s)), min(rank, peer))
    x = torch.arange(4.0)
    for step in range(1, 4):
        if step == 3 and rank in faulted:
            work = dist.broadcast(x, src=src, group=mine_tp, async_op=True)
            device_fault(ctl, rank, work)
        if step == 3 and peer in faulted:
            _wait_stopped(ctl, peer)  # its part goes to a rank that has stopped
        dist.broadcast(x, src=src, group=mine_tp)
        if step == 3:
            _marker(ctl, rank)  # the next collective that needs a stopped rank blocks
        dist.all_reduce(x, group=mine_dp)
        train_step(t)


def _fault_device(rank: int, ctl: Path, t) -> None:
    """Fault ``device``: rank 1's "device" faults in tensor-parallel ``broadcast`` #3 (see
    :func:`device_fault`): rank 0 completes it, goes on, and waits in the default group's
    ``all_reduce``; rank 3 waits in data-parallel ``all_reduce`` #3 for rank 1, rank 2 in the
    default group."""
    _device_steps(rank, ctl, t, {1: 0})


def _fault_device2(rank: int, ctl: Path, t) -> None:
    """Fault ``device2``: two independent faults in different groups — rank 1 in
    tensor-parallel group [0, 1] and rank 2 in [2, 3], both in ``broadcast`` #3; ranks 0 and
    3 complete it and wait in their data-parallel ``all_reduce`` #3."""
    _device_steps(rank, ctl, t, {1: 0, 2: 3})


#: The device faults' recordings (their code comes last, so the lines the goldens' frames
#: name above stay where they were recorded).
FAULTS |= {"device": 4, "device2": 4}


def worker(fault: str) -> None:
    """One rank of a recording: logs to its own files, three steps, then the fault."""
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    out, ctl = Path(os.environ["HANG_OUT"]), Path(os.environ["HANG_CTL"])
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        log = os.open(
            out / f"rank{rank}.{stream}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644
        )
        os.dup2(log, fd)
        os.close(log)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=GLOO_TIMEOUT_S))
    pickles = out.parent / "pickle" if fault == "sleep" else None
    threading.Thread(
        target=_dump_thread,
        args=(ctl, out / "hang", rank),
        kwargs={"pickles": pickles},
        name="fr-dump",
        daemon=True,
    ).start()
    t = torch.ones(4)
    if fault not in ("subgroup",):
        for _ in range(3):
            train_step(t)
    print(f"rank {rank}: fault {fault}", flush=True)
    globals()[f"_fault_{fault}"](rank, ctl, t)


# --- the driver -----------------------------------------------------------------------------


def _wait(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("record.py needs py-spy: pip install py-spy")
    return found


def record(fault: str, *, torchrun: str, into: Path = HERE, quick: bool = False) -> None:
    """Run one fault under torchrun and write its golden folder."""
    sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for tests.processes
    from tests.processes import alive

    nproc = FAULTS[fault]
    out = into / fault
    shutil.rmtree(out, ignore_errors=True)
    (out / "hang").mkdir(parents=True)
    if fault == "sleep":
        shutil.rmtree(into / "pickle", ignore_errors=True)
        (into / "pickle").mkdir()
    ctl = Path(tempfile.mkdtemp(prefix=f"hang-{fault}-"))
    env = {
        **os.environ,
        "TORCH_FR_BUFFER_SIZE": "2000",
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "HANG_OUT": str(out),
        "HANG_CTL": str(ctl),
    }
    cmd = [torchrun, f"--nproc-per-node={nproc}", "--standalone", "--monitor-interval=60"]
    cmd += [__file__, "--worker", fault]
    with open(ctl / "torchrun.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        markers = [ctl / f"stuck_{r}" for r in range(nproc)]
        if not _wait(lambda: all(m.exists() for m in markers), 120):
            raise SystemExit(f"{fault}: ranks never reached the fault; see {ctl}/torchrun.log")
        info = {r: json.loads(m.read_text()) for r, m in enumerate(markers)}
        time.sleep(1.0)  # the waiters are inside their collective by now
        (ctl / "go").touch()
        host = socket.gethostname()
        for rank in range(nproc):
            pid, notes = info[rank]["pid"], []
            exited = info[rank].get("exited")
            files = []
            if info[rank].get("stopped"):
                # A stopped process answers nothing: its dump was taken right before it
                # stopped, and py-spy would wait on it.
                files.append(f"hang/fr_{rank}.json")
                notes.append("stopped (SIGSTOP) before the capture: no stacks")
            elif exited is None and alive(pid):
                # py-spy runs once the dump thread is done (its own frames are not the story);
                # the pickles with stack traces of ``sleep`` take longer than a JSON dump.
                _wait((ctl / f"dumped_{rank}").exists, DUMP_WAIT_S * (3 if fault == "sleep" else 1))
                if (out / "hang" / f"fr_{rank}.json").exists():
                    files.append(f"hang/fr_{rank}.json")
                else:
                    notes.append(f"no dump within {DUMP_WAIT_S:g} s")
                stacks = subprocess.run(
                    [_py_spy(), "dump", "--pid", str(pid), "--json"],
                    capture_output=True,
                    timeout=20,
                )
                if stacks.returncode == 0:
                    (out / "hang" / f"stacks_{rank}.json").write_bytes(stacks.stdout)
                    files.append(f"hang/stacks_{rank}.json")
                else:
                    notes.append(f"py-spy: {stacks.stderr.decode(errors='replace').strip()}")
            else:
                notes.append("the process had exited before the capture")
            files += [f"rank{rank}.stdout.log", f"rank{rank}.stderr.log"]
            capture = {"rank": rank, "host": host, "pid": pid, "notes": notes}
            capture |= {"exited": exited, "files": files}
            (out / "hang" / f"capture_{rank}.json").write_text(json.dumps(capture, indent=1))
        # gloo's timeout ends the waiters (their error lines go into the logs); then the rest.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1 if quick else GLOO_TIMEOUT_S + 20)
    finally:
        for rank in range(nproc):
            marker = ctl / f"stuck_{rank}"
            if marker.exists() and json.loads(marker.read_text()).get("stopped"):
                with contextlib.suppress(OSError):
                    os.kill(json.loads(marker.read_text())["pid"], signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(ctl, ignore_errors=True)
    sizes = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{fault}: {len(list(out.rglob('*.json')))} JSON files, {sizes / 1024:.0f} KiB in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("faults", nargs="*", help=f"default: all of {', '.join(FAULTS)}")
    parser.add_argument("--worker", metavar="FAULT", help=argparse.SUPPRESS)
    parser.add_argument("--torchrun", default=str(Path(sys.executable).parent / "torchrun"))
    parser.add_argument("--out", type=Path, default=HERE, help="where the folders go")
    parser.add_argument(
        "--quick", action="store_true", help="stop the run after the capture (no timeout lines)"
    )
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    unknown = sorted(set(args.faults) - set(FAULTS))
    if unknown:
        parser.error(f"unknown faults {unknown}; choose from {', '.join(FAULTS)}")
    _py_spy()
    for fault in args.faults or FAULTS:
        record(fault, torchrun=args.torchrun, into=args.out, quick=args.quick)


if __name__ == "__main__":
    main()
