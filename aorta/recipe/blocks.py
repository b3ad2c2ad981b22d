"""The blocks a recipe is made of, as pydantic models: a cell as written (:class:`CellSpec`) and
the ``axes`` that expand into cells; how cells are compared (``confound``), stopped
(``stop_after``, ``adaptive``) or searched (``bisect``); what a trial arms and keeps
(``forensics``, ``collect``, ``redaction``, ``retain``); the recipe's own failure signatures
(``custom_patterns``). :class:`~aorta.recipe.model.Recipe` holds them.

Examples
--------
>>> cell = CellSpec.model_validate({"name": "a", "mitigations": ["none"], "trials": 3})
>>> cell.trials, cell.environment
(3, 'local')
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from aorta.errors import describe_value
from aorta.errors import invalid as _fail
from aorta.recipe.condition import compile_condition
from aorta.recipe.fields import (
    CELL_NAME_RE,
    RESERVED_CELL_NAMES,
    ConfigKey,
    ConfigMap,
    EnvMap,
    EnvName,
    EnvValue,
    StrictModel,
    check_count,
    check_mitigation_list,
    check_name_bytes,
    closest,
)
from aorta.recipe.limits import MAX_NAME_BYTES, MAX_STEPS, MAX_TRIALS, image_ref_problem
from aorta.regex import RegexError, compile_regex

__all__ = [
    "DEFAULT_CONFOUND_THRESHOLD",
    "KNOWN_COLLECTORS",
    "Adaptive",
    "Axes",
    "Bisect",
    "CellSpec",
    "Collector",
    "Confound",
    "CustomPattern",
    "DockerEnvironment",
    "EnvironmentRef",
    "Forensics",
    "PatternMatch",
    "Redaction",
    "Retain",
    "RetainLevel",
    "StopAfter",
]

#: Collectors a recipe may ask for, with the options each accepts.
KNOWN_COLLECTORS: dict[str, frozenset[str]] = {
    "torch_profiler": frozenset(
        {"wait", "warmup", "active", "repeat", "record_shapes", "with_stack", "profile_memory"}
    ),
}


#: The ratio beyond which a cell is tagged slower, and the statistics' band of practical
#: equivalence ``[1/t, t]``, unless a recipe or a caller names another.
DEFAULT_CONFOUND_THRESHOLD = 1.15


class Confound(StrictModel):
    """How a cell is tagged against the baseline (upstream's ``confound`` block)."""

    #: A cell whose mean step time exceeds the baseline's by this ratio is tagged ``speed (+N%)``;
    #: the statistics use it as the band of practical equivalence.
    threshold: float = Field(DEFAULT_CONFOUND_THRESHOLD, gt=1.0, allow_inf_nan=False)
    #: The cell every other cell is compared with; resolved automatically when unset.
    baseline_cell: str | None = None

    @field_validator("threshold", mode="before")
    @classmethod
    def _no_bool(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise _fail("number", f"must be a number > 1.0, got {describe_value(v)}")
        return v


class StopAfter(StrictModel):
    """Stop a cell's trials early once enough events were seen (hunting a rare failure)."""

    #: Stop after this many trials of the cell had an event.
    events: int = Field(1, ge=1, le=MAX_TRIALS)
    #: The most trials a cell runs while hunting (default: the cell's ``trials``).
    max_trials: int | None = Field(None, ge=1, le=MAX_TRIALS)
    #: Which trial outcome counts as an event.
    event_verdict: Literal["workload_failed", "timeout", "any_failure"] = "workload_failed"

    _count = field_validator("events", "max_trials", mode="before")(check_count)


class Adaptive(StrictModel):
    """``schedule: adaptive``: rounds of the baseline and every undecided cell, each cell
    stopped as soon as its verdict is settled (docs/statistics.md, "Adaptive sweeps")."""

    #: Trials every cell runs before the first decision (≥ 5).
    min_trials: int = Field(5, ge=5, le=MAX_TRIALS)
    #: The most trials a cell runs; a cell still undecided then stops as ``undecided``.
    max_trials: int = Field(30, ge=5, le=MAX_TRIALS)
    #: Trials per undecided cell between two decisions.
    round: int = Field(1, ge=1, le=MAX_TRIALS)
    #: The failure-rate difference that does not matter (equivalence and futility).
    failure_margin: float = Field(0.15, gt=0, lt=1, allow_inf_nan=False)

    _count = field_validator("min_trials", "max_trials", "round", mode="before")(check_count)

    @model_validator(mode="after")
    def _order(self) -> Adaptive:
        if self.max_trials < self.min_trials:
            raise _fail(
                "adaptive",
                f"max_trials ({self.max_trials}) must be ≥ min_trials ({self.min_trials})",
            )
        return self


class Bisect(StrictModel):
    """``aorta bisect``: an ordered list of values of one variable, the first known good and
    the last known bad; each step runs the midpoint against the first (docs/history.md)."""

    #: The environment variable every trial gets, ``NAME=value``.
    variable: EnvName
    #: The values in order: ``values[0]`` good, ``values[-1]`` bad, at least 3, distinct.
    values: list[EnvValue] = Field(min_length=3, max_length=4096)

    @field_validator("values", mode="before")
    @classmethod
    def _texts(cls, v: Any) -> Any:
        if not isinstance(v, list):
            raise _fail("bisect", f"values must be a list, got {describe_value(v)}")
        out = [str(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x for x in v]
        dup = sorted({str(x) for x in out if out.count(x) > 1})
        if dup:
            raise _fail("bisect", f"values must be distinct, repeated: {', '.join(dup)}")
        return out


class Forensics(StrictModel):
    """Hang forensics (docs/hangs.md): what every trial arms, and what aorta takes before it
    kills a stuck trial (a hang, the deadline, a peer's stop, Ctrl-C)."""

    #: Take the evidence before a stuck trial's processes are killed.
    enabled: bool = True
    #: Arm PyTorch's flight recorder (``TORCH_FR_BUFFER_SIZE``, ``TORCH_NCCL_DUMP_ON_TIMEOUT``,
    #: ``TORCH_FR_DUMP_TEMP_FILE``, unless the trial's environment sets them) and load aorta's
    #: dump listener into the trial's Python processes (``PYTHONPATH``).
    flight_recorder: bool = True
    #: Entries of the recorder's ring buffer (``TORCH_FR_BUFFER_SIZE``).
    buffer_size: int = Field(2000, ge=1, le=1_000_000)
    #: Every Python thread's stack, by ``py-spy dump``.
    stacks: bool = True
    #: Native frames too (``py-spy dump --native``): slower, and not on every system.
    native: bool = False

    _count = field_validator("buffer_size", mode="before")(check_count)


class Redaction(StrictModel):
    """What to scrub from saved environment snapshots and logs (probe mode)."""

    scrub_env_keys: list[str] = Field(default_factory=list)
    scrub_paths: bool = False
    scrub_ip_addresses: bool = False


#: How much of a trial's artifact folder is kept once its record is written (the record is
#: always kept): ``full`` everything; ``log`` its logs only; ``summary`` the last lines of
#: each log; ``none`` nothing.
RetainLevel = Literal["full", "log", "summary", "none"]


class Retain(StrictModel):
    """Which artifacts of a trial are kept, by outcome (upstream's ``retain`` block)."""

    #: Trials that failed: a workload failure, a hang (``timeout``) or a crash after the work
    #: started (:func:`aorta.store.record.outcome_of`).
    on_fail: RetainLevel = "full"
    #: Trials that passed.
    on_pass: RetainLevel = "full"
    #: Trials that errored (setup, or infrastructure before the work started) or did not run.
    on_error: RetainLevel = "full"


class PatternMatch(StrictModel):
    """What a custom pattern matches: a regex (one line) and an optional ``condition``."""

    regex: str
    condition: str | None = None

    @field_validator("regex")
    @classmethod
    def _regex(cls, v: str) -> str:
        try:
            compile_regex(v)
        except RegexError as exc:
            raise _fail("regex", str(exc)) from None
        return v

    @field_validator("condition")
    @classmethod
    def _condition(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                compile_condition(v)
            except ValueError as exc:
                raise _fail("condition", str(exc)) from None
        return v


class CustomPattern(StrictModel):
    """A failure signature of the recipe's own (upstream's ``custom_patterns`` entry).

    ``on_match``: ``fail`` fails a trial whose output matches (a passing one too), ``warn``
    adds a warning, ``info`` only keeps the named groups (``info["capture.<name>"]``).
    ``required_for_pass``: a trial whose output lacks the line fails. ``hint`` and ``tier``
    are aorta's additions (default tier 0: the recipe's patterns outrank the library's).
    """

    id: str = Field(min_length=1, max_length=MAX_NAME_BYTES)
    match: PatternMatch
    on_match: Literal["fail", "warn", "info"] = "fail"
    required_for_pass: bool = False
    category: str | None = None
    hint: str | None = None
    tier: int = Field(0, ge=0, le=9)

    @model_validator(mode="after")
    def _required(self) -> CustomPattern:
        if self.required_for_pass and self.on_match != "fail":
            raise _fail(
                "adaptive",
                f"required_for_pass needs on_match: fail (got {self.on_match!r}); a warn or "
                "info pattern cannot decide a trial",
            )
        return self


class Collector(StrictModel):
    """A data collector for each trial, e.g. ``torch_profiler`` with its schedule."""

    name: str
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_short_forms(cls, data: Any) -> Any:
        # `- torch_profiler` and `- torch_profiler: {active: 3}` are the forms people write.
        if isinstance(data, str):
            data = {"name": data}
        elif isinstance(data, Mapping) and len(data) == 1 and "name" not in data:
            ((name, options),) = data.items()
            data = {"name": name, "options": {} if options is None else options}
        if isinstance(data, Mapping) and isinstance(data.get("name"), str):
            name = data["name"]
            if name not in KNOWN_COLLECTORS:
                raise _fail(
                    "collector",
                    f"unknown collector {name!r}{closest(name, KNOWN_COLLECTORS)} (known: {', '.join(KNOWN_COLLECTORS)})",
                )
            options = data.get("options") or {}
            if isinstance(options, Mapping):
                for key in options:
                    if key not in KNOWN_COLLECTORS[name]:
                        raise _fail(
                            "collector_option",
                            f"{name}: unknown option {key!r} (allowed: {', '.join(sorted(KNOWN_COLLECTORS[name]))})",
                        )
        return data


class DockerEnvironment(StrictModel):
    """An inline environment: ``environment: {docker: rocm/pytorch:latest}``."""

    docker: str = Field(min_length=1)

    @field_validator("docker")
    @classmethod
    def _ref(cls, v: str) -> str:
        problem = image_ref_problem(v)
        if problem:
            raise _fail("image_ref", f"{problem}, got {v!r}")
        return v

    @property
    def name(self) -> str:
        """``_inline_<8 hex of blake2b(ref)>``: stable, so resumed runs find the same cells."""
        return "_inline_" + hashlib.blake2b(self.docker.encode(), digest_size=4).hexdigest()


def _check_environment(value: Any) -> Any:
    if isinstance(value, str | DockerEnvironment):
        if isinstance(value, str) and not value:
            raise _fail("environment", "must not be empty")
        return value
    if isinstance(value, Mapping):
        if set(value) != {"docker"}:
            raise _fail(
                "environment",
                f"an inline environment is {{docker: <image ref>}}, got keys {', '.join(map(str, value))}",
            )
        return DockerEnvironment.model_validate(value)
    raise _fail(
        "environment",
        f"must be an environment name or {{docker: <image ref>}}, got {describe_value(value)}",
    )


EnvironmentRef = Annotated[str | DockerEnvironment, BeforeValidator(_check_environment)]


class CellSpec(StrictModel):
    """One cell as written in the recipe: a bundle of mitigations × an environment."""

    name: str
    mitigations: list[str]
    environment: EnvironmentRef = "local"
    extra_env: EnvMap = Field(default_factory=dict)
    trials: int | None = Field(None, ge=1, le=MAX_TRIALS)
    steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    workload_config: ConfigMap = Field(default_factory=dict)
    collect: list[Collector] | None = None

    _mit = field_validator("mitigations", mode="before")(check_mitigation_list)
    _count = field_validator("trials", "steps", mode="before")(check_count)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        check_name_bytes(v)
        if v in RESERVED_CELL_NAMES:
            raise _fail("cell_name", f"{v!r} is reserved")
        if not CELL_NAME_RE.match(v):
            raise _fail(
                "cell_name",
                f"{v!r} is not a valid cell name (letters, digits, '_', '.', '-'; not starting with '.' or '-')",
            )
        return v


class Axes(StrictModel):
    """A cartesian product of cells (beyond upstream AORTA).

    ``mitigations`` lists stacks (a name or a list of names), ``environment`` lists
    environments, ``workload_config`` maps a key to the values it takes. Each combination is a
    cell named from its parts, e.g. ``tf32_off-local-m_2048``.
    """

    mitigations: list[list[str]] | None = None
    environment: list[EnvironmentRef] | None = None
    workload_config: dict[ConfigKey, list[Any]] = Field(default_factory=dict)

    @field_validator("mitigations", mode="before")
    @classmethod
    def _stacks(cls, v: Any) -> Any:
        if v is None:
            return v
        if not isinstance(v, list) or not v:
            raise _fail("axis", f"must be a non-empty list, got {describe_value(v)}")
        return [[s] if isinstance(s, str) else check_mitigation_list(s) for s in v]

    @field_validator("environment", mode="before")
    @classmethod
    def _envs(cls, v: Any) -> Any:
        if v is None:
            return v
        if not isinstance(v, list) or not v:
            raise _fail("axis", f"must be a non-empty list, got {describe_value(v)}")
        return v

    @field_validator("workload_config", mode="before")
    @classmethod
    def _cfg(cls, v: Any) -> Any:
        if not isinstance(v, Mapping):
            raise _fail("axis", f"must be a mapping of key: [values], got {describe_value(v)}")
        for key, values in v.items():
            if not isinstance(values, list) or not values:
                raise _fail(
                    "axis",
                    f"{key}: must be a non-empty list of values, got {describe_value(values)}",
                )
        return v
