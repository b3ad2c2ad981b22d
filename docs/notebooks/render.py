"""Execute the notebooks and write each, with its outputs, as one self-contained HTML page.

    .venv/bin/python docs/notebooks/render.py notebooks docs/notebooks   # what `make docs` runs

The notebooks stay in git without outputs; this runs each in a fresh kernel with ``nbclient``
(installed with the ``test`` extra, through ``nbmake``) from the repository root, and renders it
with the small exporter below — no ``nbconvert``: markdown cells through a minimal converter
(headings, paragraphs, lists, code, links, emphasis), code cells with their outputs (text,
tables as HTML, figures as PNG or SVG data). A notebook that fails stops the run with its
error.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]

_CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  max-width: 1000px; margin: 0 auto; padding: 20px 28px 60px; color: #1b1f24; }
pre { background: #f6f8fa; border: 1px solid #d8dee4; padding: 8px 10px; overflow-x: auto;
  font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre.in { border-left: 4px solid #0072B2; }
pre.err { border-left: 4px solid #D55E00; color: #8a2c00; }
code { font: 13px ui-monospace, "DejaVu Sans Mono", monospace; background: #f6f8fa; padding: 0 3px; }
.out img, .out svg { max-width: 100%; height: auto; }
.out table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
.out th, .out td { border-bottom: 1px solid #d8dee4; padding: 3px 8px; text-align: right; }
h1 { border-bottom: 3px solid #0072B2; padding-bottom: 6px; }
footer { color: #5b6570; font-size: 12px; margin-top: 40px; }
"""


def markdown(text: str) -> str:
    """A small markdown subset as HTML: enough for the notebooks' prose."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    para: list[str] = []

    def flush() -> None:
        if para:
            out.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()

    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            flush()
            block = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                block.append(lines[i])
                i += 1
            out.append(f"<pre>{html.escape(chr(10).join(block))}</pre>")
        elif m := re.match(r"(#{1,6})\s+(.*)", line):
            flush()
            n = len(m.group(1))
            out.append(f"<h{n}>{_inline(m.group(2))}</h{n}>")
        elif m := re.match(r"\s*([-*]|\d+\.)\s+(.*)", line):
            flush()
            tag = "ol" if m.group(1)[0].isdigit() else "ul"
            items = []
            while i < len(lines) and (m := re.match(r"\s*([-*]|\d+\.)\s+(.*)", lines[i])):
                items.append(f"<li>{_inline(m.group(2))}</li>")
                i += 1
            out.append(f"<{tag}>{''.join(items)}</{tag}>")
            continue
        elif not line.strip():
            flush()
        else:
            para.append(line.strip())
        i += 1
    flush()
    return "\n".join(out)


def _inline(text: str) -> str:
    text = html.escape(text)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)
    text = re.sub(r"(?<![\w*])\*([^*]+)\*(?!\w)", r"<i>\1</i>", text)
    # Links stay relative to the repository; an absolute URL is kept as text, not a link.
    return re.sub(r"\[([^\]]+)\]\(([^)\s:]+)\)", r'<a href="\2">\1</a>', text)


def _output(out: dict) -> str:
    kind = out.get("output_type")
    if kind == "stream":
        return f"<pre>{html.escape(''.join(out.get('text', '')))}</pre>"
    if kind == "error":
        tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.get("traceback", [])))
        return f'<pre class="err">{html.escape(tb)}</pre>'
    data = out.get("data", {})
    if "image/png" in data:
        return f'<img alt="figure" src="data:image/png;base64,{data["image/png"].strip()}">'
    if "image/svg+xml" in data:
        svg = "".join(data["image/svg+xml"])
        return re.sub(r"\A.*?(?=<svg\b)", "", svg, count=1, flags=re.S)
    if "text/html" in data:
        return "".join(data["text/html"])
    if "text/plain" in data:
        return f"<pre>{html.escape(''.join(data['text/plain']))}</pre>"
    return ""


def render(nb: nbformat.NotebookNode, title: str) -> str:
    body = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            body.append(markdown(cell.source))
        elif cell.cell_type == "code":
            body.append(f'<pre class="in">{html.escape(cell.source)}</pre>')
            outs = "".join(_output(o) for o in cell.get("outputs", []))
            if outs:
                body.append(f'<div class="out">{outs}</div>')
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}'
        f"</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + f"\n<footer>{html.escape(title)}.ipynb, executed by <code>make docs</code> on {stamp}."
        "</footer></body></html>\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--timeout", type=int, default=900, help="Seconds per cell.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in sorted(args.notebooks.glob("*.ipynb")):
        start = time.monotonic()
        nb = nbformat.read(path, as_version=4)
        NotebookClient(
            nb,
            timeout=args.timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(ROOT)}},
        ).execute()
        target = args.out / f"{path.stem}.html"
        target.write_text(render(nb, path.stem))
        print(f"{target} ({time.monotonic() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
