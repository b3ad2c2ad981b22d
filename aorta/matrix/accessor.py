"""``ds.aorta``: the common calls on a run's Dataset, registered once.

Each method is one line calling :mod:`aorta.matrix.compare`, :mod:`aorta.matrix.dataset` or
the figures module :mod:`aorta.plot` registers (:func:`register_figures`), so a notebook and the
CLI go through the same code. The class is registered once, when :mod:`aorta.matrix` is
imported.

Examples
--------
>>> from aorta.matrix.dataset import build_dataset
>>> from aorta.store.record import TrialRecord
>>> ds = build_dataset([{"name": "base", "trials": 1}],
...     [TrialRecord(cell="base", cell_id="", trial=0, status="ok", passed=True, step_times_ms=[2.0])],
...     attrs={"baseline": "base"})
>>> ds.aorta.compare()["difference"].tolist()
['baseline']
>>> import xarray as xr
>>> xr.Dataset().aorta
Traceback (most recent call last):
...
ValueError: an aorta Dataset needs a 'cell' dimension; this one has []
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import xarray as xr

from aorta.matrix.compare import compare, compare_runs
from aorta.matrix.dataset import trials_frame
from aorta.matrix.explain import explain
from aorta.matrix.options import StatsOptions
from aorta.matrix.select import (
    RankReduction,
    StepStat,
    TrialSelection,
    check_dims,
    trial_values,
)
from aorta.matrix.stragglers import stragglers
from aorta.matrix.trace_summary import trace_summary
from aorta.store.netcdf import write_netcdf

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from typing_extensions import Unpack

    from aorta.matrix.options import StatsKeywords

__all__ = ["FIGURES_MODULE", "AortaAccessor", "register_figures"]


#: The module that draws the accessor's figures, as pandas' plotting backend: named here and
#: imported by name on the first figure, so matplotlib stays unloaded until then and the matrix
#: never imports the plot stage above it. The module registers itself
#: (:func:`register_figures`) when imported; a notebook may register another one.
FIGURES_MODULE = "aorta.plot"
_figures: ModuleType | None = None


def register_figures(module: ModuleType) -> None:
    """Make ``module`` the one whose functions draw ``ds.aorta.plot_*`` (``step_distributions``,
    ``step_series``, ``failure_rates``, ``ratio_forest``, ``time_breakdown``,
    ``exposed_comm_vs_step``, ``waterfall``); :mod:`aorta.plot` calls it on import."""
    global _figures
    _figures = module


def _plot() -> ModuleType:
    """The registered figures module, importing :data:`FIGURES_MODULE` on first use. A module
    found at run time is untyped to mypy: the methods say what its functions return (``cast``)."""
    if _figures is None:
        importlib.import_module(FIGURES_MODULE)
    if _figures is None:
        raise RuntimeError(f"{FIGURES_MODULE} did not register its figures (register_figures)")
    return _figures


@xr.register_dataset_accessor("aorta")  # type: ignore[no-untyped-call]  # xarray: unannotated
class AortaAccessor:
    """The ``aorta`` accessor of a run's Dataset (dims ``cell`` and ``trial``).

    Raises ``ValueError`` naming the missing dimension when the Dataset is not one.
    """

    def __init__(self, ds: xr.Dataset) -> None:
        check_dims(ds)
        self._ds = ds

    def compare(
        self,
        baseline: str | None = None,
        *,
        metric: str = "step_time_ms",
        options: StatsOptions | None = None,
        signature: str | None = None,
        sequential: bool = False,
        failure_margin: float | None = None,
        max_trials: int | None = None,
        **overrides: Unpack[StatsKeywords],
    ) -> pd.DataFrame:
        """Every cell against the baseline: :func:`aorta.compare`."""
        return compare(
            self._ds,
            baseline,
            metric=metric,
            options=options,
            signature=signature,
            sequential=sequential,
            failure_margin=failure_margin,
            max_trials=max_trials,
            **overrides,
        )

    def compare_to(self, reference: xr.Dataset, **kwargs: Any) -> pd.DataFrame:
        """This run's cells against the same cells of ``reference``: :func:`aorta.compare_runs`."""
        return compare_runs(reference, self._ds, **kwargs)

    def trial_values(
        self,
        *,
        metric: str = "step_time_ms",
        trials: TrialSelection = "ok",
        ranks: RankReduction = "worst",
        stat: StepStat = "median",
    ) -> xr.DataArray:
        """One value per trial: :func:`aorta.matrix.select.trial_values`."""
        return trial_values(self._ds, metric=metric, trials=trials, ranks=ranks, stat=stat)

    def trials(self) -> pd.DataFrame:
        """One row per recorded trial: :func:`aorta.matrix.dataset.trials_frame`."""
        return trials_frame(self._ds)

    def to_netcdf(self, path: str | Path) -> Path:
        """Write the Dataset so :func:`aorta.load_run` reads it back identical."""
        return write_netcdf(self._ds, path)

    def plot_steps(self, baseline: str | None = None, **kwargs: Any) -> Figure:
        """Per-cell trial values with the baseline band: :func:`aorta.plot.step_distributions`."""
        return cast("Figure", _plot().step_distributions(self._ds, baseline, **kwargs))

    def plot_series(self, **kwargs: Any) -> Figure:
        """Step time per step, one line per trial: :func:`aorta.plot.step_series`."""
        return cast("Figure", _plot().step_series(self._ds, **kwargs))

    def plot_failures(
        self, baseline: str | None = None, *, ax: Axes | None = None, **kwargs: Any
    ) -> Figure:
        """Failure rates with Wilson intervals: :func:`aorta.plot.failure_rates`."""
        return cast("Figure", _plot().failure_rates(self.compare(baseline, **kwargs), ax=ax))

    def plot_forest(
        self, baseline: str | None = None, *, ax: Axes | None = None, **kwargs: Any
    ) -> Figure:
        """Ratios to the baseline with their CIs: :func:`aorta.plot.ratio_forest`."""
        return cast("Figure", _plot().ratio_forest(self.compare(baseline, **kwargs), ax=ax))

    def trace_summary(self, baseline: str | None = None, **kwargs: Any) -> pd.DataFrame:
        """Per cell: time breakdown medians and the exposed-comm verdict:
        :func:`aorta.matrix.trace_summary.trace_summary` (needs ``load_run(run, traces=True)``)."""
        return trace_summary(self._ds, baseline, **kwargs)

    def stragglers(self, *, threshold: float | None = None) -> pd.DataFrame:
        """Per cell: the rank the others wait for across trials, or none:
        :func:`aorta.matrix.stragglers.stragglers` (traces with ``load_run(run, traces=True)``)."""
        return stragglers(self._ds, threshold=threshold)

    def plot_time_breakdown(self, **kwargs: Any) -> Figure:
        """Stacked time breakdown per cell: :func:`aorta.plot.time_breakdown`."""
        return cast("Figure", _plot().time_breakdown(self._ds, **kwargs))

    def plot_exposed_comm(self, **kwargs: Any) -> Figure:
        """Exposed communication against step time: :func:`aorta.plot.exposed_comm_vs_step`."""
        return cast("Figure", _plot().exposed_comm_vs_step(self._ds, **kwargs))

    def explain(self, cell: str, baseline: str | None = None, **kwargs: Any) -> pd.DataFrame:
        """Where ``cell``'s step time went against the baseline: :func:`aorta.explain` (needs
        ``load_run(run, traces=True)``)."""
        return explain(self._ds, cell, baseline, **kwargs)

    def plot_waterfall(
        self,
        cell: str,
        baseline: str | None = None,
        *,
        top: int = 8,
        ax: Axes | None = None,
        **kwargs: Any,
    ) -> Figure:
        """The decomposition of :meth:`explain` as a waterfall: :func:`aorta.plot.waterfall`."""
        return cast(
            "Figure", _plot().waterfall(self.explain(cell, baseline, **kwargs), top=top, ax=ax)
        )
