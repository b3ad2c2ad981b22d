"""The plugin author's face: everything a workload, mitigation or environment plugin imports.

A workload is a class with ``setup`` / ``run`` / ``cleanup`` registered under the
``aorta.workloads`` entry-point group (see docs/workloads.md); mitigations and environments
register under ``aorta.mitigations`` / ``aorta.environments``. The built-in workloads
(:mod:`aorta.workloads`) import nothing else of aorta, so a third-party workload is written
exactly like ``race``:

* the trial's contract — :class:`Workload`, its :class:`TrialContext` (``self.context``: the
  cell's config, environment, deadline, artifact folder, rank and world size), the
  :class:`WorkloadResult` it returns with its :class:`FailureDetail` items, and the
  :class:`TrialDeadline` / :class:`TrialHang` it raises when its deadline passed or it hung;
* ranks — :func:`init_process_group` joins the trial's process group (its rendezvous, backend
  and a timeout within the deadline), :func:`destroy_process_group` leaves it;
* measuring — :class:`StepProfiler` (``collect: [torch_profiler]``), :class:`CommClock` (each
  rank's split of a step into compute and time in collectives) and the slow-rank fault
  injection (:data:`STRAGGLER_KEYS`, :func:`straggler_delay`);
* a child process as the trial, as ``command`` runs one — :func:`spawn` it in its own process
  group, :func:`run_with_deadline` with a :class:`HangWatch` (:class:`GpuProbe`) and the
  trial's :func:`active_capture` (hang forensics before the kill), :func:`kill_group`;
* names — :mod:`~aorta.envvars` (every variable aorta reads or sets), :data:`TRACE_DIR` (where
  a rank's traces go in its artifact folder), :func:`compile_regex` / :class:`Regex` (RE2,
  linear time, for patterns a recipe gives).

>>> from aorta.plugins import Workload, WorkloadResult
>>> class Sleep(Workload):
...     name = "sleep"
...     def run(self) -> WorkloadResult:
...         return WorkloadResult(passed=True, step_times_ms=[1.0] * self.steps)
>>> Sleep.launch_mode
'single_process'
"""

from __future__ import annotations

from aorta import envvars
from aorta.recipe.registry import Environment, Mitigation, Registry
from aorta.regex import Regex, compile_regex
from aorta.run.comm_wait import STRAGGLER_KEYS, CommClock, straggler_delay
from aorta.run.forensics import active as active_capture
from aorta.run.hang import GpuProbe, HangWatch
from aorta.run.procs import TrialDeadline, TrialHang, kill_group, run_with_deadline, spawn
from aorta.run.profiler import StepProfiler
from aorta.run.ranks import destroy_process_group, init_process_group
from aorta.run.workload import FailureDetail, TrialContext, Workload, WorkloadResult
from aorta.store.rundir import TRACE_DIR

__all__ = [
    "STRAGGLER_KEYS",
    "TRACE_DIR",
    "CommClock",
    "Environment",
    "FailureDetail",
    "GpuProbe",
    "HangWatch",
    "Mitigation",
    "Regex",
    "Registry",
    "StepProfiler",
    "TrialContext",
    "TrialDeadline",
    "TrialHang",
    "Workload",
    "WorkloadResult",
    "active_capture",
    "compile_regex",
    "destroy_process_group",
    "envvars",
    "init_process_group",
    "kill_group",
    "run_with_deadline",
    "spawn",
    "straggler_delay",
]
