"""Statistics on anyone's data: a pandas table of trials → the Dataset of a run (:func:`from_trials`).

Measurements taken elsewhere — another harness, a spreadsheet, a CI job's log scraped into a
table — become the same :class:`xarray.Dataset` a sweep's records do
(:func:`aorta.matrix.dataset.build_dataset`), so :func:`aorta.compare`, ``ds.aorta`` and the
figures of :mod:`aorta.plot` work on them unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from aorta.matrix.dataset import build_dataset
from aorta.matrix.select import DEFAULT_THRESHOLD
from aorta.store.record import TrialRecord, TrialStatus

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

__all__ = ["from_trials"]

_STATUSES = tuple(s.value for s in TrialStatus)


def _steps(value: Any) -> list[float]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return [float(v) for v in np.asarray(value, dtype=float).ravel().tolist()]


def _per_step_rows(df: pd.DataFrame) -> pd.DataFrame:
    """One row per step (``step`` column) → one row per trial with ``step_times_ms`` lists."""
    for column in ("step_time_ms", "step"):
        if column not in df.columns:
            raise ValueError(f"a table with one row per step needs a {column!r} column")
    ordered = df.sort_values(["cell", "trial", "step"], kind="stable")
    keep = [c for c in ordered.columns if c not in ("step", "step_time_ms")]
    first = ordered.groupby(["cell", "trial"], sort=False, as_index=False)[keep].first()
    times = ordered.groupby(["cell", "trial"], sort=False)["step_time_ms"].apply(list)
    first["step_times_ms"] = [
        times[(c, t)] for c, t in zip(first["cell"], first["trial"], strict=True)
    ]
    return first


def from_trials(
    df: pd.DataFrame,
    *,
    baseline: str,
    warmup_steps: int = 2,
    threshold: float = DEFAULT_THRESHOLD,
    cells: Sequence[str] | None = None,
) -> xr.Dataset:
    """Build a run's Dataset from a table of trials measured anywhere.

    Parameters
    ----------
    df
        One row per trial with columns ``cell``, ``trial`` (an integer from 0 within the cell),
        ``status`` and ``step_times_ms`` (a list of step times in ms, warm-up steps included);
        or one row per step with ``cell``, ``trial``, ``status``, ``step`` and
        ``step_time_ms``. ``status`` takes aorta's trial status names as written in trial
        records: ``ok``, ``workload_failed``, ``timeout`` (a hang: counted as a failure),
        ``setup_failed``, ``infrastructure_failed``, ``did_not_run``. Optional columns:
        ``run_order`` (the order trials ran in, for the drift check), ``wall_clock_s``,
        ``main_work_started`` (an ``infrastructure_failed`` trial whose work had started is a
        crash, i.e. a failure), ``error``.
    baseline
        The reference cell.
    warmup_steps
        Leading steps of every trial that are warm-up, dropped by the same rule as a sweep's
        (default 2).
    threshold
        The band of practical equivalence ``[1/threshold, threshold]`` (default 1.15).
    cells
        The cells to build, in this order (default: every cell, as they first appear in
        ``df``); rows of other cells are left out.

    Returns
    -------
    xarray.Dataset
        As :func:`aorta.load_run` gives for a sweep (``attrs``: ``baseline``, ``threshold``,
        ``source="from_trials"``). Trial ids label trials, they do not size the Dataset:
        while every cell's largest id is below twice its number of rows (plus 8), the ids
        are the ``trial`` coordinate and the gaps are missing trials, as in a sweep;
        otherwise (job ids, timestamps) every cell's trials are numbered 0, 1, … in id
        order, each given id kept in ``info`` (``info_key="trial_id"``) and
        ``attrs["trial_ids"] = "renumbered"``.

    Raises
    ------
    ValueError
        A missing column, an unknown status (the message lists the names), a negative trial,
        a trial given twice, ``warmup_steps`` < 0, ``baseline`` not among the cells, or a
        cell of ``cells`` that has no row.

    See Also
    --------
    aorta.compare : the statistics of the Dataset.

    Examples
    --------
    >>> import pandas as pd
    >>> import aorta
    >>> rows = [{"cell": c, "trial": t, "status": "ok", "step_times_ms": [50.0, 30.0] + [v + t * 0.1] * 4}
    ...         for c, v in (("base", 10.0), ("fix", 13.0)) for t in range(6)]
    >>> rows.append({"cell": "fix", "trial": 6, "status": "timeout", "step_times_ms": []})
    >>> ds = aorta.from_trials(pd.DataFrame(rows), baseline="base")
    >>> df = aorta.compare(ds)
    >>> row = df.loc["fix"]
    >>> int(row.n_ok), int(row.n_failed), int(row.n_failed_hang), row.difference, row.band
    (6, 1, 1, 'slower', 'beyond band')
    """
    df = _trial_table(df, warmup_steps)
    records = _records(df, warmup_steps)
    names = _cell_names(records, cells, baseline)
    chosen = set(names)
    records = [r for r in records if r.cell in chosen]
    attrs = {"baseline": baseline, "threshold": float(threshold), "source": "from_trials"}
    if _sparse(records):
        records = _renumbered(records)
        attrs["trial_ids"] = "renumbered"
    counts = {n: 1 + max((r.trial for r in records if r.cell == n), default=-1) for n in names}
    return build_dataset([{"name": n, "trials": counts[n]} for n in names], records, attrs=attrs)


def _trial_table(df: pd.DataFrame, warmup_steps: int) -> pd.DataFrame:
    """The table checked for its columns, one row per trial (a per-step table gathered)."""
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be ≥ 0, got {warmup_steps}")
    for column in ("cell", "trial", "status"):
        if column not in df.columns:
            raise ValueError(
                f"from_trials needs a {column!r} column; the table has {list(df.columns)}"
            )
    if "step" in df.columns:
        return _per_step_rows(df)
    if "step_times_ms" not in df.columns:
        raise ValueError(
            "from_trials needs a 'step_times_ms' column (a list per trial) or one row per step "
            "with 'step' and 'step_time_ms'"
        )
    return df


def _records(df: pd.DataFrame, warmup_steps: int) -> list[TrialRecord]:
    """A trial record per row; an unknown status, a negative or repeated trial is a ValueError."""
    records, seen = [], set()
    for row in df.to_dict("records"):
        status = str(row["status"])
        if status not in _STATUSES:
            raise ValueError(f"unknown status {status!r}; use one of: {', '.join(_STATUSES)}")
        cell, trial = str(row["cell"]), int(row["trial"])
        if trial < 0:
            raise ValueError(f"cell {cell!r}: trial {trial} is negative")
        if (cell, trial) in seen:
            raise ValueError(f"cell {cell!r}: trial {trial} is given twice")
        seen.add((cell, trial))
        order = row.get("run_order")
        wall = row.get("wall_clock_s")
        records.append(
            TrialRecord(
                cell=cell,
                cell_id="",
                trial=trial,
                status=TrialStatus(status),
                passed=status == TrialStatus.OK.value,
                step_times_ms=_steps(row["step_times_ms"]),
                warmup_steps=warmup_steps,
                wall_clock_s=None if wall is None or wall != wall else float(wall),
                main_work_started=bool(row.get("main_work_started", status != "setup_failed")),
                run_order=None if order is None or order != order else int(order),
                error=None if not row.get("error") else str(row["error"]),
            )
        )
    return records


def _cell_names(
    records: Sequence[TrialRecord], cells: Sequence[str] | None, baseline: str
) -> list[str]:
    """The Dataset's cells, in order: ``cells`` or those of the table, the baseline among them."""
    present = list(dict.fromkeys(r.cell for r in records))
    names = list(dict.fromkeys(str(c) for c in cells)) if cells is not None else present
    absent = [n for n in names if n not in present]
    if absent:
        raise ValueError(
            f"cells: {', '.join(map(repr, absent))} not in the table (cells: {', '.join(present)})"
        )
    if baseline not in names:
        raise ValueError(
            f"baseline cell {baseline!r} is not in the table (cells: {', '.join(names)})"
        )
    return names


def _sparse(records: Sequence[TrialRecord]) -> bool:
    """Whether some cell's ids would pad the Dataset past twice its rows (plus 8)."""
    rows: dict[str, int] = {}
    top: dict[str, int] = {}
    for r in records:
        rows[r.cell] = rows.get(r.cell, 0) + 1
        top[r.cell] = max(top.get(r.cell, 0), r.trial)
    return any(top[c] >= 2 * rows[c] + 8 for c in rows)


def _renumbered(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Each cell's trials as 0, 1, … in id order, the given id in ``info["trial_id"]``."""
    out: list[TrialRecord] = []
    nxt: dict[str, int] = {}
    for r in sorted(records, key=lambda r: (r.cell, r.trial)):
        k = nxt.get(r.cell, 0)
        nxt[r.cell] = k + 1
        out.append(r.model_copy(update={"trial": k, "info": {**r.info, "trial_id": str(r.trial)}}))
    return out
