"""Multi-node launch: one ``cluster.json``, torchrun on every node, one run directory
(docs/launch.md; its modules: docs/architecture.md). :func:`run` is the one entry point; the
cluster file and what runs (:class:`LaunchSpec`) are read in :mod:`aorta.recipe`, re-exported.

>>> c = Cluster.from_dict({"node_dict": {"gpu-1": {"vpc_ip": "10.0.0.1"}, "gpu-2": {}}})
>>> c.head.label, c.master_addr()
('node0 gpu-1', '10.0.0.1')
"""

from aorta.recipe.cluster import (  # the cluster file, read with the other inputs
    Cluster,
    ClusterError,
    Container,
    Node,
    load_cluster,
    parse_hostfile,
    parse_nproc,
)
from aorta.recipe.launch_spec import (  # what runs, and how: inputs too
    Deadlines,
    LaunchOptions,
    LaunchSpec,
    NodePath,
    sweep_spec,
)
from aorta.store.gather import new_run_id  # a launch's run id names its run directory

from .launcher import dry_run, launch, run
from .node_command import NodeCommand, run_command
from .outcome import Launched, LaunchFailed, LaunchResult, NodeOutcome, env_diff
from .ssh import RemoteError, SshSession, ssh_sessions

__all__ = [
    "Cluster",
    "ClusterError",
    "Container",
    "Deadlines",
    "LaunchFailed",
    "LaunchOptions",
    "LaunchResult",
    "LaunchSpec",
    "Launched",
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
    "run",
    "run_command",
    "ssh_sessions",
    "sweep_spec",
]
