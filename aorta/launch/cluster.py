"""The cluster: which nodes, how to reach them, which one is the head.

A :class:`Cluster` is cheap to build and pure: loading a file reads it and checks it, nothing
connects anywhere. Two file formats are accepted:

* a CVS-compatible ``cluster.json``::

      {
        "username": "{user-id}",                       # {user-id} = the current user
        "priv_key_file": "/home/{user-id}/.ssh/id_rsa",  # or "password"
        "head_node_dict": {"mgmt_ip": "10.0.0.1"},     # optional; default: the first node
        "node_dict": {
          "10.0.0.1": {"vpc_ip": "192.168.1.1", "bmc_ip": "NA"},
          "10.0.0.2": {"vpc_ip": "192.168.1.2", "port": 2222}
        },
        "env_vars": {"NCCL_SOCKET_IFNAME": "ens1"},
        "python": "/opt/venv/bin/python", "workdir": "runs", "nproc_per_node": 8
      }

  ``node_dict`` keys are SSH addresses; ``vpc_ip`` is the address the *other nodes* reach a
  node on (the rendezvous goes there). ``node_dict`` may also be a list of objects with a
  ``mgmt_ip`` (the SSH address). aorta's own settings (``python``, ``workdir``,
  ``nproc_per_node``, ``port``, ``env_vars``) may be given globally or per node.
* a DeepSpeed-style hostfile: one ``host slots=N`` per line, ``#`` comments.

Node ranks follow the file order with the head moved to rank 0. Every problem names its path
inside the file: ``cluster.json: node_dict["10.0.0.2"].port: must be an integer ...``.

Examples
--------
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aorta.envvars import TRIAL_MASTER_PORT_BASE, is_reserved_env_name
from aorta.errors import UsageError, summarize_problems

__all__ = [
    "Cluster",
    "ClusterError",
    "HostKeyChecking",
    "Node",
    "load_cluster",
    "parse_hostfile",
]

HostKeyChecking = Literal["yes", "accept-new", "no"]
NprocPerNode = int | Literal["gpu", "auto"]

USER_PLACEHOLDER = "{user-id}"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(r"^[A-Za-z0-9_.:%\[\]-]+$")
# Keys of cluster.json that aorta reads; anything else is reported (CVS files carry more).
_TOP_KEYS = frozenset(
    {
        "username",
        "priv_key_file",
        "password",
        "node_dict",
        "head_node_dict",
        "env_vars",
        "port",
        "python",
        "workdir",
        "nproc_per_node",
        "host_key_checking",
        "known_hosts_file",
        "connect_timeout",
        "keepalive",
    }
)
_NODE_KEYS = frozenset(
    {"vpc_ip", "mgmt_ip", "port", "python", "workdir", "nproc_per_node", "slots", "env_vars"}
)
_HOST_KEY_CHOICES = ("yes", "accept-new", "no")


class ClusterError(UsageError):
    """A cluster file that cannot be used; every problem names its path inside the file.

    ``problems`` lists ``(path, message)`` pairs; ``str(err)`` is the first one, prefixed with
    the file name, plus a count of the rest.
    """

    def __init__(
        self, problems: Sequence[tuple[str, str]] | str, *, source: str | None = None
    ) -> None:
        if isinstance(problems, str):
            problems = [("", problems)]
        self.problems = list(problems)
        self.source = source
        super().__init__(self._summary())

    def _summary(self) -> str:
        lines = [f"{path}: {message}" if path else message for path, message in self.problems]
        return summarize_problems(lines, source=self.source, empty="invalid cluster file")


@dataclass(frozen=True)
class Node:
    """One machine of the cluster.

    ``address`` is how this machine reaches it over SSH; ``vpc_ip`` how the other nodes reach
    it (``None``: the same address). ``rank`` is its node rank: 0 is the head, which hosts the
    rendezvous.
    """

    rank: int
    address: str
    vpc_ip: str | None = None
    #: SSH port; ``None`` leaves it to ``~/.ssh/config`` or 22.
    port: int | None = None
    #: Processes to start on this node (``--nproc-per-node``); ``None``: the launch decides.
    slots: NprocPerNode | None = None
    #: The node's Python interpreter (with torch and aorta installed).
    python: str = "python3"
    #: Working directory of the launched processes; relative paths are relative to the login
    #: directory.
    workdir: str = "."
    #: Variables for every process on this node (the cluster's, then the node's own).
    env_vars: Mapping[str, str] = field(default_factory=dict)
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
    """The nodes of a launch and how to log in to them; the head is ``nodes[0]``.

    Building one is free and touches no network: :mod:`aorta.launch` connects later, inside a
    context manager that tears down what it started.
    """

    nodes: tuple[Node, ...]
    username: str | None = None
    priv_key_file: str | None = None
    password: str | None = field(default=None, repr=False)
    host_key_checking: HostKeyChecking = "accept-new"
    known_hosts_file: str | None = None
    connect_timeout: float = 10.0
    #: Seconds between SSH keepalives (0 = off).
    keepalive: int = 15
    #: Where the cluster came from (a file name), for messages.
    source: str | None = None
    #: Things worth telling the user that do not stop a launch (unknown keys, ...).
    warnings: tuple[str, ...] = ()

    @property
    def head(self) -> Node:
        """The node with rank 0: it hosts the rendezvous and writes the run directory."""
        return self.nodes[0]

    def node(self, name: str) -> Node:
        """The node called ``name`` (``node1``) or with SSH address ``name``."""
        for n in self.nodes:
            if name in (n.name, n.address):
                return n
        raise KeyError(name)

    def master_addr(self, override: str | None = None) -> str:
        """The rendezvous address every node connects to.

        ``override`` wins; else the head's ``vpc_ip``; else the head's SSH address. A loopback
        address is refused when any node is not on loopback: only this machine could reach it.
        """
        addr = override or self.head.peer_address
        if _is_loopback(addr):
            remote = [n for n in self.nodes[1:] if not _is_loopback(n.address)]
            if remote:
                raise ClusterError(
                    f"rendezvous address {addr} is a loopback address, but {remote[0].label} is "
                    "another machine: give the head a vpc_ip (or --master-addr) the nodes can reach",
                    source=self.source,
                )
        return addr

    @classmethod
    def from_dict(
        cls, data: Any, *, source: str | None = None, check_files: bool = True
    ) -> Cluster:
        """Validate a parsed ``cluster.json`` and build the cluster (see the module docstring).

        Raises :class:`ClusterError` listing every problem. ``check_files`` also checks that
        ``priv_key_file`` and ``known_hosts_file`` exist on this machine.
        """
        return _ClusterParser(source, check_files).parse(data)


def _is_loopback(addr: str) -> bool:
    if addr.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(addr.strip("[]")).is_loopback
    except ValueError:
        return False


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


class _ClusterParser:
    """Collects every problem of one document, each with its path, then raises them together."""

    def __init__(self, source: str | None, check_files: bool) -> None:
        self.source = source
        self.check_files = check_files
        self.problems: list[tuple[str, str]] = []
        self.warnings: list[str] = []

    def bad(self, path: str, message: str) -> None:
        self.problems.append((path, message))

    def parse(self, data: Any) -> Cluster:
        if not isinstance(data, Mapping):
            raise ClusterError(
                [("", f"must be a JSON object, got {_describe(data)}")], source=self.source
            )
        for key in data:
            if key not in _TOP_KEYS and not str(key).startswith("_"):
                self.warnings.append(f"unknown key {key!r} ignored")
        user = self.string(data, "username", "username", optional=True)
        user = user.replace(USER_PLACEHOLDER, getpass.getuser()) if user else None
        defaults = self.node_settings(data, "")
        nodes = self.nodes(data.get("node_dict"), defaults)
        head = self.head(data.get("head_node_dict"), nodes)
        settings = self.login_settings(data, user)
        if self.problems:
            raise ClusterError(self.problems, source=self.source)
        if head:
            nodes.insert(0, nodes.pop(head))
        ranked = tuple(Node(rank=i, **fields) for i, fields in enumerate(nodes))
        return Cluster(
            nodes=ranked,
            username=user,
            source=self.source,
            warnings=tuple(self.warnings),
            **settings,
        )

    # -- scalar fields ---------------------------------------------------------------------

    def string(self, obj: Mapping[str, Any], key: str, path: str, *, optional: bool) -> str | None:
        if key not in obj or (optional and obj[key] is None):
            if not optional:
                self.bad(path, "is required")
            return None
        value = obj[key]
        if not isinstance(value, str) or not value.strip():
            self.bad(path, f"must be a non-empty string, got {_describe(value)}")
            return None
        return value.strip()

    def number(
        self, obj: Mapping[str, Any], key: str, path: str, *, lo: float, hi: float, integer: bool
    ) -> Any:
        value = obj.get(key)
        if value is None:
            return None
        ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type or not lo <= value <= hi:
            kind = "an integer" if integer else "a number"
            self.bad(path, f"must be {kind} from {lo:g} to {hi:g}, got {_describe(value)}")
            return None
        return value

    def nproc(self, obj: Mapping[str, Any], key: str, path: str) -> NprocPerNode | None:
        value = obj.get(key)
        if value is None:
            return None
        if value in ("gpu", "auto"):
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.bad(path, f"must be a whole number ≥ 1, 'gpu' or 'auto', got {_describe(value)}")
            return None
        return value

    def env(self, obj: Mapping[str, Any], path: str) -> dict[str, str]:
        raw = obj.get("env_vars")
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            self.bad(path, f"must be an object of NAME: value, got {_describe(raw)}")
            return {}
        env: dict[str, str] = {}
        for name, value in raw.items():
            where = f"{path}.{name}"
            if not _ENV_NAME.match(str(name)):
                self.bad(where, "is not a valid environment variable name (letters, digits, '_')")
            elif is_reserved_env_name(name) and name != TRIAL_MASTER_PORT_BASE:
                self.bad(
                    where,
                    f"{name} belongs to the launcher (torchrun sets it); it cannot be set here",
                )
            elif isinstance(value, bool) or not isinstance(value, str | int | float):
                self.bad(where, f"must be a string, got {_describe(value)}")
            elif "\x00" in str(value):
                self.bad(
                    where, "contains a NUL character, which a process environment cannot carry"
                )
            else:
                env[name] = str(value)
        return env

    # -- nodes -----------------------------------------------------------------------------

    def node_settings(self, obj: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        """aorta's per-node settings, valid both at the top level and inside a node entry."""
        dot = f"{prefix}." if prefix else ""
        out: dict[str, Any] = {}
        port = self.number(obj, "port", f"{dot}port", lo=1, hi=65535, integer=True)
        if port is not None:
            out["port"] = port
        for key in ("python", "workdir"):
            value = self.string(obj, key, f"{dot}{key}", optional=True)
            if value is not None:
                out[key] = _home_relative(value.replace(USER_PLACEHOLDER, getpass.getuser()))
        slots = self.nproc(obj, "nproc_per_node", f"{dot}nproc_per_node")
        slots = slots if slots is not None else self.nproc(obj, "slots", f"{dot}slots")
        if slots is not None:
            out["slots"] = slots
        if "env_vars" in obj:
            out["env_vars"] = self.env(obj, f"{dot}env_vars")
        return out

    def nodes(self, raw: Any, defaults: Mapping[str, Any]) -> list[dict[str, Any]]:
        if raw is None:
            self.bad("node_dict", "is required: the nodes to launch on")
            return []
        if isinstance(raw, Mapping):
            entries = [(f"node_dict[{json.dumps(k)}]", k, v) for k, v in raw.items()]
        elif isinstance(raw, list):
            entries = []
            for i, v in enumerate(raw):
                addr = v.get("mgmt_ip") if isinstance(v, Mapping) else None
                if not isinstance(addr, str):
                    self.bad(
                        f"node_dict[{i}].mgmt_ip",
                        "is required (the node's SSH address) in a list of nodes",
                    )
                    continue
                entries.append((f"node_dict[{i}]", addr, v))
        else:
            self.bad(
                "node_dict",
                f"must be an object {{ssh address: {{vpc_ip: ...}}}}, got {_describe(raw)}",
            )
            return []
        if not entries and not self.problems:
            self.bad("node_dict", "is empty: give at least one node")
        nodes: list[dict[str, Any]] = []
        seen: set[str] = set()
        for path, address, entry in entries:
            node = self.node(path, str(address).strip(), entry, defaults)
            if node is None:
                continue
            if node["address"] in seen:
                self.bad(path, f"node {node['address']!r} is listed twice")
            seen.add(node["address"])
            nodes.append(node)
        return nodes

    def node(
        self, path: str, address: str, entry: Any, defaults: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        if not address or not _HOST.match(address):
            self.bad(path, f"{address!r} is not a host name or IP address")
            return None
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            self.bad(
                path, f'must be an object such as {{"vpc_ip": "10.0.0.1"}}, got {_describe(entry)}'
            )
            return None
        vpc = self.string(entry, "vpc_ip", f"{path}.vpc_ip", optional=True)
        if vpc is not None and not _HOST.match(vpc):
            self.bad(f"{path}.vpc_ip", f"{vpc!r} is not a host name or IP address")
        own = self.node_settings(entry, path)
        env = {**defaults.get("env_vars", {}), **own.pop("env_vars", {})}
        fields = {**defaults, **own, "address": address, "vpc_ip": vpc, "env_vars": env}
        fields["extra"] = {k: v for k, v in entry.items() if k not in _NODE_KEYS}
        if isinstance(entry.get("mgmt_ip"), str):
            fields["extra"]["mgmt_ip"] = entry["mgmt_ip"]
        return fields

    def head(self, raw: Any, nodes: list[dict[str, Any]]) -> int:
        if raw is None:
            return 0
        if not isinstance(raw, Mapping):
            self.bad(
                "head_node_dict", f'must be an object {{"mgmt_ip": ...}}, got {_describe(raw)}'
            )
            return 0
        mgmt = self.string(raw, "mgmt_ip", "head_node_dict.mgmt_ip", optional=True)
        if mgmt is None:
            return 0
        for i, n in enumerate(nodes):
            if mgmt in (n["address"], n["vpc_ip"], n["extra"].get("mgmt_ip")):
                return i
        if nodes:
            known = ", ".join(n["address"] for n in nodes)
            self.bad(
                "head_node_dict.mgmt_ip",
                f"{mgmt!r} is not one of the nodes ({known}); the head must run rank 0 — "
                "name one of them or drop head_node_dict to use the first",
            )
        return 0

    # -- login -----------------------------------------------------------------------------

    def login_settings(self, data: Mapping[str, Any], user: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        key = self.string(data, "priv_key_file", "priv_key_file", optional=True)
        if key is not None:
            key = os.path.expanduser(key.replace(USER_PLACEHOLDER, user or getpass.getuser()))
            if self.check_files and not Path(key).is_file():
                self.bad("priv_key_file", f"{key}: no such file")
            out["priv_key_file"] = key
        if "password" in data and data["password"] is not None:
            if not isinstance(data["password"], str):
                self.bad("password", f"must be a string, got {type(data['password']).__name__}")
            else:
                out["password"] = data["password"]
        policy = data.get("host_key_checking")
        if policy is not None:
            if policy not in _HOST_KEY_CHOICES:
                self.bad(
                    "host_key_checking",
                    f"must be one of {', '.join(_HOST_KEY_CHOICES)}, got {_describe(policy)}",
                )
            else:
                out["host_key_checking"] = policy
        known = self.string(data, "known_hosts_file", "known_hosts_file", optional=True)
        if known is not None:
            out["known_hosts_file"] = os.path.expanduser(known)
        timeout = self.number(
            data, "connect_timeout", "connect_timeout", lo=0.1, hi=3600, integer=False
        )
        if timeout is not None:
            out["connect_timeout"] = float(timeout)
        keepalive = self.number(data, "keepalive", "keepalive", lo=0, hi=3600, integer=True)
        if keepalive is not None:
            out["keepalive"] = keepalive
        return out


def _home_relative(path: str) -> str:
    # A remote command receives every path quoted, so '~' would not expand there: the login
    # directory is where relative paths start anyway.
    if path == "~":
        return "."
    if path.startswith("~/"):
        return path[2:] or "."
    return path


def parse_hostfile(text: str, *, source: str | None = None) -> Cluster:
    """A cluster from a DeepSpeed-style hostfile (``host slots=N`` per line, ``#`` comments).

    The user, key and ports come from ``~/.ssh/config`` (or the defaults); the first host is
    the head.
    """
    problems: list[tuple[str, str]] = []
    nodes: list[Node] = []
    seen: set[str] = set()
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
                problems.append((where, f"expected 'host slots=N', got {token!r}"))
                continue
            slots = int(value)
        if not _HOST.match(host):
            problems.append((where, f"{host!r} is not a host name or IP address"))
        elif host in seen:
            problems.append((where, f"host {host!r} is listed twice"))
        seen.add(host)
        nodes.append(Node(rank=len(nodes), address=host, slots=slots))
    if not nodes and not problems:
        problems.append(("", "no hosts: expected lines like 'worker-1 slots=8'"))
    if problems:
        raise ClusterError(problems, source=source)
    return Cluster(nodes=tuple(nodes), source=source)


def load_cluster(path: str | Path) -> Cluster:
    """Read a ``cluster.json`` or a hostfile (whichever the content is) and validate it.

    Raises
    ------
    ClusterError
        A :class:`~aorta.errors.UsageError` naming the file and the path of each problem inside
        it (``cluster.json: node_dict["10.0.0.2"].port: ...``).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "hostfile"
    >>> _ = path.write_text("gpu-1 slots=8\\ngpu-2 slots=8\\n")
    >>> [n.label for n in load_cluster(path).nodes]
    ['node0 gpu-1', 'node1 gpu-2']
    >>> _ = path.write_text('{"node_dict": {"gpu-1": {"port": "22"}}}')
    >>> load_cluster(path)
    Traceback (most recent call last):
    ...
    aorta.launch.cluster.ClusterError: ...hostfile: node_dict["gpu-1"].port: must be an integer from 1 to 65535, got string '22'
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterError(f"{path}: cannot read the cluster file: {exc.strerror or exc}") from None
    if not text.lstrip().startswith("{"):
        return parse_hostfile(text, source=str(path))
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise ClusterError(
            [("", f"key {exc.args[0]!r} appears twice in one object")], source=str(path)
        ) from None
    except json.JSONDecodeError as exc:
        raise ClusterError(
            [(f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {exc.msg}")],
            source=str(path),
        ) from None
    return Cluster.from_dict(data, source=str(path))


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out
