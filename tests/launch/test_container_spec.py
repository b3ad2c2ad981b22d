"""The ``container:`` block of a cluster file and the docker lines built from it (pure: no
daemon; tests/launch/test_container.py runs them against a real one)."""

from __future__ import annotations

import shlex

import pytest

from aorta.launch.container import ContainerSession, run_argv, ship_aorta
from aorta.recipe.cluster import Cluster, ClusterError, Container, Node

NODES = {"node_dict": {"gpu-1": {}, "gpu-2": {}}}


def _error(block: object) -> str:
    with pytest.raises(ClusterError) as info:
        Cluster.from_dict({**NODES, "container": block})
    return str(info.value)


def test_cvs_key_names_are_read_as_aliases() -> None:
    cluster = Cluster.from_dict(
        {
            **NODES,
            "container": {
                "container_image": "rocm/pytorch:rocm6.2",
                "container_name": "aorta_{rank}",
                "volume_dict": {"/data": "/data", "/home/u": "/home/u"},
                "device_list": ["/dev/infiniband"],
                "env_dict": {"HF_TOKEN": "s3cret"},
                "group_add": ["video"],
            },
        }
    )
    c = cluster.container
    assert c is not None
    assert (c.image, c.name, c.lifetime, c.user) == (
        "rocm/pytorch:rocm6.2",
        "aorta_{rank}",
        "per_run",
        "root",
    )
    assert c.mounts == ("/data:/data", "/home/u:/home/u")
    assert c.devices == ("/dev/infiniband",) and c.groups == ("video",)
    assert c.env == {"HF_TOKEN": "s3cret"}
    assert "s3cret" not in repr(cluster)
    assert c.container_name("r1", 1) == "aorta_1"


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            {"image": "x", "lifetime": "forever"},
            "container.lifetime: must be one of per_run, persistent, no_launch",
        ),
        (
            {"image": "x", "lifetime": "persistent"},
            "container.name: is required with lifetime persistent",
        ),
        ({"image": "x", "name": "a{node}"}, "container.name: 'a{node}': only {rank} and {run_id}"),
        ({"image": "x", "name": "a b"}, "container.name: 'a b' is not a container name"),
        ({"lifetime": "per_run"}, "container.image"),
        ({"image": "x", "env": {"A": "1\n2"}}, "container.env"),
        ({"image": "x", "lifetme": "per_run"}, "container.lifetme"),
        ("rocm/pytorch", "container: must be an object"),
    ],
)
def test_a_bad_block_is_a_located_error(block: object, message: str) -> None:
    assert message in _error(block)


@pytest.mark.parametrize("value", ["baremetal", "BareMetal"])
def test_cvs_orchestrator_baremetal_runs_natively_beside_a_container_block(value: str) -> None:
    # Before: "unknown key 'orchestrator' ignored", and the block's presence ran containers.
    cluster = Cluster.from_dict({**NODES, "orchestrator": value, "container": {"image": "x"}})
    assert cluster.container is None
    assert cluster.warnings == (
        "orchestrator: baremetal: the container block is not used, the nodes run natively "
        "(as in CVS; orchestrator: container runs in it)",
    )
    # (the block is not read at all, as CVS does not: a block aorta would refuse is no error)
    assert Cluster.from_dict({**NODES, "orchestrator": value, "container": {"x": 1}}).warnings


def test_cvs_orchestrator_container_runs_in_the_block_and_needs_one() -> None:
    cluster = Cluster.from_dict({**NODES, "orchestrator": "Container", "container": {"image": "x"}})
    assert cluster.container == Container(image="x") and cluster.warnings == ()
    with pytest.raises(ClusterError) as info:
        Cluster.from_dict({**NODES, "orchestrator": "container"}, source="cluster.json")
    assert str(info.value) == (
        "cluster.json: orchestrator: container needs a container block (the image every node "
        "runs in, as in CVS): add one, or use baremetal"
    )
    with pytest.raises(ClusterError, match="orchestrator: must be baremetal or container"):
        Cluster.from_dict({**NODES, "orchestrator": "kubernetes"})


def test_cli_image_keeps_the_blocks_other_settings() -> None:
    cluster = Cluster.from_dict({**NODES, "container": {"image": "a", "user": "1000"}})
    assert cluster.with_image("b").container == Container(image="b", user="1000")
    assert Cluster.from_dict(NODES).with_image("b").container == Container(image="b")


def test_rocm_node_gets_root_video_render_and_the_devices() -> None:
    argv = run_argv(Container(image="img"), "c0", "/w", {"rocm": "1"}, env_file="/w/e")
    text = shlex.join(argv)
    assert "--user root" in text and "--network host --ipc host" in text
    assert "--group-add=video --group-add=render" in text
    assert "--device=/dev/kfd --device=/dev/dri" in text
    assert "--gpus" not in text and "-v /w:/w" in text
    assert argv[-4:] == ["img", "tail", "-f", "/dev/null"]


def test_nvidia_node_gets_all_gpus_and_a_plain_node_no_device_flags() -> None:
    nvidia = shlex.join(
        run_argv(Container(image="img"), "c0", "/w", {"nvidia": "1"}, env_file="/e")
    )
    plain = shlex.join(run_argv(Container(image="img"), "c0", "/w", {}, env_file="/e"))
    assert "--gpus=all" in nvidia and "--device" not in nvidia
    assert "--gpus" not in plain and "--device" not in plain and "--group-add" not in plain


def test_environment_values_never_reach_argv_or_the_description() -> None:
    spec = Container(image="img", env={"HF_TOKEN": "s3cret"}, run_args=("--shm-size=16g",))
    argv = run_argv(spec, "c0", "/w", {}, env_file="/w/c.env")
    assert "s3cret" not in " ".join(argv) and "--env-file" in argv and "--shm-size=16g" in argv

    class Inner:
        node = Node(rank=1, address="gpu-2")

    session = ContainerSession(Inner(), spec, "r1")  # type: ignore[arg-type]
    text = "\n".join(session.describe())
    assert "s3cret" not in text and "HF_TOKEN" in text and "aorta-r1-1" in text


def test_wrapped_commands_keep_their_quoting() -> None:
    class Inner:
        node = Node(rank=0, address="gpu-1")

    session = ContainerSession(
        Inner(), Container(image="img", runtime="docker -H unix:///x.sock"), "r1"
    )  # type: ignore[arg-type]
    session.workdir = "/home/u/w"
    line = session.wrap("echo 'a b' \"$HOME\"")
    words = shlex.split(line)
    assert words[:7] == ["docker", "-H", "unix:///x.sock", "exec", "-i", "-w", "/home/u/w"]
    assert words[7:10] == ["aorta-r1-0", "sh", "-c"]
    assert words[10].endswith("echo 'a b' \"$HOME\"")
    assert "/home/u/w/.aorta-launch/r1/aorta-src" in words[10]


def test_the_shipped_aorta_carries_its_entry_points() -> None:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(ship_aorta())) as tar:
        names = tar.getnames()
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        text = tar.extractfile(info).read().decode()  # type: ignore[union-attr]
    assert "aorta/launch/container.py" in names and not any("__pycache__" in n for n in names)
    assert "race = aorta.workloads.race:RaceWorkload" in text


def test_the_image_is_checked_for_one_module_per_dependency_of_aorta() -> None:
    from aorta.launch.container import aorta_requirements

    modules = aorta_requirements()
    assert {"yaml", "pydantic", "numpy", "matplotlib"} <= set(modules)  # PyYAML's is yaml
    assert "pylab" not in modules and "aorta" not in modules and "torch" not in modules
