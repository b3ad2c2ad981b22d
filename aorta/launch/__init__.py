"""Multi-node launch: one ``cluster.json``, torchrun on every node, one run directory.

The pieces, from pure to effectful:

* :mod:`~aorta.launch.cluster` — :class:`Cluster` / :class:`Node` from ``cluster.json`` or a
  hostfile (:func:`load_cluster`), validated with path-localised :class:`ClusterError`\\ s;
* :mod:`~aorta.launch.ssh` — :class:`SshOptions`, the one builder of every SSH call's options;
* :mod:`~aorta.launch.command` — :class:`LaunchSpec` and each node's quoted command line;
* :mod:`~aorta.launch.fanout` / :mod:`~aorta.launch.remote` — threads, deadlines,
  kill-on-bad-exit, teardown over SSH;
* :mod:`~aorta.launch.collect` — pulling artifacts into ``combined_traces/node_<rank>/``;
* :mod:`~aorta.launch.preflight` — environment snapshots and the cross-node diff;
* :func:`launch` / :func:`dry_run` — all of it, in order.

Examples
--------
>>> from aorta.launch import Cluster
>>> c = Cluster.from_dict({"node_dict": {"gpu-1": {"vpc_ip": "10.0.0.1"}, "gpu-2": {}}})
>>> c.head.label, c.master_addr()
('node0 gpu-1', '10.0.0.1')
"""

from .cluster import Cluster, ClusterError, Node, load_cluster, parse_hostfile
from .command import LaunchSpec, NodeCommand, NodePath, run_command
from .launcher import DryRun, dry_run, launch, new_run_id, ssh_sessions, sweep_spec
from .outcome import Deadlines, LaunchFailed, LaunchResult, NodeOutcome
from .preflight import compare
from .remote import RemoteError, SshSession
from .ssh import SshOptions

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
    "compare",
    "dry_run",
    "launch",
    "load_cluster",
    "new_run_id",
    "parse_hostfile",
    "run_command",
    "ssh_sessions",
    "sweep_spec",
]
