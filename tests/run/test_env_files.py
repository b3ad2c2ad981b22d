"""Values written into env files (docker ``--env-file``, ``env.sh``) carry no control
characters (issue 24): a recipe is refused when it loads, and the env-file writer refuses what
reaches it from the sweep's own environment. Real files; the written file read back with bash."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from aorta.errors import ExitCode
from aorta.launch.node_command import env_script
from aorta.workloads.command import write_env_file


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("\\x1b[2J", "extra_env.X: contains an escape (U+001B)"),
        ("a\\x07b", "extra_env.X: contains a control character (U+0007)"),
        ("a\\nB=2", "extra_env.X: contains a NUL or newline character"),
    ],
)
def test_a_recipe_env_value_with_a_control_character_is_refused(
    tmp_path, run_cli, write, value, said
):
    path = write("r.yaml", f'mode: probe\nmitigation_axis: [none]\nextra_env: {{X: "{value}"}}\n')
    code, _out, err = run_cli(
        "sweep", "run", "--recipe", path, "-o", tmp_path / "out", "--", "true"
    )
    assert code == ExitCode.USAGE, err
    (line,) = err.splitlines()
    assert line.startswith("Error: ") and said in line
    assert not (tmp_path / "out").exists()


def test_a_tab_in_an_env_value_is_fine(tmp_path, run_cli, write):
    path = write("r.yaml", 'mode: probe\nmitigation_axis: [none]\nextra_env: {X: "a\\tb"}\n')
    code, _, err = run_cli("recipe", "validate", path)
    assert code == ExitCode.OK, err


def test_env_file_writer_refuses_an_inherited_newline(tmp_path):
    # The docker env file also carries the sweep's own AORTA_* variables, which no recipe
    # check saw: a newline there would have set INJECTED in the container.
    path = tmp_path / "docker.env"
    with pytest.raises(ValueError, match=r"^AORTA_SLURM_ACCOUNT: contains a NUL or newline"):
        write_env_file(path, {"AORTA_CELL": "base", "AORTA_SLURM_ACCOUNT": "a\nINJECTED=1"})
    assert not path.exists()


def test_env_files_round_trip_through_bash(tmp_path):
    values = {"A": "x y", "B": "it's $(touch INJECTED)", "C": "tab\there"}
    docker_env = tmp_path / "docker.env"
    write_env_file(docker_env, values)
    assert stat.S_IMODE(os.stat(docker_env).st_mode) == 0o600
    assert docker_env.read_text().splitlines() == [f"{k}={v}" for k, v in values.items()]
    sh = tmp_path / "env.sh"
    sh.write_bytes(env_script(values))
    done = subprocess.run(
        ["bash", "-c", f'. {sh} && printf "%s\\n" "$A" "$B" "$C"'],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.stdout.splitlines() == list(values.values())
    assert not (tmp_path / "INJECTED").exists()
