"""Multi-node launch: one ``cluster.json``, torchrun on every node, one run directory.

The pieces, from pure to effectful:

* :mod:`~aorta.launch.cluster` — :class:`Cluster` / :class:`Node` from ``cluster.json`` or a
  hostfile (:func:`load_cluster`), validated with path-localised :class:`ClusterError`\\ s;
* :mod:`~aorta.launch.ssh` — the transport, Fabric: :class:`SshOptions` (the one builder of
  every connection) and :class:`SshSession` (run a command, pull a folder, with deadlines);
* :mod:`~aorta.launch.command` — :class:`LaunchSpec` and each node's quoted command line;
* :mod:`~aorta.launch.fanout` — the per-node thread map, kill-on-bad-exit, teardown;
* :mod:`~aorta.launch.gather` — pulled artifacts in ``combined_traces/node_<rank>/``;
* :mod:`~aorta.launch.preflight` — the cross-node environment diff (:func:`env_diff`);
* :func:`launch` / :func:`dry_run` — all of it, in order.

Examples
--------
>>> from aorta.launch import Cluster
>>> c = Cluster.from_dict({"node_dict": {"gpu-1": {"vpc_ip": "10.0.0.1"}, "gpu-2": {}}})
>>> c.head.label, c.master_addr()
('node0 gpu-1', '10.0.0.1')
"""

from .cluster import Cluster, ClusterError, Node, load_cluster, parse_hostfile, parse_nproc
from .command import LaunchSpec, NodeCommand, NodePath, run_command
from .launcher import DryRun, dry_run, launch, new_run_id, ssh_sessions, sweep_spec
from .outcome import Deadlines, LaunchFailed, LaunchResult, NodeOutcome
from .preflight import env_diff
from .ssh import RemoteError, SshOptions, SshSession

__all__ = [
    "Cluster",
    "ClusterError",
    "Deadlines",
    "DryRun",
    "LaunchFailed",
    "LaunchResult",
    "LaunchSpec",
    "Node",
    "NodeCommand",
    "NodeOutcome",
    "NodePath",
    "RemoteError",
    "SshOptions",
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
    "sweep_spec",
]
