"""One rank of the FSDP test: a small MLP sharded with FSDP2 (`fully_shard` over a CPU DeviceMesh) trained for 10
steps on the backend named by the first argument ("fabcoll" or "gloo"), each rank on its own shard of every batch.
FSDP gathers the parameters in place (`all_gather_into_tensor` into the tensor that holds this rank's shard) and
reduce-scatters the gradients; the DeviceMesh finds its group by name. Rank 0 prints the mean loss over the ranks of
every step as one JSON line: `losses [...]`."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import fabcoll.torch  # noqa: F401: registers the backend

dist.init_process_group(sys.argv[1], init_method="env://")
me, p = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (p,))
torch.manual_seed(1234)  # the same initial model on every rank (FSDP shards it)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.Generator().manual_seed(99)
losses = []
for _ in range(10):
    x = torch.randn(8 * p, 16, generator=data)
    y = x[:, :4].sum(1, keepdim=True).sin()
    mine = slice(8 * me, 8 * (me + 1))
    loss = ((model(x[mine]) - y[mine]) ** 2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    losses.append(float(mean) / p)
if me == 0:
    print("losses " + json.dumps(losses), flush=True)
dist.destroy_process_group()
if sys.argv[1] == "gloo":
    # gloo's worker threads can drop their last tensor while the interpreter finalizes, which aborts the process
    # ("terminate called without an active exception" in ProcessGroupGloo::runLoop, 2 of 8 runs here): leave
    # without finalizing.
    sys.stdout.flush()
    os._exit(0)
