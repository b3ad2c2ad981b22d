"""Rendering :func:`aorta.explain`: the terminal table, Markdown for report.md, and JSON.

One place words the decomposition, so ``aorta compare --explain`` and the report's "Where the
time went" section say the same thing.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

__all__ = ["explain_headline", "explain_json", "explain_markdown", "explain_table"]


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
