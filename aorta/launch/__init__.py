"""Multi-node launch: one ``cluster.json``, torchrun on every node, one run directory.

The cluster file is read in :mod:`aorta.recipe.cluster`, what runs (:class:`LaunchSpec`: a
recipe's sweep, a CVS config's job) in :mod:`aorta.recipe.launch_spec`; their names are
re-exported here. From pure to effectful: :mod:`~.node_command` (each node's command line),
:mod:`~.outcome` (per-node outcomes, the cross-node :func:`env_diff`), :mod:`~.backend` (the one
lifecycle every backend goes through, and its per-node result map; the folders it gathers
into, ``combined_traces/node_<rank>/``, are :mod:`aorta.store.gather`'s), :mod:`~.ssh`
(Fabric, the one transport), :mod:`~.container` (each node's part in a docker container: the
cluster file's ``container:`` block), :mod:`~.launcher` (the SSH backends; :func:`launch`,
:func:`dry_run`; :func:`run`, the one entry point, which picks the backend from a frozen
:class:`LaunchOptions`) and :mod:`~.slurm` (the Slurm backend).

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
    LaunchOptions,
    LaunchSpec,
    NodePath,
    sweep_spec,
)

from .backend import new_run_id
from .launcher import dry_run, launch, run
from .node_command import NodeCommand, run_command
from .outcome import Deadlines, Launched, LaunchFailed, LaunchResult, NodeOutcome, env_diff
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
