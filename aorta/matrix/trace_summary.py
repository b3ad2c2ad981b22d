"""The numbers of the matrix's trace section: per cell, where the time went and whether exposed
communication changed against the baseline.

Pure functions of a Dataset with trace metrics (``aorta.load_run(run, traces=True)``):
:func:`trace_summary` gives one row per cell (:mod:`aorta.report.matrix_files` renders it as the
``## Traces`` section of ``matrix.md`` and the ``traces`` entry of ``matrix.json``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aorta.matrix.compare import compare
from aorta.matrix.options import StatsOptions, stats_options

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr
    from typing_extensions import Unpack

    from aorta.matrix.options import StatsKeywords

__all__ = ["BREAKDOWN_PARTS", "has_traces", "trace_summary"]

#: The parts of the time breakdown the trace section shows, in order.
BREAKDOWN_PARTS = ("computation_ms", "exposed_comm_ms", "idle_ms")
_ANALYSED = ("gpu", "host", "tracelens")


def has_traces(ds: xr.Dataset) -> bool:
    """Whether ``ds`` holds trace metrics (and at least one trace was analysed)."""
    return "trace_source" in ds and bool(ds.trace_source.isin(list(_ANALYSED)).any())


def trace_summary(
    ds: xr.Dataset,
    baseline: str | None = None,
    *,
    options: StatsOptions | None = None,
    **overrides: Unpack[StatsKeywords],
) -> pd.DataFrame:
    """One row per cell: medians of the time breakdown and the exposed-comm verdict (``difference``, ``band``).

    Each trial's value is its ranks reduced by the options' ``ranks`` (default ``worst``: the
    max for these times); the cell's value is the median over trials. The
    exposed-communication columns are :func:`aorta.compare` with ``metric="exposed_comm_ms"``
    and the same ``options`` and keywords (:class:`~aorta.matrix.options.StatsOptions`): the
    same statistics and verdicts as step time.

    Returns
    -------
    pandas.DataFrame
        Index ``cell``; ``traced`` (trials with a value), ``source`` (``gpu``, ``host``,
        ``tracelens``, or several joined by ``+``), ``computation_ms``, ``exposed_comm_ms``, ``idle_ms`` (medians) and
        their ``*_iqr``, then ``ratio``, ``ratio_ci_low``, ``ratio_ci_high``, ``p_adj`` and
        ``verdict`` of exposed comm against the baseline. ``attrs``: the comparison's
        statistics, and ``diagnostics`` (the Dataset's missing or unreadable traces).

    Raises
    ------
    ValueError
        ``ds`` has no trace metrics; as :func:`aorta.compare` otherwise.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> ds = build_dataset([{"name": c, "trials": 2} for c in ("base", "x")],
    ...     [TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True) for c in ("base", "x") for t in (0, 1)],
    ...     attrs={"baseline": "base"})
    >>> parts = {"computation_ms": 5.0, "exposed_comm_ms": 2.0, "idle_ms": 1.0}
    >>> ds = ds.assign({k: (("cell", "trial", "rank"), np.full((2, 2, 1), v), {"rank_reduction": "max", "units": "ms"})
    ...                 for k, v in parts.items()} | {"trace_source": (("cell", "trial", "rank"), np.full((2, 2, 1), "host", dtype=object))})
    >>> trace_summary(ds)[["traced", "source", "exposed_comm_ms", "difference", "band"]]  # doctest: +NORMALIZE_WHITESPACE
          traced source  exposed_comm_ms              difference       band
    cell
    base       2   host              2.0                baseline   baseline
    x          2   host              2.0  no difference detected  undecided
    """
    if "exposed_comm_ms" not in ds or "trace_source" not in ds:
        raise ValueError(
            "no trace metrics in this Dataset: load it with load_run(run, traces=True)"
        )
    opts = stats_options(options, **overrides)
    comparisons = {m: compare(ds, baseline, metric=m, options=opts) for m in BREAKDOWN_PARTS}
    comm = comparisons["exposed_comm_ms"]
    out = comm[["n_timed"]].rename(columns={"n_timed": "traced"})
    out.insert(1, "source", [_sources(ds, cell) for cell in out.index])
    for metric, df in comparisons.items():
        out[metric] = df["median"]
        out[f"{metric}_iqr"] = df["iqr"]
    for column in (
        "delta",
        "ratio",
        "ratio_ci_low",
        "ratio_ci_high",
        "band_ci_low",
        "band_ci_high",
        "p_adj",
        "difference",
        "band",
        "trials_needed",
    ):
        out[column] = comm[column]
    out.attrs = dict(comm.attrs)
    out.attrs["diagnostics"] = json.loads(str(ds.attrs.get("trace_diagnostics", "[]")))
    return out


def _sources(ds: xr.Dataset, cell: Any) -> str:
    seen = {str(s) for s in ds.trace_source.sel(cell=cell).values.ravel().tolist()}
    return "+".join(s for s in _ANALYSED if s in seen) or "—"
