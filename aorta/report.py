"""Comparisons and reports from run directories: the file-reading edge of the statistics.

:func:`compare_paths` is ``aorta compare``; :func:`write_report` is ``aorta report``: it writes
``report/`` into the run directory — ``comparison.csv`` / ``comparison.json`` (one row per
cell, with how the statistics were computed), ``trials.csv`` (one row per trial), four PNG
figures and ``report.md`` that shows them together.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aorta import stats
from aorta.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["REPORT_DIR", "compare_paths", "write_report"]

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
) -> pd.DataFrame:
    """One run's cells against its baseline, or two runs' shared cells (B against A).

    Raises
    ------
    UsageError
        Not one or two runs; ``baseline`` with two runs; a path that is not a run; an
        unknown baseline cell or metric; ``alpha`` outside (0, 1).
    IncompleteMatrix
        The baseline has no usable trial, or two runs share no cell.
    """
    from aorta.comparison import compare, compare_runs, require_baseline
    from aorta.dataset import load_run

    if len(runs) not in (1, 2):
        raise UsageError(f"give one run (cells vs its baseline) or two (A B), got {len(runs)}")
    if len(runs) == 2 and baseline is not None:
        raise UsageError(
            "--baseline applies to one run; with two runs each cell of B is compared with the same cell of A"
        )
    datasets = [load_run(p) for p in runs]
    kw: dict[str, Any] = {"metric": metric, "alpha": alpha, "seed": seed, "resamples": resamples}
    try:
        if len(datasets) == 1:
            df = compare(datasets[0], baseline, **kw)
            require_baseline(df)
        else:
            df = compare_runs(datasets[0], datasets[1], **kw)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    df.attrs["runs"] = [str(p) for p in runs]
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
) -> list[Path]:
    """Write ``report/`` (tables, figures, ``report.md``) into the run directory ``run``.

    Returns the files written. Raises as :func:`compare_paths` does for one run.
    """
    from aorta import plot
    from aorta.comparison import comparison_json, comparison_table
    from aorta.dataset import load_run, trials_frame
    from aorta.matrix import statistics_line
    from aorta.rundir import atomic_write

    df = compare_paths(
        [run], baseline=baseline, metric=metric, alpha=alpha, seed=seed, resamples=resamples
    )
    ds = load_run(run)
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
    for name, fig in figures.items():
        put(name, _png(fig))
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
    put("report.md", "\n".join(lines))
    return written
