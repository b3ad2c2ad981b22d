"""What one trial produced, as written to ``cells/<cell>/trial_NNNN.json``.

A :class:`TrialRecord` is the unit everything downstream reads: the matrix, the statistics,
resume. In a distributed run the per-rank outcomes are merged into one record (the worst
status wins; passed only if every rank passed) and kept in :attr:`TrialRecord.ranks`.

Examples
--------
>>> r = TrialRecord(cell="a", cell_id="x", trial=0, status="ok", passed=True, step_times_ms=[1.0, 2.0])
>>> TrialRecord.model_validate_json(r.model_dump_json()) == r
True
"""

from __future__ import annotations

import enum
import math
import warnings
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from aorta.errors import AortaWarning
from aorta.hang.model import ForensicsError, HangReport, RankEvidence

__all__ = [
    "ERRORED",
    "FAILURE_KINDS",
    "OUTCOMES",
    "RAN",
    "RECORD_KEYS",
    "RECORD_SCHEMA_VERSION",
    "UPSTREAM_ALIASES",
    "UPSTREAM_NAMES",
    "FailureKind",
    "NonFinite",
    "OomEvent",
    "Outcome",
    "RankOutcome",
    "TrialRecord",
    "TrialStatus",
    "outcome_of",
    "readable_forensics",
    "worst_status",
]

#: 2: ``forensics`` is a :class:`~aorta.hang.HangReport` as its own fields (no ``schema`` key
#: of its own), its culprits' frames with their stacks. A version-1 record reads the same: its
#: ``forensics`` validate as a report whose frames have no stacks.
RECORD_SCHEMA_VERSION = 2


class TrialStatus(str, enum.Enum):
    """How a trial ended, as written in its record. What it means for the statistics — passed,
    failed (and which kind of failure) or errored — is :func:`outcome_of`."""

    #: Ran to the end and the workload's verdict is known (pass or fail).
    OK = "ok"
    #: The workload ran and reported a failure (corruption, non-zero exit, non-finite loss…).
    WORKLOAD_FAILED = "workload_failed"
    #: ``setup()`` raised: the trial never reached its main work.
    SETUP_FAILED = "setup_failed"
    #: aorta or the machine failed around the workload (worker crashed, unknown workload…).
    INFRASTRUCTURE_FAILED = "infrastructure_failed"
    #: The trial hit its deadline; its process group was killed.
    TIMEOUT = "timeout"
    #: The trial was not run (``stop_after`` reached, or the sweep stopped before it).
    DID_NOT_RUN = "did_not_run"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> TrialStatus | None:
        # Upstream AORTA's names are read as ours (records and results written by either).
        return cls.__members__.get(UPSTREAM_ALIASES.get(str(value), "").upper())

    @property
    def upstream_name(self) -> str:
        """The status as upstream AORTA names it (``workload_setup_failed`` for
        ``setup_failed``), for the files upstream's tools read (``matrix.json``)."""
        return UPSTREAM_NAMES.get(self.value, self.value)


#: Our status → upstream AORTA's name for it, where they differ.
UPSTREAM_NAMES: dict[str, str] = {"setup_failed": "workload_setup_failed"}
#: Upstream AORTA's status names → ours (``TrialStatus("workload_setup_failed")`` works).
UPSTREAM_ALIASES: dict[str, str] = {v: k for k, v in UPSTREAM_NAMES.items()}


#: The outcome vocabulary, owned here and nowhere else. A trial *passed*, *failed* (the workload
#: failed, hung, or crashed after its main work started) or *errored* (setup, infrastructure
#: before the work started: it says nothing about the workload); ``did_not_run`` was skipped.
#: Failure rate = failed / (passed + failed).
Outcome = Literal["passed", "failed", "errored", "did_not_run"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "errored", "did_not_run")
#: The kinds of failure, each counted on its own: ``workload`` (the workload reported a failure),
#: ``hang`` (the trial hit its deadline), ``crash`` (the process died after the main work started).
FailureKind = Literal["workload", "hang", "crash"]
FAILURE_KINDS: tuple[FailureKind, ...] = ("workload", "hang", "crash")


def outcome_of(
    status: TrialStatus | str, main_work_started: bool = False
) -> tuple[Outcome, FailureKind | None]:
    """A trial's outcome and, for a failure, its kind.

    ``timeout`` is always a failure (``hang``): a stuck collective is what people triage, and a
    trial hung in its setup is stuck all the same. ``infrastructure_failed`` is a failure
    (``crash``) when the main work had started, otherwise an error, like ``setup_failed``.

    >>> outcome_of("timeout"), outcome_of("infrastructure_failed", True), outcome_of("setup_failed")
    (('failed', 'hang'), ('failed', 'crash'), ('errored', None))
    """
    s = TrialStatus(status)
    if s is TrialStatus.OK:
        return "passed", None
    if s is TrialStatus.WORKLOAD_FAILED:
        return "failed", "workload"
    if s is TrialStatus.TIMEOUT:
        return "failed", "hang"
    if s is TrialStatus.INFRASTRUCTURE_FAILED and main_work_started:
        return "failed", "crash"
    if s is TrialStatus.DID_NOT_RUN:
        return "did_not_run", None
    return "errored", None


#: Status groups (values are the status strings, so they work on records and on a Dataset's
#: ``status`` alike). ``RAN``: the statuses a trial that *ran* can have (passed or failed; an
#: ``infrastructure_failed`` trial ran only if its main work started, see :func:`outcome_of`).
RAN: tuple[str, ...] = (
    TrialStatus.OK.value,
    TrialStatus.WORKLOAD_FAILED.value,
    TrialStatus.TIMEOUT.value,
)
#: Statuses that are always errors (``infrastructure_failed`` is one unless the work had started).
ERRORED: tuple[str, ...] = (
    TrialStatus.SETUP_FAILED.value,
    TrialStatus.INFRASTRUCTURE_FAILED.value,
)

# Worst first: merging ranks keeps the worst.
_SEVERITY = {
    TrialStatus.INFRASTRUCTURE_FAILED: 5,
    TrialStatus.TIMEOUT: 4,
    TrialStatus.SETUP_FAILED: 3,
    TrialStatus.WORKLOAD_FAILED: 2,
    TrialStatus.OK: 1,
    TrialStatus.DID_NOT_RUN: 0,
}


def worst_status(statuses: Sequence[TrialStatus | str]) -> TrialStatus:
    """The most severe of ``statuses`` (infrastructure > timeout > setup > workload > ok).

    >>> worst_status(["ok", "workload_failed", "ok"]).value
    'workload_failed'
    """
    if not statuses:
        return TrialStatus.DID_NOT_RUN
    return max((TrialStatus(s) for s in statuses), key=_SEVERITY.__getitem__)


def _finite_or_none(values: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k, v in values.items():
        if v is None:
            out[k] = None
        else:
            f = float(v)
            out[k] = f if math.isfinite(f) else None
    return out


class _Model(BaseModel):
    # Records written by a newer aorta may carry extra fields: keep reading them.
    model_config = ConfigDict(extra="ignore")


class OomEvent(_Model):
    """One rank's out-of-memory, as its log said it (:mod:`aorta.run.oom`): sizes in bytes,
    ``None`` where the message gives none.

    >>> OomEvent(rank=3, kind="cuda", requested_bytes=2 << 30).reserved_unallocated_bytes is None
    True
    """

    rank: int | None = None
    #: ``cuda``, ``hip``, ``xpu`` (the caching allocator), ``cpu``, ``blas``, ``nccl``, ``runtime``.
    kind: str = "runtime"
    requested_bytes: int | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None
    #: Memory in tensors (``is allocated by PyTorch``).
    allocated_bytes: int | None = None
    #: Cached by the allocator but in no tensor (fragmentation's share).
    reserved_unallocated_bytes: int | None = None
    #: What the process (all of it, PyTorch's and not) held on the device.
    process_in_use_bytes: int | None = None
    device: str | None = None
    line: str = ""


class NonFinite(_Model):
    """One rank's first module whose forward output was not finite (:mod:`aorta.run.numerics`):
    the ``step`` (the root module's forward count, from 0), the module's qualified ``module``
    name and ``cls``, ``kind`` (``nan`` or ``inf``), and whether its inputs were finite (if
    they were, this module produced the value; if not, it was fed one).

    >>> NonFinite(rank=1, step=3, module="layers.2.proj", cls="Linear", kind="inf").inputs_finite
    True
    """

    rank: int | None = None
    step: int = 0
    module: str = ""
    cls: str = ""
    kind: str = "nan"
    inputs_finite: bool = True


class _Result(_Model):
    """What a trial produced — the fields a rank's outcome and the merged record share."""

    status: TrialStatus
    #: The workload's verdict; False for every status but ``ok``.
    passed: bool
    failure_count: int = 0
    failure_details: list[dict[str, Any]] = Field(default_factory=list)
    #: One time per executed step (warm-up included); rank 0's in a merged record.
    step_times_ms: list[float] = Field(default_factory=list)
    #: How many leading ``step_times_ms`` are warm-up.
    warmup_steps: int = 0
    #: Time the workload reported for its main work.
    elapsed_sec: float | None = None
    #: Time the engine measured for the whole trial, setup and cleanup included.
    wall_clock_s: float | None = None
    total_iterations: int | None = None
    executed_iterations: int | None = None
    configured_iterations: int | None = None
    main_work_started: bool = False
    metrics: dict[str, float | None] = Field(default_factory=dict)
    info: dict[str, str] = Field(default_factory=dict)
    #: Why the trial did not end ``ok`` (the exception, the deadline, the crash).
    error: str | None = None
    hint: str | None = None
    warnings: list[str] = Field(default_factory=list)
    exit_code: int | None = None
    #: Files of the trial, relative to the run directory (``stdout``, ``trace/rank0``…).
    artifacts: dict[str, str] = Field(default_factory=dict)
    #: The failure signature the trial's output shows (``aorta.run.signatures``), its tier,
    #: hint and the matching line as ``file:line: text``; ``None`` when none matched.
    signature: str | None = None
    signature_tier: int | None = None
    signature_hint: str | None = None
    signature_line: str | None = None
    #: Each rank's out-of-memory line, parsed (:mod:`aorta.run.oom`); one per rank at most.
    oom: list[OomEvent] = Field(default_factory=list)
    #: Each rank's first non-finite module output (``check_numerics``); one per rank at most.
    numerics: list[NonFinite] = Field(default_factory=list)

    _metrics = field_validator("metrics", mode="before")(
        classmethod(lambda cls, v: _finite_or_none(v or {}))
    )


class RankOutcome(_Result):
    """One rank's part of a trial (a single-process trial has exactly one, rank 0)."""

    rank: int
    host: str | None = None
    #: The workload returned a result (False: it crashed, hung, or never started).
    completed: bool = False
    #: This rank was stopped because another rank's trial died.
    stopped_by_peer: bool = False
    #: What this rank's hang capture took (:mod:`aorta.run.forensics`), on its way to rank 0,
    #: which turns every rank's into the record's ``forensics``; not kept in the record.
    evidence: list[RankEvidence] = Field(default_factory=list)


class TrialRecord(_Result):
    """The record of one trial of one cell (``trial`` counts from 0)."""

    schema_version: int = RECORD_SCHEMA_VERSION
    cell: str
    cell_id: str
    trial: int
    seed: int = 0
    workload: str = ""
    isolation: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    host: str | None = None
    world_size: int = 1
    #: Position of the trial in the run's execution order (0 first; None when not recorded).
    run_order: int | None = None
    ranks: list[RankOutcome] = Field(default_factory=list)
    #: Who hung, and where (:func:`aorta.hang.analyze` of every rank's evidence, taken before
    #: the kill): culprit ranks, the collective, its sequence number and process group, the
    #: culprits' frames and stacks, the evidence files. ``None`` when nothing was captured.
    #: Validated on write and on load: a record whose forensics do not read as a report loads
    #: without them, with an :class:`~aorta.errors.AortaWarning`.
    forensics: HangReport | None = None

    @field_validator("forensics", mode="before")
    @classmethod
    def _forensics(cls, value: Any, info: ValidationInfo) -> Any:
        # A record whose forensics no reader can take loads without them: the trial's
        # outcome still counts, and a report or a resume never breaks on it again.
        forensics, problem = readable_forensics(value)
        if problem is not None:
            where = f"{info.data.get('cell', '?')} trial {info.data.get('trial', '?')}"
            warnings.warn(AortaWarning(f"{where}: {problem}"), stacklevel=2)
        return forensics

    @property
    def outcome(self) -> Outcome:
        """``passed``, ``failed``, ``errored`` or ``did_not_run`` (:func:`outcome_of`)."""
        return outcome_of(self.status, self.main_work_started)[0]

    @property
    def failure_kind(self) -> FailureKind | None:
        """``workload``, ``hang`` or ``crash`` for a failed trial, else None."""
        return outcome_of(self.status, self.main_work_started)[1]

    @property
    def is_error(self) -> bool:
        """Setup or infrastructure before the work started: says nothing about the workload."""
        return self.outcome == "errored"

    @property
    def is_failure(self) -> bool:
        """The workload failed, hung or crashed after it started (what a failure rate counts)."""
        return self.outcome == "failed"

    def to_json(self) -> bytes:
        return self.model_dump_json(indent=1).encode()


def readable_forensics(value: object) -> tuple[HangReport | None, str | None]:
    """A trial record's ``forensics`` as every reader takes it: ``(report, None)`` when it is
    ``None`` or reads as a :class:`~aorta.hang.HangReport`; ``(None, why)`` when it does not
    (a hand-edited record, another version's layout), and the record is read without it.

    >>> readable_forensics(None), readable_forensics({"summary": "s", "kind": "none"})[0].kind
    ((None, None), 'none')
    >>> readable_forensics({"summary": "s", "kind": "none", "culprit_ranks": 5})
    (None, 'its forensics are left out: report.culprit_ranks: must be a list, got integer 5')
    >>> readable_forensics("x")
    (None, 'its forensics are left out: a string, not a mapping')
    """
    if value is None or isinstance(value, HangReport):
        return value, None
    if not isinstance(value, dict):
        kind = "a string" if isinstance(value, str) else f"a {type(value).__name__}"
        return None, f"its forensics are left out: {kind}, not a mapping"
    try:
        return HangReport.from_dict(value), None
    except ForensicsError as exc:
        first = exc.problems[0] if exc.problems else "unreadable"
        more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
        return None, f"its forensics are left out: {' '.join(first.split())[:200]}{more}"


#: Every field name of a trial record and of its ranks' outcomes: the keys aorta itself writes
#: (redaction never masks one, or the record could not be read back).
RECORD_KEYS = frozenset(TrialRecord.model_fields) | frozenset(RankOutcome.model_fields)


def merge_ranks(outcomes: Sequence[RankOutcome | None], world_size: int) -> dict[str, Any]:
    """Merge per-rank outcomes into one trial's :class:`TrialRecord` fields.

    The worst status wins; passed only if every rank passed; failures are summed (each detail
    tagged with its rank); rank 0's step times, metrics and counters are kept; warnings and
    artifacts of all ranks are kept. A rank that reported nothing is an infrastructure
    failure. With one rank the record is that rank's outcome (and ``ranks`` stays empty).

    >>> ok = RankOutcome(rank=0, status="ok", passed=True, step_times_ms=[1.0])
    >>> bad = RankOutcome(rank=1, status="workload_failed", passed=False, failure_count=2, error="corrupt")
    >>> m = merge_ranks([ok, bad], 2)
    >>> m["status"].value, m["passed"], m["failure_count"], m["error"]
    ('workload_failed', False, 2, 'rank 1: corrupt')
    """
    ranks: list[RankOutcome] = []
    for r in range(world_size):
        got = outcomes[r] if r < len(outcomes) else None
        if got is None:
            got = RankOutcome(
                rank=r,
                status=TrialStatus.INFRASTRUCTURE_FAILED,
                passed=False,
                error="this rank reported no outcome (its aorta process died or hung)",
            )
        ranks.append(got)
    first = ranks[0]
    status = worst_status([r.status for r in ranks])
    # The rank that caused the status, not one stopped because of it.
    worst = [r for r in ranks if r.status is status and status is not TrialStatus.OK]
    culprit = next((r for r in worst if not r.stopped_by_peer), worst[0] if worst else None)
    single = world_size == 1
    error = culprit.error if culprit is not None else None
    if error and not single:
        error = f"rank {culprit.rank}: {error}"  # type: ignore[union-attr]
    warnings = [
        w if single or r.rank == 0 else f"rank {r.rank}: {w}" for r in ranks for w in r.warnings
    ]
    artifacts: dict[str, str] = {}
    for outcome in ranks:
        artifacts.update(outcome.artifacts)
    # The root cause's signature: the lowest tier over the ranks (a peer's watchdog timeout
    # follows another rank's illegal memory access), then the lowest rank.
    signed = [r for r in ranks if r.signature]
    sig = min(signed, key=lambda r: (r.signature_tier or 0, r.rank), default=None)
    return {
        "status": status,
        "passed": all(r.passed for r in ranks) and status is TrialStatus.OK,
        "failure_count": sum(r.failure_count for r in ranks),
        "failure_details": [
            d if single else {**d, "rank": d.get("rank", r.rank)}
            for r in ranks
            for d in r.failure_details
        ],
        "error": error,
        "hint": culprit.hint if culprit is not None else first.hint,
        "warnings": warnings,
        "exit_code": culprit.exit_code if culprit is not None else first.exit_code,
        "step_times_ms": first.step_times_ms,
        "warmup_steps": first.warmup_steps,
        "elapsed_sec": first.elapsed_sec,
        "total_iterations": first.total_iterations,
        "executed_iterations": first.executed_iterations,
        "configured_iterations": first.configured_iterations,
        "main_work_started": any(r.main_work_started for r in ranks),
        "metrics": dict(first.metrics),
        "info": dict(first.info),
        "artifacts": artifacts,
        "world_size": world_size,
        "ranks": [] if single else [r.model_copy(update={"evidence": []}) for r in ranks],
        "oom": [
            e if e.rank is not None else e.model_copy(update={"rank": r.rank})
            for r in ranks
            for e in r.oom
        ],
        "numerics": [
            e if e.rank is not None else e.model_copy(update={"rank": r.rank})
            for r in ranks
            for e in r.numerics
        ],
        "signature": sig.signature if sig else None,
        "signature_tier": sig.signature_tier if sig else None,
        "signature_hint": sig.signature_hint if sig else None,
        "signature_line": (
            None
            if sig is None
            else sig.signature_line
            if single
            else f"rank {sig.rank}: {sig.signature_line}"
        ),
    }
