"""``history.html``: one self-contained page of a history — per series × cell the runs with
their CIs and the change points marked, each change point with the environment changes
between the runs on either side, the gate's findings, and how many runs at what false-alarm
rate.

Examples
--------
>>> import tempfile
>>> from aorta.run.sweep import sweep
>>> from aorta.recipe import load_recipe_text
>>> from aorta.matrix.series import analyze
>>> r = load_recipe_text("trials: 2\\ncells: [{name: base, mitigations: [none]}]", command=["true"])
>>> root = tempfile.mkdtemp()
>>> _ = [sweep(r, output=root, progress="none") for _ in range(2)]
>>> path = write_history_html(analyze([root]), root)
>>> path.name, "2 runs" in path.read_text()
('history.html', True)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aorta.plot.history import series_figure
from aorta.report.history import environment_words
from aorta.report.page.kit import Cell, Section, esc, figure_block, page, table
from aorta.store.history import HISTORY_HTML
from aorta.store.rundir import atomic_write

if TYPE_CHECKING:
    from aorta.matrix.series import History

__all__ = ["history_page", "write_history_html"]


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "—" if x is None else format(x, fmt)


def _changes_table(changes: list[dict[str, Any]]) -> str:
    rows = []
    for c in changes:
        if c["metric"] != "failure_rate":
            lo, hi = c.get("ci") or [None, None]
            size = f"×{_num(c.get('ratio'))} [{_num(lo)}, {_num(hi)}] {c.get('band', '')}"
        else:
            rb, ra = c["failure_rates"]
            size = f"{_num(rb, '.0%')} → {_num(ra, '.0%')} failed"
        rows.append(
            [
                Cell(c["cell"]),
                Cell(f"{c['metric']}: {c['direction'].replace('_', ' ')}", cls=c["direction"]),
                Cell(size),
                Cell(Path(c["before"]).name, title=c["before"]),
                Cell(Path(c["after"]).name, title=c["after"]),
                Cell(f"{c['p']:.2g}", sort=c["p"]),
                Cell(environment_words(c["environment_changes"], limit=12) or "none recorded"),
            ]
        )
    head = [
        "cell",
        "change",
        "size",
        "last run before",
        "first run after",
        "p",
        "environment changes",
    ]
    return table(head, rows)


def _gate_table(findings: list[dict[str, Any]]) -> str:
    rows = [
        [
            Cell(f["cell"]),
            Cell(f["against"]),
            Cell(Path(f["reference"]).name, title=f["reference"]),
            Cell(f"×{_num(f['ratio'])} [{_num(f['ci'][0])}, {_num(f['ci'][1])}]", sort=f["ratio"]),
            Cell(f["difference"]),
            Cell(f["band"]),
            Cell(f["failures"]),
            Cell("REGRESSION" if f["tripped"] else "ok", cls="bad" if f["tripped"] else ""),
        ]
        for f in findings
    ]
    head = ["cell", "against", "reference", "ratio [CI]", "difference", "band", "failures", "gate"]
    return table(head, rows)


def history_page(history: History) -> str:
    """The page's HTML (see the module docstring)."""
    doc = history.to_json()
    sections = []
    for i, entry in enumerate(doc["series"]):
        mine = [
            c
            for c in doc["change_points"]
            if c["series"] == entry["series"] and c["cell"] == entry["cell"]
        ]
        fig = series_figure(entry, mine, metric=doc["metric"])
        caption = (
            f"{entry['series']} · {entry['cell']}: each run's median {doc['metric']} with its 95% CI "
            f"(order statistics) and failure rate (Wilson); dashed lines: change points."
        )
        body = [figure_block(fig, key=f"series-{i}", caption=caption)]
        if mine:
            body.append(_changes_table(mine))
        else:
            body.append("<p>No change point in this series.</p>")
        if entry.get("blessed"):
            body.append(f"<p>Blessed run: {esc(Path(entry['blessed']).name)}</p>")
        sections.append(Section(f"s{i}", f"{entry['series']} · {entry['cell']}", "\n".join(body)))
    findings = doc["gate"]["findings"]
    verdict = "REGRESSION" if doc["gate"]["regressed"] else "no regression"
    gate_body = (
        f"<p>The newest run of each series: <strong>{esc(verdict)}</strong>.</p>"
        + _gate_table(findings)
        if findings
        else "<p>Nothing to compare the newest runs with.</p>"
    )
    sections.insert(0, Section("gate", "Gate", gate_body))
    n_series = len({s["series"] for s in doc["series"]})
    subtitle = (
        f"{len(doc['runs'])} runs in {n_series} series; {len(doc['change_points'])} change points; "
        f"false alarms {doc['false_alarm_bound']}"
    )
    return page(title="aorta history", subtitle=subtitle, sections=sections)


def write_history_html(history: History, folder: str | Path) -> Path:
    """Write ``history.html`` into ``folder``; returns its path."""
    path = Path(folder) / HISTORY_HTML
    atomic_write(path, history_page(history))
    return path
