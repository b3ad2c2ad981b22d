"""Runs a plan: every cell × trial, with isolation, deadlines, resume and the run directory.

:func:`sweep` is the notebook and CLI entry point::

    result = aorta.sweep("recipes/cpu-smoke.yaml")
    result.run_dir        # triage_results/_no_ticket_/matmul/2026-11-30T04-55-38
    result.exit_code      # ExitCode.OK

Trials run in the plan's schedule (:meth:`aorta.recipe.plan.Plan.order`: interleaved rounds by
default, or cell by cell); each record carries its ``run_order``. After each trial its record
is written atomically; after each cell (sequential) or round (interleaved)
``matrix.md``/``matrix.json`` are rewritten, so a run killed at any point resumes
(:func:`sweep` with ``resume=``) from exactly the trials that are missing or unreadable.
``resume=RUN, extend_to=N`` grows a finished run in place (``aorta sweep extend``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import math
import os
import shlex
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from aorta import __version__, envvars
from aorta.errors import AortaError, ExitCode, UsageError
from aorta.matrix.dataset import build_dataset
from aorta.matrix.load import write_results
from aorta.recipe import Recipe, dump_recipe, load_recipe_text
from aorta.recipe.plan import Cell, TrialKey
from aorta.report.matrix_files import write_matrix
from aorta.report.progress import Reporter, check_progress, choose_reporter
from aorta.run import forensics, procs
from aorta.run.adaptive import AdaptiveSchedule
from aorta.run.extend import record_extension
from aorta.run.options import RunKeywords, RunOptions, run_options
from aorta.run.orphans import OrphanGuard
from aorta.run.prepare import Prepared, check_world_size, prepare, prepare_run, with_trials
from aorta.run.ranks import (
    DistEnv,
    LocalCoordinator,
    StoreCoordinator,
    TrialPeers,
    choose_backend,
    coordinator_for,
    launcher_of,
    trial_endpoint,
    trial_env,
)
from aorta.run.runner import TrialRunner
from aorta.run.workload import WorkloadCatalog
from aorta.store.hostenv import snapshot
from aorta.store.record import RankOutcome, TrialRecord, TrialStatus, merge_ranks
from aorta.store.redact import Redactor, harvest_secrets, record_secrets
from aorta.store.retention import retain_trial
from aorta.store.rundir import WARMUP_TRIAL, RunDir, aorta_command, utc_now

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Interrupted", "SweepResult", "sweep"]


class Interrupted(AortaError):
    """The sweep was stopped (Ctrl-C, SIGTERM, a stuck trial); the run directory resumes."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, message: str, run_dir: Path) -> None:
        super().__init__(message)
        self.run_dir = run_dir


@dataclass
class SweepResult:
    """What a sweep produced: the run directory, the per-cell summaries and every record."""

    run_dir: Path
    status: str
    baseline: str
    #: One row per cell (:func:`aorta.matrix.summary.summarize`); empty on other ranks.
    summaries: pd.DataFrame
    records: list[TrialRecord]
    #: This process's rank: only rank 0 holds summaries and records.
    rank: int = 0
    #: Rank 0's exit code and findings, shared with every rank (None: not shared).
    shared: dict[str, Any] | None = None

    @property
    def exit_code(self) -> ExitCode:
        """OK when the matrix is complete — failures, even in the baseline, are findings —
        or INCOMPLETE when no usable baseline exists for anything (its trials all errored
        or never ran). Every rank answers what rank 0 decided."""
        if self.status == "interrupted":
            return ExitCode.INTERRUPTED
        if self.rank != 0:
            return ExitCode(int((self.shared or {}).get("exit_code", ExitCode.OK)))
        return _exit_code(self.summaries, self.baseline)

    @property
    def has_findings(self) -> bool:
        """Any cell with failing or erroring trials (on every rank)."""
        if self.rank != 0:
            return bool((self.shared or {}).get("findings"))
        return bool(self.failing or self.erroring)

    @property
    def clean(self) -> list[str]:
        """Cells without failing or erroring trials."""
        df = self.summaries
        return [] if df.empty else df.index[(df.n_failed == 0) & (df.n_errors == 0)].tolist()

    @property
    def failing(self) -> list[str]:
        """Cells with failing trials."""
        df = self.summaries
        return [] if df.empty else df.index[df.n_failed > 0].tolist()

    @property
    def erroring(self) -> list[str]:
        """Cells with erroring trials (setup, infrastructure, timeout)."""
        df = self.summaries
        return [] if df.empty else df.index[df.n_errors > 0].tolist()


def _exit_code(df: pd.DataFrame, baseline: str) -> ExitCode:
    if baseline not in df.index:
        return ExitCode.INCOMPLETE
    ran = int(df.loc[baseline, "n_ok"]) + int(df.loc[baseline, "n_failed"])
    return ExitCode.OK if ran > 0 else ExitCode.INCOMPLETE


# ------------------------------------------------------------------------------------------


def _event(record: TrialRecord, verdict: str) -> bool:
    if verdict == "timeout":
        return record.status is TrialStatus.TIMEOUT
    if verdict == "any_failure":
        return record.status not in (TrialStatus.OK, TrialStatus.DID_NOT_RUN)
    return record.status is TrialStatus.WORKLOAD_FAILED


#: A full (or read-only, or over-quota) file system: the run stops, resumable, with one line.
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
#: Below this much free space a trial's logs may have been cut short: stop before its record.
MIN_FREE_BYTES = 1 << 20


class _Sweep:
    """One sweep on this rank; :func:`sweep` builds it and calls :meth:`run`.

    Every rank walks the same trials in the same order. For each trial rank 0 decides
    (run, already done, skipped by ``stop_after``), every rank runs its part, and rank 0
    merges the ranks' outcomes into the record it writes. With one process the coordinator
    is local and the same loop runs.
    """

    def __init__(
        self,
        prepared: Prepared,
        rd: RunDir,
        reporter: Reporter,
        *,
        coord: LocalCoordinator | StoreCoordinator,
        dist: DistEnv,
        python: str | None,
        backend: str | None,
    ) -> None:
        self.p = prepared
        self.plan = prepared.plan
        self.recipe = prepared.plan.recipe
        self.rd = rd
        self.reporter = reporter
        self.coord = coord
        self.dist = dist
        #: How the ranks were started: the commands printed to resume the run repeat it.
        self.launcher = launcher_of(dist)
        self.records: dict[tuple[str, int], TrialRecord] = {}
        #: Per cell, how many recorded trials count as a stop_after event (kept as records come).
        self._events: dict[str, int] = {}
        #: Cells whose unrun remainder already has its one did_not_run record.
        self._stopped: set[str] = set()
        self.host = socket.gethostname()
        self.writer = dist.rank == 0
        #: The next trial's position in the run's execution order (rank 0 assigns it).
        self._next_order = 0
        #: When the last mid-run matrix write ended and what it cost (monotonic seconds).
        self._matrix_written, self._matrix_cost = -math.inf, 0.0
        self._warned: set[str] = set()
        overlays: dict[str, str] = {}
        for c in self.plan.cells:
            overlays.update(c.env)
        # What the run holds secret: the trials' environment and the recipe's argv (in memory
        # in clear; in the run directory only as salted hashes, secret_hashes.json).
        self._secrets = harvest_secrets(
            {**os.environ, **overlays},
            scrub_keys=self.recipe.redaction.scrub_env_keys if self.recipe.redaction else (),
            texts=[dump_recipe(self.recipe)],
            data=[self.recipe.model_dump(mode="json")],
        )
        self.redactor = Redactor.for_recipe(self.recipe.redaction).with_values(self._secrets)
        registered = ", ".join(prepared.catalog.names())
        self.runner = TrialRunner(
            self.plan,
            rd,
            workload=prepared.workload,
            unknown_workload_error=f"unknown workload {self.plan.workload!r} (registered: {registered})",
            isolation=prepared.isolation,
            rank=dist.rank,
            world_size=dist.world_size,
            local_rank=dist.local_rank,
            backend=backend,
            python=python,
            on_stuck=self._abandon,
        )
        #: ``schedule: adaptive``: which cells run each round.
        self.adaptive = (
            AdaptiveSchedule(self.plan, dataset=self._adaptive_dataset)
            if self.plan.schedule == "adaptive"
            else None
        )
        # Waits on other ranks: a whole trial, its kill grace, and slack for a slow filesystem.
        self.wait_s = self.plan.timeout_s + 2 * procs.DEFAULT_GRACE_S + 120.0

    # -- files (rank 0 only) ---------------------------------------------------------------

    def _keep(self, record: TrialRecord) -> TrialRecord:
        """Redact, write and remember a trial's record (what is kept is what is on disk).

        On a full file system the trial's own logs may have been cut short (and the command
        failed for it), so its record is not written: the run stops and resume reruns it.
        """
        if self.rd.free_bytes() < MIN_FREE_BYTES:
            raise OSError(errno.ENOSPC, "no space left on device", str(self.rd.path))
        record = self.redactor.record(record)
        record = retain_trial(self.rd, record, self.recipe.retain)  # prune per `retain:`
        self.rd.write_trial(record)
        self._remember(record)
        return record

    def _remember(self, record: TrialRecord) -> None:
        self.records[(record.cell, record.trial)] = record
        if record.status is TrialStatus.DID_NOT_RUN:
            self._stopped.add(record.cell)
        if record.run_order is not None:
            self._next_order = max(self._next_order, record.run_order + 1)
        stop = self.plan.stop_after
        if stop is not None and _event(record, stop.event_verdict):
            self._events[record.cell] = self._events.get(record.cell, 0) + 1

    def _cell_dict(self, cell: Cell) -> dict[str, Any]:
        # A cell's overlay can carry a token (extra_env); cell.json and the matrix show it redacted.
        return {**cell.to_dict(), "env": self.redactor.env(cell.env)}

    def _header(self, status: str) -> dict[str, Any]:
        return {
            "ticket": self.recipe.ticket,
            "workload": self.plan.workload,
            "run_dir": str(self.rd.path),
            "baseline": self.plan.baseline,
            "threshold": self.plan.threshold,
            "world_size": self.dist.world_size,
            "status": status,
            "schedule": self.plan.schedule,
            "extensions": self.rd.manifest().get("extensions") if self.writer else None,
            # The adaptive verdicts' settings: the planned look is at the recipe's cap (an
            # extension raises the cells' trials, not the look).
            **(
                {
                    "failure_margin": self.recipe.adaptive_settings.failure_margin,
                    "max_trials": self.recipe.trials_cap[1],
                }
                if self.plan.schedule == "adaptive"
                else {}
            ),
        }

    def write_matrix(self, status: str) -> pd.DataFrame:
        """Rank 0 rewrites matrix.md/json (the other ranks hold no records to summarise)."""
        if not self.writer:
            return pd.DataFrame()
        cells = [self._cell_dict(c) for c in self.plan.cells]
        ds = build_dataset(cells, self.records.values(), attrs=self._header(status))
        return write_matrix(self.rd, ds, status=status)

    def write_matrix_running(self) -> None:
        """Rewrite the matrix mid-run, unless it was rewritten less than four writes' time ago:
        however short the trials, at most a fifth of the sweep goes to the matrix (a round of
        tiny trials took less than one write). The trial records are the truth a resume and
        the final matrix are built from; this only keeps matrix.md current for whoever reads
        it meanwhile."""
        start = time.monotonic()
        if start - self._matrix_written < 4 * self._matrix_cost:
            return
        self.write_matrix("running")
        self._matrix_written = time.monotonic()
        self._matrix_cost = self._matrix_written - start

    def write_preamble(self, resumed: bool, host_snapshots: list[dict[str, Any] | None]) -> None:
        text = dump_recipe(self.recipe)
        record_secrets(self.rd, self._secrets)
        if not resumed:
            # 0600: its extra_env may hold secrets in clear (a resume and `--recipe` need them).
            self.rd.write_text(self.rd.recipe_path, text, mode=0o600)
            mine = host_snapshots[0] if host_snapshots and host_snapshots[0] else {}
            self.rd.write_json(self.rd.host_env_path, mine)
            others = {
                s["host"]: s for s in host_snapshots[1:] if s and s.get("host") != mine.get("host")
            }
            for host, snap in others.items():
                self.rd.write_json(self.rd.host_env_of(host), snap)
        for cell in self.plan.cells:
            self.rd.write_json(self.rd.cell_json(cell.name), self._cell_dict(cell))
        for env in {c.environment.name: c.environment for c in self.plan.cells}.values():
            self.rd.write_json(self.rd.environment_json(env.name), env.to_dict())
        manifest = {
            "schema_version": 1,
            "status": "running",
            "recipe_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "ticket": self.recipe.ticket,
            "workload": self.plan.workload,
            "host": self.host,
            "pid": os.getpid(),
            "aorta_version": __version__,
            "isolation": self.p.isolation,
            "world_size": self.dist.world_size,
            "launcher": self.launcher,
            "n_cells": len(self.plan.cells),
            "n_trials": self.plan.n_trials,
            "schedule": self.plan.schedule,
            "seed": self.plan.seed,
            "cells": {c.name: c.cell_id for c in self.plan.cells},
            "mitigations_files": self.p.mitigations_files,
        }
        if resumed:
            manifest["resumed_at"] = utc_now()
            self.rd.update_manifest(**manifest)
        else:
            manifest["started_at"] = utc_now()
            self.rd.write_json(self.rd.manifest_path, manifest)

    # -- one trial ---------------------------------------------------------------------------

    def _adaptive_dataset(self, point: int) -> Any:
        """The Dataset of the records of the trials before ``point`` (an adaptive decision)."""
        cells = [self._cell_dict(c) for c in self.plan.cells]
        seen = [r for r in self.records.values() if r.trial < point]
        return build_dataset(cells, seen, attrs=self._header("running"))

    def _running(self, key: TrialKey) -> bool:
        """``schedule: adaptive``: whether ``key``'s cell still runs (:mod:`aorta.run.adaptive`);
        says each cell the schedule stops, and the trials the run can still hold."""
        assert self.adaptive is not None
        active, stops = self.adaptive.active(key.trial)
        for stop in stops:
            if stop.cell != self.plan.baseline:
                self.reporter.message(f"{stop.cell}: stopped, {stop.reason}")
        if stops:
            self.reporter.bound(self.adaptive.bound(self.records))
        return key.cell.name in active

    def _decide(self, key: TrialKey) -> str:
        """Rank 0: ``run``, ``done`` (a valid record exists), ``stopped`` (an adaptive
        schedule decided the cell) or ``skip:<why>``."""
        if (key.cell.name, key.trial) in self.records:
            return "done"
        if self.adaptive is not None and not self._running(key):
            # Every cell stopped: the rest of the schedule is not walked (max_trials may be
            # a million), on every rank, as each takes rank 0's decision.
            return "settled" if self.adaptive.settled else "stopped"
        stop = self.plan.stop_after
        if stop is not None:
            events = self._events.get(key.cell.name, 0)
            if events >= stop.events:
                return f"skip:stop_after: {events} {stop.event_verdict} trial(s) reached"
        # A killed attempt's files must not mix with this one's (its logs would add step times).
        self.rd.set_aside(key.cell.name, key.trial)
        return "run"

    def _record(
        self,
        key: TrialKey,
        merged: dict[str, Any],
        started: str,
        wall: float | None,
        run_order: int | None = None,
    ) -> TrialRecord:
        return TrialRecord(
            run_order=run_order,
            cell=key.cell.name,
            cell_id=key.cell.cell_id,
            trial=key.trial,
            seed=key.seed,
            workload=self.plan.workload,
            wall_clock_s=wall,
            isolation=self.p.isolation,
            started_at=started,
            finished_at=utc_now(),
            host=self.host,
            **merged,
        )

    def _skip(self, key: TrialKey, why: str) -> TrialRecord | None:
        """One ``did_not_run`` record stands for all of a cell's unrun remainder (a hunt may
        plan a million trials and stop after a few): the first skipped trial gets it, the
        rest get nothing."""
        if key.cell.name in self._stopped:
            return None
        self._stopped.add(key.cell.name)
        rest = key.cell.trials - key.trial
        skipped = RankOutcome(
            rank=0,
            status=TrialStatus.DID_NOT_RUN,
            passed=False,
            error=f"{why}; this record stands for the {rest} trial(s) not run "
            f"({key.trial}–{key.cell.trials - 1})",
            info={"not_run": str(rest)},
        )
        return self._record(key, merge_ranks([skipped], 1), utc_now(), None)

    def _abort_check(self, seq: int) -> Callable[[], tuple[TrialStatus, str] | None] | None:
        if not self.coord.distributed:
            return None

        def check() -> tuple[TrialStatus, str] | None:
            raw = self.coord.abort_reason(str(seq))
            if raw is None:
                return None
            status, _, reason = raw.partition("|")
            return TrialStatus(status), reason

        return check

    def run_trial(self, seq: int, key: TrialKey) -> TrialRecord | None:
        """Run trial ``seq`` on this rank; rank 0 returns the merged record."""
        rendezvous: dict[str, str] = {}
        # A distributed workload on one process (training's min_world_size is 1) still joins a
        # process group of one: without a rendezvous every trial failed its setup on env://.
        cls = self.p.workload
        if self.coord.distributed or (cls is not None and cls.launch_mode == "distributed"):
            endpoint = trial_endpoint(self.coord, self.dist, seq, timeout_s=self.wait_s)
            rendezvous = trial_env(endpoint)
        started = utc_now()
        t0 = time.monotonic()
        peers = TrialPeers(self.coord, seq) if isinstance(self.coord, StoreCoordinator) else None
        mine = self.runner.run(
            key, rendezvous=rendezvous, abort=self._abort_check(seq), peers=peers
        )
        if peers is not None:
            peers.captured()  # a peer taking its evidence waits for no rank whose trial ended
        if self.coord.distributed and not mine.completed:
            # This rank's trial died (crash, setup failure, deadline): release the peers now
            # rather than leave them in a collective that can never complete.
            reason = f"rank {self.dist.rank}'s trial ended: {mine.error}"
            self.coord.raise_abort(str(seq), f"{mine.status.value}|{reason}")
        gathered = self.coord.gather(
            f"trial/{seq}/outcome", mine.model_dump(mode="json"), timeout_s=self.wait_s
        )
        if gathered is None:
            return None
        outcomes = [RankOutcome.model_validate(g) if g is not None else None for g in gathered]
        merged = merge_ranks(outcomes, self.dist.world_size)
        merged["forensics"] = forensics.incident(
            [o for o in outcomes if o is not None], self.dist.world_size
        )
        order: int | None = None
        if key.trial != WARMUP_TRIAL:  # the warm-up is not in the run's order
            order, self._next_order = self._next_order, self._next_order + 1
        # The trial's clock is its processes' own (the slowest rank's), not this loop's, which
        # adds the gather and the rendezvous (aorta.run.runner._wall_clock).
        walls = [o.wall_clock_s for o in outcomes if o is not None and o.wall_clock_s is not None]
        wall = max(walls) if walls else time.monotonic() - t0
        return self._record(key, merged, started, wall, order)

    def _say_new_warnings(self, record: TrialRecord) -> None:
        # Loud once (unknown config keys, cleanup errors…), recorded in every record.
        for warning in record.warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                self.reporter.message(f"warning: {record.cell}: {warning}")

    def _abandon(self, key: TrialKey) -> None:
        # On the watchdog thread while the main thread is stuck in native code: record the
        # timeout, leave the run resumable, end the process (nothing else can).
        if self.writer:
            timeout = RankOutcome(
                rank=self.dist.rank,
                status=TrialStatus.TIMEOUT,
                passed=False,
                error="stuck in native code past the deadline; the sweep was stopped",
            )
            record = self._record(key, merge_ranks([timeout], 1), utc_now(), None, self._next_order)
            with contextlib.suppress(Exception):
                self._keep(record)
                self.write_matrix("interrupted")
                self.rd.update_manifest(status="interrupted", finished_at=utc_now())
        self.reporter.message(
            f"aorta: {key.cell.name} trial {key.trial} is stuck past its deadline in native code; recorded as timeout. "
            f"Resume with: {self._again('resume')}  (trial_isolation: process survives such hangs)"
        )
        procs.reap_all()
        os._exit(int(ExitCode.INTERRUPTED))

    def _again(self, verb: str) -> str:
        """``aorta sweep <verb> RUN`` as this run was launched (under torchrun: the torchrun
        line; :func:`~aorta.store.rundir.aorta_command`)."""
        return aorta_command(f"sweep {verb} {shlex.quote(str(self.rd.path))}", self.launcher)

    # -- the loop ----------------------------------------------------------------------------

    def run(self, done: dict[tuple[str, int], TrialRecord]) -> SweepResult:
        """The sweep: announce it, run the schedule, then settle the run's outcome."""
        self._begin(done)
        try:
            self._warmup(done)
            self._schedule()
            rows = self.write_matrix("complete")
        except KeyboardInterrupt:
            self._leave_resumable()
            raise Interrupted(
                f"interrupted; resume with: {self._again('resume')}", self.rd.path
            ) from None
        except AortaError:
            self._leave_resumable(matrix=False)
            raise
        except Exception as exc:
            # Whatever stopped the loop (a full disk, a bug in handling a trial's files), the
            # run is left resumable: `interrupted`, never `running` with no sweep behind it.
            self._leave_resumable(matrix=False)
            full = isinstance(exc, OSError) and exc.errno in _NO_SPACE
            raise self._unexpected(exc) from (None if full else exc)
        return self._finish(rows)

    def _begin(self, done: dict[tuple[str, int], TrialRecord]) -> None:
        """Take in the trials already done and tell the reporter what the sweep will run."""
        for record in done.values():
            self._remember(record)
        if self.adaptive is not None:  # cells stop early: the total is a bound, said before start
            self.reporter.bound(self.plan.n_trials)
        self.reporter.start(
            run_dir=str(self.rd.path),
            total=self.plan.n_trials,
            done=len(done),
            cells=len(self.plan.cells),
        )
        for warning in self.p.warnings:
            self.reporter.message(f"warning: {warning}")

    def _schedule(self) -> None:
        """Run the schedule's trials in order, rewriting the matrix after each cell or round."""
        order = self.plan.iter_order()  # built as it goes: an adaptive sweep may stop early
        sequential = self.plan.schedule == "sequential"
        nxt = next(order, None)
        seq = -1
        while nxt is not None:
            key, seq = nxt, seq + 1
            if self._one(seq, key) == "settled":
                for cell in self.plan.cells:
                    self.reporter.cell_done(cell.name)
                return
            nxt = next(order, None)
            if key.trial == key.cell.trials - 1:
                self.reporter.cell_done(key.cell.name)
            # Rewrite the matrix after each cell (sequential) or each round (interleaved);
            # after the last, the complete one follows.
            group = key.cell.name if sequential else key.trial
            if nxt is not None and group != (nxt.cell.name if sequential else nxt.trial):
                self.write_matrix_running()

    def _leave_resumable(self, *, matrix: bool = True) -> None:
        """Leave a stopped run resumable: processes reaped, marked ``interrupted``, reporter closed
        (``matrix``: with the matrix so far; without, the manifest rewritten in place, best effort)."""
        procs.reap_all()
        if self.writer:
            if matrix:
                self.write_matrix("interrupted")
                self.rd.update_manifest(status="interrupted", finished_at=utc_now())
            else:
                # The manifest is rewritten in place (a temporary copy may not fit any more).
                with contextlib.suppress(Exception):
                    self.rd.update_manifest(status="interrupted", finished_at=utc_now())
        self.reporter.close()

    def _unexpected(self, exc: Exception) -> AortaError:
        """The one line to stop with when ``exc`` stopped the loop: the run is resumable."""
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
            return AortaError(
                f"{exc.filename or self.rd.path}: {os.strerror(exc.errno or 0)}; the run "
                f"stopped and is resumable once there is space: {self._again('resume')}"
            )
        return AortaError(
            f"the sweep stopped on an unexpected error ({type(exc).__name__}: {exc}); the "
            f"run is resumable: {self._again('resume')}"
        )

    def _finish(self, rows: pd.DataFrame) -> SweepResult:
        """Mark the run complete, agree its exit code across ranks, write results.nc."""
        if self.writer:
            self.rd.update_manifest(status="complete", finished_at=utc_now())
        # Every rank exits like rank 0, so torchrun, srun and `aorta launch` see one answer.
        shared = self.coord.share(
            "result",
            lambda: {
                "exit_code": int(_exit_code(rows, self.plan.baseline)),
                "findings": bool(len(rows) and ((rows.n_failed > 0) | (rows.n_errors > 0)).any()),
            },
            timeout_s=self.wait_s,
        )
        self.coord.finish(timeout_s=self.wait_s)
        if self.writer:
            # results.nc: the finished run as an xarray Dataset (aorta.matrix.dataset). Best effort:
            # the records and matrix files are written, and `aorta.load_run` rebuilds it.
            try:
                write_results(self.rd.path)
            except (OSError, ValueError, ImportError, AortaError) as exc:
                self.reporter.message(f"warning: results.nc not written: {exc}")
        self.reporter.close()
        ordered = [
            self.records[k]
            for k in sorted(self.records, key=lambda k: (self.plan.cell(k[0]).index, k[1]))
        ]
        return SweepResult(
            self.rd.path,
            "complete",
            self.plan.baseline,
            rows,
            ordered,
            rank=self.dist.rank,
            shared=shared,
        )

    def _warmup(self, done: dict[tuple[str, int], TrialRecord]) -> None:
        """With ``warmup`` (the default), one trial of the baseline runs before the schedule's
        first and is discarded: written as ``warmup.json``, never a ``trial_*`` the statistics
        read, and without a ``run_order``. A resumed run with trials left warms up again. A
        run of one cell has no other cell for a cold first trial to bias: no warm-up."""
        if not self.recipe.warmup or len(self.plan.cells) < 2:
            return
        left = self.coord.share(
            "warmup/decision",
            lambda: len(done) < self.plan.n_trials,
            timeout_s=self.wait_s,
        )
        if not left:
            return
        if self.writer:
            self.rd.drop_warmup()
        key = TrialKey(self.plan.cell(self.plan.baseline), WARMUP_TRIAL)
        record = self.run_trial(WARMUP_TRIAL, key)
        if record is not None:
            record = self.redactor.record(record)
            record = retain_trial(self.rd, record, self.recipe.retain)
            self.rd.write_trial(record)

    def _one(self, seq: int, key: TrialKey) -> str:
        """Trial ``seq`` of the schedule: rank 0 decides, every rank runs its part; the
        decision (:meth:`_decide`)."""
        decision: str = self.coord.share(
            f"trial/{seq}/decision", lambda: self._decide(key), timeout_s=self.wait_s
        )
        if decision in ("done", "stopped", "settled"):
            return decision
        if decision.startswith("skip:"):
            record = self._skip(key, decision[len("skip:") :]) if self.writer else None
        else:
            self.reporter.trial_started(key.cell.name, key.trial)
            record = self.run_trial(seq, key)
        if record is not None:
            record = self._keep(record)
            self.reporter.trial_done(key.cell.name, key.trial, record)
            self._say_new_warnings(record)
        return decision


def sweep(
    recipe: Recipe | str | Path | None = None,
    *,
    resume: str | Path | None = None,
    extend_to: int | None = None,
    extend_cells: Sequence[str] | None = None,
    options: RunOptions | None = None,
    **overrides: Unpack[RunKeywords],
) -> SweepResult:
    """Run every cell × trial of ``recipe`` and write the run directory.

    Parameters
    ----------
    recipe
        A :class:`~aorta.recipe.model.Recipe` or a recipe file. Omit it with ``resume``.
    resume
        An existing run directory: run only its missing or unreadable trials, with the recipe
        it recorded (``recipe.resolved.yaml``).
    extend_to, extend_cells
        With ``resume``: grow the run in place — ``extend_cells`` (default: all) to
        ``extend_to`` trials — recorded in the manifest (``aorta sweep extend``;
        :mod:`aorta.run.extend`). Adding trials after seeing results is optional stopping
        (docs/statistics.md).
    options
        How the sweep runs (:class:`~aorta.run.options.RunOptions`: ``command``, ``output``,
        ``ticket``, ``timeout_s``, ``isolation``, ``mitigations_files``, ``progress``,
        ``verbose``, ``python``, ``backend``, ``workloads``; default its defaults).
    **overrides
        Any field of ``options`` as a keyword (``output="runs"``, ``progress="none"`` …),
        replacing its value.

    Returns
    -------
    SweepResult
        ``run_dir``, per-cell ``summaries``, every ``records`` and the ``exit_code``.

    Raises
    ------
    RecipeError, UsageError
        Before anything runs (an unknown ``progress`` too).
    TypeError
        A keyword that is no field of :class:`~aorta.run.options.RunOptions`.
    Interrupted
        Ctrl-C or SIGTERM: children were reaped and the run directory can be resumed.

    Examples
    --------
    >>> import tempfile
    >>> from aorta.recipe import load_recipe_text
    >>> r = load_recipe_text("cells: [{name: base, mitigations: [none]}]", command=["true"])
    >>> result = sweep(r, output=tempfile.mkdtemp(), progress="none")
    >>> int(result.summaries.loc["base", "n_ok"]), result.exit_code.name
    (1, 'OK')

    The options as one value (:class:`~aorta.run.options.RunOptions`), a keyword overriding
    a field:

    >>> from aorta.run.options import RunOptions
    >>> quiet = RunOptions(output=tempfile.mkdtemp(), progress="none")
    >>> sweep(r, options=quiet, ticket="T-1").run_dir.parent.parent.name
    'T-1'
    """
    opts = run_options(options, **overrides)
    check_progress(opts.progress)  # before anything is written: a typo is not a silent default
    dist = DistEnv.from_environ()
    if extend_to is not None:
        if resume is None:
            raise UsageError("extend_to needs resume=RUN_DIR: the run to grow")
        if dist.rank == 0:
            record_extension(resume, trials=extend_to, cells=extend_cells)
    if dist.rank != 0:
        opts = dataclasses.replace(opts, progress="none")  # only rank 0 reports
    coord = coordinator_for(dist)
    try:
        return _sweep(dist, coord, recipe, resume=resume, options=opts)
    finally:
        coord.close()


def _sweep(
    dist: DistEnv,
    coord: LocalCoordinator | StoreCoordinator,
    recipe: Recipe | str | Path | None,
    *,
    resume: str | Path | None,
    options: RunOptions,
) -> SweepResult:
    wait_s = 600.0  # for rank 0 to load the recipe and create the run directory
    rd: RunDir | None = None
    catalog = WorkloadCatalog(extra=options.workloads)
    # 1. Rank 0 reads the recipe (or the run being resumed); the others take its resolved
    #    text, so every rank runs the same plan even if their files differ.
    if dist.rank == 0:
        try:
            prepared, rd = prepare_run(recipe, resume=resume, options=options, catalog=catalog)
            check_world_size(prepared, dist, recipe)
        except AortaError as exc:
            failure = {"error": str(exc), "usage": isinstance(exc, UsageError)}
            coord.share("setup", lambda: failure, timeout_s=wait_s)
            raise
        text = dump_recipe(prepared.plan.recipe)
        ids = {c.name: c.cell_id for c in prepared.plan.cells}
        counts = {c.name: c.trials for c in prepared.plan.cells}
        coord.share(
            "setup",
            lambda: {"recipe": text, "cell_ids": ids, "trials": counts},
            timeout_s=wait_s,
        )
    else:
        setup = coord.share("setup", dict, timeout_s=wait_s)
        if "error" in setup:
            raise (UsageError if setup["usage"] else AortaError)(f"rank 0: {setup['error']}")
        # The recipe is rank 0's resolved one: its overrides are in it already.
        files = RunOptions(mitigations_files=options.mitigations_files)
        prepared = prepare(load_recipe_text(setup["recipe"]), options=files, catalog=catalog)
        prepared = with_trials(prepared, setup.get("trials") or {})
        mine = {c.name: c.cell_id for c in prepared.plan.cells}
        if mine != setup["cell_ids"]:
            raise UsageError(
                f"rank {dist.rank} resolves the cells differently from rank 0 (mitigation files or plugins differ between nodes)"
            )
    # 2. Rank 0 makes (or reopens) the run directory; everyone learns where it is.
    scrub = Redactor.for_recipe(prepared.plan.recipe.redaction)
    own: dict[str, Any] | None = None
    if dist.local_rank == 0:
        own = snapshot(
            scrub_keys=scrub.scrub_keys, scrub_paths=scrub.scrub_paths, scrub_ips=scrub.scrub_ips
        )
    snapshots = coord.gather("hostenv", own, timeout_s=wait_s)
    done: dict[tuple[str, int], TrialRecord] = {}
    with contextlib.ExitStack() as stack:
        if dist.rank == 0:
            if rd is None:
                rd = RunDir.create(
                    options.output,
                    ticket=prepared.plan.recipe.ticket,
                    workload=prepared.plan.workload,
                    name=os.environ.get(envvars.RUN_ID) or None,
                )
            stack.enter_context(rd.lock())
            if resume is not None:
                done = rd.completed({c.name: c.cell_id for c in prepared.plan.cells})
            path = str(rd.path)
            coord.share("run_dir", lambda: path, timeout_s=wait_s)
        else:
            rd = RunDir(coord.share("run_dir", str, timeout_s=wait_s))
        stack.enter_context(procs.sigterm_as_interrupt())
        guard = stack.enter_context(OrphanGuard())
        engine = _Sweep(
            prepared,
            rd,
            choose_reporter(options.progress, verbose=options.verbose),
            coord=coord,
            dist=dist,
            python=options.python,
            backend=_backend_for(prepared, dist, options.backend),
        )
        engine.runner.keep_pids = guard.pids
        if dist.rank == 0:
            try:
                engine.write_preamble(
                    resumed=resume is not None, host_snapshots=[s for s in snapshots or [] if s]
                )
            except KeyboardInterrupt:
                raise Interrupted("interrupted before the first trial", rd.path) from None
        return engine.run(done)


def _backend_for(prepared: Prepared, dist: DistEnv, backend: str | None) -> str | None:
    # Only distributed trials need one, and choosing it imports torch.
    cls = prepared.workload
    if cls is None or (cls.launch_mode != "distributed" and not dist.distributed):
        return backend
    return choose_backend(backend)
