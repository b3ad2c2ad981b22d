"""Real OpenSSH servers on 127.0.0.2, 127.0.0.3, … standing in for cluster nodes.

Each node is its own ``sshd -D`` (Debian's ``openssh-server``) on a loopback address and a free
port, with its own host key and work directory; all accept one throwaway key made with
``ssh-keygen`` for the test session. ``UsePAM no`` and ``StrictModes no`` let it run in a
container as whoever runs the tests; sessions get ``SHLVL=1`` so bash skips ``~/.bashrc`` (on a
shared 2-core machine eight nodes would otherwise spend their CPU in one user's shell profile)
and a marker variable, so :meth:`SshdFarm.close` can find and kill every process any session
started, whatever the test did.

Used by the launcher tests (``tests/test_launch_*.py``) and ``benchmarks/launch_fanout.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aorta.run.ports import rendezvous_port

SSHD = "/usr/sbin/sshd"
REPO = Path(__file__).resolve().parent.parent
VENV_PYTHON = REPO / ".venv" / "bin" / "python"


def sshd_available() -> bool:
    return Path(SSHD).is_file() and shutil.which("ssh-keygen") is not None


def make_key(folder: Path, name: str = "id_ed25519") -> Path:
    """A fresh passphrase-less ed25519 key pair; returns the private key's path."""
    folder.mkdir(parents=True, exist_ok=True)
    key = folder / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "aorta-test", "-f", str(key)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return key


def _die_with_parent() -> None:
    # A test run killed outright (no fixture teardown) must not leave sshd listening: Linux
    # sends SIGTERM to the child when the process that started it dies.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def processes_with_env(entry: str) -> list[int]:
    """Live (non-zombie) processes whose environment contains ``NAME=value``."""
    want = entry.encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X") and want in env:
            found.append(int(pid))
    return found


def wait_for_processes(entry: str, count: int, timeout: float = 10.0) -> list[int]:
    """Wait until ``count`` processes carry ``entry``; return those found at the end. A child
    ``Popen`` has just returned from can still read as having no environment: the kernel sets
    the new image's environment up after its close-on-exec pipes close (one seen in a loaded
    run)."""
    deadline = time.monotonic() + timeout
    while len(found := processes_with_env(entry)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def wait_gone(entry: str, timeout: float = 5.0) -> list[int]:
    """Wait until no process carries ``entry``; return the ones still there at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left = processes_with_env(entry)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@dataclass
class SshNode:
    index: int
    address: str
    port: int
    workdir: Path
    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def up(self) -> bool:
        return self.process is not None and self.process.poll() is None


class SshdFarm:
    """``n`` sshd processes on 127.0.0.2… with one shared authorized key; a context manager."""

    def __init__(self, root: Path, key: Path, *, skip_shell_rc: bool = True) -> None:
        self.root = root
        self.key = key
        self.skip_shell_rc = skip_shell_rc
        self.marker = f"AORTA_TEST_SSHD={uuid.uuid4().hex}"
        self.nodes: list[SshNode] = []
        self._held: list[socket.socket] = []
        self.known_hosts = root / "known_hosts"
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(key.with_suffix(".pub"), root / "authorized_keys")

    def __enter__(self) -> SshdFarm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, n: int) -> list[SshNode]:
        """Start ``n`` more nodes and wait until each accepts connections."""
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege-separation dir
        first = len(self.nodes)
        new = [self._start_one(first + i) for i in range(n)]
        for node in new:
            self._wait_listening(node)
        return new

    def _start_one(self, index: int) -> SshNode:
        address = f"127.0.0.{index + 2}"
        port = rendezvous_port(address)
        hostkey = self.root / f"hostkey_{index}"
        if not hostkey.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)], check=True
            )
        workdir = self.root / f"node{index}"
        workdir.mkdir(exist_ok=True)
        env = f"{self.marker} SHLVL=1" if self.skip_shell_rc else self.marker
        config = self.root / f"sshd_{index}.conf"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress {address}:{port}",
                    f"HostKey {hostkey}",
                    f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
                    f"PidFile {self.root / f'sshd_{index}.pid'}",
                    "UsePAM no",
                    "StrictModes no",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "MaxStartups 200:30:400",
                    "MaxSessions 100",
                    "Subsystem sftp internal-sftp",
                    f"SetEnv {env}",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )
        node = SshNode(index, address, port, workdir, config, self.root / f"sshd_{index}.log")
        node.process = subprocess.Popen(
            [SSHD, "-D", "-f", str(config), "-E", str(node.log)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.nodes.append(node)
        return node

    def _wait_listening(self, node: SshNode, timeout: float = 10.0) -> None:
        # sshd writes its PidFile once it listens. Waiting for the file, not probing with a
        # connection, leaves no pre-auth child behind (one that would hold the socket a moment).
        pidfile = self.root / f"sshd_{node.index}.pid"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.process is not None and node.process.poll() is not None:
                raise RuntimeError(
                    f"sshd on {node.address}:{node.port} exited: {node.log.read_text()[-500:]}"
                )
            if pidfile.is_file() and pidfile.read_text().strip() == str(
                node.process.pid if node.process else ""
            ):
                return
            time.sleep(0.01)
        raise RuntimeError(
            f"sshd on {node.address}:{node.port} did not start listening in {timeout:g} s"
        )

    def stop_node(self, index: int) -> None:
        """Stop one node's sshd: its address then refuses connections.

        The port stays bound (not listening) by this process, so nothing else on the machine
        (a torch store picking a free port, say) can start answering on it.
        """
        node = self.nodes[index]
        proc = node.process
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=5)
        hold = socket.socket()
        hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # leftover connections are fine
        hold.bind((node.address, node.port))
        self._held.append(hold)

    def cluster_dict(self, *, nodes: list[SshNode] | None = None, **extra: Any) -> dict[str, Any]:
        """A CVS-style cluster.json for these nodes: the key, ports, the repo's venv python."""
        nodes = self.nodes if nodes is None else nodes
        data: dict[str, Any] = {
            "username": "{user-id}",
            "priv_key_file": str(self.key),
            "host_key_checking": "accept-new",
            "known_hosts_file": str(self.known_hosts),
            "connect_timeout": 5,
            "python": str(VENV_PYTHON),
            "env_vars": {
                "PYTHONPATH": str(REPO),
                "GLOO_SOCKET_IFNAME": "lo",
                "OMP_NUM_THREADS": "1",
            },
            "head_node_dict": {"mgmt_ip": nodes[0].address},
            "node_dict": {
                n.address: {
                    "vpc_ip": n.address,
                    "bmc_ip": "NA",
                    "port": n.port,
                    "workdir": str(n.workdir),
                }
                for n in nodes
            },
        }
        data.update(extra)
        return data

    def write_cluster(self, path: Path, **kwargs: Any) -> Path:
        path.write_text(json.dumps(self.cluster_dict(**kwargs), indent=2))
        return path

    def close(self) -> None:
        """Stop every sshd and every process a session of theirs started."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait(timeout=5)
        for hold in self._held:
            hold.close()
        for pid in processes_with_env(self.marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        wait_gone(self.marker, timeout=5.0)
