"""Preflight: where the nodes' environments disagree.

Setup snapshots every node (:func:`aorta.store.hostenv.snapshot`, run on the node: versions,
drivers, the variables that steer NCCL/RCCL, secrets redacted). A difference between nodes — one
on another torch, one with ``NCCL_IB_DISABLE`` set — is a classic cluster-only bug, so
:func:`env_diff` lists every key whose value is not the same everywhere
(:func:`aorta.report.launch.format_skew` prints it).

>>> sorted(env_diff({
...     "node0": {"torch": {"version": "2.4.0"}, "env": {"NCCL_DEBUG": "INFO"}, "host": "a"},
...     "node1": {"torch": {"version": "2.3.1"}, "env": {}, "host": "b"},
... }))
['env.NCCL_DEBUG', 'torch.version']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aorta.envvars import LAUNCH_PROVIDED

__all__ = ["IGNORED_KEYS", "env_diff", "flatten"]

#: Keys expected to differ between nodes (the launcher's own per-node variables included).
IGNORED_KEYS = frozenset({"host", "taken_at", *(f"env.{name}" for name in LAUNCH_PROVIDED)})
MISSING = "(unset)"


def flatten(snapshot: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"packages": {"torch": "2.4"}}`` → ``{"packages.torch": "2.4"}``."""
    out: dict[str, Any] = {}
    for key, value in snapshot.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def env_diff(snapshots: Mapping[str, Mapping[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """Keys whose values differ across the nodes that have a snapshot: ``{key: {node: value}}``;
    a key some nodes lack is ``(unset)`` there."""
    flat = {name: flatten(s) for name, s in snapshots.items() if s}
    if len(flat) < 2:
        return {}
    skew: dict[str, dict[str, Any]] = {}
    for key in sorted(set().union(*flat.values()) - IGNORED_KEYS):
        values = {name: f.get(key, MISSING) for name, f in flat.items()}
        if len({repr(v) for v in values.values()}) > 1:
            skew[key] = values
    return skew
