"""The cluster file — where to run, as the recipe is what to run: which nodes, how to log in,
which one is the head, the container to run in (pure: nothing connects; :mod:`aorta.launch`
runs a launch on it and re-exports these names).

A CVS ``cluster.json`` (``node_dict`` keys are SSH addresses, or a list of ``mgmt_ip``
entries; ``vpc_ip`` is where the other nodes reach a node) read through pydantic models, every
problem with its path; or a DeepSpeed-style hostfile. Ranks follow the file order, the head
first. See docs/launch.md for every key.

>>> c = Cluster.from_dict({
...     "username": "ops",
...     "node_dict": {"gpu-a": {"vpc_ip": "10.1.0.1"}, "gpu-b": {"vpc_ip": "10.1.0.2"}},
...     "head_node_dict": {"mgmt_ip": "gpu-b"},
... })
>>> [(n.rank, n.address) for n in c.nodes]
[(0, 'gpu-b'), (1, 'gpu-a')]
>>> c.master_addr()
'10.1.0.2'
>>> parse_hostfile("worker-1 slots=4\\nworker-2 slots=4\\n").nodes[1].slots
4
"""

from __future__ import annotations

import getpass
import ipaddress
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from aorta import envvars
from aorta.errors import (
    LocatedError,
    Problem,
    UsageError,
    describe_value,
    invalid,
    validation_problems,
)

__all__ = [
    "Cluster",
    "ClusterError",
    "Container",
    "HostKeyChecking",
    "Lifetime",
    "Node",
    "NprocPerNode",
    "check_slurm_partition",
    "check_slurm_time",
    "load_cluster",
    "parse_hostfile",
    "parse_nproc",
]

HostKeyChecking = Literal["yes", "accept-new", "no"]
#: ``per_run``: started and removed by each launch · ``persistent``: reused while running,
#: started when missing, kept · ``no_launch``: the user's own, which must be running.
Lifetime = Literal["per_run", "persistent", "no_launch"]
NprocPerNode = int | Literal["gpu", "auto"]
#: CVS's ``orchestrator`` key (any case, as CVS reads it).
Orchestrator = Literal["baremetal", "container"]

USER_PLACEHOLDER = "{user-id}"
_HOST = re.compile(r"^[A-Za-z0-9_.:%\[\]-]+$")
_SLURM_TIME = re.compile(r"\d+(:\d\d?){0,2}|\d+-\d+(:\d\d?){0,2}")


class ClusterError(LocatedError):
    """A cluster file that cannot be used; every :class:`~aorta.errors.Problem` names its path
    inside the file (a :class:`~aorta.errors.UsageError`)."""

    document = "invalid cluster file"


def parse_nproc(value: object) -> NprocPerNode:
    """Processes per node: ``"gpu"``, ``"auto"`` or a whole number ≥ 1 (also as text); the one
    reader of ``--nproc-per-node`` and ``nproc_per_node``/``slots``. Raises ``ValueError``.

    >>> parse_nproc("8"), parse_nproc(2), parse_nproc("gpu")
    (8, 2, 'gpu')
    """
    if value in ("gpu", "auto"):
        return value
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"must be a whole number ≥ 1, 'gpu' or 'auto', got {describe_value(value)}")


# -- a Slurm request: where `aorta launch --slurm` runs, from the command line ----------------


def check_slurm_time(time_limit: str | None) -> None:
    """Refuse a ``--time`` Slurm would refuse (``None``: the partition's default).

    >>> check_slurm_time("1:2:3:4")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    aorta.errors.UsageError: --time '1:2:3:4': not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, ...)
    """
    if time_limit is not None and not _SLURM_TIME.fullmatch(time_limit):
        forms = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS"
        raise UsageError(f"--time {time_limit!r}: not a Slurm time ({forms})")


def check_slurm_partition(nodes: int, partition: str | None, sinfo: str) -> None:
    """Refuse ``--nodes`` in a partition Slurm does not have, or beyond its size; ``sinfo``:
    what ``sinfo -h -o '%P %D'`` prints (``None``: the partition marked ``*``, the default).

    >>> check_slurm_partition(4, None, "gpu* 2\\ncpu 8\\n")
    Traceback (most recent call last):
    aorta.errors.UsageError: --nodes 4: partition 'gpu' has only 2 node(s)
    """
    rows = [r.split() for r in sinfo.splitlines() if r]
    part = partition or next((n.rstrip("*") for n, _ in rows if n.endswith("*")), None)
    size = sum(int(count) for name, count in rows if name.rstrip("*") == part)
    if not any(name.rstrip("*") == part for name, _ in rows):
        raise UsageError(f"--partition {part!r}: no such Slurm partition (sinfo -h -p {part})")
    if nodes > size:
        raise UsageError(f"--nodes {nodes}: partition {part!r} has only {size} node(s)")


# -- the file's models ----------------------------------------------------------------------


def _check(test: Any, kind: str, what: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        if value is not None and not test(value):
            raise invalid(kind, f"must be {what}, got {describe_value(value)}")
        return value.strip() if isinstance(value, str) else value

    return BeforeValidator(check)


def _number(lo: float, hi: float, *, integer: bool) -> BeforeValidator:
    kinds = int if integer else (int, float)
    what = f"{'an integer' if integer else 'a number'} from {lo:g} to {hi:g}"
    return _check(
        lambda v: isinstance(v, kinds) and not isinstance(v, bool) and lo <= v <= hi, "range", what
    )


def _env(kind: str, problem: Any) -> BeforeValidator:
    def check(value: Any) -> Any:
        if why := problem(value):
            raise invalid(kind, why)
        return value

    return BeforeValidator(check)


def _nproc(value: Any) -> Any:
    try:
        return None if value is None else parse_nproc(value)
    except ValueError as exc:
        raise invalid("nproc", str(exc)) from None


def _orchestrator(value: Any) -> Any:
    if value is None or (isinstance(value, str) and value.strip().lower() in _ORCHESTRATORS):
        return value and value.strip().lower()  # CVS reads it in any case
    raise invalid("choice", f"must be baremetal or container (CVS's), got {describe_value(value)}")


def _user(text: str) -> str:
    return text.replace(USER_PLACEHOLDER, getpass.getuser())


def _remote_path(path: str) -> str:
    # A remote command receives every path quoted, so '~' would not expand there: the login
    # directory is where relative paths start anyway.
    path = _user(path)
    return "." if path == "~" else (path[2:] or ".") if path.startswith("~/") else path


Text = Annotated[
    str, _check(lambda v: isinstance(v, str) and v.strip(), "text", "a non-empty string")
]
Host = Annotated[
    str,
    _check(lambda v: isinstance(v, str) and _HOST.match(v), "host", "a host name or IP address"),
]
_NAME = _env("env_name", lambda n: envvars.name_problem(n, allow={envvars.TRIAL_MASTER_PORT_BASE}))
EnvMap = dict[Annotated[str, _NAME], Annotated[str, _env("env_value", envvars.value_problem)]]
#: The keys of a node entry that become :class:`Node` fields (also valid at the top level).
_NODE_KEYS = {"port", "python", "workdir", "slots"}
_LOGIN_KEYS = {"username", "priv_key_file", "password", "host_key_checking"}
_LOGIN_KEYS |= {"known_hosts_file", "connect_timeout", "keepalive"}
_LIFETIMES = ("per_run", "persistent", "no_launch")
_ORCHESTRATORS = ("baremetal", "container")
_CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class _Settings(BaseModel):
    """aorta's per-node settings, valid both at the top level and inside a node entry."""

    model_config = ConfigDict(extra="allow")
    port: Annotated[int | None, _number(1, 65535, integer=True)] = None
    python: Annotated[Text, AfterValidator(_remote_path)] | None = None
    workdir: Annotated[Text, AfterValidator(_remote_path)] | None = None
    slots: Annotated[Any, BeforeValidator(_nproc)] = Field(
        None, validation_alias=AliasChoices("nproc_per_node", "slots")
    )
    env_vars: EnvMap | None = None


class _NodeEntry(_Settings):
    vpc_ip: Host | None = None
    mgmt_ip: Host | None = None


class _Head(BaseModel):
    model_config = ConfigDict(extra="allow")
    mgmt_ip: Text | None = None


class _ClusterFile(_Settings):
    username: Annotated[Text, AfterValidator(_user)] | None = None
    priv_key_file: Text | None = None
    password: str | None = None  # as written: never stripped, never shown in a message
    node_dict: Any = None
    head_node_dict: _Head | None = None
    host_key_checking: Annotated[
        HostKeyChecking | None,
        _check(lambda v: v in ("yes", "accept-new", "no"), "choice", "one of yes, accept-new, no"),
    ] = None
    known_hosts_file: Annotated[Text, AfterValidator(os.path.expanduser)] | None = None
    container: Any = None  # read by _container(): its problems are located under "container"
    #: CVS's switch: ``baremetal`` runs natively (a container block unused), ``container`` in
    #: the block's containers; absent, the block decides.
    orchestrator: Annotated[Orchestrator | None, BeforeValidator(_orchestrator)] = None
    connect_timeout: Annotated[float | None, _number(0.1, 3600, integer=False)] = None
    keepalive: Annotated[int | None, _number(0, 3600, integer=True)] = None

    @field_validator("priv_key_file")
    @classmethod
    def _key_file(cls, key: str | None, info: ValidationInfo) -> str | None:
        if key is None:
            return None
        user = info.data.get("username") or getpass.getuser()
        key = os.path.expanduser(key.replace(USER_PLACEHOLDER, user))
        if (info.context or {}).get("check_files") and not Path(key).is_file():
            raise invalid("file", f"{key}: no such file")
        return key


def _container_name(name: str) -> str:
    try:
        probe = name.format(rank=0, run_id="r")
    except (KeyError, IndexError, ValueError) as exc:
        why = f"{name!r}: only {{rank}} and {{run_id}} may be filled in ({exc})"
        raise invalid("name", why) from None
    if not _CONTAINER_NAME.match(probe):
        raise invalid("name", f"{name!r} is not a container name (letters, digits, _ . -)")
    return name


def _mounts(value: Any) -> Any:  # CVS's volume_dict {host: container} as "host:container"
    return [f"{k}:{v}" for k, v in value.items()] if isinstance(value, Mapping) else value


class Container(BaseModel):
    """Run every node's part inside a container of ``image`` (the cluster file's ``container:``
    block, CVS's key names accepted too; see :mod:`aorta.launch.container`).

    ``name`` may hold ``{rank}`` and ``{run_id}``; ``groups`` ``None``: ``video`` and ``render``
    where the node has ``/dev/kfd`` (ROCm); ``gpus`` ``None``: ``all`` where it has
    ``nvidia-smi``; ``env`` reaches the container through a 0600 ``--env-file``.

    >>> Container(image="rocm/pytorch").container_name("2026-01-01T00-00-00-abc123", 1)
    'aorta-2026-01-01T00-00-00-abc123-1'
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    image: Text = Field(validation_alias=AliasChoices("image", "container_image"))
    name: Annotated[Text, AfterValidator(_container_name)] = Field(
        "aorta-{run_id}-{rank}", validation_alias=AliasChoices("name", "container_name")
    )
    lifetime: Annotated[
        Lifetime,
        _check(lambda v: v in _LIFETIMES, "choice", f"one of {', '.join(_LIFETIMES)}"),
    ] = "per_run"
    runtime: Text = "docker"  # the CLI, shell words allowed ("docker -H unix:///run/x.sock")
    python: Text = "python3"  # the image's, with torch
    run_args: tuple[Text, ...] = ()
    #: "host:container[:ro]" (CVS: volume_dict {host: container}); the workdir is always mounted
    mounts: Annotated[tuple[Text, ...], BeforeValidator(_mounts)] = Field(
        (), validation_alias=AliasChoices("mounts", "volume_dict")
    )
    devices: tuple[Text, ...] = Field((), validation_alias=AliasChoices("devices", "device_list"))
    user: Text = "root"
    groups: tuple[Text, ...] | None = Field(
        None, validation_alias=AliasChoices("groups", "group_add")
    )
    gpus: Text | None = None
    privileged: bool = False
    env: EnvMap = Field({}, validation_alias=AliasChoices("env", "env_dict"), repr=False)

    def container_name(self, run_id: str, rank: int) -> str:
        """This launch's container name on the node of ``rank``."""
        return self.name.format(rank=rank, run_id=run_id)


def _container(raw: Any, problems: list[Problem]) -> Container | None:
    if raw is not None and not isinstance(raw, Mapping):
        problems.append(Problem("container", f"must be an object, got {describe_value(raw)}"))
    elif raw is not None:
        try:
            block = Container.model_validate(raw)
        except ValidationError as exc:
            problems.extend(validation_problems(exc, at="container"))
            return None
        if block.lifetime == "per_run" or "name" in raw or "container_name" in raw:
            return block
        why = f"is required with lifetime {block.lifetime} (the container to find on each node)"
        problems.append(Problem("container.name", why))
    return None


#: CVS's ``runtime.args`` (docker) that aorta's block holds under its own names.
_CVS_LISTS = {"volumes": "mounts", "devices": "devices", "group_add": "groups"}
#: CVS's list arguments aorta passes to ``docker run`` as they are (one flag per item).
_CVS_FLAGS = {"cap_add": "--cap-add", "security_opt": "--security-opt", "ulimit": "--ulimit"}


def _cvs_container(raw: Any, problems: list[Problem], warnings: list[str]) -> Any:
    """CVS's orchestrator-style container block (``enabled``, ``launch``, ``image``, ``name``,
    ``runtime: {name, args}``) as aorta's: ``enabled: false`` runs natively; ``launch: true``
    starts the container and keeps it (``lifetime: persistent``), ``false`` uses the one
    running (``no_launch``); docker's ``args`` become mounts, devices, groups, ``privileged``
    and ``run_args``. aorta's own block, or anything else, is returned as it is.

    >>> w: list[str] = []
    >>> _cvs_container({"enabled": True, "launch": False, "image": "rocm/cvs", "name": "c1",
    ...     "runtime": {"name": "docker", "args": {"network": "host", "privileged": True,
    ...                 "volumes": ["/data:/data"], "cap_add": ["SYS_PTRACE"]}}}, [], w)
    {'image': 'rocm/cvs', 'name': 'c1', 'lifetime': 'no_launch', 'runtime': 'docker', 'privileged': True, 'mounts': ['/data:/data'], 'run_args': ['--cap-add=SYS_PTRACE']}
    """
    runtime = raw.get("runtime") if isinstance(raw, Mapping) else None
    if not isinstance(raw, Mapping) or not (
        "enabled" in raw or "launch" in raw or isinstance(runtime, Mapping)
    ):
        return raw
    if raw.get("enabled") is False:
        warnings.append("container.enabled: false: the block is not used, the nodes run natively")
        return None
    # CVS's templates comment every key with a "_..._comment" beside it.
    skip = ("enabled", "launch", "runtime")
    out: dict[str, Any] = {k: v for k, v in raw.items() if k not in skip and k[:1] != "_"}
    if "launch" in raw:
        out["lifetime"] = "persistent" if raw["launch"] else "no_launch"
    if not isinstance(runtime, Mapping):
        if runtime is not None:
            out["runtime"] = runtime
        return out
    name = runtime.get("name", "docker")
    if name != "docker":
        why = f"aorta runs containers with docker, not {describe_value(name)}"
        problems.append(Problem("container.runtime.name", why))
    out["runtime"] = "docker"
    args = runtime.get("args") or {}
    if not isinstance(args, Mapping):
        problems.append(
            Problem("container.runtime.args", f"must be an object, got {describe_value(args)}")
        )
        return out
    run_args: list[str] = []
    for key, value in args.items():
        at = f"container.runtime.args.{key}"
        if key in ("network", "ipc"):
            if value != "host":
                problems.append(
                    Problem(
                        at,
                        f"aorta runs every container with --{key} host (the ranks meet over the host's), got {describe_value(value)}",
                    )
                )
        elif key == "privileged":
            out["privileged"] = value
        elif key in _CVS_LISTS or key in _CVS_FLAGS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                problems.append(
                    Problem(at, f"must be a list of strings, got {describe_value(value)}")
                )
            elif key in _CVS_LISTS:
                out[_CVS_LISTS[key]] = list(value)
            else:
                run_args += [f"{_CVS_FLAGS[key]}={v}" for v in value]
        elif not str(key).startswith("_"):
            known = ", ".join(["network", "ipc", "privileged", *_CVS_LISTS, *_CVS_FLAGS])
            problems.append(Problem(at, f"not a docker argument aorta knows (known: {known})"))
    if run_args:
        out["run_args"] = [*out.get("run_args", []), *run_args]
    return out


# -- the cluster ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One machine: ``address`` for SSH from here, ``vpc_ip`` for the other nodes (``None``:
    the same); ``rank`` 0 is the head, which hosts the rendezvous."""

    rank: int
    address: str
    vpc_ip: str | None = None
    port: int | None = None  # None: ~/.ssh/config or 22
    slots: NprocPerNode | None = None  # processes to start; None: the launch decides
    python: str = "python3"  # with torch and aorta installed
    workdir: str = "."  # relative paths start at the login directory
    env_vars: Mapping[str, str] = field(default_factory=dict)  # the cluster's, then the node's
    #: Keys of the node entry aorta does not use (``bmc_ip``, ...), kept for the report.
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        """``node<rank>``: the key of this node in every per-node result."""
        return f"node{self.rank}"

    @property
    def label(self) -> str:
        """``node<rank> <address>``, the prefix of this node's log lines."""
        return f"{self.name} {self.address}"

    @property
    def peer_address(self) -> str:
        """The address other nodes use for this one (``vpc_ip``, else the SSH address)."""
        return self.vpc_ip or self.address


@dataclass(frozen=True)
class Cluster:
    """The nodes of a launch (the head is ``nodes[0]``) and how to log in to them; building
    one is free: :mod:`aorta.launch` connects later and tears down what it started."""

    nodes: tuple[Node, ...]
    username: str | None = None
    priv_key_file: str | None = None
    #: Login password (Fabric's ``connect_kwargs``); never printed or written down.
    password: str | None = field(default=None, repr=False)
    host_key_checking: HostKeyChecking = "accept-new"
    known_hosts_file: str | None = None
    connect_timeout: float = 10.0
    keepalive: int = 15  # seconds between SSH keepalives (0 = off)
    source: str | None = None  # the file name, for messages
    #: Things worth telling the user that do not stop a launch (unknown keys, ...).
    warnings: tuple[str, ...] = ()
    #: Run inside a container on every node (the ``container:`` block), else natively.
    container: Container | None = None

    @property
    def head(self) -> Node:
        """The node with rank 0: it hosts the rendezvous and writes the run directory."""
        return self.nodes[0]

    def master_addr(self, override: str | None = None) -> str:
        """The rendezvous address: ``override``, else the head's ``vpc_ip``, else its SSH
        address; a loopback address is refused when another node is not on loopback."""
        addr = override or self.head.peer_address
        remote = [n for n in self.nodes[1:] if not _is_loopback(n.address)]
        if _is_loopback(addr) and remote:
            raise ClusterError(
                f"rendezvous address {addr} is a loopback address, but {remote[0].label} is "
                "another machine: give the head a vpc_ip (or --master-addr) the nodes can reach",
                source=self.source,
            )
        return addr

    def with_image(self, image: str) -> Cluster:
        """This cluster run in containers of ``image`` (``aorta launch --container``): the
        ``container:`` block's settings, else the defaults."""
        if not image.strip():
            raise ClusterError("--container: give an image name", source=self.source)
        old = self.container
        spec = old.model_copy(update={"image": image}) if old else Container(image=image)
        return replace(self, container=spec)

    @classmethod
    def from_dict(
        cls, data: Any, *, source: str | None = None, check_files: bool = True
    ) -> Cluster:
        """Validate a parsed ``cluster.json``; :class:`ClusterError` lists every problem.
        ``check_files``: also check that ``priv_key_file`` exists here."""
        if not isinstance(data, Mapping):
            raise ClusterError(
                [Problem("", f"must be a JSON object, got {describe_value(data)}")], source=source
            )
        try:
            top = _ClusterFile.model_validate(data, context={"check_files": check_files})
            problems: list[Problem] = []
        except ValidationError as exc:
            top = _ClusterFile.model_construct()
            problems = validation_problems(exc)
        nodes = _nodes(data.get("node_dict"), top, problems)
        head = _head_index(top.head_node_dict, nodes, problems)
        warnings = [f"unknown key {k!r} ignored" for k in top.model_extra or {} if k[:1] != "_"]
        container = None
        if top.orchestrator == "baremetal" and data.get("container") is not None:
            warnings.append(
                "orchestrator: baremetal: the container block is not used, the nodes run "
                "natively (as in CVS; orchestrator: container runs in it)"
            )
        elif top.orchestrator == "container" and data.get("container") is None:
            why = "container needs a container block (the image every node runs in, as in CVS)"
            problems.append(Problem("orchestrator", f"{why}: add one, or use baremetal"))
        else:
            block = _cvs_container(data.get("container"), problems, warnings)
            container = _container(block, problems)
        if problems:
            raise ClusterError(problems, source=source)
        nodes.insert(0, nodes.pop(head))
        return cls(
            nodes=tuple(Node(rank=i, **fields) for i, fields in enumerate(nodes)),
            source=source,
            warnings=tuple(warnings),
            container=container,
            **top.model_dump(include=_LOGIN_KEYS, exclude_none=True),
        )


def _is_loopback(addr: str) -> bool:
    if addr.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(addr.strip("[]")).is_loopback
    except ValueError:
        return False


def _nodes(raw: Any, top: _ClusterFile, problems: list[Problem]) -> list[dict[str, Any]]:
    entries: list[tuple[str, str | None, Any]]
    if isinstance(raw, Mapping):
        entries = [(f"node_dict[{json.dumps(k)}]", str(k).strip(), v) for k, v in raw.items()]
    elif isinstance(raw, list):
        entries = [(f"node_dict[{i}]", None, v) for i, v in enumerate(raw)]
    else:
        what = f"must be an object {{ssh address: {{vpc_ip: ...}}}}, got {describe_value(raw)}"
        problems.append(
            Problem("node_dict", "is required: the nodes to launch on" if raw is None else what)
        )
        return []
    if not entries:
        problems.append(Problem("node_dict", "is empty: give at least one node"))
    defaults = top.model_dump(include=_NODE_KEYS, exclude_none=True)
    nodes: list[dict[str, Any]] = []
    for path, key, entry in entries:
        if not isinstance(entry, Mapping | None):
            what = (
                f'must be an object such as {{"vpc_ip": "10.0.0.1"}}, got {describe_value(entry)}'
            )
            problems.append(Problem(path, what))
            continue
        try:
            own = _NodeEntry.model_validate(entry or {})
        except ValidationError as exc:
            problems.extend(validation_problems(exc, at=path))
            continue
        address = key if key is not None else own.mgmt_ip
        if address is None:
            problems.append(
                Problem(
                    f"{path}.mgmt_ip", "is required (the node's SSH address) in a list of nodes"
                )
            )
            continue
        if not _HOST.match(address):
            problems.append(Problem(path, f"{address!r} is not a host name or IP address"))
            continue
        if any(n["address"] == address for n in nodes):
            problems.append(Problem(path, f"node {address!r} is listed twice"))
        extra = {**(own.model_extra or {}), **({"mgmt_ip": own.mgmt_ip} if own.mgmt_ip else {})}
        own_fields = own.model_dump(include=_NODE_KEYS, exclude_none=True)
        env = {**(top.env_vars or {}), **(own.env_vars or {})}
        nodes.append(
            {
                **defaults,
                **own_fields,
                "address": address,
                "vpc_ip": own.vpc_ip,
                "env_vars": env,
                "extra": extra,
            }
        )
    return nodes


def _head_index(head: _Head | None, nodes: list[dict[str, Any]], problems: list[Problem]) -> int:
    if head is None or head.mgmt_ip is None:
        return 0
    for i, n in enumerate(nodes):
        if head.mgmt_ip in (n["address"], n["vpc_ip"], n["extra"].get("mgmt_ip")):
            return i
    if nodes:
        known = ", ".join(n["address"] for n in nodes)
        problems.append(
            Problem(
                "head_node_dict.mgmt_ip",
                f"{head.mgmt_ip!r} is not one of the nodes ({known}); the head must run rank 0 — "
                "name one of them or drop head_node_dict to use the first",
            )
        )
    return 0


def parse_hostfile(text: str, *, source: str | None = None) -> Cluster:
    """A cluster from a DeepSpeed-style hostfile (``host slots=N`` lines, ``#`` comments); the
    user, key and ports come from ``~/.ssh/config``, the first host is the head."""
    problems: list[Problem] = []
    nodes: list[Node] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host, *rest = line.split()
        where = f"line {lineno}"
        slots: int | None = None
        for token in rest:
            key, _, value = token.partition("=")
            if key != "slots" or not value.isdigit() or int(value) < 1:
                problems.append(Problem(where, f"expected 'host slots=N', got {token!r}"))
                continue
            slots = int(value)
        if not _HOST.match(host):
            problems.append(Problem(where, f"{host!r} is not a host name or IP address"))
        elif any(n.address == host for n in nodes):
            problems.append(Problem(where, f"host {host!r} is listed twice"))
        nodes.append(Node(rank=len(nodes), address=host, slots=slots))
    if not nodes and not problems:
        problems.append(Problem("", "no hosts: expected lines like 'worker-1 slots=8'"))
    if problems:
        raise ClusterError(problems, source=source)
    return Cluster(nodes=tuple(nodes), source=source)


def load_cluster(path: str | Path) -> Cluster:
    """Read a ``cluster.json`` or a hostfile (whichever the content is) and validate it; a
    :class:`ClusterError` names the file and the path of each problem inside it.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "hostfile"
    >>> _ = path.write_text("gpu-1 slots=8\\ngpu-2 slots=8\\n")
    >>> [n.label for n in load_cluster(path).nodes]
    ['node0 gpu-1', 'node1 gpu-2']
    >>> _ = path.write_text('{"node_dict": {"gpu-1": {"port": "22"}}}')
    >>> load_cluster(path)
    Traceback (most recent call last):
    ...
    aorta.recipe.cluster.ClusterError: ...hostfile: node_dict["gpu-1"].port: must be an integer from 1 to 65535, got string '22'
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterError(f"{path}: cannot read the cluster file: {exc.strerror or exc}") from None
    first = text.lstrip()[:1]
    if first not in ("{", "["):
        return parse_hostfile(text, source=str(path))

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:
            raise ClusterError(
                [Problem("", f"key {twice!r} appears twice in one object")], source=str(path)
            )
        return dict(pairs)

    try:
        data = json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as exc:
        if first == "[":  # not JSON: a hostfile whose first host is an IPv6 address, '[::1]'
            return parse_hostfile(text, source=str(path))
        where = f"line {exc.lineno} column {exc.colno}"
        raise ClusterError([Problem(where, f"invalid JSON: {exc.msg}")], source=str(path)) from None
    return Cluster.from_dict(data, source=str(path))
