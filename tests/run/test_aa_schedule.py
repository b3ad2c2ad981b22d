"""An A/A sweep stays quiet (issue 45): with the warm-up trial discarded and every round's
order shuffled from the run's seed, two identical cells are called different no more often
than α over seeds — pure: the schedule (:meth:`Plan.order`) and the verdict
(:func:`aorta.matrix.stats.compare_groups`) on simulated machines whose first trials run cold.
The real sweep's side (the warm-up record, its absence from every count) is in
tests/run/test_timing.py."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.matrix.stats import Group, compare_groups
from aorta.recipe import load_recipe_text
from aorta.recipe.plan import Plan, plan
from aorta.recipe.registry import Registry

ALPHA = 0.05
SEEDS = 80


def _plan(trials: int) -> Plan:
    text = (
        f"trials: {trials}\n"
        "cells: [{name: baseline, mitigations: [none]}, {name: same, mitigations: [none]}]"
    )
    recipe = load_recipe_text(text, command=["true"])
    return plan(recipe, registry=Registry.load(entry_points=False))


def _aa(
    p: Plan, rng: np.random.Generator, *, sigma: float, cold: float, tau: float, warmup: bool
) -> tuple[str, float]:
    """One simulated A/A run: the verdict and the ratio of medians. Position k of the run
    (the warm-up, when there is one, is k = 0 and is discarded) takes ``1 + cold·e^(-k/tau)``
    times a log-normal trial time: a machine that warms up over its first trials."""
    values: dict[str, list[float]] = {"baseline": [], "same": []}
    first = 1 if warmup else 0
    for k, key in enumerate(p.order(), start=first):
        values[key.cell.name].append(
            math.exp(rng.normal(0.0, sigma)) * (1 + cold * math.exp(-k / tau))
        )
    groups = [Group(name, np.array(v), ran=len(v)) for name, v in values.items()]
    (res,) = compare_groups(groups, [(1, 0)], threshold=1.15, alpha=ALPHA, resamples=20)
    return res.difference, res.ratio


@settings(max_examples=12, derandomize=True)
@given(
    trials=st.integers(5, 12),
    sigma=st.floats(0.01, 0.3),
    cold=st.floats(0.0, 3.0),
    tau=st.floats(0.3, 3.0),
    base=st.integers(0, 2**31 - 1),
)
def test_an_a_a_sweep_calls_a_difference_no_more_often_than_alpha(trials, sigma, cold, tau, base):
    p = _plan(trials)
    called = 0
    for seed in range(SEEDS):
        rng = np.random.default_rng([base, seed])
        verdict, _ = _aa(
            dataclasses.replace(p, seed=seed), rng, sigma=sigma, cold=cold, tau=tau, warmup=True
        )
        called += verdict in ("slower", "faster")
    # α plus three binomial standard deviations over the seeds.
    assert called / SEEDS <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / SEEDS), called


def test_the_warm_up_removes_the_first_trials_bias():
    # A machine whose first trial runs four times as long (as `python3 -c pass` did: 0.52 s
    # cold, 0.12-0.25 s after): without the warm-up, the cold trial lands in whichever cell
    # the seed puts first and drags its median; discarded, the A/A ratio centres on 1.
    p = _plan(4)
    cold: list[float] = []
    warm: list[float] = []
    for seed in range(200):
        q = dataclasses.replace(p, seed=seed)
        first_is_base = q.order()[0].cell.name == "baseline"
        for out, warmup in ((cold, False), (warm, True)):
            rng = np.random.default_rng([7, seed])
            _, ratio = _aa(q, rng, sigma=0.2, cold=3.0, tau=0.2, warmup=warmup)
            # Signed so that a cold first trial shows the same way whichever cell it hit.
            out.append(math.log(ratio) * (1 if first_is_base else -1))

    def se(v: list[float]) -> float:
        return float(np.std(v) / math.sqrt(len(v)))

    assert np.mean(cold) < -3 * se(cold)  # the first cell looked slower: bias
    assert abs(np.mean(warm)) < 3 * se(warm)  # none left
