"""``matrix.md`` and ``matrix.json``: the one writer of a run's matrix.

:func:`write_matrix` renders the whole matrix of a run's Dataset — the table of
:func:`aorta.matrix.summary.summarize` (upstream AORTA's columns, then ratio [CI], p_adj and
verdict), the findings, and the ``## Traces`` section when the Dataset has trace metrics
(:func:`aorta.matrix.trace_summary.trace_summary`) — and writes both files atomically. The
engine calls it as cells or rounds end; ``aorta report RUN --traces`` calls it with the traces.

The columns follow upstream AORTA so its users recognise the table: **failure rate** =
failed / (passed + failed), a failure being a workload failure, a hang (``timeout``) or a
crash after the work started (:func:`aorta.store.record.outcome_of`); setup and
infrastructure errors are counted as **errors** beside it; **mean step** and **confound** as
:mod:`aorta.matrix.summary` defines them. The files record how the statistics were computed
(``statistics``: seed, resamples, alpha, band).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import xarray as xr

from aorta.matrix.dataset import MISSING
from aorta.matrix.findings import findings
from aorta.matrix.hangs import HangIncidents, hang_incidents, pattern_text
from aorta.matrix.load import load_run
from aorta.matrix.options import StatsOptions, stats_options
from aorta.matrix.select import DEFAULT_THRESHOLD
from aorta.matrix.signatures import signature_counts, signature_hints
from aorta.matrix.summary import summarize
from aorta.matrix.trace_summary import BREAKDOWN_PARTS, has_traces, trace_summary
from aorta.report.comparison import (
    comparison_json,
    failures_text,
    level_text,
    markdown_table,
    ms_text,
    p_text,
    percent_text,
    plain,
    ratio_text,
    statistics_line,
    verdict_text,
)
from aorta.report.findings import finding_json, findings_markdown
from aorta.report.upstream import with_upstream_keys
from aorta.store.record import TrialRecord
from aorta.store.redact import Redactor
from aorta.store.rundir import MATRIX_JSON, MATRIX_MD, WARMUP_TRIAL, RunDir, trial_relpath

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from aorta.matrix.options import StatsKeywords

__all__ = [
    "adaptive_markdown",
    "failure_signatures",
    "hangs_json",
    "hangs_markdown",
    "matrix_header",
    "matrix_json",
    "matrix_markdown",
    "signature_markdown",
    "trace_json",
    "trace_markdown",
    "warmup_json",
    "write_matrix",
]

_HEADER_KEYS = (
    "ticket",
    "workload",
    "run_dir",
    "baseline",
    "threshold",
    "world_size",
    "status",
    "schedule",
    "extensions",
)


def write_matrix(
    run_dir: RunDir | str | Path,
    ds: xr.Dataset | None = None,
    *,
    status: str | None = None,
    options: StatsOptions | None = None,
    **overrides: Unpack[StatsKeywords],
) -> pd.DataFrame:
    """Render and write the run's ``matrix.md`` and ``matrix.json``; return the summary.

    Parameters
    ----------
    run_dir
        The run directory the files go into.
    ds
        The run's Dataset (default: rebuilt from the run's trial records). With trace
        metrics (``aorta.load_run(run, traces=True)``) the files get a traces section.
    status
        The run's status in the header (default: ``ds.attrs["status"]``, the manifest's).
    options, **overrides
        The statistics of both sections (:class:`~aorta.matrix.options.StatsOptions`, a
        keyword overriding a field), as in :func:`aorta.matrix.summary.summarize`; the
        options' ``ranks`` is how the trace section reduces a trial's ranks
        (:func:`aorta.matrix.select.reduce_ranks`).

    Returns
    -------
    pandas.DataFrame
        The matrix's result, :func:`aorta.matrix.summary.summarize` of ``ds``.

    Raises
    ------
    UsageError
        ``run_dir`` is not a run directory.
    ValueError
        The run's baseline is not one of its cells.

    Examples
    --------
    >>> import tempfile
    >>> from aorta.run.sweep import sweep
    >>> from aorta.recipe import load_recipe_text
    >>> r = load_recipe_text("cells: [{name: base, mitigations: [none]}]", command=["true"])
    >>> run = sweep(r, output=tempfile.mkdtemp(), progress="none").run_dir
    >>> write_matrix(run)["difference"].tolist()
    ['baseline']
    >>> (run / "matrix.md").read_text().splitlines()[4]
    '- status: complete'
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir.open(run_dir)
    if ds is None:
        ds = load_run(rd.path, source="records")
    opts = stats_options(options, **overrides)
    summary = summarize(ds, options=opts)
    traces = trace_summary(ds, options=opts) if has_traces(ds) else None
    header = matrix_header(ds, run_dir=rd.path, status=status)
    header["warmup"] = [warmup_json(rec) for rec in rd.warmup_records()]
    sigs = failure_signatures(ds)
    redactor = Redactor.of_run(rd)  # what leaves the run is redacted with its knowledge
    data = matrix_json(summary, ds, header=header, traces=traces, signatures=sigs)
    rd.write_json(MATRIX_JSON, redactor.data(data))
    text = matrix_markdown(summary, header=header, traces=traces, signatures=sigs)
    rd.write_text(MATRIX_MD, redactor.markdown(text))
    return summary


def failure_signatures(ds: xr.Dataset) -> pd.DataFrame:
    """Trials per cell × failure signature (:func:`aorta.matrix.signatures.signature_counts`),
    with the hints in ``attrs["hints"]``; what the matrix files' signature parts show."""
    counts = signature_counts(ds)
    counts.attrs["hints"] = signature_hints(ds)
    return counts


def matrix_header(
    ds: xr.Dataset, *, run_dir: str | Path, status: str | None = None
) -> dict[str, Any]:
    """The header fields of the matrix files: the run's ticket, workload, directory, baseline,
    threshold, world size and status (``None`` where the Dataset does not say)."""
    header: dict[str, Any] = {k: plain(ds.attrs.get(k)) for k in _HEADER_KEYS}
    if isinstance(header.get("extensions"), str):  # JSON text in a Dataset's attrs
        try:
            header["extensions"] = json.loads(header["extensions"])
        except ValueError:
            header["extensions"] = None
    header["run_dir"] = str(run_dir)
    if status is not None:
        header["status"] = status
    return header


# --- matrix.json -----------------------------------------------------------------------------


def warmup_json(record: TrialRecord) -> dict[str, Any]:
    """What the matrix files say of a discarded warm-up trial: its cell, status, clock and
    record (``cells/<cell>/warmup.json``).

    >>> from aorta.store.record import TrialRecord, TrialStatus
    >>> rec = TrialRecord(cell="b", cell_id="x", trial=-1, status=TrialStatus.OK, passed=True, wall_clock_s=0.5)
    >>> warmup_json(rec)["record"]
    'cells/b/warmup.json'
    """
    return {
        "cell": record.cell,
        "status": record.status.value,
        "wall_clock_s": _finite(record.wall_clock_s),
        "record": trial_relpath(record.cell, WARMUP_TRIAL),
    }


def _finite(v: Any) -> float | None:
    f = plain(v)
    return None if f is None or not math.isfinite(float(f)) else float(f)


def _interval(row: pd.Series, low: str, high: str) -> list[float] | None:
    lo, hi = _finite(row[low]), _finite(row[high])
    return None if lo is None or hi is None else [lo, hi]


def _trials(ds: xr.Dataset, cell: str) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """The cell's status counts and its recorded trials (trial, status, error)."""
    status = ds.status.sel(cell=cell).values.tolist()
    error = ds.error.sel(cell=cell).values.tolist()
    counts: dict[str, int] = {}
    trials = []
    for trial, s, e in zip(ds.trial.values.tolist(), status, error, strict=True):
        if s == MISSING:
            continue
        counts[str(s)] = counts.get(str(s), 0) + 1
        trials.append({"trial": int(trial), "status": str(s), "error": str(e) or None})
    return counts, trials


def _signature_json(cell: str, signatures: pd.DataFrame | None) -> dict[str, Any]:
    if signatures is None or signatures.shape[1] == 0 or cell not in signatures.index:
        return {"top_failure": None, "signatures": {}}
    row = signatures.loc[cell]
    counts = {str(k): int(v) for k, v in row.items() if int(v) > 0}
    top = max(counts, key=lambda k: (counts[k], -list(counts).index(k)), default=None)
    return {"top_failure": top, "signatures": counts}


def _cell_json(
    cell: str,
    row: pd.Series,
    ds: xr.Dataset,
    signatures: pd.DataFrame | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    incidents: Mapping[str, HangIncidents] | None = None,
) -> dict[str, Any]:
    statuses, trials = _trials(ds, cell)
    if "signature" in ds:
        names = ds.signature.sel(cell=cell).values.tolist()
        kinds = ds.failure_kind.sel(cell=cell).values.tolist() if "failure_kind" in ds else []
        by_trial = dict(zip(ds.trial.values.tolist(), names, strict=True))
        kind_of = dict(zip(ds.trial.values.tolist(), kinds, strict=False))
        for t in trials:
            t["signature"] = str(by_trial.get(t["trial"], "")) or None
            t["failure_kind"] = str(kind_of.get(t["trial"], "")) or None
    needed = _finite(row["trials_needed"])
    return {
        "name": cell,
        **({"hangs": hangs_json(incidents[cell])} if incidents and cell in incidents else {}),
        "cell_id": str(row["cell_id"]),
        "mitigations": [m for m in str(row["mitigations"]).split("+") if m],
        "environment": str(row["environment"]),
        "n_trials": int(row["n_trials"]),
        "n_ran": int(row["n_ok"]) + int(row["n_failed"]),
        "n_ok": int(row["n_ok"]),
        "failures": int(row["n_failed"]),
        "failure_kinds": {
            kind: int(row[f"n_failed_{kind}"]) for kind in ("workload", "hang", "crash")
        },
        "errors": int(row["n_errors"]),
        "did_not_run": int(row["did_not_run"]),
        "failure_rate": _finite(row["failure_rate"]),
        "mean_step_ms": _finite(row["mean_step_ms"]),
        "step_source": str(row["step_source"]),
        "confound": str(row["confound"]),
        "confound_text": str(row.get("confound_text", row["confound"])),
        "statuses": statuses,
        "trials": trials,
        "n_timed": int(row["n_timed"]),
        "n_nonfinite": int(row["n_nonfinite"]),
        "median": _finite(row["median"]),
        "iqr": _finite(row["iqr"]),
        "cv": _finite(row["cv"]),
        "failure_ci": _interval(row, "failure_ci_low", "failure_ci_high"),
        "ratio": _finite(row["ratio"]),
        "ratio_ci": _interval(row, "ratio_ci_low", "ratio_ci_high"),
        "band_ci": _interval(row, "band_ci_low", "band_ci_high"),
        "delta": _finite(row["delta"]),
        "p": _finite(row["p"]),
        "p_method": str(row["p_method"]),
        "p_adj": _finite(row["p_adj"]),
        "failure_p_adj": _finite(row["failure_p_adj"]),
        "failures_vs_baseline": str(row["failures_vs_baseline"]),
        "difference": str(row["difference"]),
        "band": str(row["band"]),
        "verdict": verdict_text(row, threshold=threshold),
        "p95_ratio": _finite(row["p95_ratio"]),
        "stalls": bool(row["stalls"]),
        "trials_needed": None if needed is None else int(needed),
        "note": str(row["note"]),
        **_signature_json(cell, signatures),
        "straggler": _straggler_json(row),
    }


def _straggler_json(row: pd.Series) -> dict[str, Any] | None:
    """The cell's straggler (:func:`aorta.matrix.stragglers.stragglers`): ``rank``, ``trials``
    of ``of``, ``share_pct``, ``per_step_ms``, ``source``; ``None`` when there is none."""
    rank = _finite(row.get("straggler_rank"))
    if rank is None or rank < 0:
        return None
    return {
        "rank": int(rank),
        "trials": int(row["straggler_trials"]),
        "of": int(row["straggler_of"]),
        "share_pct": _finite(row["straggler_share_pct"]),
        "per_step_ms": _finite(row["straggler_ms"]),
        "source": str(row["straggler_source"]),
    }


def matrix_json(
    summary: pd.DataFrame,
    ds: xr.Dataset,
    *,
    header: Mapping[str, Any],
    traces: pd.DataFrame | None = None,
    signatures: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """The ``matrix.json`` document: the header fields, how the statistics were computed
    (``statistics``), one entry per cell (upstream's fields, the statistics, the recorded
    trials of ``ds``, each cell's ``top_failure`` and ``signatures`` counts) and, with
    ``traces``, the ``traces`` entry (:func:`trace_json`). With ``signatures``
    (:func:`failure_signatures`) the document's ``signature_hints`` name each one's hint."""
    threshold = float(
        summary.attrs.get("threshold") or header.get("threshold") or DEFAULT_THRESHOLD
    )
    incidents = hang_incidents(ds)
    doc: dict[str, Any] = {
        "schema_version": 1,
        **header,
        "statistics": comparison_json(summary.iloc[:0])["statistics"],
        "cells": [
            _cell_json(str(cell), row, ds, signatures, threshold=threshold, incidents=incidents)
            for cell, row in summary.iterrows()
        ],
        "findings": [
            finding_json(f, run=header.get("run_dir")) for f in findings(summary, signatures)
        ],
    }
    if signatures is not None and signatures.shape[1]:
        doc["signature_hints"] = dict(signatures.attrs.get("hints", {}))
    if traces is not None:
        doc["traces"] = trace_json(traces)
    if "reason" in summary.columns:  # an adaptive run: when and why each cell stopped
        doc["adaptive"] = {
            str(cell): {
                "decided": bool(row["decided"]),
                "decided_after": None
                if pd.isna(row["decided_after"])
                else int(row["decided_after"]),
                "trials": int(row["n_ok"]) + int(row["n_failed"]) + int(row["n_errors"]),
                "reason": str(row["reason"]),
            }
            for cell, row in summary.iterrows()
        }
    return with_upstream_keys(doc, summary, ds)  # upstream AORTA's keys and vocabulary too


def trace_json(summary: pd.DataFrame) -> dict[str, Any]:
    """The ``traces`` entry of ``matrix.json``: ``{"statistics": ..., "cells": [...],
    "diagnostics": [...]}`` of a :func:`~aorta.matrix.trace_summary.trace_summary`."""
    data = comparison_json(summary)
    data["statistics"].pop("diagnostics", None)
    data["diagnostics"] = list(summary.attrs.get("diagnostics", []))
    return data


# --- matrix.md -------------------------------------------------------------------------------


def _rate_text(row: pd.Series) -> str:
    ran = int(row["n_ok"]) + int(row["n_failed"])
    if not ran:
        return "—"
    text = f"{percent_text(row['failure_rate'])} ({int(row['n_failed'])}/{ran})"
    if row["failures_vs_baseline"] in ("more", "fewer"):
        text = f"**{text} {row['failures_vs_baseline']}**"
    return text


def _verdict_cell(row: pd.Series, threshold: float) -> str:
    text = verdict_text(row, threshold=threshold)
    if bool(row["stalls"]) and not math.isnan(row["p95_ratio"]):
        text += f"; **stalls** (p95 {row['p95_ratio']:.3g}×)"
    return text


def _mean_step_text(row: pd.Series) -> str:
    """The mean step, or ``—`` and why (no trial ended ok)."""
    if row["step_source"] == "no_ok_trial" and int(row["n_ok"]) + int(row["n_failed"]):
        return "— (no ok trial)"
    return ms_text(row["mean_step_ms"])


def hangs_json(inc: HangIncidents) -> dict[str, Any]:
    """A cell's hung trials in ``matrix.json``: how many hung, how many gave evidence, and each
    pattern of culprits, collective and frame with its trials (most frequent first)."""
    return {
        "hung": inc.hung,
        "captured": inc.captured,
        "line": inc.line(),
        "patterns": [
            {
                "trials": list(p.trials),
                "kind": p.kind,
                "culprit_ranks": list(p.culprit_ranks),
                "culprit_hosts": list(p.culprit_hosts),
                "op": p.op,
                "seq": list(p.seq) if p.seq else None,
                "process_group": p.process_group,
                "where": p.where,
                "nodes": [{"host": n.host, "line": n.line} for n in p.nodes],
                "device_lines": [
                    {"rank": r, "line": line}
                    for r, line in zip(p.culprit_ranks, p.device_lines, strict=False)
                    if line
                ],
                "text": pattern_text(p),
            }
            for p in inc.patterns
        ],
    }


def hangs_markdown(summary: pd.DataFrame) -> str:
    """The ``## Hangs`` section: per cell that hung, who the other ranks waited for and where
    (``hang_incident``); ``""`` when no cell did.

    >>> df = pd.DataFrame({"hang_incident": ["", "in 3/3 hung trials rank 1 never reached all_reduce #4"]},
    ...                   index=pd.Index(["base", "x"], name="cell"))
    >>> print(hangs_markdown(df))
    ## Hangs
    <BLANKLINE>
    Who the other ranks waited for, and where (each rank's flight recorder and stacks, taken before the kill; docs/hangs.md).
    <BLANKLINE>
    - `x`: in 3/3 hung trials rank 1 never reached all_reduce #4
    <BLANKLINE>
    """
    if "hang_incident" not in summary.columns:
        return ""
    items = [(str(c), str(v)) for c, v in summary["hang_incident"].items() if v]
    if not items:
        return ""
    lines = [
        "## Hangs",
        "",
        "Who the other ranks waited for, and where (each rank's flight recorder and stacks, "
        "taken before the kill; docs/hangs.md).",
        "",
        *(f"- `{cell}`: {line}" for cell, line in items),
    ]
    return "\n".join(lines) + "\n"


def signature_markdown(signatures: pd.DataFrame) -> str:
    """The ``## Failure signatures`` section: trials per cell and signature, then each
    signature's hint.

    >>> counts = pd.DataFrame({"out_of_memory": [2, 0]}, index=pd.Index(["a", "b"], name="cell"))
    >>> counts.attrs["hints"] = {"out_of_memory": "lower the batch"}
    >>> print(signature_markdown(counts))  # doctest: +NORMALIZE_WHITESPACE
    ## Failure signatures
    <BLANKLINE>
    Trials whose captured output matched each signature (the lowest tier per trial; see docs/triage.md).
    <BLANKLINE>
    | cell | top failure | out_of_memory |
    |---|---|---|
    | a | out_of_memory | 2 |
    | b | — | 0 |
    <BLANKLINE>
    Hints:
    - `out_of_memory`: lower the batch
    <BLANKLINE>
    """
    names = [str(c) for c in signatures.columns]
    body = []
    for cell, row in signatures.iterrows():
        top = _signature_json(str(cell), signatures)["top_failure"]
        body.append([str(cell), top or "—", *(str(int(row[n])) for n in names)])
    hints = signatures.attrs.get("hints", {})
    lines = [
        "## Failure signatures",
        "",
        "Trials whose captured output matched each signature (the lowest tier per trial; "
        "see docs/triage.md).",
        "",
        markdown_table(["cell", "top failure", *names], body),
    ]
    if any(n in hints for n in names):
        lines += ["", "Hints:", *(f"- `{n}`: {hints[n]}" for n in names if n in hints)]
    return "\n".join(lines) + "\n"


def _run_lines(header: Mapping[str, Any], attrs: Mapping[str, Any]) -> list[str]:
    """The header's lines about how the run was made: schedule, extensions, drift."""
    lines = []
    if header.get("schedule"):
        lines.append(f"- schedule: {header['schedule']}")
    for w in header.get("warmup") or []:
        wall = w.get("wall_clock_s")
        lines.append(
            f"- warm-up: one trial of `{w['cell']}` ran first and was discarded — not in any "
            f"count or statistic ({w['status']}"
            + (f", {wall:.3f} s" if isinstance(wall, float) else "")
            + f"): `{w['record']}`"
        )
    for ext in header.get("extensions") or []:
        cells = ", ".join(ext.get("cells") or []) or "all cells"
        # An adaptive run's verdicts are anytime-valid: raising its cap after looking is
        # what they are made for; a fixed-n run's p-values do not survive it.
        why = (
            "the cap was raised after seeing results, which the adaptive verdicts allow "
            "(anytime-valid: they hold however often the run looks and whenever it stops); "
            "decided cells stayed stopped"
            if header.get("schedule") == "adaptive"
            else "the trial count was chosen after seeing results, so p-values are optimistic "
            "(optional stopping; see docs/statistics.md)"
        )
        lines.append(
            f"- extended to {ext.get('trials')} trials per cell ({cells}) at {ext.get('at')}: "
            + why
        )
    if attrs.get("drift"):
        lines.append(
            f"- **warning: the baseline drifts over the run order** (Kendall's tau p = "
            f"{p_text(attrs.get('drift_p'))}): a trend in time can look like a cell effect"
        )
    return lines


def adaptive_markdown(summary: pd.DataFrame) -> list[str]:
    """The lines of ``matrix.md``'s "Adaptive stopping" section: per cell the trials it ran
    and when and why it stopped (``schedule: adaptive``; the summary's ``reason`` column)."""
    rows = []
    for cell, r in summary.iterrows():
        ran = int(r["n_ok"]) + int(r["n_failed"]) + int(r["n_errors"])
        planned = int(r["n_trials"]) if "n_trials" in r else ran
        if r["difference"] == "baseline":
            why = "ran while any cell did"
        elif bool(r["decided"]):
            why = str(r["reason"])
        elif ran >= planned:
            why = f"undecided at max_trials {planned}: {r['reason']}"
        else:
            why = f"running: {r['reason']}"
        rows.append([str(cell), str(ran), "yes" if bool(r["decided"]) else "no", why])
    return [
        "## Adaptive stopping",
        "",
        "Verdicts are anytime-valid (confidence sequences and e-values, Bonferroni over the "
        "cells): they hold although the sweep looked after every round (docs/statistics.md).",
        "",
        markdown_table(["cell", "trials", "decided", "when and why"], rows),
    ]


def matrix_markdown(
    summary: pd.DataFrame,
    *,
    header: Mapping[str, Any],
    traces: pd.DataFrame | None = None,
    signatures: pd.DataFrame | None = None,
) -> str:
    """The ``matrix.md`` text: the findings (failures and hangs first, then timing;
    :func:`aorta.matrix.findings.findings`), then the cells — upstream's columns, then ratio
    [CI], p_adj and the verdict (difference and band in one) — with ``signatures``
    (:func:`failure_signatures`, when any trial has one) a ``top failure`` column and the
    failure-signatures section (:func:`signature_markdown`), and with ``traces`` the traces
    section (:func:`trace_markdown`)."""
    signed = signatures is not None and signatures.shape[1] > 0
    attrs = summary.attrs
    level = float(attrs.get("ci_level", 0.95))
    lines = [
        f"# {header.get('ticket') or '(no ticket)'} — {header.get('workload') or ''}",
        "",
        f"- run: `{header.get('run_dir', '')}`",
        f"- baseline: `{header.get('baseline', '')}`, confound threshold {header.get('threshold', '')}",
        f"- status: {header.get('status', '')}",
        *_run_lines(header, attrs),
    ]
    if attrs:
        lines.append(statistics_line(attrs))
    threshold = float(attrs.get("threshold") or header.get("threshold") or DEFAULT_THRESHOLD)
    head = ["cell", "mitigations", "env", "trials", "failure rate", "failures", "errors"]
    head += [
        "mean step (ms)",
        "step source",
        "confound",
        f"ratio [{level_text(level)} CI]",
        "p_adj",
    ]
    head.append("verdict")
    if signed:
        head.append("top failure")
    body = [
        [
            str(cell),
            str(r["mitigations"]),
            str(r["environment"]),
            f"{int(r['n_ok']) + int(r['n_failed']) + int(r['n_errors'])}/{int(r['n_trials'])}",
            _rate_text(r),
            failures_text(r),
            str(int(r["n_errors"])),
            _mean_step_text(r),
            str(r["step_source"]),
            str(r.get("confound_text", r["confound"])),
            ratio_text(r),
            p_text(r["p_adj"]),
            _verdict_cell(r, threshold),
            *([_signature_json(str(cell), signatures)["top_failure"] or "—"] if signed else []),
        ]
        for cell, r in summary.iterrows()
    ]
    if attrs:  # what changed first, failures and hangs before timing; then the cells
        found = findings(summary, signatures)
        run = header.get("run_dir")
        lines += [
            "",
            findings_markdown(found, run=run, alpha=attrs.get("alpha"), summary=summary).rstrip(
                "\n"
            ),
        ]
        lines += ["", "## Cells"]
    lines += ["", markdown_table(head, body)]
    if "reason" in summary.columns:
        lines += ["", *adaptive_markdown(summary)]
    text = "\n".join(lines) + "\n"
    hangs = hangs_markdown(summary)
    if hangs:
        text += "\n" + hangs
    if signed:
        text += "\n" + signature_markdown(signatures)
    return text if traces is None else f"{text}\n{trace_markdown(traces)}"


def trace_markdown(summary: pd.DataFrame) -> str:
    """The ``## Traces`` section of ``matrix.md`` and ``report.md``, from a
    :func:`~aorta.matrix.trace_summary.trace_summary`.

    Examples
    --------
    >>> row = dict(traced=3, source="host", computation_ms=5.0, computation_ms_iqr=0.5, exposed_comm_ms=2.0,
    ...            exposed_comm_ms_iqr=0.1, idle_ms=1.0, idle_ms_iqr=0.2, ratio=1.0, ratio_ci_low=float("nan"),
    ...            ratio_ci_high=float("nan"), p_adj=float("nan"), difference="baseline", band="baseline",
    ...            delta=0.0, trials_needed=None)
    >>> print(trace_markdown(pd.DataFrame([row], index=pd.Index(["base"], name="cell"))).splitlines()[-1])
    | base | 3 | host | 5 [0.5] | 2 [0.1] | 1 [0.2] | 1 | — | baseline |
    """
    attrs = summary.attrs
    level = float(attrs.get("ci_level", 0.95))
    which = str(attrs.get("trial_value", "")).partition(", ")[2] or "per trial"
    head = ["cell", "traced trials", "source", "computation", "exposed comm", "idle"]
    head += [f"exposed comm ratio [{level_text(level)} CI]", "p_adj", "verdict"]
    body = [
        [
            str(cell),
            str(int(row["traced"])),
            str(row["source"]),
            *(
                "—" if math.isnan(row[m]) else f"{ms_text(row[m])} [{ms_text(row[f'{m}_iqr'])}]"
                for m in BREAKDOWN_PARTS
            ),
            ratio_text(row),
            p_text(row["p_adj"]),
            verdict_text(row),
        ]
        for cell, row in summary.iterrows()
    ]
    lines = [
        "## Traces",
        "",
        f"Each trial's value: the {which} of each rank's profiled-window time; per cell: the "
        "median [IQR] over trials, in ms. Exposed communication is compared with the baseline "
        'like step time (`aorta.compare(ds, metric="exposed_comm_ms")`). Source `host`: the '
        "host-side breakdown of a trace without GPU events (CPU-only runs).",
        "",
        markdown_table(head, body),
    ]
    problems = list(attrs.get("diagnostics", []))
    if problems:
        lines += ["", "Trace diagnostics (a missing or unreadable file's rank is NaN):"]
        lines += [f"- `{p}`" for p in problems[:10]]
        if len(problems) > 10:
            lines.append(f"- … and {len(problems) - 10} more")
    return "\n".join(lines) + "\n"
