"""The matrix as data, pure: the run's xarray Dataset (build, netCDF I/O, run directories),
statistics, comparisons against the baseline, the per-cell summary, trace metrics per
cell × trial × rank, and the ``ds.aorta`` accessor.

Modules, bottom to top: :mod:`~aorta.matrix.rank_tests` and :mod:`~aorta.matrix.stats`
(numbers), :mod:`~aorta.matrix.select` (which trials count, one value per trial), :mod:`~aorta.matrix.dataset` (records → Dataset,
netCDF), :mod:`~aorta.matrix.trace_metrics`, :mod:`~aorta.matrix.load` (run directories),
:mod:`~aorta.matrix.options` (the statistics options, :class:`StatsOptions`),
:mod:`~aorta.matrix.stragglers` (who the other ranks wait for), :mod:`~aorta.matrix.compare`,
:mod:`~aorta.matrix.summary`, :mod:`~aorta.matrix.trace_summary`,
:mod:`~aorta.matrix.accessor`. Importing this package registers ``ds.aorta``, once.
"""

from aorta.matrix.accessor import AortaAccessor
from aorta.matrix.compare import gate_regressions
from aorta.matrix.history import HistoryMetric
from aorta.matrix.options import StatsOptions
from aorta.matrix.rank_causes import format_bytes
from aorta.matrix.series import analyze as analyze_history

__all__ = [
    "AortaAccessor",
    "HistoryMetric",
    "StatsOptions",
    "analyze_history",
    "format_bytes",
    "gate_regressions",
]
