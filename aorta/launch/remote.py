"""One node's SSH session: run a command with a deadline, stream its output line by line.

:class:`SshSession` wraps a fabric ``Connection`` (built by :class:`~aorta.launch.ssh.SshOptions`)
and runs commands on raw paramiko channels: output is streamed to a callback with bounded memory
(a multi-hour run keeps only the last lines), and every read loop has a deadline. Stopping a
command is done over a *second* connection (:meth:`SshSession.exec_fresh`), so a busy or stuck
first channel cannot prevent it.

Anything with the same methods can stand in for :class:`SshSession` (the launch takes a session
factory); the pure helpers here — :class:`LineBuffer`, :func:`describe_ssh_error` — need no SSH.

Examples
--------
>>> lines = []
>>> buf = LineBuffer(lines.append)
>>> buf.feed(b"epoch 1\\r\\nepo"); buf.feed(b"ch 2\\n\\xff partial")
>>> buf.close()
>>> lines
['epoch 1', 'epoch 2', '\\ufffd partial']
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import paramiko

from aorta.errors import AortaError

from .cluster import Node
from .ssh import SshOptions

__all__ = ["ExecResult", "LineBuffer", "NodeSession", "RemoteError", "RemoteTimeout", "SshSession"]

_CHUNK = 65536
_POLL_S = 0.05


class RemoteError(AortaError):
    """A node could not be reached, or a command on it could not be run; one line says why."""


class RemoteTimeout(RemoteError):
    """A remote command did not finish before its deadline (it may still be running)."""


@dataclass(frozen=True)
class ExecResult:
    """How a remote command ended; with streaming, ``stdout`` holds only the last lines."""

    exit_code: int
    stdout: str
    stderr: str = ""


class LineBuffer:
    """Turns chunks of bytes into lines (UTF-8, undecodable bytes replaced; ``\\r\\n`` → line)."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, data: bytes) -> None:
        text = self._pending + self._decoder.decode(data)
        *lines, self._pending = text.split("\n")
        for line in lines:
            self._emit(line.rstrip("\r"))

    def close(self) -> None:
        text = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        if text:
            self._emit(text.rstrip("\r"))


class NodeSession(Protocol):
    """What the launch needs from a connection to one node."""

    node: Node

    def open(self) -> None: ...

    def exec(
        self,
        command: str,
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        on_line: Callable[[str], None] | None = None,
        keep_stdin_open: bool = False,
    ) -> ExecResult: ...

    def exec_fresh(
        self, command: str, *, stdin: bytes | None = None, timeout: float | None = None
    ) -> ExecResult: ...

    def pull(self, remote_dir: str, local_dir: Path, *, timeout: float, rsync: bool) -> str: ...

    def close(self) -> None: ...


def describe_ssh_error(exc: BaseException) -> str:
    """A one-line reason for a failed SSH operation.

    >>> describe_ssh_error(ConnectionRefusedError(111, "Connection refused"))
    'connection refused (is sshd running there?)'
    """
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return "connection refused (is sshd running there?)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is sshd running there?)"
    if isinstance(exc, paramiko.BadHostKeyException):
        return f"host key mismatch ({exc.key.get_name()}): the node's key is not the one in known_hosts"
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed ({exc})"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name ({exc.strerror})"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out connecting"
    if isinstance(exc, paramiko.SSHException):
        if "No authentication methods available" in str(exc):
            return "authentication failed: no key or password to try (set priv_key_file or password, or run ssh-agent)"
        return str(exc) or type(exc).__name__
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return f"{type(exc).__name__}: {exc}"


class SshSession:
    """One node's connection. Nothing connects until :meth:`open` (or the first command).

    ``with SshSession(...) as s:`` closes it; :meth:`exec_fresh` uses a separate, short-lived
    connection with the same options.
    """

    def __init__(self, node: Node, options: SshOptions, *, config: Any = None) -> None:
        self.node = node
        self.options = options
        self._config = config
        self._conn = options.connection(config=config)

    def __enter__(self) -> SshSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _where(self) -> str:
        port = f":{self.options.port}" if self.options.port else ""
        user = f"{self.options.user}@" if self.options.user else ""
        return f"ssh {user}{self.options.host}{port}"

    @property
    def connection(self) -> Any:
        """The fabric ``Connection`` (for SFTP)."""
        return self._conn

    def open(self) -> None:
        """Connect and authenticate (bounded by the connect timeout); raises :class:`RemoteError`."""
        if self._conn.is_connected:
            return
        try:
            self._conn.open()
        except Exception as exc:
            raise RemoteError(f"{self._where()}: {describe_ssh_error(exc)}") from exc

    def exec(
        self,
        command: str,
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        on_line: Callable[[str], None] | None = None,
        keep_stdin_open: bool = False,
    ) -> ExecResult:
        """Run ``command`` (one shell line), feed it ``stdin``, wait for its exit status.

        With ``on_line``, stdout and stderr are merged and every line goes to the callback as it
        arrives; ``stdout`` of the result then holds the last 40 lines. Raises
        :class:`RemoteTimeout` past ``timeout`` seconds (the command may still run: stop it
        with :meth:`exec_fresh`), :class:`RemoteError` when the connection fails.
        ``keep_stdin_open`` leaves the command's stdin open until the channel closes (a remote
        watchdog waits for that end of file).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        self.open()
        try:
            chan = self._conn.client.get_transport().open_session(
                timeout=self.options.connect_timeout
            )
        except Exception as exc:
            raise RemoteError(
                f"{self._where()}: cannot open a channel: {describe_ssh_error(exc)}"
            ) from exc
        try:
            chan.set_combine_stderr(on_line is not None)
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
            if not keep_stdin_open:
                chan.shutdown_write()
            return self._pump(chan, deadline, on_line)
        except (RemoteError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise RemoteError(f"{self._where()}: {describe_ssh_error(exc)}") from exc
        finally:
            chan.close()

    def _pump(
        self, chan: Any, deadline: float | None, on_line: Callable[[str], None] | None
    ) -> ExecResult:
        # Event-driven, not polled: a blocking recv returns as soon as data or EOF arrives, then
        # the exit status is awaited on paramiko's status event. The short timeouts only bound
        # how late a deadline is noticed and how long stderr waits to be drained.
        tail: collections.deque[str] = collections.deque(maxlen=40)
        out, err = bytearray(), bytearray()
        lines = None
        if on_line is not None:

            def emit(line: str) -> None:
                tail.append(line)
                on_line(line)

            lines = LineBuffer(emit)

        def tick() -> float:
            if deadline is None:
                return _POLL_S
            left = deadline - time.monotonic()
            if left <= 0:
                raise RemoteTimeout(f"{self._where()}: still running at the deadline")
            return min(_POLL_S, left)

        while True:  # stdout until EOF
            chan.settimeout(tick())
            try:
                data = chan.recv(_CHUNK)
            except TimeoutError:
                data = None
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(_CHUNK)
            if data == b"":
                break
            if data is not None and lines is not None:
                lines.feed(data)
            elif data is not None:
                out += data
        while not chan.status_event.wait(tick()):
            if chan.closed:
                raise RemoteError(
                    f"{self._where()}: the connection closed before the command ended"
                )
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(_CHUNK)
        if lines is not None:
            lines.close()
        stdout = "\n".join(tail) if lines is not None else out.decode("utf-8", "replace")
        return ExecResult(chan.recv_exit_status(), stdout, err.decode("utf-8", "replace"))

    def exec_fresh(
        self, command: str, *, stdin: bytes | None = None, timeout: float | None = None
    ) -> ExecResult:
        """Like :meth:`exec` but over a new connection, closed afterwards."""
        other = SshSession(self.node, self.options, config=self._config)
        try:
            return other.exec(command, stdin=stdin, timeout=timeout)
        finally:
            other.close()

    def pull(self, remote_dir: str, local_dir: Path, *, timeout: float, rsync: bool) -> str:
        """Copy ``remote_dir``'s contents into ``local_dir``; return how (``rsync``/``sftp``).

        rsync (over :meth:`SshOptions.rsync_argv`) when ``rsync`` says the node has it and the
        login works without a password; SFTP otherwise, or when rsync failed.
        """
        from .collect import CollectError, pull_rsync, pull_sftp

        deadline = time.monotonic() + timeout
        note = ""
        if rsync and self.options.openssh_usable:
            try:
                pull_rsync(self.options, remote_dir, local_dir, timeout=timeout)
                return "rsync"
            except CollectError as exc:
                note = f" (rsync failed: {exc})"
        self.open()
        try:
            n = pull_sftp(
                self._conn.sftp(),
                remote_dir,
                local_dir,
                timeout=max(1.0, deadline - time.monotonic()),
            )
        except CollectError:
            raise
        except Exception as exc:
            raise RemoteError(f"{self._where()}: sftp: {describe_ssh_error(exc)}{note}") from exc
        return f"sftp ({n} files){note}"

    def close(self) -> None:
        # Closing a half-open connection must never mask the real error.
        with contextlib.suppress(Exception):
            self._conn.close()
