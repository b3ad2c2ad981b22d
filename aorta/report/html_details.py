"""The sections of a run's ``report.html`` about its trials: failures grouped by signature,
traces, "where the time went", and every trial with links to its files.

Pure functions of a :class:`~aorta.report.html_sections.RunPage`, like the sections of
:mod:`aorta.report.html_sections`; see there for the extension points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aorta import plot
from aorta.matrix.select import trial_values
from aorta.report.comparison import (
    is_missing,
    ms_text,
    number_text,
    p_text,
    ratio_text,
    verdict_text,
)
from aorta.report.html_kit import Cell, Section, esc, figure_block, table
from aorta.report.html_sections import (
    STATUS_LABELS,
    RunPage,
    number_or_none,
    verdict_chip,
)
from aorta.store.record import ERRORED, RAN

__all__ = ["failures_section", "time_went_section", "traces_section", "trials_section"]

_TAIL_SHOWN = 3  # failed trials whose log tail is shown per signature


# --- failures --------------------------------------------------------------------------------


def _signature(rec: Mapping[str, Any], error: str, status: str) -> tuple[str, str, list[str]]:
    """(signature, hint, matching log lines) of a failed trial."""
    sig = rec.get("signature")
    hint = str(rec.get("hint") or "")
    lines = [str(x) for x in rec.get("signature_lines") or [] if x]
    if isinstance(sig, Mapping):
        name = str(sig.get("name") or sig.get("signature") or "")
        hint = str(sig.get("hint") or hint)
        lines = lines or [str(x) for x in sig.get("lines") or [sig.get("line")] if x]
    else:
        name = str(sig or "")
    if not name:
        name = (error or str(rec.get("error") or "") or status).strip().splitlines()[0]
    return name, hint, lines


def failures_section(page: RunPage) -> Section | None:
    """Per cell, its failed and errored trials grouped by signature, with the matching log
    lines (or the error, hint and tail of the logs until records carry signatures)."""
    ds = page.ds
    status = ds.status.transpose("cell", "trial").values.astype(str)
    error = ds.error.transpose("cell", "trial").values.astype(str)
    sig_var = (
        ds["signature"].transpose("cell", "trial").values.astype(str) if "signature" in ds else None
    )
    bad = {*ERRORED, "workload_failed"} | (set(np.unique(status).tolist()) - {*RAN, *ERRORED})
    bad -= {"ok", "did_not_run", "missing"}
    files = page.files
    trials = ds.trial.values.tolist()
    parts = []
    for i, cell in enumerate(str(c) for c in ds.cell.values.tolist()):
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for j, t in enumerate(trials):
            if status[i, j] not in bad:
                continue
            rec = files.records.get((cell, int(t)), {}) if files else {}
            if sig_var is not None and sig_var[i, j] and "signature" not in rec:
                rec = {**rec, "signature": sig_var[i, j]}
            name, hint, lines = _signature(rec, error[i, j], status[i, j])
            g = groups.setdefault((status[i, j], name), {"trials": [], "hint": hint, "lines": []})
            g["trials"].append(int(t))
            g["lines"] = g["lines"] or lines
        if not groups:
            continue
        n = sum(len(g["trials"]) for g in groups.values())
        parts.append(f"<h3>{esc(cell)} <span class=muted>— {n} trial(s)</span></h3>")
        rows = []
        for (kind, name), g in sorted(groups.items(), key=lambda kv: -len(kv[1]["trials"])):
            links = ", ".join(
                page.anchor(page.record_rel(cell, t), f"#{t}") if files else f"#{t}"
                for t in g["trials"]
            )
            detail = ""
            if g["lines"]:
                detail = "<pre>" + esc("\n".join(g["lines"])) + "</pre>"
            elif files:
                detail = _tails(page, cell, g["trials"])
            rows.append(
                [
                    Cell(STATUS_LABELS.get(kind, kind), cls="status-bad"),
                    Cell(markup=f"<code>{esc(name)}</code>{detail}"),
                    Cell(str(len(g["trials"])), sort=len(g["trials"]), cls="num"),
                    Cell(markup=f'<span class="links">{links}</span>'),
                    Cell(g["hint"] or "—"),
                ]
            )
        parts.append(table(["kind", "signature / log", "trials", "which", "hint"], rows))
    if not parts:
        return None
    intro = (
        '<p class="note">Failed and errored trials of each cell, grouped by their failure. '
        "Until records carry failure signatures a group is the trial's error, shown with the "
        "last lines of its logs.</p>"
    )
    return Section("failures", "Failures", intro + "\n".join(parts))


def _tails(page: RunPage, cell: str, trials: Sequence[int]) -> str:
    assert page.files is not None
    out: list[str] = []
    for t in trials[:_TAIL_SHOWN]:
        for name, lines in (page.files.log_tails.get((cell, t)) or {}).items():
            if lines:
                opened = " open" if not out else ""
                out.append(
                    f'<details{opened}><summary class="muted">trial {t}: end of {esc(name)}</summary>'
                    f"<pre>{esc(chr(10).join(lines))}</pre></details>"
                )
    return "".join(out)


# --- traces ----------------------------------------------------------------------------------


def traces_section(page: RunPage) -> Section | None:
    """Per cell, where the profiled time went (computation, exposed comm, idle) and the
    exposed-communication verdict; the breakdown figures; trace diagnostics."""
    ts = page.traces
    if ts is None:
        return None
    level = float(ts.attrs.get("ci_level", 0.95))
    head: list[str | Cell] = ["cell", Cell("traced", cls="num"), "source"]
    parts = ("computation_ms", "exposed_comm_ms", "idle_ms")
    head += [Cell(f"{p[:-3].replace('_', ' ')} (ms)", cls="num") for p in parts]
    head += [Cell(f"exposed comm ratio [{level:.0%} CI]", cls="num"), Cell("p_adj", cls="num")]
    head.append("verdict")
    rows = []
    for cell, row in ts.iterrows():
        values = [
            Cell(
                "—" if is_missing(row[p]) else f"{ms_text(row[p])} [{ms_text(row[f'{p}_iqr'])}]",
                sort=number_or_none(row[p]),
                cls="num",
            )
            for p in parts
        ]
        rows.append(
            [
                Cell(str(cell), cls="cellname"),
                Cell(str(int(row["traced"])), sort=int(row["traced"]), cls="num"),
                Cell(str(row["source"])),
                *values,
                Cell(ratio_text(row), sort=number_or_none(row["ratio"]), cls="num"),
                Cell(p_text(row["p_adj"]), sort=number_or_none(row["p_adj"]), cls="num"),
                Cell(markup=verdict_chip(row), sort=verdict_text(row)),
            ]
        )
    which = str(ts.attrs.get("trial_value", "")).partition(", ")[2] or "per trial"
    body = [
        f"<p class=\"note\">Each trial's value: the {esc(which)} of each rank's profiled-window "
        "time; per cell the median [IQR] over trials. Exposed communication is compared with "
        "the baseline like step time. Source <code>host</code>: the host-side breakdown of a "
        "trace without GPU events (CPU-only runs).</p>",
        table(head, rows),
        '<div class="figs">',
        figure_block(
            plot.time_breakdown(page.ds),
            key="time_breakdown",
            fmt=page.fmt,
            caption="Where the profiled time went, per cell (median over trials of the "
            "worst rank).",
        ),
        figure_block(
            plot.exposed_comm_vs_step(page.ds, ranks=page.ranks),
            key="exposed_comm_vs_step",
            fmt=page.fmt,
            caption="Exposed communication against step time, one point per trial.",
        ),
        "</div>",
    ]
    problems = list(ts.attrs.get("diagnostics", []))
    if problems:
        items = "".join(f"<li><code>{esc(p)}</code></li>" for p in problems[:20])
        more = f"<li>… and {len(problems) - 20} more</li>" if len(problems) > 20 else ""
        body.append(
            "<p>Trace diagnostics (a missing or unreadable file's rank is NaN):</p>"
            f"<ul>{items}{more}</ul>"
        )
    return Section("traces", "Traces", "\n".join(body))


def time_went_section(page: RunPage) -> Section | None:
    """ "Where the time went": one waterfall per cell (baseline step → per-item deltas →
    the cell's step), when :attr:`RunPage.waterfalls` has any."""
    if not page.waterfalls:
        return None
    blocks = [
        figure_block(
            fig,
            key=f"waterfall-{cell}",
            fmt=page.fmt,
            caption=f"{cell}: from the baseline's step time to this cell's, item by item.",
        )
        for cell, fig in page.waterfalls.items()
    ]
    return Section(
        "time-went", "Where the time went", '<div class="figs">' + "".join(blocks) + "</div>"
    )


# --- trials ----------------------------------------------------------------------------------


def trials_section(page: RunPage) -> Section:
    """One row per recorded trial with links to its record, logs and traces (relative to the
    page, so the run directory can be moved or bundled)."""
    ds, df = page.ds, page.summary
    metric = str(df.attrs.get("metric", "step_time_ms"))
    units = df.attrs.get("units") or ""
    values = trial_values(ds, metric=metric, trials="ran").transpose("cell", "trial").values
    status = ds.status.transpose("cell", "trial").values.astype(str)
    wall = ds.wall_clock_s.transpose("cell", "trial").values
    error = ds.error.transpose("cell", "trial").values.astype(str)
    files = page.files
    head: list[str | Cell] = ["cell", Cell("trial", cls="num"), "status"]
    label = "median step" if metric == "step_time_ms" else metric
    head += [
        Cell("wall clock (s)", cls="num"),
        Cell(
            f"{label}{f' ({units})' if units else ''}",
            cls="num",
            title=str(df.attrs.get("trial_value", "")),
        ),
    ]
    head += ["error", *(["files"] if files else [])]
    rows = []
    for i, cell in enumerate(str(c) for c in ds.cell.values.tolist()):
        for j, t in enumerate(int(x) for x in ds.trial.values.tolist()):
            s = status[i, j]
            if s == "missing":
                continue
            row = [
                Cell(cell, cls="cellname"),
                Cell(str(t), sort=t, cls="num"),
                Cell(STATUS_LABELS.get(s, s), cls="status-ok" if s == "ok" else "status-bad"),
                Cell(number_text(wall[i, j]), sort=number_or_none(wall[i, j]), cls="num"),
                Cell(number_text(values[i, j]), sort=number_or_none(values[i, j]), cls="num"),
                Cell(error[i, j].splitlines()[0] if error[i, j] else ""),
            ]
            if files:
                rec = files.records.get((cell, t), {})
                links = [page.anchor(page.record_rel(cell, t), "record")]
                for name, rel in sorted((rec.get("artifacts") or {}).items()):
                    links.append(page.anchor(str(rel), str(name)))
                row.append(Cell(markup=f'<span class="links">{"".join(links)}</span>'))
            rows.append(row)
    n = len(rows)
    where = (
        f" Links are relative to this page (the run directory is <code>{esc(page.link_prefix)}</code>"
        " from here), so the run directory can be moved or bundled with it."
        if files and page.link_prefix is not None
        else ""
    )
    body = (
        f"<details{' open' if n <= 60 else ''}><summary>{n} trial(s)</summary>"
        f'<p class="note">Every recorded trial.{where}</p>'
        + table(head, rows, filterable=True)
        + "</details>"
    )
    return Section("trials", "Trials", body)
