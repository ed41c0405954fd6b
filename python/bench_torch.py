"""torch.distributed collectives on the "fabcoll" backend against gloo, in the same run.

    torchrun --nproc-per-node 2 python/bench_torch.py [--ops all_reduce,all_gather_into_tensor,broadcast]
        [--sizes 8,65536,1048576,16777216] [--rounds 7] [--iters 20]

Both backends serve the same job (fabcoll is the default group, gloo a second group over the same ranks). Per size,
each round times `iters` calls on each backend, alternating which goes first, after a barrier; a round's figure is
the median call time (each call: a barrier-free collective of float32, timed on every rank, the slowest rank's time
kept). Sizes are per rank: all_reduce's and broadcast's tensor, all_gather_into_tensor's input (its output is p
times larger), sparse_all_reduce's values (rows of 64 floats), recv_anysource's tensor (each rank's to rank 0,
received from any source); broadcast from rank 0. Rank 0 prints per operation and size the medians over rounds and
the median of the per-round ratios gloo / fabcoll (paired: both measured in the same round), and in how many rounds
fabcoll was ahead. Set FABCOLL_FABRIC=tcp for the network path.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

# This file's folder holds the package's sources (without the built module): import the installed package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import fabcoll.torch  # noqa: E402, F401: registers the backend


def caller(op, t, p):
    """A function running `op` once on tensor `t` in a group."""
    if op == "all_reduce":
        return lambda g: dist.all_reduce(t, group=g)
    if op == "broadcast":
        return lambda g: dist.broadcast(t, src=0, group=g)
    if op == "all_gather_into_tensor":
        out = torch.empty(t.numel() * p, dtype=t.dtype)
        return lambda g: dist.all_gather_into_tensor(out, t, group=g)
    if op == "sparse_all_reduce":
        # DDP's sparse embedding gradients: random rows (some twice) of 64 floats of a 100,000-row table, as many
        # as the size holds; each call reduces a fresh copy (the call replaces its input by the coalesced sum).
        gen = torch.Generator().manual_seed(dist.get_rank())
        rows = max(t.numel() // 64, 1)
        idx = torch.randint(0, 100_000, (1, rows), generator=gen)
        grad = torch.sparse_coo_tensor(idx, torch.randn(rows, 64, generator=gen), (100_000, 64), check_invariants=True)
        return lambda g: dist.all_reduce(grad.clone(), group=g)
    if op == "recv_anysource":
        # A fan-in: rank 0 receives every other rank's tensor from any source (recv without src), in the order they
        # come; the others send theirs to it.
        def fan_in(g):
            if dist.get_rank() == 0:
                for _ in range(p - 1):
                    dist.recv(t, group=g)
            else:
                dist.send(t, dst=0, group=g)
        return fan_in
    raise SystemExit(f"bench_torch: unknown op {op}")


def round_time(call, group, iters):
    """The median time of one call over `iters` calls, the slowest rank's."""
    dist.barrier(group=group)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        call(group)
        times.append(time.perf_counter() - start)
    m = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    return float(m)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="all_reduce",
                    help="all_reduce, all_gather_into_tensor, broadcast, sparse_all_reduce, recv_anysource")
    ap.add_argument("--sizes", default="8,65536,1048576,16777216", help="message sizes in bytes (per rank)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    dist.init_process_group("fabcoll")
    gloo = dist.new_group(backend="gloo")
    fab = dist.group.WORLD
    me, p = dist.get_rank(), dist.get_world_size()
    if me == 0:
        print(f"p = {p}; medians over {a.rounds} rounds of {a.iters} calls each")
        print(f"{'op':>22} {'bytes':>10} {'fabcoll us':>11} {'gloo us':>9} {'gloo/fabcoll':>13} {'ahead':>6}")
    for op in a.ops.split(","):
        for size in (int(s) for s in a.sizes.split(",")):
            call = caller(op, torch.ones(max(size // 4, 1), dtype=torch.float32), p)
            round_time(call, fab, 2)  # warm-up: connections, buffers
            round_time(call, gloo, 2)
            ours, theirs = [], []
            for r in range(a.rounds):
                order = [(fab, ours), (gloo, theirs)]
                for group, out in order if r % 2 == 0 else reversed(order):
                    out.append(round_time(call, group, a.iters))
            if me == 0:
                ratio = statistics.median(g / f for f, g in zip(ours, theirs))
                ahead = sum(f < g for f, g in zip(ours, theirs))
                print(f"{op:>22} {size:>10} {statistics.median(ours) * 1e6:>11.1f} "
                      f"{statistics.median(theirs) * 1e6:>9.1f} {ratio:>13.2f} {ahead:>3}/{a.rounds}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
