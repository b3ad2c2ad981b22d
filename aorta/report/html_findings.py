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

from dataclasses import dataclass
from typing import Any, Literal

from aorta.matrix.signatures import signature_hints, top_signatures
from aorta.report.comparison import is_missing, p_text, verdict_text
from aorta.report.html_kit import Section, esc
from aorta.report.html_sections import RunPage

__all__ = ["PageFinding", "finding_item", "findings_section", "page_findings"]

#: What a finding is about, in the order the page lists them.
Topic = Literal["hang", "failures", "fix", "undecided", "timing", "no data"]
_ORDER: tuple[str, ...] = ("hang", "failures", "fix", "undecided", "no data", "timing")
_HANG_HINT = "the trials hit their deadline or went silent: py-spy dump (or gdb) on a rerun shows where they wait"


@dataclass(frozen=True)
class PageFinding:
    """One line of the page's findings: the ``cell`` it is about, its ``topic`` (``hang``,
    ``failures``, ``fix``, ``undecided``, ``timing``, ``no data``), its ``tone`` (``bad``,
    ``good`` or ``neutral``: the colour), the sentence (``text``) and a ``detail`` line
    (a hint, the next command) shown under it."""

    cell: str
    topic: Topic
    tone: Literal["bad", "good", "neutral"]
    text: str
    detail: str = ""


def _ran(row: Any) -> int:
    return int(row["n_ok"]) + int(row["n_failed"])


def _significant(row: Any, alpha: float) -> bool:
    return not is_missing(row["failure_p_adj"]) and float(row["failure_p_adj"]) < alpha


def page_findings(page: RunPage) -> list[PageFinding]:
    """The findings the page opens with, failures and hangs first, then timing.

    Built from the matrix frame (:attr:`RunPage.summary`) and the Dataset's failure
    signatures: per cell its hangs (against the baseline's), its failures against the
    baseline's (more, fewer, or a difference not yet significant, with Boschloo's p_adj),
    then the timing verdicts that found a difference and the cells with no timed trial.
    """
    df = page.summary
    alpha = float(df.attrs.get("alpha", 0.05))
    base_name = str(df.attrs.get("baseline") or "")
    base = df.loc[base_name] if base_name in df.index else None
    tops = top_signatures(page.ds)
    hints = signature_hints(page.ds)
    out: list[PageFinding] = []

    def vs_base(key: str) -> str:
        if base is None:
            return ""
        return f"; baseline {int(base[key])}/{_ran(base)}"

    def top(cell: str) -> tuple[str, str]:
        name = str(tops.get(cell, "") or "")
        return (f" ({name})" if name else ""), hints.get(name, "")

    run = str(page.files.path) if page.files else "RUN"
    for cell, row in df.iterrows():
        cell = str(cell)
        ran, failed, hung = _ran(row), int(row["n_failed"]), int(row["n_failed_hang"])
        is_base = cell == base_name
        p = "" if is_base else f", Boschloo p_adj {p_text(row['failure_p_adj'])}"
        if hung:
            text = f"{cell} hangs in {hung}/{ran} trials"
            text += ("" if is_base else vs_base("n_failed_hang")) + p
            out.append(PageFinding(cell, "hang", "bad", text, hints.get("hang", _HANG_HINT)))
        if is_base or base is None:
            if failed > hung:
                name, hint = top(cell)
                text = f"baseline {cell} fails {failed - hung}/{ran} trials{name}"
                out.append(PageFinding(cell, "failures", "bad", text, hint))
            continue
        vs = str(row["failures_vs_baseline"])
        change = f"failures {int(base['n_failed'])}/{_ran(base)} → {failed}/{ran}"
        if vs == "more" and failed > hung:
            name, hint = top(cell)
            out.append(
                PageFinding(cell, "failures", "bad", f"{cell}: more {change}{name}{p}", hint)
            )
        elif vs == "fewer":
            out.append(PageFinding(cell, "fix", "good", f"{cell}: fewer {change}{p}"))
        elif not hung and ran and _ran(base) and failed / ran != int(base["n_failed"]) / _ran(base):
            n = int(row["n_trials"])
            text = f"{cell}: {change}{p} — not significant at α={alpha:g} yet"
            more = (
                f"more trials per cell would decide, e.g. aorta sweep extend {run} --trials {2 * n}"
            )
            out.append(PageFinding(cell, "undecided", "neutral", text, more))
    for cell, row in df.iterrows():
        cell = str(cell)
        if cell == base_name:
            continue
        if str(row["difference"]) in ("slower", "faster"):
            tone = "bad" if row["difference"] == "slower" else "good"
            out.append(PageFinding(cell, "timing", tone, f"{cell}: {verdict_text(row)}"))
        elif is_missing(row["median"]) and int(row["n_ok"]):
            out.append(
                PageFinding(
                    cell, "no data", "neutral", f"{cell}: no step time — no trial of it was timed"
                )
            )
    return sorted(out, key=lambda f: _ORDER.index(f.topic))


def finding_item(f: PageFinding) -> str:
    """One finding as a list item (every text through :func:`~aorta.report.html_kit.esc`)."""
    detail = f'<div class="fdetail">{esc(f.detail)}</div>' if f.detail else ""
    topic = f'<span class="topic">{esc(f.topic)}</span>'
    return f'<li class="finding {esc(f.tone)}">{topic}<div>{esc(f.text)}{detail}</div></li>'


def findings_section(page: RunPage) -> Section:
    """What changed, failures and hangs first, then timing (:func:`page_findings`)."""
    found = page_findings(page)
    if not found:
        body = (
            '<p class="note">Nothing changed: no cell fails, hangs or times differently '
            "from the baseline.</p>"
        )
    else:
        body = '<ul class="findings">' + "\n".join(finding_item(f) for f in found) + "</ul>"
    return Section("findings", "Findings", body)
