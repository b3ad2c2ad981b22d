"""The cluster file (aorta/recipe/cluster.py): CVS cluster.json and hostfiles, validated with
the path of each problem."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Any

import pytest

from aorta.errors import ExitCode, UsageError
from aorta.recipe.cluster import Cluster, ClusterError, load_cluster, parse_hostfile


def _cvs(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "_comment": "CVS files carry comments as _keys",
        "username": "{user-id}",
        "head_node_dict": {"mgmt_ip": "10.0.0.2"},
        "node_dict": {
            "10.0.0.1": {"bmc_ip": "NA", "vpc_ip": "192.168.0.1"},
            "10.0.0.2": {"bmc_ip": "NA", "vpc_ip": "192.168.0.2", "port": 2222},
            "10.0.0.3": {"bmc_ip": "NA", "vpc_ip": "192.168.0.3"},
        },
        "env_vars": {"NCCL_SOCKET_IFNAME": "ens1", "NCCL_IB_HCA": "5"},
    }
    data.update(extra)
    return data


def _problems(data: Any) -> list[str]:
    with pytest.raises(ClusterError) as info:
        Cluster.from_dict(data, source="cluster.json", check_files=False)
    assert info.value.exit_code is ExitCode.USAGE
    return [f"{p.path}: {p.message}" for p in info.value.problems]


def test_cvs_cluster_head_first_and_ranks_in_file_order() -> None:
    c = Cluster.from_dict(_cvs(), check_files=False)
    assert [(n.rank, n.address) for n in c.nodes] == [
        (0, "10.0.0.2"),
        (1, "10.0.0.1"),
        (2, "10.0.0.3"),
    ]
    assert c.username == getpass.getuser()
    assert c.head.port == 2222 and c.nodes[1].port is None
    assert c.head.extra == {"bmc_ip": "NA"}
    assert c.head.env_vars == {"NCCL_SOCKET_IFNAME": "ens1", "NCCL_IB_HCA": "5"}
    assert c.warnings == ()


def test_head_defaults_to_the_first_node_and_may_be_named_by_vpc_ip() -> None:
    data = _cvs()
    del data["head_node_dict"]
    assert Cluster.from_dict(data, check_files=False).head.address == "10.0.0.1"
    by_vpc = Cluster.from_dict(_cvs(head_node_dict={"mgmt_ip": "192.168.0.3"}), check_files=False)
    assert by_vpc.head.address == "10.0.0.3"


def test_master_addr_prefers_override_then_vpc_ip_then_ssh_address() -> None:
    c = Cluster.from_dict(_cvs(), check_files=False)
    assert c.master_addr() == "192.168.0.2"
    assert c.master_addr("10.9.9.9") == "10.9.9.9"
    plain = Cluster.from_dict({"node_dict": {"gpu-a": {}, "gpu-b": {}}})
    assert plain.master_addr() == "gpu-a"


def test_a_loopback_rendezvous_for_remote_nodes_is_refused() -> None:
    c = Cluster.from_dict(
        {"node_dict": {"gpu-a": {"vpc_ip": "127.0.0.1"}, "gpu-b": {}}}, source="c.json"
    )
    with pytest.raises(
        ClusterError, match=r"c.json: rendezvous address 127.0.0.1 is a loopback .* node1 gpu-b"
    ):
        c.master_addr()
    local = Cluster.from_dict({"node_dict": {"127.0.0.2": {}, "127.0.0.3": {}}})
    assert local.master_addr() == "127.0.0.2"  # every node on this machine: fine


def test_list_form_of_node_dict() -> None:
    c = Cluster.from_dict(
        {"node_dict": [{"mgmt_ip": "h1", "vpc_ip": "10.0.0.1"}, {"mgmt_ip": "h2"}]}
    )
    assert [n.address for n in c.nodes] == ["h1", "h2"] and c.head.vpc_ip == "10.0.0.1"


def test_aorta_settings_global_and_per_node() -> None:
    c = Cluster.from_dict(
        {
            "python": "/opt/venv/bin/python",
            "workdir": "~/runs",
            "nproc_per_node": 8,
            "env_vars": {"A": "1", "B": "2"},
            "node_dict": {
                "h1": {"workdir": "/scratch/{user-id}", "env_vars": {"B": "3"}},
                "h2": {"slots": 4},
            },
        }
    )
    h1, h2 = c.nodes
    assert (h1.python, h1.workdir, h1.slots) == (
        "/opt/venv/bin/python",
        f"/scratch/{getpass.getuser()}",
        8,
    )
    assert (h2.workdir, h2.slots) == ("runs", 4)  # the node's own setting wins; '~/' = login dir
    assert h1.env_vars == {"A": "1", "B": "3"} and h2.env_vars == {"A": "1", "B": "2"}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], ": must be a JSON object, got a list"),
        ({}, "node_dict: is required"),
        ({"node_dict": {}}, "node_dict: is empty"),
        (
            {"node_dict": {"h": {"vpc_ip": 3}}},
            'node_dict["h"].vpc_ip: must be a host name or IP address, got integer 3',
        ),
        (
            {"node_dict": {"h": {"port": "22"}}},
            'node_dict["h"].port: must be an integer from 1 to 65535',
        ),
        (
            {"node_dict": {"h": {"port": 70000}}},
            'node_dict["h"].port: must be an integer from 1 to 65535',
        ),
        ({"node_dict": {"bad host": {}}}, "node_dict[\"bad host\"]: 'bad host' is not a host name"),
        ({"node_dict": {"h": []}}, 'node_dict["h"]: must be an object'),
        ({"node_dict": [{"vpc_ip": "x"}]}, "node_dict[0].mgmt_ip: is required"),
        (
            {"node_dict": {"h": {}}, "head_node_dict": {"mgmt_ip": "z"}},
            "head_node_dict.mgmt_ip: 'z' is not one of the nodes (h)",
        ),
        (
            {"node_dict": {"h": {}}, "env_vars": {"RANK": "3"}},
            "env_vars.RANK: RANK belongs to the launcher",
        ),
        (
            {"node_dict": {"h": {}}, "env_vars": {"MASTER_ADDR": "x"}},
            "env_vars.MASTER_ADDR: MASTER_ADDR belongs to the launcher",
        ),
        (
            {"node_dict": {"h": {"env_vars": {"1X": "y"}}}},
            "node_dict[\"h\"].env_vars.1X: '1X' is not a valid environment variable name",
        ),
        (
            {"node_dict": {"h": {}}, "env_vars": {"A": True}},
            "env_vars.A: must be a string, got boolean true",
        ),
        (
            {"node_dict": {"h": {}}, "nproc_per_node": 0},
            "nproc_per_node: must be a whole number ≥ 1, 'gpu' or 'auto'",
        ),
        (
            {"node_dict": {"h": {}}, "host_key_checking": "maybe"},
            "host_key_checking: must be one of yes, accept-new, no",
        ),
        ({"node_dict": {"h": {}}, "password": 5}, "password: must be a string, got integer 5"),
        (
            {"node_dict": {"h": {}}, "env_vars": {"A": "x\ny"}},
            "env_vars.A: contains a NUL or newline character",
        ),
        (
            {"node_dict": {"h": {}}, "env_vars": {"A": 5}},
            'env_vars.A: must be a string, got integer 5: quote the value ("5")',
        ),
    ],
)
def test_problems_name_their_path(data: Any, expected: str) -> None:
    assert any(p.startswith(expected) for p in _problems(data)), _problems(data)


def test_every_problem_is_listed_and_the_message_names_the_file() -> None:
    with pytest.raises(ClusterError) as info:
        Cluster.from_dict({"node_dict": {"a": {"port": 0}, "b": {"vpc_ip": ""}}}, source="cl.json")
    assert len(info.value.problems) == 2
    assert (
        str(info.value)
        == 'cl.json: node_dict["a"].port: must be an integer from 1 to 65535, got integer 0 (+1 more problem)'
    )


def test_unknown_keys_are_warnings_not_errors() -> None:
    c = Cluster.from_dict({"node_dict": {"h": {"rack": 4}}, "sshport": 22, "_note": "x"})
    assert c.warnings == ("unknown key 'sshport' ignored",)
    assert c.head.extra == {"rack": 4}


def test_load_cluster_file_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ClusterError, match=r"nope\.json: cannot read the cluster file"):
        load_cluster(missing)
    broken = tmp_path / "broken.json"
    broken.write_text('{"node_dict": {"h": {},}}')
    with pytest.raises(ClusterError, match=r"broken.json: line 1 column \d+: invalid JSON"):
        load_cluster(broken)
    twice = tmp_path / "twice.json"
    twice.write_text('{"node_dict": {"h": {}, "h": {"port": 2}}}')
    with pytest.raises(ClusterError, match="key 'h' appears twice"):
        load_cluster(twice)
    keyless = tmp_path / "keyless.json"
    keyless.write_text(
        json.dumps({"priv_key_file": str(tmp_path / "id_none"), "node_dict": {"h": {}}})
    )
    with pytest.raises(ClusterError, match=r"priv_key_file: .*id_none: no such file"):
        load_cluster(keyless)
    assert issubclass(ClusterError, UsageError)
    a_list = tmp_path / "list.json"  # JSON, not a hostfile with one host named '[]'
    a_list.write_text("[]\n")
    with pytest.raises(ClusterError, match=r"list\.json: must be a JSON object, got a list"):
        load_cluster(a_list)
    ipv6 = tmp_path / "hostfile"
    ipv6.write_text("[fd00::1] slots=2\n")
    assert load_cluster(ipv6).head.address == "[fd00::1]"


def test_key_path_placeholder_and_tilde(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / f"id_{getpass.getuser()}").write_text("key")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"priv_key_file": "~/.ssh/id_{user-id}", "node_dict": {"h": {}}}))
    assert load_cluster(path).priv_key_file == str(tmp_path / ".ssh" / f"id_{getpass.getuser()}")


def test_hostfile(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_text(
        "# DeepSpeed style\nworker-1 slots=8\n\nworker-2 slots=4  # smaller\nworker-3\n"
    )
    c = load_cluster(path)
    assert [(n.rank, n.address, n.slots) for n in c.nodes] == [
        (0, "worker-1", 8),
        (1, "worker-2", 4),
        (2, "worker-3", None),
    ]
    assert c.source == str(path) and c.username is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("w1 slots=x\n", "line 1: expected 'host slots=N', got 'slots=x'"),
        ("w1 cpus=2\n", "line 1: expected 'host slots=N'"),
        ("w1\nw1\n", "line 2: host 'w1' is listed twice"),
        ("# nothing\n", "no hosts"),
    ],
)
def test_hostfile_problems(text: str, expected: str) -> None:
    with pytest.raises(ClusterError, match=expected):
        parse_hostfile(text, source="hostfile")
