"""Text renderings of a multi-node launch for a person: the dry-run table, each node's
versions, the settings that differ between nodes.

Pure functions returning strings; :mod:`aorta.launch` builds the data (and holds its own words:
node outcomes, teardown reports, the Slurm batch script), the CLI prints.

Examples
--------
>>> format_skew({"torch.version": {"node0": "2.4.0", "node1": "2.3.1"}})
['nodes differ in 1 setting(s):', '  torch.version: node0=2.4.0  node1=2.3.1']
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aorta.store.secrets import redact_env

if TYPE_CHECKING:  # typing only: launch/ sits above report/
    from aorta.launch import LaunchResult

__all__ = ["dry_run_lines", "format_skew", "on_login_node", "shorten", "version_rows"]


def format_skew(skew: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Lines for :func:`aorta.launch.env_diff`'s result (none when the nodes agree)."""
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


def dry_run_lines(report: LaunchResult) -> list[str]:
    """``aorta launch --dry-run``: each node's reachability, versions, environment (secret values
    redacted), command and remote line, then the settings that differ between nodes."""
    port = report.master_port or "? (the head could not probe one)"
    lines = [f"rendezvous: {report.master_addr}:{port}"]
    for name, out in report.outcomes.items():
        state = "reachable" if out.status == "ok" else f"NOT READY: {out.message}"
        lines += ["", f"{out.node.label}: {state}"]
        versions = version_rows(out.snapshot)
        if versions:
            lines.append("  " + "  ".join(f"{k} {v}" for k, v in versions.items()))
        cmd = report.commands.get(name)
        if cmd is not None:
            lines += ["  env:", *(f"    {k}={v}" for k, v in redact_env(cmd.env).items())]
            lines += [f"  unset: {' '.join(cmd.unset)}", *(f"  {c}" for c in cmd.container)]
            lines.append(f"  command: {cmd.describe().splitlines()[-1]}")
            lines.append(f"  remote line: {shorten(cmd.remote)}")
    return lines + format_skew(report.skew)


#: A node's per-launch folder as its sweep prints it: ``<workdir>/.aorta-launch/<run id>/node_<k>/``
#: (``aorta.launch.node_command.node_dir``), whose ``out/`` is the node's output root.
_NODE_OUT = re.compile(r"(?:[^\s'\"`]*/)?\.aorta-launch/[^/\s'\"`]+/node_\d+/out(?=/|\s|$)")


def on_login_node(text: str, output: str) -> str:
    """A node's output line with the paths under the node's own output root (where its sweep
    wrote) shown where they are once the launch has gathered them on the login node: under
    ``output``, the launch's output folder. A command a node prints (``aorta sweep resume
    RUN``) then names the run directory the user has.

    >>> on_login_node("resume with: aorta sweep resume /home/u/.aorta-launch/r1/node_0/out/T/w/2026", "runs")
    'resume with: aorta sweep resume runs/T/w/2026'
    """
    return _NODE_OUT.sub(lambda _: output.rstrip("/") or "/", text)


def shorten(line: str, *, most: int = 240) -> str:
    """A long line as its head and tail around how much was left out (a dry-run's remote
    line is kilobytes of quoted bootstrap).

    >>> shorten("x" * 1000, most=40)
    'xxxxxxxxxxxxxxxxxxxxxxxxxx … (+961 characters) … xxxxxxxxxxxxx'
    """
    if len(line) <= most:
        return line
    head, tail = most * 2 // 3, most // 3
    return f"{line[:head]} … (+{len(line) - head - tail} characters) … {line[-tail:]}"
