"""``aorta bisect``: the first bad value of an ordered list, each step an adaptive A/B test.

The recipe's ``bisect: {variable: NAME, values: [v0, …, vN]}`` lists the values in order,
``v0`` known good and ``vN`` known bad; every trial gets ``NAME=value`` in its environment (so
the job can pick a container image, a venv or a library build from it). The search is
:class:`BisectPlan`, pure: the range still open, the next value to try, the range after a
verdict.

**The endpoints are measured once.** The first run (step 0) measures ``v0`` and ``vN`` — the
recipe's first cell with ``NAME=v0`` and ``NAME=vN``, interleaved — until ``vN`` is settled
against ``v0``: a bisect whose last value is not measurably worse than its first has nothing to
find, and says so instead of naming ``vN``. Each later step is a run of the midpoint alone,
compared with the endpoints' trials already measured (midpoint trial ``k`` paired with ``v0``'s
trial ``k``, as :mod:`aorta.matrix.sequential` pairs them): it looks after ``min_trials``
trials and every ``round`` after, and stops as soon as it is settled — anytime-valid, so the
looks cost no error rate. When a step needs more pairs than ``v0`` has, the endpoints' run
grows in place and every later step reuses the larger pool. The midpoint is *bad* when it fails
more than ``v0`` or is slower beyond the band; *good* when settled against ``v0`` otherwise, or
when it is better than ``vN`` on what made ``vN`` bad in step 0 — fails less, or is faster
beyond the band (one change in the list: a value not at the bad level comes before it) — each of the two at half the level, so a wrong *good*
stays as rare as one test's; *undecided* when still open at ``max_trials``: the search stops
there and names the range still open.

The price of reuse: a midpoint's trials are paired with trials of ``v0`` run earlier, not in the
same rounds, so a machine that drifts between the steps shows as a difference. Hence the
**drift sentinel**: each step's run starts with 2 trials of ``v0`` beside its midpoint's first
2, compared with the pooled ``v0`` trials (:func:`aorta.matrix.sentinel.sentinel_drift`: both
beyond every pooled trial on one side, and their median beyond the band; and their failures,
:func:`~aorta.matrix.sentinel.failure_drift`: Boschloo's p at most 0.05); on drift that step
runs ``v0`` and ``vN`` again beside its midpoint, as ``remeasure`` does, and its ``drift`` (and
its reason) says so. ``remeasure`` (``aorta bisect --remeasure``) runs ``v0`` and ``vN`` again
beside every midpoint, in one adaptive sweep per step (:func:`step_recipe`), as bisect did
before the endpoints were reused.

Every run is an ordinary run directory (records, ``matrix.md``, ``aorta report``) whose
manifest says which step it was (``bisect``; step 0: the endpoints) and whose ``bisect.json``
holds the search up to it: the last step's is the answer.

Examples
--------
>>> p = BisectPlan(tuple("abcdefgh"))
>>> p.next, p.after("good").next, p.after("good").after("bad").range
(3, 5, ('d', 'f'))
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from aorta.errors import UsageError
from aorta.matrix.compare import compare
from aorta.matrix.dataset import build_dataset
from aorta.matrix.load import load_run
from aorta.matrix.sentinel import SENTINEL_TRIALS, failure_drift, sentinel_drift
from aorta.matrix.stats import DEFAULT_ALPHA, trial_medians
from aorta.recipe import Recipe
from aorta.recipe.blocks import Adaptive  # a block's model: not on aorta.recipe's face
from aorta.recipe.load import recipe_from_data, recipe_to_data  # not on aorta.recipe's face
from aorta.run.adaptive import decision_metric
from aorta.run.options import RunOptions
from aorta.run.sweep import sweep
from aorta.store.record import TrialRecord, TrialStatus
from aorta.store.rundir import BISECT_JSON, RunDir, atomic_write, utc_now

__all__ = [
    "BisectPlan",
    "BisectResult",
    "Comparison",
    "Step",
    "Verdict",
    "bisect",
    "step_recipe",
]

Verdict = Literal["good", "bad", "undecided"]


@dataclass(frozen=True)
class BisectPlan:
    """The search over ``values``: ``good`` the last index known good, ``bad`` the first known
    bad (``values[0]`` and ``values[-1]`` to start with). Pure: each verdict gives a new plan.

    >>> p = BisectPlan(("v0", "v1", "v2"))
    >>> p.done, p.next, p.after("bad").first_bad
    (False, 1, 'v1')
    """

    values: tuple[str, ...]
    good: int = 0
    bad: int = -1

    def __post_init__(self) -> None:
        if len(self.values) < 2:
            raise ValueError("a bisect needs at least two values")
        if self.bad < 0:
            object.__setattr__(self, "bad", len(self.values) - 1)
        if not 0 <= self.good < self.bad < len(self.values):
            raise ValueError(
                f"need 0 ≤ good < bad < {len(self.values)}, got {self.good}, {self.bad}"
            )

    @property
    def done(self) -> bool:
        """Whether the first bad value is known (good and bad are neighbours)."""
        return self.bad - self.good <= 1

    @property
    def next(self) -> int:
        """The index to try next: the middle of the open range."""
        return (self.good + self.bad) // 2

    @property
    def range(self) -> tuple[str, str]:
        """The last value known good and the first known bad."""
        return self.values[self.good], self.values[self.bad]

    @property
    def first_bad(self) -> str | None:
        """The first bad value once :attr:`done`, else ``None``."""
        return self.values[self.bad] if self.done else None

    def after(self, verdict: Verdict) -> BisectPlan:
        """The plan once :attr:`next` was found ``good`` or ``bad`` (``undecided`` keeps it)."""
        if self.done:
            raise ValueError("the search is over")
        if verdict == "good":
            return dataclasses.replace(self, good=self.next)
        if verdict == "bad":
            return dataclasses.replace(self, bad=self.next)
        return self


@dataclass(frozen=True)
class Comparison:
    """The midpoint against one endpoint: the ratio of its step times (or wall clock) to the
    endpoint's with the CI, the timing and failure verdicts, and the pairs they rest on."""

    against: str
    ratio: float | None
    ci: tuple[float | None, float | None]
    difference: str
    band: str
    failures: str
    decided: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a step's ``vs_bad``)."""
        return {
            "against": self.against,
            "ratio": self.ratio,
            "ci": list(self.ci),
            "difference": self.difference,
            "band": self.band,
            "failures": self.failures,
            "decided": self.decided,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Step:
    """One step: the value tried, its verdict against ``values[0]``, the ratio with its CI,
    the failures and trials of the value's cell, the run directory; ``vs_bad``: the same value
    against the last value (``None`` where the step had no trials of it); ``endpoints``: whether
    this was step 0, the last value against the first."""

    value: str
    verdict: Verdict
    ratio: float | None
    ci: tuple[float | None, float | None]
    failures: int
    trials: int
    run_dir: str
    reason: str
    vs_bad: Comparison | None = None
    endpoints: bool = False
    #: The drift sentinel's finding when it re-measured the endpoints beside this step's
    #: midpoint (``v0``'s fresh trials against its pooled ones); ``""`` when it did not.
    drift: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``aorta bisect --json``'s ``steps``)."""
        return {
            "drift": self.drift or None,
            "value": self.value,
            "verdict": self.verdict,
            "ratio": self.ratio,
            "ci": list(self.ci),
            "failures": self.failures,
            "trials": self.trials,
            "run_dir": self.run_dir,
            "reason": self.reason,
            "vs_bad": None if self.vs_bad is None else self.vs_bad.to_dict(),
        }


@dataclass(frozen=True)
class BisectResult:
    """The search's answer: the first bad value (``None`` when a step stayed undecided, or the
    last value was not worse than the first), the last good, the endpoints' check (step 0;
    ``None`` with ``remeasure``), every step and the trials they cost in all."""

    variable: str
    values: tuple[str, ...]
    first_bad: str | None
    last_good: str
    open_range: tuple[str, str]
    steps: list[Step]
    trials: int
    record: Path
    endpoints: Step | None = None
    remeasure: bool = False

    def to_json(self) -> dict[str, Any]:
        """``{"first_bad", "last_good", "trials", "endpoints", "steps": [...]}`` plus the
        variable, the values, ``remeasure`` and, when undecided, the range still open."""
        return {
            "variable": self.variable,
            "values": list(self.values),
            "first_bad": self.first_bad,
            "last_good": self.last_good,
            "open_range": None if self.first_bad else list(self.open_range),
            "trials": self.trials,
            "remeasure": self.remeasure,
            "endpoints": None if self.endpoints is None else self.endpoints.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
            "record": str(self.record),
        }


def _cell_name(prefix: str, index: int, value: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_.\-]+", "_", value)[:40].strip("._-") or "v"
    return f"{prefix}{index:02d}-{text}"


def _cells_recipe(
    recipe: Recipe,
    picks: list[tuple[str, int]],
    *,
    trials: int | None = None,
    fewer: dict[int, int] | None = None,
) -> Recipe:
    """The recipe's first cell once per ``(prefix, index)`` with ``NAME=values[index]``, the
    first the baseline: adaptive (``trials=None``), else ``trials`` each (``fewer``: the
    trials of some value indexes instead), interleaved."""
    if recipe.bisect is None:
        raise UsageError("the recipe has no bisect: {variable: NAME, values: [...]} block")
    spec = recipe.expand_cells()[0].spec
    var, values = recipe.bisect.variable, recipe.bisect.values
    data = recipe_to_data(recipe)
    template = {k: v for k, v in spec.model_dump(exclude_none=True).items() if k != "name"}
    cells = []
    for prefix, i in picks:
        env = {**template.get("extra_env", {}), var: values[i]}
        cells.append({**template, "name": _cell_name(prefix, i, values[i]), "extra_env": env})
    for key in ("bisect", "axes", "mitigation_axis", "diagnostic_axis", "stop_after", "trials"):
        data.pop(key, None)
    data.update(mode="matrix", workload=recipe.workload_name, cells=cells)
    if trials is None:
        data["schedule"] = "adaptive"
    else:
        # The recipe's adaptive settings are the step's stopping rule, applied here, not by
        # the sweep: each look grows this run in place (aorta.run.extend).
        data.pop("adaptive", None)
        data.update(schedule="interleaved", trials=trials)
    data["confound"] = {**data.get("confound", {}), "baseline_cell": cells[0]["name"]}
    for cell, (_, i) in zip(cells, picks, strict=True):
        cell.pop("trials", None)
        if fewer and i in fewer:
            cell["trials"] = fewer[i]
    return recipe_from_data(data)


def step_recipe(recipe: Recipe, index: int, *, bad: bool = False) -> Recipe:
    """The recipe of a ``remeasure`` step that tries ``values[index]``: the recipe's first cell
    with ``NAME=values[0]`` (the baseline) and ``NAME=values[index]`` (and, with ``bad``,
    ``NAME=values[-1]`` between them), adaptive.

    Raises ``UsageError`` when the recipe has no ``bisect`` block.

    >>> from aorta.recipe import load_recipe_text
    >>> r = load_recipe_text("cells: [{name: base, mitigations: [none]}]\\n"
    ...     "bisect: {variable: TORCH_BUILD, values: [a, b, c]}", command=["true"])
    >>> s = step_recipe(r, 1)
    >>> [(c.name, c.extra_env) for c in s.cells], s.is_adaptive
    ([('good00-a', {'TORCH_BUILD': 'a'}), ('try01-b', {'TORCH_BUILD': 'b'})], True)
    >>> [c.name for c in step_recipe(r, 1, bad=True).cells]
    ['good00-a', 'bad02-c', 'try01-b']
    """
    if recipe.bisect is None:
        raise UsageError("the recipe has no bisect: {variable: NAME, values: [...]} block")
    last = len(recipe.bisect.values) - 1
    picks = [("good", 0), *([("bad", last)] if bad else []), ("try", index)]
    return _cells_recipe(recipe, picks)


# --- the verdicts ----------------------------------------------------------------------------


def _num(x: Any) -> float | None:
    return float(x) if x is not None and x == x else None


def _regressed(row: pd.Series) -> bool:
    """Fails more, or slower beyond the band: a verdict never withdrawn (anytime-valid)."""
    slow = row["difference"] == "slower" and row["band"] == "beyond band"
    return bool(row["failures_vs_baseline"] == "more" or slow)


#: What made the last value bad against the first (step 0): ``timing``, ``failures``.
Hunted = frozenset[str]
BOTH: Hunted = frozenset({"timing", "failures"})


def _hunted(row: pd.Series) -> Hunted:
    """What the last value's row against the first says is worse about it."""
    slow = row["difference"] == "slower" and row["band"] == "beyond band"
    more = row["failures_vs_baseline"] == "more"
    return frozenset({*(["timing"] if slow else []), *(["failures"] if more else [])}) or BOTH


def _better(row: pd.Series, hunted: Hunted = BOTH) -> bool:
    """Better than the last value on what made it bad (``hunted``): fails less, or faster
    beyond the band — the midpoint is not at the bad value's level."""
    fast = row["difference"] == "faster" and row["band"] == "beyond band"
    fewer = row["failures_vs_baseline"] == "fewer"
    return bool(("failures" in hunted and fewer) or ("timing" in hunted and fast))


def _verdict_of(
    row: pd.Series,
    vs_bad: pd.Series | None = None,
    settled: pd.Series | None = None,
    hunted: Hunted = BOTH,
) -> Verdict:
    """``bad`` when ``row`` (against the first value) is worse; ``good`` when ``settled`` (the
    same at the level of a ``good`` verdict; default ``row``) is decided, or ``vs_bad``
    (against the last value) is better: with one change in the list, a value not at the bad
    level comes before it."""
    if _regressed(row):
        return "bad"
    decided = bool((row if settled is None else settled)["decided"])
    good = decided or (vs_bad is not None and _better(vs_bad, hunted))
    return "good" if good else "undecided"


def _comparison(row: pd.Series, against: str) -> Comparison:
    return Comparison(
        against=against,
        ratio=_num(row["ratio"]),
        ci=(_num(row["ratio_ci_low"]), _num(row["ratio_ci_high"])),
        difference=str(row["difference"]),
        band=str(row["band"]),
        failures=str(row["failures_vs_baseline"]),
        decided=bool(row["decided"]),
        reason=str(row["reason"]),
    )


def _cap(recipe: Recipe) -> int:
    """The most trials a value runs in one step: the cap of the recipe's adaptive rule (as a
    step of it plans, :meth:`~aorta.recipe.model.Recipe.trials_cap`)."""
    cap = step_recipe(recipe, 1).trials_cap[1]
    assert cap is not None  # a step recipe is adaptive
    return cap


def _sequential(
    ds: Any, baseline: str, cell: str, recipe: Recipe, *, alpha: float = DEFAULT_ALPHA
) -> pd.Series:
    """``cell`` against ``baseline`` as an adaptive sweep decides (:mod:`aorta.run.adaptive`)."""
    pair = ds.sel(cell=[baseline, cell])
    settings = recipe.adaptive_settings
    df = compare(
        pair,
        baseline,
        alpha=alpha,
        threshold=recipe.confound.threshold,
        sequential=True,
        failure_margin=settings.failure_margin,
        max_trials=_cap(recipe),
        metric=decision_metric(pair, baseline),
    )
    return df.loc[cell]


def _step(
    ds: Any,
    row: pd.Series,
    cell: str,
    value: str,
    run_dir: Path,
    vs_bad: tuple[pd.Series, str] | None = None,
    settled: pd.Series | None = None,
    hunted: Hunted = BOTH,
) -> Step:
    """The step of ``cell`` from its row against the first value (``settled``: the same at
    a ``good`` verdict's level) and, with ``vs_bad``, its row against the last value and
    that value."""
    failures, trials = _failures(ds, cell)
    bad_row, last = vs_bad if vs_bad is not None else (None, "")
    verdict = _verdict_of(row, bad_row, settled, hunted)
    reason = str(row["reason"] if verdict == "bad" or settled is None else settled["reason"])
    if bad_row is not None and _better(bad_row, hunted):
        if verdict == "bad":  # worse than the first value and better than the last
            reason += f"; better than {last} ({bad_row['reason']}): a change between the two"
        elif not bool((row if settled is None else settled)["decided"]):
            reason = f"against {last}: {bad_row['reason']}"
    return Step(
        value=value,
        verdict=verdict,
        ratio=_num(row["ratio"]),
        ci=(_num(row["ratio_ci_low"]), _num(row["ratio_ci_high"])),
        failures=failures,
        trials=trials,
        run_dir=str(run_dir),
        reason=reason,
        vs_bad=None if bad_row is None else _comparison(bad_row, last),
    )


def _rows(
    ds: Any, good: str, bad: str, cell: str, recipe: Recipe
) -> tuple[pd.Series, pd.Series, pd.Series]:
    """``cell`` against ``good`` at the level (is it bad?), against ``good`` and against
    ``bad`` at half the level each: there are two ways to call a step good (settled against the
    first value, better than the last), so a wrong *good* stays as rare as one test's."""
    half = DEFAULT_ALPHA / 2
    return (
        _sequential(ds, good, cell, recipe),
        _sequential(ds, good, cell, recipe, alpha=half),
        _sequential(ds, bad, cell, recipe, alpha=half),
    )


def _remeasured(recipe: Recipe, run_dir: Path, names: list[str], value: str, last: str) -> Step:
    """A ``remeasure`` step's verdict from its own run of ``[good, bad, try]``."""
    good, bad, cell = names
    ds = load_run(run_dir, source="records")
    row, settled, vs_bad = _rows(ds, good, bad, cell, recipe)
    hunted = _hunted(_sequential(ds, good, bad, recipe))
    return _step(ds, row, cell, value, run_dir, (vs_bad, last), settled, hunted)


# --- the endpoints, measured once --------------------------------------------------------------


@dataclass
class _Runs:
    """The runs a reusing bisect measures: the endpoints' (grown on demand) and each step's;
    ``planned``: each run's trials per cell, as extended so far."""

    recipe: Recipe
    options: RunOptions
    #: Trials planned so far per (run, value index).
    planned: dict[tuple[Path, int], int] = dataclasses.field(default_factory=dict)
    #: Every run made, in order.
    made: list[Path] = dataclasses.field(default_factory=list)

    @property
    def values(self) -> list[str]:
        """The bisect's values, in order."""
        assert self.recipe.bisect is not None
        return list(self.recipe.bisect.values)

    @property
    def last(self) -> int:
        """The index of the last value (known bad)."""
        return len(self.values) - 1

    def measure(
        self,
        run: Path | None,
        picks: list[int],
        trials: int,
        *,
        fewer: dict[int, int] | None = None,
    ) -> Path:
        """``run`` (new when ``None``, of the values ``picks``, ``fewer``: the trials of some of
        them instead) with ``picks`` grown to at least ``trials`` trials each."""
        fewer = fewer or {}
        if run is None:
            pairs = [(self._prefix(i), i) for i in picks]
            made = _cells_recipe(self.recipe, pairs, trials=trials, fewer=fewer)
            run = sweep(made, options=self.options).run_dir
            self.made.append(run)
        else:
            short = [i for i in picks if self.planned[(run, i)] < trials]
            if short:
                cells = [self.cell(i) for i in short]
                sweep(resume=run, extend_to=trials, extend_cells=cells, options=self.options)
        for i in picks:
            self.planned[(run, i)] = max(fewer.get(i, trials), self.planned.get((run, i), 0))
        return run

    def _prefix(self, index: int) -> str:
        return "good" if index == 0 else "bad" if index == self.last else "try"

    def cell(self, index: int) -> str:
        """The cell that runs ``values[index]``."""
        assert self.recipe.bisect is not None
        return _cell_name(self._prefix(index), index, self.recipe.bisect.values[index])

    def trials(self) -> int:
        """The trials run (a record each; warm-ups are not trials) in every run so far."""
        return sum(
            int(r.status != TrialStatus.DID_NOT_RUN)
            for run in self.made
            for r in RunDir(run).trial_records()
        )

    def dataset(self, runs: dict[int, Path]) -> Any:
        """The trials of each value (``{index: its run}``) as one Dataset, a cell per value."""
        wanted = {self.cell(i): run for i, run in runs.items()}
        records: list[TrialRecord] = []
        for run in dict.fromkeys(wanted.values()):
            records += [r for r in RunDir(run).trial_records() if wanted.get(r.cell) == run]
        return build_dataset([{"name": c} for c in wanted], records)


def _looks(settings: Adaptive, trials: int, cap: int) -> int:
    """The next look after ``trials``: ``round`` more, and at least a fifth more.

    Each look grows a run in place, and a sweep's start costs about a second: looking after
    every trial of a long step spends more on starts than on trials. Looking less often keeps
    the verdicts valid (anytime-valid: any stopping rule); the price is a few trials past the
    one that settled (5, 6, 8, 10, 12, 15, 18, 22 … with ``round: 1``).
    """
    nxt = max(trials + settings.round, math.ceil(trials * 1.2))
    return min(nxt, cap)


def _pool_target(have: int, need: int, cap: int) -> int:
    """How far to grow v0's pool when a step needs ``need`` pairs and it has ``have``: half as
    many again at least, so that a long search grows it a few times, not once per look (each
    growth is a sweep's start and a warm-up trial); later steps reuse what it grew to."""
    return have if have >= need else min(max(need, math.ceil(have * 1.5)), cap)


def _trial_values(ds: Any, cell: str) -> Any:
    """Each trial's value of ``cell`` as the step's comparisons read it: its median step time,
    or its wall clock when the cell has none; NaN for a trial that did not pass."""
    if decision_metric(ds, cell) == "step_time_ms":
        values = trial_medians(
            ds.step_time_ms.sel(cell=cell).values, ds.warmup_steps.sel(cell=cell).values
        )
    else:
        values = ds.wall_clock_s.sel(cell=cell).values.astype(float)
    return values[ds.outcome.sel(cell=cell).values == "passed"]


def _sentinel(runs: _Runs, index: int, pool: Path) -> tuple[Path, str]:
    """A step's run of ``values[index]`` (its first look, ``min_trials``) with
    :data:`SENTINEL_TRIALS` trials of the first value interleaved with its first ones — one
    sweep, as the step would have started anyway — and the first value's fresh trials against
    its pooled ones: the run, and the drift in words (``""``: none)."""
    first = runs.recipe.adaptive_settings.min_trials
    run = runs.measure(None, [0, index], first, fewer={0: SENTINEL_TRIALS})
    cell = runs.cell(0)
    now, before = runs.dataset({0: run}), runs.dataset({0: pool})
    fresh, pooled = _trial_values(now, cell), _trial_values(before, cell)
    drift = sentinel_drift(fresh, pooled, threshold=runs.recipe.confound.threshold)
    # A machine that started failing shows in the failure counts, not the times (a failed
    # trial has none): both are watched, and either drift re-measures the endpoints.
    failing = failure_drift(_failures(now, cell), _failures(before, cell))
    found = [d.words(runs.values[0]) for d in (drift, failing) if d.drifted]
    return run, "; ".join(found)


def _failures(ds: Any, cell: str) -> tuple[int, int]:
    """``(failed, ran)`` of ``cell``'s trials: ran is passed or failed, as the comparisons
    count them (a trial that errored or did not run is neither)."""
    outcome = ds.outcome.sel(cell=cell).values
    return int((outcome == "failed").sum()), int(
        ((outcome == "passed") | (outcome == "failed")).sum()
    )


def _settle(
    runs: _Runs, index: int, pool: Path | None, *, run: Path | None = None
) -> tuple[Step, Path, Path]:
    """Measure ``values[index]`` until settled: against the first value and the last (the
    endpoints' run ``pool``, grown to as many trials as the value has; ``run``: the step's run
    the sentinel started), or, with ``pool=None``, the last value against the first in one new
    run (step 0). Returns the step, the value's run and the pool."""
    settings, cap = runs.recipe.adaptive_settings, _cap(runs.recipe)
    values, last = runs.values, runs.last
    n = settings.min_trials
    while True:
        if pool is None:  # step 0: both endpoints in one interleaved run
            run = runs.measure(run, [0, last], n)
            ds = runs.dataset({0: run, last: run})
            row = _sequential(ds, runs.cell(0), runs.cell(last), runs.recipe)
            if _regressed(row) or bool(row["decided"]) or n >= cap:
                step = _step(ds, row, runs.cell(last), values[last], run)
                return dataclasses.replace(step, endpoints=True), run, run
        else:
            # The midpoint's new trials first, then the endpoints' pool up to as many.
            run = runs.measure(run, [index], n)
            have = min(runs.planned[(pool, 0)], runs.planned[(pool, last)])
            pool = runs.measure(pool, [0, last], _pool_target(have, n, cap))
            ds = runs.dataset({0: pool, last: pool, index: run})
            cells = (runs.cell(0), runs.cell(last), runs.cell(index))
            row, settled, vs_bad = _rows(ds, *cells, runs.recipe)
            # Better than the last value counts on what made it bad only (its timing, its
            # failures): a midpoint faster than a value that fails more may fail as much.
            hunted = _hunted(_sequential(ds, cells[0], cells[1], runs.recipe))
            if _verdict_of(row, vs_bad, settled, hunted) != "undecided" or n >= cap:
                versus = (vs_bad, values[last])
                step = _step(ds, row, cells[2], values[index], run, versus, settled, hunted)
                return step, run, pool
        n = _looks(settings, n, cap)


# --- the search --------------------------------------------------------------------------------


def bisect(
    recipe: Recipe,
    *,
    options: RunOptions | None = None,
    on_step: Callable[[Step], None] | None = None,
    remeasure: bool = False,
) -> BisectResult:
    """Find the first bad value of ``recipe.bisect`` (see the module docstring).

    Parameters
    ----------
    recipe
        A recipe with a ``bisect`` block; its first cell is what every step runs, its
        ``adaptive`` block (or the defaults) each step's stopping rule.
    options
        How each step's sweep runs (:class:`~aorta.run.options.RunOptions`); the step runs go
        under ``options.output`` like any run.
    on_step
        Called after each step (progress), the endpoints' check (``Step.endpoints``) first.
    remeasure
        Run the first and last values again beside every midpoint (one adaptive sweep per
        step) instead of reusing the endpoints' trials measured once.

    Raises
    ------
    UsageError
        No ``bisect`` block; RecipeError when a step's recipe is invalid.
    Interrupted
        Ctrl-C: the finished steps are in ``bisect.json``.
    """
    if recipe.bisect is None:
        raise UsageError("the recipe has no bisect: {variable: NAME, values: [...]} block")
    opts = options or RunOptions()
    runs = _Runs(recipe, opts)
    plan = BisectPlan(tuple(recipe.bisect.values))
    steps: list[Step] = []
    started = utc_now()
    info = {"variable": recipe.bisect.variable}
    endpoints: Step | None = None
    pool: Path | None = None
    record: Path | None = None
    if not remeasure:
        endpoints, pool, _ = _settle(runs, runs.last, None)
        record = pool / BISECT_JSON
        RunDir(pool).update_manifest(
            bisect={**info, "step": 0, "value": endpoints.value, "verdict": endpoints.verdict}
        )
        if on_step is not None:
            on_step(endpoints)
    while not plan.done and (endpoints is None or endpoints.verdict == "bad"):
        index = plan.next
        started_run, drift = (None, "") if pool is None else _sentinel(runs, index, pool)
        if pool is None or drift:
            step_r = step_recipe(recipe, index, bad=True)
            run_dir = sweep(step_r, options=opts).run_dir
            runs.made.append(run_dir)
            names = [c.name for c in step_r.cells]
            step = _remeasured(recipe, run_dir, names, plan.values[index], plan.values[-1])
            if drift:  # the pool stays for later steps: each runs its own sentinel
                reason = f"{drift}: endpoints re-measured beside it; {step.reason}"
                step = dataclasses.replace(step, drift=drift, reason=reason)
        else:
            step, run_dir, pool = _settle(runs, index, pool, run=started_run)
        steps.append(step)
        record = run_dir / BISECT_JSON
        RunDir(run_dir).update_manifest(
            bisect={**info, "step": len(steps), "value": step.value, "verdict": step.verdict}
        )
        if on_step is not None:
            on_step(step)
        if step.verdict == "undecided":
            break
        plan = plan.after(step.verdict)
        _write_record(record, recipe, plan, steps, started, endpoints)
    assert record is not None  # the endpoints' run, or at least one step: ≥ 3 values
    _write_record(record, recipe, plan, steps, started, endpoints)
    found = endpoints is None or endpoints.verdict == "bad"
    return BisectResult(
        variable=recipe.bisect.variable,
        values=plan.values,
        first_bad=plan.first_bad if found else None,
        last_good=plan.range[0],
        open_range=plan.range,
        steps=steps,
        trials=runs.trials(),
        record=record,
        endpoints=endpoints,
        remeasure=remeasure,
    )


def _write_record(
    path: Path,
    recipe: Recipe,
    plan: BisectPlan,
    steps: list[Step],
    started: str,
    endpoints: Step | None,
) -> None:
    assert recipe.bisect is not None
    doc = {
        "variable": recipe.bisect.variable,
        "values": list(plan.values),
        "started_at": started,
        "range": list(plan.range),
        "first_bad": plan.first_bad,
        "endpoints": None if endpoints is None else endpoints.to_dict(),
        "steps": [s.to_dict() for s in steps],
    }
    atomic_write(path, json.dumps(doc, indent=1) + "\n")
