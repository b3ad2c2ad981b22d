"""All the tables of a trace at once, and their text and JSON forms (for ``aorta trace summarize``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from . import perf
from .devices import Device

if TYPE_CHECKING:
    from .model import Trace

__all__ = ["diff_json", "diff_text", "summary", "summary_json", "summary_text"]


def summary(trace: Trace, *, top: int = 15, device: Device = None) -> dict[str, pd.DataFrame]:
    """The trace's tables by name, the long ones cut to their ``top`` rows.

    Names: ``gpu_timeline`` (per device), ``steps``, ``kernels``, ``ops``, ``gemms``,
    ``collectives``, ``idle_causes``, ``against_the_hardware`` (GPU time per perf-model family
    with achieved TFLOP/s, TB/s and share of the roofline; ``attrs["headline"]`` says the
    coverage and the device) and ``perf_ops`` (the modelled ops, every GPU op once);
    ``host_timeline`` when a rank has no GPU events (a CPU run: its host-side breakdown); with
    several ranks also ``collective_skew`` and ``stragglers``. ``device`` is as for
    :meth:`~aorta.trace.Trace.perf_ops`.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> sorted(summary(synthetic_trace([("kernel", "k", 0, 10)])))  # doctest: +NORMALIZE_WHITESPACE
    ['against_the_hardware', 'collectives', 'gemms', 'gpu_timeline', 'idle_causes', 'kernels',
     'ops', 'perf_ops', 'steps']
    """
    tables = {"gpu_timeline": trace.gpu_timeline(by="device")}
    if any(not (trace.gpu_ops.rank == r).any() for r in trace.ranks):
        tables["host_timeline"] = trace.host_timeline()
    tables |= {
        "steps": trace.steps(),
        "kernels": trace.kernels().head(top),
        "ops": trace.ops().head(top),
        "gemms": trace.gemms().head(top),
        "collectives": trace.collectives(),
        "idle_causes": trace.idle_causes(),
    }
    tables |= _against_the_hardware(trace, top=top, device=device)
    if len(trace.ranks) > 1:
        tables["collective_skew"] = trace.collective_skew()
        tables["stragglers"] = trace.stragglers()
    return tables


def _against_the_hardware(trace: Trace, *, top: int, device: Device) -> dict[str, pd.DataFrame]:
    """The perf-model tables: per family, and the modelled ops (each GPU op once)."""
    table = trace.perf_summary(device=device)
    families = perf.by_family(table)
    cover, name = table.attrs.get("coverage"), table.attrs.get("device")
    if not table.attrs.get("shapes_recorded", True):
        headline = "recorded without record_shapes: no perf model possible"
    elif cover is None or math.isnan(cover):
        headline = "no compute GPU time to model"
    else:
        headline = f"{cover:.1%} of GPU kernel time (communication aside) has a perf model"
    if not name:
        headline += "; no roofline (device unknown: pass device=)"
    elif table.attrs.get("peaks") == "datasheet":
        headline += f"; roofline against {name} datasheet peaks (device= for measured ones)"
    else:
        headline += f"; roofline against {name} (the peaks given)"
    families.attrs["headline"] = headline
    families.attrs["shapes_recorded"] = table.attrs.get("shapes_recorded")
    modelled = table[table["has_model"]]
    intensity = modelled["flops"] / modelled["bytes"].where(modelled["bytes"] > 0)
    seconds = (modelled["kernel_us"] * 1e-6).where(modelled["kernel_us"] > 0)
    ops = modelled.assign(
        intensity=intensity,
        tflops=modelled["flops"] * modelled["count"] / seconds / 1e12,
        tbps=modelled["bytes"] * modelled["count"] / seconds / 1e12,
    )
    wanted: tuple[str, ...] = ("op", "family", "shape", "strides", "count", "kernel_us")
    wanted += ("tflops", "tbps", "intensity", "bound", "pct_roofline")
    if "roofline_note" in ops and ops["roofline_note"].astype(bool).any():
        wanted += ("roofline_note",)  # why a row has no roofline figure, or how it got one
    ops = ops[[c for c in wanted if c in ops]].head(top)
    ops.attrs["units"] = {
        "kernel_us": "us",
        "tflops": "TFLOP/s",
        "tbps": "TB/s",
        "pct_roofline": "%",
    }
    return {"against_the_hardware": families, "perf_ops": ops.reset_index(drop=True)}


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    def clean(value: Any) -> Any:
        if value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            return None
        return value.item() if hasattr(value, "item") else value

    return [{k: clean(v) for k, v in row.items()} for row in frame.to_dict("records")]


def summary_json(trace: Trace, tables: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """A JSON-ready document: the ranks' metadata, diagnostics, and every table as records."""
    ranks = []
    for r in trace.ranks:
        info = trace.info(r)
        ranks.append(
            {
                "rank": r,
                "path": info.path,
                "stack": info.stack,
                "world_size": info.world_size,
                "devices": [d.get("name") for d in info.device_properties if isinstance(d, dict)],
                "versions": dict(info.versions),
                "events": int(info.stats.get("events_kept", 0)),
                "cache": info.cache,
            }
        )
    hardware = tables.get("against_the_hardware")
    return {
        "ranks": ranks,
        "diagnostics": trace.diagnostics,
        "perf": {
            "coverage": _records(pd.DataFrame([{"c": hardware.attrs.get("coverage")}]))[0]["c"],
            "device": hardware.attrs.get("device"),
            "shapes_recorded": hardware.attrs.get("shapes_recorded"),
        }
        if hardware is not None
        else None,
        "tables": {name: _records(frame) for name, frame in tables.items()},
        "units": {name: frame.attrs.get("units", {}) for name, frame in tables.items()},
    }


def _shorten(frame: pd.DataFrame, width: int = 60) -> pd.DataFrame:
    out = frame.copy()
    for column in out.columns:
        if pd.api.types.is_object_dtype(out[column]) or pd.api.types.is_string_dtype(out[column]):
            out[column] = [
                v if not isinstance(v, str) or len(v) <= width else v[: width - 1] + "…"
                for v in out[column]
            ]
    return out


def summary_text(trace: Trace, tables: dict[str, pd.DataFrame]) -> str:
    """Plain-text report: a header per rank, then each table (empty ones say why)."""
    lines = []
    for r in trace.ranks:
        info = trace.info(r)
        devices = sorted(
            {d.get("name", "?") for d in info.device_properties if isinstance(d, dict)}
        )
        lines.append(
            f"rank {r}: {info.path or '(in memory)'} — {info.stack}, {', '.join(devices) or 'no devices listed'}, "
            f"{info.stats.get('events_kept', 0)} events, cache {info.cache}"
        )
    for note in trace.diagnostics:
        lines.append(f"note: {note}")
    for name, frame in tables.items():
        units = frame.attrs.get("units") or {}
        # A column named for its unit ("time ms") says it once.
        shown = [k if k.endswith(f" {v}") else f"{k} {v}" for k, v in units.items()]
        suffix = f"  (units: {', '.join(shown)})" if shown else ""
        lines.append("")
        lines.append(f"== {name}{suffix}")
        if frame.attrs.get("headline"):
            lines.append(f"   {frame.attrs['headline']}")
        if frame.empty:
            lines.append(f"   {frame.attrs.get('note', 'nothing to show')}")
        else:
            with pd.option_context(
                "display.width",
                200,
                "display.max_columns",
                40,
                "display.float_format",
                "{:.4g}".format,
            ):
                lines.append(_shorten(frame).to_string(index=False))
    return "\n".join(lines)


def diff_json(table: pd.DataFrame, *, top: int | None = None) -> dict[str, Any]:
    """A JSON-ready document of a :func:`aorta.trace.diff` table (its first ``top`` items).

    Examples
    --------
    >>> from aorta.trace import diff
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("kernel", "k", 0, 10)])
    >>> doc = diff_json(diff(t, t))
    >>> doc["items"][0]["item"], doc["items"][0]["delta"], doc["units"]["delta"]
    ('k', 0.0, 'us')
    """
    attrs = table.attrs
    items = table if top is None else table.head(top)
    return {
        "by": attrs.get("by"),
        "per_step": attrs.get("per_step"),
        "ranks": attrs.get("ranks"),
        "steps": attrs.get("steps"),
        "total_delta": attrs.get("total_delta"),
        "items_total": len(table),
        "units": attrs.get("units", {}) | {"breakdown": "ms"},
        "breakdown": _records(pd.DataFrame(attrs.get("breakdown", []))),
        "items": [{**row, "raw_names": list(row["raw_names"])} for row in _records(items)],
        "notes": list(attrs.get("notes", [])),
    }


def diff_text(table: pd.DataFrame, *, top: int = 15) -> str:
    """Plain text of a :func:`aorta.trace.diff` table: the breakdown side by side, then the
    ``top`` items with the largest differences.

    Examples
    --------
    >>> from aorta.trace import diff
    >>> from aorta.trace.testing import synthetic_trace
    >>> a, b = synthetic_trace([("kernel", "k", 0, 10)]), synthetic_trace([("kernel", "k", 0, 30)])
    >>> print(diff_text(diff(a, b)).splitlines()[0])
    b - a: +20 us summed over 1 kernel (a: ranks [0], 0 steps; b: ranks [0], 0 steps)
    """
    attrs = table.attrs
    by, ranks, steps = attrs.get("by", "item"), attrs.get("ranks", {}), attrs.get("steps", {})
    per = " per step" if attrs.get("per_step") else ""
    sides = "; ".join(f"{s}: ranks {ranks.get(s)}, {steps.get(s)} steps" for s in ("a", "b"))
    lines = [
        f"b - a: {attrs.get('total_delta', 0.0):+.6g} us{per} summed over {len(table)} "
        f"{by}{'' if len(table) == 1 else 's'} ({sides})"
    ]
    lines += [f"note: {note}" for note in attrs.get("notes", [])]
    fmt = ("display.width", 200, "display.max_columns", 40, "display.float_format", "{:.4g}".format)
    breakdown = pd.DataFrame(attrs.get("breakdown", []))
    if not breakdown.empty:
        lines += ["", f"== time breakdown (ms{per}, mean over ranks)"]
        with pd.option_context(*fmt):
            lines.append(breakdown.to_string(index=False))
    lines += [
        "",
        f"== {by}s, largest |delta| first (us; top {min(top, len(table))} of {len(table)})",
    ]
    shown = table.head(top).drop(columns=["raw_names"])
    shown.insert(len(shown.columns), "raw", [len(n) for n in table["raw_names"].head(top)])
    with pd.option_context(*fmt):
        lines.append(
            _shorten(shown).to_string(index=False) if len(shown) else "   nothing to compare"
        )
    return "\n".join(lines)
