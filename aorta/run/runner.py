"""This rank's part of one trial: its context, its environment, how it runs, what it reports.

:class:`TrialRunner` turns a planned trial into a :class:`~aorta.store.record.RankOutcome` on this
rank. It chooses the isolation (in process, or a fresh worker), points a distributed trial
at its own rendezvous, watches for a peer's abort, and collects the trial's files. The
engine (:mod:`aorta.run.sweep`) decides which trials run and merges the ranks' outcomes.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from aorta import envvars
from aorta.recipe.plan import Plan, TrialKey
from aorta.run import forensics, numerics, orphans
from aorta.run.oom import scan_oom
from aorta.run.signatures import SignatureLibrary, classify
from aorta.run.trial import Outcome, Watchdog, run_in_process, run_in_worker, workload_ref
from aorta.run.workload import Isolation, TrialContext, Workload
from aorta.store.record import RankOutcome, TrialStatus
from aorta.store.rundir import NUMERICS_DIR, RunDir

__all__ = ["TrialRunner"]

#: How long an in-process trial may overrun its deadline (stuck in native code) before the
#: engine records it as a timeout and stops the sweep for a resume.
STUCK_GRACE_S = 60.0


def _expand(pattern: str, env: Mapping[str, str]) -> str:
    # ${VAR} and $VAR from the trial's environment (os.path.expandvars reads os.environ only).
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), m.group(0)), pattern
    )


def _inside(path: str, root: Path) -> bool:
    """Whether the resolved ``path`` lies in the resolved ``root``."""
    real_root = os.path.realpath(root)
    return os.path.commonpath([path, real_root]) == real_root


class TrialRunner:
    """Runs trials of one plan on this rank."""

    def __init__(
        self,
        plan: Plan,
        rd: RunDir,
        *,
        workload: type[Workload] | None,
        unknown_workload_error: str,
        isolation: Isolation | None,
        rank: int = 0,
        world_size: int = 1,
        local_rank: int = 0,
        backend: str | None = None,
        python: str | None = None,
        on_stuck: Callable[[TrialKey], None] | None = None,
    ) -> None:
        self.plan = plan
        self.recipe = plan.recipe
        self.rd = rd
        self.workload = workload
        self.unknown_workload_error = unknown_workload_error
        self.isolation = isolation
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.backend = backend
        self.python = python
        self.on_stuck = on_stuck
        self.host = socket.gethostname()
        #: This process's children that are not the trial's (the orphan guard).
        self.keep_pids: tuple[int, ...] = ()
        #: Failure signatures: the library, plugins and the recipe's ``custom_patterns``.
        self.signatures = SignatureLibrary.load(custom=self.recipe.custom_patterns)

    def context(self, key: TrialKey, deadline: float) -> TrialContext:
        cell = key.cell
        r = self.recipe
        return TrialContext(
            cell=cell.name,
            trial=key.trial,
            steps=cell.steps,
            seed=key.seed,
            artifact_dir=self.rd.artifact_dir(cell.name, key.trial),
            env=dict(cell.env),
            rank=self.rank,
            world_size=self.world_size,
            local_rank=self.local_rank,
            deadline=deadline,
            command=list(self.plan.command) if self.plan.command else None,
            collect={c.name: dict(c.options) for c in cell.collect},
            step_time_regex=r.step_time_regex,
            env_passthrough_mode=r.env_passthrough_mode,
            save_logs=r.save_logs,
            hang_after=r.hang_after,
            backend=self.backend,
            isolated=self.isolation == "process",
            environment=cell.environment.to_dict(),
        )

    def overlay(
        self, key: TrialKey, rendezvous: Mapping[str, str], token: str = ""
    ) -> dict[str, str]:
        """The variables a trial runs with: the cell's, aorta's, and the trial's rendezvous."""
        return {
            **({envvars.TRIAL_TOKEN: token} if token else {}),
            **key.cell.env,
            # Absolute: a command that changes directory still writes to the run.
            envvars.RUN_DIR: os.path.abspath(self.rd.path),
            envvars.CELL: key.cell.name,
            envvars.TRIAL: str(key.trial),
            envvars.SEED: str(key.seed),
            envvars.ARTIFACT_DIR: os.path.abspath(self.rd.artifact_dir(key.cell.name, key.trial)),
            **rendezvous,
        }

    # ------------------------------------------------------------------------------------

    def _execute(
        self,
        key: TrialKey,
        ctx: TrialContext,
        overlay: dict[str, str],
        abort: Callable[[], tuple[TrialStatus, str] | None] | None,
        capture: forensics.Capture,
    ) -> Outcome:
        cls = self.workload
        if cls is None:
            return Outcome(TrialStatus.INFRASTRUCTURE_FAILED, error=self.unknown_workload_error)
        if key.cell.environment.kind == "docker" and not cls.supports_docker:
            return Outcome(
                TrialStatus.INFRASTRUCTURE_FAILED,
                error=f"workload {cls.name!r} cannot run in docker environment {key.cell.environment.name!r}",
            )
        config = dict(key.cell.workload_config)
        if self.isolation == "process":
            return run_in_worker(
                workload_ref(cls),
                config,
                ctx,
                env={**os.environ, **overlay},
                python=self.python,
                logs=ctx.log_names,
                abort=abort,
                capture=capture,
            )

        def stuck() -> None:
            if self.on_stuck is not None:
                self.on_stuck(key)

        with (
            Watchdog(ctx.deadline, STUCK_GRACE_S, stuck),
            self._captured(ctx),
            forensics.activated(capture),
        ):
            return run_in_process(cls, config, ctx, overlay)

    @contextlib.contextmanager
    def _captured(self, ctx: TrialContext) -> Iterator[None]:
        """With ``save_logs``, an in-process trial's Python-level output goes to its folder."""
        if not self.recipe.save_logs or ctx.artifact_dir is None:
            yield
            return
        ctx.artifact_dir.mkdir(parents=True, exist_ok=True)
        out_name, err_name = ctx.log_names
        with (
            open(ctx.artifact_dir / out_name, "a") as out,
            open(ctx.artifact_dir / err_name, "a") as err,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            yield

    def _collect_paths(self, overlay: Mapping[str, str], art: Path) -> list[str]:
        """Copy the recipe's ``collect_paths`` matches into ``collected/``; warnings back.

        Two files with one name are both kept (``name``, ``name-2``, … before the suffixes).
        """
        env = {**os.environ, **overlay}
        taken: dict[str, Path] = {}
        warnings = []
        for pattern in self.recipe.collect_paths:
            for src in sorted(glob.glob(_expand(pattern, env))):
                path = Path(src)
                if not path.is_file():
                    continue
                with contextlib.suppress(ValueError):
                    path.resolve().relative_to(art.resolve())
                    continue  # already in the trial's folder
                if path.resolve() in taken.values():
                    continue  # matched by two patterns
                name = path.name
                stem, dot, suffixes = name.partition(".")
                n = 1
                while name in taken:
                    n += 1
                    name = f"{stem}-{n}{dot}{suffixes}"
                if n > 1:
                    warnings.append(
                        f"collect_paths: {taken[path.name]} and {path} have the same name; "
                        f"the second is kept as collected/{name}"
                    )
                taken[name] = path.resolve()
                dest = art / "collected" / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    shutil.copy2(path, dest)
        return warnings

    def _artifacts(self, art: Path, warnings: list[str]) -> dict[str, str]:
        """The trial's files, by name relative to its folder → path relative to the run.

        Links are never followed (a ``latest`` checkpoint link may point anywhere): a link
        is listed as itself, and one that leads out of the run directory is named in
        ``warnings`` as kept but not followed. Paths are made relative lexically, so no
        link in the way changes where they point.
        """
        found: dict[str, str] = {}
        if not art.is_dir() or art.is_symlink():
            return found
        base = Path(os.path.relpath(os.path.abspath(art), os.path.abspath(self.rd.path)))
        outside = []
        for root, dirs, files in os.walk(art):  # followlinks=False: linked folders not entered
            here = Path(root)
            for name in sorted(files + [d for d in dirs if (here / d).is_symlink()]):
                path = here / name
                rel = path.relative_to(art).as_posix()
                if path.is_symlink():
                    target = os.path.realpath(path)
                    if not _inside(target, self.rd.path):
                        outside.append(f"{rel} -> {os.readlink(path)}")
                        continue
                elif not path.is_file():
                    continue  # a FIFO, a socket: nothing to keep
                found[rel] = (base / rel).as_posix()
        if outside:
            warnings.append(
                "link(s) in the trial folder point outside the run, kept as links and not "
                f"followed: {', '.join(sorted(outside)[:5])}"
                + (f" (+{len(outside) - 5} more)" if len(outside) > 5 else "")
            )
        return dict(sorted(found.items()))

    def run(
        self,
        key: TrialKey,
        *,
        rendezvous: Mapping[str, str] | None = None,
        abort: Callable[[], tuple[TrialStatus, str] | None] | None = None,
        peers: forensics.Peers | None = None,
    ) -> RankOutcome:
        """Run this rank's part of ``key`` until its deadline; ``peers`` (the other ranks)
        take their evidence with this rank's when the trial is stuck."""
        deadline = time.monotonic() + self.plan.timeout_s
        ctx = self.context(key, deadline)
        token = orphans.new_token()
        overlay = self.overlay(key, rendezvous or {}, token)
        art = ctx.artifact_dir or self.rd.path
        capture = forensics.Capture(
            self.recipe.forensics,
            folder=art,
            token=token,
            rank=self.rank,
            local_rank=self.local_rank,
            host=self.host,
            logs=[art / name for name in ctx.log_names],
            peers=peers,
        )
        if key.cell.environment.kind != "docker":  # the listener's folder is on this host only
            overlay.update(capture.arming_env({**os.environ, **overlay}))
        checked = self.recipe.check_numerics and key.cell.environment.kind != "docker"
        found_dir = art / NUMERICS_DIR
        if checked:
            overlay.update(numerics.arming_env(found_dir, {**os.environ, **overlay}))
        t0 = time.monotonic()
        try:
            with self._numerics(found_dir, enabled=checked):
                outcome = self._execute(key, ctx, overlay, abort, capture)
        finally:
            capture.close()
        nonfinite = numerics.collect(found_dir) if checked else []
        left = orphans.reap_trial(token, ignore=self.keep_pids)
        if left:
            outcome.warnings.append(
                f"killed {left} process(es) the trial left running outside its process group "
                "(setsid or a daemon)"
            )
        wall = _wall_clock(outcome, time.monotonic() - t0)
        if self.recipe.collect_paths:
            outcome.warnings.extend(self._collect_paths(overlay, art))
        if capture.failure:
            outcome.warnings.append(capture.failure)
        found = self._classify(
            outcome, ctx, art, wall, captured=bool(capture.evidence), until=capture.log_sizes
        )
        try:
            artifacts = self._artifacts(art, outcome.warnings)
        except OSError as exc:  # the folder changed under us: the record still gets written
            artifacts = {}
            outcome.warnings.append(f"the trial's files could not be listed: {exc}")
        ranked = self.rank_outcome(outcome, wall=wall, artifacts=artifacts)
        if capture.evidence:
            found = {**found, "evidence": capture.evidence}
        if nonfinite:
            found = {**found, "numerics": nonfinite}
        return ranked.model_copy(update=found) if found else ranked

    def _numerics(self, folder: Path, *, enabled: bool) -> contextlib.AbstractContextManager[None]:
        """An in-process trial's numerics locator (a worker's loads it from the shim)."""
        if not enabled or self.isolation == "process":
            return contextlib.nullcontext()
        return numerics.armed(folder, rank=self.rank)

    def _classify(
        self,
        outcome: Outcome,
        ctx: TrialContext,
        art: Path,
        wall: float,
        *,
        captured: bool,
        until: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """Match the trial's captured output against the failure signatures (a failed trial
        always; a passing one only against the recipe's patterns, which may fail it).

        A trial aorta killed (``until``: each log's size at the kill) is matched on what it
        printed before the signal — torchrun's ``SignalException`` after aorta's SIGTERM is
        not the cause —, and with no match there its signature is why aorta killed it:
        ``hang`` or ``deadline`` (:func:`_kill_signature`)."""
        failed = outcome.status is not TrialStatus.OK
        if outcome.stopped_by_peer:
            return {}  # the peer holds the cause; this rank's output shows only the stop
        out_name, err_name = ctx.log_names
        skipped: list[str] = []
        got = classify(
            self.signatures,
            failed=failed,
            logs=[art / err_name, art / out_name],
            error=outcome.error,
            facts={"exit_code": outcome.exit_code, "walltime_sec": wall},
            skipped=skipped,
            until=until,
        )
        outcome.warnings += got.warnings + [f"signature scan of a large log: {s}" for s in skipped]
        if got.info and outcome.result is not None:
            outcome.result.info.update(got.info)
        if got.fails_passing and not failed:
            outcome.status = TrialStatus.WORKLOAD_FAILED
            outcome.error = got.fails_passing
            if outcome.result is not None:
                outcome.result.passed = False
                outcome.result.failure_count = max(1, outcome.result.failure_count)
        found = got.record_fields()
        if not found and outcome.status is TrialStatus.TIMEOUT:
            found = _kill_signature(
                outcome, captured=captured, forensics=self.recipe.forensics.enabled
            )
        if failed:  # who ran out of memory, asking how much, with how much free
            ooms = scan_oom(
                [art / err_name, art / out_name], rank=self.rank, text=[outcome.error or ""]
            )
            if ooms:
                found["oom"] = ooms
        return found

    def rank_outcome(
        self, outcome: Outcome, *, wall: float, artifacts: dict[str, str] | None = None
    ) -> RankOutcome:
        res = outcome.result
        fields: dict[str, Any] = {}
        if res is not None:
            fields = {
                "failure_count": res.failure_count,
                "failure_details": [f.to_dict() for f in res.failure_details],
                "step_times_ms": res.step_times_ms,
                "warmup_steps": res.warmup_steps,
                "elapsed_sec": res.elapsed_sec,
                "total_iterations": res.total_iterations,
                "executed_iterations": res.executed_iterations,
                "configured_iterations": res.configured_iterations,
                "metrics": res.metrics,
                "info": res.info,
            }
        else:
            fields["failure_count"] = int(outcome.status is TrialStatus.WORKLOAD_FAILED)
        return RankOutcome(
            rank=self.rank,
            host=self.host,
            status=outcome.status,
            passed=outcome.status is TrialStatus.OK,
            wall_clock_s=wall,
            main_work_started=outcome.main_work_started,
            completed=res is not None,
            stopped_by_peer=outcome.stopped_by_peer,
            error=outcome.error,
            hint=outcome.hint,
            warnings=outcome.warnings,
            exit_code=outcome.exit_code,
            artifacts=artifacts or {},
            **fields,
        )


def _wall_clock(outcome: Outcome, engine_s: float) -> float:
    """A trial's ``wall_clock_s``: its own process's start-to-exit time — the command's
    (``command`` workload), else the worker's (isolation ``process``) — each timed by the
    kernel's exit notice (:func:`aorta.run.procs.wait_exit`); in process, the engine's clock
    around the trial (``engine_s``).

    >>> _wall_clock(Outcome(TrialStatus.OK), 0.5)
    0.5
    """
    res = outcome.result
    if res is not None and res.wall_clock_s is not None:
        return res.wall_clock_s
    return outcome.wall_s if outcome.wall_s is not None else engine_s


def _kill_signature(outcome: Outcome, *, captured: bool, forensics: bool = True) -> dict[str, Any]:
    """The signature of a trial aorta killed whose output before the kill names no cause:
    why aorta killed it — ``hang`` (no output and no CPU use) or ``deadline`` (the trial's
    ``timeout_per_trial`` passed). ``forensics``: whether the recipe armed the capture (the
    hint says why no evidence was taken).

    >>> _kill_signature(Outcome(TrialStatus.TIMEOUT, error="deadline passed"), captured=False)["signature"]
    'deadline'
    """
    if outcome.failure_kind == "hang":
        hint = (
            "no output and no CPU use: the record's forensics say who the other ranks "
            "waited for and where (every rank's flight recorder and stacks, in hang/)"
            if captured
            else "no output and no CPU use, and no evidence taken ("
            + (
                "the capture found nothing to read: see the record's warnings"
                if forensics
                else "forensics: enabled: false"
            )
            + "): attach py-spy dump or gdb to a hung run to see where it waits"
        )
        return {
            "signature": "hang",
            "signature_tier": 8,
            "signature_hint": hint,
            "signature_line": outcome.error,
        }
    return {
        "signature": "deadline",
        "signature_tier": 8,
        "signature_hint": "aorta killed the trial at its deadline (timeout_per_trial); "
        + (
            "the record's forensics say where each rank was"
            if captured
            else "raise timeout_per_trial if it was still working"
        ),
        "signature_line": outcome.error,
    }
