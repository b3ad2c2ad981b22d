"""The parts every HTML page of aorta is built from: escaped text, sortable tables, figures
inlined as SVG (or PNG data), and the page shell with its stylesheet and script.

A page is one self-contained file: no URL to anything outside it. Figures are inlined, and
their SVG is rewritten so that nothing in it names a URL either — the XML prolog and DOCTYPE
(which cite w3.org) and the ``xmlns`` declarations are dropped (an ``<svg>`` inside HTML is in
the SVG namespace without them), ``xlink:href`` becomes SVG 2's ``href``, and every ``id`` a
figure refers to gets the figure's own prefix, so several figures never share an id. The script
only sorts and filters tables; without it the page reads the same.

Examples
--------
>>> esc("<a & b>")
'&lt;a &amp; b&gt;'
>>> print(table(["cell", "ratio"], [[Cell("x"), Cell("1.2", sort=1.2)]], sortable=False))
<table><thead><tr><th>cell</th><th>ratio</th></tr></thead>
<tbody>
<tr><td>x</td><td data-v="1.2">1.2</td></tr>
</tbody></table>
"""

from __future__ import annotations

import base64
import html as _html
import io
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from aorta.plot import aorta_style

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "Cell",
    "FigureFormat",
    "Section",
    "breakable",
    "definition_rows",
    "esc",
    "figure_block",
    "figure_markup",
    "page",
    "rgba",
    "svg_markup",
    "table",
]

#: How figures are inlined: ``svg`` (sharp at any zoom, text searchable) or ``png`` (a data
#: URI; smaller for figures with thousands of points).
FigureFormat = Literal["svg", "png"]


def esc(value: object) -> str:
    """``value`` as HTML text (``&``, ``<``, ``>`` and quotes escaped)."""
    return _html.escape(str(value), quote=True)


def breakable(value: object) -> str:
    """``value`` as HTML text (:func:`esc`) that may wrap after ``_``, ``-``, ``+``, ``/``
    and ``.`` (long cell, mitigation and file names wrap where a reader expects).

    >>> breakable("a_b-c+d")
    'a_<wbr>b-<wbr>c+<wbr>d'
    """
    return re.sub(r"([_/.+-])(?=.)", r"\1<wbr>", esc(value))


def rgba(hex_color: str, alpha: float) -> str:
    """``#RRGGBB`` as a CSS ``rgba()`` with ``alpha``.

    >>> rgba("#D55E00", 0.25)
    'rgba(213, 94, 0, 0.25)'
    """
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r}, {g}, {b}, {alpha:g})"


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, or ``markup`` already HTML, the value it sorts by (``sort``;
    numbers sort numerically, ``None`` or NaN last), a CSS ``cls`` and a tooltip ``title``."""

    text: str = ""
    sort: float | str | None = None
    cls: str = ""
    title: str = ""
    markup: str | None = None

    def html(self, tag: str = "td") -> str:
        attrs = ""
        if self.cls:
            attrs += f' class="{esc(self.cls)}"'
        if self.title:
            attrs += f' title="{esc(self.title)}"'
        if self.sort is not None:
            v = self.sort
            if isinstance(v, float) and not math.isfinite(v):
                v = ""
            attrs += f' data-v="{esc(v)}"'
        body = self.markup if self.markup is not None else esc(self.text)
        return f"<{tag}{attrs}>{body}</{tag}>"


@dataclass(frozen=True)
class Section:
    """One section of a page: its anchor ``id``, heading ``title`` and HTML ``body``."""

    id: str
    title: str
    body: str

    def html(self) -> str:
        return f'<section id="{esc(self.id)}">\n<h2>{esc(self.title)}</h2>\n{self.body}\n</section>'


def table(
    head: Sequence[str | Cell],
    rows: Iterable[Sequence[Cell]],
    *,
    sortable: bool = True,
    filterable: bool = False,
    cls: str = "",
    row_classes: Sequence[str] | None = None,
) -> str:
    """An HTML table; ``sortable`` ones sort by a click on a heading (with the page's
    script), ``filterable`` ones get a filter box (also added by the script, so a page read
    without JavaScript shows no box that does nothing)."""
    classes = " ".join(
        c for c in (cls, "sortable" if sortable else "", "filterable" * filterable) if c
    )
    opening = f'<table class="{classes}">' if classes else "<table>"
    th = "".join(h.html("th") if isinstance(h, Cell) else f"<th>{esc(h)}</th>" for h in head)
    lines = [f"{opening}<thead><tr>{th}</tr></thead>", "<tbody>"]
    for i, row in enumerate(rows):
        rc = row_classes[i] if row_classes is not None and row_classes[i] else ""
        tr = f'<tr class="{esc(rc)}">' if rc else "<tr>"
        lines.append(tr + "".join(c.html() for c in row) + "</tr>")
    lines.append("</tbody></table>")
    return "\n".join(lines)


def definition_rows(items: Mapping[str, object]) -> str:
    """A two-column table of facts (``None`` and empty values left out)."""
    rows = [
        f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>"
        for k, v in items.items()
        if v is not None and str(v) != ""
    ]
    return '<table class="facts">\n' + "\n".join(rows) + "\n</table>"


# --- figures ---------------------------------------------------------------------------------

_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.S)
_XMLNS = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
_IDS = re.compile(r'(\s)id="([^"]*)"|\b(?:xlink:)?href="#([^"]*)"|url\(#([^)]*)\)')
_REFS = re.compile(r'\bhref="#([^"]*)"|url\(#([^)]*)\)')
_SIZE = re.compile(r'<svg\b[^>]*?\bwidth="([\d.]+)pt"')


def svg_markup(svg: str, *, prefix: str) -> str:
    """Matplotlib's SVG text made fit to inline in a page: no prolog, DOCTYPE, ``xmlns``
    or metadata (nothing that names a URL), ``href`` instead of ``xlink:href``, every referenced
    ``id`` prefixed with ``prefix`` and the others dropped.

    >>> svg = ('<?xml version="1.0"?>\\n<svg xmlns="http://www.w3.org/2000/svg" width="10pt">'
    ...        '<g id="figure_1"><path id="m1"/><use xlink:href="#m1"/></g></svg>')
    >>> svg_markup(svg, prefix="f-")
    '<svg width="10pt"><g><path id="f-m1"/><use href="#f-m1"/></g></svg>'
    """
    svg = _PROLOG.sub("", svg, count=1)
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    svg = _XMLNS.sub("", svg)
    referenced = {a or b for a, b in _REFS.findall(svg)}

    def rename(m: re.Match[str]) -> str:
        space, defined, href, url = m.groups()
        if defined is not None:
            return f'{space}id="{prefix}{defined}"' if defined in referenced else ""
        if href is not None:
            return f'href="#{prefix}{href}"'
        return f"url(#{prefix}{url})"

    return _IDS.sub(rename, svg).strip()


def figure_markup(fig: Figure, *, key: str, fmt: FigureFormat = "svg") -> str:
    """``fig`` as inline markup: an ``<svg>`` element or an ``<img>`` with PNG data.

    ``key`` makes the SVG's ids unique in the page and its output reproducible. Raises
    ``ValueError`` for another ``fmt``.
    """
    import matplotlib as mpl

    if fmt not in ("svg", "png"):
        raise ValueError(f"figure format must be 'svg' or 'png', got {fmt!r}")
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", key)
    if fmt == "png":
        buf = io.BytesIO()
        with aorta_style():
            fig.savefig(buf, format="png")
        data = base64.b64encode(buf.getvalue()).decode("ascii")
        w, _ = fig.get_size_inches()
        return f'<img alt="{esc(key)}" style="max-width:{w * 100:.0f}px" src="data:image/png;base64,{data}">'
    buf_s = io.StringIO()
    with aorta_style(), mpl.rc_context({"svg.hashsalt": safe}):
        fig.savefig(buf_s, format="svg", metadata={k: None for k in _SVG_METADATA})
    svg = svg_markup(buf_s.getvalue(), prefix=f"{safe}-")
    m = _SIZE.search(svg)  # keep its natural size on a wide screen, shrink on a narrow one
    if m:
        svg = svg.replace("<svg ", f'<svg style="max-width:{float(m.group(1)) * 4 / 3:.0f}px" ', 1)
    return svg


_SVG_METADATA = ("Creator", "Date", "Format", "Type")


def figure_block(
    fig: Figure, *, key: str, caption: str, fmt: FigureFormat = "svg", close: bool = True
) -> str:
    """A ``<figure>`` with ``fig`` inlined and its ``caption``; the figure is closed after
    (``close``) so a page with many figures keeps little memory."""
    try:
        body = figure_markup(fig, key=key, fmt=fmt)
    finally:
        if close:
            fig.clear()
    return f'<figure id="fig-{esc(key)}">{body}<figcaption>{esc(caption)}</figcaption></figure>'


# --- the page --------------------------------------------------------------------------------

_CSS = """
:root { --fg: #1b1f24; --muted: #5b6570; --line: #d8dee4; --bg-alt: #f6f8fa; --accent: #0072B2; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: var(--fg); background: #fff; }
main { max-width: 1360px; margin: 0 auto; padding: 20px 28px 60px; }
header.page { border-bottom: 3px solid var(--accent); padding-bottom: 10px; margin-bottom: 8px; }
h1 { font-size: 24px; margin: 6px 0 4px; }
h2 { font-size: 19px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 20px 0 8px; }
.sub { color: var(--muted); margin: 0; }
nav.toc { margin: 10px 0 0; display: flex; flex-wrap: wrap; gap: 6px 18px; font-size: 13px; }
nav.toc a { color: var(--accent); text-decoration: none; }
nav.toc a:hover, a:hover { text-decoration: underline; }
a { color: var(--accent); }
p.note, .muted { color: var(--muted); }
p.stats { color: var(--muted); font-size: 12.5px; max-width: 100ch; }
.banner { border-left: 5px solid #D55E00; background: rgba(213, 94, 0, 0.08); padding: 8px 12px;
  margin: 12px 0; }
.banner.info { border-color: #0072B2; background: rgba(0, 114, 178, 0.07); }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 9px; text-align: left; vertical-align: top; }
thead th { background: var(--bg-alt); position: sticky; top: 0; z-index: 1; white-space: nowrap;
  border-bottom: 2px solid var(--line); }
tbody tr:hover { background: #fafbfc; }
td.num, th.num { text-align: right; white-space: nowrap; }
td.cellname { font-weight: 600; overflow-wrap: anywhere; min-width: 7em; }
td.zero { color: #b0b7be; }
table.facts th { background: none; position: static; font-weight: 600; color: var(--muted);
  white-space: nowrap; border-bottom: 1px solid var(--line); }
table.facts td { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px;
  overflow-wrap: anywhere; }
.cols > div { min-width: 0; }
table.sortable thead th { cursor: pointer; user-select: none; }
table.sortable thead th[aria-sort="ascending"]::after { content: " \\25B2"; font-size: 10px; }
table.sortable thead th[aria-sort="descending"]::after { content: " \\25BC"; font-size: 10px; }
.verdict { font-weight: 600; border-radius: 3px; padding: 1px 6px 1px 8px; display: inline-block; }
table.matrix { width: 100%; }
td.verdictcell { min-width: 13em; }
td.bar { padding-top: 5px; }
svg.bar { display: block; }
.cols { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 0 36px; align-items: start; }
.cellnote { color: var(--muted); font-size: 11.5px; max-width: 40ch; margin-top: 2px; white-space: normal; }
td.diff { background: rgba(230, 159, 0, 0.18); }
td.more { background: rgba(213, 94, 0, 0.16); font-weight: 600; }
td.fewer { background: rgba(0, 158, 115, 0.16); font-weight: 600; }
td.status-ok { color: #0a6b50; }
td.status-bad { color: #b34700; font-weight: 600; }
figure { margin: 12px 0 22px; }
figure svg, figure img { display: block; width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 12.5px; margin-top: 4px; max-width: 100ch; }
.figs { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 0 32px; align-items: start; }
details { margin: 4px 0; }
details > summary { cursor: pointer; padding: 3px 0; }
details > summary .muted { font-size: 12.5px; }
pre { background: var(--bg-alt); border: 1px solid var(--line); padding: 8px 10px; overflow-x: auto;
  font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; max-height: 28em; margin: 4px 0 10px;
  white-space: pre-wrap; word-break: break-word; }
code { font: 12.5px ui-monospace, "DejaVu Sans Mono", monospace; }
.links a { margin-right: 8px; white-space: nowrap; }
input.filter { font: inherit; padding: 4px 8px; margin: 6px 0 2px; width: 22em; border: 1px solid var(--line);
  border-radius: 4px; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 10px; margin: 6px 0; font-size: 12.5px; }
.wide { overflow-x: auto; max-width: 100%; }
input.allcols { margin: 0 6px 0 0; vertical-align: middle; }
label.allcols { font-size: 12.5px; color: var(--muted); cursor: pointer; }
input.allcols:not(:checked) ~ .wide table.matrix .sec { display: none; }
table.matrix td.outcomes { min-width: 6em; }
table.matrix td.cellname { min-width: 9em; }
table.matrix td.num { white-space: normal; min-width: 5.5em; }
.topfail code { overflow-wrap: anywhere; }
ul.findings { list-style: none; padding: 0; margin: 8px 0 4px; }
li.finding { border-left: 5px solid #8c959f; background: var(--bg-alt); padding: 6px 12px; margin: 5px 0;
  font-size: 14.5px; display: grid; grid-template-columns: 8.5em minmax(0, 1fr); align-items: baseline; }
li.finding.bad { border-color: #D55E00; background: rgba(213, 94, 0, 0.08); }
li.finding.good { border-color: #009E73; background: rgba(0, 158, 115, 0.09); }
.nw { white-space: nowrap; }
li.finding .topic { font-size: 11px; font-weight: 700; letter-spacing: 0.04em;
  text-transform: uppercase; color: var(--muted); }
li.finding > div { overflow-wrap: anywhere; }
.fdetail { color: var(--muted); font-size: 12.5px; }
.fcell { margin: 6px 0 20px; }
.fgroup { border-left: 3px solid #D55E00; padding: 2px 0 2px 12px; margin: 8px 0 14px; }
.fhead .kind { font-weight: 700; color: #b34700; margin-right: 4px; }
.hint { margin: 3px 0 6px; }
.evidence { margin: 4px 0; }
.forensics table.incident { font-size: 12.5px; margin: 4px 0 6px; }
.forensics table.incident td { white-space: nowrap; }
pre.excerpt mark { background: rgba(230, 159, 0, 0.35); color: inherit; }
pre .ln { display: inline-block; min-width: 3.2em; color: #8c959f; user-select: none; }
ul.lines { font-size: 12.5px; margin: 4px 0; }
ul.lines code { overflow-wrap: anywhere; }
table.trials { width: 100%; }
table.trials td.error { max-width: 0; width: 34%; }  /* takes what is left; no min-content */
table.trials td.cellname { min-width: 16em; }
table.trials td.files { min-width: 17em; }
table.trials .links a { display: inline-block; max-width: 9em; overflow: hidden; text-overflow: ellipsis;
  vertical-align: bottom; }
.clamp { display: block; }
span.clamp, details.clamp:not([open]) > summary { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
details.clamp { margin: 0; }
details.clamp > summary { padding: 0; }
details.clamp pre { max-height: 18em; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; border-top: 1px solid var(--line); padding-top: 8px; }
@media print { thead th { position: static; } nav.toc { display: none; } }
"""

# Sorting and filtering only; the page reads the same without it. No `//` anywhere, so the
# file has nothing that looks like a URL.
_JS = """
(function () {
  function key(td) {
    var v = td.getAttribute('data-v');
    if (v === null) { v = td.textContent.trim(); }
    if (v === '' || v === '\\u2014') { return [2, '']; }
    var n = Number(v);
    return isFinite(n) ? [0, n] : [1, v.toLowerCase()];
  }
  function sortBy(table, i, th) {
    var asc = th.getAttribute('aria-sort') !== 'ascending';
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r1, r2) {
      var a = key(r1.cells[i]), b = key(r2.cells[i]);
      if (a[0] !== b[0]) { return a[0] - b[0]; }
      var d = a[1] < b[1] ? -1 : (a[1] > b[1] ? 1 : 0);
      return asc ? d : -d;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      th.tabIndex = 0;
      th.title = 'sort by this column';
      th.addEventListener('click', function () { sortBy(table, i, th); });
      th.addEventListener('keydown', function (e) {
        if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); sortBy(table, i, th); }
      });
    });
  });
  document.querySelectorAll('table.filterable').forEach(function (table) {
    var box = document.createElement('input');
    box.type = 'search'; box.className = 'filter'; box.placeholder = 'filter rows (any text)';
    box.addEventListener('input', function () {
      var q = box.value.toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
        r.style.display = r.textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
      });
    });
    table.parentNode.insertBefore(box, table);
  });
})();
"""


def page(
    *,
    title: str,
    subtitle: str,
    sections: Sequence[Section],
    banners: Sequence[str] = (),
    footer: str = "",
) -> str:
    """The whole HTML document: header, table of contents, ``sections``, footer, the
    stylesheet and the script inline."""
    toc = "".join(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>' for s in sections)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        "<main>",
        f'<header class="page"><h1>{esc(title)}</h1><p class="sub">{esc(subtitle)}</p>',
        f'<nav class="toc">{toc}</nav></header>',
        *banners,
        *(s.html() for s in sections),
        f"<footer>{footer}</footer>" if footer else "",
        "</main>",
        f"<script>{_JS}</script>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(p for p in parts if p)
