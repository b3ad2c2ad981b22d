"""The numerics locator (aorta.run.numerics, frshim/aorta_numerics.py) on real torch models:
in process, and in a fresh Python process armed only through its environment (the path a
probe command's torchrun ranks take)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from aorta.run import numerics


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.proj(x))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block(), nn.Linear(4, 1))


def _steps(
    model: nn.Module, n: int, *, blow_at: int | None = None, x: torch.Tensor | None = None
) -> None:
    x = torch.rand(2, 4) if x is None else x
    loss_fn = nn.MSELoss()
    for step in range(n):
        if step == blow_at:
            with torch.no_grad():
                model[1].proj.weight.fill_(3e38)
                model[1].proj.bias.fill_(3e38)
        loss_fn(model(x), torch.zeros(2, 1))  # a loss module at depth 0 shares the step


def test_the_producing_layer_and_its_step(tmp_path):
    with numerics.armed(tmp_path / "n", rank=3):
        _steps(_model(), 6, blow_at=4)
    [found] = numerics.collect(tmp_path / "n")
    assert (found.rank, found.step, found.module, found.cls) == (3, 4, "1.proj", "Linear")
    assert found.kind == "inf" and found.inputs_finite
    assert not (tmp_path / "n").exists()  # collected and removed


def test_a_layer_fed_nan_says_its_inputs_were_not_finite(tmp_path):
    x = torch.rand(2, 4)
    x[0, 0] = float("nan")
    with numerics.armed(tmp_path / "n", rank=0):
        _steps(_model(), 2, x=x)
    [found] = numerics.collect(tmp_path / "n")
    assert (found.step, found.module, found.kind, found.inputs_finite) == (
        0,
        "0.proj",
        "nan",
        False,
    )


def test_a_finite_model_finds_nothing_and_the_hooks_go(tmp_path):
    with numerics.armed(tmp_path / "n", rank=0):
        _steps(_model(), 3)
    assert numerics.collect(tmp_path / "n") == []
    from torch.nn.modules import module as nn_module

    assert not nn_module._global_forward_hooks and not nn_module._global_forward_pre_hooks


SCRIPT = textwrap.dedent(
    """
    import torch
    from torch import nn
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.rand(3, 4)
    for step in range(5):
        if step == 2:
            with torch.no_grad():
                net[2].weight.fill_(float("nan"))
        net(x)
    print("done")
    """
)


@pytest.mark.slow  # a fresh Python process imports torch
@pytest.mark.parametrize("with_listener", [False, True])
def test_a_fresh_process_is_armed_by_its_environment(tmp_path, with_listener):
    folder = tmp_path / "n"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RANK")}
    env |= numerics.arming_env(folder, env)
    env["RANK"] = "5"
    if with_listener:  # the flight recorder's listener armed too (forensics on): both load
        env |= {"AORTA_FR_LISTEN": "t0", "AORTA_FR_DIR": str(tmp_path)}
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and "done" in out.stdout, out.stderr
    [path] = folder.glob("nonfinite.5.*.json")
    found = json.loads(path.read_text())
    assert (found["step"], found["module"], found["cls"], found["kind"]) == (
        2,
        "2",
        "Linear",
        "nan",
    )
    assert found["inputs_finite"] is True


def test_arming_puts_the_shim_first_once(tmp_path):
    env = numerics.arming_env(tmp_path / "n", {"PYTHONPATH": "/a"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(numerics.HOOK_FILE.parent), "/a"]
    again = numerics.arming_env(tmp_path / "n", env)
    assert "PYTHONPATH" not in again and Path(again["AORTA_NUMERICS_DIR"]).is_dir()


@pytest.mark.slow  # a sweep
def test_check_numerics_flag_arms_an_in_process_trial(tmp_path):
    from aorta.cli import main
    from aorta.errors import ExitCode
    from tests.processes import only_run_dir

    argv = ["sweep", "run", "--workload", "tests.numerics_fault:InfAt", "--mitigation-axis"]
    argv += ["none", "--check-numerics", "-o", str(tmp_path / "out")]
    assert main(argv) == ExitCode.OK
    run = only_run_dir(tmp_path / "out")
    assert "check_numerics: true" in (run / "recipe.resolved.yaml").read_text()
    [record] = list(run.glob("cells/*/trial_0000.json"))
    [found] = json.loads(record.read_text())["numerics"]
    assert (found["step"], found["module"], found["cls"], found["kind"]) == (
        2,
        "layers.0",
        "Linear",
        "inf",
    )
    assert (
        "first non-finite output at step 2 in `layers.0` (Linear)"
        in (run / "matrix.md").read_text()
    )
    from torch.nn.modules import module as nn_module

    assert not nn_module._global_forward_hooks  # the trial's hooks left with it
