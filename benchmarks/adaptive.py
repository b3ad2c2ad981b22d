"""Adaptive sweeps, simulated: error rates under continuous monitoring, power, and cost.

Each simulated sweep runs as ``schedule: adaptive`` does: rounds of one trial of the baseline
and of every undecided cell; from ``min_trials`` on, after every round the matrix is rebuilt
with ``aorta.from_trials`` and ``aorta.compare(ds, sequential=True)`` decides which cells stop;
the baseline runs while any cell does; ``max_trials`` caps every cell. A trial's value is
lognormal around the cell's true median with the between-trial CV (2 warm-up steps, dropped,
and 20 timed steps with a within-trial CV of 2%); a trial fails with the cell's failure rate.

Rows (``--sweeps`` sweeps each; rates with their binomial standard error):

* null: baseline + 9 cells, no effect, CV 1/3/10%, failure rate 0.05 — family-wise false
  ``slower``/``faster`` and false ``more``/``fewer`` failures (a sweep counts once);
* power: a 10% slowdown at CV 3% (K = 1) called ``slower``; failure 0.05 → 0.5 (K = 1) called
  ``more``;
* cost: the realistic matrix — baseline + 7 no-effect cells + one +10% + one 0.05 → 0.5
  failure rate, CV 3%, max_trials 40 — trials used / the fixed design's 400, with the error
  rates on it.

    .venv/bin/python benchmarks/adaptive.py --sweeps 200
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aorta
from aorta.matrix.sequential import sequential_pair
from aorta.report.comparison import markdown_table

WARMUP, STEPS, STEP_CV = 2, 20, 0.02


@dataclass(frozen=True)
class Cell:
    name: str
    ratio: float = 1.0
    fail: float = 0.05


def _sigma(cv: float) -> float:
    return float(np.sqrt(np.log1p(cv * cv)))


def _trial(rng: np.random.Generator, cell: Cell, cv: float, t: int) -> dict:
    if rng.random() < cell.fail:
        return {"cell": cell.name, "trial": t, "status": "workload_failed", "step_times_ms": []}
    level = 100.0 * cell.ratio * float(rng.lognormal(0.0, _sigma(cv)))
    steps = [level * 3.0] * WARMUP + (level * rng.lognormal(0.0, STEP_CV, STEPS)).tolist()
    # "value": the trial value from_trials computes (median of the post-warm-up steps), kept
    # for the array path; from_trials ignores the extra column.
    value = float(np.median(steps[WARMUP:]))
    return {"cell": cell.name, "trial": t, "status": "ok", "step_times_ms": steps, "value": value}


def _frame_verdicts(rows: list[dict], names: list[str], threshold: float) -> pd.DataFrame:
    """The real path: ``aorta.from_trials`` + ``aorta.compare(ds, sequential=True)``."""
    ds = aorta.from_trials(pd.DataFrame(rows), baseline=names[0], threshold=threshold, cells=names)
    df = aorta.compare(ds, sequential=True)
    return df[["difference", "failures_vs_baseline", "decided"]]


def _array_verdicts(rows: list[dict], names: list[str], threshold: float) -> pd.DataFrame:
    """The same statistics on arrays (:func:`aorta.matrix.sequential.sequential_pair`),
    without building a Dataset per round: ~50× faster, checked against the real path."""
    n = max(r["trial"] for r in rows) + 1
    vals = {c: np.full(n, np.nan) for c in names}
    failed = {c: np.zeros(n, bool) for c in names}
    ran = {c: np.zeros(n, bool) for c in names}
    for r in rows:
        c, t = r["cell"], r["trial"]
        ran[c][t] = True
        if r["status"] == "ok":
            vals[c][t] = r["value"]
        else:
            failed[c][t] = True
    out = {names[0]: ("baseline", "baseline", False)}
    for c in names[1:]:
        res = sequential_pair(
            vals[c],
            failed[c],
            vals[names[0]],
            failed[names[0]],
            cell_ran=ran[c],
            base_ran=ran[names[0]],
            threshold=threshold,
            family=len(names) - 1,
        )
        out[c] = (res.timing.difference, res.failures.verdict, res.decided)
    return pd.DataFrame.from_dict(
        out, orient="index", columns=["difference", "failures_vs_baseline", "decided"]
    )


def adaptive_sweep(
    rng: np.random.Generator,
    cells: list[Cell],
    *,
    cv: float,
    min_trials: int = 5,
    max_trials: int = 40,
    threshold: float = 1.15,
    check: bool = False,
) -> tuple[pd.DataFrame, int, int]:
    """One adaptive sweep (cells[0] is the baseline): the final verdicts, the trials used, and
    (with ``check``) how many decision rounds the array path disagreed with the real one."""
    rows: list[dict] = []
    active = {c.name for c in cells}
    names = [c.name for c in cells]
    df = None
    disagree = 0
    for r in range(max_trials):
        for c in cells:
            if c.name in active:
                rows.append(_trial(rng, c, cv, r))
        if r + 1 < min_trials:
            continue
        df = _array_verdicts(rows, names, threshold)
        if check:
            real = _frame_verdicts(rows, names, threshold)
            disagree += int(not real.iloc[1:].astype(str).equals(df.iloc[1:].astype(str)))
        active = {c for c in names[1:] if c in active and not bool(df.loc[c, "decided"])}
        if not active:
            break
        active.add(names[0])
    assert df is not None
    return df, len(rows), disagree


def _rate(hits: int, n: int) -> str:
    p = hits / n
    return f"{p:.3f} ± {np.sqrt(max(p * (1 - p), 1 / n) / n):.3f}"


def _false_timing(df: pd.DataFrame) -> bool:
    return bool(df["difference"].isin(["slower", "faster"]).any())


def _false_failures(df: pd.DataFrame) -> bool:
    return bool(df["failures_vs_baseline"].isin(["more", "fewer"]).any())


def run(sweeps: int, seed: int, n_checks: int = 2) -> pd.DataFrame:
    """Every row of the table (see the module docstring)."""
    out = []
    rng = np.random.default_rng(seed)

    def row(label: str, cells: list[Cell], cv: float, power: dict | None = None) -> None:
        # False verdicts count on the cells without that effect (a sweep counts once).
        no_time = [c.name for c in cells[1:] if c.ratio == 1.0]
        no_fail = [c.name for c in cells[1:] if c.fail == cells[0].fail]
        power = power or {}
        t0 = time.perf_counter()
        hits = {"t": 0, "f": 0, **dict.fromkeys(power, 0)}
        used, disagree = [], 0
        for i in range(sweeps):
            df, n, bad = adaptive_sweep(rng, cells, cv=cv, check=i < n_checks)
            used.append(n)
            disagree += bad
            hits["t"] += _false_timing(df.loc[no_time]) if no_time else 0
            hits["f"] += _false_failures(df.loc[no_fail]) if no_fail else 0
            for key, check in power.items():
                hits[key] += bool(check(df))
        out.append(
            {
                "scenario": label,
                "false slower/faster": _rate(hits["t"], sweeps) if no_time else "—",
                "false more/fewer": _rate(hits["f"], sweeps) if no_fail else "—",
                "power": "; ".join(f"{k} {_rate(hits[k], sweeps)}" for k in power) or "—",
                "trials/sweep": f"{np.mean(used):.1f}",
                "vs fixed 40": f"{np.mean(used) / (40 * len(cells)):.0%}",
                "real path agrees": f"{min(n_checks, sweeps) - disagree}/{min(n_checks, sweeps)}",
                "s/sweep": f"{(time.perf_counter() - t0) / sweeps:.2f}",
            }
        )
        print(out[-1], file=sys.stderr, flush=True)  # partial results while it runs

    for cv in (0.01, 0.03, 0.10):
        row(f"null, K=9, CV {cv:.0%}", [Cell("base"), *(Cell(f"c{i}") for i in range(9))], cv)
    row(
        "+10%, K=1, CV 3%",
        [Cell("base"), Cell("slow", ratio=1.10)],
        0.03,
        {"slower": lambda df: df.loc["slow", "difference"] == "slower"},
    )
    row(
        "failures 0.05 → 0.5, K=1, CV 3%",
        [Cell("base"), Cell("flaky", fail=0.5)],
        0.03,
        {"more": lambda df: df.loc["flaky", "failures_vs_baseline"] == "more"},
    )
    row(
        "realistic: 7 no-effect + one +10% + one 0.05 → 0.5, CV 3%",
        [
            Cell("base"),
            *(Cell(f"c{i}") for i in range(7)),
            Cell("slow", ratio=1.10),
            Cell("flaky", fail=0.5),
        ],
        0.03,
        {
            "+10% slower": lambda df: df.loc["slow", "difference"] == "slower",
            "0.5 more": lambda df: df.loc["flaky", "failures_vs_baseline"] == "more",
        },
    )
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweeps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--checks",
        type=int,
        default=2,
        help="sweeps per row also decided through from_trials + compare(sequential=True)",
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    table = run(args.sweeps, args.seed, args.checks)
    print(markdown_table(list(table.columns), table.astype(str).values.tolist()))
    print(f"\n{args.sweeps} sweeps per row, seed {args.seed}, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
