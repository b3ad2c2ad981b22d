"""Each trial's trace-metrics cache, ``trace/metrics.aorta-cache`` beside its traces: the
metrics :mod:`aorta.matrix.trace_metrics` computed, keyed by the trace files' sizes and times so
a changed trace is analysed again.

The matrix stays pure: it asks here for a cached result and hands its results back to be kept.

Examples
--------
>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> write_cached(folder, {"v": 1}, {"ranks": {}}) is None
True
>>> read_cached(folder, {"v": 1}), read_cached(folder, {"v": 2})
({'ranks': {}}, None)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aorta.store.rundir import atomic_write

__all__ = ["METRICS_CACHE", "read_cached", "write_cached"]

#: The file name inside a trial's ``trace/`` folder.
METRICS_CACHE = "metrics.aorta-cache"


def read_cached(trace_dir: Path, key: Mapping[str, Any]) -> dict[str, Any] | None:
    """The result cached under ``key`` in ``trace_dir``; ``None`` when absent, unreadable or
    stale (another key)."""
    try:
        data = json.loads((trace_dir / METRICS_CACHE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    result = data.get("result")
    return result if isinstance(result, dict) else None


def write_cached(trace_dir: Path, key: Mapping[str, Any], result: Mapping[str, Any]) -> str | None:
    """Keep ``result`` under ``key``; returns a one-line note when the cache cannot be written
    (a read-only run directory still loads, only slower next time)."""
    path = trace_dir / METRICS_CACHE
    try:
        atomic_write(path, json.dumps({"key": key, "result": result}))
    except OSError as exc:
        return f"{path}: metrics cache not written ({exc.strerror or exc})"
    return None
