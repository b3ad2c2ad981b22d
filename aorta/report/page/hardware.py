"""report.html's "Against the hardware" section (see :mod:`aorta.report.perf`).

:func:`hardware_html` renders it from data (pure); :func:`hardware_section` is the page's
section builder: with the run directory it reads each cell's representative trace (through
the trace cache, as ``load_run(traces=True)`` left it), without one it shows the per-trial
comparison only.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from aorta import plot
from aorta.matrix.trace_summary import has_traces
from aorta.report.page.kit import Cell, FigureFormat, Section, esc, figure_block, table
from aorta.report.page.sections import RunPage, number_or_none
from aorta.report.perf import (
    NO_GPU_TEXT,
    CellHardware,
    has_gpu_traces,
    load_hardware,
    roofline_changes,
)

__all__ = ["hardware_html", "hardware_section"]


def _num(v: object, fmt: str) -> Cell:
    n = number_or_none(v)
    return Cell("—" if n is None else format(n, fmt), sort=n, cls="num")


def _cell_block(c: CellHardware, fmt: FigureFormat) -> list[str]:
    head = f"<h3>{esc(c.cell)}</h3>"
    if c.problem:
        return [head, f"<p><code>{esc(c.file)}</code> could not be analysed: {esc(c.problem)}</p>"]
    coverage = number_or_none(100 * c.coverage)
    device = c.device or "unknown device: no roofline"
    out = [
        head,
        f'<p class="note"><code>{esc(c.file)}</code> — {esc(device)}, coverage '
        f"{'—' if coverage is None else f'{coverage:.1f}'}% of kernel time</p>",
    ]
    heads: list[str | Cell] = ["family", Cell("calls", cls="num"), Cell("kernel (ms)", cls="num")]
    heads += [Cell(h, cls="num") for h in ("% of kernel", "TFLOP/s", "TB/s", "% of roofline")]
    rows = [
        [
            Cell(str(r["family"])),
            Cell(str(int(r["calls"])), sort=int(r["calls"]), cls="num"),
            _num(r["kernel_us"] / 1e3, ".3f"),
            _num(r["percent"], ".1f"),
            _num(r["tflops"], ".3g"),
            _num(r["tbps"], ".3g"),
            _num(r.get("pct_roofline"), ".1f"),
        ]
        for _, r in c.families.iterrows()
    ]
    out.append(table(heads, rows))
    if not c.ops.empty:
        out.append(
            figure_block(
                plot.roofline(c.ops, min_share=0.001),
                key=f"roofline-{c.cell}",
                fmt=fmt,
                caption=f"Roofline of {c.cell}'s representative trace: one point per op and "
                "shape, sized by kernel time, under the device's ceilings.",
            )
        )
    return out


def hardware_html(
    cells: Sequence[CellHardware],
    changes: pd.DataFrame | None,
    *,
    gpu: bool,
    fmt: FigureFormat = "svg",
    located: bool = True,
) -> Section:
    """The section from :func:`~aorta.report.perf.load_hardware`'s cells and
    :func:`~aorta.report.perf.roofline_changes` (``gpu``: whether any trace holds GPU
    kernels; without, the section says :data:`~aorta.report.perf.NO_GPU_TEXT`; ``located``:
    whether the run directory, hence the traces, was known)."""
    title = "Against the hardware"
    if not gpu:
        return Section("hardware", title, f"<p>{esc(NO_GPU_TEXT.replace('`', ''))}</p>")
    body = []
    said = [s for s in changes["sentence"] if s] if changes is not None else []
    if said:
        body.append("<ul>" + "".join(f"<li>{esc(s)}</li>" for s in said) + "</ul>")
    elif changes is not None and len(changes):
        body.append(
            "<p>No family's share of the roofline changed detectably against the baseline "
            "(every trial's <code>pct_roofline_&lt;family&gt;</code>, compared as step time "
            "is).</p>"
        )
    body.append(
        '<p class="note">Per cell, one representative trace (the trial with the median busy '
        "time): each perf-model family's kernel time, achieved TFLOP/s and TB/s, and its share "
        "of the roofline of the trace's device (roofline time / kernel time); coverage is the "
        "share of kernel time with a model.</p>"
    )
    for c in cells:
        body += _cell_block(c, fmt)
    if not located:
        body.append("<p>The run directory is not known: no trace to show per cell.</p>")
    return Section("hardware", title, "\n".join(body))


def hardware_section(page: RunPage) -> Section | None:
    """The page's section builder: ``None`` without trace metrics."""
    if not has_traces(page.ds):
        return None
    if not has_gpu_traces(page.ds):
        return hardware_html([], None, gpu=False)
    a = page.summary.attrs  # the statistics the matrix used (alpha, seed, resamples)
    kw = {k: a[k] for k in ("alpha", "seed", "resamples") if a.get(k) is not None}
    changes = roofline_changes(page.ds, a.get("baseline"), ranks=page.ranks, **kw)
    cells = load_hardware(page.ds, page.files.path) if page.files is not None else []
    located = page.files is not None
    return hardware_html(cells, changes, gpu=True, fmt=page.fmt, located=located)
