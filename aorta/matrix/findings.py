"""What changed, cell by cell: the findings of a comparison, failures and hangs first (pure).

:func:`findings` turns a comparison frame (:func:`aorta.compare`,
:func:`aorta.matrix.summary.summarize` or :func:`aorta.compare_runs`) and, optionally, the
run's failure-signature counts (:func:`aorta.matrix.signatures.signature_counts`) into one
ordered list of :class:`Finding` records — the one model every page renders (``matrix.md``'s
Findings, the end-of-run summary, ``aorta compare``, ``report.md``, ``report.html``; see
:mod:`aorta.report.findings` for the text). In order:

1. ``failures`` — a cell whose failure rate differs from the baseline's: counts, Boschloo
   ``p_adj`` (Holm over the cells) and, when not yet significant, about how many trials per
   cell would decide if the observed rates held (:func:`trials_to_decide`). Significant ones
   first. The kind (hang, crash, workload) and the signatures of both cells ride along.
2. ``failure_kind`` / ``signature`` — one kind or signature whose rate differs while the
   overall failure count does not tell it (say 4 workload failures became 4 hangs), each
   tested the same way (Holm over the cells, per kind or signature).
3. ``no_timing`` — a cell none of whose trials ended ok: it has no step time, and why.
4. ``timing`` — a cell ``slower`` / ``faster`` than the baseline, or whose band is
   ``undecided`` (with the reason); ``stalls`` — a cell whose 95th-percentile step stalls.
5. ``straggler`` — a cell of several ranks in which one rank keeps the others waiting in most
   of its ok trials (:func:`aorta.matrix.stragglers.stragglers`, read from the frame's
   ``straggler_*`` columns: :func:`aorta.matrix.summary.summarize` has them): which rank, in
   how many trials, the share of collectives it entered last (traces) and what it costs per
   step. After timing, which it explains; the baseline too, since a slow rank is a finding
   whichever cell it is in.
6. ``screen`` — when no timing test can reach significance at these trial counts (a 1-trial
   screen), the cells ranked by effect size instead of a verdict each.

Examples
--------
>>> import pandas as pd
>>> rows = {"base": dict(n_ok=4, n_failed=4, n_failed_workload=4, n_failed_hang=0, n_failed_crash=0),
...         "fix": dict(n_ok=8, n_failed=0, n_failed_workload=0, n_failed_hang=0, n_failed_crash=0)}
>>> df = pd.DataFrame.from_dict(rows, orient="index")
>>> df["difference"] = ["baseline", "no data"]
>>> df["failure_p_adj"] = [float("nan"), 0.056]
>>> df.attrs = {"alpha": 0.05, "baseline": "base"}
>>> f = findings(df)[0]
>>> f.kind, f.cell, (f.count, f.ran), (f.baseline_count, f.baseline_ran), f.direction, f.trials_to_decide
('failures', 'fix', (0, 8), (4, 8), 'fewer', 9)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import pandas as pd

from aorta.matrix import stats
from aorta.matrix.select import DEFAULT_THRESHOLD

__all__ = [
    "FAILURE_KINDS",
    "Finding",
    "FindingKind",
    "findings",
    "is_screen",
    "trials_to_decide",
    "undecided_reason",
]

#: The kinds of a failed trial, as the comparison counts them (``n_failed_<kind>``).
FAILURE_KINDS: tuple[str, ...] = ("hang", "crash", "workload")
#: What a finding is about (the order :func:`findings` lists them in).
FindingKind = Literal[
    "failures",
    "failure_kind",
    "signature",
    "oom",
    "numerics",
    "memory",
    "no_timing",
    "timing",
    "stalls",
    "straggler",
    "screen",
]
_ORDER = {k: i for i, k in enumerate(FindingKind.__args__)}  # type: ignore[attr-defined]
#: Trials per cell :func:`trials_to_decide` looks up to.
DECIDE_LIMIT = 200


@functools.lru_cache(maxsize=4096)
def _boschloo(k: int, n: int, kb: int, nb: int) -> float:
    """Boschloo's p of one 2×2 table, remembered: the same table recurs across kinds,
    signatures and the projection's search (each exact test costs milliseconds)."""
    return stats.failure_p(k, n, kb, nb)


@dataclass(frozen=True)
class Finding:
    """One thing that changed (or might have) in one cell against its baseline.

    ``count`` of ``ran`` trials are the event (failures, a kind, a signature) in the cell,
    ``baseline_count`` of ``baseline_ran`` in the baseline. ``direction``: ``more`` /
    ``fewer`` for failures, ``slower`` / ``faster`` / ``undecided`` for timing. ``p_adj``:
    Boschloo (failures) or Mann–Whitney (timing), Holm-adjusted. ``trials_to_decide``: trials
    per cell at which the observed difference would be significant (None: it already is, or no
    count up to :data:`DECIDE_LIMIT` would). ``reason``: why a timing band is undecided or a
    cell has no timing. ``kinds`` / ``signatures`` / ``baseline_kinds`` /
    ``baseline_signatures``: the failed trials by kind and by signature. ``row``: the cell's
    comparison row as plain values (timing findings render its verdict from it).
    ``sequential``: the comparison is anytime-valid (an adaptive run, ``compare(sequential=True)``):
    ``p_adj`` is its anytime p (Bonferroni), and no fixed-n ``trials_to_decide`` is projected.
    ``undecided_at``: such a cell that ran all of its cap (``max_trials``, or what an extension
    raised it to) without a settled verdict — the trials per cell it ran.
    A ``straggler`` finding: ``rank`` is the slow one, straggler in ``count`` of ``ran`` ok
    trials; ``subject`` the source (``traces`` or ``workload``); ``share_pct`` the share of
    collectives it entered last (traces; NaN otherwise); ``per_step_ms`` how long per step the
    other ranks waited for it.
    """

    kind: FindingKind
    cell: str
    subject: str = "failures"
    count: int = 0
    ran: int = 0
    baseline_count: int = 0
    baseline_ran: int = 0
    p_adj: float = math.nan
    direction: str = ""
    significant: bool = False
    trials_to_decide: int | None = None
    reason: str = ""
    baseline: str = ""
    kinds: Mapping[str, int] = field(default_factory=dict, compare=False)
    baseline_kinds: Mapping[str, int] = field(default_factory=dict, compare=False)
    signatures: Mapping[str, int] = field(default_factory=dict, compare=False)
    baseline_signatures: Mapping[str, int] = field(default_factory=dict, compare=False)
    row: Mapping[str, Any] = field(default_factory=dict, compare=False)
    sequential: bool = False
    undecided_at: int | None = None
    #: Who hung and where, over the cell's hung trials (:func:`aorta.matrix.hangs.hang_incidents`):
    #: one line, ``""`` when the cell did not hang or nothing was captured.
    hang: str = ""
    rank: int | None = None
    share_pct: float = math.nan
    per_step_ms: float = math.nan


def _adaptive(row: Mapping[str, Any], sequential: bool) -> dict[str, Any]:
    """A sequential comparison's fields of a cell's findings: whether it is undecided at its
    cap (ran every planned trial, ``n_trials``; all it ran when the frame has no plan)."""
    if not sequential:
        return {}
    ran = _int(row.get("n_ok")) + _int(row.get("n_failed")) + _int(row.get("n_errors"))
    cap = _int(row.get("n_trials")) or ran
    undecided = not bool(row.get("decided", True)) and ran >= cap > 0
    return {"sequential": True, "undecided_at": cap if undecided else None}


def _int(v: Any) -> int:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return 0
    return int(f) if math.isfinite(f) else 0


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def trials_to_decide(
    count: int,
    ran: int,
    baseline_count: int,
    baseline_ran: int,
    *,
    alpha: float = stats.DEFAULT_ALPHA,
    multiplier: float = 1.0,
    limit: int = DECIDE_LIMIT,
) -> int | None:
    """Trials per cell at which the two failure rates, if they held, would differ
    significantly: the smallest ``n`` above both trial counts so far with Boschloo's p (×
    ``multiplier``, the Holm factor of the family) below ``alpha`` at ``round(rate × n)``
    failures in each cell. None when the rates are equal or no ``n`` up to ``limit`` decides.

    A projection, not a promise: the rates seen so far are estimates (see docs/statistics.md).

    >>> trials_to_decide(0, 8, 4, 8, multiplier=2), trials_to_decide(2, 8, 2, 8)
    (10, None)
    """
    if ran <= 0 or baseline_ran <= 0:
        return None
    r, rb = count / ran, baseline_count / baseline_ran
    if r == rb:
        return None

    def decides(n: int) -> bool:
        k, kb = round(r * n), round(rb * n)
        return k != kb and _boschloo(k, n, kb, n) * multiplier < alpha

    lo = max(ran, baseline_ran)
    hi = lo + 1
    while not decides(hi):  # doubling, then bisection: a handful of exact tests
        if hi >= limit:
            return None
        lo, hi = hi, min(limit, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid, hi)
    return hi


def is_screen(df: pd.DataFrame) -> bool:
    """Whether a comparison is a screen: at least one cell was compared and no timing test of
    any could reach significance at its trial counts (``trials_needed`` set on every compared
    row) — a 1-trial sweep ranks cells, it cannot give verdicts.

    >>> df = pd.DataFrame({"difference": ["baseline", "no difference detected"],
    ...                    "trials_needed": [None, 5]})
    >>> is_screen(df)
    True
    """
    compared = df[~df["difference"].isin(["baseline", "no data"])]
    if not len(compared):
        return False
    return bool(compared["trials_needed"].notna().all())


def _signature_map(signatures: pd.DataFrame | None, cell: str) -> dict[str, int]:
    if signatures is None or signatures.shape[1] == 0 or cell not in signatures.index:
        return {}
    row = signatures.loc[cell]
    return {str(k): int(v) for k, v in row.items() if int(v) > 0}


def _kinds(row: Mapping[str, Any], prefix: str = "") -> dict[str, int]:
    return {
        k: _int(row.get(f"{prefix}n_failed_{k}"))
        for k in FAILURE_KINDS
        if _int(row.get(f"{prefix}n_failed_{k}"))
    }


def _base_counts(row: Mapping[str, Any], base: Mapping[str, Any] | None) -> dict[str, Any]:
    """The baseline's counts for a row: its baseline row's, or the row's ``baseline_*``
    columns (two runs: the same cell of run A)."""
    if base is not None:
        return {
            "ran": _int(base.get("n_ok")) + _int(base.get("n_failed")),
            "n_failed": _int(base.get("n_failed")),
            **{f"n_failed_{k}": _int(base.get(f"n_failed_{k}")) for k in FAILURE_KINDS},
        }
    return {
        "ran": _int(row.get("baseline_n_ran")),
        "n_failed": _int(row.get("baseline_n_failed")),
        **{f"n_failed_{k}": _int(row.get(f"baseline_n_failed_{k}")) for k in FAILURE_KINDS},
    }


def _event_findings(
    kind: FindingKind,
    subject: str,
    events: dict[str, tuple[int, int, int, int]],
    p_adj: dict[str, float],
    *,
    alpha: float,
    baseline: str,
    extra: dict[str, dict[str, Any]],
    project: bool = True,
) -> list[Finding]:
    """A finding per cell whose event rate differs from the baseline's (``project``: with
    :func:`trials_to_decide` for one not yet significant)."""
    out = []
    compared = [c for c, (_, n, _, nb) in events.items() if n and nb]
    for cell in compared:
        k, n, kb, nb = events[cell]
        if k * nb == kb * n:
            continue
        p = p_adj.get(cell, math.nan)
        significant = bool(p < alpha)
        needed = None
        if not significant and project:
            raw = _boschloo(k, n, kb, nb)
            multiplier = p / raw if raw > 0 and math.isfinite(p) else len(compared)
            needed = trials_to_decide(
                k, n, kb, nb, alpha=alpha, multiplier=min(max(multiplier, 1.0), len(compared))
            )
        out.append(
            Finding(
                kind=kind,
                cell=cell,
                subject=subject,
                count=k,
                ran=n,
                baseline_count=kb,
                baseline_ran=nb,
                p_adj=p,
                direction="more" if k * nb > kb * n else "fewer",
                significant=significant,
                trials_to_decide=needed,
                baseline=baseline,
                **extra.get(cell, {}),
            )
        )
    return out


def _holm_events(events: dict[str, tuple[int, int, int, int]]) -> dict[str, float]:
    """Boschloo's p per cell, Holm-adjusted over the cells (equal rates: p = 1, untested)."""
    cells = list(events)
    raw = [
        1.0 if k * nb == kb * n and n and nb else _boschloo(k, n, kb, nb)
        for k, n, kb, nb in (events[c] for c in cells)
    ]
    return dict(zip(cells, (float(p) for p in stats.holm(np.asarray(raw))), strict=True))


def _failure_findings(
    df: pd.DataFrame,
    signatures: pd.DataFrame | None,
    *,
    alpha: float,
    baseline: str,
    sequential: bool = False,
) -> list[Finding]:
    """The failure findings: each cell's overall failure count against the baseline's, then a
    kind or signature whose rate changed where the overall count does not show it."""
    base = df.loc[baseline] if baseline in df.index else None
    rows = {str(c): r for c, r in df.iterrows() if r["difference"] != "baseline"}
    base_sigs = _signature_map(signatures, baseline) if base is not None else {}
    overall, p_overall, extra = _overall_failures(rows, base, signatures, base_sigs, sequential)
    out = _event_findings(
        "failures",
        "failures",
        overall,
        p_overall,
        alpha=alpha,
        baseline=baseline,
        extra=extra,
        project=not sequential,  # a fixed-n projection does not fit an anytime-valid run
    )
    subjects = _failure_subjects(rows, base, overall, signatures, base_sigs)
    out += _subject_findings(out, subjects, extra, alpha=alpha, baseline=baseline)
    # A cell's significant kind or signature says more than its undecided overall count.
    sharp = {f.cell for f in out if f.significant and f.kind != "failures"}
    return [f for f in out if f.significant or f.kind != "failures" or f.cell not in sharp]


#: Per cell: (failed, ran) here, then (failed, ran) in the baseline.
_Events = dict[str, tuple[int, int, int, int]]


def _overall_failures(
    rows: Mapping[str, pd.Series],
    base: pd.Series | None,
    signatures: pd.DataFrame | None,
    base_sigs: Mapping[str, int],
    sequential: bool,
) -> tuple[_Events, dict[str, float], dict[str, dict[str, Any]]]:
    """Each cell's failure counts beside the baseline's, its adjusted p, and what its line says."""
    extra: dict[str, dict[str, Any]] = {}
    p_overall: dict[str, float] = {}
    overall: _Events = {}
    for cell, r in rows.items():
        b = _base_counts(r, base)
        ran = _int(r["n_ok"]) + _int(r["n_failed"])
        overall[cell] = (_int(r["n_failed"]), ran, b["n_failed"], b["ran"])
        p_overall[cell] = _float(r.get("failure_p_adj"))
        extra[cell] = {
            "kinds": _kinds(r),
            "baseline_kinds": {k: b[f"n_failed_{k}"] for k in FAILURE_KINDS if b[f"n_failed_{k}"]},
            "signatures": _signature_map(signatures, cell),
            "baseline_signatures": base_sigs if base is not None else {},
            **_adaptive(r, sequential),
            "hang": str(r.get("hang_incident") or "") if _int(r.get("n_failed_hang")) else "",
        }
    return overall, p_overall, extra


def _failure_subjects(
    rows: Mapping[str, pd.Series],
    base: pd.Series | None,
    overall: _Events,
    signatures: pd.DataFrame | None,
    base_sigs: Mapping[str, int],
) -> list[tuple[FindingKind, str, _Events]]:
    """Every failure kind, then every signature, with its counts per cell beside the baseline's."""
    subjects: list[tuple[FindingKind, str, _Events]] = []
    for kind in FAILURE_KINDS:
        events = {}
        for cell, r in rows.items():
            b = _base_counts(r, base)
            n, nb = overall[cell][1], overall[cell][3]
            events[cell] = (_int(r[f"n_failed_{kind}"]), n, b[f"n_failed_{kind}"], nb)
        subjects.append(("failure_kind", kind, events))
    names = [] if signatures is None or base is None else [str(s) for s in signatures.columns]
    for name in names:
        events = {
            cell: (
                _signature_map(signatures, cell).get(name, 0),
                overall[cell][1],
                base_sigs.get(name, 0),
                overall[cell][3],
            )
            for cell in rows
        }
        subjects.append(("signature", name, events))
    return subjects


def _subject_findings(
    overall: list[Finding],
    subjects: list[tuple[FindingKind, str, _Events]],
    extra: dict[str, dict[str, Any]],
    *,
    alpha: float,
    baseline: str,
) -> list[Finding]:
    """A kind or signature whose rate changed significantly where the overall count does not
    show it (4 workload failures became 4 hangs), for cells whose overall rate did not."""
    told = {f.cell: {(f.count, f.baseline_count)} for f in overall}
    settled = {f.cell for f in overall if f.significant}
    out: list[Finding] = []
    for kind, subject, events in subjects:
        shown = {
            c: e
            for c, e in events.items()
            if c not in settled
            and (e[0], e[2]) not in told.get(c, set())
            and e[0] * e[3] != e[2] * e[1]
        }
        if not shown:  # nothing new to say about this kind or signature: no test to run
            continue
        found = _event_findings(
            kind,
            subject,
            shown,
            _holm_events(events),
            alpha=alpha,
            baseline=baseline,
            extra=extra,
            project=False,
        )
        for f in found:
            # Only where the cell's overall failure rate does not already stand significant:
            # its line names the kinds and signatures.
            if f.significant and f.cell not in settled:
                out.append(f)
                told.setdefault(f.cell, set()).add((f.count, f.baseline_count))
    return out


def undecided_reason(row: Mapping[str, Any], threshold: float | None = None) -> str:
    """Why a comparison row's band is ``undecided``, in words: no ratio, no CI (too few timed
    trials), or which band edge the CI the band is judged on (``band_ci_*``) crosses
    (``threshold``: the band's; named when given or read from the CI's edges).

    >>> undecided_reason({"ratio": 1.1, "band_ci_low": 0.95, "band_ci_high": 1.3, "band_ci_level": 0.975}, 1.15)
    'the 97.5% CI crosses the band edge +15%'
    >>> undecided_reason({"ratio": 1.1, "band_ci_low": float("nan"), "band_ci_high": float("nan")})
    'no CI below 5 timed trials per group'
    """

    get = row.get
    lo, hi = _float(get("band_ci_low")), _float(get("band_ci_high"))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = _float(get("ratio_ci_low")), _float(get("ratio_ci_high"))
    ratio = _float(get("ratio"))
    if not math.isfinite(ratio):
        return "no ratio: the baseline median is not above 0"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        timed = _float(get("n_timed"))
        if math.isfinite(timed) and timed < stats.MIN_TIMED:
            ended = f" of {_int(get('n'))}" if _int(get("n")) > timed else ""
            return (
                f"no CI: {int(timed)}{ended} trials ended ok and timed, "
                f"{stats.MIN_TIMED} per group needed"
            )
        base_ok = _int(get("baseline_n_ran")) - _int(get("baseline_n_failed"))
        if get("baseline_n_ran") is not None and base_ok < stats.MIN_TIMED:
            return f"no CI: {base_ok} baseline trials ended ok, {stats.MIN_TIMED} per group needed"
        return f"no CI below {stats.MIN_TIMED} timed trials per group"
    level = _float(get("band_ci_level"))
    which = f"{level * 100:.4g}% CI" if math.isfinite(level) else "CI"
    if threshold is None:
        return f"the {which} crosses a band edge"
    edges = [e for e in (1 / threshold, threshold) if lo < e < hi]
    if len(edges) == 2:
        return f"the {which} spans the whole band"
    edge = edges[0] if edges else threshold
    return f"the {which} crosses the band edge {(edge - 1) * 100:+.0f}%"


def _timing_findings(
    df: pd.DataFrame, *, threshold: float, baseline: str, sequential: bool = False
) -> list[Finding]:
    out = []
    for cell, r in df.iterrows():
        row = {str(k): v for k, v in r.items()}
        if r["difference"] == "baseline":
            continue
        ran = _int(r.get("n_ok")) + _int(r.get("n_failed"))
        if _int(r.get("n_ok")) == 0 and ran:
            kinds = _kinds(r)
            how = ", ".join(f"{n} {k}" for k, n in kinds.items()) or f"{ran} failed"
            out.append(
                Finding(
                    kind="no_timing",
                    cell=str(cell),
                    subject="step time",
                    count=0,
                    ran=ran,
                    reason=f"none of its {ran} trials ended ok ({how})",
                    baseline=baseline,
                    kinds=kinds,
                    row=row,
                )
            )
            continue
        difference, band = str(r["difference"]), str(r.get("band", ""))
        if difference in ("slower", "faster", "higher", "lower") or band == "undecided":
            out.append(
                Finding(
                    kind="timing",
                    cell=str(cell),
                    subject=str(df.attrs.get("metric", "step_time_ms")),
                    p_adj=_float(r.get("p_adj")),
                    direction=difference if difference != "no difference detected" else band,
                    significant=difference != "no difference detected",
                    trials_to_decide=None
                    if pd.isna(r.get("trials_needed"))
                    else int(r["trials_needed"]),
                    reason=undecided_reason(row, threshold) if band == "undecided" else "",
                    baseline=baseline,
                    row=row,
                    **_adaptive(r, sequential),
                )
            )
        if bool(r.get("stalls", False)):
            out.append(
                Finding(
                    kind="stalls", cell=str(cell), subject="p95 step", baseline=baseline, row=row
                )
            )
    return out


def _screen_findings(df: pd.DataFrame, *, baseline: str) -> list[Finding]:
    """Every compared cell, largest effect first (failures before timing)."""
    out = []
    for cell, r in df.iterrows():
        if r["difference"] in ("baseline", "no data"):
            continue
        row = {str(k): v for k, v in r.items()}
        out.append(
            Finding(
                kind="screen",
                cell=str(cell),
                subject=str(df.attrs.get("metric", "step_time_ms")),
                count=_int(r.get("n_failed")),
                ran=_int(r.get("n_ok")) + _int(r.get("n_failed")),
                p_adj=_float(r.get("p_adj")),
                trials_to_decide=None
                if pd.isna(r.get("trials_needed"))
                else int(r["trials_needed"]),
                baseline=baseline,
                kinds=_kinds(r),
                row=row,
            )
        )

    def effect(f: Finding) -> float:
        ratio = _float(f.row.get("ratio"))
        return abs(math.log(ratio)) if math.isfinite(ratio) and ratio > 0 else 0.0

    return sorted(out, key=lambda f: -effect(f))


def _rank_cause_findings(df: pd.DataFrame, *, baseline: str) -> list[Finding]:
    """An ``oom`` and a ``numerics`` finding per cell whose frame names one
    (:func:`aorta.matrix.rank_causes.with_rank_causes`): the line in ``reason``, the rank,
    trials with it (``count``) of those that ran; the baseline's too (a failing baseline is
    the usual triage case)."""
    out: list[Finding] = []
    for kind in ("oom", "numerics", "memory"):
        if f"{kind}_incident" not in df.columns:
            continue
        for cell, r in df.iterrows():
            line = str(r.get(f"{kind}_incident") or "")
            if not line:
                continue
            ran = _int(r.get("n_ok")) + _int(r.get("n_failed"))  # memory: trials with traces
            out.append(
                Finding(
                    kind=kind,
                    cell=str(cell),
                    subject=kind,
                    count=_int(r.get(f"{kind}_trials")),
                    ran=ran,
                    baseline=baseline,
                    reason=line,
                    rank=_int(r.get(f"{kind}_rank")),
                )
            )
    return out


def _straggler_findings(df: pd.DataFrame, *, baseline: str) -> list[Finding]:
    """A finding per cell whose ``straggler_rank`` names a rank (the frame's straggler
    columns; none when it has none)."""
    if "straggler_rank" not in df:
        return []
    out = []
    for cell, r in df.iterrows():
        rank = _float(r.get("straggler_rank"))
        if not (math.isfinite(rank) and rank >= 0):  # -1 (or a frame without one): none
            continue
        out.append(
            Finding(
                kind="straggler",
                cell=str(cell),
                subject=str(r.get("straggler_source", "")),
                count=_int(r.get("straggler_trials")),
                ran=_int(r.get("straggler_of")),
                baseline=baseline,
                rank=int(rank),
                share_pct=_float(r.get("straggler_share_pct")),
                per_step_ms=_float(r.get("straggler_ms")),
            )
        )
    return out


def findings(
    df: pd.DataFrame,
    signatures: pd.DataFrame | None = None,
    *,
    alpha: float | None = None,
) -> list[Finding]:
    """The findings of a comparison, failures and hangs first (see the module docstring).

    Parameters
    ----------
    df
        A comparison frame: :func:`aorta.compare`, :func:`aorta.compare_runs` or
        :func:`aorta.matrix.summary.summarize` (its ``attrs`` give alpha, threshold, baseline).
    signatures
        Trials per cell × failure signature (:func:`aorta.matrix.signatures.signature_counts`)
        — one run only; per-signature findings need them.
    alpha
        The significance level (default: the comparison's).

    Returns
    -------
    list of Finding
        Ordered: failures, failure kinds and signatures (significant first), cells without
        timing, timing differences and undecided bands, stalls, stragglers — or, for a
        screen (:func:`is_screen`), the stragglers and then the cells by effect size instead
        of timing findings.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"n_ok": [8, 0], "n_failed": [0, 8], "n_failed_workload": [0, 0],
    ...     "n_failed_hang": [0, 8], "n_failed_crash": [0, 0], "failure_p_adj": [float("nan"), 0.0002],
    ...     "difference": ["baseline", "no data"], "band": ["baseline", "no data"]}, index=["base", "stuck"])
    >>> df.attrs = {"alpha": 0.05, "baseline": "base", "threshold": 1.15}
    >>> [(f.kind, f.cell, f.direction or f.reason) for f in findings(df)]
    [('failures', 'stuck', 'more'), ('no_timing', 'stuck', 'none of its 8 trials ended ok (8 hang)')]
    """
    attrs = df.attrs
    alpha = float(attrs.get("alpha", stats.DEFAULT_ALPHA)) if alpha is None else alpha
    threshold = float(attrs.get("threshold") or DEFAULT_THRESHOLD)
    base_rows = df.index[df["difference"] == "baseline"]
    baseline = str(base_rows[0]) if len(base_rows) == 1 else str(attrs.get("baseline", ""))
    sequential = bool(attrs.get("sequential"))  # an adaptive run's anytime-valid comparison
    failures = _failure_findings(
        df, signatures, alpha=alpha, baseline=baseline, sequential=sequential
    )
    if attrs.get("signature"):  # the frame's failure event is one signature (compare(signature=))
        name = str(attrs["signature"])
        failures = [
            replace(f, kind="signature", subject=name, kinds={}, baseline_kinds={})
            for f in failures
            if f.kind == "failures"
        ]
    failures.sort(key=lambda f: (not f.significant, _ORDER[f.kind]))
    failures += _rank_cause_findings(df, baseline=baseline)
    timing = _timing_findings(df, threshold=threshold, baseline=baseline, sequential=sequential)
    if "trials_needed" in df and is_screen(df):
        timing = [f for f in timing if f.kind == "no_timing"]
        timing += _screen_findings(df, baseline=baseline)
    timing += _straggler_findings(df, baseline=baseline)
    timing.sort(key=lambda f: _ORDER[f.kind])
    return failures + timing
