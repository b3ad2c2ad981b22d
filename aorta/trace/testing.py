"""Tiny hand-built Kineto traces with known answers (for tests, doctests and examples).

An op is a tuple ``(cat, name, ts_us, dur_us)`` or ``(cat, name, ts_us, dur_us, args)``.
GPU ops (``kernel``, ``gpu_memcpy``, ``gpu_memset``) get ``pid`` = device and ``tid`` =
stream, a fresh ``correlation`` and a runtime call that launches them just before they start
(``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``cudaMemsetAsync``); ``args={"linked": False}``
leaves one unlinked, ``args={"launch_ts": t}`` sets its launch time (``"launch_tid"`` its
host thread). Other ops run on the host
(``pid`` 100, ``tid`` 100 unless ``args`` says ``pid``/``tid``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from .classify import Rules
from .loader import build_trace
from .loader._parse import parse_events
from .model import Trace

__all__ = ["kineto_events", "kineto_json", "synthetic_trace"]

Op = tuple[Any, ...]
_LAUNCHER = {
    "kernel": "cudaLaunchKernel",
    "gpu_memcpy": "cudaMemcpyAsync",
    "gpu_memset": "cudaMemsetAsync",
}


def kineto_events(
    ops: Iterable[Op], *, pid: int = 100, tid: int = 100, device: int = 0, stream: int = 7
) -> list[dict[str, Any]]:
    """Kineto event dicts for ``ops`` (see the module docstring).

    Examples
    --------
    >>> [e["name"] for e in kineto_events([("kernel", "k", 10, 5)])]
    ['cudaLaunchKernel', 'k']
    """
    events: list[dict[str, Any]] = []
    correlation = 1
    for op in ops:
        cat, name, ts, dur = op[:4]
        args = dict(op[4]) if len(op) > 4 else {}
        if cat in _LAUNCHER:
            linked = args.pop("linked", True)
            launch_ts = args.pop("launch_ts", ts - 2)
            launch_tid = args.pop("launch_tid", tid)
            args = {
                "device": device,
                "stream": args.get("stream", stream),
                "correlation": correlation,
                **args,
            }
            events.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": name,
                    "pid": device,
                    "tid": args["stream"],
                    "ts": ts,
                    "dur": dur,
                    "args": args,
                }
            )
            if linked:
                launch = {"correlation": args["correlation"]}
                if "External id" in args:
                    launch["External id"] = args["External id"]
                events.append(
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": _LAUNCHER[cat],
                        "pid": pid,
                        "tid": launch_tid,
                        "ts": launch_ts,
                        "dur": 1,
                        "args": launch,
                    }
                )
            correlation += 1
        else:
            where = {"pid": args.pop("pid", pid), "tid": args.pop("tid", tid)}
            events.append(
                {"ph": "X", "cat": cat, "name": name, **where, "ts": ts, "dur": dur, "args": args}
            )
    events.sort(key=lambda e: e["ts"])
    return events


def kineto_json(
    ops: Iterable[Op], *, header: Mapping[str, Any] | None = None, **options: Any
) -> bytes:
    """A whole trace file (JSON bytes) holding ``ops``; ``header`` adds top-level keys.

    Examples
    --------
    >>> kineto_json([], header={"distributedInfo": {"rank": 1}})[:15]
    b'{"schemaVersion'
    """
    document = {
        "schemaVersion": 1,
        **dict(header or {}),
        "traceEvents": kineto_events(ops, **options),
    }
    return msgspec.json.encode(document)


def synthetic_trace(
    ops: Iterable[Op],
    *,
    header: Mapping[str, Any] | None = None,
    rules: Rules | None = None,
    **options: Any,
) -> Trace:
    """An in-memory :class:`Trace` of ``ops`` (no file involved).

    Examples
    --------
    >>> synthetic_trace([("kernel", "k", 0, 10)]).gpu_ops.end.tolist()
    [10000]
    """
    table = parse_events(kineto_events(ops, **options), header=dict(header or {}))
    return build_trace([(None, table, "off")], rules=rules)
