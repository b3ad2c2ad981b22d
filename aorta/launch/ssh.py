"""How aorta talks to a node: one OpenSSH options builder and one session type.

The transport is the ``ssh`` program, one process per remote command, and nothing else (no
Fabric/paramiko, no scp, rsync or SFTP). That keeps the launcher small and its failure
semantics simple:

* every SSH use is built from one :class:`SshOptions`, so the key, port, host-key policy,
  keepalive and connect timeout can never differ between two calls, and ``~/.ssh/config``
  (ProxyJump, certificates, agent, ControlMaster) applies exactly as on the user's shell;
* every command is a fresh connection, so a stop can never be blocked behind a busy channel;
* a deadline is a timer that kills the local ``ssh``: no read loop can outlive it;
* artifacts come back through the same ``ssh`` as a ``tar`` stream, unpacked here with
  tarfile's ``data`` filter: nothing to install on either side beyond ``ssh`` and ``tar``.

The price: OpenSSH in batch mode cannot type a password, so logins use keys (``priv_key_file``,
ssh-agent or ``~/.ssh``). Anything with :class:`SshSession`'s ``exec`` and ``pull`` can stand in
for it: the launch takes a session factory (tests run the same commands in a local shell).

Examples
--------
>>> opts = SshOptions(host="10.0.0.2", user="ops", port=2222, key_file="/keys/id_ed25519")
>>> " ".join(opts.ssh_argv())  # doctest: +NORMALIZE_WHITESPACE
'ssh -o BatchMode=yes -o User=ops -i /keys/id_ed25519 -o IdentitiesOnly=yes
 -o StrictHostKeyChecking=accept-new -o ConnectTimeout=10 -o ServerAliveInterval=15
 -o ServerAliveCountMax=3 -o LogLevel=ERROR -p 2222'
>>> describe_ssh_error("ssh: connect to host 10.0.0.2 port 22: Connection refused")
'connection refused (is sshd running there?)'
"""

from __future__ import annotations

import collections
import contextlib
import math
import shlex
import subprocess
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aorta.errors import AortaError

from .cluster import Cluster, HostKeyChecking, Node
from .gather import COMBINED

__all__ = [
    "ExecResult",
    "NodeSession",
    "RemoteError",
    "RemoteTimeout",
    "SshOptions",
    "SshSession",
    "Unreachable",
    "describe_ssh_error",
]

_SSH_FAILED = 255  # ssh's own exit code: the connection or the login failed


class RemoteError(AortaError):
    """A node could not be reached, or a command on it could not be run; one line says why."""


class Unreachable(RemoteError):
    """``ssh`` itself failed: refused, timed out, unknown host, login or host key refused."""


class RemoteTimeout(RemoteError):
    """A remote command did not finish before its deadline (its local ``ssh`` was killed)."""


@dataclass(frozen=True)
class ExecResult:
    """How a remote command ended; with streaming, ``stdout`` holds only the last lines."""

    exit_code: int
    stdout: str
    stderr: str = ""


@dataclass(frozen=True)
class SshOptions:
    """How to reach one node: address, login, key, host-key policy, timeouts."""

    host: str
    user: str | None = None
    port: int | None = None
    key_file: str | None = None
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
            host_key_checking=cluster.host_key_checking,
            known_hosts_file=cluster.known_hosts_file,
            connect_timeout=cluster.connect_timeout,
            keepalive=cluster.keepalive,
        )

    def ssh_argv(self) -> list[str]:
        """``ssh`` and its options, without the destination (add ``host`` and the command)."""
        opts = ["ssh", "-o", "BatchMode=yes"]
        if self.user:
            opts += ["-o", f"User={self.user}"]
        if self.key_file:
            opts += ["-i", self.key_file, "-o", "IdentitiesOnly=yes"]
        opts += ["-o", f"StrictHostKeyChecking={self.host_key_checking}"]
        if self.host_key_checking == "no":
            opts += ["-o", "UserKnownHostsFile=/dev/null"]
        elif self.known_hosts_file:
            opts += ["-o", f"UserKnownHostsFile={self.known_hosts_file}"]
        opts += ["-o", f"ConnectTimeout={max(1, math.ceil(self.connect_timeout))}"]
        if self.keepalive:
            opts += ["-o", f"ServerAliveInterval={self.keepalive}", "-o", "ServerAliveCountMax=3"]
        return [*opts, "-o", "LogLevel=ERROR", *(["-p", str(self.port)] if self.port else [])]

    def where(self) -> str:
        """``ssh user@host:port``, the prefix of this node's connection errors."""
        user = f"{self.user}@" if self.user else ""
        return f"ssh {user}{self.host}" + (f":{self.port}" if self.port else "")


def describe_ssh_error(stderr: str) -> str:
    """A one-line reason from what ``ssh`` printed when it failed (exit code 255)."""
    text = stderr.strip()
    reasons = {
        "Connection refused": "connection refused (is sshd running there?)",
        "Permission denied": f"authentication failed ({text.splitlines()[-1] if text else ''})",
        "Host key verification failed": "host key mismatch: the node's key is not the one in known_hosts",
        "Could not resolve hostname": "cannot resolve the host name",
        "timed out": "timed out connecting",
    }
    for mark, reason in reasons.items():
        if mark in text:
            return reason
    return text.splitlines()[-1] if text else "ssh failed (exit code 255)"


class NodeSession(Protocol):
    """What the launch needs from a connection to one node."""

    node: Node

    def exec(
        self,
        command: str,
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        on_line: Callable[[str], None] | None = None,
        keep_stdin_open: bool = False,
    ) -> ExecResult: ...

    def pull(self, remote_dir: str, local_dir: Path, *, timeout: float) -> str: ...


class SshSession:
    """One node, reached by ``ssh`` with :class:`SshOptions`; each call is one ``ssh`` process.

    Building one starts nothing; there is nothing to close.
    """

    def __init__(self, node: Node, options: SshOptions) -> None:
        self.node = node
        self.options = options

    def argv(self, command: str) -> list[str]:
        """The local argv that runs the shell line ``command`` on the node."""
        return [*self.options.ssh_argv(), self.options.host, command]

    def _start(self, command: str, *, merge: bool) -> subprocess.Popen[bytes]:
        # A session of its own: the terminal's Ctrl-C reaches the launcher, which stops the
        # nodes in order, not every ssh at once.
        return subprocess.Popen(
            self.argv(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
            start_new_session=True,
        )

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
        arrives; ``stdout`` of the result then holds the last 40 lines. ``keep_stdin_open``
        leaves the command's stdin open until it ends (a remote watchdog waits for that end of
        file). Raises :class:`RemoteTimeout` past ``timeout`` seconds and :class:`Unreachable`
        when ``ssh`` itself failed (not when streaming: its message is then in the lines).
        """
        proc = self._start(command, merge=on_line is not None)
        assert proc.stdin is not None and proc.stdout is not None
        if on_line is None:
            try:
                out, err = proc.communicate(stdin or b"", timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise RemoteTimeout(
                    f"{self.options.where()}: still running at the deadline"
                ) from None
            result = ExecResult(
                proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
            )
            if result.exit_code == _SSH_FAILED and not result.stdout:
                raise Unreachable(f"{self.options.where()}: {describe_ssh_error(result.stderr)}")
            return result
        expired, timer = _kill_after(proc, timeout)
        tail: collections.deque[str] = collections.deque(maxlen=40)
        try:
            with contextlib.suppress(BrokenPipeError):  # ssh failed at once: its lines say why
                proc.stdin.write(stdin or b"")
                proc.stdin.flush()
                if not keep_stdin_open:
                    proc.stdin.close()
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\r\n")
                tail.append(line)
                on_line(line)
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()  # interrupted: the channel closes, the node's watchdog takes over
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
            proc.stdout.close()
        if expired.is_set():
            raise RemoteTimeout(f"{self.options.where()}: still running at the deadline")
        return ExecResult(code, "\n".join(tail))

    def pull(self, remote_dir: str, local_dir: Path, *, timeout: float) -> str:
        """Copy ``remote_dir``'s contents (no ``combined_traces``) into ``local_dir`` as a tar
        stream; return ``"tar (N files)"``. Raises :class:`RemoteError`."""
        line = f"cd {shlex.quote(remote_dir)} && exec tar -cf - --exclude={COMBINED} ."
        proc = self._start(line, merge=False)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.close()
        expired, timer = _kill_after(proc, timeout)
        files, problem = 0, ""
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                for member in tar:
                    tar.extract(member, local_dir, filter="data")
                    files += member.isfile()
        except (tarfile.TarError, OSError) as exc:
            problem = str(exc)
        finally:
            timer.cancel()
            err = proc.stderr.read().decode(errors="replace").strip()
            code = proc.wait()
        if expired.is_set():
            raise RemoteError(f"tar did not finish in {timeout:g} s ({files} files copied)")
        if code == _SSH_FAILED:
            raise Unreachable(f"{self.options.where()}: {describe_ssh_error(err)}")
        if code != 0 or problem:
            raise RemoteError(f"tar exited {code}: {err.splitlines()[-1] if err else problem}")
        return f"tar ({files} files)"


def _kill_after(
    proc: subprocess.Popen[bytes], timeout: float | None
) -> tuple[threading.Event, threading.Timer]:
    """Kill ``proc`` after ``timeout`` seconds (``None``: never); the event says it happened."""
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(timeout if timeout is not None else 0.0, expire)
    timer.daemon = True
    if timeout is not None:
        timer.start()
    return expired, timer
