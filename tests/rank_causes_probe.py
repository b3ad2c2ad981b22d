"""A probe command for tests/run/test_rank_causes_sweep.py, run by torchrun (gloo, CPU): a
tiny model trained on every rank, and one fault on rank ``PROBE_RANK`` (``PROBE_FAULT``):

- ``cpu_oom``: a real out-of-memory of PyTorch's CPU allocator (``torch.empty`` of 1 PiB →
  ``DefaultCPUAllocator: can't allocate memory``), uncaught: the rank dies with it;
- ``cuda_oom``: there is no GPU here, so the rank raises PyTorch's real
  ``torch.OutOfMemoryError`` with the CUDA caching allocator's message text (as PyTorch 2.x
  words it), uncaught: what a CUDA rank's log shows;
- ``inf``: at step ``PROBE_STEP`` the weights and bias of ``layers.1.proj`` become 3e38, so
  that Linear's output overflows to +inf from finite, non-negative inputs; the gradients
  all-reduced across ranks then carry it to every rank one step later;
- ``none``: nothing.
"""

import os

import torch
import torch.distributed as dist
from torch import nn

CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB "
    "of which 1.20 GiB is free. Process 4242 has 77.94 GiB memory in use. Of the allocated "
    "memory 75.10 GiB is allocated by PyTorch, and 2.11 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.proj(x))


class Net(nn.Module):
    def __init__(self, dim=8, depth=3):
        super().__init__()
        self.layers = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    fault = os.environ.get("PROBE_FAULT", "none")
    culprit = rank == int(os.environ.get("PROBE_RANK", "1"))
    at = int(os.environ.get("PROBE_STEP", "3"))
    torch.manual_seed(0)
    net = Net()
    loss_fn = nn.MSELoss()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    x, y = torch.rand(4, 8), torch.rand(4, 1)
    for step in range(6):
        if culprit and step == at:
            if fault == "cpu_oom":
                torch.empty(1 << 50, dtype=torch.uint8)
            if fault == "cuda_oom":
                raise torch.OutOfMemoryError(CUDA_OOM)
            if fault == "inf":
                with torch.no_grad():
                    net.layers[1].proj.weight.fill_(3e38)
                    net.layers[1].proj.bias.fill_(3e38)
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        for p in net.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4g}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
