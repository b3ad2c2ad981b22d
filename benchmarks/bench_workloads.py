"""Workloads the benchmarks time (a module of their own, so process-isolated workers import it)."""

from __future__ import annotations

from aorta.plugins import Workload, WorkloadResult


class Noop(Workload):
    """Does nothing: whatever a trial costs is the harness."""

    name = "bench_noop"

    def run(self) -> WorkloadResult:
        return WorkloadResult(passed=True, step_times_ms=[0.0])


class ImportTorch(Workload):
    """Imports torch and nothing more: the floor of any real GPU workload's trial."""

    name = "bench_import_torch"

    def run(self) -> WorkloadResult:
        import torch

        return WorkloadResult(passed=True, info={"torch": torch.__version__})


WORKLOADS = {cls.name: cls for cls in (Noop, ImportTorch)}
