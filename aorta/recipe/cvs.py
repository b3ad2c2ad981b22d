"""A CVS Aorta config file (``cvs run ... --config_file``) read as aorta launch options (pure).

CVS keeps its ``multi_node:`` block in the benchmark config, next to ``aorta_path``,
``base_config``, ``training_overrides`` and ``timeout_seconds`` (its cluster file holds only
the nodes). :func:`cvs_job` maps them onto what ``aorta launch`` already has: the training
command after ``--``, ONE ``--override`` group, the torchrun options the launcher honours, the
run deadline. A field that does not map is a :class:`CvsConfigError` naming it; keys of the
block aorta does not know are errors too, other top-level CVS keys are warnings.
See docs/launch.md, "CVS ``multi_node:``".

>>> job = cvs_job({
...     "aorta_path": "/opt/aorta", "gpus_per_node": 8,
...     "training_overrides": {"training.max_steps": 10, "profiling.enabled": True},
...     "multi_node": {"extra_torchrun_args": ["--master_port=29600"],
...                    "extra_train_args": ["--seed", "1"]},
... })
>>> job.command
('python3', '/opt/aorta/train.py', '--config', '/opt/aorta/config/distributed.yaml', '--seed', '1')
>>> job.overrides, job.nproc_per_node, job.master_port
(('training.max_steps=10', 'profiling.enabled=True'), 8, 29600)
"""

from __future__ import annotations

import getpass
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aorta import envvars
from aorta.errors import LocatedError, Problem, RecipeError, describe_value
from aorta.recipe.yamldoc import parse_yaml

__all__ = ["CvsConfigError", "CvsJob", "cvs_job", "load_cvs_config", "probe_recipe"]

#: The keys of CVS's ``MultiNodeSpec`` (``extra="forbid"`` there too), and the three the issue
#: names with it that CVS keeps at the top level (accepted in either place, not both).
BLOCK_KEYS = (
    "master_launch_mode",
    "nproc_per_node",
    "master_port",
    "master_addr",
    "train_script",
    "extra_torchrun_args",
    "extra_train_args",
    "extra_env",
    "collect_traces",
)
SHARED_KEYS = ("base_config", "training_overrides", "timeout_seconds")
#: Top-level keys read here; every other top-level key is reported as ignored.
TOP_KEYS = ("multi_node", "aorta_path", "gpus_per_node", *SHARED_KEYS)
LAUNCH_MODES = ("auto", "torchrun", "script")
#: torchrun options that map onto launch options: (field, parse).
_TORCHRUN = {"nproc-per-node": "nproc_per_node", "master-addr": "master_addr"}
_TORCHRUN["master-port"] = "master_port"
_HONOURED = "(it honours --nproc_per_node, --master_addr, --master_port)"
#: torchrun options the launcher sets itself from the cluster file.
_OWNED = ("nnodes", "node-rank", "max-restarts", "rdzv-endpoint", "rdzv-backend", "standalone")
_CONTAINER_HINT = (
    ": aorta runs in a container from the cluster file's container: block (CVS's key names"
    " accepted there) or --container IMAGE"
)
_HINTS = {"docker": _CONTAINER_HINT, "container": _CONTAINER_HINT}
_PLACEHOLDER = re.compile(r"\{[A-Za-z0-9_.-]+\}")
_OVERRIDE_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class CvsConfigError(LocatedError):
    """A CVS config that aorta cannot run as written; every problem names its field."""

    document = "invalid CVS config"


@dataclass(frozen=True)
class CvsJob:
    """What a CVS config asks ``aorta launch`` for; ``None``: not set there (the CLI's
    options and defaults apply)."""

    #: The training command every trial runs (after ``--``), without the override group.
    command: tuple[str, ...]
    #: ``k=v`` tokens, appended as ONE ``--override`` group (argparse ``nargs="*"``).
    overrides: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    nproc_per_node: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    run_timeout: float | None = None
    #: Things aorta reads differently or ignores, for the user (never fatal).
    warnings: tuple[str, ...] = ()


def probe_recipe(ticket: str = "cvs") -> bytes:
    """The recipe a CVS config runs under when no ``--recipe`` is given: probe mode, one
    trial, no mitigation — the training command once, as CVS runs it.

    >>> b"mode: probe" in probe_recipe()
    True
    """
    return (
        "schema_version: 1\nmode: probe\n"
        f"ticket: {ticket}\ntrials: 1\nmitigation_axis: [none]\ndiagnostic_axis: [none]\n"
    ).encode()


def load_cvs_config(
    path: str | Path, *, python: str = "python3", user: str | None = None
) -> CvsJob:
    """Read a CVS Aorta config (YAML or JSON) and map it (:func:`cvs_job`); a
    :class:`CvsConfigError` names the file and each field that does not map."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise CvsConfigError(f"cannot read the CVS config: {why}", source=str(path)) from None
    try:
        data = parse_yaml(text)
    except RecipeError as exc:
        raise CvsConfigError(str(exc), source=str(path)) from None
    return cvs_job(data, python=python, user=user, source=str(path))


def cvs_job(
    data: Any, *, python: str = "python3", user: str | None = None, source: str | None = None
) -> CvsJob:
    """Map a parsed CVS Aorta config onto launch options (pure; see the module docstring).

    ``python`` runs ``train_script`` (the image's or the nodes' interpreter); ``user``
    (default: the current user) replaces CVS's ``{user-id}`` in paths, other CVS placeholders
    are errors. Raises :class:`CvsConfigError` listing every field that does not map.

    >>> cvs_job({"multi_node": {"master_launch_mode": "script"}})
    Traceback (most recent call last):
    ...
    aorta.recipe.cvs.CvsConfigError: multi_node.master_launch_mode: 'script' (CVS's experiment_script path) is not supported: aorta runs train_script under torchrun on every node, also on one node; use auto or torchrun
    """
    problems: list[Problem] = []
    warnings: list[str] = []
    if not isinstance(data, Mapping):
        raise CvsConfigError(f"must be an object, got {describe_value(data)}", source=source)
    f = _Fields(data, _block(data, problems, warnings), user or getpass.getuser(), problems)
    _check_mode(f)
    command = _train_command(f, python)
    options = _rendezvous(f)
    timeout = _run_timeout(f)
    _check_collect(f, warnings)
    overrides = _overrides(*f.get("training_overrides", {}), problems)
    env = _env(*f.get("extra_env", {}), problems)
    if problems:
        raise CvsConfigError(problems, source=source)
    return CvsJob(
        command=command,
        overrides=overrides,
        env=env,
        nproc_per_node=options["nproc_per_node"],
        master_addr=options["master_addr"],
        master_port=options["master_port"],
        run_timeout=timeout,
        warnings=tuple(warnings),
    )


def _block(
    data: Mapping[str, Any], problems: list[Problem], warnings: list[str]
) -> Mapping[str, Any]:
    """The ``multi_node:`` block (``{}`` when missing or not an object); its unknown keys are
    problems, top-level keys aorta does not read are warnings."""
    block: Mapping[str, Any] | None = data.get("multi_node", {})
    if block is None:
        block = {}
    if not isinstance(block, Mapping):
        problems.append(Problem("multi_node", f"must be an object, got {describe_value(block)}"))
        block = {}
    for key in block:
        if key not in (*BLOCK_KEYS, *SHARED_KEYS):
            known = ", ".join(BLOCK_KEYS)
            problems.append(Problem(f"multi_node.{key}", f"unknown field (known: {known})"))
    for key in data:
        if key not in TOP_KEYS and not str(key).startswith("_"):
            hint = _HINTS.get(str(key), "")
            warnings.append(f"{key}: not read by aorta launch (ignored){hint}")
    return block


@dataclass
class _Fields:
    """A CVS config's fields where CVS reads them (the block; :data:`SHARED_KEYS` at the top
    level too, not both), each as ``(where, value)``; every problem lands in ``problems``."""

    data: Mapping[str, Any]
    block: Mapping[str, Any]
    user: str
    problems: list[Problem]

    def get(self, key: str, default: Any = None) -> tuple[str, Any]:
        block, data = self.block, self.data
        if key in SHARED_KEYS and key in block and key in data:
            why = f"is also given at the top level ({key})"
            self.problems.append(Problem(f"multi_node.{key}", why))
        if key in block:
            return f"multi_node.{key}", block[key]
        if key in SHARED_KEYS and key in data:
            return key, data[key]
        return f"multi_node.{key}", default

    def text(self, key: str, default: str | None) -> str | None:
        where, value = self.get(key, default)
        if value is None or (isinstance(value, str) and value.strip()):
            return _resolve(where, value, self.user, self.problems)
        why = f"must be a non-empty string, got {describe_value(value)}"
        self.problems.append(Problem(where, why))
        return None

    def count(self, where: str, value: Any, lo: int, hi: int) -> int | None:
        if value is None or (type(value) is int and lo <= value <= hi):
            return value
        why = f"must be a whole number from {lo} to {hi}, got {describe_value(value)}"
        self.problems.append(Problem(where, why))
        return None


def _check_mode(f: _Fields) -> None:
    where, mode = f.get("master_launch_mode", "auto")
    if mode == "script":
        why = (
            "'script' (CVS's experiment_script path) is not supported: aorta runs train_script "
            "under torchrun on every node, also on one node; use auto or torchrun"
        )
        f.problems.append(Problem(where, why))
    elif mode not in LAUNCH_MODES:
        f.problems.append(Problem(where, f"must be auto or torchrun, got {describe_value(mode)}"))


def _train_command(f: _Fields, python: str) -> tuple[str, ...]:
    """``python <aorta_path>/<train_script> --config <base_config> <extra_train_args>``."""
    problems, raw = f.problems, f.data.get("aorta_path")
    before = len(problems)
    if isinstance(raw, str):  # placeholders first: CVS's {paths.x} stands for an absolute path
        raw = _resolve("aorta_path", raw, f.user, problems)
    root = _aorta_path(raw, problems) if len(problems) == before else None
    script = f.text("train_script", "train.py")
    config = f.text("base_config", "config/distributed.yaml")
    where, extra_train = f.get("extra_train_args", [])
    train_args = _strings(where, extra_train, problems)
    for i, arg in enumerate(train_args):
        flag = arg.partition("=")[0]  # argparse takes "--ov" for "--override", "--" ends options
        if flag == "--" or (len(flag) > 2 and "--override".startswith(flag)):
            why = f"{arg!r} would split the override group: put overrides in training_overrides"
            problems.append(Problem(f"{where}[{i}]", why))
    command = (python, _under(root, script or ""), "--config", _under(root, config or ""))
    return (*command, *train_args)


def _rendezvous(f: _Fields) -> dict[str, Any]:
    """``nproc_per_node``, ``master_addr``, ``master_port``: the block's, then
    ``extra_torchrun_args``'."""
    nproc = f.count(*f.get("nproc_per_node"), 0, 4096) or f.count(
        "gpus_per_node", f.data.get("gpus_per_node"), 1, 4096
    )
    port = f.count(*f.get("master_port"), 0, 65535) or None
    addr = f.text("master_addr", None) if f.get("master_addr")[1] != "" else None
    options: dict[str, Any] = {"nproc_per_node": nproc, "master_addr": addr, "master_port": port}
    where, torchrun = f.get("extra_torchrun_args", [])
    _torchrun_options(where, _strings(where, torchrun, f.problems), options, f.problems)
    return options


def _run_timeout(f: _Fields) -> float | None:
    where, timeout = f.get("timeout_seconds")
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        why = f"must be a number of seconds > 0, got {describe_value(timeout)}"
        f.problems.append(Problem(where, why))
        return None
    return float(timeout)


def _check_collect(f: _Fields, warnings: list[str]) -> None:
    where, collect = f.get("collect_traces", True)
    if collect is False:
        warnings.append(f"{where}: false: aorta always gathers every node's traces")
    elif collect is not True:
        f.problems.append(Problem(where, f"must be true or false, got {describe_value(collect)}"))


def _aorta_path(value: Any, problems: list[Problem]) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and posixpath.isabs(value.strip()):
        return value.strip()
    why = "must be the absolute path of the aorta checkout on every node"
    why = f"{why}, got {describe_value(value)}"
    problems.append(Problem("aorta_path", why))
    return None


def _resolve(where: str, value: str | None, user: str, problems: list[Problem]) -> str | None:
    """``{user-id}`` filled in; a control character or another CVS placeholder refused."""
    if value is None:
        return None
    value = value.strip().replace("{user-id}", user)
    if (left := _PLACEHOLDER.search(value)) or "<changeme>" in value.lower():
        what = left.group(0) if left else "<changeme>"
        problems.append(Problem(where, f"{what}: fill it in (aorta resolves only {{user-id}})"))
    elif why := envvars.control_problem(value):
        problems.append(Problem(where, why))
    return value


def _under(root: str | None, path: str) -> str:
    return posixpath.join(root, path) if root else path


def _strings(where: str, value: Any, problems: list[Problem]) -> list[str]:
    if not isinstance(value, list):
        problems.append(Problem(where, f"must be a list of strings, got {describe_value(value)}"))
        return []
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            problems.append(
                Problem(f"{where}[{i}]", f"must be a string, got {describe_value(item)}")
            )
        elif why := envvars.control_problem(item):
            problems.append(Problem(f"{where}[{i}]", why))
        else:
            out.append(item)
    return out


def _torchrun_options(
    where: str, args: Sequence[str], options: dict[str, Any], problems: list[Problem]
) -> None:
    """``--opt=V`` / ``--opt V`` (dashes or underscores) onto ``options``; the rest refused."""
    i = 0
    while i < len(args):
        at = f"{where}[{i}]"
        name, eq, value = args[i].partition("=")
        key = name.lstrip("-").replace("_", "-")
        if not name.startswith("--") or key not in _TORCHRUN:
            owned = key in _OWNED
            why = (
                "is set by aorta from the cluster file"
                if owned
                else "is not a torchrun option aorta's launcher can pass on"
            )
            problems.append(Problem(at, f"{args[i]!r} {why} {_HONOURED}"))
            i += 1
            continue
        if not eq:
            if i + 1 == len(args):
                problems.append(Problem(at, f"{name} needs a value"))
                break
            value, i = args[i + 1], i + 1
        i += 1
        fname = _TORCHRUN[key]
        parsed: Any = value
        if fname != "master_addr":
            lo, hi = (1, 4096) if fname == "nproc_per_node" else (1, 65535)
            if not value.isdigit() or not lo <= int(value) <= hi:
                problems.append(
                    Problem(at, f"{name}: must be a whole number from {lo} to {hi}, got {value!r}")
                )
                continue
            parsed = int(value)
        if options[fname] is not None and options[fname] != parsed:
            why = f"{name}={value} contradicts multi_node.{fname} ({options[fname]})"
            problems.append(Problem(at, why))
            continue
        options[fname] = parsed


def _overrides(where: str, value: Any, problems: list[Problem]) -> tuple[str, ...]:
    if not isinstance(value, Mapping):
        problems.append(
            Problem(where, f"must be an object {{key: value}}, got {describe_value(value)}")
        )
        return ()
    tokens = []
    for key, item in value.items():
        at = f"{where}.{key}"
        if not isinstance(key, str) or not _OVERRIDE_KEY.match(key):
            problems.append(
                Problem(at, "the key must be letters, digits, _ . - (not starting with -)")
            )
        elif isinstance(item, Mapping | list) or item is None:
            problems.append(
                Problem(at, f"must be a string, number or boolean, got {describe_value(item)}")
            )
        elif why := envvars.control_problem(str(item)):
            problems.append(Problem(at, why))
        else:
            tokens.append(f"{key}={item}")
    return tuple(tokens)


def _env(where: str, value: Any, problems: list[Problem]) -> dict[str, str]:
    if not isinstance(value, Mapping):
        problems.append(
            Problem(where, f"must be an object {{NAME: value}}, got {describe_value(value)}")
        )
        return {}
    env = {}
    for name, item in value.items():
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            problems.append(
                Problem(
                    f"{where}.{name}", f"must be a string or number, got {describe_value(item)}"
                )
            )
        else:
            env[str(name)] = str(item)
    allow = {envvars.TRIAL_MASTER_PORT_BASE}
    for name, text in env.items():
        if why := envvars.name_problem(name, allow=allow) or envvars.value_problem(text):
            problems.append(Problem(f"{where}.{name}", why))
    return env
