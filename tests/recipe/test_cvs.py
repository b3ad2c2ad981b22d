"""A CVS Aorta config's ``multi_node:`` block read as launch options (aorta/recipe/cvs.py)."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.launch import Cluster, run_command
from aorta.recipe.cvs import CvsConfigError, cvs_job, load_cvs_config, probe_recipe
from aorta.recipe.launch_spec import sweep_spec

#: The block of CVS's own sample config (cvs/input/config_file/aorta/aorta_benchmark.yaml).
CVS_YAML = """\
aorta_path: /home/{user-id}/aorta
container_mount_path: /mnt
base_config: config/distributed.yaml
gpus_per_node: 8
timeout_seconds: 5400
skip_rccl_build: false
training_overrides:
  training.max_steps: 50
  profiling.enabled: true
docker:
  image: rocm/pytorch:latest
  container_name: aorta-benchmark
multi_node:
  master_launch_mode: auto
  train_script: train.py
  extra_torchrun_args: ["--master_port", "29600"]
  extra_train_args: ["--seed", "7"]
  extra_env: {NCCL_SOCKET_IFNAME: ens51, NCCL_MAX_NCHANNELS: 112}
  collect_traces: true
"""


def _errors(data: Any) -> list[str]:
    with pytest.raises(CvsConfigError) as info:
        cvs_job(data)
    return [str(p) for p in info.value.problems]


def test_each_field_maps_onto_a_launch_option(tmp_path: Path) -> None:
    path = tmp_path / "aorta_benchmark.yaml"
    path.write_text(CVS_YAML)
    job = load_cvs_config(path, python="/opt/venv/bin/python", user="ops")
    root = "/home/ops/aorta"  # CVS's {user-id} filled in
    assert job.command == (
        "/opt/venv/bin/python",
        f"{root}/train.py",
        "--config",
        f"{root}/config/distributed.yaml",
        "--seed",
        "7",
    )
    assert job.overrides == ("training.max_steps=50", "profiling.enabled=True")
    assert (job.nproc_per_node, job.master_port, job.master_addr) == (8, 29600, None)
    assert job.run_timeout == 5400.0
    assert job.env == {"NCCL_SOCKET_IFNAME": "ens51", "NCCL_MAX_NCHANNELS": "112"}
    # The keys aorta does not read are named, not silently dropped.
    assert job.warnings == (
        "container_mount_path: not read by aorta launch (ignored)",
        "skip_rccl_build: not read by aorta launch (ignored)",
        "docker: not read by aorta launch (ignored): aorta runs in a container from the "
        "cluster file's container: block (CVS's key names accepted there) or --container IMAGE",
    )


def test_defaults_are_cvs_defaults_and_the_block_may_be_missing() -> None:
    job = cvs_job({"aorta_path": "/a"})
    assert job.command == ("python3", "/a/train.py", "--config", "/a/config/distributed.yaml")
    assert (job.nproc_per_node, job.master_port, job.run_timeout, job.overrides) == (
        None,
        None,
        None,
        (),
    )
    # 0 and "" are CVS's "choose for me".
    job = cvs_job({"gpus_per_node": 4, "multi_node": {"nproc_per_node": 0, "master_port": 0}})
    assert (job.nproc_per_node, job.master_port) == (4, None)
    assert cvs_job({"multi_node": {"master_addr": ""}}).master_addr is None


def test_the_issues_fields_are_accepted_inside_the_block_too() -> None:
    job = cvs_job({"multi_node": {"base_config": "c.yaml", "timeout_seconds": 60}})
    assert job.command[-2:] == ("--config", "c.yaml") and job.run_timeout == 60.0
    errors = _errors({"timeout_seconds": 1, "multi_node": {"timeout_seconds": 2}})
    assert errors == [
        "multi_node.timeout_seconds: is also given at the top level (timeout_seconds)"
    ]


def test_torchrun_args_in_both_spellings_map_onto_the_launchers_options() -> None:
    args = ["--nproc_per_node=2", "--master-addr", "10.1.0.1", "--master_port=1234"]
    job = cvs_job({"multi_node": {"extra_torchrun_args": args}})
    assert (job.nproc_per_node, job.master_addr, job.master_port) == (2, "10.1.0.1", 1234)


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            {"extra_torchrun_args": ["--nproc_per_node=2", "--log_dir=/tmp/l"]},
            "multi_node.extra_torchrun_args[1]: '--log_dir=/tmp/l' is not a torchrun option "
            "aorta's launcher can pass on (it honours --nproc_per_node, --master_addr, --master_port)",
        ),
        (
            {"extra_torchrun_args": ["--nnodes=4"]},
            "multi_node.extra_torchrun_args[0]: '--nnodes=4' is set by aorta from the cluster file",
        ),
        (
            {"nproc_per_node": 8, "extra_torchrun_args": ["--nproc-per-node", "4"]},
            "multi_node.extra_torchrun_args[0]: --nproc-per-node=4 contradicts "
            "multi_node.nproc_per_node (8)",
        ),
        ({"extra_torchrun_args": ["--master_port"]}, "[0]: --master_port needs a value"),
        ({"extra_torchrun_args": ["--master_port=x"]}, "[0]: --master_port: must be a whole"),
        (
            {"trainscript": "t.py"},
            "multi_node.trainscript: unknown field (known: master_launch_mode",
        ),
        ({"master_launch_mode": "mpi"}, "multi_node.master_launch_mode: must be auto or torchrun"),
        ({"master_launch_mode": "script"}, "'script' (CVS's experiment_script path) is not"),
        ({"extra_train_args": ["--ov", "a=1"]}, "extra_train_args[0]: '--ov' would split"),
        ({"extra_train_args": ["--"]}, "extra_train_args[0]: '--' would split"),
        ({"extra_train_args": "--seed 1"}, "extra_train_args: must be a list of strings"),
        ({"extra_env": {"RANK": "1"}}, "multi_node.extra_env.RANK: "),
        ({"extra_env": {"A": True}}, "multi_node.extra_env.A: must be a string or number"),
        ({"collect_traces": "yes"}, "multi_node.collect_traces: must be true or false"),
        ({"nproc_per_node": -1}, "multi_node.nproc_per_node: must be a whole number from 0"),
        ({"train_script": ""}, "multi_node.train_script: must be a non-empty string"),
    ],
)
def test_what_does_not_map_is_a_located_error(block: dict[str, Any], expected: str) -> None:
    errors = _errors({"multi_node": block})
    assert len(errors) == 1 and expected in errors[0], errors


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"training_overrides": {"-x": 1}}, "training_overrides.-x: the key must be"),
        ({"training_overrides": {"a": [1]}}, "training_overrides.a: must be a string, number"),
        ({"training_overrides": ["a=1"]}, "training_overrides: must be an object"),
        ({"timeout_seconds": 0}, "timeout_seconds: must be a number of seconds > 0"),
        ({"aorta_path": "aorta"}, "aorta_path: must be the absolute path"),
        ({"multi_node": [1]}, "multi_node: must be an object, got a list"),
        ({"aorta_path": "{paths.shared_fs}/aorta"}, "aorta_path: {paths.shared_fs}: fill it in"),
        ({"base_config": "<changeme>.yaml"}, "base_config: <changeme>: fill it in"),
        ({"multi_node": {"train_script": "a\nb.py"}}, "multi_node.train_script: contains"),
    ],
)
def test_top_level_fields_that_do_not_map_are_located_errors(data: Any, expected: str) -> None:
    errors = _errors(data)
    assert len(errors) == 1 and expected in errors[0], errors


def test_every_problem_is_listed_and_a_bad_file_is_named(tmp_path: Path) -> None:
    errors = _errors({"multi_node": {"a": 1, "b": 2, "collect_traces": 3}})
    assert [e.split(":")[0] for e in errors] == [
        "multi_node.a",
        "multi_node.b",
        "multi_node.collect_traces",
    ]
    path = tmp_path / "c.yaml"
    path.write_text("multi_node:\n  train_script: a\n  train_script: b\n")
    with pytest.raises(CvsConfigError, match=r"c\.yaml: .*train_script"):
        load_cvs_config(path)
    path.write_text(json.dumps({"multi_node": {"master_port": "29500"}}))  # CVS's JSON variant
    with pytest.raises(CvsConfigError, match=r"c\.json|multi_node\.master_port: must be a whole"):
        load_cvs_config(path)
    with pytest.raises(CvsConfigError, match="cannot read the CVS config"):
        load_cvs_config(tmp_path / "missing.yaml")


# -- the single --override group invariant (CVS's 4th bug), end to end -------------------------

_KEY = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,12}", fullmatch=True)
_VALUE = st.one_of(
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=12),
)
_ARG = st.one_of(
    st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=8),
    st.builds(lambda s: f"--{s}", st.text("abdeiorv_-=", max_size=8)),
)


@settings(deadline=None, max_examples=150)
@given(
    overrides=st.dictionaries(_KEY, _VALUE, max_size=6),
    train_args=st.lists(_ARG, max_size=5),
)
def test_every_override_reaches_train_py_through_one_group(
    overrides: dict[str, Any], train_args: list[str]
) -> None:
    data = {"training_overrides": overrides, "multi_node": {"extra_train_args": train_args}}
    try:
        job = cvs_job(data)
    except CvsConfigError as exc:  # only an argument that would split the group is refused
        for problem in exc.problems:
            assert problem.path.startswith("multi_node.extra_train_args["), problem
            assert "would split the override group" in problem.message
        return
    spec = sweep_spec(
        "r.yaml", command=job.command, overrides=job.overrides, recipe_text=probe_recipe()
    )
    cluster = Cluster.from_dict({"node_dict": {"10.0.0.1": {}, "10.0.0.2": {}}})
    node = cluster.nodes[1]
    cmd = run_command(
        cluster, node, spec, run_id="r", node_dir="/w/n", master_addr="10.0.0.1", master_port=1
    )
    # What the node's shell hands the trial: the argv after the sweep's '--', through the quoting.
    sent = shlex.split(shlex.join(cmd.argv))
    train = sent[sent.index("--") + 1 :]
    assert train.count("--override") == (1 if overrides else 0)
    # aorta's train.py: argparse, --override nargs="*" (abbreviations allowed, as by default).
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    parser.add_argument("--override", nargs="*", default=[])
    parsed, _ = parser.parse_known_args(train[2:])
    assert parsed.config == "config/distributed.yaml"
    got = dict(token.split("=", 1) for token in parsed.override)
    assert got == {k: str(v) for k, v in overrides.items()}
