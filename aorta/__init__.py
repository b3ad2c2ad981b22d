"""aorta — triage GPU training problems on clusters.

The notebook API::

    import aorta
    recipe = aorta.load_recipe("recipes/cpu-smoke.yaml")
    plan = aorta.plan(recipe)
    result = aorta.sweep(recipe)
    opts = aorta.RunOptions(output="runs", progress="none")  # the run options, one frozen value
    result = aorta.sweep(recipe, options=opts)  # (or aorta.sweep(recipe, output="runs", ...))
    ds = aorta.load_run(result.run_dir)     # xarray Dataset, cell × trial (× step)
    aorta.compare(ds)                       # pandas DataFrame: ratio [CI], p_adj, verdict
    opts = aorta.StatsOptions(alpha=0.01)   # the statistics options, one frozen value
    aorta.compare(ds, options=opts)         # (or aorta.compare(ds, alpha=0.01))
    ds = aorta.load_run(run, traces=True)   # + trace metrics, cell × trial × rank
    aorta.compare(ds, metric="exposed_comm_ms")
    aorta.report.html(run)                  # run/report/report.html: one self-contained page
    aorta.hang.analyze(aorta.hang.load_evidence(["dumps/"]))  # who hung, and where
    hist = aorta.load_history(["triage_results"])  # run × cell × trial across every run found
    aorta.history(["triage_results"]).change_points  # when each cell changed, what changed with it

Plugin authors (workloads, mitigations, environments) import from :mod:`aorta.plugins`.
Heavy dependencies (torch, xarray, matplotlib) load on first use, so ``aorta --help`` and
``import aorta`` stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aorta.errors import AortaError, ExitCode, RecipeError, TraceError, TraceWarning, UsageError
from aorta.lazy import lazy_names

#: The one home of the version: pyproject.toml reads it (setuptools' dynamic ``attr``).
__version__ = "0.1.0"

__all__ = [
    "AortaError",
    "ExitCode",
    "RecipeError",
    "RunOptions",
    "StatsOptions",
    "TraceError",
    "TraceWarning",
    "UsageError",
    "__version__",
    "compare",
    "compare_runs",
    "dump_recipe",
    "errors",
    "explain",
    "from_trials",
    "hang",
    "history",
    "load_history",
    "load_recipe",
    "load_run",
    "load_runs",
    "load_tracelens",
    "load_trials",
    "plan",
    "plot",
    "report",
    "sweep",
    "trace",
]

# name -> module that defines it; imported on first attribute access. Plugin authors' names
# (Workload, Registry, …) are in aorta.plugins.
_LAZY: dict[str, str] = {
    "plan": "aorta.recipe.plan",
    "dump_recipe": "aorta.recipe.load",
    "load_recipe": "aorta.recipe.load",
    "sweep": "aorta.run.sweep",
    "load_run": "aorta.matrix.load",
    "load_runs": "aorta.matrix.load",
    "load_trials": "aorta.matrix.load",
    "load_tracelens": "aorta.matrix.trace_metrics",
    "compare": "aorta.matrix.compare",
    "compare_runs": "aorta.matrix.compare",
    "explain": "aorta.matrix.explain",
    "StatsOptions": "aorta.matrix.options",
    "RunOptions": "aorta.run.options",
    "from_trials": "aorta.matrix.external",
    "load_history": "aorta.matrix.history",
    "history": "aorta.matrix.series",
}
_MODULES = frozenset({"errors", "hang", "plot", "report", "trace"})

if TYPE_CHECKING:
    # The same names for type checkers and editors; at run time they load on first access.
    # tests/layout/test_faces.py keeps this block and _LAZY in step.
    from aorta import errors, hang, plot, report, trace
    from aorta.matrix.compare import compare, compare_runs
    from aorta.matrix.explain import explain
    from aorta.matrix.external import from_trials
    from aorta.matrix.history import load_history
    from aorta.matrix.load import load_run, load_runs, load_trials
    from aorta.matrix.options import StatsOptions
    from aorta.matrix.series import history
    from aorta.matrix.trace_metrics import load_tracelens
    from aorta.recipe.load import dump_recipe, load_recipe
    from aorta.recipe.plan import plan
    from aorta.run.options import RunOptions
    from aorta.run.sweep import sweep


__getattr__, __dir__ = lazy_names(globals(), _LAZY, modules=_MODULES)
