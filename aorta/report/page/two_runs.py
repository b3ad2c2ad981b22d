"""The page comparing two runs, cell by cell: pure rendering of :func:`aorta.compare_runs`.

:func:`render_compare_page` takes both runs (:class:`RunSide`) and the comparison frame (rows:
the shared cells; ``median`` and the trial counts are run B's, ``baseline_median`` run A's) and
returns the HTML text; :func:`aorta.report.page.write.compare_html` reads the runs and writes
the file.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np

from aorta import plot
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
from aorta.report.page.kit import Cell, FigureFormat, Section, esc, figure_block, page, table
from aorta.report.page.sections import hosts_table, verdict_chip
from aorta.store.record import RAN
from aorta.store.rundir import MATRIX_MD, REPORT_DIR, REPORT_HTML, RunDir

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

__all__ = ["RunSide", "render_compare_page"]

_FACTS = (
    ("ticket", "ticket"),
    ("workload", "workload"),
    ("status", "status"),
    ("started", "started_at"),
    ("finished", "finished_at"),
    ("host", "host"),
    ("world size", "world_size"),
    ("isolation", "isolation"),
    ("aorta", "aorta_version"),
    ("recipe sha256", "recipe_sha256"),
)


@dataclass(frozen=True)
class RunSide:
    """One of the two runs: its label (``A``, ``B``), Dataset, directory, the directory
    relative to the page (for links) and its host snapshots."""

    label: str
    ds: xr.Dataset
    path: Path
    link_prefix: str
    hosts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def link(self, rel: str, text: str) -> str:
        return f'<a href="{esc(quote(posixpath.join(self.link_prefix, rel)))}">{esc(text)}</a>'


def _runs_section(a: RunSide, b: RunSide) -> Section:
    rows = []
    for label, key in _FACTS:
        va, vb = (str(s.ds.attrs.get(key, "—")) for s in (a, b))
        differ = va != vb and label not in ("started", "finished")
        rows.append([Cell(label, cls="key"), *(Cell(v, cls="diff" * differ) for v in (va, vb))])
    head = [""]
    for s in (a, b):
        head.append(f"{s.label}: {s.path.name}")
    links = []
    for s in (a, b):
        files = [s.link(MATRIX_MD, MATRIX_MD)]
        page_path = RunDir(s.path).report_dir / REPORT_HTML
        if page_path.is_file():
            files.insert(0, s.link(f"{REPORT_DIR}/{REPORT_HTML}", REPORT_HTML))
        links.append(f"<li>{s.label}: <code>{esc(s.path)}</code> — {' · '.join(files)}</li>")
    parts = [
        '<p class="note">Each cell of run B against the same cell of run A. Values that differ '
        "between the runs are marked.</p>",
        table(head, rows, sortable=False),
        f"<ul>{''.join(links)}</ul>",
    ]
    hosts = {f"{s.label}: {h}": snap for s in (a, b) for h, snap in s.hosts.items()}
    if hosts:
        parts += ["<h3>Hosts</h3>", hosts_table(hosts)]
    return Section("runs", "The two runs", "\n".join(parts))


def _counts(ds: xr.Dataset, cell: str) -> tuple[int, int, int]:
    """(trials that ran, of them failed, errored) of ``cell``."""
    status = np.asarray(ds.status.sel(cell=cell).values).astype(str)
    ran = int(np.isin(status, list(RAN)).sum())
    failed = int((status == "workload_failed").sum())
    errored = int((~np.isin(status, [*RAN, "did_not_run", "missing"])).sum())
    return ran, failed, errored


def _failures(ran: int, failed: int, errored: int, cls: str = "") -> Cell:
    text = f"{failed}/{ran}" if ran else "—"
    if errored:
        text += f" (+{errored} errors)"
    rate = failed / ran if ran else None
    return Cell(text, sort=rate, cls=f"num {cls}".strip(), title=percent_text(rate))


def _cells_section(a: RunSide, b: RunSide, df: pd.DataFrame) -> Section:
    level = float(df.attrs.get("ci_level", 0.95))
    units = df.attrs.get("units") or ""
    u = f" ({units})" if units else ""
    head: list[str | Cell] = [
        "cell",
        Cell("A failures", cls="num"),
        Cell("B failures", cls="num"),
        Cell(f"A median{u}", cls="num"),
        Cell(f"B median{u}", cls="num"),
        Cell(f"B / A [{level_text(level)} CI]", cls="num"),
        Cell("p_adj", cls="num"),
        "verdict",
    ]
    rows = []
    for cell, row in df.iterrows():
        vs = str(row["failures_vs_baseline"])
        rows.append(
            [
                Cell(str(cell), cls="cellname"),
                _failures(*_counts(a.ds, str(cell))),
                _failures(*_counts(b.ds, str(cell)), cls=vs if vs in ("more", "fewer") else ""),
                Cell(ms_text(row["baseline_median"]), sort=_num(row["baseline_median"]), cls="num"),
                Cell(ms_text(row["median"]), sort=_num(row["median"]), cls="num"),
                Cell(ratio_text(row), sort=_num(row["ratio"]), cls="num"),
                Cell(p_text(row["p_adj"]), sort=_num(row["p_adj"]), cls="num"),
                Cell(markup=verdict_chip(row), sort=verdict_text(row)),
            ]
        )
    body = [
        f'<p class="stats">{esc(statistics_line(df.attrs).removeprefix("- "))}</p>',
        table(head, rows, filterable=len(rows) > 8),
    ]
    # Who hung in B, and where: the comparison frame's own line, as matrix.md and compare say it.
    incidents = df["hang_incident"] if "hang_incident" in df.columns else {}
    hung = [(str(c), str(v)) for c, v in dict(incidents).items() if v]
    if hung:
        items = "".join(f"<li><code>{esc(c)}</code>: {esc(v)}</li>" for c, v in hung)
        body.append(f'<p class="note">Hangs in B (taken before the kill):</p><ul>{items}</ul>')
    return Section("cells", "Cells", "\n".join(body))


def _num(v: Any) -> float | None:
    return None if is_missing(v) else float(v)


def render_compare_page(
    a: RunSide, b: RunSide, df: pd.DataFrame, *, fmt: FigureFormat = "svg", footer: str = ""
) -> str:
    """The HTML text of the page comparing run ``b`` with run ``a`` (``df``:
    :func:`aorta.compare_runs` of the two)."""
    sections = [_runs_section(a, b), _cells_section(a, b, df)]
    if df["ratio"].notna().any():
        fig = figure_block(
            plot.ratio_forest(df),
            key="ratio_forest",
            fmt=fmt,
            caption="Each cell's median in run B over its median in run A, with the bootstrap "
            "CI; colours are the verdicts, the band is the band of practical equivalence.",
        )
        sections.append(Section("figures", "Figures", fig))
    title_of = [f"{s.ds.attrs.get('ticket') or '(no ticket)'} {s.path.name}" for s in (a, b)]
    return page(
        title=f"{title_of[1]} against {title_of[0]}",
        subtitle=f"run B: {b.path} · run A (the reference): {a.path} · {len(df)} shared cells",
        sections=sections,
        footer=footer,
    )
