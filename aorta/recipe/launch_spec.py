"""What ``aorta launch`` runs on every node, as a :class:`LaunchSpec` (the program, its
environment, the files shipped with it; validated like every other input): a recipe's sweep
(:func:`sweep_spec`), or the training job of a CVS config (:func:`cvs_spec`, read by
:mod:`aorta.recipe.cvs`) swept the same way. Every backend of :mod:`aorta.launch` launches what
these build; each node's command line is :mod:`aorta.launch.node_command`'s. How a launch runs
is one frozen :class:`LaunchOptions` (``aorta launch``'s flags); :func:`launch_job` reads what
it runs from them.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from aorta import envvars
from aorta.errors import UsageError
from aorta.recipe import cvs
from aorta.recipe.cluster import Cluster, NprocPerNode, parse_nproc
from aorta.recipe.load import scrub_env_keys_of

__all__ = [
    "CvsLaunch",
    "Deadlines",
    "LaunchOptions",
    "LaunchSpec",
    "NodePath",
    "cvs_spec",
    "launch_job",
    "sweep_spec",
]

_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class NodePath:
    """An argument naming a file in the node's per-run folder
    (:func:`aorta.launch.node_command.node_dir`)."""

    relative: str

    def resolve(self, node_dir: str) -> str:
        return posixpath.join(node_dir, self.relative) if self.relative else node_dir


@dataclass(frozen=True)
class LaunchSpec:
    """What every process of the launch runs, and with what.

    ``argv`` follows torchrun (``("-m", "aorta", ...)`` or a script and its arguments), or with
    ``torchrun=False`` is the whole command, run once per node. ``overrides`` are appended as
    ONE ``--override k=v k2=v2`` group (for ``argparse(nargs="*")``). ``files`` are written into
    every node's per-run folder (see :class:`NodePath`); ``requires`` names modules the node's
    Python must import. ``scrub_env_keys`` (a recipe's) redact the nodes' ``host_env.json``.
    """

    argv: tuple[str | NodePath, ...]
    torchrun: bool = True
    #: Processes per node; ``None``: the node's ``nproc_per_node``/``slots``, else 1.
    nproc_per_node: NprocPerNode | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    overrides: tuple[str, ...] = ()
    files: Mapping[str, bytes] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    #: Rendezvous; ``None``: the head's vpc_ip (else SSH address), a port free on the head.
    master_addr: str | None = None
    master_port: int | None = None
    scrub_env_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.argv:
            raise UsageError("nothing to launch: the command is empty")
        problems = envvars.env_problems(self.env, allow={envvars.TRIAL_MASTER_PORT_BASE})
        if problems:
            raise UsageError("; ".join(f"env {name}: {message}" for name, message in problems))
        for name in self.files:
            if not _FILE_NAME.match(name):
                raise UsageError(f"{name!r}: shipped files are plain names (no '/' or leading '.')")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise UsageError(f"master port {self.master_port} is not a TCP port (1-65535)")


def sweep_spec(
    recipe: str | Path,
    *,
    command: Sequence[str] = (),
    overrides: Sequence[str] = (),
    nproc_per_node: NprocPerNode | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    ticket: str | None = None,
    recipe_text: bytes | None = None,
) -> LaunchSpec:
    """``aorta sweep run --recipe R [-- command]`` under torchrun, the recipe shipped to every
    node (its ``redaction.scrub_env_keys`` redact the nodes' ``host_env.json``): what both
    backends launch. Raises :class:`~aorta.errors.UsageError` for an unreadable recipe or
    overrides without a command. ``recipe_text``: the recipe itself (``recipe`` names it).

    >>> import pathlib, tempfile
    >>> recipe = pathlib.Path(tempfile.mkdtemp()) / "probe.yaml"
    >>> _ = recipe.write_text("mode: probe\\nmitigation_axis: [none]\\n")
    >>> spec = sweep_spec(recipe, command=["python", "train.py"], overrides=["lr=0.1"])
    >>> spec.argv[:4], spec.argv[-3:], spec.overrides
    (('-m', 'aorta', 'sweep', 'run'), ('--', 'python', 'train.py'), ('lr=0.1',))
    """
    path = Path(recipe)
    try:
        data = path.read_bytes() if recipe_text is None else recipe_text
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the recipe: {exc.strerror or exc}") from None
    if overrides and not command:
        raise UsageError("--override needs a training command after '--' to pass the overrides to")
    name = "recipe" + (path.suffix if path.suffix in (".yaml", ".yml", ".json") else ".yaml")
    argv: list[str | NodePath] = ["-m", "aorta", "sweep", "run", "--recipe", NodePath(name)]
    argv += ["--output", NodePath("out")]
    argv += [*(["--ticket", ticket] if ticket else []), *(["--", *command] if command else [])]
    return LaunchSpec(
        argv=tuple(argv),
        nproc_per_node=nproc_per_node,
        overrides=tuple(overrides),
        files={name: data},
        requires=("torch", "aorta"),
        master_addr=master_addr,
        master_port=master_port,
        scrub_env_keys=scrub_env_keys_of(data),
    )


@dataclass(frozen=True)
class CvsLaunch:
    """What :func:`cvs_spec` (or :func:`launch_job`) read: the spec, the run deadline (``None``:
    not set there), and what the user should be told (never fatal)."""

    spec: LaunchSpec
    run_timeout: float | None
    warnings: tuple[str, ...]


def cvs_spec(
    path: str | Path,
    cluster: Cluster | None,
    *,
    recipe: str | Path | None = None,
    overrides: Sequence[str] = (),
    nproc_per_node: NprocPerNode | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    ticket: str | None = None,
) -> CvsLaunch:
    """The launch a CVS config asks for (:mod:`aorta.recipe.cvs`), the given options winning
    over the config's; without ``recipe``, a one-trial probe recipe runs the training command
    once. Its ``train_script`` runs with the image's Python in a container, else the nodes'
    when they agree, else ``python3`` from the node's ``PATH``."""
    python = "python3"
    if cluster is not None and cluster.container is not None:
        python = cluster.container.python
    elif cluster is not None and len({n.python for n in cluster.nodes}) == 1:
        python = cluster.head.python
    job = cvs.load_cvs_config(path, python=python)
    by_key = {o.partition("=")[0]: o for o in (*job.overrides, *overrides)}  # the caller's win
    spec = sweep_spec(
        recipe or Path("recipe.yaml"),
        command=job.command,
        overrides=tuple(by_key.values()),
        nproc_per_node=nproc_per_node or job.nproc_per_node,
        master_addr=master_addr or job.master_addr,
        master_port=master_port or job.master_port,
        ticket=ticket,
        recipe_text=None if recipe else cvs.probe_recipe(),
    )
    spec = replace(spec, env={**spec.env, **job.env})
    return CvsLaunch(spec, job.run_timeout, job.warnings)


@dataclass(frozen=True)
class Deadlines:
    """Seconds allowed for each phase; every wait of a launch is bounded by one of these (the
    defaults of :class:`LaunchOptions`' timeouts)."""

    setup: float = 120.0  # connect, per-run folder, snapshot, port: all nodes together
    run: float = 24 * 3600.0  # from the first start to the last exit
    collect: float = 600.0  # pulling every node's artifacts
    kill_grace: float = 5.0  # SIGTERM → SIGKILL on a node being stopped
    teardown: float = 30.0  # stopping every node (connect + kill), after the grace


@dataclass(frozen=True, kw_only=True)
class LaunchOptions:
    """How a launch runs (``aorta launch``'s flags): what to run, where the results go, the
    deadlines, and the backend — over SSH on the cluster file's nodes (in a container with
    ``container``), or through Slurm (``slurm``). :func:`aorta.launch.run` takes one.

    Frozen: derive another with :func:`dataclasses.replace`. Nothing is checked here; a bad
    value is refused (:class:`~aorta.errors.UsageError`) before anything starts.

    Parameters
    ----------
    cluster
        The cluster file (CVS ``cluster.json`` or a hostfile; default ``cluster.json``).
    recipe, command, overrides, ticket
        The recipe every node sweeps, the training command after ``--``, its ``KEY=VALUE``
        overrides, the ticket (default none; :func:`sweep_spec`).
    cvs_config
        A CVS Aorta config whose training job runs instead (:func:`cvs_spec`; default none).
    nproc_per_node, master_addr, master_port
        Processes per node (``N``, ``"gpu"``, ``"auto"``) and the rendezvous (default: the
        cluster's, the head's address, a free port on the head).
    output
        Root of the run directories (default ``triage_results``).
    dry_run
        Check every node and build its command (Slurm: the batch script); start nothing.
    setup_timeout, run_timeout, collect_timeout
        Seconds for setup, the run (default: the CVS config's, else 24 h) and gathering.
    container
        An image to run each node's part in (the cluster file's ``container:`` block).
    slurm, nodes, partition, time_limit, gpus_per_node, account, sbatch_args
        Launch through Slurm: srun inside an allocation, else sbatch ``nodes`` nodes with these
        ``#SBATCH`` options.
    srun_ranks, no_wait, attach, in_job
        One srun task per rank (no torchrun); submit and return; follow the job ``attach``
        submitted earlier; run the batch job's step from the staging folder ``in_job``.

    Examples
    --------
    >>> opts = LaunchOptions(recipe="probe.yaml", slurm=True, nodes=2, partition="gpu")
    >>> opts.sbatch_options()
    ['--partition=gpu']
    >>> opts.output, opts.dry_run
    ('triage_results', False)
    """

    cluster: str | Path = "cluster.json"
    recipe: str | Path | None = None
    command: Sequence[str] = ()
    overrides: Sequence[str] = ()
    ticket: str | None = None
    cvs_config: str | Path | None = None
    nproc_per_node: str | int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    output: str | Path = "triage_results"
    dry_run: bool = False
    setup_timeout: float = Deadlines.setup
    run_timeout: float | None = None
    collect_timeout: float = Deadlines.collect
    container: str | None = None
    slurm: bool = False
    nodes: int | None = None
    partition: str | None = None
    time_limit: str | None = None
    gpus_per_node: int | None = None
    account: str | None = None
    sbatch_args: Sequence[str] = ()
    srun_ranks: bool = False
    no_wait: bool = False
    attach: str | None = None
    in_job: str | Path | None = None

    def sbatch_options(self) -> list[str]:
        """The ``#SBATCH`` options: partition, time, GPUs per node, account, then ``sbatch_args``."""
        named: dict[str, object] = {"partition": self.partition, "time": self.time_limit}
        named |= {"gpus-per-node": self.gpus_per_node, "account": self.account}
        return [*(f"--{k}={v}" for k, v in named.items() if v is not None), *self.sbatch_args]


def launch_job(options: LaunchOptions, cluster: Cluster | None) -> CvsLaunch | None:
    """What ``options`` runs: the CVS config's job (``cluster``: the nodes it runs on, when
    known), else the recipe's sweep; ``None`` for a Slurm job followed with ``attach`` and no
    recipe. Raises :class:`~aorta.errors.UsageError` for a missing recipe or a bad option.

    >>> launch_job(LaunchOptions(slurm=True, attach="42"), None) is None
    True
    """
    o = options
    if o.slurm and o.container is not None:
        raise UsageError("--container runs over SSH (the cluster file's nodes), not with --slurm")
    if o.slurm and o.dry_run and o.nodes is None and o.attach is None:
        raise UsageError("--dry-run with --slurm shows the sbatch script: give --nodes")
    if o.cvs_config is not None:
        nproc = _nproc(o.nproc_per_node)
        if o.command:
            raise UsageError(
                f"--cvs-config {o.cvs_config} gives the training command: drop the one after '--'"
            )
        return cvs_spec(
            o.cvs_config,
            cluster,
            recipe=o.recipe,
            overrides=o.overrides,
            nproc_per_node=nproc,
            master_addr=o.master_addr,
            master_port=o.master_port,
            ticket=o.ticket,
        )
    if o.recipe is None and not (o.slurm and o.attach):
        raise UsageError("give --recipe FILE (the recipe every node sweeps)")
    if o.recipe is None:
        return None
    spec = sweep_spec(
        o.recipe,
        command=o.command,
        overrides=o.overrides,
        nproc_per_node=_nproc(o.nproc_per_node),
        master_addr=o.master_addr,
        master_port=o.master_port,
        ticket=o.ticket,
    )
    return CvsLaunch(spec, None, ())


def _nproc(value: str | int | None) -> NprocPerNode | None:
    try:
        return None if value is None else parse_nproc(value)
    except ValueError as exc:
        raise UsageError(f"--nproc-per-node: {exc}") from None
