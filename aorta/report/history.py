"""A history in words: what ``aorta history`` prints — each change point with what changed in
the environment around it, then the gate's answer for the newest run of each series.

Examples
--------
>>> change_line({"cell": "base", "metric": "step_time_ms", "direction": "slower", "ratio": 1.2,
...     "ci": [1.15, 1.25], "band": "beyond band", "before": "/r/a", "after": "/r/b", "p": 0.001,
...     "environment_changes": {"torch.version": ["2.12.0", "2.13.0"]}})
'base · step_time_ms: slower ×1.2 [1.15, 1.25] beyond band between a and b (p = 0.001) — torch.version 2.12.0 → 2.13.0'
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["change_line", "environment_words", "history_text"]

#: Environment keys shown per change point in text before "… and N more".
SHOWN_CHANGES = 6


def _value(v: Any) -> str:
    return "unset" if v is None else str(v)


def environment_words(changes: Mapping[str, Any], *, limit: int = SHOWN_CHANGES) -> str:
    """The environment changes of a change point in one phrase: ``key a → b``, the per-node
    ones as ``node: key a → b``; ``""`` when nothing changed.

    >>> environment_words({"env.NCCL_ALGO": [None, "Ring"], "nodes": {"n1": {"kernel": ["5", "6"]}}})
    'env.NCCL_ALGO unset → Ring; n1: kernel 5 → 6'
    """
    parts = [f"{k} {_value(v[0])} → {_value(v[1])}" for k, v in changes.items() if k != "nodes"]
    for node, diff in (changes.get("nodes") or {}).items():
        parts += [f"{node}: {k} {_value(v[0])} → {_value(v[1])}" for k, v in diff.items()]
    more = f"; … and {len(parts) - limit} more" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


def change_line(c: Mapping[str, Any]) -> str:
    """One change point (its JSON form) as a line, named by the metric whose level changed:
    the history's own (``step_time_ms``, ``busy_pct`` …) or ``failure_rate``."""
    if c["metric"] != "failure_rate":
        lo, hi = c.get("ci") or [None, None]
        ci = f" [{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else ""
        size = f"×{c['ratio']:.3g}{ci}" if c.get("ratio") is not None else ""
        # The band decides the gate: a significant change inside it never trips it, and a
        # reader hunting a small regression must see that the band hid it.
        size += f" {c['band']}" if c.get("band") else ""
    else:
        rb, ra = c.get("failure_rates") or [None, None]
        size = f"{_rate(rb)} → {_rate(ra)} failed"
    where = f"between {Path(c['before']).name} and {Path(c['after']).name}"
    env = environment_words(c.get("environment_changes") or {})
    what = f"{c['cell']} · {c['metric']}: {c['direction'].replace('_', ' ')}"
    text = f"{what} {size} {where} (p = {c['p']:.2g})"
    return text + (f" — {env}" if env else " — no environment change recorded")


def _rate(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.0%}"


def history_text(doc: Mapping[str, Any]) -> str:
    """The text of ``aorta history`` from its JSON document (:meth:`History.to_json`)."""
    runs, series = doc["runs"], doc["series"]
    names = sorted({s["series"] for s in series})
    lines = [
        f"{len(runs)} runs in {len(names)} series ({', '.join(names)}); metric {doc['metric']}; "
        f"false alarms {doc['false_alarm_bound']}",
    ]
    changes = doc["change_points"]
    lines.append("")
    lines.append(f"Change points ({len(changes)}):" if changes else "No change point.")
    for s in names:
        mine = [c for c in changes if c["series"] == s]
        if mine:
            lines.append(f"  {s}")
            lines += [f"    {change_line(c)}" for c in mine]
    gate = doc["gate"]
    lines.append("")
    tripped = [f for f in gate["findings"] if f["tripped"]]
    if not gate["findings"]:
        lines.append("Gate: nothing to compare the newest runs with.")
    elif tripped:
        lines.append(f"Gate: REGRESSION in {len(tripped)} comparison(s):")
    else:
        bands = sorted({s["threshold"] for s in series if s.get("threshold")})
        band = f" beyond the band (×{', ×'.join(f'{b:g}' for b in bands)})" if bands else ""
        lines.append(f"Gate: the newest run of each series is no worse than its references{band}.")
    for f in tripped:
        ratio = f"×{f['ratio']:.3g}" if f["ratio"] is not None else ""
        lines.append(
            f"  {f['series']} {f['cell']} · {f.get('metric', doc['metric'])}: "
            f"{Path(f['newest']).name} against {f['against']} "
            f"({Path(f['reference']).name}): {f['difference']} {ratio} {f['band']}; failures {f['failures']}"
        )
    return "\n".join(lines)
