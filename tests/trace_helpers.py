"""Shared paths and loaders for the trace tests (never writes beside tests/data)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import aorta.trace
from aorta.trace import Trace

DATA = Path(__file__).parent / "data" / "traces"
GOLDEN = DATA / "tracelens_golden"
ALL_TRACES = sorted(p.name for p in DATA.iterdir() if p.name.endswith((".json", ".json.gz")))


@cache
def shipped(*names: str) -> Trace:
    """A shipped trace (or several, as ranks), parsed once per test session, no cache file."""
    return aorta.trace.load([DATA / n for n in names], cache="off")
