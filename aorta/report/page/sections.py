"""The sections of a run's ``report.html``: pure functions of a :class:`RunPage`.

Each builder takes the page's data and returns a :class:`~aorta.report.page.kit.Section`, or
``None`` when its data does not exist (no trace metrics, no failed trial, ...), so a section
appears exactly when there is something to show.
:data:`aorta.report.page.write.RUN_SECTIONS` is the default order (with the sections of
:mod:`aorta.report.page.findings`, :mod:`aorta.report.page.failures` and
:mod:`aorta.report.page.details`); :func:`aorta.report.html` takes another sequence
(``sections=``), which is how a new section is added without touching this module.

What the sections read beyond the Dataset and the matrix frame:

* failure signatures: the Dataset's ``signature`` variable and ``signature_hints`` attribute,
  and a trial record's ``signature``, ``signature_hint`` and ``signature_line``
  (:func:`parse_signature_line`), whose line :class:`RunFiles` holds with its neighbours
  (:class:`LogExcerpt`);
* "where the time went": :attr:`RunPage.waterfalls` maps a cell to its waterfall figure;
  :func:`time_went_section` shows them when there are any;
* run order and drift: the Dataset's ``run_order`` and ``schedule``, and a comparison's
  ``drift`` / ``warnings`` attrs, are shown in the run section when present.

Every text a section embeds goes through :func:`~aorta.report.page.kit.esc` (or
:class:`~aorta.report.page.kit.Cell`, which calls it).
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np

from aorta import plot
from aorta.hang.model import HangReport
from aorta.matrix.select import DEFAULT_THRESHOLD, trial_values
from aorta.matrix.signatures import signature_counts, top_signatures
from aorta.report.comparison import (
    is_missing,
    level_text,
    ms_text,
    p_text,
    percent_text,
    ratio_text,
    statistics_line,
    verdict_text,
)
from aorta.report.page.kit import (
    Cell,
    FigureFormat,
    Section,
    breakable,
    definition_rows,
    esc,
    figure_block,
    rgba,
    table,
)
from aorta.store.rundir import RunDir

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr
    from matplotlib.figure import Figure

__all__ = [
    "STATUS_LABELS",
    "LogExcerpt",
    "RunFiles",
    "RunPage",
    "SectionBuilder",
    "cell_anchor",
    "figures_section",
    "host_facts",
    "hosts_table",
    "is_failed_status",
    "matrix_section",
    "number_or_none",
    "parse_signature_line",
    "run_section",
    "statuses",
    "verdict_chip",
]

#: How each trial status is named in the page's columns, in order (others follow as named).
STATUS_LABELS: dict[str, str] = {
    "ok": "ok",
    "workload_failed": "failed",
    "setup_failed": "setup failed",
    "infrastructure_failed": "infra failed",
    "timeout": "timeout",
    "did_not_run": "did not run",
    "missing": "no record",
}
_STEP_SERIES_MAX_TRIALS = 200  # above this a line per trial is a grey blur: left out
#: Above this many cells the forest plot and failure rates are drawn in the matrix's rows
#: (its "ratio" column) instead of as figures: a 100-row matplotlib figure is slow to render
#: and hard to read against its table.
_FIGURE_MAX_CELLS = 40


@dataclass(frozen=True)
class RunFiles:
    """What a page shows from the run directory beyond the Dataset (read by
    :mod:`aorta.report.page.write`; every field may be empty)."""

    #: The run directory.
    path: Path
    #: ``recipe.resolved.yaml`` as text.
    recipe: str | None = None
    #: Host name → its ``host_env.json`` snapshot (the run's first, then ``host_env/*.json``).
    hosts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: ``launch.json``'s cross-node differences: ``{key: {node: value}}``.
    skew: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: ``(cell, trial)`` → the trial record as JSON data (fields a newer aorta adds included),
    #: without its ``forensics`` (read through the model: ``forensics`` below).
    records: Mapping[tuple[str, int], Mapping[str, Any]] = field(default_factory=dict)
    #: ``(cell, trial)`` → excerpts of its files (the first trial of each failure of a cell):
    #: the signature's matching line with its neighbours first, then the ends of other files.
    excerpts: Mapping[tuple[str, int], Sequence[LogExcerpt]] = field(default_factory=dict)
    #: ``(cell, trial)`` → a hung trial's incident, its record's ``forensics`` (validated:
    #: the culprits' frames and stacks are in it, so no page opens the raw evidence again).
    forensics: Mapping[tuple[str, int], HangReport] = field(default_factory=dict)


@dataclass(frozen=True)
class LogExcerpt:
    """Some lines of one of a trial's files: around the line its failure signature matched
    (``match`` is that line's number), or the file's last lines (``match`` ``None``)."""

    #: The artifact's name in the record (``stderr``, ``stdout``, a collected file's).
    name: str
    #: Its path relative to the run directory.
    rel: str
    lines: tuple[str, ...]
    #: The line number of ``lines[0]`` (0: unknown, the end of the file).
    first: int = 0
    match: int | None = None


_SIG_LINE = re.compile(r"^(?:rank (\d+): )?(?:([^\s:][^:]*):(\d+)|error): (.*)$", re.S)


def parse_signature_line(value: Any) -> tuple[str, int, str] | None:
    """A record's ``signature_line`` as (file name, line number, the line); the file is
    ``""`` when the signature matched the trial's error text rather than a file.

    >>> parse_signature_line("stderr.log:12: NCCL error: unhandled system error")
    ('stderr.log', 12, 'NCCL error: unhandled system error')
    >>> parse_signature_line("rank 1: error: no output and no CPU use for 2 s")
    ('', 0, 'no output and no CPU use for 2 s')
    >>> parse_signature_line(None) is None
    True
    """
    if not isinstance(value, str):
        return None
    m = _SIG_LINE.match(value)
    if m is None:
        return None
    _, name, number, text = m.groups()
    return (name or "", int(number or 0), text)


def is_failed_status(status: str) -> bool:
    """Whether a trial with this status did not end well: failed, hung, crashed or errored
    (``ok``, ``did_not_run`` and ``missing`` did not)."""
    return status not in ("ok", "did_not_run", "missing", "")


@dataclass(frozen=True)
class RunPage:
    """Everything one run's page shows."""

    #: The run's Dataset (:func:`aorta.load_run`).
    ds: xr.Dataset
    #: :func:`aorta.matrix.summary.summarize` of ``ds`` (or a frame with its columns).
    summary: pd.DataFrame
    #: :func:`~aorta.matrix.trace_summary.trace_summary` when ``ds`` has trace metrics.
    traces: pd.DataFrame | None = None
    files: RunFiles | None = None
    #: The run directory relative to the page's folder (``..`` for ``report/report.html``);
    #: ``None``: no links.
    link_prefix: str | None = None
    fmt: FigureFormat = "svg"
    #: How trace metrics were reduced over ranks (``--ranks``).
    ranks: Any = "worst"
    #: Cell → its "where the time went" waterfall (empty until that analysis exists).
    waterfalls: Mapping[str, Figure] = field(default_factory=dict)

    def link(self, rel: str) -> str | None:
        """The URL of ``rel`` (a path relative to the run directory) from the page."""
        if self.link_prefix is None:
            return None
        return quote(posixpath.join(self.link_prefix, rel))

    def record_rel(self, cell: str, trial: int) -> str:
        """A trial record's path relative to the run directory (as :class:`RunDir` names it)."""
        assert self.files is not None
        rd = RunDir(self.files.path)
        return rd.trial_path(cell, trial).relative_to(rd.path).as_posix()

    def artifact_rel(self, cell: str, trial: int) -> str:
        """A trial's own folder relative to the run directory (as :class:`RunDir` names it)."""
        assert self.files is not None
        rd = RunDir(self.files.path)
        return rd.artifact_dir(cell, trial).relative_to(rd.path).as_posix()

    def anchor(self, rel: str, text: str, *, title: str = "") -> str:
        """A link to ``rel`` (relative to the run directory) reading ``text``; the text alone
        when the page has no links."""
        url = self.link(rel)
        if url is None:
            return esc(text)
        tip = f' title="{esc(title)}"' if title else ""
        return f'<a href="{esc(url)}"{tip}>{esc(text)}</a>'


#: A section builder: the page's data → its section, or ``None`` when there is nothing to show.
SectionBuilder = Callable[[RunPage], "Section | None"]


# --- small pieces ----------------------------------------------------------------------------


def difference_of(row: Any) -> str:
    """The row's first answer (``slower``, ``no difference detected``, ``baseline`` …)."""
    return str(row.get("difference") or "—")


def verdict_chip(row: Any) -> str:
    """A verdict in the colour of its difference (:data:`aorta.plot.VERDICT_COLORS`), worded
    by :func:`~aorta.report.comparison.verdict_text` (both answers)."""
    color = plot.VERDICT_COLORS.get(difference_of(row), plot.PALETTE["grey"])
    style = f"background: {rgba(color, 0.17)}; box-shadow: inset 3px 0 0 {color}"
    return f'<span class="verdict" style="{style}">{esc(verdict_text(row))}</span>'


def number_or_none(v: Any) -> float | None:
    """``v`` as a float, ``None`` when missing (a sort key)."""
    return None if is_missing(v) else float(v)


def statuses(ds: xr.Dataset) -> tuple[np.ndarray, list[str]]:
    status = ds.status.transpose("cell", "trial").values.astype(str)
    present = set(np.unique(status).tolist())
    order = [s for s in STATUS_LABELS if s in present or s in ("ok", "workload_failed")]
    order += sorted(present - set(STATUS_LABELS))
    return status, order


# --- the run ---------------------------------------------------------------------------------


def host_facts(snap: Mapping[str, Any]) -> dict[str, str]:
    """The lines of a ``host_env.json`` snapshot worth a glance, as text."""
    torch = snap.get("torch") or {}
    build = ", ".join(f"{k.upper()} {torch[k]}" for k in ("cuda", "hip") if torch.get(k))
    libs = snap.get("libraries") or {}
    drivers = snap.get("drivers") or {}
    gpus = snap.get("gpus") or {}
    devices = [*gpus.get("nvidia", []), *gpus.get("rocm_smi", [])[1:]]
    facts = {
        "platform": snap.get("platform"),
        "CPUs": snap.get("cpus"),
        "Python": snap.get("python"),
        "aorta": snap.get("aorta"),
        "torch": f"{torch.get('version')}{f' ({build})' if build else ''}"
        if torch.get("version")
        else None,
        "NCCL / RCCL": " / ".join(str(libs.get(k) or "—") for k in ("nccl", "rccl"))
        if libs.get("nccl") or libs.get("rccl")
        else None,
        "drivers": ", ".join(
            f"{k} {drivers[k]}" for k in ("nvidia", "amdgpu", "rocm") if drivers.get(k)
        ),
        "GPUs": "; ".join(devices)
        or (
            f"{(drivers.get('gpus_nvidia') or 0) + (drivers.get('gpus_amd') or 0)}"
            if drivers
            else None
        ),
        "git commit": snap.get("git_commit"),
        "snapshot taken": snap.get("taken_at"),
    }
    return {k: str(v) for k, v in facts.items() if v not in (None, "")}


def hosts_table(hosts: Mapping[str, Mapping[str, Any]], *, env: bool = True) -> str:
    """Hosts side by side: a row per fact, a column per host; values that differ are marked.
    With ``env`` the snapshots' variables follow in a collapsed table."""
    names = list(hosts)
    facts = {h: host_facts(s) for h, s in hosts.items()}
    keys = list(dict.fromkeys(k for f in facts.values() for k in f))
    rows = []
    for k in keys:
        values = [facts[h].get(k, "—") for h in names]
        differ = len(names) > 1 and len(set(values)) > 1 and k != "snapshot taken"
        rows.append([Cell(k, cls="key"), *(Cell(v, cls="diff" * differ) for v in values)])
    out = table(["", *names], rows, sortable=False, cls="hosts")
    if env:
        envs = {h: dict(s.get("env") or {}) for h, s in hosts.items()}
        var_names = sorted({v for e in envs.values() for v in e})
        if var_names:
            env_rows = []
            n_diff = 0
            for v in var_names:
                values = [envs[h].get(v, "—") for h in names]
                differ = len(names) > 1 and len(set(values)) > 1
                n_diff += differ
                env_rows.append(
                    [Cell(v, cls="key"), *(Cell(x, cls="diff" * differ) for x in values)]
                )
            diff_note = f", {n_diff} differ between hosts" if n_diff else ""
            out += (
                f"<details><summary>Environment variables <span class=muted>({len(var_names)} "
                f"recorded, secrets redacted{diff_note})</span></summary>"
                + table(["variable", *names], env_rows, sortable=False, filterable=True)
                + "</details>"
            )
    return out


def _skew_table(skew: Mapping[str, Mapping[str, Any]]) -> str:
    nodes = list(dict.fromkeys(n for values in skew.values() for n in values))
    rows = [
        [Cell(k, cls="key"), *(Cell(str(v.get(n, "—")), cls="diff") for n in nodes)]
        for k, v in sorted(skew.items())
    ]
    return table(["setting", *nodes], rows, sortable=False)


def _run_order(page: RunPage) -> list[str]:
    """The run-order facts and drift warnings, when the Dataset or comparison has them."""
    out = []
    attrs = page.summary.attrs
    if "run_order" in page.ds:
        schedule = page.ds.attrs.get("schedule", "")
        out.append(
            f'<p class="note">Trials ran in the order recorded as <code>run_order</code>'
            f"{f' (schedule: {esc(schedule)})' if schedule else ''}.</p>"
        )
    warnings = [attrs["drift"]] if isinstance(attrs.get("drift"), str) else []
    warnings += [str(w) for w in attrs.get("warnings", []) or []]
    out += [f'<div class="banner">{esc(w)}</div>' for w in warnings]
    return out


def run_section(page: RunPage) -> Section:
    """Recipe, ticket, when and where it ran, hosts, cross-node differences, run order."""
    a = page.ds.attrs
    files = page.files
    planned = a.get("n_trials") or int(page.summary["n_trials"].sum())
    facts = {
        "ticket": a.get("ticket"),
        "workload": a.get("workload"),
        "status": a.get("status"),
        "run directory": files.path.name if files else None,
        "started": a.get("started_at"),
        "finished": a.get("finished_at"),
        "cells × trials": f"{page.ds.sizes['cell']} cells, {planned} trials planned",
        "baseline": a.get("baseline"),
        "confound threshold": a.get("threshold"),
        "environment": ", ".join(sorted(set(page.summary["environment"].astype(str)))),
        "isolation": a.get("isolation"),
        "world size": a.get("world_size"),
        "host": a.get("host"),
        "aorta": a.get("aorta_version"),
        "recipe sha256": a.get("recipe_sha256"),
    }
    left = [definition_rows(facts)]
    if files and files.recipe:
        left.append(
            "<details><summary>The recipe as run "
            f"<span class=muted>(recipe.resolved.yaml)</span></summary><pre>{esc(files.recipe)}</pre></details>"
        )
    right = []
    if files and files.hosts:
        n = len(files.hosts)
        right.append(f"<h3>{'Hosts' if n > 1 else 'Host'} and environment</h3>")
        right.append(hosts_table(files.hosts))
    parts = [*_run_order(page)]
    parts.append(f'<div class="cols"><div>{"".join(left)}</div><div>{"".join(right)}</div></div>')
    if files and files.skew:
        parts.append("<h3>Differences between nodes</h3>")
        parts.append(
            f'<div class="banner">The nodes differ in {len(files.skew)} setting(s) '
            "(<code>launch.json</code>): a cluster-only bug often hides in one of them.</div>"
        )
        parts.append(_skew_table(files.skew))
    return Section("run", "The run", "\n".join(parts))


# --- the matrix ------------------------------------------------------------------------------


def _failure_cell(row: Any) -> Cell:
    ran = int(row["n_ok"]) + int(row["n_failed"])
    if not ran:
        return Cell("—", sort=None, cls="num")
    text = f"{percent_text(row['failure_rate'])} [{percent_text(row['failure_ci_low'])}, "
    text += f"{percent_text(row['failure_ci_high'])}]"
    vs = str(row["failures_vs_baseline"])
    title = f"{int(row['n_failed'])} of {ran} trials that ran failed; Wilson CI"
    if vs in ("more", "fewer"):
        text += f" {vs}"
        title += f"; {vs} failures than the baseline, Boschloo p_adj {p_text(row['failure_p_adj'])}"
    return Cell(text, sort=number_or_none(row["failure_rate"]), cls=f"num {vs}", title=title)


def _outcomes_cell(kinds: list[str], counts: list[int], planned: int) -> Cell:
    """``4 ok · 4 failed`` (of the planned trials when some are missing)."""
    names = {**STATUS_LABELS, "timeout": "hang"}
    parts = [
        f'<span class="nw">{c} {esc(names.get(k, k))}</span>'
        for k, c in zip(kinds, counts, strict=True)
        if c
    ]
    markup = " · ".join(parts) or "—"
    if sum(counts) < planned:
        markup += f' <span class="nw">(of {planned})</span>'
    bad = sum(c for k, c in zip(kinds, counts, strict=True) if k not in ("ok", "did_not_run"))
    return Cell(markup=markup, sort=bad, cls="outcomes")


def _top_failure_cell(cell: str, top: str, count: int, n_failed: int) -> Cell:
    """The signature that named most of the cell's failures, linked to its Failures block."""
    if not n_failed:
        return Cell("—", sort=None, cls="topfail")
    name = top or "no signature"
    markup = f'<a href="#{cell_anchor(cell)}"><code>{esc(name)}</code></a>'
    if top:
        markup += f' <span class="muted">{count}/{n_failed}</span>'
    return Cell(markup=markup, sort=name, cls="topfail")


def cell_anchor(cell: str) -> str:
    """The id of a cell's block in the Failures section (letters, digits, ``-``, ``_``).

    >>> cell_anchor("a b/c")
    'fail-a_b_c'
    """
    return "fail-" + re.sub(r"[^A-Za-z0-9_-]", "_", cell)


def _matrix_head(df: pd.DataFrame, kinds: list[str], envs: int) -> list[str | Cell]:
    """The matrix's headings: the columns that fit 1280 px, then the secondary ones (``sec``)."""
    level = float(df.attrs.get("ci_level", 0.95))
    units = df.attrs.get("units") or ""
    return [
        "cell",
        Cell("trials", title="outcomes of the trials recorded"),
        Cell(f"failure rate [{level_text(df.attrs.get('failure_ci_level', 0.95))} CI]", cls="num"),
        Cell("top failure", cls="topfail", title="the signature that named most failures"),
        Cell(f"median [IQR]{f' ({units})' if units else ''}", cls="num"),
        Cell(f"ratio [{level_text(level)} CI]", cls="num"),
        Cell("verdict", cls="verdictcell"),
        Cell("mitigations", cls="sec"),
        *([Cell("env", cls="sec")] if envs > 1 else []),
        *(Cell(STATUS_LABELS.get(k, k), cls="num sec") for k in kinds),
        Cell("mean step (ms)", cls="num sec"),
        Cell("ratio (log scale)", cls="sec", title="the ratio and its CI; shaded: the band"),
        Cell("p_adj", cls="num sec"),
        Cell("confound", cls="sec"),
    ]


def _matrix_row(
    cell: str,
    row: Any,
    *,
    kinds: list[str],
    counts: list[int],
    top: tuple[str, int],
    envs: int,
    scale: _LogScale,
) -> list[Cell]:
    """One cell's row, in the order of :func:`_matrix_head`."""
    note = str(row.get("note") or "")
    verdict = verdict_chip(row)
    if note and difference_of(row) != "baseline":
        verdict += f'<div class="cellnote">{esc(note)}</div>'
    median = "—" if is_missing(row["median"]) else f"{ms_text(row['median'])}"
    if not is_missing(row["iqr"]):
        median += f" [{ms_text(row['iqr'])}]"
    n_bad = int(row["n_failed"]) + int(row["n_errors"])
    return [
        Cell(markup=breakable(cell), sort=cell, cls="cellname"),
        _outcomes_cell(kinds, counts, int(row["n_trials"])),
        _failure_cell(row),
        _top_failure_cell(cell, top[0], top[1], n_bad),
        Cell(median, sort=number_or_none(row["median"]), cls="num"),
        Cell(ratio_text(row), sort=number_or_none(row["ratio"]), cls="num"),
        Cell(markup=verdict, sort=verdict_text(row), cls="verdictcell"),
        Cell(markup=breakable(row["mitigations"]), sort=str(row["mitigations"]), cls="sec"),
        *([Cell(str(row["environment"]), cls="sec")] if envs > 1 else []),
        *(Cell(str(c), sort=c, cls="num sec zero" if c == 0 else "num sec") for c in counts),
        Cell(
            ms_text(row["mean_step_ms"]),
            sort=number_or_none(row["mean_step_ms"]),
            cls="num sec",
            title=f"source: {row['step_source']}",
        ),
        Cell(markup=scale.bar(row), sort=number_or_none(row["ratio"]), cls="bar sec"),
        Cell(p_text(row["p_adj"]), sort=number_or_none(row["p_adj"]), cls="num sec"),
        Cell(str(row.get("confound_text", row["confound"]) or ""), cls="sec"),
    ]


def matrix_section(page: RunPage) -> Section:
    """Every cell: its trials' outcomes, failure rate, top failure, step time, ratio and
    verdict (fits a 1280 px window); the secondary columns (mitigations, counts per status,
    mean step, the ratio's bar, p_adj, confound) behind a checkbox that needs no script."""
    df = page.summary
    status, kinds = statuses(page.ds)
    cells = [str(c) for c in page.ds.cell.values.tolist()]
    envs = len(set(df["environment"].astype(str)))  # one environment: said in the run section
    counts_by = signature_counts(page.ds)
    tops = top_signatures(page.ds)
    scale = _LogScale.of(df)
    rows = []
    for cell, row in df.iterrows():
        i = cells.index(str(cell))
        top = str(tops.get(str(cell), "") or "")
        n_top = int(counts_by.loc[str(cell), top]) if top else 0
        counts = [int((status[i] == k).sum()) for k in kinds]
        rows.append(
            _matrix_row(
                str(cell),
                row,
                kinds=kinds,
                counts=counts,
                top=(top, n_top),
                envs=envs,
                scale=scale,
            )
        )
    legend = "".join(
        _legend_chip(v) for v in ("baseline", "slower", "faster", "no difference detected")
    )
    matrix = table(_matrix_head(df, kinds, envs), rows, filterable=len(rows) > 8, cls="matrix")
    body = [
        f'<p class="stats">{esc(statistics_line(df.attrs).removeprefix("- "))}</p>',
        f'<div class="legend">{legend}</div>',
        '<input type="checkbox" id="matrix-all" class="allcols">'
        '<label for="matrix-all" class="allcols">show all columns (mitigations, trials per '
        "status, mean step, the ratio on a log scale, p_adj, confound)</label>",
        f'<div class="wide">{matrix}</div>',
        '<p class="note">Failure rate: failed / (passed + failed) — a failure is a workload'
        " failure, a hang (timeout) or a crash after the work started; setup and infrastructure"
        " errors are counted beside it, not in it. Top failure: the signature that named most"
        " of the cell's failed trials (a click shows them). The verdict answers two questions:"
        " is there a difference (Holm-adjusted test), and does it matter (the CI against the"
        " band). Click a heading to sort.</p>",
    ]
    return Section("matrix", "The matrix", "\n".join(body))


def _legend_chip(difference: str) -> str:
    color = plot.VERDICT_COLORS.get(difference, plot.PALETTE["grey"])
    style = f"background: {rgba(color, 0.17)}; box-shadow: inset 3px 0 0 {color}"
    return f'<span class="verdict" style="{style}">{esc(difference)}</span>'


@dataclass(frozen=True)
class _LogScale:
    """A shared log axis for the matrix's ratio bars (a forest plot drawn in the rows)."""

    lo: float
    hi: float
    band: tuple[float, float]
    width: int = 150

    @classmethod
    def of(cls, df: pd.DataFrame) -> _LogScale:
        thr = float(df.attrs.get("threshold", DEFAULT_THRESHOLD))
        values = [1 / thr, thr]
        for c in ("ratio", "ratio_ci_low", "ratio_ci_high"):
            values += [float(v) for v in df[c] if not is_missing(v) and float(v) > 0]
        lo, hi = min(values), max(values)
        pad = (math.log(hi) - math.log(lo)) * 0.06 or 0.05
        return cls(math.exp(math.log(lo) - pad), math.exp(math.log(hi) + pad), (1 / thr, thr))

    def x(self, v: float) -> float:
        span = math.log(self.hi) - math.log(self.lo)
        return (math.log(min(max(v, self.lo), self.hi)) - math.log(self.lo)) / span * self.width

    def bar(self, row: Any) -> str:
        """An inline SVG: the band, the line at 1, the CI and the ratio in its verdict's colour."""
        w = self.width
        b0, b1 = (self.x(v) for v in self.band)
        one = self.x(1.0)
        parts = [
            f'<svg class="bar" width="{w}" height="14" viewBox="0 0 {w} 14" role="img">',
            f'<rect x="{b0:.1f}" y="1" width="{b1 - b0:.1f}" height="12" fill="#e6e6e6"/>',
            f'<line x1="{one:.1f}" x2="{one:.1f}" y1="0" y2="14" stroke="#999"/>',
        ]
        ratio = number_or_none(row["ratio"])
        if ratio is not None and difference_of(row) != "baseline":
            color = plot.VERDICT_COLORS.get(difference_of(row), plot.PALETTE["blue"])
            lo, hi = number_or_none(row["ratio_ci_low"]), number_or_none(row["ratio_ci_high"])
            if lo is not None and hi is not None:
                parts.append(
                    f'<line x1="{self.x(lo):.1f}" x2="{self.x(hi):.1f}" y1="7" y2="7" '
                    f'stroke="{color}" stroke-width="2.5"/>'
                )
            parts.append(f'<circle cx="{self.x(ratio):.1f}" cy="7" r="3.5" fill="{color}"/>')
            parts.append(f"<title>{esc(ratio_text(row))}</title>")
        return "".join(parts) + "</svg>"


# --- figures ---------------------------------------------------------------------------------


def figures_section(page: RunPage) -> Section | None:
    """The forest plot, failure rates, per-trial distributions and step series."""
    df, ds = page.summary, page.ds
    blocks = []
    compared = df[(df["difference"] != "baseline") & df["ratio"].notna()]
    big = len(df) > _FIGURE_MAX_CELLS
    if big:
        blocks.append(
            f'<p class="note">With {len(df)} cells the forest plot is the matrix\'s "ratio '
            '(log scale)" column (<a href="#matrix">show all columns</a>: the ratio with its CI, '
            "the band shaded), sortable with it; "
            "<code>aorta.plot.ratio_forest</code> and <code>failure_rates</code> draw the "
            "figures.</p>"
        )
    if len(compared) and not big:
        blocks.append(
            figure_block(
                plot.ratio_forest(df),
                key="ratio_forest",
                fmt=page.fmt,
                caption="Each cell's ratio of medians to the baseline with its bootstrap CI; the"
                " shaded band is the band of practical equivalence, colours are the verdicts.",
            )
        )
    if int(df["n_ok"].sum() + df["n_failed"].sum()) and not big:
        blocks.append(
            figure_block(
                plot.failure_rates(df),
                key="failure_rates",
                fmt=page.fmt,
                caption="Failure rate per cell (failed / passed + failed: workload, hang, crash) with its"
                " Wilson interval; the line is the baseline's rate.",
            )
        )
    metric = str(df.attrs.get("metric", "step_time_ms"))
    values = trial_values(ds, metric=metric, trials="ran")
    if bool(np.isfinite(values.values).any()):
        blocks.append(
            figure_block(
                plot.step_distributions(ds, df.attrs.get("baseline"), metric=metric),
                key="step_distributions",
                fmt=page.fmt,
                caption="One point per trial (failed trials in vermillion), the median of the"
                " cell's ok trials as a bar (the matrix's), and the baseline's band.",
            )
        )
    n_trials = int((ds.n_steps > 0).sum())
    if 0 < n_trials <= _STEP_SERIES_MAX_TRIALS:
        blocks.append(
            figure_block(
                plot.step_series(ds),
                key="step_series",
                fmt=page.fmt,
                caption="Step time against step, one line per trial; warm-up shaded.",
            )
        )
    elif n_trials:
        blocks.append(
            f'<p class="note">The step series ({n_trials} trials) is left out: one line per '
            "trial would not be readable. <code>aorta.plot.step_series(ds, cells=[…])</code> "
            "draws a few cells.</p>"
        )
    if not blocks:
        return None
    return Section("figures", "Figures", '<div class="figs">' + "\n".join(blocks) + "</div>")
