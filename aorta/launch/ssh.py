"""The one place that decides how aorta talks SSH to a node.

Every SSH use — fabric connections, ``ssh`` and ``scp`` command lines, ``rsync -e`` — is built
from one :class:`SshOptions`, so the key, port, host-key policy, keepalive and connect timeout
can never differ between two calls (the upstream launcher once picked a master port with an
``ssh`` call that forgot the key).

Examples
--------
>>> opts = SshOptions(host="10.0.0.2", user="ops", port=2222, key_file="/keys/id_ed25519")
>>> " ".join(opts.ssh_argv())  # doctest: +NORMALIZE_WHITESPACE
'ssh -o BatchMode=yes -o User=ops -i /keys/id_ed25519 -o IdentitiesOnly=yes
 -o StrictHostKeyChecking=accept-new -o ConnectTimeout=10 -o ServerAliveInterval=15
 -o ServerAliveCountMax=3 -o LogLevel=ERROR -p 2222'
>>> opts.rsync_argv("runs/out/", "/tmp/node_1/")[-2:]
['ops@10.0.0.2:runs/out/', '/tmp/node_1/']
"""

from __future__ import annotations

import contextlib
import math
import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
from fabric import Config, Connection

from .cluster import Cluster, HostKeyChecking, Node

__all__ = ["SshOptions"]


@dataclass(frozen=True)
class SshOptions:
    """How to reach one node: address, login, key or password, host-key policy, timeouts.

    Building one is free; :meth:`connection` returns a fabric ``Connection`` that opens
    lazily (on first use) and closes with ``with`` or ``close()``.
    """

    host: str
    user: str | None = None
    port: int | None = None
    key_file: str | None = None
    password: str | None = field(default=None, repr=False)
    host_key_checking: HostKeyChecking = "accept-new"
    known_hosts_file: str | None = None
    connect_timeout: float = 10.0
    #: Seconds between keepalive probes (0 = none); a dead peer is noticed after three.
    keepalive: int = 15

    @classmethod
    def for_node(cls, cluster: Cluster, node: Node) -> SshOptions:
        """The options for ``node`` of ``cluster``."""
        return cls(
            host=node.address,
            user=cluster.username,
            port=node.port,
            key_file=cluster.priv_key_file,
            password=cluster.password,
            host_key_checking=cluster.host_key_checking,
            known_hosts_file=cluster.known_hosts_file,
            connect_timeout=cluster.connect_timeout,
            keepalive=cluster.keepalive,
        )

    # -- OpenSSH command lines ---------------------------------------------------------------

    @property
    def openssh_usable(self) -> bool:
        """False when only a password is known: OpenSSH cannot take one non-interactively."""
        return not (self.password and not self.key_file)

    def _options(self) -> list[str]:
        opts = ["-o", "BatchMode=yes"]
        if self.user:
            opts += ["-o", f"User={self.user}"]
        if self.key_file:
            opts += ["-i", self.key_file, "-o", "IdentitiesOnly=yes"]
        strict = {"yes": "yes", "accept-new": "accept-new", "no": "no"}[self.host_key_checking]
        opts += ["-o", f"StrictHostKeyChecking={strict}"]
        if self.host_key_checking == "no":
            opts += ["-o", "UserKnownHostsFile=/dev/null"]
        elif self.known_hosts_file:
            opts += ["-o", f"UserKnownHostsFile={self.known_hosts_file}"]
        opts += ["-o", f"ConnectTimeout={max(1, math.ceil(self.connect_timeout))}"]
        if self.keepalive:
            opts += ["-o", f"ServerAliveInterval={self.keepalive}", "-o", "ServerAliveCountMax=3"]
        return [*opts, "-o", "LogLevel=ERROR"]

    def ssh_argv(self) -> list[str]:
        """``ssh`` and its options, without the destination (add ``host`` and the command)."""
        port = ["-p", str(self.port)] if self.port else []
        return ["ssh", *self._options(), *port]

    def scp_argv(self) -> list[str]:
        """``scp`` and its options (scp spells the port ``-P``)."""
        port = ["-P", str(self.port)] if self.port else []
        return ["scp", *self._options(), *port]

    def remote(self, path: str) -> str:
        """``[user@]host:path`` for scp and rsync."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{path}" if self.user else f"{host}:{path}"

    def rsync_argv(
        self, remote_src: str, local_dst: str, *, exclude: Sequence[str] = ()
    ) -> list[str]:
        """``rsync`` pulling ``remote_src`` into ``local_dst`` over :meth:`ssh_argv`.

        ``--protect-args`` keeps a path with spaces one argument on the remote side.
        """
        excludes = [f"--exclude={pattern}" for pattern in exclude]
        return [
            "rsync",
            "-a",
            "--protect-args",
            *excludes,
            "-e",
            shlex.join(self.ssh_argv()),
            self.remote(remote_src),
            local_dst,
        ]

    # -- fabric --------------------------------------------------------------------------

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``paramiko.SSHClient.connect`` (fabric's ``connect_kwargs``).

        A given key or password is the only credential tried (like ``IdentitiesOnly``); with
        neither, the agent and ``~/.ssh`` keys are.
        """
        kwargs: dict[str, Any] = {
            "banner_timeout": self.connect_timeout,
            "auth_timeout": self.connect_timeout,
        }
        if self.key_file or self.password:
            kwargs.update(look_for_keys=False, allow_agent=False)
        if self.key_file:
            kwargs["key_filename"] = [self.key_file]
        if self.password:
            kwargs["password"] = self.password
        return kwargs

    def connection(self, *, config: Config | None = None) -> Connection:
        """A fabric ``Connection`` to this node; nothing connects until it is used.

        ``config`` is a ``fabric.Config`` to share between connections (it reads
        ``~/.ssh/config`` once).
        """
        conn = _Connection(
            self.host,
            user=self.user,
            port=self.port,
            config=config if config is not None else Config(),
            connect_timeout=max(1, math.ceil(self.connect_timeout)),
            connect_kwargs=self.connect_kwargs(),
        )
        conn.aorta_keepalive = self.keepalive
        self._apply_host_key_policy(conn.client)
        return conn

    def _apply_host_key_policy(self, client: Any) -> None:
        if self.host_key_checking == "no":
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
            return
        known = Path(self.known_hosts_file or "~/.ssh/known_hosts").expanduser()
        if known.is_file():
            # "system" host keys are checked but never written back: threads connecting in
            # parallel must not rewrite one known_hosts file.
            client.load_system_host_keys(str(known))
        policy = (
            paramiko.RejectPolicy() if self.host_key_checking == "yes" else paramiko.AutoAddPolicy()
        )
        client.set_missing_host_key_policy(policy)


class _Connection(Connection):
    """fabric's ``Connection`` that also turns on SSH keepalives once open."""

    aorta_keepalive = 0

    def open(self) -> Any:
        result = super().open()
        if self.transport is not None:
            if self.aorta_keepalive:
                self.transport.set_keepalive(self.aorta_keepalive)
            # Small request/reply packets: without this, Nagle and delayed ACKs add ~40 ms to
            # every exchange (a command that exits at once took 50 ms to report its status).
            with contextlib.suppress(OSError, AttributeError):
                self.transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return result
