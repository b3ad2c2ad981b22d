"""aorta — triage GPU training problems on clusters.

The notebook API::

    import aorta
    recipe = aorta.load_recipe("recipes/cpu-smoke.yaml")
    plan = aorta.plan(recipe)
    result = aorta.sweep(recipe)
    ds = aorta.load_run(result.run_dir)     # xarray Dataset, cell × trial (× step)
    aorta.compare(ds)                       # pandas DataFrame: ratio [CI], p_adj, verdict
    ds = aorta.load_run(run, traces=True)   # + trace metrics, cell × trial × rank
    aorta.compare(ds, metric="exposed_comm_ms")

Heavy dependencies (torch, xarray, matplotlib) load on first use, so ``aorta --help`` and
``import aorta`` stay fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from aorta.errors import AortaError, ExitCode, RecipeError, TraceError, TraceWarning, UsageError

__version__ = "0.1.0"

__all__ = [
    "AortaError",
    "Cell",
    "Environment",
    "ExitCode",
    "Mitigation",
    "Plan",
    "Recipe",
    "RecipeError",
    "Registry",
    "RunDir",
    "SweepResult",
    "TraceError",
    "TraceWarning",
    "TrialContext",
    "TrialRecord",
    "TrialStatus",
    "UsageError",
    "Workload",
    "WorkloadResult",
    "__version__",
    "compare",
    "compare_runs",
    "dump_recipe",
    "load_recipe",
    "load_run",
    "load_runs",
    "load_tracelens",
    "load_trials",
    "plan",
    "plot",
    "sweep",
    "trace",
]

# name -> module that defines it; imported on first attribute access.
_LAZY: dict[str, str] = {
    "Cell": "aorta.recipe.plan",
    "Plan": "aorta.recipe.plan",
    "plan": "aorta.recipe.plan",
    "Recipe": "aorta.recipe.schema",
    "dump_recipe": "aorta.recipe.schema",
    "load_recipe": "aorta.recipe.schema",
    "Environment": "aorta.recipe.registry",
    "Mitigation": "aorta.recipe.registry",
    "Registry": "aorta.recipe.registry",
    "sweep": "aorta.run.sweep",
    "SweepResult": "aorta.run.sweep",
    "TrialRecord": "aorta.store.record",
    "TrialStatus": "aorta.store.record",
    "RunDir": "aorta.store.rundir",
    "Workload": "aorta.run.workload",
    "WorkloadResult": "aorta.run.workload",
    "TrialContext": "aorta.run.workload",
    "load_run": "aorta.matrix.load",
    "load_runs": "aorta.matrix.load",
    "load_trials": "aorta.matrix.load",
    "load_tracelens": "aorta.matrix.trace_metrics",
    "compare": "aorta.matrix.compare",
    "compare_runs": "aorta.matrix.compare",
    "plot": "aorta.plot",
    "trace": "aorta.trace",
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'aorta' has no attribute {name!r}")
    module = importlib.import_module(target)
    value = module if target == f"aorta.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
