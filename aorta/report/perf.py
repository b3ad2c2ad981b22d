""" "Against the hardware" in a run's report: per cell, each perf-model family's kernel time,
achieved TFLOP/s and share of the roofline, and what changed against the baseline.

Two sources, each said where it is shown:

- **one representative trace per cell** (:func:`representative_files`: the GPU trace of the
  trial whose profiled busy time is the cell's median, its lowest GPU rank), analysed with
  :meth:`aorta.trace.Trace.perf_summary` rolled up per family
  (:func:`aorta.trace.perf.by_family`) and :meth:`~aorta.trace.Trace.perf_ops` for its
  roofline figure (:func:`aorta.plot.roofline`);
- **every trial**: the per-trial metrics of ``load_run(run, traces=True)``
  (``perf_coverage``, ``pct_roofline_<family>``), compared with the baseline by
  :func:`aorta.compare` (``metric="pct_roofline_<family>"``): a family whose share of the
  roofline is detectably ``higher`` or ``lower`` gets a sentence ("SDPA_fwd went from 41% to
  28% of roofline under cell x").

Traces without GPU kernels (CPU-only runs: source ``host``) have no perf model and no
roofline; the section says so instead of showing nothing. Everything here is pure but
:func:`load_hardware`, which reads the representative traces (through the trace cache), and
:func:`hardware_report`, ``aorta report --traces``'s part, which writes through ``put``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr
from matplotlib.figure import Figure

import aorta.trace
from aorta import plot
from aorta.errors import TraceError
from aorta.matrix.compare import compare
from aorta.matrix.options import StatsOptions
from aorta.matrix.trace_summary import has_traces
from aorta.trace.metrics import PERF
from aorta.trace.perf import by_family

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from aorta.matrix.options import StatsKeywords

__all__ = [
    "HARDWARE_CSV",
    "NO_GPU_TEXT",
    "CellHardware",
    "cell_hardware",
    "change_sentence",
    "hardware_frame",
    "hardware_markdown",
    "hardware_report",
    "has_gpu_traces",
    "load_hardware",
    "representative_files",
    "roofline_changes",
]

#: The per cell × family table ``aorta report --traces`` writes into ``report/``.
HARDWARE_CSV = "hardware.csv"
#: What the section says when no trace of the run holds a GPU kernel.
NO_GPU_TEXT = (
    "The traces hold no GPU kernels (source `host`: a CPU-only run), so no perf model and no "
    "roofline apply: there is no kernel time to set against the hardware."
)


@dataclass(frozen=True)
class CellHardware:
    """One cell's representative trace against the hardware."""

    #: The cell.
    cell: str
    #: The trace file, relative to the run directory.
    file: str
    #: :func:`aorta.trace.perf.by_family` of its :meth:`~aorta.trace.Trace.perf_summary`
    #: (``attrs``: ``coverage`` 0..1, ``device``).
    families: pd.DataFrame
    #: Its :meth:`~aorta.trace.Trace.perf_ops` (the roofline figure's points).
    ops: pd.DataFrame
    #: Why the trace could not be analysed (then both tables are empty).
    problem: str = ""

    @property
    def device(self) -> str:
        return str(self.families.attrs.get("device") or "")

    @property
    def coverage(self) -> float:
        """Share (0..1) of the trace's kernel time with a model; NaN when unknown."""
        value = self.families.attrs.get("coverage")
        return float("nan") if value is None else float(value)


def has_gpu_traces(ds: xr.Dataset) -> bool:
    """Whether any trial's trace holds GPU events (``trace_source == "gpu"``)."""
    return "trace_source" in ds and bool((ds.trace_source == "gpu").any())


def representative_files(ds: xr.Dataset) -> dict[str, str]:
    """Per cell, the trace file (relative to the run) of one representative GPU trace.

    The trial whose ``busy_ms`` (its worst rank) is the median of the cell's GPU-traced
    trials (the lower middle one for an even count), and its lowest rank with a GPU trace.
    Cells without a GPU trace are left out.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> ds = xr.Dataset({"trace_source": (("cell", "trial", "rank"), [[["gpu"], ["gpu"], ["gpu"]]]),
    ...     "trace_file": (("cell", "trial", "rank"), [[["t0.json"], ["t1.json"], ["t2.json"]]]),
    ...     "busy_ms": (("cell", "trial", "rank"), [[[3.0], [1.0], [2.0]]])},
    ...     coords={"cell": ["a"], "trial": [0, 1, 2], "rank": [0]})
    >>> representative_files(ds)
    {'a': 't2.json'}
    """
    if "trace_source" not in ds or "trace_file" not in ds:
        return {}
    out = {}
    for cell in ds.cell.values.tolist():
        source = ds.trace_source.sel(cell=cell).transpose("trial", "rank").values.astype(str)
        files = ds.trace_file.sel(cell=cell).transpose("trial", "rank").values.astype(str)
        gpu = source == "gpu"
        trials = np.flatnonzero(gpu.any(axis=1))
        if not trials.size:
            continue
        if "busy_ms" in ds:
            busy = ds.busy_ms.sel(cell=cell).transpose("trial", "rank").values.astype(float)
            finite = gpu & np.isfinite(busy)
            worst = np.array(
                [busy[t][finite[t]].max() if finite[t].any() else np.inf for t in trials]
            )
            order = trials[np.argsort(worst, kind="stable")]
        else:
            order = trials
        trial = order[(len(order) - 1) // 2]
        rank = int(np.flatnonzero(gpu[trial])[0])
        out[str(cell)] = str(files[trial, rank])
    return out


def cell_hardware(trace: aorta.trace.Trace, *, cell: str, file: str) -> CellHardware:
    """One cell's :class:`CellHardware` from its representative trace (pure).

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 10, {"Input Dims": [[1024, 1024], [1024, 1024]],
    ...                       "Input type": ["c10::BFloat16"] * 2}), ("kernel", "gemm", 12, 100, {"launch_ts": 2})])
    >>> c = cell_hardware(t, cell="a", file="rank0.json")
    >>> c.families[["family", "calls", "kernel_us"]].to_dict("records"), c.coverage
    ([{'family': 'GEMM', 'calls': 1, 'kernel_us': 100.0}], 1.0)
    """
    return CellHardware(cell, file, by_family(trace.perf_summary()), trace.perf_ops())


def load_hardware(ds: xr.Dataset, run_dir: str | Path) -> list[CellHardware]:
    """:func:`cell_hardware` of each cell's :func:`representative_files` trace under
    ``run_dir`` (the file edge: a trace that cannot be read gives a :class:`CellHardware`
    with its ``problem``, the other cells still load)."""
    out = []
    for cell, rel in representative_files(ds).items():
        try:
            trace = aorta.trace.load(Path(run_dir) / rel)
        except (TraceError, OSError) as exc:
            empty = pd.DataFrame()
            out.append(CellHardware(cell, rel, empty, empty, problem=str(exc)))
            continue
        out.append(cell_hardware(trace, cell=cell, file=rel))
    return out


def roofline_changes(
    ds: xr.Dataset,
    baseline: str | None = None,
    *,
    options: StatsOptions | None = None,
    **overrides: Unpack[StatsKeywords],
) -> pd.DataFrame:
    """Per family and cell, the share of the roofline over trials against the baseline.

    :func:`aorta.compare` with ``metric="pct_roofline_<family>"`` for every such variable of
    ``ds``; ``options`` and the keywords (``alpha``, ``seed``, ``resamples``, ``ranks`` …) as
    there.

    Returns
    -------
    pandas.DataFrame
        ``family``, ``cell``, ``baseline_median``, ``median``, ``ratio``, ``ratio_ci_low``,
        ``ratio_ci_high``, ``p_adj``, ``difference`` (``higher``, ``lower``, ``no difference
        detected`` …) and ``sentence`` (non-empty where the share changed detectably), one
        row per family × non-baseline cell with a value on both sides.
    """
    columns = ["baseline_median", "median", "ratio", "ratio_ci_low", "ratio_ci_high"]
    columns += ["p_adj", "difference"]
    rows = []
    for name in sorted(str(v) for v in ds.data_vars):
        match = PERF.match(name)
        if not match or match.group("kind") != "pct_roofline":
            continue
        if not np.isfinite(ds[name].values.astype(float)).any():
            continue
        try:
            df = compare(ds, baseline, metric=name, options=options, **overrides)
        except ValueError:  # e.g. a family the baseline never ran: nothing to compare with
            continue
        family = match.group("family")
        for cell, row in df.iterrows():
            if row["difference"] == "baseline":
                continue
            if not (_finite(row["median"]) and _finite(row["baseline_median"])):
                continue
            rows.append({"family": family, "cell": str(cell), **{c: row[c] for c in columns}})
    out = pd.DataFrame(rows, columns=["family", "cell", *columns])
    out["sentence"] = [change_sentence(r) for _, r in out.iterrows()]
    return out


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def change_sentence(row: Any) -> str:
    """ "SDPA_fwd went from 41% to 28% of roofline under cell x" for a detectable change.

    >>> change_sentence({"family": "SDPA_fwd", "cell": "x", "baseline_median": 41.2, "median": 27.9,
    ...                  "difference": "lower", "ratio_ci_low": 0.6, "ratio_ci_high": 0.75})
    'SDPA_fwd went from 41% to 28% of roofline under cell x (ratio CI 0.60–0.75).'
    >>> change_sentence({"family": "GEMM", "cell": "x", "baseline_median": 40, "median": 41,
    ...                  "difference": "no difference detected"})
    ''
    """
    if row["difference"] not in ("higher", "lower"):
        return ""
    ci = ""
    if _finite(row.get("ratio_ci_low")) and _finite(row.get("ratio_ci_high")):
        ci = f" (ratio CI {float(row['ratio_ci_low']):.2f}–{float(row['ratio_ci_high']):.2f})"
    return (
        f"{row['family']} went from {_pct(row['baseline_median'])} to {_pct(row['median'])} "
        f"of roofline under cell {row['cell']}{ci}."
    )


def _pct(v: Any) -> str:
    v = float(v)
    return f"{v:.0f}%" if abs(v) >= 9.5 else f"{v:.2g}%"


def hardware_frame(cells: Sequence[CellHardware]) -> pd.DataFrame:
    """The rows of ``hardware.csv``: one per cell × family of the representative traces.

    Columns ``cell``, ``trace``, ``device``, ``coverage_pct``, then :func:`by_family`'s
    (``family``, ``ops``, ``calls``, ``kernel_us``, ``percent``, ``tflops``, ``tbps``,
    ``pct_roofline`` when the device is known).
    """
    frames = []
    for c in cells:
        if c.families.empty:
            continue
        frame = c.families.copy()
        frame.insert(0, "coverage_pct", 100 * c.coverage)
        frame.insert(0, "device", c.device)
        frame.insert(0, "trace", c.file)
        frame.insert(0, "cell", c.cell)
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["cell", "trace", "device", "coverage_pct", "family"])
    return pd.concat(frames, ignore_index=True)


def _num(v: Any, fmt: str) -> str:
    return format(float(v), fmt) if _finite(v) else "—"


def hardware_markdown(
    cells: Sequence[CellHardware],
    changes: pd.DataFrame | None,
    *,
    gpu: bool,
    figures: dict[str, str] | None = None,
) -> str:
    """report.md's "Against the hardware" section.

    ``gpu``: whether any trace holds GPU kernels (without, the section says
    :data:`NO_GPU_TEXT`); ``figures``: cell → the roofline figure's file name.

    >>> print(hardware_markdown([], None, gpu=False))  # doctest: +NORMALIZE_WHITESPACE
    ## Against the hardware
    <BLANKLINE>
    The traces hold no GPU kernels (source `host`: a CPU-only run), so no perf model and no
    roofline apply: there is no kernel time to set against the hardware.
    <BLANKLINE>
    """
    lines = ["## Against the hardware", ""]
    if not gpu:
        return "\n".join([*lines, NO_GPU_TEXT, ""])
    said = [s for s in changes["sentence"] if s] if changes is not None else []
    if said:
        lines += [f"- {s}" for s in said] + [""]
    elif changes is not None and len(changes):
        lines += ["No family's share of the roofline changed detectably against the baseline "
                  "(every trial's `pct_roofline_<family>`, compared as step time is).", ""]  # fmt: skip
    lines += [
        "Per cell, one representative trace (the trial with the median busy time): each "
        "perf-model family's kernel time, achieved TFLOP/s and TB/s, and its share of the "
        "roofline of the trace's device (roofline time / kernel time); coverage is the share of "
        "kernel time with a model.",
        "",
    ]
    for c in cells:
        head = f"### {c.cell}"
        if c.problem:
            lines += [head, "", f"`{c.file}` could not be analysed: {c.problem}", ""]
            continue
        device = c.device or "unknown device: no roofline"
        lines += [
            head,
            "",
            f"`{c.file}` — {device}, coverage {_num(100 * c.coverage, '.1f')}% of kernel time",
            "",
            "| family | calls | kernel (ms) | % of kernel | TFLOP/s | TB/s | % of roofline |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for _, r in c.families.iterrows():
            lines.append(
                f"| {r['family']} | {int(r['calls'])} | {_num(r['kernel_us'] / 1e3, '.3f')} "
                f"| {_num(r['percent'], '.1f')} | {_num(r['tflops'], '.3g')} "
                f"| {_num(r['tbps'], '.3g')} | {_num(r.get('pct_roofline'), '.1f')} |"
            )
        lines.append("")
        if figures and c.cell in figures:
            lines += [f"![roofline {c.cell}]({figures[c.cell]})", ""]
    return "\n".join(lines)


def hardware_report(
    ds: xr.Dataset,
    run_dir: str | Path,
    baseline: str | None,
    *,
    put: Callable[[str, bytes | str], None],
    figures: dict[str, Figure],
    options: StatsOptions | None = None,
) -> list[str]:
    """``aorta report --traces``'s part: ``hardware.csv`` (through ``put``), a
    ``roofline_<cell>.png`` per cell (into ``figures``), and report.md's lines (the roofline
    changes with ``options``' statistics)."""
    if not has_traces(ds):  # the traces section already says no trace could be analysed
        return []
    if not has_gpu_traces(ds):
        return [hardware_markdown([], None, gpu=False)]
    cells = load_hardware(ds, run_dir)
    changes = roofline_changes(ds, baseline, options=options)
    put(HARDWARE_CSV, hardware_frame(cells).to_csv(index=False))
    names = {}
    for c in cells:
        if not c.ops.empty:
            names[c.cell] = f"roofline_{c.cell}.png"
            figures[names[c.cell]] = plot.roofline(c.ops, min_share=0.001)
    return [hardware_markdown(cells, changes, gpu=True, figures=names)]
