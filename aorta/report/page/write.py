"""``report.html``: one self-contained page to read a run (:func:`html`), and a page comparing
two runs (:func:`compare_html`).

This module is the file edge of the HTML report: it loads the run, computes the matrix
(:func:`aorta.matrix.summary.summarize`) and the trace summary, reads what the page shows from
the run directory (recipe, host snapshots, ``launch.json``'s cross-node differences, trial
records, the tail of failed trials' logs), and writes the page atomically. The sections are
pure functions in :mod:`aorta.report.page.sections` and :mod:`aorta.report.page.details`
(a run) and
:mod:`aorta.report.page.two_runs` (two runs); the markup in :mod:`aorta.report.page.kit`.

The page holds everything: figures inline as SVG (or PNG data), stylesheet and a small script
that sorts and filters tables (the page reads the same without it); no URL to anything outside
the file. Links to trial records and logs are relative to the page, so a run directory can be
moved or bundled with its report.
"""

from __future__ import annotations

import collections
import datetime as _dt
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import xarray as xr

from aorta import __version__
from aorta.errors import UsageError
from aorta.hang.model import HangReport
from aorta.matrix.compare import compare
from aorta.matrix.load import load_run
from aorta.matrix.options import StatsOptions, stats_options
from aorta.matrix.summary import MATRIX_COLUMNS, summarize
from aorta.matrix.trace_summary import has_traces, trace_summary
from aorta.plot.waterfall import waterfall as plot_waterfall
from aorta.report.comparison import compare_datasets
from aorta.report.explain import explain_changed
from aorta.report.page.details import (
    time_went_section,
    traces_section,
    trials_section,
)
from aorta.report.page.failures import failures_section
from aorta.report.page.findings import findings_section
from aorta.report.page.hardware import hardware_section
from aorta.report.page.kit import FigureFormat, esc, page
from aorta.report.page.sections import (
    LogExcerpt,
    RunFiles,
    RunPage,
    SectionBuilder,
    figures_section,
    is_failed_status,
    matrix_section,
    parse_signature_line,
    run_section,
)
from aorta.report.page.two_runs import RunSide, render_compare_page
from aorta.store.record import RECORD_SCHEMA_VERSION, readable_forensics
from aorta.store.redact import redact_page
from aorta.store.rundir import REPORT_HTML, RunDir, atomic_write

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from typing_extensions import Unpack

    from aorta.matrix.options import StatsKeywords

__all__ = [
    "RUN_SECTIONS",
    "compare_html",
    "html",
    "read_run_files",
    "render_run_page",
]

#: The sections of a run's page, in order (a builder returns ``None`` to leave its out): what
#: an on-call engineer reads first (findings, the matrix, the failures) comes first.
RUN_SECTIONS: tuple[SectionBuilder, ...] = (
    findings_section,
    matrix_section,
    failures_section,
    figures_section,
    traces_section,
    hardware_section,
    time_went_section,
    run_section,
    trials_section,
)
_TAIL_BYTES = 8192
_TAIL_LINES = 8
_GROUPS_READ = 8  # failures per cell (status and signature) whose files are read
_CONTEXT_BEFORE = 4  # lines shown before a signature's matching line
_CONTEXT_AFTER = 3  # and after it
_LINE_CHARS = 400  # a longer line is cut
_SCAN_BYTES = 64 << 20  # how far into a log the matched line is looked for
_TEXT_SUFFIXES = (".log", ".txt", ".out", ".err")


def html(
    source: xr.Dataset | str | Path,
    *,
    run_dir: str | Path | None = None,
    output: str | Path | None = None,
    baseline: str | None = None,
    metric: str | None = None,
    options: StatsOptions | None = None,
    traces: bool = False,
    summary: pd.DataFrame | None = None,
    figure_format: FigureFormat = "svg",
    sections: Sequence[SectionBuilder] | None = None,
    waterfalls: Mapping[str, Figure] | None = None,
    **overrides: Unpack[StatsKeywords],
) -> Path:
    """Write a run's ``report.html``: one self-contained page to read the run.

    Sections, in the order an on-call engineer reads them (each only when its data exists):
    the findings (hangs and failure changes first, then timing); the matrix (every cell:
    its trials' outcomes, failure rate, top failure, step time, ratio [CI], verdict —
    colour-coded, sortable, fits a 1280 px window; mitigations, counts per status, mean step,
    p_adj and confound behind a checkbox); the failures (every cell with a failed, hung or
    errored trial: signature, hint, the matched log line with its neighbours, then the other
    files); the figures (forest plot, failure rates, per-trial distributions, step series);
    traces (when the Dataset has trace metrics); "where the time went" (``waterfalls``); the
    run (recipe, ticket, hosts and their environment, differences between nodes, run order);
    every trial with its failure kind, signature, error and relative links to its files.

    Parameters
    ----------
    source
        A run directory (or its ``results.nc``), or a run's Dataset (:func:`aorta.load_run`).
    run_dir
        With a Dataset: its run directory, for the recipe, hosts, records and links (without
        one the page has none of them).
    output
        The file to write (default: ``<run_dir>/report/report.html``).
    baseline
        The reference cell (default: the recipe's).
    metric
        The trial value compared (default: the matrix's — ``step_time_ms``, or ``wall_clock_s``
        when the baseline has no step times).
    options, **overrides
        The statistics (:class:`~aorta.matrix.options.StatsOptions`; a keyword such as
        ``alpha=``, ``resamples=`` or ``ranks=`` overrides its field), as in
        :func:`aorta.compare`; ``ranks`` also reduces the trace metrics over a trial's ranks.
    traces
        Analyse the profiler traces when loading ``source`` from disk (a Dataset shows its
        trace metrics whenever it has them).
    summary
        The matrix when already computed (:func:`aorta.matrix.summary.summarize` of the same
        Dataset), to skip recomputing its statistics.
    figure_format
        ``svg`` (default: sharp, searchable text) or ``png`` (data URIs).
    sections
        The section builders, in order (default:
        :data:`RUN_SECTIONS`); a builder returns ``None`` to leave
        its section out.
    waterfalls
        Cell → its "where the time went" figure (default: with trace metrics, the
        :func:`aorta.plot.waterfall` of :func:`aorta.explain` for every cell whose verdict is
        ``slower`` or ``faster``; ``{}`` for none).

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    UsageError
        ``source`` or ``run_dir`` is not a run; a Dataset with neither ``run_dir`` nor
        ``output``; an unknown baseline cell or metric, ``alpha`` outside (0, 1).

    See Also
    --------
    compare_html : the page comparing two runs.
    aorta.report.report_dir.write_report : the CSV, PNG and Markdown report.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> ds = build_dataset([{"name": c, "trials": 3} for c in ("base", "x")],
    ...     [TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True,
    ...                  step_times_ms=[5.0, 1.0 + t / 10 + (c == "x")])
    ...      for c in ("base", "x") for t in range(3)], attrs={"baseline": "base", "threshold": 1.15})
    >>> path = html(ds, output=Path(tempfile.mkdtemp()) / "page.html", resamples=200)
    >>> text = path.read_text()
    >>> text.startswith("<!DOCTYPE html>"), text.count("<figure"), "http" in text
    (True, 4, False)
    """
    ds, rd = _open_source(source, run_dir=run_dir, output=output, traces=traces)
    opts = stats_options(options, **overrides)
    summary, tsum = _statistics(ds, summary, baseline=baseline, metric=metric, opts=opts)
    out = Path(output) if output is not None else rd.report_dir / REPORT_HTML  # type: ignore[union-attr]
    run_page = RunPage(
        ds=ds,
        summary=summary,
        traces=tsum,
        files=read_run_files(rd, ds) if rd is not None else None,
        link_prefix=_link_prefix(rd, out),
        fmt=figure_format,
        ranks=opts.ranks,
        waterfalls=dict(waterfalls if waterfalls is not None else _waterfalls(ds, summary, opts)),
    )
    text = render_run_page(run_page, sections=RUN_SECTIONS if sections is None else sections)
    _write_page(out, text, rd)
    return out


def _open_source(
    source: xr.Dataset | str | Path,
    *,
    run_dir: str | Path | None,
    output: str | Path | None,
    traces: bool,
) -> tuple[xr.Dataset, RunDir | None]:
    """The run's Dataset and its directory (``None``: a Dataset given without one)."""
    root: Path | None
    if isinstance(source, xr.Dataset):
        ds = source
        root = Path(run_dir) if run_dir is not None else None
    else:
        path = Path(source)
        root = path.parent if path.is_file() else path
        ds = load_run(path, traces=traces)
    if root is None and output is None:
        raise UsageError("a Dataset without its run directory needs output= (where to write)")
    return ds, RunDir.open(root) if root is not None else None


def _statistics(
    ds: xr.Dataset,
    summary: pd.DataFrame | None,
    *,
    baseline: str | None,
    metric: str | None,
    opts: StatsOptions,
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The matrix (``summary`` when given) and trace summary; a bad request as UsageError."""
    try:
        if summary is None:
            summary = _matrix(ds, baseline, metric, opts)
        tsum = trace_summary(ds, baseline, options=opts) if has_traces(ds) else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return summary, tsum


def _link_prefix(rd: RunDir | None, out: Path) -> str | None:
    """The relative path from the page's folder to the run directory, for the page's links."""
    if rd is None:
        return None
    return Path(os.path.relpath(rd.path.resolve(), out.parent.resolve())).as_posix()


def _write_page(out: Path, text: str, rd: RunDir | None) -> None:
    """Write the page to ``out`` atomically, with the run's secrets redacted."""
    text = redact_page(text, *([rd] if rd is not None else []))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, text)


def _waterfalls(ds: xr.Dataset, summary: pd.DataFrame, opts: StatsOptions) -> dict[str, Figure]:
    """Per cell whose verdict is slower or faster, its :func:`aorta.explain` waterfall (a
    Dataset with trace metrics from ``load_run(run, traces=True)`` only)."""
    if not has_traces(ds):
        return {}
    return {
        cell: plot_waterfall(d) for cell, d in explain_changed(ds, summary, options=opts).items()
    }


def _matrix(
    ds: xr.Dataset, baseline: str | None, metric: str | None, opts: StatsOptions
) -> pd.DataFrame:
    """The matrix of ``ds``; with ``metric`` its statistics are those of that metric."""
    df = summarize(ds, baseline, options=opts)
    if metric is None or metric == df.attrs.get("metric"):
        return df
    other = compare(ds, baseline, metric=metric, options=opts)
    for column in MATRIX_COLUMNS:
        other[column] = df[column]
    return other


def render_run_page(
    page_data: RunPage, *, sections: Sequence[SectionBuilder] = RUN_SECTIONS
) -> str:
    """The HTML text of a run's page (no file is read or written)."""
    a = page_data.ds.attrs
    built = [s for s in (build(page_data) for build in sections) if s is not None]
    title = f"{a.get('ticket') or '(no ticket)'} — {a.get('workload') or 'run'}"
    n_cells = page_data.ds.sizes["cell"]
    run_name = page_data.files.path.name if page_data.files else "(in-memory Dataset)"
    subtitle = f"run {run_name} · {a.get('status') or 'status unknown'} · {n_cells} cells"
    banners = []
    status = a.get("status")
    if status and status != "complete":
        banners.append(
            f'<div class="banner">This run is <b>{esc(status)}</b>: cells or trials may be '
            "missing, and the numbers can change when it is resumed.</div>"
        )
    return page(
        title=title,
        subtitle=subtitle,
        sections=built,
        banners=banners,
        footer=_footer(),
    )


def _footer() -> str:
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"Written by aorta {esc(__version__)} on {now}. One file: no network access needed."


# --- the run directory -----------------------------------------------------------------------


def read_run_files(rd: RunDir, ds: xr.Dataset) -> RunFiles:
    """What a page shows from the run directory: recipe, host snapshots, ``launch.json``'s
    cross-node differences, the trial records of ``ds``'s trials, and excerpts of failed
    trials' files: for the first trial of each failure (status and signature) in a cell, the
    line its signature matched with the lines around it, then the end of its other logs and
    collected files. A file that is missing or unreadable is left out."""
    recipe = _read_text(rd.recipe_path)
    hosts: dict[str, Mapping[str, Any]] = {}
    for path in [rd.host_env_path, *sorted(rd.host_env_of("_").parent.glob("*.json"))]:
        snap = _read_json(path)
        if isinstance(snap, dict):
            name = str(snap.get("host") or path.stem)
            hosts.setdefault(name if name not in hosts else f"{name} ({path.stem})", snap)
    launch = _read_json(rd.launch_json)
    skew = launch.get("skew") if isinstance(launch, dict) else None
    records: dict[tuple[str, int], Mapping[str, Any]] = {}
    excerpts: dict[tuple[str, int], list[LogExcerpt]] = {}
    reports: dict[tuple[str, int], HangReport] = {}
    status = ds.status.transpose("cell", "trial").values.astype(str)
    trials = [int(t) for t in ds.trial.values.tolist()]
    for i, cell in enumerate(str(c) for c in ds.cell.values.tolist()):
        seen: set[tuple[str, str]] = set()
        for j, t in enumerate(trials):
            if status[i, j] == "missing":
                continue
            rec = _read_json(rd.trial_path(cell, t))
            if not isinstance(rec, dict):
                continue
            # The forensics through their model, or not at all: forensics no reader can take
            # are left out (load_run warned of them already).
            report, _ = readable_forensics(rec.pop("forensics", None))
            if report is not None:
                version = rec.get("schema_version")
                version = version if isinstance(version, int) else RECORD_SCHEMA_VERSION
                report = rd.forensics_of_version(version, cell, t, report)
            records[(cell, t)] = rec
            key = (status[i, j], str(rec.get("signature") or rec.get("error") or ""))
            if is_failed_status(status[i, j]) and key not in seen and len(seen) < _GROUPS_READ:
                seen.add(key)
                excerpts[(cell, t)] = _excerpts(rd, rec)
                if report is not None:
                    reports[(cell, t)] = report
    return RunFiles(
        path=rd.path,
        recipe=recipe,
        hosts=hosts,
        skew=skew if isinstance(skew, dict) else {},
        records=records,
        excerpts=excerpts,
        forensics=reports,
    )


def _excerpts(rd: RunDir, rec: Mapping[str, Any]) -> list[LogExcerpt]:
    """The trial's matched line with its neighbours first, then the end of each other text
    file among its artifacts (logs and collected files; traces and binaries left out). Only
    files inside the run directory: a record (from someone else's run) can name any path."""
    where = parse_signature_line(rec.get("signature_line"))
    root = rd.path.resolve()
    artifacts = []
    for name, rel in sorted((str(k), str(v)) for k, v in (rec.get("artifacts") or {}).items()):
        path = (rd.path / rel).resolve()
        if path.is_relative_to(root):
            artifacts.append((name, rel, path))
    out: list[LogExcerpt] = []
    matched = None
    if where is not None and where[0]:
        fname, _, text = where
        for name, rel, path in artifacts:
            if Path(rel).name == fname:
                got = _around(path, text)
                if got is not None:
                    first, lines, at = got
                    out.append(LogExcerpt(name, rel, tuple(lines), first=first, match=at))
                    matched = rel
                    break
    for name, rel, path in artifacts:
        if rel == matched or not _is_text_name(rel):
            continue
        lines = _tail(path)
        if lines:
            out.append(LogExcerpt(name, rel, tuple(lines)))
    return out


def _is_text_name(rel: str) -> bool:
    name = rel.lower()
    return name.endswith(_TEXT_SUFFIXES) and not name.endswith(".json.gz")


def _tail(path: Path) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _TAIL_BYTES))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    lines = [_cap(line.rstrip()) for line in text.splitlines() if line.strip()]
    return lines[-_TAIL_LINES:]


def _cap(line: str) -> str:
    return line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 1] + "…"


def _around(path: Path, text: str) -> tuple[int, list[str], int] | None:
    """(first line number, the lines, the matched line's number): the first line of
    ``path`` that holds ``text`` (a signature matches its first occurrence, so this is the
    line it matched, also past the middle a scan of a huge log skips), with
    :data:`_CONTEXT_BEFORE` lines before and :data:`_CONTEXT_AFTER` after. Reads at most
    :data:`_SCAN_BYTES`, one line at a time (a line over :data:`_LINE_CHARS` is cut)."""
    want = text.removesuffix("…").strip()[: _LINE_CHARS // 2]
    before: collections.deque[str] = collections.deque(maxlen=_CONTEXT_BEFORE)
    found: tuple[int, list[str], int] | None = None
    after: list[str] = []
    read = 0
    try:
        with open(path, "rb") as fh:
            for n, raw in enumerate(_lines(fh), start=1):
                read += len(raw) + 1
                line = _cap(raw.decode("utf-8", "replace").rstrip())
                if found is not None:
                    after.append(line)
                    if len(after) >= _CONTEXT_AFTER:
                        break
                elif want and want in line:
                    found = (n - len(before), [*before, line], n)
                elif read > _SCAN_BYTES:
                    break
                before.append(line)
    except OSError:
        return None
    if found is None:
        return None
    return found[0], [*found[1], *after], found[2]


def _lines(fh: Any) -> Any:
    """The lines of a binary file, each cut at :data:`_LINE_CHARS` bytes (memory stays
    bounded whatever a line's length)."""
    while True:
        raw = fh.readline(_LINE_CHARS * 4)
        if not raw:
            return
        if not raw.endswith(b"\n"):
            rest = raw
            while rest and not rest.endswith(b"\n"):
                rest = fh.readline(1 << 16)
        yield raw.rstrip(b"\r\n")


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


# --- two runs --------------------------------------------------------------------------------


def compare_html(
    run_a: str | Path,
    run_b: str | Path,
    *,
    output: str | Path | None = None,
    metric: str | None = None,
    options: StatsOptions | None = None,
    traces: bool = False,
    figure_format: FigureFormat = "svg",
    **overrides: Unpack[StatsKeywords],
) -> Path:
    """Write a page comparing run B with run A, cell by cell (:func:`aorta.compare_runs`).

    The page shows both runs side by side (when, where, hosts and their differences), every
    shared cell with A's and B's trials, failures and medians, B's ratio to A with its CI,
    p_adj and verdict (colour-coded, sortable), and the forest plot.

    Parameters
    ----------
    run_a, run_b
        The reference run and the run compared with it.
    output
        The file to write (default: ``<run_b>/report/compare_<run A's folder name>.html``).
    metric
        What the runs are compared on; default the matrix's
        (:func:`aorta.matrix.select.default_metric` of run A: a probe without step times is
        compared on its wall clock, as its matrix.md is).
    options, traces, figure_format, **overrides
        As in :func:`html` and :func:`aorta.compare_runs`.

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    UsageError
        A path that is not a run; an unknown metric; ``alpha`` outside (0, 1).
    IncompleteMatrix
        The runs share no cell.
    """
    rds = [RunDir.open(p) for p in (run_a, run_b)]
    datasets = [load_run(rd.path, traces=traces) for rd in rds]
    df = compare_datasets(datasets, metric=metric, options=stats_options(options, **overrides))
    out = (
        Path(output)
        if output is not None
        else rds[1].report_dir / f"compare_{rds[0].path.name}.html"
    )
    sides = []
    for label, rd, ds in zip(("A", "B"), rds, datasets, strict=True):
        prefix = Path(os.path.relpath(rd.path.resolve(), out.parent.resolve())).as_posix()
        hosts = read_run_files(rd, ds.isel(cell=slice(0, 0))).hosts
        sides.append(RunSide(label=label, ds=ds, path=rd.path, link_prefix=prefix, hosts=hosts))
    text = render_compare_page(sides[0], sides[1], df, fmt=figure_format, footer=_footer())
    text = redact_page(text, *rds)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, text)
    return out
