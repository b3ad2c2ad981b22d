"""Memory from a trace: Kineto's ``[memory]`` events per device (``profile_memory=True``).

Each allocation and free the profiler saw is an instant event (``ph: "i"``) named
``[memory]`` whose args give ``Bytes`` (negative for a free), ``Total Allocated`` and
``Total Reserved`` after it, ``Device Type`` (c10's numbering: 0 CPU, 1 CUDA — ROCm's HIP
reports as CUDA —, 12 XPU …) and ``Device Id``. :func:`memory_report` streams a trace file
once (the loader's scanner, :func:`aorta.trace.loader._scan.scan_events`; only these events,
the ``ProfilerStep#N`` annotations and the CPU ops are decoded, a few fields each) and gives,
per device: the events, allocations and frees (counts, bytes), ``peak_allocated_bytes`` and
``peak_reserved_bytes`` (the maxima of ``Total Allocated`` / ``Total Reserved``), when the
allocated peak came and which op was running on the allocating thread then (the innermost
``cpu_op`` around it, and the ops around that one: ``peak_stack``), and the timeline (for :func:`aorta.plot.trace.memory_timeline`).
A field an event lacks is never a number: a device without ``Device Type`` is ``unknown``, and
a peak no event gave a total for is NaN (``null`` in JSON, "unknown" in ``aorta trace memory``).

Examples
--------
>>> from aorta.trace.memory import report_from_events
>>> ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 0, "dur": 10, "tid": 1},
...       {"ph": "i", "name": "[memory]", "ts": 2, "tid": 1, "args": {"Bytes": 512,
...        "Total Allocated": 512, "Total Reserved": 2048, "Device Type": 1, "Device Id": 0}},
...       {"ph": "i", "name": "[memory]", "ts": 12, "tid": 1, "args": {"Bytes": -512,
...        "Total Allocated": 0, "Total Reserved": 2048, "Device Type": 1, "Device Id": 0}}]
>>> r = report_from_events(ev)
>>> r.devices[["device", "peak_allocated_bytes", "peak_reserved_bytes", "allocations", "peak_op"]].to_dict("records")
[{'device': 'cuda:0', 'peak_allocated_bytes': 512, 'peak_reserved_bytes': 2048, 'allocations': 1, 'peak_op': 'aten::empty'}]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from .loader._scan import scan_events

__all__ = [
    "DEVICE_TYPES",
    "MEMORY_COLUMNS",
    "MemoryReport",
    "memory_peaks",
    "memory_report",
    "report_from_events",
]

#: c10's ``DeviceType`` numbers as ``[memory]`` events carry them (HIP builds report CUDA).
DEVICE_TYPES: dict[int, str] = {
    0: "cpu",
    1: "cuda",
    6: "hip",
    12: "xpu",
    13: "mps",
    20: "privateuse1",
}
#: The columns of :attr:`MemoryReport.devices`.
MEMORY_COLUMNS = (
    "device",
    "device_type",
    "device_id",
    "events",
    "allocations",
    "allocated_bytes",
    "frees",
    "freed_bytes",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "peak_ts_us",
    "peak_op",
    "peak_stack",
    "peak_step",
)
I64 = int


class _MemArgs(msgspec.Struct, frozen=True, gc=False):
    # A field the event lacks is None (not a number that could pass for a size or a device):
    # a missing total is left out of the peaks, a missing device type reads "unknown".
    nbytes: I64 = msgspec.field(name="Bytes", default=0)
    allocated: I64 | None = msgspec.field(name="Total Allocated", default=None)
    reserved: I64 | None = msgspec.field(name="Total Reserved", default=None)
    device_type: I64 | None = msgspec.field(name="Device Type", default=None)
    device_id: I64 | None = msgspec.field(name="Device Id", default=None)


_NO_ARGS = _MemArgs()
#: A device type or id the event did not give (a group key, so not NaN): Kineto's own "no
#: device id" for the CPU; a type shown as :data:`UNKNOWN_DEVICE`, never as a number.
_NO_DEVICE = -1
#: The device type of events that do not name theirs.
UNKNOWN_DEVICE = "unknown"


class _Ev(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    tid: I64 | str = -1
    ts: float = math.nan
    dur: float = 0.0
    args: _MemArgs = _NO_ARGS


_DECODE = msgspec.json.Decoder(list[_Ev])
_ANY = msgspec.json.Decoder()


def _decode(chunk: memoryview) -> list[_Ev]:
    try:
        return _DECODE.decode(chunk)
    except msgspec.ValidationError:  # an odd value somewhere: event by event, the odd ones out
        out = []
        for item in _ANY.decode(chunk):
            try:
                out.append(msgspec.convert(item, _Ev))
            except (msgspec.ValidationError, TypeError):
                continue
        return out


@dataclass
class _Collect:
    """What one pass keeps: memory rows, steps, CPU ops (start, end, thread, name)."""

    mem: list[tuple[float, Any, int, float, float, int, int]] = field(default_factory=list)
    steps: list[tuple[str, float]] = field(default_factory=list)
    ops: list[tuple[float, float, Any, str]] = field(default_factory=list)

    def add(self, events: Iterable[_Ev]) -> None:
        for ev in events:
            if ev.ph == "X":
                if ev.cat == "cpu_op":
                    self.ops.append((ev.ts, ev.ts + ev.dur, ev.tid, ev.name))
                elif ev.name.startswith("ProfilerStep#") and ev.cat != "gpu_user_annotation":
                    self.steps.append((ev.name, ev.ts))
            elif ev.name == "[memory]":
                a = ev.args
                self.mem.append(
                    (
                        ev.ts,
                        ev.tid,
                        a.nbytes,
                        math.nan if a.allocated is None else a.allocated,
                        math.nan if a.reserved is None else a.reserved,
                        _NO_DEVICE if a.device_type is None else a.device_type,
                        _NO_DEVICE if a.device_id is None else a.device_id,
                    )
                )


@dataclass(frozen=True)
class MemoryReport:
    """A trace's memory: one row per device (:data:`MEMORY_COLUMNS`; sizes in bytes, the
    peak's time in the trace's µs), each device's timeline (``ts_us``, ``allocated``,
    ``reserved``, sorted by time), the steps' starts (``ProfilerStep#N`` → µs) and the file."""

    devices: pd.DataFrame
    timelines: Mapping[str, pd.DataFrame]
    steps: Sequence[tuple[str, float]]
    path: str = ""

    def to_json(self) -> dict[str, Any]:
        """``{"devices": [...]}``: the rows as plain JSON data (what ``--json`` prints)."""
        rows = []
        for row in self.devices.to_dict("records"):
            rows.append({k: _json_value(k, v) for k, v in row.items()})
        return {"file": self.path, "devices": rows, "steps": len(self.steps)}


#: Columns of whole numbers: a column holding one unknown (NaN) reads as floats in pandas.
_WHOLE = frozenset({"device_id", "peak_allocated_bytes", "peak_reserved_bytes"})


def _json_value(column: str, v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None  # unknown: the events did not give it
    if column in _WHOLE and isinstance(v, float):
        return int(v)
    return v


def _peak_ops(ops: Sequence[tuple[float, float, Any, str]], ts: float, tid: Any) -> list[str]:
    """The CPU ops on ``tid`` running at ``ts``, outermost first."""
    around = [(lo, name) for lo, hi, t, name in ops if t == tid and lo <= ts <= hi]
    return [name for _, name in sorted(around, key=lambda x: x[0])]


def _peak(totals: np.ndarray) -> int | float:
    """The largest known total (an int), or NaN when no event gave one."""
    known = totals[~np.isnan(totals)]
    return int(known.max()) if known.size else math.nan


def _build(c: _Collect, path: str) -> MemoryReport:
    steps = sorted(c.steps, key=lambda s: s[1])
    seen_steps = list(dict.fromkeys(steps))
    if not c.mem:
        return MemoryReport(pd.DataFrame(columns=list(MEMORY_COLUMNS)), {}, seen_steps, path)
    arr = pd.DataFrame(
        c.mem, columns=["ts_us", "tid", "bytes", "allocated", "reserved", "dtype", "did"]
    )
    arr = arr.sort_values("ts_us", kind="stable")
    rows, timelines = [], {}
    starts = np.array([s[1] for s in seen_steps], dtype=float)
    for (dtype, did), g in arr.groupby(["dtype", "did"], sort=True):
        kind = (
            UNKNOWN_DEVICE
            if dtype == _NO_DEVICE
            else DEVICE_TYPES.get(int(dtype), f"type{int(dtype)}")
        )
        name = kind if did == _NO_DEVICE else f"{kind}:{int(did)}"
        allocated = g["allocated"].to_numpy(dtype=float)
        reserved = g["reserved"].to_numpy(dtype=float)
        nbytes = g["bytes"].to_numpy()
        # NaN where an event lacked the total: such a peak is unknown (NaN), not -1 bytes.
        peak_alloc = _peak(allocated)
        peak_ts, stack, step = math.nan, [], -1
        if not math.isnan(peak_alloc):
            at = int(np.nanargmax(allocated))
            peak_ts = float(g["ts_us"].iloc[at])
            stack = _peak_ops(c.ops, peak_ts, g["tid"].iloc[at])
            step = int(np.searchsorted(starts, peak_ts, side="right")) - 1 if len(starts) else -1
        rows.append(
            {
                "device": name,
                "device_type": kind,
                "device_id": int(did),  # -1 without one, as Kineto writes the CPU's
                "events": len(g),
                "allocations": int((nbytes > 0).sum()),
                "allocated_bytes": int(nbytes[nbytes > 0].sum()),
                "frees": int((nbytes < 0).sum()),
                "freed_bytes": int(-nbytes[nbytes < 0].sum()),
                "peak_allocated_bytes": peak_alloc,
                "peak_reserved_bytes": _peak(reserved),
                "peak_ts_us": peak_ts,
                "peak_op": stack[-1] if stack else "",
                "peak_stack": " > ".join(stack[:2] + (["…"] if len(stack) > 4 else []) + stack[-2:])
                if len(stack) > 4
                else " > ".join(stack),
                "peak_step": seen_steps[step][0] if step >= 0 else "",
            }
        )
        timelines[name] = pd.DataFrame(
            {"ts_us": g["ts_us"].to_numpy(), "allocated": allocated, "reserved": reserved}
        )
    devices = pd.DataFrame(rows, columns=list(MEMORY_COLUMNS))
    return MemoryReport(devices, timelines, seen_steps, path)


def memory_report(path: str | Path) -> MemoryReport:
    """The memory of the trace file at ``path`` (``.json`` or gzip), in one streamed pass.

    Raises
    ------
    aorta.errors.TraceError
        The file cannot be read, is not a trace, or is truncated or corrupt (the message names
        the file and the offset).
    """
    c = _Collect()
    for events in scan_events(path, _decode):
        c.add(events)
    return _build(c, str(path))


def report_from_events(events: Sequence[Mapping[str, Any]]) -> MemoryReport:
    """:func:`memory_report` of events already in memory (tests, notebooks)."""
    c = _Collect()
    c.add(_decode(memoryview(msgspec.json.encode(list(events)))))
    return _build(c, "")


def memory_peaks(report: MemoryReport) -> dict[str, float]:
    """A rank's peaks for the matrix: ``peak_allocated_bytes`` / ``peak_reserved_bytes`` of its
    accelerators (the largest device's), else of the CPU; NaN without ``[memory]`` events.

    >>> memory_peaks(report_from_events([]))
    {'peak_allocated_bytes': nan, 'peak_reserved_bytes': nan}
    """
    d = report.devices
    if d.empty:
        return {"peak_allocated_bytes": math.nan, "peak_reserved_bytes": math.nan}
    gpu = d[d["device_type"] != "cpu"]
    pick = gpu if not gpu.empty else d
    return {
        "peak_allocated_bytes": float(pick["peak_allocated_bytes"].max()),
        "peak_reserved_bytes": float(pick["peak_reserved_bytes"].max()),
    }
