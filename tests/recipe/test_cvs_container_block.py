"""CVS's orchestrator-style ``container`` block (#45.7): ``enabled``, ``launch`` and
``runtime: {name, args}`` (CVS's cluster_container.json template, comments and all) mean what
they mean in CVS, instead of 'unknown key' errors."""

from __future__ import annotations

import json

import pytest

from aorta.launch.container import run_argv
from aorta.recipe.cluster import Cluster, ClusterError

NODES = {"orchestrator": "container", "node_dict": {"gpu-1": {"vpc_ip": "10.0.0.1"}, "gpu-2": {}}}


def _block(**over: object) -> dict[str, object]:
    block: dict[str, object] = {
        "_enabled_comment": "Master switch.",
        "enabled": True,
        "_launch_comment": "true = CVS owns the lifecycle.",
        "launch": True,
        "image": "rocm/cvs:latest",
        "name": "cvs_container",
        "runtime": {
            "_name_comment": "docker",
            "name": "docker",
            "args": {
                "network": "host",
                "ipc": "host",
                "privileged": True,
                "volumes": ["/data:/data:ro"],
                "devices": ["/dev/infiniband"],
                "group_add": ["video"],
                "cap_add": ["SYS_PTRACE", "IPC_LOCK"],
                "security_opt": ["seccomp=unconfined"],
                "ulimit": ["memlock=-1"],
            },
        },
    }
    block.update(over)
    return block


def test_the_cvs_template_runs_in_its_container() -> None:
    cluster = Cluster.from_dict(json.loads(json.dumps({**NODES, "container": _block()})))
    c = cluster.container
    assert c is not None
    assert (c.image, c.name, c.lifetime, c.runtime) == (
        "rocm/cvs:latest",
        "cvs_container",
        "persistent",  # launch: true — started if missing, left running, as CVS does
        "docker",
    )
    assert c.privileged and c.mounts == ("/data:/data:ro",) and c.devices == ("/dev/infiniband",)
    argv = run_argv(c, c.container_name("r1", 0), "/w", {"rocm": "1"}, env_file="/w/e")
    for flag in (
        "--privileged",
        "-v/data:/data:ro",
        "--device=/dev/infiniband",
        "--group-add=video",
        "--cap-add=SYS_PTRACE",
        "--cap-add=IPC_LOCK",
        "--security-opt=seccomp=unconfined",
        "--ulimit=memlock=-1",
    ):
        assert flag in argv
    assert not cluster.warnings


def test_launch_false_uses_the_running_container_and_enabled_false_none() -> None:
    assert Cluster.from_dict({**NODES, "container": _block(launch=False)}).container.lifetime == (
        "no_launch"
    )
    native = Cluster.from_dict({**NODES, "orchestrator": "baremetal", "container": _block()})
    assert native.container is None
    off = Cluster.from_dict({"node_dict": NODES["node_dict"], "container": _block(enabled=False)})
    assert off.container is None
    assert any("container.enabled: false" in w for w in off.warnings)


@pytest.mark.parametrize(
    ("runtime", "message"),
    [
        ({"name": "enroot"}, "container.runtime.name: aorta runs containers with docker"),
        ({"args": {"network": "bridge"}}, "container.runtime.args.network: aorta runs every"),
        ({"args": {"volumes": "/a:/a"}}, "container.runtime.args.volumes: must be a list"),
        ({"args": {"shm_size": "8g"}}, "container.runtime.args.shm_size: not a docker argument"),
        ({"args": ["--privileged"]}, "container.runtime.args: must be an object"),
    ],
)
def test_what_aorta_cannot_honour_is_a_located_problem(runtime: dict, message: str) -> None:
    with pytest.raises(ClusterError) as info:
        Cluster.from_dict({**NODES, "container": _block(runtime=runtime)})
    assert message in str(info.value)
