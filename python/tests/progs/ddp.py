"""One rank of the DDP test: the same small model trained for a few steps with DDP twice, once over the "fabcoll"
backend and once over gloo (a second group of the same job), each rank on its own shard of every batch. The
parameters must stay identical across ranks and match gloo's run. Prints "ddp ok" at the end."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import fabcoll.torch  # noqa: F401: registers the backend

dist.init_process_group("fabcoll", init_method="env://")
me, p = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
STEPS, BATCH = 8, 16


def train(group):
    torch.manual_seed(1234 + me)  # different per rank: DDP's initial broadcast must align them
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(99)
    for _ in range(STEPS):
        x = torch.randn(BATCH * p, 10, generator=data)
        y = x.sum(1, keepdim=True).sin()
        mine = slice(me * BATCH, (me + 1) * BATCH)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x[mine]), y[mine]).backward()
        opt.step()
    return torch.cat([q.detach().reshape(-1) for q in model.parameters()])


ours = train(None)  # the default group: fabcoll
theirs = train(gloo)
everyone = [torch.zeros_like(ours) for _ in range(p)]
dist.all_gather(everyone, ours, group=gloo)
for r in range(p):
    assert torch.equal(everyone[r], ours), f"rank {r}'s parameters differ from rank {me}'s"
torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
dist.destroy_process_group()
print("ddp ok", float((ours - theirs).abs().max()), flush=True)
