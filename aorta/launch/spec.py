"""What ``aorta launch`` runs on every node, as a :class:`~aorta.launch.command.LaunchSpec`: a
recipe's sweep (:func:`sweep_spec`), or the training job of a CVS config (:func:`cvs_spec`,
read by :mod:`aorta.recipe.cvs`) swept the same way. Both backends launch what these build.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from aorta.errors import UsageError
from aorta.recipe import cvs
from aorta.recipe.cluster import Cluster, NprocPerNode
from aorta.recipe.schema import scrub_env_keys_of

from .command import LaunchSpec, NodePath

__all__ = ["CvsLaunch", "cvs_spec", "sweep_spec"]


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
