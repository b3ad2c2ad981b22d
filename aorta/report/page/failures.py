"""The Failures section of a run's ``report.html``: every cell with a trial that failed, hung,
crashed or errored, grouped by failure.

Per cell, one block per failure (its kind and signature): the signature, its hint, the line
the signature matched with the lines around it (the first trial's), then that trial's other
files (logs, collected files) collapsed, and the matched line of the cell's other trials.
A pure function of a :class:`~aorta.report.page.sections.RunPage`; the excerpts are read by
:func:`aorta.report.page.write.read_run_files`. Every text goes through
:func:`~aorta.report.page.kit.esc`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aorta.hang.model import CulpritFrame, GroupIncident, HangReport, NodeEvidence
from aorta.matrix.signatures import signature_hints
from aorta.report.page.kit import Section, esc
from aorta.report.page.sections import (
    STATUS_LABELS,
    LogExcerpt,
    RunPage,
    cell_anchor,
    is_failed_status,
    parse_signature_line,
)

__all__ = ["FAILURE_LABELS", "failure_label", "failures_section"]

#: How a failed trial's kind is named (``outcome_of``'s kinds); an errored trial is named by
#: its status (:data:`~aorta.report.page.sections.STATUS_LABELS`).
FAILURE_LABELS: dict[str, str] = {"hang": "hang", "workload": "failed", "crash": "crash"}
_OTHER_TRIALS = 12  # other trials' matched lines listed per failure
_OWN_LOGS = ("/stderr.log", "/stdout.log")


def failure_label(status: str, kind: str) -> str:
    """The page's name for a trial's failure: its kind (``hang``, ``failed``, ``crash``), or
    its status for an error.

    >>> failure_label("timeout", "hang"), failure_label("setup_failed", "")
    ('hang', 'setup failed')
    """
    return FAILURE_LABELS.get(kind) or STATUS_LABELS.get(status, status)


@dataclass
class _Group:
    label: str
    name: str
    hint: str = ""
    trials: list[int] = field(default_factory=list)
    lines: dict[int, str] = field(default_factory=dict)  # trial → its matched line


def _name_and_line(rec: Mapping[str, Any], sig: str, error: str, status: str) -> tuple[str, str]:
    """(signature or the first line of the error, the matched line) of a failed trial."""
    name = str(rec.get("signature") or sig or "")
    where = parse_signature_line(rec.get("signature_line"))
    line = where[2] if where else ""
    if not name:
        first = (error or str(rec.get("error") or "")).strip().splitlines()
        name = first[0] if first else STATUS_LABELS.get(status, status)
    return name, line


def _arrays(page: RunPage) -> dict[str, Any]:
    """The Dataset's per-trial strings (cell × trial), read once for the whole section."""
    ds = page.ds

    def text(name: str) -> Any:
        return ds[name].transpose("cell", "trial").values.astype(str) if name in ds else None

    return {k: text(k) for k in ("status", "failure_kind", "error", "signature")}


def _groups(
    page: RunPage, i: int, cell: str, hints: Mapping[str, str], arrays: Mapping[str, Any]
) -> list[_Group]:
    status, error = arrays["status"][i], arrays["error"][i]
    kind = arrays["failure_kind"][i] if arrays["failure_kind"] is not None else [""] * len(status)
    sigs = arrays["signature"][i] if arrays["signature"] is not None else None
    groups: dict[tuple[str, str], _Group] = {}
    for j, t in enumerate(int(x) for x in page.ds.trial.values.tolist()):
        if not is_failed_status(status[j]):
            continue
        rec = page.files.records.get((cell, t), {}) if page.files else {}
        name, line = _name_and_line(rec, sigs[j] if sigs is not None else "", error[j], status[j])
        label = failure_label(status[j], kind[j])
        g = groups.setdefault((label, name), _Group(label, name))
        g.trials.append(t)
        g.hint = g.hint or str(
            rec.get("signature_hint") or hints.get(name) or rec.get("hint") or ""
        )
        if line:
            g.lines[t] = line
        elif error[j]:
            g.lines[t] = error[j].strip().splitlines()[0]
    return sorted(groups.values(), key=lambda g: (-len(g.trials), g.label, g.name))


def _numbered(ex: LogExcerpt) -> str:
    rows = []
    for k, line in enumerate(ex.lines):
        n = ex.first + k if ex.first else 0
        num = f'<span class="ln">{n}</span>' if n else ""
        text = esc(line)
        rows.append(f"<mark>{num}{text}</mark>" if n and n == ex.match else f"{num}{text}")
    return '<pre class="excerpt">' + "\n".join(rows) + "</pre>"


def _file_link(page: RunPage, ex: LogExcerpt) -> str:
    return page.anchor(ex.rel, ex.rel.rsplit("/", 1)[-1])


def _ranks(values: Sequence[int]) -> str:
    return ", ".join(str(v) for v in values) if values else "—"


#: Culprits whose stacks a page shows per hung trial.
_CULPRITS_SHOWN = 4


def _group_row(g: GroupIncident) -> str:
    sizes = ", ".join("×".join(str(d) for d in s) for s in g.sizes) or "—"
    dtypes = ", ".join(g.dtypes) or "—"
    cells = [
        g.label,  # as the summary above names it
        g.kind,
        f"{g.op or '—'} #{g.seq}" if g.seq is not None else "—",
        f"{sizes} · {dtypes}",
        _ranks(g.waiting),
        _ranks(g.missing),
        ", ".join(f"{r} (at #{at})" for r, at in g.behind) or "—",
        ", ".join(f"{r} ({code})" for r, code in g.exited) or "—",
        _ranks(g.culprits),
    ]
    return "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>"


def _evidence_link(page: RunPage, cell: str, t: int, file: str | None) -> str:
    """A link to an evidence file the record names (relative to the trial's folder), shown
    by its name; ``""`` when the record names none."""
    if not file:
        return ""
    rel = posixpath.join(page.artifact_rel(cell, t), file)
    return page.anchor(rel, rel.rsplit("/", 1)[-1])


def _stack(page: RunPage, cell: str, t: int, frame: CulpritFrame) -> str:
    """A culprit's main thread as the analysis read it, linked to its stacks file."""
    link = _evidence_link(page, cell, t, frame.stack_file)
    where = f"({link}), " if link else ""
    return (
        f"<details open><summary class=muted>rank {frame.rank}'s main thread "
        f"{where}innermost first</summary><pre>{esc(chr(10).join(frame.stack))}</pre></details>"
    )


def _node(page: RunPage, cell: str, t: int, node: NodeEvidence) -> str:
    """A node's device lines as the record keeps them (never read from its file again: it
    need not be there), linked to the file they came from."""
    link = _evidence_link(page, cell, t, node.file)
    where = f" ({link})" if link else ""
    return (
        f'<div class="node"><span class=muted>node <b>{esc(node.host)}</b>{where}: its GPU '
        f"tools' and kernel log's device lines at the capture, latest last</span>"
        f"<pre>{esc(chr(10).join(node.device_lines))}</pre></div>"
    )


def _incident(page: RunPage, cell: str, t: int, report: HangReport) -> str:
    """A hung trial's incident: its summary, every diverging group as a row, each node's
    device lines, each culprit's stack (kept in the report: the trial's ``hang/`` files need
    not be there)."""
    rows = [_group_row(g) for g in report.groups]
    head = "".join(
        f"<th>{h}</th>"
        for h in ("group", "kind", "collective", "sizes · dtypes", "waiting", "missing",
                  "behind", "exited", "culprits")
    )  # fmt: skip
    table = f'<table class="incident"><tr>{head}</tr>{"".join(rows)}</table>' if rows else ""
    shown = set(report.culprit_ranks[:_CULPRITS_SHOWN])
    stacks = [
        _stack(page, cell, t, f)
        for f in sorted(report.frames, key=lambda f: f.rank)
        if f.rank in shown and f.stack
    ]
    nodes = [_node(page, cell, t, n) for n in report.nodes if n.device_lines]
    note = f'<p class="muted">{esc("; ".join(report.notes))}</p>' if report.notes else ""
    return (
        f'<div class="evidence forensics"><span class="muted">trial {t} · who hung, and '
        "where: every rank's flight recorder and stacks, taken before the kill</span>"
        f"<p><b>{esc(report.summary)}</b></p>{table}{''.join(nodes)}{''.join(stacks)}{note}</div>"
    )


def _evidence(page: RunPage, cell: str, g: _Group) -> str:
    """A hung trial's incident, the matched line with its neighbours (or the error), then the
    trial's other files."""
    t = g.trials[0]
    rec = page.files.records.get((cell, t), {}) if page.files else {}
    excerpts = list(page.files.excerpts.get((cell, t), ())) if page.files else []
    matched = [e for e in excerpts if e.match is not None]
    others = [e for e in excerpts if e.match is None]
    out = []
    report = page.files.forensics.get((cell, t)) if page.files else None
    if report is not None:
        out.append(_incident(page, cell, t, report))
    if matched:
        ex = matched[0]
        out.append(
            f'<div class="evidence"><span class="muted">trial {t} · {_file_link(page, ex)}, '
            f"line {ex.match}: the line the signature matched</span>{_numbered(ex)}</div>"
        )
    else:
        error = str(rec.get("error") or g.lines.get(t) or "")
        if error:
            out.append(
                f'<div class="evidence"><span class="muted">trial {t} · its error</span>'
                f'<pre class="excerpt">{esc(error)}</pre></div>'
            )
    # the trial's own output first, collected files after; with no matched line in a file
    # (a hang, a crash) the end of its output is what there is: shown open
    others.sort(key=lambda e: (not e.rel.endswith(_OWN_LOGS), e.rel))
    for k, ex in enumerate(others):
        opened = " open" if k == 0 and not matched else ""
        out.append(
            f'<details{opened}><summary class="muted">trial {t} · end of {esc(ex.name)} '
            f"({_file_link(page, ex)})</summary><pre>{esc(chr(10).join(ex.lines))}</pre></details>"
        )
    rest = [u for u in g.trials[1:] if u in g.lines][:_OTHER_TRIALS]
    if rest:
        items = "".join(
            f"<li>{_trial_link(page, cell, u)}: <code>{esc(g.lines[u])}</code></li>" for u in rest
        )
        out.append(
            f'<details><summary class="muted">the same failure in {len(g.trials) - 1} other '
            f'trial(s): their lines</summary><ul class="lines">{items}</ul></details>'
        )
    return "".join(out)


def _trial_link(page: RunPage, cell: str, t: int) -> str:
    return page.anchor(page.record_rel(cell, t), f"#{t}") if page.files else f"#{t}"


def failures_section(page: RunPage) -> Section | None:
    """Every cell with a failed, hung, crashed or errored trial: per failure (kind and
    signature) its trials, hint, and the matched line with its neighbours first, then the
    trial's other files; ``None`` when every trial ended ok."""
    ds = page.ds
    hints = signature_hints(ds)
    arrays = _arrays(page)
    status = arrays["status"]
    parts = []
    for i, cell in enumerate(str(c) for c in ds.cell.values.tolist()):
        groups = _groups(page, i, cell, hints, arrays)
        if not groups:
            continue
        recorded = int(sum(s not in ("missing", "did_not_run") for s in status[i]))
        summary = ", ".join(f"{len(g.trials)} {g.label}" for g in groups)
        blocks = [
            f'<div class="fcell" id="{cell_anchor(cell)}">'
            f"<h3>{esc(cell)} <span class=muted>— {esc(summary)} of {recorded} trial(s)</span></h3>"
        ]
        for g in groups:
            links = " ".join(_trial_link(page, cell, t) for t in g.trials)
            hint = g.hint or "no hint: the signature library has none for this failure"
            blocks.append(
                '<div class="fgroup">'
                f'<div class="fhead"><span class="kind">{esc(g.label)}</span> '
                f"<code>{esc(g.name)}</code> <span class=muted>in {len(g.trials)} trial(s):</span> "
                f'<span class="links">{links}</span></div>'
                f'<div class="hint"><b>hint</b> {esc(hint)}</div>'
                f"{_evidence(page, cell, g)}</div>"
            )
        blocks.append("</div>")
        parts.append("".join(blocks))
    if not parts:
        return None
    intro = (
        '<p class="note">Every cell with a trial that failed, hung, crashed or errored, one '
        "block per failure: its signature and hint, the line the signature matched with the "
        "lines around it, then the trial's other files.</p>"
    )
    return Section("failures", "Failures", intro + "\n".join(parts))
