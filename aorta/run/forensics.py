"""Hang forensics: every trial is armed, and a stuck one gives its evidence before the kill.

Arming (:meth:`Capture.arming_env`, in the trial's environment unless it sets them itself):
PyTorch's flight recorder (``TORCH_FR_BUFFER_SIZE``; ``TORCH_NCCL_DUMP_ON_TIMEOUT`` and
``TORCH_FR_DUMP_TEMP_FILE`` so NCCL's own watchdog dumps into the trial's ``hang/`` folder;
``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` in a private folder), and aorta's listener
(``aorta/run/frshim/sitecustomize.py`` first on ``PYTHONPATH``): every Python process of the
trial that imports ``torch.distributed`` answers a dump request on an abstract Unix socket.

Capture (:class:`Capture`, the ``before_kill`` of :func:`aorta.run.procs.run_with_deadline`):
when the hang watch fires, the deadline passes, a peer rank stops the trial or the sweep is
interrupted, and before any process is signalled, for every process of the trial:

1. the flight-recorder dump (all listeners at once, within ``DUMP_TIMEOUT_S``; no C++ stacks,
   which can hang a starved process; NCCL's debug pipes are written too);
2. the stack of every Python thread (``py-spy dump --json``, all processes at once, within
   ``STACKS_TIMEOUT_S``), with the GPU tools' answers and the kernel log's GPU lines beside it;
3. the last lines of the rank's logs (the watchdog's lines among them).

Each step has its own deadline, so a capture holds a kill back by at most ``CAPTURE_BOUND_S``
(15 s). The files go into this aorta rank's own folder of the trial, ``hang/rank<N>/``
(:class:`aorta.run.hangfiles.EvidenceDir`: ``fr_<rank>.json``, ``stacks_<rank>.json``,
``capture_<rank>.json``), which no other rank of the node creates, renames or removes;
:attr:`Capture.evidence` holds the same, trimmed to a few kB a rank, for the record: it travels
to rank 0 with the rank's outcome, where :func:`aorta.hang.analyze` says who stopped where.

Nothing a trial (or another user) can reach is trusted: a listener's reply is checked to come
from the process asked (``SO_PEERCRED``) and each of its fields is type-checked (a bad one is
left out with a note, never the end of the capture); folders are opened without following a
link and files read only when regular (a FIFO named like a log is passed over, not waited on).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from aorta import envvars
from aorta.hang import (
    MAX_DUMP_BYTES,
    HangEvidenceError,
    HangReport,
    NodeEvidence,
    RankEvidence,
    analyze,
    parse_dump,
)
from aorta.hang.device import node_lines
from aorta.recipe.blocks import Forensics  # a block's model: not on aorta.recipe's face
from aorta.run.hang import trial_processes
from aorta.run.hangfiles import EvidenceDir, make_pipes_folder, read_regular
from aorta.store.record import RankOutcome, TrialStatus
from aorta.store.rundir import NCCL_DUMP_PREFIX, evidence_name, gpu_evidence_name

__all__ = [
    "CAPTURE_BOUND_S",
    "SHIM_DIR",
    "Capture",
    "Peers",
    "activated",
    "active",
    "incident",
    "request_dump",
    "watchdog_lines",
]

#: The folder whose ``sitecustomize.py`` loads the listener into a trial's Python processes.
SHIM_DIR = Path(__file__).resolve().with_name("frshim")
#: Seconds the listeners have to write their dumps (a healthy one takes ~1 ms).
DUMP_TIMEOUT_S = 4.0
#: Seconds py-spy (and the GPU tools, meanwhile) have for every process of the trial.
STACKS_TIMEOUT_S = 6.0
#: Seconds a rank waits for its peers' captures before it kills: a peer's kill could end a
#: collective this rank's processes are still being read in.
PEERS_TIMEOUT_S = 5.0
#: The most a capture holds a kill back (the three steps' deadlines).
CAPTURE_BOUND_S = DUMP_TIMEOUT_S + STACKS_TIMEOUT_S + PEERS_TIMEOUT_S
#: Python processes read per capture, at most (a trial that forked a thousand workers).
MAX_PROCESSES = 64
#: The record's share of the evidence, per rank: flight-recorder entries per process group,
#: threads, frames per thread, log lines (and characters per line).
KEEP_ENTRIES, KEEP_THREADS, KEEP_FRAMES, KEEP_LINES, LINE_CHARS = 64, 16, 40, 40, 400
#: The end of each log read for its last lines and watchdog lines.
LOG_TAIL_BYTES = 1 << 20
#: The longest reply a listener may send.
MAX_REPLY_BYTES = 64 * 1024
#: A listener reply's numeric fields, and the smallest value each may take.
_REPLY_INTS = {"rank": 0, "world_size": 1, "bytes": 0, "pid": 1}

_WATCHDOG = re.compile(
    r"watchdog|WorkNCCL\(|WorkGloo|last enqueued|last completed|collective operation timeout"
    r"|Timeout\(ms\)|ProcessGroupNCCL|NCCL error|RCCL|flight recorder",
    re.IGNORECASE,
)
_GPU_LINE = re.compile(r"NVRM|Xid|amdgpu|kfd|hsa|gpu|nvidia", re.IGNORECASE)
_PTRACE = ("Operation not permitted", "Permission denied", "ptrace")


class Peers(Protocol):
    """The other ranks of a distributed trial, as the capture sees them."""

    def announce(self, why: str) -> None:
        """Tell the peers to take their evidence now (this rank found the trial stuck)."""

    def captured(self) -> None:
        """This rank's evidence is taken."""

    def wait_captured(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until every rank took its evidence or ended."""


def watchdog_lines(lines: Sequence[str]) -> list[str]:
    """The lines of a log that PyTorch's watchdogs and the collectives' libraries write.

    >>> watchdog_lines(["step 3", "[rank1]:[E] Watchdog caught collective operation timeout: "
    ...                 "WorkNCCL(SeqNum=12, OpType=ALLREDUCE)"])
    ['[rank1]:[E] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE)']
    """
    return [line for line in lines if _WATCHDOG.search(line)]


def _tail_lines(path: Path, *, limit: int = LOG_TAIL_BYTES) -> list[str]:
    """The last lines of a log: a regular file only, never through a link, never a FIFO."""
    data = read_regular(path, limit, tail=True)
    if data is None:
        return []
    lines = data.decode(errors="replace").splitlines()
    return lines[1:] if len(data) >= limit and lines else lines


def _clip(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


def _proc_facts(pid: int) -> dict[str, Any]:
    facts: dict[str, Any] = {"pid": pid}
    with contextlib.suppress(OSError):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        facts["cmdline"] = " ".join(a.decode(errors="replace") for a in argv if a)[:300]
    with contextlib.suppress(OSError):
        facts["exe"] = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    with contextlib.suppress(OSError):
        env = dict(
            e.split(b"=", 1)
            for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if b"=" in e
        )
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            raw = env.get(name.encode())
            if raw is not None and raw.isdigit():
                facts[name.lower()] = int(raw)
    return facts


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def _is_python(facts: Mapping[str, Any]) -> bool:
    exe = str(facts.get("exe", ""))
    first = str(facts.get("cmdline", "")).split(" ", 1)[0]
    return exe.startswith("python") or os.path.basename(first).startswith("python")


def checked_reply(got: Any) -> dict[str, Any]:
    """A listener's reply with only the fields it may have, each of its type (a number where
    a number belongs, within bounds); whatever else it said is left out and named in
    ``error``, so a bad reply costs its own fields, never the capture.

    >>> checked_reply({"rank": 3, "world_size": 8, "bytes": 10})
    {'rank': 3, 'world_size': 8, 'bytes': 10}
    >>> checked_reply({"rank": "x", "bytes": 5})["error"]
    "the listener's reply had an invalid rank (left out)"
    """
    if not isinstance(got, dict):
        return {"error": f"the listener's reply is not a JSON object ({type(got).__name__})"}
    out: dict[str, Any] = {}
    bad = []
    for key, low in _REPLY_INTS.items():
        value = got.get(key)
        if value is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and low <= value < 2**31:
            out[key] = value
        else:
            bad.append(key)
    notes = []
    error = got.get("error")
    if isinstance(error, str):
        notes.append(_clip(error))
    elif error is not None:
        bad.append("error")
    if bad:
        notes.append(f"the listener's reply had an invalid {', '.join(bad)} (left out)")
    if notes:
        out["error"] = "; ".join(notes)
    return out


def _peer(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process that holds the other end of a connected Unix socket."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid


def request_dump(name: str, deadline: float, wait_s: float) -> dict[str, Any]:
    """Ask the listener ``name`` (``aorta-fr.<token>.<pid>``) to write its flight-recorder
    dump (into the trial's ``AORTA_FR_DIR``, as ``.fr.<token>.<pid>.json``) before
    ``deadline`` (a ``time.monotonic()`` value, ``wait_s`` from now). Returns its reply
    (``rank``, ``world_size``, ``bytes`` or ``error``: :func:`checked_reply`) with
    ``listener``: ``False`` when the process has none — or when the socket of that name is
    held by another process (``SO_PEERCRED``: anyone may bind an abstract name first), which is
    then not asked.

    >>> request_dump("aorta-fr.none.1", time.monotonic() + 1, 1)
    {'listener': False}
    """
    expected = name.rsplit(".", 1)[-1]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            sock.connect("\0" + name)
        except OSError:
            return {"listener": False}
        pid, uid = _peer(sock)
        if (expected.isdigit() and pid != int(expected)) or uid not in (0, os.getuid()):
            return {
                "listener": False,
                "error": f"the listener's name is held by another process (pid {pid}, uid "
                f"{uid}): not asked",
            }
        sock.sendall(b"dump\n")
        reply = b""
        while not reply.endswith(b"\n") and len(reply) <= MAX_REPLY_BYTES:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
        if len(reply) > MAX_REPLY_BYTES:
            return {
                "listener": True,
                "error": f"the listener's reply passed {MAX_REPLY_BYTES} bytes",
            }
        return {"listener": True, **checked_reply(json.loads(reply or b"{}"))}
    except TimeoutError:
        return {
            "listener": True,
            "error": f"no flight-recorder dump within {wait_s:.0f} s (the interpreter ran "
            "no Python code: the GIL held in a C call, or the process stopped)",
        }
    except (OSError, ValueError) as exc:
        return {"listener": True, "error": f"dump request failed: {exc}"}
    finally:
        sock.close()


def _py_spy() -> str | None:
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


def _ptrace_note(text: str) -> str:
    if any(word in text for word in _PTRACE):
        return (
            "py-spy: ptrace not permitted here (a container without SYS_PTRACE, or "
            "kernel.yama.ptrace_scope > 0 for another user's process): no stacks"
        )
    return "py-spy: " + (text.strip().splitlines() or ["failed"])[-1][:300]


def _run_all(
    argvs: Mapping[Any, Sequence[str]], deadline: float
) -> dict[Any, tuple[int | None, str, str]]:
    """Run every argv at once; (exit code or None when killed at the deadline, out, err)."""
    started: dict[Any, subprocess.Popen[bytes]] = {}
    out: dict[Any, tuple[int | None, str, str]] = {}
    for key, argv in argvs.items():
        try:
            started[key] = subprocess.Popen(
                list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            out[key] = (127, "", str(exc))
    for key, proc in started.items():
        try:
            o, e = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            out[key] = (proc.returncode, o.decode(errors="replace"), e.decode(errors="replace"))
        except subprocess.TimeoutExpired:
            proc.kill()
            o, e = proc.communicate()
            out[key] = (None, o.decode(errors="replace"), e.decode(errors="replace"))
    return out


def _trim_dump(dump: Mapping[str, Any]) -> dict[str, Any]:
    entries = dump.get("entries") or []
    by_group: dict[str, list[Any]] = {}
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, dict):
            key = json.dumps(e.get("process_group"), default=str)
            by_group.setdefault(key, []).append(e)
    kept = [e for group in by_group.values() for e in group[-KEEP_ENTRIES:]]
    kept.sort(key=lambda e: e.get("record_id") or 0)
    return {**{k: v for k, v in dump.items() if k != "entries"}, "entries": kept}


def _trim_stacks(threads: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for t in list(threads)[:KEEP_THREADS]:
        frames = [
            {k: f.get(k) for k in ("name", "filename", "short_filename", "line")}
            for f in (t.get("frames") or [])[:KEEP_FRAMES]
            if isinstance(f, dict)
        ]
        out.append(
            {
                **{k: t.get(k) for k in ("thread_name", "os_thread_id", "active", "owns_gil")},
                "frames": frames,
            }
        )
    return out


class Capture:
    """One trial's evidence taker on this rank: built before the trial, armed through its
    environment, called (``before_kill``) before its processes are killed.

    Building it starts nothing. :meth:`arming_env` gives the variables to run the trial with;
    calling the object takes the evidence once (later calls do nothing); :attr:`evidence` then
    holds what the record keeps; :meth:`close` removes the private folder of NCCL's pipes.
    """

    def __init__(
        self,
        options: Forensics,
        *,
        folder: Path,
        token: str,
        rank: int,
        local_rank: int,
        host: str,
        logs: Sequence[Path],
        peers: Peers | None = None,
        dump_timeout_s: float = DUMP_TIMEOUT_S,
        stacks_timeout_s: float = STACKS_TIMEOUT_S,
        py_spy: str | None = None,
    ) -> None:
        self.options = options
        self.dump_timeout_s, self.stacks_timeout_s = dump_timeout_s, stacks_timeout_s
        #: The py-spy binary (default: beside this Python, else on ``PATH``).
        self.py_spy = py_spy if py_spy is not None else _py_spy()
        self.folder = Path(folder)
        self.token = token
        self.rank, self.local_rank = rank, local_rank
        self.host = host
        self.logs = [Path(p) for p in logs]
        self.peers = peers
        #: This rank's own evidence folder in the trial (``hang/rank<N>/``).
        self.dir = EvidenceDir(self.folder, rank)
        #: What the record keeps, one dict per rank (:class:`aorta.hang.RankEvidence`'s fields).
        self.evidence: list[RankEvidence] = []
        #: This node's GPU evidence (its first local rank takes it), carried on each rank's
        #: evidence to the record: the lines reach the page without ``gpu_<host>.txt``.
        self.node: NodeEvidence | None = None
        #: Why the capture took nothing, when it ran and something went wrong.
        self.failure: str | None = None
        #: Why the capture ran (``hang``, ``deadline``, ``stopped``, ``interrupted``), once it did.
        self.reason: str | None = None
        #: Seconds the capture took.
        self.seconds: float | None = None
        #: Each log's size when aorta decided to kill the trial (first call, forensics on or
        #: off): what the job printed after aorta's signal is not its cause (signatures).
        self.log_sizes: dict[str, int] | None = None
        self._pipes: Path | None = None
        self._lock = threading.Lock()

    @property
    def hang_dir(self) -> Path:
        """This rank's evidence folder (``<trial>/hang/rank<N>/``)."""
        return self.dir.path

    def arming_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The variables that arm the trial, given the environment it would run with: none
        of PyTorch's that ``environ`` sets already (the recipe's choice stands)."""
        o = self.options
        if not (o.enabled and o.flight_recorder):
            return {}
        self._pipes = make_pipes_folder()
        wanted = {
            "TORCH_FR_BUFFER_SIZE": str(o.buffer_size),
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
            "TORCH_FR_DUMP_TEMP_FILE": str(self.hang_dir / NCCL_DUMP_PREFIX),
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(self._pipes / "pipe_rank_"),
        }
        env = {k: v for k, v in wanted.items() if k not in environ}
        # NCCL's dump and the listener's write there, neither creates the folder. A trial
        # folder the sweep cannot write (a link a former trial left) arms nothing on disk.
        with contextlib.suppress(OSError):
            self.dir.make()
        rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p != str(SHIM_DIR)]
        env["PYTHONPATH"] = os.pathsep.join([str(SHIM_DIR), *(p for p in rest if p)])
        env[envvars.FR_LISTEN] = self.token
        env[envvars.FR_DIR] = str(self.hang_dir)
        return env

    def close(self) -> None:
        """After the trial: remove the pipes' folder, what a listener wrote once nobody
        waited any more (a rank that held the GIL answers when the kill frees it), and this
        rank's evidence folder — then ``hang/`` — if it stayed empty. Each step on its own:
        none can fail the others or the trial (another rank may have removed ``hang/``)."""
        if self._pipes is not None:
            shutil.rmtree(self._pipes, ignore_errors=True)
            self._pipes = None
        with contextlib.suppress(OSError):
            for late in self.dir.names():
                if late.startswith(f".fr.{self.token}."):
                    self.dir.unlink(late)
        self.dir.remove_if_empty()  # armed for NCCL's dump, which never came

    def __call__(self, root: int, reason: str) -> None:
        """Take the evidence of ``root``'s trial (``reason``: why it is about to be killed)."""
        with self._lock:
            if self.log_sizes is None:
                self.log_sizes = _sizes(self.logs)
            if self.reason is not None or not self.options.enabled:
                return
            self.reason = reason
        start = time.monotonic()
        # Interrupted (Ctrl-C, or a launcher's SIGTERM with SIGKILL ~5 s behind it): a quick
        # look, and no waiting for peers, which are being stopped too.
        quick = reason == "interrupted"
        dump_s = min(self.dump_timeout_s, 2.0) if quick else self.dump_timeout_s
        stacks_s = min(self.stacks_timeout_s, 2.0) if quick else self.stacks_timeout_s
        if self.peers is not None and reason in ("hang", "deadline"):
            with contextlib.suppress(Exception):
                self.peers.announce(reason)
        try:
            self._take(root, reason, dump_s, stacks_s)
        except Exception as exc:  # never the kill's delay's end: say why nothing came
            self.failure = f"the capture failed: {type(exc).__name__}: {_clip(str(exc))}"
        finally:
            self.seconds = time.monotonic() - start
            if self.peers is not None and not quick:
                with contextlib.suppress(Exception):
                    self.peers.captured()
                    self.peers.wait_captured(
                        min(PEERS_TIMEOUT_S, max(0.0, start + CAPTURE_BOUND_S - time.monotonic()))
                    )

    # -- the steps ----------------------------------------------------------------------------

    def _take(self, root: int, reason: str, dump_s: float, stacks_s: float) -> None:
        marker = f"{envvars.TRIAL_TOKEN}={self.token}"
        pids = list(trial_processes(root, marker=marker))
        facts = {pid: _proc_facts(pid) for pid in pids}
        with contextlib.suppress(OSError):  # a link in the way: said by each write's note
            self.dir.make()
        replies = self._dumps(facts, time.monotonic() + dump_s)
        pythons = [p for p in pids if replies.get(p, {}).get("listener") or _is_python(facts[p])][
            :MAX_PROCESSES
        ]
        stacks, notes = self._stacks(pythons, time.monotonic() + stacks_s)
        for pid, reply in replies.items():
            facts[pid].update({k: v for k, v in reply.items() if k in ("rank", "world_size")})
        by_rank = self._assign(root, pythons, facts, replies)
        log_lines = [_clip(line) for p in self.logs for line in _tail_lines(p)]
        tail = log_lines[-KEEP_LINES:]
        marks = [line for line in watchdog_lines(log_lines) if line not in tail][-KEEP_LINES:]
        for rank, pid in sorted(by_rank.items()):
            self._write_rank(rank, pid, reason, facts, replies, stacks, notes, marks + tail, pids)
        for reply in replies.values():  # dumps of processes that are no rank
            with contextlib.suppress(OSError):
                self.dir.unlink(reply["name"])

    def _dumps(
        self, facts: Mapping[int, dict[str, Any]], deadline: float
    ) -> dict[int, dict[str, Any]]:
        if not self.options.flight_recorder:
            return {}
        if self._pipes is not None:  # NCCL's own trigger: one byte into each rank's pipe
            for pipe in self._pipes.glob("pipe_rank_*"):
                with contextlib.suppress(OSError):
                    fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
                    try:
                        os.write(fd, b"1")
                    finally:
                        os.close(fd)
        replies: dict[int, dict[str, Any]] = {}
        started = time.monotonic()

        def ask(pid: int) -> None:
            got = request_dump(f"aorta-fr.{self.token}.{pid}", deadline, deadline - started)
            replies[pid] = {**got, "name": f".fr.{self.token}.{pid}.json"}

        threads = [threading.Thread(target=ask, args=(pid,), daemon=True) for pid in facts]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()) + 0.5)
        return {pid: replies[pid] for pid in facts if pid in replies}

    def _stacks(
        self, pids: Sequence[int], deadline: float
    ) -> tuple[dict[int, list[Any]], dict[int, str]]:
        stacks: dict[int, list[Any]] = {}
        notes: dict[int, str] = {}
        # The node's GPU tools run beside py-spy, in the same bounded time, and without it
        # too: a node's Xid is its evidence whether or not py-spy is installed.
        gpu = self._gpu_argvs() if self.local_rank == 0 else {}
        spy = self.py_spy if self.options.stacks and pids else None
        if self.options.stacks and pids and not spy:
            notes = dict.fromkeys(pids, "py-spy is not installed (pip install py-spy): no stacks")
        native = ["--native"] if self.options.native else []
        argvs: dict[Any, Sequence[str]] = {
            pid: [spy, "dump", "--pid", str(pid), "--json", *native] for pid in pids if spy
        }
        started = time.monotonic()
        done = _run_all({**argvs, **gpu}, deadline) if argvs or gpu else {}
        for pid in argvs:
            code, out, err = done[pid]
            if code == 0:
                with contextlib.suppress(ValueError):
                    stacks[pid] = json.loads(out)
                    continue
            if code is None:
                notes[pid] = f"py-spy: no stacks within {deadline - started:.0f} s"
            elif native and "native" in err.lower():
                notes[pid] = "py-spy --native failed here; " + _ptrace_note(err)
            elif not _alive(pid):
                notes[pid] = "the process exited before its stacks were read"
            else:
                notes[pid] = _ptrace_note(err or out)
        if gpu:
            self._write_gpu({k: v for k, v in done.items() if k in gpu})
        return stacks, notes

    def _gpu_argvs(self) -> dict[str, list[str]]:
        argvs: dict[str, list[str]] = {}
        for tool in ("nvidia-smi", "amd-smi"):
            path = shutil.which(tool)
            if path:
                argvs[tool] = [path] if tool == "nvidia-smi" else [path, "metric"]
        dmesg = shutil.which("dmesg")
        if argvs and dmesg:
            argvs["dmesg"] = [dmesg, "--ctime"]
        return argvs

    def _write_gpu(self, done: Mapping[str, tuple[int | None, str, str]]) -> None:
        parts = []
        for tool, (code, out, err) in sorted(done.items()):
            if tool == "dmesg":
                lines = [line for line in out.splitlines() if _GPU_LINE.search(line)][-50:]
                body = "\n".join(lines) if code == 0 else f"(not readable: {err.strip()[:200]})"
            else:
                body = out if code == 0 else f"(exit {code}: {err.strip()[:200]})"
            parts.append(f"$ {tool}\n{body.rstrip()}\n")
        text = "\n".join(parts)
        name = gpu_evidence_name(self.host)
        written = ""  # not written (a link in the way): the lines still go to the record
        with contextlib.suppress(OSError):
            written = self.dir.write(name, text)
        self.node = NodeEvidence(self.host, written, node_lines(text.splitlines()))

    def _assign(
        self,
        root: int,
        pythons: Sequence[int],
        facts: Mapping[int, dict[str, Any]],
        replies: Mapping[int, dict[str, Any]],
    ) -> dict[int, int]:
        """rank → the process that is that rank: the one whose process group says so, else
        the topmost carrying ``RANK``, else the trial's first process for this rank."""
        by_rank: dict[int, int] = {}
        for pid in pythons:
            if isinstance(replies.get(pid, {}).get("rank"), int):  # checked_reply's
                by_rank.setdefault(replies[pid]["rank"], pid)
        for pid in pythons:  # in tree order: parents first
            r = facts[pid].get("rank")
            if r is not None and r not in by_rank:
                by_rank[r] = pid
        if not by_rank:
            by_rank[self.rank] = root if root in facts else (pythons[0] if pythons else root)
        return by_rank

    def _from_nccl(
        self, name: str, rank: int, files: list[str], notes: list[str]
    ) -> dict[str, Any] | None:
        """NCCL's own dump (a pickle, read without running it) as ``fr_<rank>.json``, which a
        bundle can carry and redact (a pickle it leaves out)."""
        data = self.dir.read(name, MAX_DUMP_BYTES)
        if data is None:
            notes.append(f"NCCL's dump unreadable: {name} is not a regular file within "
                         f"{MAX_DUMP_BYTES >> 20} MiB")  # fmt: skip
            return None
        try:
            dump = parse_dump(data, name=str(self.hang_dir / name))
        except HangEvidenceError as exc:
            notes.append(f"NCCL's dump unreadable: {exc}")
            return None
        with contextlib.suppress(OSError):
            files.append(self.dir.write(evidence_name("fr", rank), json.dumps(dump, default=str)))
        return _trim_dump(dump)

    def _write_rank(
        self,
        rank: int,
        pid: int,
        reason: str,
        facts: Mapping[int, dict[str, Any]],
        replies: Mapping[int, dict[str, Any]],
        stacks: Mapping[int, list[Any]],
        notes: Mapping[int, str],
        log_lines: list[str],
        pids: Sequence[int],
    ) -> None:
        files: list[str] = []
        rank_notes: list[str] = []
        fr: dict[str, Any] | None = None
        reply = replies.get(pid, {})
        raw = reply.get("name")
        if raw is not None and "bytes" in reply and self.dir.is_file(raw):
            target = evidence_name("fr", rank)
            if reply.get("error"):  # a field of the reply left out (checked_reply)
                rank_notes.append(reply["error"])
            with contextlib.suppress(OSError):
                files.append(self.dir.rename(raw, target))
                data = self.dir.read(target, MAX_DUMP_BYTES)
                with contextlib.suppress(ValueError, RecursionError):
                    got = json.loads(data) if data is not None else None
                    fr = _trim_dump(got) if isinstance(got, dict) else None
        elif self.options.flight_recorder:
            rank_notes.append(
                "the process exited during the capture: no flight-recorder dump"
                if not _alive(pid)
                else reply.get("error")
                or (
                    "no flight-recorder listener in this process (not a Python rank, started "
                    "with -I/-E, or torch.distributed not imported)"
                    if reply.get("listener") is False
                    else "no flight-recorder dump"
                )
            )
        nccl = f"{NCCL_DUMP_PREFIX}{rank}"
        if self.dir.is_file(nccl):
            files.append(self.dir.relative(nccl))
            if fr is None:  # NCCL's watchdog dumped, the listener did not: its pickle as JSON
                fr = self._from_nccl(nccl, rank, files, rank_notes)
        threads = stacks.get(pid)
        if threads is not None:
            with contextlib.suppress(OSError):
                files.append(
                    self.dir.write(evidence_name("stacks", rank), json.dumps(threads, indent=1))
                )
        elif pid in notes:
            rank_notes.append(notes[pid])
        others = [
            {
                **{k: facts[p].get(k) for k in ("pid", "cmdline", "rank")},
                "stacks": _trim_stacks(stacks[p])[:4] if p in stacks else None,
            }
            for p in pids
            if p != pid and (p in stacks or facts[p].get("rank") == rank)
        ]
        evidence: dict[str, Any] = {
            "rank": rank,
            "host": self.host,
            "pid": pid,
            "fr": fr,
            "stacks": _trim_stacks(threads) if threads is not None else None,
            "log_lines": log_lines,
            "notes": rank_notes,
            "files": files,
            "node": self.node,
        }
        capture = {
            **evidence,
            "reason": reason,
            "cmdline": facts.get(pid, {}).get("cmdline"),
            "taken_at": time.time(),
            "others": others,
        }
        capture.pop("fr")
        capture.pop("stacks")
        capture.pop("node")  # its own file holds it
        name = evidence_name("capture", rank)
        files.append(self.dir.relative(name))
        try:
            self.dir.write(name, json.dumps(capture, indent=1, default=str))
        except OSError as exc:
            files.pop()
            rank_notes.append(f"no evidence written to disk: {_clip(str(exc))}")
        # The stacks file, named so that a culprit's frame can point at it (hang/ cannot know
        # this folder's names).
        stacks_file = self.dir.relative(evidence_name("stacks", rank))
        self.evidence.append(
            RankEvidence(**evidence, stacks_file=stacks_file if stacks_file in files else None)
        )


def _sizes(paths: Sequence[Path]) -> dict[str, int]:
    """Each existing file's size now, by path."""
    out = {}
    for p in paths:
        with contextlib.suppress(OSError):
            out[str(p)] = p.stat().st_size
    return out


_ACTIVE: contextvars.ContextVar[Capture | None] = contextvars.ContextVar(
    "aorta_capture", default=None
)


def active() -> Capture | None:
    """The capture of the trial running in this process (an in-process trial that starts
    processes of its own, as the ``command`` workload does, hands it to their deadline)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def activated(capture: Capture | None) -> Iterator[None]:
    """Within the block, :func:`active` is ``capture``."""
    token = _ACTIVE.set(capture)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def incident(outcomes: Sequence[RankOutcome], world_size: int) -> HangReport | None:
    """The record's ``forensics`` for one trial: :func:`aorta.hang.analyze` of every rank's
    evidence, each rank without any (its trial ended before the capture) said so by its
    outcome; ``None`` when no rank took any."""
    if not any(o.evidence for o in outcomes):
        return None
    items: list[RankEvidence] = []
    for o in outcomes:
        if o.evidence:
            items.extend(o.evidence)
        elif o.completed or o.exit_code is not None:
            # Its trial ended before anyone looked: done (0), or crashed with its code.
            code = 0 if o.completed and o.status is TrialStatus.OK else (o.exit_code or 1)
            items.append(
                RankEvidence(
                    rank=o.rank,
                    host=o.host,
                    exited=code,
                    notes=(f"its trial ended: {o.status.value}",),
                )
            )
    # One aorta rank may hold a whole job's ranks (a probe command that runs torchrun itself):
    # then the dumps say how many there are.
    return analyze(items, world_size=world_size if world_size > 1 else None)
