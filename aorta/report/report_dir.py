"""``aorta report``: the ``report/`` folder of a run directory.

:func:`write_report` writes ``comparison.csv`` / ``comparison.json`` (one row per cell, with
how the statistics were computed), ``trials.csv`` (one row per trial, with its failure kind
and signature), four PNG figures and ``report.md`` that shows them together — its findings
first (:func:`aorta.matrix.findings.findings`: failures and hangs, then timing), then the
cells' table with the failure columns before timing. With ``traces=True`` (``aorta report RUN --traces``)
it also analyses the profiler traces: ``traces.csv`` (per cell: time breakdown and the
exposed-communication verdict), two more figures, a traces section in ``report.md``, an
"Against the hardware" section (:mod:`aorta.report.perf`: ``hardware.csv``, a
``roofline_<cell>.png`` per cell), and
the run's ``matrix.md`` / ``matrix.json`` rewritten with their traces section
(:func:`aorta.report.matrix_files.write_matrix`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import xarray as xr
from matplotlib.figure import Figure

from aorta import plot
from aorta.matrix.dataset import trials_frame
from aorta.matrix.findings import findings
from aorta.matrix.load import load_run
from aorta.matrix.options import StatsOptions, stats_options
from aorta.matrix.rank_causes import with_rank_causes
from aorta.matrix.signatures import signature_counts
from aorta.matrix.stragglers import with_stragglers
from aorta.matrix.trace_summary import has_traces, trace_summary
from aorta.report.comparison import (
    compare_datasets,
    comparison_json,
    comparison_table,
    statistics_line,
)
from aorta.report.explain import explain_changed, time_went_markdown
from aorta.report.findings import findings_markdown
from aorta.report.matrix_files import trace_markdown, write_matrix
from aorta.report.perf import hardware_report
from aorta.store.redact import Redactor
from aorta.store.rundir import MATRIX_JSON, MATRIX_MD, atomic_write

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from aorta.matrix.options import StatsKeywords

__all__ = ["REPORT_DIR", "write_report"]

#: Folder of the run directory that ``aorta report`` writes.
REPORT_DIR = "report"


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    with plot.aorta_style():
        fig.savefig(buf, format="png")
    return buf.getvalue()


def write_report(
    run: str | Path,
    *,
    baseline: str | None = None,
    metric: str | None = None,
    options: StatsOptions | None = None,
    traces: bool = False,
    **overrides: Unpack[StatsKeywords],
) -> list[Path]:
    """Write ``report/`` (tables, figures, ``report.md``) into the run directory ``run``.

    ``metric``: default the matrix's (:func:`aorta.matrix.select.default_metric`: a probe
    without steps is compared on its wall clock). With ``traces`` the trace metrics are loaded
    too (:func:`aorta.load_run`), ``metric`` may be one of them, and the report gains ``traces.csv``, ``time_breakdown.png``,
    ``exposed_comm_vs_step.png`` and a traces section, and a "Where the time went" section
    (:func:`aorta.explain`, a ``waterfall_<cell>.png`` each) for every cell whose verdict is
    ``slower`` or ``faster``; the run's ``matrix.md`` and
    ``matrix.json`` are rewritten with theirs. ``options`` (and the keywords overriding its
    fields): the statistics of every part, :class:`~aorta.matrix.options.StatsOptions`.

    Returns the files written. Raises as :func:`~aorta.report.comparison.compare_paths` does
    for one run.
    """
    opts = stats_options(options, **overrides)
    ds = load_run(run, traces=traces)
    df = compare_datasets([ds], baseline=baseline, metric=metric, options=opts)
    metric = str(df.attrs.get("metric") or metric or "step_time_ms")  # the one compared on
    df.attrs["runs"] = [str(run)]
    root = Path(run)
    run_dir = root.parent if root.is_file() else root
    out = run_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    redactor = Redactor.of_run(run_dir)  # what leaves the run is redacted with its knowledge

    def put(name: str, data: bytes | str) -> None:
        if name.endswith(".json") and isinstance(data, str):
            data = json.dumps(redactor.data(json.loads(data)), indent=1, ensure_ascii=False) + "\n"
        elif isinstance(data, str):
            data = redactor.markdown(data) if name.endswith(".md") else redactor.text(data)
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
        statistics_line(df.attrs),
        "",
        findings_markdown(
            findings(
                with_stragglers(with_rank_causes(df, ds), ds, threshold=opts.threshold),
                signature_counts(ds),
            ),
            run=run_dir,
            alpha=df.attrs.get("alpha"),
            summary=df,
        ),
        "## Cells",
        "",
        comparison_table(df, style="markdown"),
        "",
        *(f"![{name[:-4]}]({name})\n" for name in figures),
    ]
    if traces:
        lines += _trace_report(ds, baseline, put=put, figures=figures, options=opts)
        lines += hardware_report(ds, run_dir, baseline, put=put, figures=figures, options=opts)
        if has_traces(ds):
            explained = explain_changed(ds, df, options=opts)
            figures.update({f"waterfall_{c}.png": plot.waterfall(d) for c, d in explained.items()})
            lines.append(time_went_markdown(explained))
    for name, fig in figures.items():
        put(name, _png(fig))
    put("report.md", "\n".join(lines))
    if traces and has_traces(ds):
        write_matrix(run_dir, ds, options=opts)
        written += [run_dir / MATRIX_MD, run_dir / MATRIX_JSON]
    return written


def _trace_report(
    ds: xr.Dataset,
    baseline: str | None,
    *,
    put: Callable[[str, bytes | str], None],
    figures: dict[str, Figure],
    options: StatsOptions,
) -> list[str]:
    """``traces.csv``, the two trace figures, and the lines of report.md's traces section."""
    if not has_traces(ds):
        return ["## Traces", "", "No trace could be analysed (see the warnings).", ""]
    summary = trace_summary(ds, baseline, options=options)
    put("traces.csv", summary.to_csv())
    new = {
        "time_breakdown.png": plot.time_breakdown(ds),
        "exposed_comm_vs_step.png": plot.exposed_comm_vs_step(ds, ranks=options.ranks),
    }
    figures.update(new)
    return [trace_markdown(summary), *(f"![{name[:-4]}]({name})\n" for name in new)]
