"""The built-in ``training`` workload on one process, without torchrun (its ``min_world_size``
is 1): each trial joins a process group of one at a rendezvous of its own."""

from __future__ import annotations

import pytest
import torch

from aorta import load_run
from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep

RECIPE = """\
workload: training
trials: 2
steps: 2
workload_config: {model_dim: 8, num_layers: 1, batch_size: 4}
cells: [{name: ddp, mitigations: [none]}]
"""


@pytest.mark.slow  # two worker processes, each importing torch (~10 s on two cores)
def test_training_runs_on_one_process_without_torchrun(tmp_path):
    # Every trial failed its setup: "environment variable MASTER_ADDR expected, but not set".
    ds = load_run(sweep(load_recipe_text(RECIPE), output=tmp_path, progress="none").run_dir)
    assert ds.status.values.tolist() == [["ok", "ok"]]
    loss = ds.metrics.sel(metric="final_loss").values
    assert ((loss > 0) & (loss < 10)).all()  # finite: the finite-loss check passed


def test_an_in_process_trial_leaves_the_callers_random_generator_alone(tmp_path):
    # A notebook's torch RNG was reseeded by the trial's model set-up (torch.manual_seed).
    recipe = load_recipe_text(RECIPE.replace("trials: 2", "trials: 1\ntrial_isolation: in_process"))
    torch.manual_seed(1234)
    before = torch.random.get_rng_state()
    ds = load_run(sweep(recipe, output=tmp_path, progress="none").run_dir)
    assert ds.status.values.tolist() == [["ok"]]
    assert torch.equal(torch.random.get_rng_state(), before)
