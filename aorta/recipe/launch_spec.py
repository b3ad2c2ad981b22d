"""What ``aorta launch`` runs on every node, as a :class:`LaunchSpec` (the program, its
environment, the files shipped with it; validated like every other input): a recipe's sweep
(:func:`sweep_spec`), or the training job of a CVS config (:func:`cvs_spec`, read by
:mod:`aorta.recipe.cvs`) swept the same way. Every backend of :mod:`aorta.launch` launches what
these build; each node's command line is :mod:`aorta.launch.node_command`'s.
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
from aorta.recipe.cluster import Cluster, NprocPerNode
from aorta.recipe.schema import scrub_env_keys_of

__all__ = ["CvsLaunch", "LaunchSpec", "NodePath", "cvs_spec", "sweep_spec"]

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
    """What :func:`cvs_spec` read: the spec, the run deadline (``None``: not set there), and
    what the user should be told (never fatal)."""

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
