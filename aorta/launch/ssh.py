"""How aorta talks to a node: every remote call is a channel of a ``fabric.Connection`` built
by :func:`connection` from the cluster and the node (one login policy everywhere;
``~/.ssh/config`` read once per launch), read line by line, closed by a timer at its deadline.

>>> c = Cluster.from_dict({"node_dict": {"gpu-2": {}}, "password": "pw"})
>>> sorted(connection(c, c.head).connect_kwargs)  # the password is the only credential tried
['allow_agent', 'auth_timeout', 'banner_timeout', 'look_for_keys', 'password']
"""

from __future__ import annotations

import collections
import contextlib
import math
import shlex
import socket
import tarfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import paramiko
from fabric import Config, Connection
from paramiko import SSHConfig

from aorta.errors import AortaError
from aorta.recipe.cluster import Cluster, Node
from aorta.store.rundir import COMBINED_TRACES
from aorta.store.secrets import redact_secret_shapes
from aorta.text import cause_lines

__all__ = [
    "ExecResult",
    "NodeSession",
    "RemoteError",
    "RemoteTimeout",
    "SshSession",
    "connection",
    "ssh_sessions",
]


class RemoteError(AortaError):
    """A node could not be reached, or a command on it could not be run; one line says why."""


class Unreachable(RemoteError):
    """Connecting or logging in failed: refused, timed out, unknown host, key or password refused."""


class RemoteTimeout(RemoteError):
    """A remote command did not finish before its deadline (its channel was closed)."""


@dataclass(frozen=True)
class ExecResult:
    """How a remote command ended; ``stdout`` (stderr merged in) holds its last 40 lines.

    >>> ExecResult(125, "docker: Error response from daemon: no such device --password pw1.\\n"
    ...            "Run 'docker run --help' for more information").cause
    'docker: Error response from daemon: no such device --password <redacted>'
    """

    exit_code: int
    stdout: str

    @property
    def cause(self) -> str:  # for a message: the lines that say why, credential shapes masked
        return redact_secret_shapes(cause_lines(self.stdout)) or f"exit code {self.exit_code}"


def connection(cluster: Cluster, node: Node, ssh_config: SSHConfig | None = None) -> Connection:
    """A ``fabric.Connection`` to ``node`` with ``cluster``'s login, host-key policy and timeouts
    (it connects on first use): a given key or password is the only credential tried; with
    neither, the agent and ``~/.ssh`` keys are. ``ssh_config``: ``~/.ssh/config``, parsed once
    per launch (:func:`ssh_sessions`) and only read. Each gets a Fabric ``Config`` of its own:
    building a Connection writes to it, and Invoke empties a config to rebuild it on a write —
    threads sharing one read it empty ("No attribute or config key found") and lost a node."""
    kwargs: dict[str, Any] = {"banner_timeout": cluster.connect_timeout}
    kwargs["auth_timeout"] = cluster.connect_timeout
    if cluster.priv_key_file or cluster.password:
        kwargs.update(look_for_keys=False, allow_agent=False)
    if cluster.priv_key_file:
        kwargs["key_filename"] = [cluster.priv_key_file]
    if cluster.password:
        kwargs["password"] = cluster.password
    conn = Connection(
        node.address,
        user=cluster.username,
        port=node.port,
        config=Config() if ssh_config is None else Config(ssh_config=ssh_config),
        connect_timeout=max(1, math.ceil(cluster.connect_timeout)),  # Fabric takes whole seconds
        connect_kwargs=kwargs,
    )
    known = Path(cluster.known_hosts_file or "~/.ssh/known_hosts").expanduser()
    if cluster.host_key_checking != "no" and known.is_file():  # checked, never written back
        conn.client.load_system_host_keys(str(known))
    strict = cluster.host_key_checking == "yes"
    conn.client.set_missing_host_key_policy(
        paramiko.RejectPolicy() if strict else paramiko.AutoAddPolicy()
    )
    return conn


def describe_ssh_error(exc: BaseException) -> str:
    """A one-line reason for a failed connection.

    >>> describe_ssh_error(ConnectionRefusedError(111, "Connection refused"))
    'connection refused (is sshd running there?)'
    """
    if isinstance(exc, ConnectionRefusedError | paramiko.ssh_exception.NoValidConnectionsError):
        return "connection refused (is sshd running there?)"
    if isinstance(exc, paramiko.BadHostKeyException):
        return "host key mismatch: the node's key is not the one in known_hosts"
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed ({exc})"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name ({exc.strerror})"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out connecting"
    if "No authentication methods available" in str(exc):
        return "authentication failed: no key or password to try (priv_key_file, password, agent)"
    return (exc.strerror if isinstance(exc, OSError) else None) or f"{type(exc).__name__}: {exc}"


class NodeSession(Protocol):
    """What the launch needs from one node: :class:`SshSession`'s ``exec``, ``pull`` and
    ``close`` (tests of the fan-out logic pass a local stand-in)."""

    node: Node

    def exec(
        self,
        command: str,
        *,
        timeout: float,
        stdin: bytes | None = None,
        on_line: Callable[[str], None] | None = None,
        keep_stdin_open: bool = False,
        fresh: bool = False,
    ) -> ExecResult: ...
    def pull(self, remote_dir: str, local_dir: Path, *, timeout: float) -> str: ...
    def close(self) -> None: ...


class SshSession:
    """One node of ``cluster`` over Fabric. Building it is free; the first command connects,
    later ones (from any thread) get channels of that connection; ``exec(..., fresh=True)`` uses
    a connection of its own (the kill path, never stuck behind a dead one); ``close()`` ends
    every channel. ``ssh_config``: ``~/.ssh/config``, parsed once for a launch's sessions
    (:func:`ssh_sessions`)."""

    def __init__(self, node: Node, cluster: Cluster, ssh_config: SSHConfig | None = None) -> None:
        self.node, self.cluster, self.ssh_config = node, cluster, ssh_config
        user = f"{cluster.username}@" if cluster.username else ""
        #: ``ssh user@host:port``, the prefix of this node's connection errors.
        self.where = f"ssh {user}{node.address}" + (f":{node.port}" if node.port else "")
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    def connection(self) -> Connection:
        """A new, unconnected :func:`connection` to this node."""
        return connection(self.cluster, self.node, self.ssh_config)

    def __enter__(self) -> SshSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> Connection:
        conn = self.connection()
        try:
            conn.open()
        except Exception as exc:
            raise Unreachable(f"{self.where}: {describe_ssh_error(exc)}") from exc
        if self.cluster.keepalive:
            conn.transport.set_keepalive(self.cluster.keepalive)
        with contextlib.suppress(OSError, AttributeError):  # no Nagle delay on small replies
            conn.transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    @contextlib.contextmanager
    def _command(
        self, command: str, timeout: float, fresh: bool = False
    ) -> Iterator[paramiko.Channel]:
        """A channel running ``command`` (on a connection of its own if ``fresh``), closed by a
        timer at the deadline, which unblocks every wait on it; then :class:`RemoteTimeout`."""
        for attempt in (1, 2):  # a channel that never opened ran nothing: safe to ask again
            if fresh:
                conn = self._open()
            else:  # (re)connected here when the shared connection died since its last use
                with self._lock:
                    if self._conn is None or not self._conn.is_connected:
                        self._conn = self._open()
                    conn = self._conn
            try:
                chan = conn.transport.open_session(timeout=self.cluster.connect_timeout)
                break
            except Exception as exc:
                if fresh:
                    conn.close()
                if attempt == 2:
                    raise RemoteError(f"{self.where}: {describe_ssh_error(exc)}") from exc
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            chan.close()

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            chan.exec_command(command)
            yield chan
        except Exception as exc:  # after the timer fired, whatever broke is the timeout
            if not expired.is_set() and isinstance(exc, OSError | EOFError | paramiko.SSHException):
                raise RemoteError(f"{self.where}: {describe_ssh_error(exc)}") from exc
            if not expired.is_set():
                raise
        finally:
            timer.cancel()
            chan.close()
            if fresh:
                conn.close()
        if expired.is_set():
            raise RemoteTimeout(f"{self.where}: still running after {timeout:g} s")

    def exec(
        self,
        command: str,
        *,
        timeout: float,
        stdin: bytes | None = None,
        on_line: Callable[[str], None] | None = None,
        keep_stdin_open: bool = False,
        fresh: bool = False,
    ) -> ExecResult:
        """Run ``command`` with ``stdin``; each line (stderr merged) goes to ``on_line``.

        ``keep_stdin_open``: until the channel closes (a remote watchdog waits for that). Raises
        :class:`RemoteTimeout` past ``timeout``, :class:`Unreachable` when the login failed,
        :class:`RemoteError` when the connection was lost before the command ended.
        """
        tail: collections.deque[str] = collections.deque(maxlen=40)
        code = -1
        with self._command(command, timeout, fresh) as chan:
            chan.set_combine_stderr(True)
            # A command that ends before reading its input ("not found") closes the channel
            # mid-send: its output and exit status below say why, not the failed send.
            with contextlib.suppress(OSError):
                chan.sendall(stdin or b"")
                if not keep_stdin_open:
                    chan.shutdown_write()
            for raw in chan.makefile("rb"):  # one line at a time, until end of file
                tail.append(line := raw.decode(errors="replace").rstrip("\r\n"))
                if on_line is not None:
                    on_line(line)
            chan.status_event.wait()  # set by the exit status, the channel's close or the timer
            code, transport = chan.exit_status, chan.get_transport()
            # No exit status and a dead transport (whose thread saves what ended it before it
            # closes the channels): the node's sshd or the network went away, not the command.
            if code == -1 and isinstance(transport.saved_exception, EOFError | OSError):
                raise RemoteError(f"{self.where}: connection to the node lost")
        return ExecResult(code, "\n".join(tail))

    def pull(self, remote_dir: str, local_dir: Path, *, timeout: float) -> str:
        """Copy ``remote_dir`` (no ``combined_traces``) into ``local_dir`` as a ``tar`` stream
        (tarfile's ``data`` filter); ``"tar (N files)"``, else :class:`RemoteError`."""
        files, code, err = 0, -1, ""
        line = f"cd {shlex.quote(remote_dir)} && exec tar -cf - --exclude={COMBINED_TRACES} ."
        try:
            with self._command(line, timeout) as chan:
                chan.shutdown_write()
                with tarfile.open(fileobj=chan.makefile("rb"), mode="r|") as tar:
                    for member in tar:
                        tar.extract(member, local_dir, filter="data")
                        files += member.isfile()
                chan.status_event.wait()
                code = chan.exit_status
                err = chan.recv_stderr(4096).decode(errors="replace").strip()
        except RemoteTimeout:
            raise RemoteError(f"tar did not finish in {timeout:g} s ({files} files)") from None
        except tarfile.TarError as exc:
            err = str(exc)
        if code != 0:
            raise RemoteError(f"tar exited {code}: {ExecResult(code, err).cause}")
        return f"tar ({files} files)"

    def close(self) -> None:
        """Close the connection (every channel on it ends); a later command reconnects."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing never masks the real error
                conn.close()


def ssh_sessions(cluster: Cluster) -> dict[str, NodeSession]:
    """One :class:`SshSession` per node, sharing one parsed ``~/.ssh/config`` (it is
    read here, once); building them connects nothing."""
    ssh_config = Config().base_ssh_config  # Fabric's search: ~/.ssh/config, /etc/ssh/ssh_config
    return {n.name: SshSession(n, cluster, ssh_config) for n in cluster.nodes}
