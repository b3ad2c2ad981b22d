"""Preflight: what each node runs with, and where the nodes disagree.

Every launch (and ``--dry-run``) snapshots each node's environment during setup: Python, aorta
and torch versions, the torch build's CUDA/HIP version, the NCCL/RCCL libraries, the GPU driver,
and the variables that steer them (``NCCL_*``, ``HSA_*``, ...; secrets redacted). A difference
between nodes — one node on another torch, one with ``NCCL_IB_DISABLE`` set — is a classic
cluster-only bug, so :func:`env_diff` lists every key whose value is not the same everywhere.
The snapshots are :func:`aorta.store.hostenv.snapshot`'s, taken on each node.

Examples
--------
>>> skew = env_diff({
...     "node0": {"torch": {"version": "2.4.0"}, "env": {"NCCL_DEBUG": "INFO"}, "host": "a"},
...     "node1": {"torch": {"version": "2.3.1"}, "env": {}, "host": "b"},
... })
>>> sorted(skew)
['env.NCCL_DEBUG', 'torch.version']
>>> format_skew(skew)[2]
'  torch.version: node0=2.4.0  node1=2.3.1'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aorta.envvars import LAUNCH_PROVIDED

__all__ = ["IGNORED_KEYS", "env_diff", "flatten", "format_skew", "version_rows"]

#: Keys expected to differ between nodes (the launcher's own per-node variables included).
IGNORED_KEYS = frozenset({"host", "taken_at", *(f"env.{name}" for name in LAUNCH_PROVIDED)})
MISSING = "(unset)"


def flatten(snapshot: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"packages": {"torch": "2.4"}}`` → ``{"packages.torch": "2.4"}``."""
    out: dict[str, Any] = {}
    for key, value in snapshot.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{path}."))
        else:
            out[path] = value
    return out


def env_diff(snapshots: Mapping[str, Mapping[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """Keys whose values differ across the nodes that have a snapshot: ``{key: {node: value}}``.

    A key present on some nodes only is reported with ``(unset)`` for the others.
    """
    flat = {name: flatten(s) for name, s in snapshots.items() if s}
    if len(flat) < 2:
        return {}
    keys = sorted(set().union(*flat.values()) - IGNORED_KEYS)
    skew: dict[str, dict[str, Any]] = {}
    for key in keys:
        values = {name: f.get(key, MISSING) for name, f in flat.items()}
        if len({repr(v) for v in values.values()}) > 1:
            skew[key] = values
    return skew


def format_skew(skew: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Human lines for :func:`env_diff`'s result (empty when the nodes agree)."""
    if not skew:
        return []
    lines = [f"nodes differ in {len(skew)} setting(s):"]
    for key, values in skew.items():
        lines.append(f"  {key}: " + "  ".join(f"{n}={v}" for n, v in values.items()))
    return lines


def _or_none(value: Any) -> str:
    return "-" if value in (None, "", {}) else str(value)


def version_rows(snapshot: Mapping[str, Any] | None) -> dict[str, str]:
    """The versions ``--dry-run`` shows for one node (``-`` when found none)."""
    if not snapshot:
        return {}
    torch, libs = snapshot.get("torch") or {}, snapshot.get("libraries") or {}
    drivers = snapshot.get("drivers") or {}
    return {
        "python": _or_none(snapshot.get("python")),
        "aorta": _or_none(snapshot.get("aorta")),
        "torch": _or_none(torch.get("version")),
        "cuda/hip": _or_none(torch.get("cuda") or torch.get("hip")),
        "nccl/rccl": _or_none(libs.get("nccl_wheel") or libs.get("nccl") or libs.get("rccl")),
        "driver": _or_none(drivers.get("nvidia") or drivers.get("amdgpu") or drivers.get("rocm")),
    }
