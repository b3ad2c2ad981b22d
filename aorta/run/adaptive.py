"""``schedule: adaptive``: which cells run each round, decided from the trial records.

A cell runs its first ``min_trials`` trials; from then on, every ``round`` trials (a decision
*point*), :func:`aorta.compare` ``(sequential=True)`` on the records of the trials before the
point says which cells are settled, and those stop. The verdicts are anytime-valid, so looking
after every round costs no error rate (:mod:`aorta.matrix.sequential`), and the decisions come
only from records, so a run resumed after kill -9 mid-round makes the same ones. A cell once
stopped stays stopped; the baseline runs while any other cell does.

``aorta sweep extend`` on an adaptive run raises the cap (``max_trials``) of the chosen cells:
the cells still undecided run on under the same rule, until settled or the new cap; the cells
already decided stay stopped (:mod:`aorta.run.extend` refuses an extension none of whose cells
is undecided).

:meth:`AdaptiveSchedule.bound` is what the progress shows: the trials the run can still hold
(``≤``), which falls as cells stop, so the bar ends full.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import xarray as xr

from aorta.matrix.compare import compare
from aorta.recipe.plan import Plan

__all__ = ["AdaptiveSchedule", "Stop", "decision_metric"]


@dataclass(frozen=True)
class Stop:
    """A cell the schedule stopped at decision point ``point`` (its trials ``point`` … on
    never run), and why (the comparison's ``reason``; the baseline's when every cell is)."""

    cell: str
    point: int
    reason: str


def decision_metric(ds: xr.Dataset, baseline: str) -> str:
    """The value an adaptive sweep decides on: step times, or the wall clock when the
    baseline has none (as :func:`aorta.matrix.summary.summarize` does)."""
    steps = ds.step_time_ms.sel(cell=baseline)
    return "step_time_ms" if bool(steps.notnull().any()) else "wall_clock_s"


class AdaptiveSchedule:
    """The cells each trial of an adaptive plan runs, from the records seen so far.

    ``dataset(point)`` builds the run's Dataset from the records of the trials before
    ``point`` (the sweep knows the cells and its header). Decisions are kept per point, so
    each is computed once.

    Examples
    --------
    >>> from aorta.recipe import load_recipe_text
    >>> from aorta.recipe.plan import plan
    >>> from aorta.recipe.registry import Registry
    >>> text = '''schedule: adaptive
    ... adaptive: {min_trials: 5, max_trials: 8, round: 2}
    ... cells: [{name: a, mitigations: [none]}, {name: b, mitigations: [none]}]'''
    >>> p = plan(load_recipe_text(text, command=["true"]), registry=Registry.load(entry_points=False))
    >>> s = AdaptiveSchedule(p, dataset=lambda point: None)
    >>> [s.point(t) for t in (0, 4, 5, 6, 7)]
    [None, None, 5, 5, 7]
    >>> s.bound(recorded=set())
    16
    """

    def __init__(self, plan: Plan, *, dataset: Callable[[int], Any]) -> None:
        self.plan = plan
        self.settings = plan.recipe.adaptive_settings
        self._dataset = dataset
        #: Per decision point, the cells that run its round.
        self._active: dict[int, frozenset[str]] = {}
        #: Every stop decided so far, in order.
        self.stops: list[Stop] = []
        #: The last decision point decided (each call goes on from it: a million-trial cap
        #: costs one step per round, not one per round per trial).
        self._frontier: int | None = None

    @property
    def settled(self) -> bool:
        """Every cell stopped, the baseline too: no trial of the schedule runs any more (the
        sweep ends there instead of walking the rest of ``max_trials``)."""
        return self._frontier is not None and not self._active[self._frontier]

    def point(self, trial: int) -> int | None:
        """The decision point whose round holds ``trial`` (None: before ``min_trials``)."""
        first, step = self.settings.min_trials, self.settings.round
        if trial < first:
            return None
        return first + (trial - first) // step * step

    def active(self, trial: int) -> tuple[frozenset[str], list[Stop]]:
        """The cells that run trial ``trial``, and the stops decided on the way (each once).

        The points before ``trial``'s are decided first, in order (a resume may start far into
        the run): a cell stopped at one point stays stopped at the next.
        """
        everyone = frozenset(c.name for c in self.plan.cells)
        target = self.point(trial)
        if target is None:
            return everyone, []
        if self._frontier is not None and (target <= self._frontier or self.settled):
            # Decided already; once every cell stopped, every later point is empty too.
            return self._active.get(target, frozenset()), []
        new: list[Stop] = []
        if self._frontier is None:
            point, before = self.settings.min_trials, everyone
        else:
            point, before = self._frontier + self.settings.round, self._active[self._frontier]
        while True:
            self._active[point], stops = self._decide(point, before)
            self._frontier = point
            new += stops
            before = self._active[point]
            if point >= target or not before:
                break
            point += self.settings.round
        self.stops += new
        return before, new

    def _decide(self, point: int, before: frozenset[str]) -> tuple[frozenset[str], list[Stop]]:
        baseline = self.plan.baseline
        if not before - {baseline}:
            return before, []
        ds = self._dataset(point)
        df = compare(
            ds,
            baseline,
            threshold=self.plan.threshold,
            sequential=True,
            failure_margin=self.settings.failure_margin,
            max_trials=self.plan.recipe.trials_cap[1],
            metric=decision_metric(ds, baseline),
        )
        running = frozenset(c for c in before if c != baseline and not bool(df.loc[c, "decided"]))
        active = running | {baseline} if running else running
        stops = [Stop(cell, point, str(df.loc[cell, "reason"])) for cell in sorted(before - active)]
        return active, stops

    def bound(self, recorded: Collection[tuple[str, int]]) -> int:
        """The most trials the run can hold now: every planned trial, less the unrecorded
        trials of the cells stopped so far (``recorded``: the (cell, trial) pairs with a
        record)."""
        stopped = {s.cell: s.point for s in self.stops}
        planned = {c.name: c.trials for c in self.plan.cells}
        # O(cells + records): a cell's trials before its stop, and those recorded after it.
        after = sum(
            1
            for cell, t in recorded
            if cell in stopped and stopped[cell] <= t < planned.get(cell, 0)
        )
        return after + sum(
            min(c.trials, stopped[c.name]) if c.name in stopped else c.trials
            for c in self.plan.cells
        )
