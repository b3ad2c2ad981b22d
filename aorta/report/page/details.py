"""The sections of a run's ``report.html`` about its trials: traces, "where the time went",
and every trial with its failure and links to its files (the Failures section is
:mod:`aorta.report.page.failures`).

Pure functions of a :class:`~aorta.report.page.sections.RunPage`, like the sections of
:mod:`aorta.report.page.sections`; see there for the extension points.
"""

from __future__ import annotations

import numpy as np

from aorta import plot
from aorta.matrix.select import trial_values
from aorta.report.comparison import (
    is_missing,
    level_text,
    ms_text,
    number_text,
    p_text,
    ratio_text,
    verdict_text,
)
from aorta.report.page.kit import Cell, Section, breakable, esc, figure_block, table
from aorta.report.page.sections import (
    STATUS_LABELS,
    RunPage,
    number_or_none,
    verdict_chip,
)

__all__ = ["clamped", "time_went_section", "traces_section", "trials_section"]


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
    head += [
        Cell(f"exposed comm ratio [{level_text(level)} CI]", cls="num"),
        Cell("p_adj", cls="num"),
    ]
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


def clamped(text: str, *, cls: str = "clamp") -> str:
    """``text`` shown on one line, cut with an ellipsis, the whole of it on a click (a
    ``<details>``; a row stays one line high however long an error is)."""
    lines = text.strip().splitlines()
    if not lines:
        return ""
    first = esc(lines[0])
    if len(lines) == 1 and len(lines[0]) <= _CLAMP_CHARS:
        return f'<span class="{cls}">{first}</span>'
    return (
        f'<details class="{cls}"><summary title="show all">{first}</summary>'
        f"<pre>{esc(text.strip())}</pre></details>"
    )


_CLAMP_CHARS = 60  # a shorter one-line text is shown as it is


def trials_section(page: RunPage) -> Section:
    """One row per recorded trial: status, failure kind and signature, times, its error
    (one line, the whole of it on a click), and links to its record, logs and traces
    (relative to the page, so the run directory can be moved or bundled)."""
    ds, df = page.ds, page.summary
    metric = str(df.attrs.get("metric", "step_time_ms"))
    units = df.attrs.get("units") or ""
    values = trial_values(ds, metric=metric, trials="ran").transpose("cell", "trial").values
    status = ds.status.transpose("cell", "trial").values.astype(str)
    kind, sig = (
        ds[name].transpose("cell", "trial").values.astype(str)
        if name in ds
        else np.full(status.shape, "")
        for name in ("failure_kind", "signature")
    )
    wall = ds.wall_clock_s.transpose("cell", "trial").values
    error = ds.error.transpose("cell", "trial").values.astype(str)
    files = page.files
    head: list[str | Cell] = ["cell", Cell("trial", cls="num"), "status", "failure", "signature"]
    label = "median step" if metric == "step_time_ms" else metric
    # A run compared on its wall clock (a probe without steps) has one value per trial.
    valued = metric != "wall_clock_s"
    head += [
        Cell(
            "wall clock (s)",
            cls="num",
            title="" if valued else str(df.attrs.get("trial_value", "")),
        ),
        *(
            [
                Cell(
                    f"{label}{f' ({units})' if units else ''}",
                    cls="num",
                    title=str(df.attrs.get("trial_value", "")),
                )
            ]
            if valued
            else []
        ),
    ]
    head += ["error", *(["files"] if files else [])]
    rows = []
    for i, cell in enumerate(str(c) for c in ds.cell.values.tolist()):
        for j, t in enumerate(int(x) for x in ds.trial.values.tolist()):
            s = status[i, j]
            if s == "missing":
                continue
            rec = files.records.get((cell, t), {}) if files else {}
            signature = sig[i, j] or str(rec.get("signature") or "")
            row = [
                Cell(markup=breakable(cell), sort=cell, cls="cellname"),
                Cell(str(t), sort=t, cls="num"),
                Cell(STATUS_LABELS.get(s, s), cls="status-ok" if s == "ok" else "status-bad"),
                Cell(kind[i, j], cls="status-bad" if kind[i, j] else ""),
                Cell(markup=f"<code>{esc(signature)}</code>" if signature else "", sort=signature),
                Cell(number_text(wall[i, j]), sort=number_or_none(wall[i, j]), cls="num"),
                *(
                    [Cell(number_text(values[i, j]), sort=number_or_none(values[i, j]), cls="num")]
                    if valued
                    else []
                ),
                Cell(markup=clamped(error[i, j]), sort=error[i, j], cls="error"),
            ]
            if files:
                links = [page.anchor(page.record_rel(cell, t), "record")]
                for name, rel in sorted((rec.get("artifacts") or {}).items()):
                    links.append(page.anchor(str(rel), str(name).rsplit("/", 1)[-1], title=name))
                row.append(
                    Cell(markup=f'<span class="links">{" ".join(links)}</span>', cls="files")
                )
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
        f'<p class="note">Every recorded trial; an error shows its first line, click it for '
        f"the whole.{where}</p>"
        + '<div class="wide">'
        + table(head, rows, filterable=True, cls="trials")
        + "</div></details>"
    )
    return Section("trials", "Trials", body)
