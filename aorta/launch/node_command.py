"""What runs on each node, as text (pure, no SSH): every value that reaches a remote shell is
quoted here and nowhere else; environment values travel in :data:`ENV_FILE`, never in argv.
What runs is a :class:`~aorta.recipe.launch_spec.LaunchSpec`, validated with the other inputs.

>>> from aorta.recipe.cluster import Cluster
>>> cluster = Cluster.from_dict({"node_dict": {"10.0.0.1": {}, "10.0.0.2": {}}})
>>> spec = LaunchSpec(argv=("-m", "train", "--name", "a b"), nproc_per_node=2)
>>> cmd = run_command(cluster, cluster.nodes[1], spec, run_id="r1",
...                   node_dir="/w/.aorta-launch/r1/node_1", master_addr="10.0.0.1", master_port=29500)
>>> cmd.argv[:7]  # doctest: +NORMALIZE_WHITESPACE
['python3', '-m', 'torch.distributed.run', '--nnodes=2', '--nproc-per-node=2', '--node-rank=1',
 '--master-addr=10.0.0.1']
>>> cmd.env["AORTA_NODE_RANK"], "'a b'" in cmd.remote
('1', True)
"""

from __future__ import annotations

import base64
import functools
import json
import posixpath
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from aorta import envvars
from aorta.recipe.cluster import Cluster, Node
from aorta.recipe.launch_spec import LaunchSpec, NodePath
from aorta.store.secrets import redact_env

__all__ = [
    "ENV_FILE",
    "STARTED_MARKER",
    "NodeCommand",
    "env_file_command",
    "env_script",
    "kill_command",
    "node_dir",
    "node_env",
    "port_probe",
    "run_command",
    "setup_command",
]

LAUNCH_DIR = ".aorta-launch"  # in a node's workdir: one sub-folder per launch
#: The program's environment in the node's per-run folder (0600, removed once read).
ENV_FILE = "env.sh"
STARTED_MARKER = "__aorta_launch_started__"  # printed right before the program starts
WATCHDOG_MARK = "AORTA_LAUNCH_WATCHDOG=1"  # a run's watchdog, which every kill spares
_WATCHDOG = 'cat <&3 >/dev/null; "$0" "$1" kill <"$2"'
#: torchrun's identity variables, removed from the login environment (a stale profile export);
#: ``*_VISIBLE_DEVICES`` stay: they describe the node.
TORCHRUN_OWNED = tuple(
    sorted(n for n in envvars.LAUNCHER_IDENTITY if not n.endswith("_VISIBLE_DEVICES"))
)


@dataclass(frozen=True)
class NodeCommand:
    """One node's launch: the environment, the program's argv, and the remote shell line."""

    node: Node
    #: Set for the program on top of the login environment (through :data:`ENV_FILE`).
    env: Mapping[str, str]
    #: Removed from the login environment: torchrun owns them.
    unset: tuple[str, ...]
    #: The program (``python -m torch.distributed.run ...``), one element per argument.
    argv: list[str]
    cwd: str
    node_dir: str
    #: The exact line sent over SSH (inside the container: after its ``docker exec``).
    remote: str
    #: In a container: how it is started and entered (no values, see ``ContainerSession``).
    container: tuple[str, ...] = ()

    def describe(self) -> str:
        """``cd <cwd> && env K=V ... <argv>``, secret values redacted (``launch.json``)."""
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in redact_env(self.env).items())
        where = "".join(f"{line}\n" for line in self.container)
        return f"{where}cd {shlex.quote(self.cwd)} && env {env} {shlex.join(self.argv)}"


def node_dir(node: Node, run_id: str) -> str:
    """The node's per-run folder, relative to its login directory unless its workdir is absolute."""
    return posixpath.join(node.workdir, LAUNCH_DIR, run_id, f"node_{node.rank}")


def env_script(env: Mapping[str, str]) -> bytes:
    """:data:`ENV_FILE`'s text: ``export K='v'`` lines, sourced (then removed) by the run."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()).encode()


def _env_prefix(env: Mapping[str, str]) -> str:
    # Names and aorta's own identity only: other values travel in ENV_FILE.
    unset = [f"-u {name}" for name in TORCHRUN_OWNED]
    return " ".join(["env", *unset, *(shlex.quote(f"{k}={v}") for k, v in env.items())])


def node_env(node: Node, spec: LaunchSpec, *, run_id: str, node_dir: str) -> dict[str, str]:
    """Cluster env, node env, the spec's env, then the launcher's own (which nothing overrides)."""
    return {
        **node.env_vars,
        **spec.env,
        envvars.RUN_ID: run_id,
        envvars.NODE_RANK: str(node.rank),
        envvars.LAUNCH_OUTPUT_DIR: posixpath.join(node_dir, "out"),
    }


def _program(
    cluster: Cluster, node: Node, spec: LaunchSpec, node_dir: str, rdzv: tuple[str, int]
) -> list[str]:
    args = [a.resolve(node_dir) if isinstance(a, NodePath) else str(a) for a in spec.argv]
    if spec.overrides:
        args += ["--override", *spec.overrides]
    if not spec.torchrun:
        return args
    nproc, (addr, port) = spec.nproc_per_node or node.slots or 1, rdzv
    torchrun = [node.python, "-m", "torch.distributed.run", f"--nnodes={len(cluster.nodes)}"]
    torchrun += [f"--nproc-per-node={nproc}", f"--node-rank={node.rank}"]
    return [*torchrun, f"--master-addr={addr}", f"--master-port={port}", "--max-restarts=0", *args]


def run_command(
    cluster: Cluster,
    node: Node,
    spec: LaunchSpec,
    *,
    run_id: str,
    node_dir: str,
    master_addr: str,
    master_port: int,
    cwd: str | None = None,
) -> NodeCommand:
    """The command that starts ``spec`` on ``node``: in the workdir, in a session of its own
    whose leader — unless ``<node_dir>/cancel`` exists — writes ``<node_dir>/pid``, sources and
    removes :data:`ENV_FILE`, prints :data:`STARTED_MARKER` and execs the program.

    A watchdog waits on the command's stdin (the SSH channel the launch keeps open): when it
    closes — the launch ended, or its launcher died — it runs ``helper.py kill``.
    """
    env = node_env(node, spec, run_id=run_id, node_dir=node_dir)
    argv = _program(cluster, node, spec, node_dir, (master_addr, master_port))
    q = shlex.quote
    # An asynchronous list reads /dev/null, so the channel reaches the watchdog as fd 3; the
    # marker variable keeps the kill it runs (and every other kill) from counting it.
    watchdog = (
        f"exec 3<&0; env {WATCHDOG_MARK} sh -c {q(_WATCHDOG)} "
        f"{q(node.python)} {q(node_dir + '/helper.py')} {q(node_dir + '/kill.json')} "
        ">/dev/null 2>&1 &"
    )
    env_file = q(posixpath.join(node_dir, ENV_FILE))
    inner = (
        f"test -e {q(node_dir + '/cancel')} && exit 143; "
        f"echo $$ > {q(node_dir + '/pid')}; "
        f"{watchdog} "
        f". {env_file} || exit 126; rm -f {env_file}; "
        f"echo {STARTED_MARKER} $$; "
        f"exec {_env_prefix({})} {shlex.join(argv)} </dev/null 3<&-"
    )
    workdir = cwd or node.workdir
    remote = (
        f"cd {q(workdir)} && if command -v setsid >/dev/null 2>&1; "
        f"then exec setsid -w sh -c {q(inner)}; else exec sh -c {q(inner)}; fi"
    )
    return NodeCommand(node, env, TORCHRUN_OWNED, argv, workdir, node_dir, remote)


@functools.cache  # shipped to every node, in every request: read each file once
def _source(package: str, name: str) -> str:
    return resources.files(package).joinpath(name).read_text()


def _proctree_source() -> str:  # the node agent's process finder (aorta/run/proctree.py)
    return _source("aorta.run", "proctree.py")


def port_probe() -> str:
    """``python -c`` source printing a rendezvous port free on the node it runs on
    (:func:`aorta.run.ports.rendezvous_port`)."""
    return _source("aorta.run", "ports.py") + "\nprint(rendezvous_port())\n"


def _helper(node: Node, op: str, env: Mapping[str, str]) -> str:
    helper = [node.python, "-c", _source("aorta.launch", "_remote.py"), op]
    return f"{_env_prefix(env)} {shlex.join(helper)}"


def _identity(node: Node, run_id: str) -> dict[str, str]:  # what this run's processes carry
    return {envvars.RUN_ID: run_id, envvars.NODE_RANK: str(node.rank)}


def setup_command(
    node: Node,
    spec: LaunchSpec,
    *,
    run_id: str,
    probe_port: bool,
    dry_run: bool = False,
    head_token: str | None = None,
) -> tuple[str, bytes]:
    """The setup line for ``node`` and its stdin: a JSON request to the node helper
    (:mod:`._remote`), which holds everything, environment values included."""
    ndir = node_dir(node, run_id)
    files = {**spec.files, "helper.py": _source("aorta.launch", "_remote.py").encode()}
    request = {
        "node_dir": ndir,
        "workdir": node.workdir,
        "files": {name: base64.b64encode(data).decode() for name, data in files.items()},
        "kill": {"match": _identity(node, run_id), "grace": 5.0, "proctree": _proctree_source()},
        "requires": list(spec.requires),
        "probe_port": probe_port,
        "ports": _source("aorta.run", "ports.py") if probe_port else "",
        "dry_run": dry_run,
        "head_token": head_token,
        **{m: _source("aorta.store", f"{m}.py") for m in ("hostenv", "secrets")},
        "scrub_env_keys": list(spec.scrub_env_keys),
        # For the snapshot only, on stdin: values never go into a command line.
        "env": node_env(node, spec, run_id=run_id, node_dir=ndir),
    }
    return _helper(node, "setup", _identity(node, run_id)), json.dumps(request).encode()


def env_file_command(node_dir: str) -> str:
    """The line that writes :data:`ENV_FILE` (0600) from its stdin (:func:`env_script`)."""
    return f"umask 077 && cat > {shlex.quote(posixpath.join(node_dir, ENV_FILE))}"


def kill_command(
    node: Node,
    *,
    run_id: str,
    node_dir: str,
    grace: float,
    head_dir: str | None = None,
    head_token: str | None = None,
) -> tuple[str, bytes]:
    """The line (and stdin) that stops everything this run started on ``node``; with the head's
    folder and token, the reply also says whether ``node`` shares the head's file system
    (``shares_head``) and sees the head's output path (``head_out``)."""
    match = _identity(node, run_id)
    request = {"node_dir": node_dir, "match": match, "grace": grace, "head_dir": head_dir}
    request["head_token"] = head_token
    request["proctree"] = _proctree_source()
    # Without a working Python (the node's interpreter is what failed setup), still stop the
    # pid file's session and report it in the helper's format.
    pid = shlex.quote(posixpath.join(node_dir, "pid"))
    fallback = (
        f"{{ p=$(cat {pid} 2>/dev/null) && kill -KILL -- -$p 2>/dev/null; "
        """echo '{"terminated": 0, "killed": 0, "left": [], "fallback": true}'; }"""
    )
    return f"{_helper(node, 'kill', {})} || {fallback}", json.dumps(request).encode()
