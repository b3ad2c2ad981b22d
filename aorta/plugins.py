"""The plugin author's face: what a workload, mitigation or environment plugin imports.

A workload is a class with ``setup`` / ``run`` / ``cleanup`` registered under the
``aorta.workloads`` entry-point group (see docs/workloads.md); mitigations and environments
register under ``aorta.mitigations`` / ``aorta.environments``.

>>> from aorta.plugins import Workload, WorkloadResult
>>> class Sleep(Workload):
...     name = "sleep"
...     def run(self) -> WorkloadResult:
...         return WorkloadResult(passed=True, step_times_ms=[1.0] * self.steps)
>>> Sleep.launch_mode
'single_process'
"""

from __future__ import annotations

from aorta.recipe.registry import Environment, Mitigation, Registry
from aorta.run.profiler import StepProfiler
from aorta.run.workload import FailureDetail, TrialContext, Workload, WorkloadResult

__all__ = [
    "Environment",
    "FailureDetail",
    "Mitigation",
    "Registry",
    "StepProfiler",
    "TrialContext",
    "Workload",
    "WorkloadResult",
]
