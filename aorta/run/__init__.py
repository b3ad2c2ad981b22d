"""This rank's part of a sweep: the sweep loop, one trial in process or in a fresh worker,
process trees and deadlines, ranks and rendezvous, the profiler, the workload contract.

The names the CLI uses load on first use (the package stays cheap to import): the frozen
:class:`RunOptions` and its :data:`IsolationChoice`, the :class:`WorkloadCatalog`, and
:func:`no_traces_hint`. (``aorta.sweep`` is the sweep itself; plugin authors import from
:mod:`aorta.plugins`.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aorta.lazy import lazy_names

__all__ = [
    "IsolationChoice",
    "RunOptions",
    "WorkloadCatalog",
    "no_traces_hint",
]

_LAZY = {
    "IsolationChoice": "aorta.run.options",
    "RunOptions": "aorta.run.options",
    "WorkloadCatalog": "aorta.run.workload",
    "no_traces_hint": "aorta.run.profiler",
}

if TYPE_CHECKING:  # the same names for type checkers; loaded on first access at run time
    from aorta.run.options import IsolationChoice, RunOptions
    from aorta.run.profiler import no_traces_hint
    from aorta.run.workload import WorkloadCatalog


__getattr__, __dir__ = lazy_names(globals(), _LAZY)
