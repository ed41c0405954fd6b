"""One rank of the torchrun DDP test: a small MLP trained with DDP for 50 steps on the backend named by the first
argument ("fabcoll" or "gloo"), each rank on its own shard of every batch, from the same seeds whatever the
backend. Every rank checks that all hold the same parameters at the end; rank 0 prints the mean loss over the ranks
of every step as one JSON line: `losses [...]`."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import fabcoll.torch  # noqa: F401: registers the backend

backend = sys.argv[1]
dist.init_process_group(backend)  # torchrun's environment (env://)
me, p = dist.get_rank(), dist.get_world_size()
STEPS, BATCH = 50, 16

torch.manual_seed(1234 + me)  # different per rank: DDP's initial broadcast must align them
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 1))
ddp = DDP(model, bucket_cap_mb=0.01)  # several buckets: allreduces overlap the backward pass
opt = torch.optim.SGD(ddp.parameters(), lr=0.02, momentum=0.9)
data = torch.Generator().manual_seed(99)
losses = []
for _ in range(STEPS):
    x = torch.randn(BATCH * p, 16, generator=data)
    y = (x[:, :4].sum(1, keepdim=True)).sin()
    mine = slice(me * BATCH, (me + 1) * BATCH)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(x[mine]), y[mine])
    loss.backward()
    opt.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)  # on the backend under test too
    losses.append(float(mean) / p)
params = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
everyone = [torch.zeros_like(params) for _ in range(p)]
dist.all_gather(everyone, params)
for r in range(p):
    assert torch.equal(everyone[r], params), f"rank {r}'s parameters differ from rank {me}'s"
dist.destroy_process_group()
if me == 0:
    print("losses", json.dumps(losses), flush=True)
if backend == "gloo":
    # The reference run only: torch's Gloo worker thread can still drop a tensor while the
    # interpreter finalizes, which aborts the process ("terminate called without an active
    # exception" from ProcessGroupGloo::runLoop; seen once in CI after all 50 steps). Our backend
    # goes through the normal exit, so a crash of ours at exit still fails the test.
    os._exit(0)
