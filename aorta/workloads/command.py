"""``command``: run the argv given after ``--`` in every trial (probe mode).

The command runs byte-for-byte (no shell) in its own process group with the cell's
environment. Exit code 0 passes; anything else fails the trial (with a hint for 126, 127 and
signals); the deadline kills the whole group. stdout and stderr are kept in the trial folder.
With ``step_time_regex`` every match in stdout is a step time: the named group ``ms``
(milliseconds) or ``s`` (seconds), else the first group, in milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aorta.plugins import (
    TRACE_DIR,
    FailureDetail,
    GpuProbe,
    HangWatch,
    Regex,
    TrialDeadline,
    TrialHang,
    Workload,
    WorkloadResult,
    active_capture,
    compile_regex,
    envvars,
    kill_group,
    run_with_deadline,
    spawn,
)

#: The private file ``env_passthrough_mode: file`` writes the overlay to (``AORTA_ENV_FILE``).
PROBE_ENV_FILE = "probe.env"
#: The ``docker run --env-file`` of a docker environment's trial.
DOCKER_ENV_FILE = "docker.env"

_EXIT_HINTS = {
    126: "exit 126: the command was found but is not executable (permissions?)",
    127: "exit 127: command not found (check PATH and the command's spelling)",
}


def _hint(code: int) -> str | None:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}" + (
            " (a crash: look for a core dump or dmesg)"
            if name in {"SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE"}
            else ""
        )
    if code > 128 and code - 128 in {s.value for s in signal.Signals}:
        return f"exit {code}: probably killed by {signal.Signals(code - 128).name} inside a shell"
    return _EXIT_HINTS.get(code)


def parse_step_times(text: str, pattern: str | Regex) -> list[float]:
    """Step times in ms from every match of ``pattern`` in ``text``.

    ``pattern`` is RE2 (:func:`aorta.regex.compile_regex`): linear in the text, so a
    pattern like ``^(a+)+$`` cannot keep a trial past its deadline.

    >>> parse_step_times("step 1 took 12.5 ms\\nstep 2 took 13 ms", r"took ([0-9.]+) ms")
    [12.5, 13.0]
    >>> parse_step_times("iter 0.25s", r"iter (?P<s>[0-9.]+)s")
    [250.0]
    """
    rx = compile_regex(pattern, text="str") if isinstance(pattern, str) else pattern
    times = []
    for m in rx.finditer(text):
        groups = m.groupdict()
        try:
            if groups.get("ms") is not None:
                times.append(float(groups["ms"]))
            elif groups.get("s") is not None:
                times.append(float(groups["s"]) * 1000.0)
            else:
                times.append(float(m.group(1) if m.groups() else m.group(0)))
        except ValueError:
            continue
    return times


#: Longest piece of a log line matched at once: a trial that prints one 400 MB line must not
#: make the sweep hold it whole (step-time lines are short).
MAX_LINE = 1 << 16


def step_times_from_log(path: Path, pattern: str) -> list[float]:
    """Step times from a log file, read line by line (bounded memory whatever its size)."""
    rx = compile_regex(pattern, text="str")
    times: list[float] = []
    try:
        with open(path, "rb") as fh:
            while chunk := fh.readline(MAX_LINE):
                times += parse_step_times(chunk.decode(errors="replace"), rx)
    except OSError:
        pass
    return times


def docker_argv(
    image: str,
    argv: list[str],
    *,
    env_file: Path,
    mounts: list[Path],
    workdir: Path,
) -> list[str]:
    """The ``docker run`` line that runs ``argv`` in ``image`` with the trial's variables.

    Host networking and IPC (collectives need them), the GPUs of either vendor when present,
    the trial folder and the working directory mounted at the same paths.

    >>> docker_argv("rocm/pytorch:7", ["python", "t.py"], env_file=Path("/r/env"),
    ...             mounts=[Path("/r")], workdir=Path("/w"))[:6]
    ['docker', 'run', '--rm', '--network=host', '--ipc=host', '--env-file=/r/env']
    """
    line = ["docker", "run", "--rm", "--network=host", "--ipc=host", f"--env-file={env_file}"]
    if Path("/dev/kfd").exists():
        line += ["--device=/dev/kfd", "--device=/dev/dri", "--group-add=video"]
    elif Path("/dev/nvidiactl").exists():
        line += ["--gpus=all"]
    for mount in dict.fromkeys(p.resolve() for p in mounts):
        line.append(f"--volume={mount}:{mount}")
    line += [f"--workdir={workdir.resolve()}", image, *argv]
    return line


def write_env_file(path: Path, variables: Mapping[str, str]) -> None:
    """Write ``variables`` as ``KEY=value`` lines (docker's ``--env-file`` format), mode 0600.

    A value with a line break (or another control character) would add a line, setting a
    variable nobody asked for: it is refused with a :class:`ValueError` naming the variable,
    before anything is written. (Recipe values are checked when the recipe loads; this holds
    for the ``AORTA_*`` variables a trial inherits from the sweep's own environment too.)

    >>> import pathlib, tempfile
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "env"
    >>> write_env_file(f, {"A": "1", "AORTA_X": "a\\nB=2"})
    Traceback (most recent call last):
    ValueError: AORTA_X: contains a NUL or newline character, which a process environment cannot carry; not written to an env file
    >>> f.exists()
    False
    """
    for key, value in variables.items():
        if problem := envvars.value_problem(value):
            raise ValueError(f"{key}: {problem}; not written to an env file")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "w") as fh:
        fh.writelines(f"{k}={v}\n" for k, v in variables.items())


class CommandWorkload(Workload):
    name = "command"
    description = "probe mode: run the command after '--'; its exit code is the verdict"
    default_steps = 1
    config_keys = frozenset({"cwd"})
    # The command is the user's: aorta cannot profile inside it. Its traces count when it
    # writes them where a trial's traces go.
    collectors = frozenset()
    collectors_hint = (
        "the command must write its own torch.profiler traces into "
        f"$AORTA_ARTIFACT_DIR/{TRACE_DIR}/ (rank<N>.pt.trace.json.gz) to have them collected"
    )

    supports_docker = True

    def _env_file(self, variables: dict[str, str], name: str) -> Path:
        # docker --env-file format, private (values may be credentials), absolute (the command
        # may cd elsewhere), and removed in cleanup(): secrets must not stay on disk.
        path = self._art.resolve() / name
        self._written.append(path)
        write_env_file(path, variables)
        return path

    def setup(self) -> None:
        ctx = self.context
        if not ctx.command:
            raise ValueError(
                "no command to run: give one after '--' (aorta sweep run --recipe R -- cmd ...)"
            )
        self._art = Path(ctx.artifact_dir) if ctx.artifact_dir else Path.cwd()
        self._art.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        argv = list(ctx.command)
        self._written: list[Path] = []
        if ctx.env_passthrough_mode == "file":
            # The overlay stays in the command's environment and is also written to a private
            # file, for launchers that forward it to remote ranks themselves.
            env[envvars.ENV_FILE] = str(self._env_file(dict(ctx.env), PROBE_ENV_FILE))
        if ctx.environment.get("kind") == "docker":
            aorta_vars = {k: v for k, v in env.items() if k.startswith("AORTA_")}
            env_file = self._env_file(
                {**aorta_vars, **ctx.environment.get("env", {}), **ctx.env}, DOCKER_ENV_FILE
            )
            argv = docker_argv(
                str(ctx.environment["image"]),
                argv,
                env_file=env_file,
                mounts=[self._art, Path(self.config.get("cwd") or Path.cwd())],
                workdir=Path(self.config.get("cwd") or Path.cwd()),
            )
        self._logs: list[Any] = []
        if ctx.isolated:
            stdout = stderr = None  # the worker's own stdout/stderr already are the trial's logs
        else:
            out_name, err_name = ctx.log_names
            stdout = open(self._art / out_name, "ab")  # noqa: SIM115 - closed in cleanup()
            stderr = open(self._art / err_name, "ab")  # noqa: SIM115
            self._logs = [stdout, stderr]
        self._start = time.monotonic()
        # Starting the process is the setup: a command that cannot start is not a failure of
        # the thing being probed (exit codes 127/126 are recorded all the same).
        try:
            self._proc: subprocess.Popen[Any] = spawn(
                argv,
                env=env,
                cwd=self.config.get("cwd"),
                stdout=stdout,
                stderr=stderr,
                new_session=not ctx.isolated,
            )
        except FileNotFoundError:
            raise FileNotFoundError(f"command not found: {ctx.command[0]!r} (exit 127)") from None
        except PermissionError:
            raise PermissionError(
                f"command not executable: {ctx.command[0]!r} (exit 126)"
            ) from None

    def _hang_watch(self) -> HangWatch | None:
        # An isolated command is watched from outside, with its worker (aorta.run.trial).
        ctx = self.context
        if not ctx.hang_after or ctx.isolated:
            return None
        logs = [self._art / name for name in ctx.log_names]
        token = os.environ.get(envvars.TRIAL_TOKEN)  # the trial's overlay is in force here
        return HangWatch(
            self._proc.pid,
            logs,
            hang_after=ctx.hang_after,
            folders=[self._art],
            marker=f"{envvars.TRIAL_TOKEN}={token}" if token else None,
            gpu=GpuProbe(),
        )

    def run(self) -> WorkloadResult:
        isolated = self.context.isolated
        finished = run_with_deadline(
            self._proc,
            # An isolated command's deadline is its worker's, which the engine keeps: it takes
            # the evidence first, then SIGTERMs the worker's group, the command with it. Acting
            # on the same clock here could kill the command before that capture.
            deadline=None if isolated else self.context.deadline,
            kill_tree_on_exit=not isolated,
            stop_when=self._hang_watch(),
            # An isolated command's evidence is taken from outside, with its worker's.
            before_kill=None if isolated else active_capture(),
        )
        for fh in self._logs:
            fh.flush()
        if finished.stopped:
            raise TrialHang(finished.stopped)
        if finished.timed_out:
            raise TrialDeadline()
        code = finished.returncode if finished.returncode is not None else -1
        steps: list[float] = []
        if self.context.step_time_regex:
            steps = step_times_from_log(
                self._art / self.context.log_names[0], self.context.step_time_regex
            )
        details = (
            [] if code == 0 else [FailureDetail(f"the command exited {code}", hint=_hint(code))]
        )
        warnings = []
        traces = self._art / TRACE_DIR
        if "torch_profiler" in self.context.collect and not (
            traces.is_dir() and any(traces.iterdir())
        ):
            warnings.append(
                f"collect: torch_profiler: the command wrote no trace into $AORTA_ARTIFACT_DIR/"
                f"{TRACE_DIR}/ (aorta cannot profile inside a command; it must write its own)"
            )
        return WorkloadResult(
            passed=code == 0,
            failure_details=details,
            step_times_ms=steps,
            elapsed_sec=finished.wall_s,
            wall_clock_s=finished.wall_s,
            executed_iterations=len(steps) or None,
            exit_code=code,
            warnings=warnings,
            artifacts=dict(zip(("stdout", "stderr"), self.context.log_names, strict=True)),
        )

    def cleanup(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            kill_group(proc, grace_s=2.0)
        for fh in getattr(self, "_logs", []):
            fh.close()
        for path in getattr(self, "_written", []):
            path.unlink(missing_ok=True)
