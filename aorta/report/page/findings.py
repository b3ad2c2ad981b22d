"""The first section of a run's ``report.html``: what changed, failures and hangs first.

An on-call engineer opens the page to learn which cell hangs, which mitigation changes the
failures and what to run next; the matrix below holds the numbers. :func:`page_findings` is
the one place that turns the page's data into findings (:class:`PageFinding`), so the page
follows the findings model of the rest of aorta by changing that function alone;
:func:`findings_section` only lays them out.

Examples
--------
>>> f = PageFinding(cell="x", topic="hang", tone="bad", text="x hangs in 8/8 trials")
>>> print(finding_item(f))
<li class="finding bad"><span class="topic">hang</span><div>x hangs in 8/8 trials</div></li>
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from aorta.matrix.findings import Finding, findings
from aorta.matrix.signatures import signature_counts, signature_hints
from aorta.report.findings import finding_text, nothing_found
from aorta.report.page.kit import Section, esc
from aorta.report.page.sections import RunPage

__all__ = ["PageFinding", "finding_item", "findings_section", "page_findings"]

#: What a finding is about (its label on the page).
Topic = Literal[
    "hang",
    "failures",
    "memory",
    "numerics",
    "fix",
    "undecided",
    "timing",
    "straggler",
    "no data",
    "screen",
]
_HANG_HINT = "the trials hit their deadline or went silent: py-spy dump (or gdb) on a rerun shows where they wait"
_STRAGGLER_HINT = (
    "every collective waits for the slowest rank: look at that rank's host — its GPU's clocks "
    "and temperature, its input pipeline, its network link — or rerun with the rank's node swapped"
)

_OOM_HINT = (
    "see docs/memory.md: with reserved-but-unallocated memory, PYTORCH_CUDA_ALLOC_CONF / "
    "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True; else a smaller micro-batch or activation "
    "checkpointing; `aorta trace memory` on that rank's trace shows what peaked"
)
_NUMERICS_HINT = (
    "see docs/memory.md: run that layer in fp32 (bf16/fp16 overflow), check the loss scale, "
    "and compare with the tf32_off / fp32 cells"
)


@dataclass(frozen=True)
class PageFinding:
    """One line of the page's findings: the ``cell`` it is about, its ``topic`` (``hang``,
    ``failures``, ``fix``, ``undecided``, ``timing``, ``straggler``, ``no data``), its ``tone`` (``bad``,
    ``good`` or ``neutral``: the colour), the sentence (``text``) and a ``detail`` line
    (a hint, the next command) shown under it."""

    cell: str
    topic: Topic
    tone: Literal["bad", "good", "neutral"]
    text: str
    detail: str = ""


def _topic(f: Finding) -> tuple[Topic, Literal["bad", "good", "neutral"]]:
    """Where a finding of the shared model goes on the page, and its colour."""
    if f.kind in ("failures", "failure_kind", "signature"):
        hangs = f.kinds.get("hang", 0) if f.kind == "failures" else f.subject == "hang"
        if f.direction == "more":
            return ("hang" if hangs else "failures"), "bad"
        return ("fix", "good") if f.significant else ("undecided", "neutral")
    if f.kind == "no_timing":
        return "no data", "neutral"
    if f.kind == "screen":
        return "screen", "neutral"
    if f.kind == "straggler":
        return "straggler", "bad"
    if f.kind in ("oom", "memory"):
        return "memory", "bad"
    if f.kind == "numerics":
        return "numerics", "bad"
    direction = f.direction or str(f.row.get("difference", ""))
    tone = {"slower": "bad", "faster": "good"}.get(direction, "neutral")
    return "timing", "bad" if f.kind == "stalls" else tone  # type: ignore[return-value]


def _hint(f: Finding, hints: Mapping[str, str]) -> str:
    """The hint of the signature that names most of the finding's failures (the baseline's
    when the cell fails less: what went away)."""
    if f.kind == "signature":
        return hints.get(f.subject, "")
    if f.kind == "straggler":
        return _STRAGGLER_HINT
    if f.kind in ("oom", "memory"):
        return _OOM_HINT
    if f.kind == "numerics":
        return _NUMERICS_HINT
    sigs = f.baseline_signatures if f.direction == "fewer" else f.signatures
    if f.kind == "failures" and f.kinds.get("hang") and f.direction == "more":
        return hints.get("hang", _HANG_HINT)
    top = max(sigs.items(), key=lambda kv: kv[1], default=("", 0))[0]
    return hints.get(top, "")


def page_findings(page: RunPage) -> list[PageFinding]:
    """The findings the page opens with: the shared model
    (:func:`aorta.matrix.findings.findings` of the matrix frame and the run's failure
    signatures, worded by :func:`aorta.report.findings.finding_text`), hangs first, each
    with its signature's hint."""
    items = findings(page.summary, signature_counts(page.ds))
    hints = signature_hints(page.ds)
    run = page.files.path if page.files else None
    out = []
    for f in items:
        topic, tone = _topic(f)
        text = finding_text(f, run=run, style="text")
        out.append(PageFinding(f.cell, topic, tone, text, _hint(f, hints)))
    return sorted(out, key=lambda f: f.topic != "hang")


def finding_item(f: PageFinding) -> str:
    """One finding as a list item (every text through :func:`~aorta.report.page.kit.esc`)."""
    detail = f'<div class="fdetail">{esc(f.detail)}</div>' if f.detail else ""
    topic = f'<span class="topic">{esc(f.topic)}</span>'
    return f'<li class="finding {esc(f.tone)}">{topic}<div>{esc(f.text)}{detail}</div></li>'


def findings_section(page: RunPage) -> Section:
    """What changed, failures and hangs first, then timing (:func:`page_findings`)."""
    found = page_findings(page)
    if not found:
        # The words matrix.md says: "nothing changed" must not read as "nothing fails".
        said = nothing_found(page.summary, alpha=page.summary.attrs.get("alpha"), style="text")
        body = f'<p class="note">{esc(said[:1].upper() + said[1:])}.</p>'
    else:
        body = '<ul class="findings">' + "\n".join(finding_item(f) for f in found) + "</ul>"
    return Section("findings", "Findings", body)
