"""Multi-node launch: one ``cluster.json``, torchrun on every node, one run directory.

From pure to effectful: :mod:`~aorta.recipe.cluster` (the cluster file), :mod:`~.command`
(:class:`LaunchSpec`, each node's quoted command line), :mod:`~.container` (each node's part
in a docker container: the cluster file's ``container:`` block), :mod:`~.outcome` (per-node outcomes,
the cross-node :func:`env_diff`), :mod:`~.gather` (``combined_traces/node_<rank>/``),
:mod:`~.ssh` (Fabric, the one transport) and :mod:`~.launcher` (:func:`launch`,
:func:`dry_run`: fan-out, kill-on-bad-exit, teardown, gathering).

>>> c = Cluster.from_dict({"node_dict": {"gpu-1": {"vpc_ip": "10.0.0.1"}, "gpu-2": {}}})
>>> c.head.label, c.master_addr()
('node0 gpu-1', '10.0.0.1')
"""

from aorta.recipe.cluster import (
    Cluster,
    ClusterError,
    Container,
    Node,
    load_cluster,
    parse_hostfile,
    parse_nproc,
)

from .command import LaunchSpec, NodeCommand, NodePath, run_command
from .launcher import dry_run, launch, new_run_id
from .outcome import Deadlines, LaunchFailed, LaunchResult, NodeOutcome, env_diff
from .ssh import RemoteError, SshSession, ssh_sessions

__all__ = [
    "Cluster",
    "ClusterError",
    "Container",
    "Deadlines",
    "LaunchFailed",
    "LaunchResult",
    "LaunchSpec",
    "Node",
    "NodeCommand",
    "NodeOutcome",
    "NodePath",
    "RemoteError",
    "SshSession",
    "dry_run",
    "env_diff",
    "launch",
    "load_cluster",
    "new_run_id",
    "parse_hostfile",
    "parse_nproc",
    "run_command",
    "ssh_sessions",
]
