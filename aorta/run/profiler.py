"""Collectors a workload drives step by step: ``collect: [torch_profiler]``.

:class:`StepProfiler` wraps ``torch.profiler.profile`` with the recipe's schedule and writes one
Kineto trace per rank per trial into the trial's ``trace/`` folder as
``rank<N>.pt.trace.json.gz`` (``rank<N>.<k>.pt.trace.json.gz`` for later cycles when
``repeat`` > 1). When the recipe asks for no profiler it does nothing, so workloads call it
unconditionally::

    with StepProfiler(self.context, total_steps=n) as prof:
        for _ in range(n):
            train_step()
            prof.step()

Examples
--------
>>> from aorta.run.workload import TrialContext
>>> with StepProfiler(TrialContext(cell="a", trial=0), total_steps=3) as prof:
...     prof.step()
>>> prof.enabled, prof.traces
(False, [])
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aorta.errors import AortaError
from aorta.run.workload import TrialContext, WorkloadCatalog
from aorta.store.rundir import TRACE_DIR, RunDir, trace_file_name

__all__ = ["StepProfiler", "no_traces_hint"]

DEFAULTS = {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}


class StepProfiler:
    """torch.profiler driven by workload steps (a no-op unless ``torch_profiler`` is collected)."""

    def __init__(self, context: TrialContext, *, total_steps: int) -> None:
        options = context.collect.get("torch_profiler")
        self.enabled = options is not None
        self.options = {**DEFAULTS, **(options or {})}
        self.context = context
        self.total_steps = total_steps
        self.traces: list[Path] = []
        self._prof: Any = None

    def _schedule(self) -> dict[str, int]:
        wait, warmup, active = (int(self.options[k]) for k in ("wait", "warmup", "active"))
        # A short trial still gets a trace: shrink the lead-in before the active window.
        spare = max(0, self.total_steps - max(1, active))
        warmup = min(warmup, spare)
        wait = min(wait, spare - warmup)
        return {
            "wait": wait,
            "warmup": warmup,
            "active": max(1, active),
            "repeat": int(self.options["repeat"]),
        }

    def _trace_path(self) -> Path:
        folder = Path(self.context.artifact_dir or ".") / TRACE_DIR
        folder.mkdir(parents=True, exist_ok=True)
        return folder / trace_file_name(self.context.rank, cycle=len(self.traces))

    def _ready(self, prof: Any) -> None:
        path = self._trace_path()
        prof.export_chrome_trace(str(path))
        self.traces.append(path)

    def __enter__(self) -> StepProfiler:
        if not self.enabled:
            return self
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(
            activities=activities,
            schedule=schedule(**self._schedule()),
            on_trace_ready=self._ready,
            record_shapes=bool(self.options.get("record_shapes", True)),
            with_stack=bool(self.options.get("with_stack", False)),
            profile_memory=bool(self.options.get("profile_memory", False)),
        )
        with _inductor_left_unloaded():
            self._prof.__enter__()
        return self

    def step(self) -> None:
        """Mark the end of one workload step."""
        if self._prof is not None:
            with _inductor_left_unloaded():
                self._prof.step()

    def __exit__(self, *exc: object) -> None:
        if self._prof is not None:
            self._prof.__exit__(*exc)
            self._prof = None


@contextlib.contextmanager
def _inductor_left_unloaded() -> Iterator[None]:
    """Keep ``torch._inductor`` unimported while torch.profiler starts a cycle, if nothing
    imported it before.

    ``profile.prepare_trace`` asks ``hasattr(torch, "_inductor")`` to learn whether inductor's
    CUDA graphs are on, and the question itself imports inductor and dynamo through torch's lazy
    attribute (~1.4 CPU-s in each profiled trial worker, for a workload that never compiles).
    Inductor that is not loaded has no CUDA graphs, so the attribute is hidden for the call
    (as if torch had no lazy ``_inductor``); where inductor is loaded, nothing changes.
    """
    lazy = getattr(sys.modules.get("torch"), "_lazy_modules", None)
    if "torch._inductor" in sys.modules or not isinstance(lazy, set) or "_inductor" not in lazy:
        yield
        return
    lazy.discard("_inductor")
    try:
        yield
    finally:
        lazy.add("_inductor")


def no_traces_hint(run_dir: str | Path, *, catalog: WorkloadCatalog | None = None) -> str | None:
    """Why ``run_dir`` has no profiler trace and what to do, or ``None`` when it has some.

    ``--traces`` and ``--explain`` read the traces a trial's ``torch_profiler`` collector wrote;
    a run without any gets one line that says how to record them: ``collect:
    [torch_profiler]`` in the recipe, with a workload that records traces (the installed
    workloads whose ``collectors`` hold ``torch_profiler``).

    >>> import tempfile
    >>> rd = RunDir.create(tempfile.mkdtemp(), ticket=None, workload="matmul")
    >>> print(no_traces_hint(rd.path))  # doctest: +ELLIPSIS
    no profiler traces in ...: add `collect: [torch_profiler]` to the recipe ... (workloads that record traces: ...)
    """
    rd = RunDir(run_dir)
    if rd.has_traces():
        return None
    catalog = catalog or WorkloadCatalog()
    able = []
    for name in catalog.names():
        try:
            if "torch_profiler" in (getattr(catalog.get(name), "collectors", None) or ()):
                able.append(name)
        except AortaError:  # a broken plugin: not one to recommend
            continue
    which = (
        f"workloads that record traces: {', '.join(able)}"
        if able
        else "no installed workload records traces"
    )
    if rd.collects_traces():
        return (
            f"no profiler traces in {rd.path}: its cells collect torch_profiler, but no trial wrote "
            f"a trace ({which}; a trial that failed before its profiled steps writes none)"
        )
    return (
        f"no profiler traces in {rd.path}: add `collect: [torch_profiler]` to the recipe (or a "
        f"cell) and run it again ({which})"
    )
