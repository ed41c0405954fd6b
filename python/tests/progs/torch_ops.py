"""One rank of the torch backend test: init_process_group("fabcoll") over env:// (the torchrun environment), then
every supported operation against references computed from every rank's input. Prints the fabric the group chose,
and "torch ok" at the end."""

import os
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

import fabcoll
import fabcoll.torch  # noqa: F401: registers the backend

dist.init_process_group("fabcoll", init_method="env://")
me, p = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "fabcoll", dist.get_backend()
print("fabric", dist.group.WORLD.communicator.fabric, flush=True)
N = 13


def data(rank, n=N, dtype=torch.float32):
    return ((torch.arange(n) * 3 + rank * 5) % 11 + 1).to(dtype)


def check(got, want, what):
    if not torch.equal(got, want):
        raise AssertionError(f"rank {me}: {what}: got {got}, want {want}")


def expect_errors(cases):
    """Each call of ``cases`` (pairs of words and a function) raises an error whose message has the words."""
    for what, f in cases:
        try:
            f()
        except RuntimeError as e:
            if what not in str(e):
                raise AssertionError(f"{what}: {e}") from e
        else:
            raise AssertionError(f"no error for {what}")


everyone = [data(r) for r in range(p)]
R = dist.ReduceOp
for op, want in ((R.SUM, sum(everyone)), (R.MIN, torch.stack(everyone).min(0).values),
                 (R.MAX, torch.stack(everyone).max(0).values), (R.PRODUCT, torch.stack(everyone).prod(0)),
                 (R.AVG, sum(everyone) / p)):
    t = data(me)
    dist.all_reduce(t, op=op)
    if op == R.AVG:
        torch.testing.assert_close(t, want)
    else:
        check(t, want, f"all_reduce {op}")

for dtype in (torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8):
    t = data(me, dtype=dtype)
    dist.all_reduce(t)
    check(t, sum(data(r, dtype=dtype) for r in range(p)), f"all_reduce {dtype}")

work = dist.all_reduce(t := data(me, 1 << 16), async_op=True)
fut = work.get_future()
fut.wait()
check(t, sum(data(r, 1 << 16) for r in range(p)), "async all_reduce")
assert work.is_completed()

for root in range(p):
    t = data(me)
    dist.broadcast(t, src=root)
    check(t, data(root), f"broadcast {root}")

outs = [torch.zeros(N) for _ in range(p)]
dist.all_gather(outs, data(me))
for r in range(p):
    check(outs[r], data(r), "all_gather")
flat = torch.zeros(N * p)
dist.all_gather_into_tensor(flat, data(me))
check(flat, torch.cat(everyone), "all_gather_into_tensor")
flat = torch.zeros(N * p)
flat[me * N:(me + 1) * N] = data(me)
dist.all_gather_into_tensor(flat, flat[me * N:(me + 1) * N])
check(flat, torch.cat(everyone), "all_gather_into_tensor in place (FSDP's)")

out = torch.zeros(N)
dist.reduce_scatter_tensor(out, data(me, N * p))
check(out, sum(data(r, N * p) for r in range(p))[me * N:(me + 1) * N], "reduce_scatter_tensor")
out = torch.zeros(N)
dist.reduce_scatter(out, [data(me * 10 + j) for j in range(p)])
check(out, sum(data(r * 10 + me) for r in range(p)), "reduce_scatter")
out = torch.zeros(me + 1, 2)
dist.reduce_scatter(out, [data(me * 10 + j, 2 * (j + 1)).view(-1, 2) for j in range(p)], op=dist.ReduceOp.AVG)
check(out, sum(data(r * 10 + me, 2 * (me + 1)) for r in range(p)).view(-1, 2) / p, "reduce_scatter of unequal tensors")

out = torch.zeros(N * p)
dist.all_to_all_single(out, torch.cat([data(me * 10 + j) for j in range(p)]))
check(out, torch.cat([data(i * 10 + me) for i in range(p)]), "all_to_all_single")
outs = [torch.zeros(N) for _ in range(p)]
dist.all_to_all(outs, [data(me * 10 + j) for j in range(p)])
for i in range(p):
    check(outs[i], data(i * 10 + me), "all_to_all")
# Unequal splits (alltoallv): rank i sends (i + j) % 3 + 1 rows of 3 to rank j; and lists of unequal tensors.
rows = lambda i, j: (i + j) % 3 + 1  # noqa: E731
block = lambda i, j: data(i * 10 + j, 3 * rows(i, j)).view(-1, 3)  # noqa: E731
out = torch.zeros(sum(rows(i, me) for i in range(p)), 3)
dist.all_to_all_single(out, torch.cat([block(me, j) for j in range(p)]), [rows(i, me) for i in range(p)],
                       [rows(me, j) for j in range(p)])
check(out, torch.cat([block(i, me) for i in range(p)]), "all_to_all_single with splits")
outs = [torch.zeros(rows(i, me), 3, dtype=torch.float64) for i in range(p)]
dist.all_to_all(outs, [block(me, j).double() for j in range(p)])
for i in range(p):
    check(outs[i], block(i, me).double(), "all_to_all of unequal tensors")
outs = [torch.zeros(i + 1, 2) for i in range(p)]
dist.all_gather(outs, data(me, 2 * (me + 1)).view(-1, 2))
for i in range(p):
    check(outs[i], data(i, 2 * (i + 1)).view(-1, 2), "all_gather of unequal tensors (allgatherv)")
# batch_isend_irecv (pipeline parallelism's exchange): a ring both ways at once.
right_in, left_in = torch.zeros(N), torch.zeros(N)
ops = [dist.P2POp(dist.isend, data(me), (me + 1) % p), dist.P2POp(dist.isend, data(me + 50), (me - 1) % p),
       dist.P2POp(dist.irecv, left_in, (me - 1) % p), dist.P2POp(dist.irecv, right_in, (me + 1) % p)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
check(left_in, data((me - 1) % p), "batch_isend_irecv from the left")
check(right_in, data((me + 1) % p + 50), "batch_isend_irecv from the right")
# Non-contiguous tensors (as gloo takes them): a column of a matrix reduced in place, a transposed broadcast, a
# strided receive.
m = torch.zeros(N, 3)
m[:, 1] = data(me)
dist.all_reduce(m[:, 1])
check(m[:, 1], sum(everyone), "all_reduce of a column")
assert (m[:, 0] == 0).all() and (m[:, 2] == 0).all(), m
t = data(me, 6).view(2, 3).t()
dist.broadcast(t, src=p - 1)
check(t, data(p - 1, 6).view(2, 3).t(), "broadcast of a transposed tensor")
got = torch.zeros(2 * N)[::2]
works = [dist.irecv(got, src=(me - 1) % p, tag=5), dist.isend(data(me + 7), dst=(me + 1) % p, tag=5)]
for w in works:
    w.wait()
check(got, data((me - 1) % p + 7), "irecv into a strided tensor")
# recv without a source (torch's recv_anysource): rank 0 takes one message from every other rank, small and large,
# and dist.recv names the sender (a tag per size).
for tag, n in ((9, N), (19, 1 << 16)):
    if me == 0:
        senders = []
        for _ in range(1, p):
            t = torch.zeros(n)
            src = dist.recv(t, tag=tag)
            check(t, data(src + 3, n), f"recv from any source ({n})")
            senders.append(src)
        assert sorted(senders) == list(range(1, p)), senders
    else:
        dist.send(data(me + 3, n), dst=0, tag=tag)
# torch's C++ paths (functional collectives, DTensor over a CPU DeviceMesh) reach the group's CPU backend.
import torch.distributed._functional_collectives as funcol  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import Replicate, Shard, distribute_tensor  # noqa: E402

mesh = init_device_mesh("cpu", (p,))
check(funcol.all_reduce(data(me), "sum", mesh), sum(everyone), "funcol.all_reduce")
check(funcol.reduce_scatter_tensor(data(me, N * p), "sum", 0, mesh),
      sum(data(r, N * p) for r in range(p))[me * N:(me + 1) * N], "funcol.reduce_scatter_tensor")
full = data(0, 4 * p * 3).view(4 * p, 3)
sharded = distribute_tensor(full, mesh, [Shard(0)])
check(sharded.redistribute(mesh, [Replicate()]).to_local(), full, "DTensor Shard(0) -> Replicate (all_gather)")
check((sharded * 2).sum().full_tensor(), full.sum() * 2, "DTensor sum (all_reduce of partial sums)")
# The object collectives (pickles of unequal lengths, padded by torch).
objs = [None] * p
dist.all_gather_object(objs, {"rank": me, "pad": "x" * (100 * me)})
assert [o["rank"] for o in objs] == list(range(p)), objs
lst = [{"from": 0}, "two"] if me == 0 else [None, None]
dist.broadcast_object_list(lst, src=0)
assert lst == [{"from": 0}, "two"], lst
got = [None] * p if me == 0 else None
dist.gather_object(("g", me), got, dst=0)
assert me != 0 or got == [("g", r) for r in range(p)], got
one = [None]
dist.scatter_object_list(one, [("s", r) for r in range(p)] if me == 0 else None, src=0)
assert one == [("s", me)], one
t = data(me)
work = dist.all_reduce(t, async_op=True)
work.wait()
check(work.result()[0], sum(everyone), "Work.result()")

t = data(me)
dist.reduce(t, dst=p - 1)
if me == p - 1:
    check(t, sum(everyone), "reduce")
g = [torch.zeros(N) for _ in range(p)] if me == 0 else None
dist.gather(data(me), g, dst=0)
if me == 0:
    for r in range(p):
        check(g[r], data(r), "gather")
g = torch.zeros(N * p) if me == 1 % p else None
dist.gather_single(data(me), g, dst=1 % p)
if me == 1 % p:
    check(g, torch.cat(everyone), "gather_single")
out = torch.zeros(N)
dist.scatter(out, [data(r + 20) for r in range(p)] if me == 0 else None, src=0)
check(out, data(me + 20), "scatter")
dist.barrier()

# Point to point on the ring: blocking (small) and nonblocking (large), several tags.
right, left = (me + 1) % p, (me - 1) % p
got = torch.zeros(N)
dist.send(data(me), dst=right, tag=1)
dist.recv(got, src=left, tag=1)
check(got, data(left), "send/recv")
big = torch.zeros(1 << 16)
works = [dist.irecv(big, src=left, tag=2), dist.isend(data(me, 1 << 16), dst=right, tag=2)]
for w in works:
    w.wait()
check(big, data(left, 1 << 16), "isend/irecv")
dist.barrier()

# all_gather_coalesced (deprecated in torch, still in gloo): output_lists[r][i] is rank r's input i.
outs = [[torch.zeros(3), torch.zeros(2, 2), torch.zeros(0)] for _ in range(p)]
with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    dist.all_gather_coalesced(outs, [data(me, 3), data(me + 1, 4).view(2, 2), torch.zeros(0)])
for r in range(p):
    check(outs[r][0], data(r, 3), "all_gather_coalesced, first input")
    check(outs[r][1], data(r + 1, 4).view(2, 2), "all_gather_coalesced, second input")

# Sparse COO all_reduce (gloo's semantics: SUM, the input replaced by the coalesced sum): uneven entry counts, a rank
# with none, duplicate indices (an uncoalesced input), values with dense dimensions; AVG; nonblocking.
def sparse_of(rank, shape, dense=()):
    n = (rank * 3) % 5  # rank 0 has no entries
    idx = torch.tensor([[(rank + 2 * k) % shape[d] for k in range(n)] for d in range(len(shape))], dtype=torch.int64)
    if n:
        idx[:, -1] = idx[:, 0]  # a duplicate entry
    val = (torch.arange(n * max(1, torch.Size(dense).numel()), dtype=torch.float64) + rank).view(n, *dense)
    return torch.sparse_coo_tensor(idx.view(len(shape), n), val, (*shape, *dense), check_invariants=True)


for shape, dense in (((7,), ()), ((5, 6), ()), ((9,), (2, 3))):
    want = sum(sparse_of(r, shape, dense).to_dense() for r in range(p))
    t = sparse_of(me, shape, dense)
    dist.all_reduce(t)
    assert t.is_sparse and t.is_coalesced(), t
    check(t.to_dense(), want, f"sparse all_reduce {shape} {dense}")
    t = sparse_of(me, shape, dense)
    dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True).wait()
    check(t.to_dense(), want / p, f"sparse all_reduce AVG {shape} {dense}")
t = sparse_of(me, (7,))
fut = dist.all_reduce(t, async_op=True).get_future()
check(fut.wait()[0].to_dense(), sum(sparse_of(r, (7,)).to_dense() for r in range(p)), "sparse all_reduce future")
expect_errors((("SUM and AVG only", lambda: dist.all_reduce(sparse_of(me, (7,)), op=dist.ReduceOp.MAX)),
               ("differs from rank 0", lambda: dist.all_reduce(sparse_of(me, (7 + (me == p - 1),)))),
               ("fabcoll moves dense CPU tensors", lambda: dist.broadcast(sparse_of(me, (7,)), src=0))))
t = sparse_of(me, (7,))
dist.all_reduce(t)  # the group goes on after the refused calls
check(t.to_dense(), sum(sparse_of(r, (7,)).to_dense() for r in range(p)), "sparse all_reduce after errors")
dist.barrier()

# Unsupported cases raise a clear error.
expect_errors((("split_sizes", lambda: dist.all_to_all_single(torch.zeros(p + 1), torch.zeros(p + 1),
                                                               [1] * p, [1] * p)),
               ("moves CPU tensors only", lambda: dist.broadcast(torch.zeros(4, device="meta"), src=0)),
               ("does not reduce or move", lambda: dist.broadcast(torch.zeros(4, dtype=torch.float8_e5m2), src=0)),
               ("allreduce", lambda: dist.all_reduce(torch.zeros(4), op=dist.ReduceOp.BAND)),
               ("PREMUL_SUM is not supported", lambda: dist.all_reduce(torch.zeros(4),
                                                                       op=dist._make_nccl_premul_sum(0.5))),
               ("non-empty tensor", lambda: dist.recv(torch.zeros(0)))))
dist.barrier()

# Subgroups whose ranks are not contiguous (every rank creates both; each joins its own).
evens, odds = dist.new_group(list(range(0, p, 2))), dist.new_group(list(range(1, p, 2)))
mine = list(range(me % 2, p, 2))
t = data(me)
dist.all_reduce(t, group=evens if me % 2 == 0 else odds)
check(t, sum(everyone[r] for r in mine), "all_reduce on a subgroup")
dist.destroy_process_group(evens if me % 2 == 0 else odds)

# split_group: communicators split off the parent's (no store rendezvous), ranks in the given order, non-members
# getting no group; a split of a split; then freed.
halves = dist.split_group(split_ranks=[list(range(0, p, 2)), list(range(1, p, 2))])
assert halves.getBackendName() == "fabcoll" and halves.size() == len(mine), halves
assert dist.get_rank(halves) == mine.index(me) and dist.get_process_group_ranks(halves) == mine
t = data(me)
dist.all_reduce(t, group=halves)
check(t, sum(everyone[r] for r in mine), "all_reduce on a split group")
backwards = dist.split_group(split_ranks=[[p - 1, 0]])  # ranks 1 … p-2 take part but join none
if me in (0, p - 1):
    assert dist.get_rank(backwards) == (me == 0), dist.get_rank(backwards)
    t = torch.tensor([float(me)])
    dist.broadcast(t, group_src=0, group=backwards)  # its rank 0 is global rank p - 1
    check(t, torch.tensor([float(p - 1)]), "broadcast from a split group's first rank")
else:
    assert backwards == dist.GroupMember.NON_GROUP_MEMBER, backwards
inner = dist.split_group(halves, split_ranks=[[0]] if len(mine) == 1 else [[1, 0]])
if inner != dist.GroupMember.NON_GROUP_MEMBER:
    t = data(me)
    dist.all_reduce(t, group=inner)
    check(t, sum(everyone[r] for r in mine[:2]), "all_reduce on a split of a split")
for g in (inner, backwards, halves):
    if g != dist.GroupMember.NON_GROUP_MEMBER:
        dist.destroy_process_group(g)
dist.barrier()

# A group created again on the store of an earlier one, as torchrun's agent store (or a store the program keeps)
# is reused when a program destroys its group and initialises again: the earlier group's keys are still there.
if me == 0:
    kept = dist.TCPStore("127.0.0.1", 0, p, True, wait_for_workers=False)
port = [kept.port if me == 0 else None]
dist.broadcast_object_list(port, src=0)
if me != 0:
    kept = dist.TCPStore("127.0.0.1", port[0], p, False)
dist.destroy_process_group()
held = []  # this process's threads and open files after each group is destroyed: the same every time
for again in range(3):
    dist.init_process_group("fabcoll", store=kept, rank=me, world_size=p, timeout=timedelta(seconds=30))
    t = data(me)
    dist.all_reduce(t)
    check(t, sum(everyone), f"all_reduce in group {again} on one store")
    dist.destroy_process_group()
    held.append((len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))))
assert held[0] == held[-1], f"rank {me}: (threads, open files) after each destroyed group: {held}"
print("torch ok", flush=True)
