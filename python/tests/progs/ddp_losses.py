"""One rank of the torchrun DDP test: a small MLP trained with DDP for 50 steps on the backend named by the first
argument ("fabcoll" or "gloo"), each rank on its own shard of every batch, from the same seeds whatever the
backend. With a second argument "sparse" the MLP also takes the sum of a few rows of an embedding table with sparse
gradients (`nn.EmbeddingBag(sparse=True)`, a recommendation model's layer): DDP then all_reduces those gradients as
sparse tensors, beside the dense buckets. Every rank checks that all hold the same parameters at the end; rank 0
prints the mean loss over the ranks of every step as one JSON line: `losses [...]`."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import fabcoll.torch  # noqa: F401: registers the backend

backend = sys.argv[1]
sparse = sys.argv[2:] == ["sparse"]
dist.init_process_group(backend)  # torchrun's environment (env://)
me, p = dist.get_rank(), dist.get_world_size()
STEPS, BATCH = 50, 16

torch.manual_seed(1234 + me)  # different per rank: DDP's initial broadcast must align them


def rows(x):
    """The table rows a sample looks up: three, picked by its first features (a few rows of the table per step)."""
    return (x[:, :3].abs() * 40).long() % 100


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.EmbeddingBag(100, 16, mode="sum", sparse=True) if sparse else None
        if sparse:
            torch.nn.init.normal_(self.table.weight, std=0.01)  # small rows: the dense features still tell
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                       torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def forward(self, x):
        if self.table is not None:
            x = x + self.table(rows(x))
        return self.mlp(x)


model = Model()
ddp = DDP(model, bucket_cap_mb=0.01)  # several buckets: allreduces overlap the backward pass
opt = torch.optim.SGD(model.mlp.parameters(), lr=0.02, momentum=0.9)
# SGD's momentum takes no sparse gradients: the table learns by plain SGD.
table_opt = torch.optim.SGD(model.table.parameters(), lr=0.1) if sparse else None
data = torch.Generator().manual_seed(99)
losses = []
for _ in range(STEPS):
    x = torch.randn(BATCH * p, 16, generator=data)
    y = (x[:, :4].sum(1, keepdim=True)).sin()
    if sparse:
        y = y + 0.2 * ((rows(x) % 5).float() - 2).sum(1, keepdim=True)  # a part only the table's rows can learn
    mine = slice(me * BATCH, (me + 1) * BATCH)
    opt.zero_grad()
    if table_opt is not None:
        table_opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(x[mine]), y[mine])
    loss.backward()
    opt.step()
    if table_opt is not None:
        table_opt.step()
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
