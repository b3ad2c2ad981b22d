"""A single-rank workload for the numerics tests: a small model trained in the trial's own
process (in-process isolation by default); at step ``at`` the weights and bias of ``layers.0``
become 3e38, so that Linear overflows to +inf from its finite inputs in [0, 1)."""

from __future__ import annotations

from aorta.run.workload import Workload, WorkloadResult


class InfAt(Workload):
    name = "inf_at"
    default_isolation = "in_process"
    config_keys = frozenset({"at"})
    default_steps = 5

    def run(self) -> WorkloadResult:
        import torch
        from torch import nn

        torch.manual_seed(0)
        model = nn.Sequential()
        model.add_module("layers", nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.ReLU()))
        at = int(self.config.get("at", 2))
        x = torch.rand(2, 4)
        for step in range(self.steps):
            if step == at:
                with torch.no_grad():
                    model.layers[0].weight.fill_(3e38)
                    model.layers[0].bias.fill_(3e38)
            model(x)
        return WorkloadResult(passed=True, step_times_ms=[1.0] * self.steps)
