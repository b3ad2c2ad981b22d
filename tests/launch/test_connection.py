"""How a launch logs in to the nodes of a cluster file (aorta/launch/ssh.py): one Fabric
connection policy built from the cluster's login fields, nothing connected yet."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import paramiko
import pytest

from aorta.launch import Cluster, SshSession, ssh_sessions
from aorta.launch.ssh import connection
from tests.threads import run_at_once


def test_ssh_options_carry_the_key_port_and_policy_everywhere() -> None:
    c = Cluster.from_dict(
        {
            "username": "ops",
            "priv_key_file": "/keys/id",
            "host_key_checking": "no",
            "connect_timeout": 2.5,
            "keepalive": 7,
            "node_dict": {"10.0.0.1": {"port": 2201}},
        },
        check_files=False,
    )
    assert c.keepalive == 7  # SshSession sets it on the transport once connected
    conn = connection(c, c.head)  # nothing connects yet
    assert (conn.host, conn.port, conn.user, conn.connect_timeout) == ("10.0.0.1", 2201, "ops", 3)
    assert conn.connect_kwargs["key_filename"] == ["/keys/id"]
    assert conn.connect_kwargs["look_for_keys"] is False  # the key is the only one tried
    assert conn.connect_kwargs["auth_timeout"] == conn.connect_kwargs["banner_timeout"] == 2.5
    assert isinstance(conn.client._policy, paramiko.AutoAddPolicy)  # host_key_checking: no
    assert not conn.is_connected
    strict = connection(dataclasses.replace(c, host_key_checking="yes"), c.head)
    assert isinstance(strict.client._policy, paramiko.RejectPolicy)


def test_a_password_reaches_paramiko_and_nothing_else() -> None:
    # The password login itself is tested against a real SSH server in test_launch_ssh.py.
    c = Cluster.from_dict({"node_dict": {"h": {}}, "password": " pw "})
    assert c.warnings == ()
    assert c.password == " pw "  # as written
    assert "pw" not in repr(c) and "pw" not in repr(SshSession(c.head, c).connection())
    kwargs = SshSession(c.head, c).connection().connect_kwargs
    assert kwargs["password"] == " pw " and kwargs["allow_agent"] is False


def test_one_ssh_config_per_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    config = tmp_path / ".ssh" / "config"
    config.write_text("Host gpu-*\n  User from-config\n  Port 2200\n")
    sessions = ssh_sessions(Cluster.from_dict({"node_dict": {"gpu-1": {}, "gpu-2": {}}}))
    config.write_text("Host gpu-*\n  User changed\n")  # read once: no connection re-reads it
    conns = [s.connection() for s in sessions.values() for _ in range(2)]
    assert {(conn.user, conn.port) for conn in conns} == {("from-config", 2200)}
    assert sessions["node0"].ssh_config is sessions["node1"].ssh_config
    assert len({id(conn.config) for conn in conns}) == len(conns)  # Fabric's Config: one each


def test_a_launchs_threads_build_connections_at_once() -> None:
    # CI lost node0 of a container launch: "No attribute or config key found for
    # 'inline_ssh_env'". Building a fabric.Connection writes to its Config, and Invoke rebuilds a
    # config on every write by emptying it first; threads sharing one Config read it empty. A
    # switch interval of a microsecond makes that interleaving near certain (it failed every run
    # before each connection got a Config of its own).
    nodes: dict[str, dict[str, object]] = {f"gpu-{i}": {} for i in range(8)}
    sessions = list(ssh_sessions(Cluster.from_dict({"node_dict": nodes})).values())
    assert all(isinstance(s, SshSession) for s in sessions)

    def build(session: SshSession) -> None:
        assert not session.connection().is_connected

    assert run_at_once(build, sessions, rounds=100) == []
