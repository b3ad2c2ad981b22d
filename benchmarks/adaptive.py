"""Adaptive against fixed sweeps on the same simulated data: power per effect, false calls, trials.

One simulated matrix is the baseline, 6 no-effect cells, a +10% slowdown and two failure-rate
changes (0.05 → 0.5, 0.05 → 0.3), trial CV 3% (``--cv``), every cell's failure rate 0.05 otherwise. Each
cell's 40 trials are drawn once and both designs see them:

* **fixed**: ``aorta.from_trials`` + ``aorta.compare`` on all 40 trials of every cell
  (Mann–Whitney and Boschloo, Holm over the 9 cells);
* **adaptive**: ``schedule: adaptive`` as the sweep runs it (``aorta.run.adaptive``): from
  ``min_trials`` 5 a decision after every round of one trial, a decided cell stops for good,
  the baseline runs while any cell does, ``max_trials`` 40. A cell that stopped at trial ``t``
  never sees its trials ``t`` … 39. Decisions come from
  :func:`aorta.matrix.sequential.sequential_cells` on arrays (fast); on the first ``--checks``
  matrices they are also made through ``aorta.from_trials`` + ``aorta.compare(ds,
  sequential=True)`` after every round, and the table says whether every decision matched.

A trial's value is lognormal around its cell's level with the between-trial CV (2 warm-up
steps, dropped, and 20 steps with a within-trial CV of 2%); a trial fails with its cell's
rate. Rates are over ``--matrices`` matrices ± their binomial standard error; "adaptive −
fixed" is the paired difference on the same matrices, ± its standard error. The last lines
say where the adaptive trials went and how the effect cells' last question ended.

    .venv/bin/python benchmarks/adaptive.py                      # 200 matrices, ~2 min
    .venv/bin/python benchmarks/adaptive.py --matrices 500       # docs/statistics.md's table
    .venv/bin/python benchmarks/adaptive.py --cv 0.10            # noisy trials: the timing check
    .venv/bin/python benchmarks/adaptive.py --futility 0.2       # the futility trade-off (0: none)
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aorta
from aorta.matrix.sequential import FUTILITY_LEVEL, CellTrials, sequential_cells
from aorta.report.comparison import markdown_table

WARMUP, STEPS, STEP_CV = 2, 20, 0.02
MIN_TRIALS, MAX_TRIALS, THRESHOLD = 5, 40, 1.15


@dataclass(frozen=True)
class Cell:
    name: str
    ratio: float = 1.0
    fail: float = 0.05


#: The matrix of issue 36: cells[0] is the baseline.
CELLS = (
    Cell("base"),
    *(Cell(f"c{i}") for i in range(6)),
    Cell("slow", ratio=1.10),
    Cell("f50", fail=0.5),
    Cell("f30", fail=0.3),
)
#: (label, cell, column, verdict): what each design should find.
EFFECTS = (
    ("+10% slower", "slow", "difference", "slower"),
    ("failures 0.05 → 0.5", "f50", "failures_vs_baseline", "more"),
    ("failures 0.05 → 0.3", "f30", "failures_vs_baseline", "more"),
)
VERDICTS = ["difference", "failures_vs_baseline", "decided"]


def _sigma(cv: float) -> float:
    return float(np.sqrt(np.log1p(cv * cv)))


def simulate(rng: np.random.Generator, cells: tuple[Cell, ...], cv: float) -> list[dict[str, Any]]:
    """Every cell's ``MAX_TRIALS`` trials, as ``aorta.from_trials`` rows (plus ``value``, the
    trial value from_trials computes — the median post-warm-up step — for the array path)."""
    rows = []
    for t in range(MAX_TRIALS):
        for c in cells:
            if rng.random() < c.fail:
                rows.append({"cell": c.name, "trial": t, "status": "workload_failed"})
                rows[-1].update(step_times_ms=[], value=np.nan)
                continue
            level = 100.0 * c.ratio * float(rng.lognormal(0.0, _sigma(cv)))
            steps = [level * 3.0] * WARMUP + (level * rng.lognormal(0.0, STEP_CV, STEPS)).tolist()
            value = float(np.median(steps[WARMUP:]))
            rows.append(
                {"cell": c.name, "trial": t, "status": "ok", "step_times_ms": steps, "value": value}
            )
    return rows


def fixed_verdicts(rows: list[dict[str, Any]], names: list[str]) -> pd.DataFrame:
    """The fixed design: ``aorta.compare`` on every trial (the bootstrap only sets the band,
    which is not scored here, so it gets few resamples)."""
    ds = aorta.from_trials(pd.DataFrame(rows), baseline=names[0], threshold=THRESHOLD, cells=names)
    return aorta.compare(ds, resamples=200)[["difference", "failures_vs_baseline"]]


def _real_verdicts(rows: list[dict[str, Any]], names: list[str]) -> pd.DataFrame:
    """The real path: ``aorta.from_trials`` + ``aorta.compare(ds, sequential=True)``."""
    ds = aorta.from_trials(pd.DataFrame(rows), baseline=names[0], threshold=THRESHOLD, cells=names)
    return aorta.compare(ds, sequential=True, max_trials=MAX_TRIALS)[VERDICTS]


def _arrays(rows: list[dict[str, Any]], names: list[str]) -> dict[str, CellTrials]:
    n = max(r["trial"] for r in rows) + 1
    out = {c: (np.full(n, np.nan), np.zeros(n, bool), np.zeros(n, bool)) for c in names}
    for r in rows:
        vals, failed, ran = out[r["cell"]]
        ran[r["trial"]] = True
        failed[r["trial"]] = r["status"] != "ok"
        vals[r["trial"]] = r["value"]
    return {c: CellTrials(*v) for c, v in out.items()}


def _array_verdicts(
    rows: list[dict[str, Any]], names: list[str], futility: float | None = FUTILITY_LEVEL
) -> tuple[pd.DataFrame, dict[str, str]]:
    """The same statistics on arrays (:func:`aorta.matrix.sequential.sequential_cells`, what
    ``compare(sequential=True)`` calls), without building a Dataset per round; and each
    cell's reason."""
    a = _arrays(rows, names)
    found = sequential_cells(
        {c: a[c] for c in names[1:]},
        a[names[0]],
        threshold=THRESHOLD,
        max_trials=MAX_TRIALS,
        futility=futility,
    )
    out: dict[str, tuple[Any, ...]] = {names[0]: ("baseline", "baseline", False)}
    for c, res in found.items():
        out[c] = (res.timing.difference, res.failures.verdict, res.decided)
    reasons = {c: res.reason for c, res in found.items()}
    return pd.DataFrame.from_dict(out, orient="index", columns=VERDICTS), reasons


@dataclass
class Adaptive:
    verdicts: pd.DataFrame
    trials: dict[str, int]
    reasons: dict[str, str]
    disagree: int


def adaptive_sweep(
    rows: list[dict[str, Any]],
    names: list[str],
    *,
    check: bool = False,
    futility: float | None = FUTILITY_LEVEL,
) -> Adaptive:
    """Replay ``schedule: adaptive`` on a matrix's trials: trial ``t`` of a cell runs iff
    the decision at point ``t`` (from the trials before ``t``) left the cell running."""
    by_trial: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_trial.setdefault(r["trial"], []).append(r)
    seen: list[dict[str, Any]] = []
    active = set(names)
    disagree = 0
    for t in range(MAX_TRIALS):
        if t >= MIN_TRIALS:
            df, _ = _array_verdicts(seen, names, futility)
            if check:
                real = _real_verdicts(seen, names)
                disagree += int(not real.iloc[1:].astype(str).equals(df.iloc[1:].astype(str)))
            active = {c for c in names[1:] if c in active and not bool(df.loc[c, "decided"])}
            if not active:
                break
            active.add(names[0])
        seen += [r for r in by_trial[t] if r["cell"] in active]
    df, reasons = _array_verdicts(seen, names, futility)
    if check:
        real = _real_verdicts(seen, names)
        disagree += int(not real.iloc[1:].astype(str).equals(df.iloc[1:].astype(str)))
    trials = {c: sum(1 for r in seen if r["cell"] == c) for c in names}
    return Adaptive(df, trials, reasons, disagree)


def _rate(hits: np.ndarray) -> str:
    p, n = float(np.mean(hits)), hits.size
    return f"{p:.1%} ± {np.sqrt(max(p * (1 - p), 1 / n) / n):.1%}"


def _paired(a: np.ndarray, f: np.ndarray) -> str:
    d = a.astype(float) - f
    se = np.std(d, ddof=1) / np.sqrt(d.size) if d.size > 1 else 0.0
    return f"{np.mean(d) * 100:+.1f} ± {se * 100:.1f} pts"


def run(
    matrices: int,
    seed: int,
    checks: int,
    *,
    cv: float = 0.03,
    futility: float | None = FUTILITY_LEVEL,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The table (fixed vs adaptive, one row per measure), and how the adaptive cells ended."""
    rng = np.random.default_rng(seed)
    names = [c.name for c in CELLS]
    null_time = [c.name for c in CELLS[1:] if c.ratio == 1.0]
    null_fail = [c.name for c in CELLS[1:] if c.fail == CELLS[0].fail]
    keys = [e[0] for e in EFFECTS] + ["t_any", "f_any", "any", "t_cell", "f_cell"]
    hits = {d: {k: np.zeros(matrices) for k in keys} for d in ("fixed", "adaptive")}
    used = np.zeros(matrices)
    per_cell = {c: np.zeros(matrices) for c in names}
    endings: dict[str, dict[str, int]] = {e[1]: {} for e in EFFECTS}
    disagree = 0
    for i in range(matrices):
        rows = simulate(rng, CELLS, cv)
        ad = adaptive_sweep(rows, names, check=i < checks, futility=futility)
        disagree += ad.disagree
        used[i] = sum(ad.trials.values()) / (MAX_TRIALS * len(names))
        for c in names:
            per_cell[c][i] = ad.trials[c]
        for design, df in (("fixed", fixed_verdicts(rows, names)), ("adaptive", ad.verdicts)):
            h = hits[design]
            for label, cell, col, verdict in EFFECTS:
                h[label][i] = df.loc[cell, col] == verdict
            t_false = df.loc[null_time, "difference"].isin(["slower", "faster"])
            f_false = df.loc[null_fail, "failures_vs_baseline"].isin(["more", "fewer"])
            h["t_any"][i], h["f_any"][i] = t_false.any(), f_false.any()
            h["any"][i] = t_false.any() or f_false.any()
            h["t_cell"][i], h["f_cell"][i] = t_false.mean(), f_false.mean()
        for _, cell, _, _ in EFFECTS:
            how = ad.reasons[cell].split(";")[-1].strip().split(" after ")[0]
            endings[cell][how] = endings[cell].get(how, 0) + 1
        if (i + 1) % max(1, matrices // 10) == 0:
            print(f"{i + 1}/{matrices} matrices", file=sys.stderr, flush=True)
    table = []
    for label, _, _, verdict in EFFECTS:
        f, a = hits["fixed"][label], hits["adaptive"][label]
        table.append(
            [f"power: {label} called {verdict}", _rate(f), _rate(a), _paired(a, f), "≥ −5 pts"]
        )
    for key, label, target in (
        ("t_any", f"false slower/faster, family ({len(null_time)} cells)", "≤ 5%"),
        ("f_any", f"false more/fewer, family ({len(null_fail)} cells)", "≤ 5%"),
        ("any", "false calls of either kind, family", "≤ 10%"),
    ):
        f, a = hits["fixed"][key], hits["adaptive"][key]
        table.append([label, _rate(f), _rate(a), _paired(a, f), target])
    for key, label in (
        ("t_cell", "false slower/faster, per cell"),
        ("f_cell", "false more/fewer, per cell"),
    ):
        f, a = hits["fixed"][key], hits["adaptive"][key]
        table.append([label, f"{np.mean(f):.2%}", f"{np.mean(a):.2%}", "", "≤ 5%"])
    table.append(
        ["trials, share of the fixed design's", "100%", f"{np.mean(used):.1%}", "", "≤ 50%"]
    )
    cols = ["measure", f"fixed {MAX_TRIALS} trials", "adaptive", "adaptive − fixed", "target"]
    detail = {
        "trials per cell (mean)": {c: float(np.mean(v)) for c, v in per_cell.items()},
        "how the effect cells' failure question ended": endings,
        "real path agrees": f"{min(checks, matrices) - disagree}/{min(checks, matrices)} matrices",
    }
    return pd.DataFrame(table, columns=cols), detail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--matrices", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--checks",
        type=int,
        default=2,
        help="matrices also decided through from_trials + compare(sequential=True)",
    )
    ap.add_argument("--cv", type=float, default=0.03, help="between-trial CV (default 0.03)")
    ap.add_argument(
        "--futility",
        type=float,
        default=FUTILITY_LEVEL,
        help="the futility rule's level β (0: none); not the default: no real-path checks",
    )
    args = ap.parse_args(argv)
    futility = args.futility or None
    checks = args.checks if futility == FUTILITY_LEVEL else 0
    t0 = time.perf_counter()
    table, detail = run(args.matrices, args.seed, checks, cv=args.cv, futility=futility)
    print(markdown_table(list(table.columns), table.astype(str).values.tolist()))
    print()
    for key, value in detail.items():
        if isinstance(value, dict):
            value = ", ".join(
                f"{k}: {v:.1f}" if isinstance(v, float) else f"{k}: {v}" for k, v in value.items()
            )
        print(f"- {key}: {value}")
    print(
        f"\n{args.matrices} matrices, seed {args.seed}, CV {args.cv:.0%}, futility level "
        f"{futility}, {checks} checked through the real path, {time.perf_counter() - t0:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
