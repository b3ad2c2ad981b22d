"""Comparisons and reports from run directories: the file-reading edge of the statistics.

:func:`compare_paths` is ``aorta compare``; :func:`write_report` is ``aorta report``: it writes
``report/`` into the run directory — ``comparison.csv`` / ``comparison.json`` (one row per
cell, with how the statistics were computed), ``trials.csv`` (one row per trial), four PNG
figures and ``report.md`` that shows them together. With ``traces=True`` (``aorta report RUN
--traces``) it also analyses the profiler traces: ``traces.csv`` (per cell: time breakdown and
the exposed-communication verdict), two more figures, a traces section in ``report.md``, and
the same section in the run's ``matrix.md`` / ``matrix.json`` (:func:`write_trace_matrix`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aorta.errors import UsageError
from aorta.matrix import stats

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

    from aorta.matrix.compare import RankReduction

__all__ = ["REPORT_DIR", "compare_paths", "write_report", "write_trace_matrix"]

#: Folder of the run directory that ``aorta report`` writes.
REPORT_DIR = "report"


def compare_paths(
    runs: Sequence[str | Path],
    *,
    baseline: str | None = None,
    metric: str = "step_time_ms",
    alpha: float = 0.05,
    seed: int = stats.DEFAULT_SEED,
    resamples: int = stats.DEFAULT_RESAMPLES,
    traces: bool = False,
    ranks: RankReduction = "worst",
) -> pd.DataFrame:
    """One run's cells against its baseline, or two runs' shared cells (B against A).

    ``traces`` loads the runs' trace metrics (:func:`aorta.load_run`), so ``metric`` can be
    one of them, reduced over ranks by ``ranks``.

    Raises
    ------
    UsageError
        Not one or two runs; ``baseline`` with two runs; a path that is not a run; an
        unknown baseline cell, metric or rank; ``alpha`` outside (0, 1).
    IncompleteMatrix
        The baseline has no usable trial, or two runs share no cell.
    """
    from aorta.matrix.dataset import load_run

    if len(runs) not in (1, 2):
        raise UsageError(f"give one run (cells vs its baseline) or two (A B), got {len(runs)}")
    if len(runs) == 2 and baseline is not None:
        raise UsageError(
            "--baseline applies to one run; with two runs each cell of B is compared with the same cell of A"
        )
    datasets = [load_run(p, traces=traces) for p in runs]
    df = _compare(
        datasets,
        baseline=baseline,
        metric=metric,
        alpha=alpha,
        seed=seed,
        resamples=resamples,
        ranks=ranks,
    )
    df.attrs["runs"] = [str(p) for p in runs]
    return df


def _compare(datasets: Sequence[xr.Dataset], *, baseline: str | None, **kw: Any) -> pd.DataFrame:
    from aorta.matrix.compare import compare, compare_runs, require_baseline

    try:
        if len(datasets) == 1:
            df = compare(datasets[0], baseline, **kw)
            require_baseline(df)
        else:
            df = compare_runs(datasets[0], datasets[1], **kw)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return df


def _png(fig: Any) -> bytes:
    from aorta.plot.style import aorta_style

    buf = io.BytesIO()
    with aorta_style():
        fig.savefig(buf, format="png")
    return buf.getvalue()


def write_report(
    run: str | Path,
    *,
    baseline: str | None = None,
    metric: str = "step_time_ms",
    alpha: float = 0.05,
    seed: int = stats.DEFAULT_SEED,
    resamples: int = stats.DEFAULT_RESAMPLES,
    traces: bool = False,
    ranks: RankReduction = "worst",
) -> list[Path]:
    """Write ``report/`` (tables, figures, ``report.md``) into the run directory ``run``.

    With ``traces`` the trace metrics are loaded too (:func:`aorta.load_run`), ``metric`` may
    be one of them, and the report gains ``traces.csv``, ``time_breakdown.png``,
    ``exposed_comm_vs_step.png`` and a traces section — which :func:`write_trace_matrix` also
    adds to the run's ``matrix.md`` and ``matrix.json``.

    Returns the files written. Raises as :func:`compare_paths` does for one run.
    """
    from aorta import plot
    from aorta.matrix.compare import comparison_json, comparison_table
    from aorta.matrix.dataset import load_run, trials_frame
    from aorta.report.matrix import statistics_line
    from aorta.store.rundir import atomic_write

    ds = load_run(run, traces=traces)
    kw: dict[str, Any] = {"alpha": alpha, "seed": seed, "resamples": resamples, "ranks": ranks}
    df = _compare([ds], baseline=baseline, metric=metric, **kw)
    df.attrs["runs"] = [str(run)]
    root = Path(run)
    out = (root.parent if root.is_file() else root) / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def put(name: str, data: bytes | str) -> None:
        atomic_write(out / name, data)
        written.append(out / name)

    put("comparison.csv", df.to_csv())
    put("comparison.json", json.dumps(comparison_json(df), indent=1, ensure_ascii=False) + "\n")
    put("trials.csv", trials_frame(ds).to_csv(index=False))
    figures = {
        "step_distributions.png": plot.step_distributions(ds, baseline, metric=metric),
        "failure_rates.png": plot.failure_rates(df),
        "ratio_forest.png": plot.ratio_forest(df),
        "step_series.png": plot.step_series(ds),
    }
    title = ds.attrs.get("ticket") or "(no ticket)"
    lines = [
        f"# {title} — {ds.attrs.get('workload', '')}: report",
        "",
        f"- baseline: `{df.attrs['baseline']}`",
        statistics_line(comparison_json(df)["statistics"]),
        "",
        comparison_table(df, style="markdown"),
        "",
        *(f"![{name[:-4]}]({name})\n" for name in figures),
    ]
    if traces:
        lines += _trace_report(ds, baseline, put=put, figures=figures, **kw)
    for name, fig in figures.items():
        put(name, _png(fig))
    put("report.md", "\n".join(lines))
    if traces:
        written += write_trace_matrix(ds, root.parent if root.is_file() else root, baseline, **kw)
    return written


def _trace_report(
    ds: xr.Dataset, baseline: str | None, *, put: Any, figures: dict[str, Any], **kw: Any
) -> list[str]:
    """``traces.csv``, the two trace figures, and the lines of report.md's traces section."""
    from aorta import plot
    from aorta.matrix.trace_summary import has_traces, trace_markdown, trace_summary

    if not has_traces(ds):
        return ["## Traces", "", "No trace could be analysed (see the warnings).", ""]
    summary = trace_summary(ds, baseline, **kw)
    put("traces.csv", summary.to_csv())
    new = {
        "time_breakdown.png": plot.time_breakdown(ds),
        "exposed_comm_vs_step.png": plot.exposed_comm_vs_step(ds, ranks=kw["ranks"]),
    }
    figures.update(new)
    section = trace_markdown(summary).split("\n", 1)[1]  # without the matrix.md marker
    return [section, *(f"![{name[:-4]}]({name})\n" for name in new)]


def write_trace_matrix(
    ds: xr.Dataset, run_dir: str | Path, baseline: str | None = None, **kw: Any
) -> list[Path]:
    """Add (or replace) the traces section of the run's ``matrix.md`` and the ``traces`` entry
    of its ``matrix.json`` (see :mod:`aorta.matrix.trace_summary`); ``kw`` go to
    :func:`~aorta.matrix.trace_summary.trace_summary`. Files the run does not have are left alone;
    returns the files written. The engine rewrites both without the section after each cell.
    """
    from aorta.matrix.trace_summary import (
        SECTION_MARKER,
        has_traces,
        trace_json,
        trace_markdown,
        trace_summary,
    )
    from aorta.store.rundir import atomic_write

    if not has_traces(ds):
        return []
    summary = trace_summary(ds, baseline, **kw)
    root, written = Path(run_dir), []
    md, js = root / "matrix.md", root / "matrix.json"
    if md.is_file():
        text = md.read_text().split(SECTION_MARKER, 1)[0].rstrip("\n")
        atomic_write(md, f"{text}\n\n{trace_markdown(summary)}")
        written.append(md)
    if js.is_file():
        try:
            data = json.loads(js.read_text())
        except ValueError:
            data = None
        if isinstance(data, dict):
            data["traces"] = trace_json(summary)
            atomic_write(js, json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n")
            written.append(js)
    return written
