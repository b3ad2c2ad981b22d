"""How often aorta's verdicts are right: simulated sweeps through ``aorta.from_trials`` +
``aorta.compare``.

Each simulated sweep has a baseline and K other cells, ``n`` trials each. A trial's level is
lognormal around the cell's true median with the between-trial CV; it has 2 warm-up steps
(3× slower, dropped by ``from_trials``) and 20 timed steps with a within-trial CV of 2%.
Rates are over ``--sweeps`` sweeps per row (half as many for K = 20), each row with its own
seed, with their binomial standard error (family-wise: a sweep counts once if any of its cells
gets the verdict). The output is a markdown table.

    .venv/bin/python benchmarks/verdicts.py --sweeps 200 --resamples 1000

Rows: null rates of false ``slower``/``faster`` (K = 1, 5, 20 × 5/10/20 trials × CV 3%/10%);
power of ``slower`` for 5/10/20% slowdowns (K = 1); false ``within band`` at +20% (band
1.15, K = 1 and 5); failure test size (0.1 vs 0.1, 0.3 vs 0.3) and power (0.1 vs 0.5) at
10/20/30 trials; the drift warning's rate without and with a 10% linear drift over the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import fisher_exact

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aorta

WARMUP, STEPS, STEP_CV = 2, 20, 0.02


def _trial_steps(rng: np.random.Generator, level: float) -> list[float]:
    warm = [level * 3.0] * WARMUP
    steps: list[float] = (level * rng.lognormal(0.0, STEP_CV, STEPS)).tolist()
    return warm + steps


def _sigma(cv: float) -> float:
    return float(np.sqrt(np.log1p(cv * cv)))


def sweep_table(
    rng: np.random.Generator,
    *,
    effects: list[float],
    n: int,
    cv: float,
    fail: list[float] | None = None,
    drift: float = 0.0,
) -> pd.DataFrame:
    """One simulated sweep: cell 0 is the baseline; ``effects[i]`` the true ratio of cell i.

    Trials run interleaved (one of each cell per round, shuffled); ``drift`` is the relative
    change of every trial's level from the first trial to the last.
    """
    k = len(effects)
    order = [(c, t) for t in range(n) for c in rng.permutation(k)]
    rows = []
    for pos, (c, t) in enumerate(order):
        level = 10.0 * effects[c] * rng.lognormal(0.0, _sigma(cv))
        level *= 1.0 + drift * pos / max(len(order) - 1, 1)
        failed = fail is not None and rng.random() < fail[c]
        rows.append(
            {
                "cell": f"c{c}",
                "trial": t,
                "status": "workload_failed" if failed else "ok",
                "step_times_ms": _trial_steps(rng, level),
                "run_order": pos,
            }
        )
    return pd.DataFrame(rows)


def _compare(df: pd.DataFrame, resamples: int) -> pd.DataFrame:
    cells = sorted(set(df["cell"]), key=lambda c: int(c[1:]))
    ds = aorta.from_trials(df, baseline="c0", warmup_steps=WARMUP, cells=cells)
    return aorta.compare(ds, resamples=resamples)


_ROW = iter(range(1_000_000))


def rate(fn: Callable[[np.random.Generator], bool], sweeps: int) -> tuple[float, int]:
    """The share of ``sweeps`` simulated sweeps where ``fn`` is true; each row its own seed."""
    rng = np.random.default_rng([12, next(_ROW)])
    return float(np.mean([fn(rng) for _ in range(sweeps)])), sweeps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=200, help="simulated sweeps per row")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    S, B = args.sweeps, args.resamples
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    print("| question | setting | rate ± se | sweeps | target |\n|---|---|---|---|---|")

    def add(question: str, setting: str, result: tuple[float, int], target: str = "") -> None:
        value, sweeps = result
        se = float(np.sqrt(max(value * (1 - value), 1e-12) / sweeps))
        rows.append(
            {
                "question": question,
                "setting": setting,
                "rate": value,
                "se": se,
                "sweeps": sweeps,
                "target": target,
            }
        )
        print(
            f"| {question} | {setting} | {value:.3f} ± {se:.3f} | {sweeps} | {target} |", flush=True
        )

    # 1. Null: no cell differs. Any slower/faster in the sweep is a false alarm.
    for k in (1, 5, 20):
        for n in (5, 10, 20):
            for cv in (0.03, 0.10):

                def null(rng: np.random.Generator, k: int = k, n: int = n, cv: float = cv) -> bool:
                    df = _compare(sweep_table(rng, effects=[1.0] * (k + 1), n=n, cv=cv), B)
                    return bool(df["difference"].isin(["slower", "faster"]).any())

                # K=20 sweeps are the expensive ones: half as many.
                runs = S if k < 20 else max(S // 2, 1)
                add(
                    "false slower/faster (null)",
                    f"K={k} n={n} CV={cv:.0%}",
                    rate(null, runs),
                    "≤ 0.05",
                )
    # 2. Power: one cell slower by 5/10/20%.
    for effect in (1.05, 1.10, 1.20):
        for n in (5, 10, 20):
            for cv in (0.03, 0.10):

                def power(
                    rng: np.random.Generator, e: float = effect, n: int = n, cv: float = cv
                ) -> bool:
                    df = _compare(sweep_table(rng, effects=[1.0, e], n=n, cv=cv), B)
                    return bool(df.loc["c1", "difference"] == "slower")

                target = "≥ 0.80" if (effect, n, cv) == (1.10, 10, 0.03) else ""
                add(
                    f"power: slower at +{effect - 1:.0%}",
                    f"K=1 n={n} CV={cv:.0%}",
                    rate(power, S),
                    target,
                )
    # 3. False "within band" at +20% (band 1.15): per cell.
    for k in (1, 5):
        for n in (5, 10, 20):
            for cv in (0.03, 0.10):

                def within(
                    rng: np.random.Generator, k: int = k, n: int = n, cv: float = cv
                ) -> bool:
                    df = _compare(sweep_table(rng, effects=[1.0] + [1.2] * k, n=n, cv=cv), B)
                    return bool((df["band"].iloc[1:] == "within band").any())

                add(
                    "false within band at +20%",
                    f"K={k} n={n} CV={cv:.0%}",
                    rate(within, S),
                    "≤ 0.05",
                )
    # 4. Failures: size at equal rates, power at 0.1 vs 0.5.
    for n in (10, 20, 30):
        for p in (0.1, 0.3):

            def size(rng: np.random.Generator, n: int = n, p: float = p) -> bool:
                df = _compare(sweep_table(rng, effects=[1.0, 1.0], n=n, cv=0.03, fail=[p, p]), B)
                return df.loc["c1", "failures_vs_baseline"] in ("more", "fewer")

            add("failure test size", f"{p} vs {p}, n={n}", rate(size, S), "≤ 0.05")

        def fpower(rng: np.random.Generator, n: int = n) -> bool:
            df = _compare(sweep_table(rng, effects=[1.0, 1.0], n=n, cv=0.03, fail=[0.1, 0.5]), B)
            return bool(df.loc["c1", "failures_vs_baseline"] == "more")

        add(
            "failure test power", f"0.1 vs 0.5, n={n}", rate(fpower, S), "≥ 0.80" if n == 20 else ""
        )
    # 4b. Fisher's exact test on the same kind of counts, for comparison (no compare needed).

    for n in (10, 20, 30):
        for p0, p1 in ((0.1, 0.1), (0.3, 0.3), (0.1, 0.5)):

            def fisher(
                rng: np.random.Generator, n: int = n, p0: float = p0, p1: float = p1
            ) -> bool:
                a, b = rng.binomial(n, p0), rng.binomial(n, p1)
                return bool(fisher_exact([[b, n - b], [a, n - a]]).pvalue < 0.05)

            what = "size" if p0 == p1 else "power"
            add(f"Fisher's test {what} (was)", f"{p0} vs {p1}, n={n}", rate(fisher, 20 * S))
    # 5. Drift warning (baseline's trend over run order), K=5, n=10.
    for drift, target in ((0.0, "≤ 0.05"), (0.10, "")):

        def drifting(rng: np.random.Generator, d: float = drift) -> bool:
            df = _compare(sweep_table(rng, effects=[1.0] * 6, n=10, cv=0.03, drift=d), B)
            return bool(df.attrs["drift"])

        add(
            "drift warning",
            f"drift {drift:.0%} over run, K=5 n=10 CV=3%",
            rate(drifting, S),
            target,
        )
    print(f"# {B} resamples, {time.monotonic() - t0:.0f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"sweeps": S, "resamples": B, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
