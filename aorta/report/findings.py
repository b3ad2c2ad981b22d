"""The findings as people read them: one line per :class:`~aorta.matrix.findings.Finding`.

Every page that tells what changed renders the same model (:func:`aorta.matrix.findings.findings`)
through :func:`finding_text` (a straggler through :func:`straggler_text`): ``matrix.md``'s Findings, the end-of-run summary, ``aorta
compare`` and ``report.md``. :func:`run_findings` builds the model of a run's Dataset —
the list ``report.html`` renders.

Examples
--------
>>> from aorta.matrix.findings import Finding
>>> f = Finding(kind="failures", cell="fix", count=0, ran=8, baseline_count=4, baseline_ran=8,
...             p_adj=0.056, direction="fewer", trials_to_decide=10, baseline="base",
...             baseline_kinds={"workload": 4}, baseline_signatures={"nccl_error": 4})
>>> print(finding_text(f, run="runs/x", style="text"))
fix: fails in 0/8 trials, baseline 4/8 (baseline: nccl_error 4) — fewer failures, not yet significant (Boschloo p_adj 0.056): about 2 more trials per cell would decide: aorta sweep extend runs/x --trials 10 --cells base,fix
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
import xarray as xr

from aorta.matrix import stats
from aorta.matrix.findings import Finding, findings
from aorta.matrix.load import load_run
from aorta.matrix.options import StatsOptions
from aorta.matrix.rank_causes import with_rank_causes
from aorta.matrix.signatures import signature_counts
from aorta.matrix.summary import summarize
from aorta.report.comparison import ms_text, p_text, plain, verdict_text
from aorta.store.rundir import RunDir, aorta_command

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from aorta.matrix.options import StatsKeywords

__all__ = [
    "comparison_findings",
    "finding_json",
    "finding_text",
    "findings_lines",
    "findings_markdown",
    "nothing_found",
    "run_findings",
    "straggler_text",
]

Style = Literal["markdown", "text"]
_VERBS = {"hang": "hangs", "crash": "crashes", "workload": "fails"}
#: Screen lines shown in the terminal before "… and N more".
SCREEN_LINES_TEXT = 10


def run_findings(
    ds: xr.Dataset,
    *,
    options: StatsOptions | None = None,
    **overrides: Unpack[StatsKeywords],
) -> list[Finding]:
    """The findings of a run's Dataset (:func:`aorta.load_run`): its matrix
    (:func:`aorta.matrix.summary.summarize`, with ``options`` and the keywords overriding
    them as there) with its failure signatures, failures and hangs first — what
    ``matrix.md``, ``report.md`` and ``report.html`` show.

    Examples
    --------
    >>> from aorta.matrix.dataset import build_dataset
    >>> from aorta.store.record import TrialRecord
    >>> recs = [TrialRecord(cell=c, cell_id="", trial=t, status=s, passed=s == "ok", step_times_ms=[5.0])
    ...         for c, s in (("base", "ok"), ("stuck", "timeout")) for t in range(8)]
    >>> ds = build_dataset([{"name": c, "trials": 8} for c in ("base", "stuck")], recs,
    ...                    attrs={"baseline": "base", "threshold": 1.15})
    >>> [f.kind for f in run_findings(ds, resamples=200)]
    ['failures', 'no_timing']
    """
    summary = summarize(ds, options=options, **overrides)
    return findings(summary, signature_counts(ds))


def comparison_findings(df: pd.DataFrame, runs: Sequence[str | Path]) -> list[Finding]:
    """The findings of ``aorta compare``'s frame: with one run, its failure signatures too
    (unless the frame already counts one signature, ``attrs["signature"]``)."""
    signatures = None
    if len(runs) == 1 and not df.attrs.get("signature"):
        ds = load_run(runs[0])
        signatures = signature_counts(ds)
        df = with_rank_causes(df, ds)  # which rank ran out of memory, or went non-finite
    return findings(df, signatures)


def _code(text: str, style: Style) -> str:
    return f"`{text}`" if style == "markdown" else text


def _bold(text: str, style: Style) -> str:
    return f"**{text}**" if style == "markdown" else text


def _verb(f: Finding) -> str:
    if f.kind == "failure_kind":
        return _VERBS.get(f.subject, "fails")
    if f.kind == "signature":
        return ""
    kinds = {k for k, n in {**f.kinds, **f.baseline_kinds}.items() if n}
    return _VERBS[next(iter(kinds))] if len(kinds) == 1 else "fails"


def _signatures(f: Finding, style: Style) -> str:
    parts = []
    said = {"hang"} if _verb(f) == "hangs" else set()  # the hang signature is the kind itself
    for who, sigs, n in (
        ("cell", f.signatures, f.count),
        ("baseline", f.baseline_signatures, f.baseline_count),
    ):
        sigs = {s: k for s, k in sigs.items() if s not in said}
        if sigs and n:
            named = ", ".join(f"{_code(s, style)} {n}" for s, n in sigs.items())
            parts.append(f"{who}: {named}")
    return f" ({'; '.join(parts)})" if parts else ""


def _extend(f: Finding, run: str | Path | None, trials: int, style: Style) -> str:
    """The command that grows the run to ``trials`` per cell, the finding's two cells only."""
    cells = ",".join(c for c in (f.baseline, f.cell) if c)
    cmd = f"sweep extend {shlex.quote(str(run or 'RUN'))} --trials {trials}"
    if cells:
        cmd += f" --cells {shlex.quote(cells)}"
    # As the run was launched: a distributed run grows only under its launcher (torchrun …).
    return _code(RunDir(run).command(cmd) if run else aorta_command(cmd), style)


def _raise_cap(f: Finding, run: str | Path | None, style: Style) -> str:
    """An adaptive cell undecided at its cap: raising the cap lets it run on under the same
    anytime-valid rule (decided cells stay stopped), so any higher cap is safe; twice the cap."""
    return (
        f"undecided at its cap of {f.undecided_at} trials; raise the cap and it stops once "
        f"settled: {_extend(f, run, 2 * (f.undecided_at or 0), style)}"
    )


def _next_step(f: Finding, run: str | Path | None, style: Style) -> str:
    if f.sequential:  # adaptive: the schedule decides when to stop, not a fixed-n projection
        return f"; {_raise_cap(f, run, style)}" if f.undecided_at is not None else ""
    if f.trials_to_decide is None:
        return "; no trial count up to 200 per cell would decide at these rates"
    more = f.trials_to_decide - max(f.ran, f.baseline_ran)
    return (
        f": about {more} more {'trial' if more == 1 else 'trials'} per cell would decide: "
        f"{_extend(f, run, f.trials_to_decide, style)}"
    )


def _event_text(f: Finding, run: str | Path | None, style: Style) -> str:
    what = {
        "failures": "failures",
        "failure_kind": {"hang": "hangs", "crash": "crashes"}.get(f.subject, "workload failures"),
        "signature": f"{_code(f.subject, style)} failures",
    }[f.kind]
    verb = _verb(f)
    head = (
        f"{verb} in {f.count}/{f.ran} trials"
        if verb
        else f"{_code(f.subject, style)} in {f.count}/{f.ran} trials"
    )
    if f.kind == "failures" and len(f.kinds) > 1:
        head += f" ({', '.join(f'{n} {k}' for k, n in f.kinds.items())})"
    head = f"{head}, baseline {f.baseline_count}/{f.baseline_ran}"
    if f.kind == "failures" and len(f.baseline_kinds) > 1:
        head += f" ({', '.join(f'{n} {k}' for k, n in f.baseline_kinds.items())})"
    sigs = _signatures(f, style) if f.kind != "signature" else ""
    test = "anytime" if f.sequential and f.kind == "failures" else "Boschloo"
    # Who hung and where, where the finding is about hangs.
    hang = f"; {f.hang}" if f.hang and (f.kinds.get("hang") or f.subject == "hang") else ""
    if f.significant:
        return (
            f"{_code(f.cell, style)}: {_bold(head, style)}{sigs} — {f.direction} {what}, "
            f"{test} p_adj {p_text(f.p_adj)}{hang}"
        )
    return (
        f"{_code(f.cell, style)}: {head}{sigs} — {f.direction} {what}, not yet significant "
        f"({test} p_adj {p_text(f.p_adj)}){_next_step(f, run, style)}{hang}"
    )


def _screen_text(f: Finding, style: Style) -> str:
    ratio = f.row.get("ratio")
    effect = "—"
    if isinstance(ratio, float | int) and math.isfinite(ratio):
        effect = f"{(ratio - 1) * 100:+.0f}%"
    text = f"{_code(f.cell, style)}: {effect} ({int(f.row.get('n_timed', 0) or 0)} timed trial(s))"
    if f.count:
        kinds = ", ".join(f"{n} {k}" for k, n in f.kinds.items()) or "failed"
        text += f", failed {f.count}/{f.ran} ({kinds})"
    return text


def straggler_text(f: Finding, *, style: Style = "markdown") -> str:
    """A ``straggler`` finding as one line: which rank, in how many trials, what it costs.

    >>> f = Finding(kind="straggler", cell="fsdp_bad_link", subject="traces", count=8, ran=8,
    ...             rank=3, share_pct=91.2, per_step_ms=14.2)
    >>> print(straggler_text(f, style="text"))
    fsdp_bad_link: rank 3 was the last to enter 91% of collectives in 8/8 trials, +14.2 ms per step (traces)
    >>> print(straggler_text(Finding(kind="straggler", cell="slow", subject="workload", count=7, ran=8,
    ...                              rank=1, per_step_ms=9.04)))
    `slow`: **rank 1** waited least at collectives (computed longest) in 7/8 trials, +9.04 ms per step (workload timing)
    """
    who = _bold(f"rank {f.rank}", style)
    if f.subject == "traces" and math.isfinite(f.share_pct):
        what = f"was the last to enter {f.share_pct:.0f}% of collectives"
    else:
        what = "waited least at collectives (computed longest)"
    source = "traces" if f.subject == "traces" else "workload timing"
    return (
        f"{_code(f.cell, style)}: {who} {what} in {f.count}/{f.ran} trials, "
        f"+{ms_text(f.per_step_ms)} ms per step ({source})"
    )


def finding_text(f: Finding, *, run: str | Path | None = None, style: Style = "markdown") -> str:
    """One finding as one line (no bullet): ``markdown`` (code and bold marks) or ``text``.

    ``run`` names the run directory in the next-step command (``aorta sweep extend RUN``).
    """
    if f.kind in ("failures", "failure_kind", "signature"):
        return _event_text(f, run, style)
    if f.kind == "straggler":
        return straggler_text(f, style=style)
    cell = _code(f.cell, style)
    if f.kind in ("oom", "numerics", "memory"):  # the line of aorta.matrix.rank_causes
        return f"{cell}: {f.reason if style == 'markdown' else f.reason.replace('`', '')}"
    if f.kind == "no_timing":
        return f"{cell}: no step time — {f.reason}: a killed or failed trial's clock is not a step time"
    if f.kind == "stalls":
        return (
            f"{cell}: {_bold('stalls', style)} — its 95th-percentile step is "
            f"{float(f.row.get('p95_ratio', math.nan)):.3g}× the baseline's (significantly, "
            "beyond the band) while its median is not beyond the band"
        )
    if f.kind == "screen":
        return _screen_text(f, style)
    verdict = verdict_text(f.row, reason=f.reason)
    if f.significant:
        return f"{cell}: {_bold(verdict, style)}, p_adj {p_text(f.p_adj)}"
    if f.undecided_at is not None and run is not None:
        return f"{cell}: {verdict} — {_raise_cap(f, run, style)}"
    n = int(f.row.get("n", 0) or 0)
    if f.trials_to_decide is not None and run is not None and f.trials_to_decide > n:
        return f"{cell}: {verdict} — next: {_extend(f, run, f.trials_to_decide, style)}"
    return f"{cell}: {verdict}"


def _screen_head(screen: Sequence[Finding]) -> str:
    needed = max((f.trials_to_decide or 0 for f in screen), default=0)
    timed = max((int(f.row.get("n_timed", 0) or 0) for f in screen), default=0)
    return (
        f"Screen ({timed} timed trial(s) per cell at most): no verdicts — verdicts need "
        f"≥ {max(needed, stats.MIN_TIMED)} trials per cell. Cells by effect size on the baseline:"
    )


def findings_lines(
    items: Sequence[Finding],
    *,
    run: str | Path | None = None,
    style: Style = "markdown",
    limit: int | None = None,
    bullet: str = "- ",
) -> list[str]:
    """The findings as lines: one per finding (``bullet`` before each), the screen's cells
    (at most ``limit``, then ``… and N more``) under one line that says it is a screen."""
    lines = [bullet + finding_text(f, run=run, style=style) for f in items if f.kind != "screen"]
    screen = [f for f in items if f.kind == "screen"]
    if screen:
        shown = screen if limit is None else screen[:limit]
        lines.append(bullet + _screen_head(screen))
        pad = " " * len(bullet)
        lines += [f"{pad}{bullet}{finding_text(f, run=run, style=style)}" for f in shown]
        if len(shown) < len(screen):
            lines.append(f"{pad}{bullet}… and {len(screen) - len(shown)} more")
    return lines


def nothing_found(
    summary: pd.DataFrame | None = None, *, alpha: float | None = None, style: Style = "markdown"
) -> str:
    """What to say when there is no finding: no cell differs from the baseline — and, where
    trials failed anyway (every cell alike, or a run of the baseline alone), which cells failed
    how often: no difference is not a pass.

    ``summary``: the matrix or comparison frame (``n_ok``, ``n_failed``, ``n_errors``).

    >>> df = pd.DataFrame({"n_ok": [0, 3], "n_failed": [2, 0], "n_errors": [0, 0]},
    ...                   index=pd.Index(["base", "fix"], name="cell"))
    >>> nothing_found(df, alpha=0.05, style="text")
    'no cell differs from the baseline in failures or timing at α = 0.05 — yet trials failed: base 2/2'
    """
    at = f" at α = {alpha}" if alpha is not None else ""
    text = f"no cell differs from the baseline in failures or timing{at}"
    if summary is None or "n_failed" not in summary.columns:
        return text
    bad = []
    for cell, row in summary.iterrows():
        failed = int(row["n_failed"]) + int(row.get("n_errors", 0) or 0)
        if failed:
            ran = failed + int(row["n_ok"])
            bad.append(f"{_code(str(cell), style)} {failed}/{ran}")
    return f"{text} — yet trials failed: {', '.join(bad)}" if bad else text


def findings_markdown(
    items: Sequence[Finding],
    *,
    run: str | Path | None = None,
    alpha: float | None = None,
    summary: pd.DataFrame | None = None,
) -> str:
    """The ``## Findings`` section (markdown): failures and hangs first, then timing; when the
    list is empty, :func:`nothing_found` of ``summary`` (the frame the findings came from)."""
    lines = findings_lines(items, run=run)
    if not lines:
        lines = ["- " + nothing_found(summary, alpha=alpha)]
    return "\n".join(["## Findings", "", *lines]) + "\n"


def finding_json(f: Finding, *, run: str | Path | None = None) -> dict[str, Any]:
    """A finding as plain JSON data (``matrix.json``'s ``findings``): its fields (without the
    comparison row) and its ``text`` line (:func:`finding_text`, plain style)."""
    out: dict[str, Any] = {
        k: plain(dict(v) if isinstance(v, Mapping) else v) for k, v in vars(f).items() if k != "row"
    }
    out["text"] = finding_text(f, run=run, style="text")
    return out
