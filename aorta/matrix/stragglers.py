"""Who is slow: per cell, the rank the others wait for, across trials (pure).

In a synchronous step every collective waits for its last rank, so a slow rank shows as the
one that spends the *least* time in collectives while the others wait for it. Per trial that
ended ok, each rank ``r`` gets its wait per step ``w_r`` from the best source the trial has:

- ``traces`` (``aorta.load_run(run, traces=True)``): ``straggler_wait_ms`` /
  ``profiled_steps``, the time it waited at matched collectives for the last rank to start
  (:func:`aorta.trace.collectives.collective_skew`), with ``last_to_enter_pct`` beside it;
- ``workload``: ``comm_wait_ms``, the workload's own clock of its time in collectives per
  step (``race``, ``training``: :mod:`aorta.run.comm_wait`).

A trial's **excess** of rank ``r`` is ``median over the other ranks of w − w_r``: how long per
step the others wait for it. The trial's straggler is the rank with the largest excess when it
is the only one with that excess and the excess is *material*: at least the band's share of the
trial's step time (``threshold − 1``, the recipe's ``confound.threshold``: the same yardstick
as the timing verdicts; the median post-warm-up step, or the source's own mean step where
there are no step times). A cell **has a consistent straggler** when one rank is the trial's
straggler in more than half of the cell's trials with that source (a strict majority: 2 of 3,
5 of 8, 1 of 1); its cost is the median excess over those trials, in ms per step. Otherwise,
and always for a single rank, it has none: ``straggler_rank`` is -1 and ``straggler_note``
says why. A cell uses ``traces`` when any of its ok trials has them for every rank, else
``workload``.

The rule is symmetric in the ranks (relabelling them relabels the answer) and deterministic;
ranks that tie leave the trial without a straggler. Two equally slow ranks may share the
trials between them and give no consistent straggler: the rule names one rank.

Examples
--------
>>> from aorta.matrix.dataset import build_dataset
>>> from aorta.store.record import RankOutcome, TrialRecord
>>> def trial(t, waits):
...     ranks = [RankOutcome(rank=r, status="ok", passed=True, metrics={"comm_wait_ms": w, "compute_ms": 20 - w})
...              for r, w in enumerate(waits)]
...     return TrialRecord(cell="slow", cell_id="", trial=t, status="ok", passed=True,
...                        step_times_ms=[20.0, 20.0], world_size=len(waits), ranks=ranks)
>>> ds = build_dataset([{"name": "slow"}], [trial(t, [9.0, 9.5, 1.0, 9.2]) for t in range(3)],
...                    attrs={"threshold": 1.15})
>>> row = stragglers(ds).loc["slow"]
>>> int(row["straggler_rank"]), int(row["straggler_trials"]), int(row["straggler_of"]), float(row["straggler_ms"])
(2, 3, 3, 8.2)
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import numpy as np
import pandas as pd
import xarray as xr

from aorta.matrix.select import band_threshold, check_dims, trial_values

__all__ = [
    "STRAGGLER_COLUMNS",
    "StragglerSource",
    "stragglers",
    "trial_stragglers",
    "with_stragglers",
]

#: Where a cell's straggler comes from: ``traces``, ``workload`` (timing), or ``""`` (none).
StragglerSource = Literal["traces", "workload", ""]
#: The columns :func:`stragglers` gives per cell (and :func:`aorta.matrix.summary.summarize`
#: adds to the matrix).
STRAGGLER_COLUMNS: tuple[str, ...] = (
    "straggler_rank",
    "straggler_trials",
    "straggler_of",
    "straggler_share_pct",
    "straggler_ms",
    "straggler_source",
    "straggler_note",
)
_ANALYSED = ("gpu", "host")
_DIMS = {"cell", "trial", "rank"}


def _per_rank(ds: xr.Dataset, name: str) -> np.ndarray | None:
    """``ds[name]`` as a cell × trial × rank float array (None when absent or shaped otherwise)."""
    if name not in ds or set(ds[name].dims) != _DIMS:
        return None
    values: np.ndarray = ds[name].transpose("cell", "trial", "rank").values.astype(float)
    return values


def _waits(ds: xr.Dataset, source: StragglerSource) -> tuple[np.ndarray, np.ndarray] | None:
    """Per trial and rank: the wait per step (NaN where the source lacks it) and the source's
    own step time per trial (its slowest rank's)."""
    if source == "traces":
        wait, steps = _per_rank(ds, "straggler_wait_ms"), _per_rank(ds, "profiled_steps")
        total = _per_rank(ds, "total_ms")
        if wait is None or steps is None or total is None or "trace_source" not in ds:
            return None
        analysed = ds.trace_source.transpose("cell", "trial", "rank").isin(list(_ANALYSED))
        ok = analysed.values & (steps > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_step = np.where(ok, wait / np.where(ok, steps, 1.0), np.nan)
            own = np.where(ok, total / np.where(ok, steps, 1.0), np.nan)
        # Every rank's trace or none: the rank left out could be the straggler.
        per_step[~ok.all(axis=2)] = np.nan
    else:
        comm, compute = _per_rank(ds, "comm_wait_ms"), _per_rank(ds, "compute_ms")
        if comm is None:
            return None
        per_step = comm
        own = comm + compute if compute is not None else np.full(comm.shape, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a trial without any rank's value
        return per_step, np.nanmax(own, axis=2)


def _excess(waits: np.ndarray) -> np.ndarray:
    """Per trial and rank: the median wait of the other ranks less the rank's own (NaN unless
    the trial has a finite wait for every one of at least two ranks)."""
    n = waits.shape[-1]
    out = np.full(waits.shape, np.nan)
    if n < 2:  # one rank has no others (numpy's median of nothing also warns to the user)
        return out
    complete = np.isfinite(waits).all(axis=-1)
    for r in range(n):
        others = np.delete(waits, r, axis=-1)
        with np.errstate(invalid="ignore"):
            out[..., r] = np.where(complete, np.median(others, axis=-1) - waits[..., r], np.nan)
    return out


def trial_stragglers(ds: xr.Dataset, *, threshold: float | None = None) -> pd.DataFrame:
    """Each ok trial's straggler (see the module docstring), one row per cell × trial that has
    per-rank timing: ``cell``, ``trial``, ``source`` (``traces`` or ``workload``),
    ``ranks``, ``rank`` (-1: none), ``excess_ms`` (its excess per step; NaN for none),
    ``step_ms`` (the step it is measured against), ``share_pct`` (``last_to_enter_pct`` of
    that rank; NaN for ``workload``) and ``material`` (the excess reaches the band; never
    where the step time is unknown).

    ``threshold``: the band (default the run's, :func:`~aorta.matrix.select.band_threshold`).
    Raises ``ValueError`` for a Dataset without ``cell`` / ``trial`` or a bad threshold.

    >>> import numpy as np, xarray as xr
    >>> ds = xr.Dataset({"status": (("cell", "trial"), np.array([["ok"]], dtype=object)),
    ...     "comm_wait_ms": (("cell", "trial", "rank"), [[[5.0, 0.5]]]),
    ...     "compute_ms": (("cell", "trial", "rank"), [[[1.0, 5.5]]])},
    ...     coords={"cell": ["c"], "trial": [0], "rank": [0, 1]})
    >>> trial_stragglers(ds)[["cell", "source", "rank", "excess_ms", "material"]].to_dict("records")
    [{'cell': 'c', 'source': 'workload', 'rank': 1, 'excess_ms': 4.5, 'material': True}]
    """
    check_dims(ds)
    band = band_threshold(ds, threshold) - 1.0
    cells = [str(c) for c in ds.cell.values.tolist()]
    trials = [int(t) for t in ds.trial.values.tolist()]
    status = ds.status.transpose("cell", "trial").values.astype(str)
    recorded = np.full(status.shape, np.nan)
    if "step_time_ms" in ds and "warmup_steps" in ds:
        recorded = trial_values(ds, trials="ok").transpose("cell", "trial").values
    share = _per_rank(ds, "last_to_enter_pct")
    taken = np.zeros(status.shape, dtype=bool)
    rows = []
    for source in ("traces", "workload"):
        found = _waits(ds, source)
        if found is None:
            continue
        waits, own_step = found
        excess = _excess(waits)
        step = np.where(np.isfinite(recorded), recorded, own_step)
        for i, j in zip(*np.nonzero((status == "ok") & ~taken), strict=True):
            e = excess[i, j]
            if not np.isfinite(e).all() or e.size < 2:
                continue
            taken[i, j] = True
            top = np.flatnonzero(e == e.max())
            rank = int(top[0]) if len(top) == 1 and e.max() > 0 else -1
            material = rank >= 0 and bool(e[rank] >= band * step[i, j])
            rows.append(
                {
                    "cell": cells[i],
                    "trial": trials[j],
                    "source": source,
                    "ranks": int(e.size),
                    "rank": rank if material else -1,
                    "excess_ms": float(e[rank]) if material else math.nan,
                    "step_ms": float(step[i, j]),
                    "share_pct": float(share[i, j, rank])
                    if material and source == "traces" and share is not None
                    else math.nan,
                    "material": material,
                }
            )
    columns = ["cell", "trial", "source", "ranks", "rank", "excess_ms", "step_ms"]
    return pd.DataFrame(rows, columns=[*columns, "share_pct", "material"])


def _cell_row(trials: pd.DataFrame) -> dict[str, object]:
    """One cell's straggler from its trials' (the rows of one source)."""
    none: dict[str, object] = {
        "straggler_rank": -1,
        "straggler_trials": 0,
        "straggler_of": 0,
        "straggler_share_pct": math.nan,
        "straggler_ms": math.nan,
        "straggler_source": "",
        "straggler_note": "no per-rank timing (one rank, or neither traces nor the workload's split)",
    }
    if trials.empty:
        return none
    n = len(trials)
    source = str(trials["source"].iloc[0])
    named = trials[trials["rank"] >= 0]
    counts = named["rank"].value_counts()
    if counts.empty:
        note = f"no rank kept the others waiting beyond the band in any of {n} trial(s)"
        return {**none, "straggler_of": n, "straggler_source": source, "straggler_note": note}
    top = int(counts.max())
    modal = sorted(int(r) for r in counts.index[counts == top])
    if 2 * top <= n:
        who = " and ".join(f"rank {r}" for r in modal)
        note = f"no consistent straggler: {who} in {top}/{n} trial(s), a majority needed"
        return {**none, "straggler_of": n, "straggler_source": source, "straggler_note": note}
    rank = modal[0]  # a strict majority is one rank
    mine = named[named["rank"] == rank]
    return {
        "straggler_rank": rank,
        "straggler_trials": top,
        "straggler_of": n,
        "straggler_share_pct": float(mine["share_pct"].median()),
        "straggler_ms": float(mine["excess_ms"].median()),
        "straggler_source": source,
        "straggler_note": "",
    }


def stragglers(ds: xr.Dataset, *, threshold: float | None = None) -> pd.DataFrame:
    """Per cell, the rank the others wait for across its ok trials, or none (see the module
    docstring for the rule).

    Parameters
    ----------
    ds
        A run's Dataset (:func:`aorta.load_run`; with ``traces=True`` for the trace source).
    threshold
        The band whose share of the step time an excess must reach (default: the run's,
        ``confound.threshold``).

    Returns
    -------
    pandas.DataFrame
        Index ``cell`` (every cell of ``ds``), the columns of :data:`STRAGGLER_COLUMNS`:
        ``straggler_rank`` (-1: none), ``straggler_trials`` of ``straggler_of`` (the cell's ok
        trials with that source), ``straggler_share_pct`` (the median share of collectives
        it entered last; NaN for the workload source), ``straggler_ms`` (the median time per
        step the others waited for it), ``straggler_source`` (``traces``, ``workload`` or
        ``""``) and ``straggler_note`` (why there is none).

    Raises
    ------
    ValueError
        A Dataset without ``cell`` / ``trial``, or a threshold that is not a number > 1.

    See Also
    --------
    trial_stragglers : the per-trial answers the cells are made of.
    """
    per_trial = trial_stragglers(ds, threshold=threshold)
    by_cell = dict(iter(per_trial.groupby("cell", sort=False)))
    rows = {}
    for cell in (str(c) for c in ds.cell.values.tolist()):
        mine = by_cell.get(cell, per_trial.iloc[:0])
        if (mine["source"] == "traces").any():  # the cell's best source: traces where any has
            mine = mine[mine["source"] == "traces"]
        rows[cell] = _cell_row(mine)
    out = pd.DataFrame.from_dict(rows, orient="index", columns=list(STRAGGLER_COLUMNS))
    out.index.name = "cell"
    return out.astype({"straggler_rank": int, "straggler_trials": int, "straggler_of": int})


def with_stragglers(
    df: pd.DataFrame, ds: xr.Dataset, *, threshold: float | None = None
) -> pd.DataFrame:
    """``df`` (a frame indexed by cell: a comparison, the matrix) with the
    :data:`STRAGGLER_COLUMNS` of :func:`stragglers` of ``ds`` — what makes
    :func:`aorta.matrix.findings.findings` list the stragglers. Keeps ``df.attrs``; cells
    ``ds`` lacks get none (``straggler_rank`` -1).

    >>> import numpy as np, xarray as xr
    >>> ds = xr.Dataset({"status": (("cell", "trial"), np.array([["ok"]], dtype=object))},
    ...                 coords={"cell": ["a"], "trial": [0]})
    >>> df = pd.DataFrame({"n_ok": [1]}, index=pd.Index(["a"], name="cell"))
    >>> df.attrs["alpha"] = 0.05
    >>> out = with_stragglers(df, ds)
    >>> out["straggler_rank"].tolist(), out.attrs
    ([-1], {'alpha': 0.05})
    """
    found = stragglers(ds, threshold=threshold)
    out = df.copy()
    for name in found.columns:  # column by column: a join would drop the frame's attrs
        column = found[name].reindex(out.index)
        out[name] = column.fillna(-1).astype(int) if name == "straggler_rank" else column
    out.attrs = dict(df.attrs)
    return out
