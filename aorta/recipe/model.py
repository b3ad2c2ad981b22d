"""The recipe as one pydantic model: every top-level field with its default, the rules between
blocks that pydantic checks (``adaptive`` against ``schedule`` and ``stop_after``), and the views
derived from it, pure — its cells in order, how many there are, how many trials each runs and
which one is the baseline. Reading a document into it, with the rules across fields that need
all of it, is the rest of :mod:`aorta.recipe`'s.

Examples
--------
>>> r = Recipe.model_validate({"workload": "matmul", "trials": 2, "cells": [
...     {"name": "a", "mitigations": ["none"]}, {"name": "b", "mitigations": ["tf32_off"]}]})
>>> r.n_cells, r.baseline_cell(), [r.planned_trials(c) for c in r.cells]
(2, 'a', [2, 2])
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from aorta.errors import Problem, RecipeError, describe_value
from aorta.errors import invalid as _fail
from aorta.recipe.blocks import (
    Adaptive,
    Axes,
    Bisect,
    CellSpec,
    Collector,
    Confound,
    CustomPattern,
    Forensics,
    Redaction,
    Retain,
    StopAfter,
)
from aorta.recipe.expand import ExpandedCell, axes_cells, probe_cells, written_cells
from aorta.recipe.fields import (
    ConfigMap,
    EnvMap,
    StrictModel,
    check_count,
    check_mitigation_list,
    check_name_bytes,
    closest,
)
from aorta.recipe.limits import MAX_STEPS, MAX_TIMEOUT_S, MAX_TRIALS
from aorta.regex import RegexError, compile_regex

__all__ = ["SCHEMA_VERSION", "Recipe"]

SCHEMA_VERSION = 1


class Recipe(StrictModel):
    """A triage recipe (schema v1). See ``docs/recipes.md`` for every field."""

    schema_version: Literal[1] = 1
    mode: Literal["matrix", "probe"] = "matrix"
    ticket: str | None = None
    description: str | None = None
    workload: str | None = None
    trials: int = Field(1, ge=1, le=MAX_TRIALS)
    steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    timeout_per_trial: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S)
    trial_isolation: Literal["auto", "in_process", "process"] = "auto"
    save_logs: bool = False
    extra_env: EnvMap = Field(default_factory=dict)
    workload_config: ConfigMap = Field(default_factory=dict)
    collect: list[Collector] = Field(default_factory=list)
    confound: Confound = Field(default_factory=Confound)
    stop_after: StopAfter | None = None
    #: Trial order: ``interleaved`` (rounds of one trial per cell, shuffled per round from
    #: ``seed``), ``sequential`` (cell by cell) or ``adaptive`` (interleaved rounds of the
    #: cells not yet decided; see ``adaptive``). Default: interleaved unless cells need
    #: different docker images (see :func:`aorta.recipe.plan.plan`).
    schedule: Literal["interleaved", "sequential", "adaptive"] | None = None
    #: Settings of ``schedule: adaptive`` (defaults when omitted).
    adaptive: Adaptive | None = None
    #: ``aorta bisect``'s variable and its ordered values (``aorta sweep`` warns it ignores them).
    bisect: Bisect | None = None
    #: The run's seed: the interleaved schedule's shuffles.
    seed: int = Field(0, ge=0, le=2**31 - 1)
    #: Run one trial of the baseline first and discard it (``cells/<baseline>/warmup.json``):
    #: a cold first trial (page cache, imports, the GPU waking up) would bias whichever cell
    #: ran first. Not counted in any statistic; matrix.md says it ran. Runs of one cell have
    #: nothing to bias and skip it.
    warmup: bool = True
    cells: list[CellSpec] = Field(default_factory=list)
    axes: Axes | None = None
    # probe mode
    mitigation_axis: list[str] | None = None
    diagnostic_axis: list[str] | None = None
    command: list[str] | None = None
    collect_paths: list[str] = Field(default_factory=list)
    step_time_regex: str | None = None
    env_passthrough_mode: Literal["inherit", "file"] = "inherit"
    redaction: Redaction | None = None
    retain: Retain | None = None

    # failure classification (docs/recipes.md, docs/triage.md)
    #: Seconds of silent output and an idle process tree after which a trial is a hang.
    hang_after: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S)
    #: What a stuck trial's capture takes before the kill (docs/hangs.md).
    forensics: Forensics = Field(default_factory=Forensics)
    #: Arm every Python rank with the numerics locator: per rank, the first module whose
    #: forward output is NaN/Inf (docs/memory.md). Off by default: it costs a check per module.
    check_numerics: bool = False
    custom_patterns: list[CustomPattern] = Field(default_factory=list)

    _count = field_validator("trials", "steps", mode="before")(check_count)

    @field_validator("custom_patterns")
    @classmethod
    def _unique_ids(cls, v: list[CustomPattern]) -> list[CustomPattern]:
        seen = [p.id for p in v]
        dup = sorted({i for i in seen if seen.count(i) > 1})
        if dup:
            raise _fail("custom_patterns", f"duplicate id(s) {', '.join(map(repr, dup))}")
        return v

    @field_validator("timeout_per_trial", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise _fail("number", f"must be a number of seconds > 0, got {describe_value(v)}")
        if isinstance(v, float) and not math.isfinite(v):
            raise _fail(
                "number",
                f"must be a finite number of seconds (at most {MAX_TIMEOUT_S:,}, 30 days), got {v}",
            )
        return v

    _names = field_validator("ticket", "workload", mode="before")(check_name_bytes)

    @field_validator("step_time_regex")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                compile_regex(v, text="str")
            except RegexError as exc:
                raise _fail("regex", str(exc)) from None
        return v

    @field_validator("mitigation_axis", "diagnostic_axis", mode="before")
    @classmethod
    def _axis(cls, v: Any) -> Any:
        return v if v is None else check_mitigation_list(v)

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, v: Any) -> Any:
        if v is not None and (
            not isinstance(v, list) or not v or not all(isinstance(a, str) for a in v)
        ):
            raise _fail(
                "command", f"must be a non-empty list of strings (an argv), got {describe_value(v)}"
            )
        return v

    @model_validator(mode="after")
    def _adaptive_schedule(self) -> Recipe:
        if self.adaptive is not None and self.schedule not in (None, "adaptive"):
            raise _fail(
                "adaptive",
                f"adaptive: settings for schedule: adaptive, but schedule is {self.schedule!r}",
            )
        if self.is_adaptive and self.stop_after is not None:
            raise _fail(
                "adaptive",
                "stop_after (a flake hunt) and schedule: adaptive (a screen) do not combine: "
                "choose one",
            )
        return self

    @property
    def is_adaptive(self) -> bool:
        """Whether the run stops cells as their verdicts settle (``schedule: adaptive``, or an
        ``adaptive:`` block with no schedule)."""
        return self.schedule == "adaptive" or (self.schedule is None and self.adaptive is not None)

    @property
    def adaptive_settings(self) -> Adaptive:
        """The ``adaptive`` block, or its defaults."""
        return self.adaptive if self.adaptive is not None else Adaptive()

    @model_validator(mode="before")
    @classmethod
    def _infer_mode(cls, data: Any) -> Any:
        # Upstream probe recipes always say `mode: probe`; a recipe with a mitigation axis and no
        # mode can mean nothing else.
        if (
            isinstance(data, Mapping)
            and "mode" not in data
            and ("mitigation_axis" in data or "diagnostic_axis" in data)
        ):
            data = {**data, "mode": "probe"}
        return data

    # ---------------------------------------------------------------------------------------
    # derived views (pure)

    @property
    def workload_name(self) -> str:
        """The workload every cell runs (``command`` in probe mode)."""
        return self.workload or "command"

    @property
    def n_cells(self) -> int:
        """How many cells :meth:`expand_cells` gives, counted without expanding them (the bound
        on cells is checked before a huge axes product is built)."""
        if self.mode == "probe":
            return len(self.mitigation_axis or []) * len(self.diagnostic_axis or ["none"])
        n = 0
        if self.axes is not None:
            n = len(self.axes.mitigations or [None]) * len(self.axes.environment or [None])
            for values in self.axes.workload_config.values():
                n *= len(values)
        return len(self.cells) + n

    @property
    def trials_cap(self) -> tuple[str, int | None]:
        """The field that sets how many trials every cell runs, and its value: ``adaptive``'s
        ``max_trials`` on an adaptive run, else ``stop_after.max_trials`` (a flake hunt) when
        set; else ``("trials", None)``: each cell runs its own ``trials`` or the recipe's."""
        if self.is_adaptive:
            return "adaptive.max_trials", self.adaptive_settings.max_trials
        if self.stop_after is not None and self.stop_after.max_trials is not None:
            return "stop_after.max_trials", self.stop_after.max_trials
        return "trials", None

    def planned_trials(self, spec: CellSpec) -> int:
        """How many trials the cell ``spec`` runs at most: the one count of it, which the plan's
        :attr:`~aorta.recipe.plan.Cell.trials` and the bound on the recipe's total both read.

        >>> from aorta.recipe import load_recipe_text
        >>> text = "trials: 3\\ncells: [{name: a, mitigations: [none]}, {name: b, mitigations: [none], trials: 7}]"
        >>> r = load_recipe_text(text, command=["true"])
        >>> [r.planned_trials(c) for c in r.cells], r.trials_cap
        ([3, 7], ('trials', None))
        >>> r = load_recipe_text(text + "\\nstop_after: {max_trials: 20}", command=["true"])
        >>> [r.planned_trials(c) for c in r.cells], r.trials_cap
        ([20, 20], ('stop_after.max_trials', 20))
        """
        cap = self.trials_cap[1]
        return cap if cap is not None else spec.trials or self.trials

    def expand_cells(self) -> list[ExpandedCell]:
        """Every cell of the recipe, in order: explicit ``cells``, then ``axes``, or the probe axes."""
        if self.mode == "probe":
            return probe_cells(self.mitigation_axis or [], self.diagnostic_axis)
        out = written_cells(self.cells)
        if self.axes is not None:
            out.extend(axes_cells(self.axes))
        return out

    def baseline_cell(self) -> str:
        """The baseline's name: explicit, else the first ``baseline-*`` cell, else the first
        cell whose mitigations are all ``none``, else the only cell.

        Raises :class:`~aorta.errors.RecipeError` when none of these applies.
        """
        names = [c.name for c in self.expand_cells()]
        explicit = self.confound.baseline_cell
        if explicit is not None:
            if explicit not in names:
                raise RecipeError(
                    [
                        Problem(
                            "confound.baseline_cell",
                            f"no cell named {explicit!r}{closest(explicit, names)} (cells: {', '.join(names)})",
                        )
                    ]
                )
            return explicit
        for c in self.expand_cells():
            if c.name.startswith("baseline-") or c.name == "baseline":
                return c.name
        for c in self.expand_cells():
            if all(m == "none" for m in c.spec.mitigations):
                return c.name
        if len(names) == 1:
            return names[0]
        raise RecipeError(
            [
                Problem(
                    "confound.baseline_cell",
                    "cannot tell which cell is the baseline: set confound.baseline_cell, name a cell 'baseline-…', or give one cell mitigations [none]",
                )
            ]
        )
