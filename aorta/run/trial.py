"""Running one trial: in this process, or in a fresh worker process.

:func:`execute` is the one definition of a trial's life (construct → ``setup`` → ``run`` →
``cleanup``, which always runs once the object exists) and of how each failure is classified;
both isolation modes use it:

* :func:`run_in_process` applies the cell's overlay to ``os.environ`` and restores it exactly
  afterwards (by diff). Its deadline raises :class:`TrialDeadline` in the main thread
  (SIGALRM), which interrupts Python code; native code stuck past the deadline is a case for
  process isolation (see :class:`Watchdog`).
* :func:`run_in_worker` starts ``python -m aorta.run.worker`` with the overlay already in its
  environment, so variables read at import time take effect, and kills the worker's whole
  process group at the deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aorta import envvars
from aorta.run import procs
from aorta.run.forensics import Capture
from aorta.run.hang import GpuProbe, HangWatch
from aorta.run.orphans import scratch_prefix
from aorta.run.procs import TrialDeadline, TrialHang
from aorta.run.workload import TrialContext, Workload, WorkloadResult
from aorta.store.record import TrialStatus

__all__ = [
    "Outcome",
    "context_from_dict",
    "context_to_dict",
    "env_overlay",
    "execute",
    "run_in_process",
    "run_in_worker",
]


@dataclass
class Outcome:
    """What a trial produced, before the engine turns it into a :class:`~aorta.store.record.TrialRecord`."""

    status: TrialStatus
    result: WorkloadResult | None = None
    error: str | None = None
    hint: str | None = None
    warnings: list[str] = field(default_factory=list)
    main_work_started: bool = False
    exit_code: int | None = None
    #: Stopped because a peer rank's trial died (the peer holds the cause).
    stopped_by_peer: bool = False
    #: ``hang`` when the trial was killed as hung (status ``timeout``).
    failure_kind: str | None = None
    #: The trial's worker process, start to exit (isolation ``process``); not serialised.
    wall_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "result": self.result.to_dict() if self.result else None,
            "error": self.error,
            "hint": self.hint,
            "warnings": self.warnings,
            "main_work_started": self.main_work_started,
            "exit_code": self.exit_code,
            "stopped_by_peer": self.stopped_by_peer,
            "failure_kind": self.failure_kind,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Outcome:
        return cls(
            status=TrialStatus(d["status"]),
            result=WorkloadResult.from_dict(d["result"]) if d.get("result") else None,
            error=d.get("error"),
            hint=d.get("hint"),
            warnings=list(d.get("warnings") or []),
            main_work_started=bool(d.get("main_work_started")),
            exit_code=d.get("exit_code"),
            stopped_by_peer=bool(d.get("stopped_by_peer")),
            failure_kind=d.get("failure_kind"),
        )


def _describe_exc(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        last = tb[-1]
        text += f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    return text


def execute(
    cls: type[Workload],
    config: Mapping[str, Any],
    ctx: TrialContext,
    *,
    on_phase: Callable[[str], None] | None = None,
) -> Outcome:
    """Construct, set up, run and clean up one workload object; classify what happened.

    * constructor or ``setup()`` raised → ``setup_failed``;
    * ``run()`` raised → ``workload_failed`` (the workload crashed doing its work);
    * ``run()`` returned ``passed=False`` → ``workload_failed``;
    * a ``cleanup()`` error is kept as a warning; the deadline → ``timeout``.

    ``on_phase`` is called with ``"setup"`` and ``"run"`` as each begins (the worker records
    it, so a crash can be blamed on the right phase).
    """
    warnings: list[str] = []
    try:
        workload = cls(config, ctx)
    except TrialDeadline:
        return Outcome(TrialStatus.TIMEOUT, error="deadline passed while constructing the workload")
    except Exception as exc:
        return Outcome(TrialStatus.SETUP_FAILED, error=_describe_exc(exc))
    warnings.extend(workload.warnings)
    outcome: Outcome
    try:
        try:
            if on_phase is not None:
                on_phase("setup")
            workload.setup()
        except TrialDeadline:
            return Outcome(
                TrialStatus.TIMEOUT, error="deadline passed during setup()", warnings=warnings
            )
        except Exception as exc:
            return Outcome(TrialStatus.SETUP_FAILED, error=_describe_exc(exc), warnings=warnings)
        try:
            if on_phase is not None:
                on_phase("run")
            result = workload.run()
        except TrialHang as exc:
            outcome = Outcome(
                TrialStatus.TIMEOUT,
                error=f"hang: {exc}",
                main_work_started=True,
                failure_kind="hang",
            )
        except TrialDeadline:
            outcome = Outcome(
                TrialStatus.TIMEOUT, error="deadline passed during run()", main_work_started=True
            )
        except Exception as exc:
            outcome = Outcome(
                TrialStatus.WORKLOAD_FAILED, error=_describe_exc(exc), main_work_started=True
            )
        else:
            if not isinstance(result, WorkloadResult):
                outcome = Outcome(
                    TrialStatus.INFRASTRUCTURE_FAILED,
                    error=f"{cls.__name__}.run() returned {type(result).__name__}, not a WorkloadResult",
                    main_work_started=True,
                )
            else:
                status = TrialStatus.OK if result.passed else TrialStatus.WORKLOAD_FAILED
                first = result.failure_details[0] if result.failure_details else None
                outcome = Outcome(
                    status,
                    result=result,
                    error=None
                    if result.passed
                    else (first.message if first else "the workload reported a failure"),
                    hint=first.hint if first else None,
                    main_work_started=result.main_work_started,
                    exit_code=result.exit_code,
                )
                warnings.extend(result.warnings)
    finally:
        try:
            workload.cleanup()
        except TrialDeadline:
            warnings.append("cleanup() was interrupted by the deadline")
        except Exception as exc:
            warnings.append(f"cleanup() raised {_describe_exc(exc)}")
    outcome.warnings = warnings + outcome.warnings
    return outcome


# ------------------------------------------------------------------------------------------
# in-process isolation


@contextlib.contextmanager
def env_overlay(overlay: Mapping[str, str]) -> Iterator[None]:
    """Apply ``overlay`` to ``os.environ``; afterwards restore it exactly, by diff.

    Whatever the trial changed (the overlay, or variables the workload set itself) is put
    back; nothing else is touched, and ``os.environ`` is never cleared.
    """
    before = dict(os.environ)
    os.environ.update(overlay)
    try:
        yield
    finally:
        after = dict(os.environ)
        for key in after.keys() - before.keys():
            del os.environ[key]
        for key, value in before.items():
            if after.get(key) != value:
                os.environ[key] = value


@contextlib.contextmanager
def alarm(deadline: float | None) -> Iterator[None]:
    """Raise :class:`TrialDeadline` in the main thread when ``deadline`` passes (SIGALRM).

    Outside the main thread (some notebook setups) signals cannot be used; the watchdog
    still guards the run. A timer the caller had armed is put back with the time it has left
    (it is held while the trial runs: a process has one real-time timer).
    """
    usable = deadline is not None and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return
    assert deadline is not None

    def _fire(signum: int, frame: Any) -> None:
        raise TrialDeadline()

    previous = signal.signal(signal.SIGALRM, _fire)
    armed = time.monotonic()
    theirs, interval = signal.setitimer(signal.ITIMER_REAL, max(0.001, deadline - armed))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if theirs > 0:  # the caller's own timer (a test runner's, a notebook's) runs on
            left = theirs - (time.monotonic() - armed)
            signal.setitimer(signal.ITIMER_REAL, max(0.001, left), interval)


class Watchdog:
    """Calls ``on_stuck`` if a trial is still running ``grace_s`` after its deadline.

    An in-process trial stuck in native code (a hung collective) cannot be interrupted; the
    engine's ``on_stuck`` records it as a timeout and stops the sweep so it can be resumed.
    The trial's end and ``on_stuck`` exclude each other: a trial that ends while ``on_stuck``
    runs waits for it in ``__exit__`` (the engine's never returns: it ends the process), and
    one that ended first is never called stuck — else both would write the trial's record.
    """

    def __init__(self, deadline: float | None, grace_s: float, on_stuck: Any) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if deadline is not None:
            wait = max(0.0, deadline - time.monotonic()) + grace_s
            self._thread = threading.Thread(target=self._watch, args=(wait, on_stuck), daemon=True)

    def _watch(self, wait: float, on_stuck: Any) -> None:
        if self._done.wait(wait):
            return
        with self._lock:  # the wait timed out; the trial may have ended since
            if not self._done.is_set():
                on_stuck()

    def __enter__(self) -> Watchdog:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done.set()


def run_in_process(
    cls: type[Workload], config: Mapping[str, Any], ctx: TrialContext, overlay: Mapping[str, str]
) -> Outcome:
    """Run a trial in this process under ``overlay`` and ``ctx.deadline``."""
    with env_overlay(overlay):
        try:
            with alarm(ctx.deadline):
                return execute(cls, config, ctx)
        except TrialDeadline:  # fired between execute()'s own handlers
            return Outcome(TrialStatus.TIMEOUT, error="deadline passed")


# ------------------------------------------------------------------------------------------
# process isolation


def context_to_dict(ctx: TrialContext) -> dict[str, Any]:
    d = dict(ctx.__dict__)
    d["artifact_dir"] = str(ctx.artifact_dir) if ctx.artifact_dir else None
    d["env"] = dict(ctx.env)
    d["collect"] = {k: dict(v) for k, v in ctx.collect.items()}
    d["command"] = list(ctx.command) if ctx.command is not None else None
    d["environment"] = dict(ctx.environment)
    return d


def context_from_dict(d: Mapping[str, Any]) -> TrialContext:
    d = dict(d)
    if d.get("artifact_dir"):
        d["artifact_dir"] = Path(d["artifact_dir"])
    known = set(TrialContext.__dataclass_fields__)
    return TrialContext(**{k: v for k, v in d.items() if k in known})


#: File where the worker notes the phase it entered (``setup``, ``run``).
PHASE_FILE = "phase"
_RESULT_FILE = "result.json"


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def workload_ref(cls: type[Workload]) -> dict[str, str]:
    """How a worker finds ``cls``: ``module:QualName`` and the folder its package sits in."""
    module = sys.modules.get(cls.__module__)
    root = ""
    file = getattr(module, "__file__", None) if module is not None else None
    if file:
        root = str(Path(file).resolve().parents[cls.__module__.count(".")])
    return {"name": cls.name, "ref": f"{cls.__module__}:{cls.__qualname__}", "sys_path": root}


def run_in_worker(
    workload: Mapping[str, str],
    config: Mapping[str, Any],
    ctx: TrialContext,
    *,
    env: Mapping[str, str],
    python: str | None = None,
    grace_s: float = procs.DEFAULT_GRACE_S,
    logs: tuple[str, str] = ("stdout.log", "stderr.log"),
    abort: Callable[[], tuple[TrialStatus, str] | None] | None = None,
    capture: Capture | None = None,
) -> Outcome:
    """Run a trial in a fresh ``python -m aorta.run.worker`` whose environment is ``env``.

    The worker's stdout/stderr go to ``logs`` in the trial's artifact dir. At the deadline
    its process group gets SIGTERM, then SIGKILL. ``abort`` is polled while the worker runs:
    a ``(status, reason)`` it returns (a peer rank's trial died) stops the worker at once, and
    the trial takes that status on this rank too. ``capture`` takes the trial's evidence
    before its processes are killed (a hang, the deadline, a peer's stop, an interrupt).
    """
    stop = _WorkerStop(abort, capture)
    scratch = Path(tempfile.mkdtemp(prefix=scratch_prefix()))
    try:
        request = _write_request(scratch, workload, config, ctx)
        art = ctx.artifact_dir or scratch
        art.mkdir(parents=True, exist_ok=True)
        finished = _run_worker(
            [python or sys.executable, "-m", "aorta.run.worker", str(request)],
            ctx,
            env=env,
            art=art,
            logs=logs,
            grace_s=grace_s,
            stop=stop,
        )
        phase, written = _worker_left(scratch)
        outcome = _worker_outcome(finished, phase, written, stop.stop_status, art / logs[1])
        outcome.wall_s = finished.wall_s
        return outcome
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass
class _WorkerStop:
    """Why a running worker is stopped early (a peer's stop via ``abort``, or its hang watch)
    and the evidence ``capture`` takes before the kill."""

    abort: Callable[[], tuple[TrialStatus, str] | None] | None
    capture: Capture | None
    stop_status: list[TrialStatus] = field(default_factory=list)
    hang: HangWatch | None = None

    def stop_when(self) -> str | None:
        """The reason to stop the worker now (a peer's first, then a hang), else ``None``."""
        got = self.abort() if self.abort is not None else None
        if got is None:
            return self.hang() if self.hang is not None else None
        self.stop_status.append(got[0])
        return got[1]

    def before_kill(self, pid: int, why: str) -> None:
        """Take the trial's evidence before its processes are killed."""
        if self.capture is not None:
            # stop_when stopped it: for a peer (stop_status), else because it hung.
            self.capture(
                pid, ("stopped" if self.stop_status else "hang") if why == "stopped" else why
            )


def _write_request(
    scratch: Path, workload: Mapping[str, str], config: Mapping[str, Any], ctx: TrialContext
) -> Path:
    """Write the worker's request (what to run, and where to leave its result and phase)."""
    request = scratch / "request.json"
    request.write_text(
        json.dumps(
            {
                "workload": workload,
                "config": dict(config),
                "context": context_to_dict(ctx),
                "result_path": str(scratch / _RESULT_FILE),
                "phase_path": str(scratch / PHASE_FILE),
            },
            default=str,
        )
    )
    return request


def _run_worker(
    argv: list[str],
    ctx: TrialContext,
    *,
    env: Mapping[str, str],
    art: Path,
    logs: tuple[str, str],
    grace_s: float,
    stop: _WorkerStop,
) -> procs.Finished:
    """Start the worker, its output appended to ``logs`` in ``art``; wait for its end or stop."""
    with open(art / logs[0], "ab") as out, open(art / logs[1], "ab") as err:
        proc = procs.spawn(argv, env=env, stdout=out, stderr=err)
        if ctx.hang_after:
            token = env.get(envvars.TRIAL_TOKEN)
            stop.hang = HangWatch(
                proc.pid,
                [art / logs[0], art / logs[1]],
                hang_after=ctx.hang_after,
                folders=[art],
                marker=f"{envvars.TRIAL_TOKEN}={token}" if token else None,
                gpu=GpuProbe(),
            )
        return procs.run_with_deadline(
            proc,
            deadline=ctx.deadline,
            grace_s=grace_s,
            stop_when=stop.stop_when if stop.abort or stop.hang is not None else None,
            before_kill=stop.before_kill if stop.capture is not None else None,
        )


def _worker_left(scratch: Path) -> tuple[str, Outcome | None]:
    """What the worker left in ``scratch``: the phase it reached and its result, if written."""
    try:
        phase = (scratch / PHASE_FILE).read_text().strip()
    except OSError:
        phase = ""
    result_path = scratch / _RESULT_FILE
    if not result_path.exists():
        return phase, None
    try:
        return phase, Outcome.from_dict(json.loads(result_path.read_text()))
    except (ValueError, KeyError) as exc:
        return phase, Outcome(
            TrialStatus.INFRASTRUCTURE_FAILED, error=f"unreadable worker result: {exc}"
        )


def _worker_outcome(
    finished: procs.Finished,
    phase: str,
    written: Outcome | None,
    stop_status: list[TrialStatus],
    stderr: Path,
) -> Outcome:
    """What a worker's trial came to: its own result, or why it has none (hang, a peer's
    stop, the deadline, a crash)."""
    if finished.stopped and not stop_status and (written is None or written.result is None):
        return Outcome(
            TrialStatus.TIMEOUT,
            error=f"hang during {phase or 'start'}(): {finished.stopped}",
            main_work_started=phase == "run",
            failure_kind="hang",
        )
    if finished.stopped and (written is None or written.result is None):
        # A peer's trial died and this worker was stopped for it: the peer's status is the
        # cause, whatever the worker wrote on its way out.
        return Outcome(
            stop_status[0] if stop_status else TrialStatus.INFRASTRUCTURE_FAILED,
            error=f"stopped during {phase or 'start'}(): {finished.stopped}",
            main_work_started=phase == "run",
            stopped_by_peer=True,
        )
    if written is not None:
        if finished.timed_out and written.status is TrialStatus.OK:
            # The result landed, then the worker hung on the way out (atexit, a thread).
            written.warnings.append("the worker had to be killed after writing its result")
        return written
    if finished.timed_out:
        where = f"during {phase}()" if phase else "while the worker started"
        return Outcome(
            TrialStatus.TIMEOUT,
            error=f"deadline passed {where}; the worker's process group was killed",
            main_work_started=phase == "run",
        )
    code = finished.returncode
    how = f"killed by {_signal_name(code)}" if code is not None and code < 0 else f"exited {code}"
    tail = _tail(stderr)
    detail = f"{how}" + (f" — {tail}" if tail else "")
    status = {"run": TrialStatus.WORKLOAD_FAILED, "setup": TrialStatus.SETUP_FAILED}.get(
        phase, TrialStatus.INFRASTRUCTURE_FAILED
    )
    where = f"during {phase}()" if phase else "before the workload started"
    return Outcome(
        status,
        error=f"the worker crashed {where}: {detail}",
        hint="see stderr.log in the trial folder",
        main_work_started=phase == "run",
        exit_code=code,
    )


def _tail(path: Path, limit: int = 300) -> str:
    try:
        data = path.read_bytes()[-4096:].decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return data[-1][-limit:] if data else ""
