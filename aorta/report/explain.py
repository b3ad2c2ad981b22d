"""Rendering :func:`aorta.explain`: the terminal table, Markdown for report.md, and JSON.

One place words the decomposition, so ``aorta compare --explain`` and the report's "Where the
time went" section say the same thing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import xarray as xr

from aorta.matrix.explain import ExplainBy, explain
from aorta.matrix.options import StatsOptions

__all__ = [
    "CHANGED_VERDICTS",
    "default_by",
    "explain_changed",
    "explain_headline",
    "explain_json",
    "explain_markdown",
    "explain_table",
    "explain_text",
    "time_went_markdown",
]

#: The timing verdicts whose cells get a "Where the time went" decomposition.
CHANGED_VERDICTS = ("slower", "faster")


def _ms(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:+.3g}"


def _ci(low: float, high: float) -> str:
    if math.isnan(low) or math.isnan(high):
        return "[no CI]"
    return f"[{low:+.3g}, {high:+.3g}]"


def explain_headline(df: pd.DataFrame) -> str:
    """One line: the step's change, how much the items explain, the residual.

    Examples
    --------
    >>> from aorta.matrix.explain import TrialItems, decompose
    >>> a = TrialItems("a", step={0: 10.0}, items={0: {"mm": ("compute", 6.0, 1.0)}})
    >>> b = TrialItems("b", step={0: 15.0}, items={0: {"mm": ("compute", 10.0, 1.0)}})
    >>> explain_headline(decompose(a, b))
    'b vs a: step +5 ms [no CI] (10 → 15 ms per profiled step); items +4 ms, residual +1 ms [no CI]'
    """
    step, residual = df.attrs["step"], df.attrs["residual"]
    items = float(df["delta"].sum()) if len(df) else 0.0
    return (
        f"{df.attrs['cell']} vs {df.attrs['baseline']}: step {_ms(step['delta'])} ms "
        f"{_ci(step['ci_low'], step['ci_high'])} ({step['baseline']:.3g} → {step['cell']:.3g} ms "
        f"per profiled step); items {_ms(items)} ms, residual {_ms(residual['delta'])} ms "
        f"{_ci(residual['ci_low'], residual['ci_high'])}"
    )


def _rows(df: pd.DataFrame, top: int | None) -> pd.DataFrame:
    shown = df if top is None else df.head(top)
    return pd.DataFrame(
        {
            "item": shown["item"],
            "class": shown["class"],
            "baseline ms": shown["baseline"].map(lambda v: f"{v:.4g}"),
            "cell ms": shown["cell"].map(lambda v: f"{v:.4g}"),
            "delta ms": shown["delta"].map(_ms),
            f"{100 * (1 - df.attrs['alpha']):.0f}% CI": [
                _ci(lo, hi) for lo, hi in zip(shown["ci_low"], shown["ci_high"], strict=True)
            ],
            "share": shown["share"].map(lambda v: f"{100 * v:.0f}%"),
            "only in": shown["only_in"],
        }
    )


def explain_table(df: pd.DataFrame, *, top: int | None = 10) -> str:
    """The decomposition as terminal text: headline, then the ``top`` items and the residual."""
    lines = [explain_headline(df), ""]
    if df.empty:
        lines.append("no items")
    else:
        rows = _rows(df, top)
        lines.append(rows.to_string(index=False))
        if top is not None and len(df) > top:
            rest = df.iloc[top:]["delta"].sum()
            lines.append(f"... {len(df) - top} more items, together {_ms(rest)} ms")
    lines.extend(f"note: {n}" for n in df.attrs.get("notes", []))
    return "\n".join(lines)


def explain_markdown(df: pd.DataFrame, *, top: int | None = 10) -> str:
    """The decomposition as a Markdown paragraph and table (for report.md)."""
    lines = [explain_headline(df) + ".", ""]
    if df.empty:
        return "\n".join([*lines, "No items in the traces.", ""])
    rows = _rows(df, top)
    lines.append("| " + " | ".join(rows.columns) + " |")
    lines.append("|" + "---|" * len(rows.columns))
    for record in rows.itertuples(index=False):
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in record) + " |")
    residual = df.attrs["residual"]
    lines.append(
        f"| *residual (no item)* | | | | {_ms(residual['delta'])} | "
        f"{_ci(residual['ci_low'], residual['ci_high'])} | | |"
    )
    if top is not None and len(df) > top:
        lines.append(
            f"\n{len(df) - top} more items, together {_ms(df.iloc[top:]['delta'].sum())} ms."
        )
    lines.append("")
    return "\n".join(lines)


def explain_json(df: pd.DataFrame) -> dict[str, Any]:
    """The decomposition as a JSON document: ``items`` and the ``attrs`` (NaN as ``None``)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    items = [clean(r) for r in df.to_dict("records")]
    return {"items": items} | {str(k): clean(v) for k, v in df.attrs.items()}


def default_by(ds: xr.Dataset) -> ExplainBy:
    """``kernel`` when any trace of the run has GPU events, else ``op`` (CPU-only runs)."""
    return "kernel" if "trace_source" in ds and bool((ds.trace_source == "gpu").any()) else "op"


def explain_changed(
    ds: xr.Dataset,
    comparison: pd.DataFrame,
    *,
    by: ExplainBy | None = None,
    options: StatsOptions | None = None,
) -> dict[str, pd.DataFrame]:
    """:func:`aorta.explain` of every cell whose verdict in ``comparison`` is ``slower`` or
    ``faster``, against ``comparison``'s baseline (``ds`` from ``load_run(run, traces=True)``;
    ``by`` default: :func:`default_by`; ``options``: the bootstrap's, as there)."""
    if "trace_run_dir" not in ds.attrs or "difference" not in comparison:
        return {}
    base = comparison.attrs.get("baseline")
    chosen = by or default_by(ds)
    return {
        str(cell): explain(ds, str(cell), base, by=chosen, options=options)
        for cell, verdict in comparison["difference"].items()
        if verdict in CHANGED_VERDICTS
    }


def time_went_markdown(explained: dict[str, pd.DataFrame], *, top: int | None = 10) -> str:
    """report.md's "Where the time went" section: per changed cell its table and waterfall
    (``waterfall_<cell>.png``)."""
    lines = ["## Where the time went", ""]
    if not explained:
        return "\n".join(
            [*lines, "No cell is significantly slower or faster than the baseline.", ""]
        )
    first = next(iter(explained.values()))
    lines += [
        f"Per cell whose verdict is slower or faster: the change of the mean profiled step, "
        f"{first.attrs.get('by', 'item')} by {first.attrs.get('by', 'item')} (ms per step, "
        "mean over ranks, difference of means over trials with a bootstrap CI), largest "
        "first; the residual is what no item explains.",
        "",
    ]
    for cell, df in explained.items():
        lines += [
            f"### {cell}",
            "",
            explain_markdown(df, top=top),
            f"![waterfall {cell}](waterfall_{cell}.png)",
            "",
        ]
    return "\n".join(lines)


def explain_text(
    run: str | Path, cell: str, baseline: str | None = None, *, as_json: bool = False, **kwargs: Any
) -> str:
    """:func:`aorta.explain` of ``cell`` in ``run`` (``kwargs`` passed on) as the terminal
    table (:func:`explain_table`) or, with ``as_json``, the JSON document (:func:`explain_json`):
    what ``aorta compare RUN --explain CELL`` prints."""
    df = explain(run, cell, baseline, **kwargs)
    if as_json:
        return json.dumps(explain_json(df), indent=2, ensure_ascii=False)
    return explain_table(df)
