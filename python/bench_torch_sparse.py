"""all_reduce of sparse COO tensors (DDP's sparse embedding gradients) on the "fabcoll" backend against gloo, in the
same run: a table of 100,000 rows, each rank contributing `rows` random rows (duplicates included) of `dim` floats.
Per shape, `--rounds` rounds alternating which backend goes first, 20 calls each on fresh tensors; a round's figure is
the median call, the slowest rank's. Rank 0 prints the medians over rounds, the median of the per-round ratios
gloo / fabcoll and in how many rounds fabcoll was ahead.

    torchrun --nproc-per-node 2 python/bench_torch_sparse.py [--rounds 5]
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

TABLE = 100_000
SHAPES = ((16, 16), (1000, 64), (20_000, 64))


def sparse_rows(gen, rows, dim):
    """A gradient of `rows` random rows of the table (some twice), `dim` values each."""
    idx = torch.randint(0, TABLE, (1, rows), generator=gen)
    return torch.sparse_coo_tensor(idx, torch.randn(rows, dim, generator=gen), (TABLE, dim), check_invariants=True)


def round_time(group, gen, rows, dim):
    """The median time of 20 calls on `group`, the slowest rank's (µs)."""
    dist.barrier(group=group)
    times = []
    for _ in range(20):
        t = sparse_rows(gen, rows, dim)
        start = time.perf_counter()
        dist.all_reduce(t, group=group)
        times.append(time.perf_counter() - start)
    m = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    return float(m) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    dist.init_process_group("fabcoll")
    gloo = dist.new_group(backend="gloo")
    fab = dist.group.WORLD
    me, p = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator().manual_seed(me)
    if me == 0:
        print(f"p = {p}; sparse all_reduce, medians over {a.rounds} rounds of 20 calls")
    for rows, dim in SHAPES:
        ours, theirs = [], []
        for r in range(a.rounds):
            order = [(fab, ours), (gloo, theirs)]
            for group, out in order if r % 2 == 0 else reversed(order):
                out.append(round_time(group, gen, rows, dim))
        if me == 0:
            ratios = [g / f for f, g in zip(ours, theirs)]
            print(f"{rows:>6} rows x {dim:>3}: fabcoll {statistics.median(ours):9.0f} us, gloo "
                  f"{statistics.median(theirs):9.0f} us, gloo/fabcoll {statistics.median(ratios):5.2f} "
                  f"({sum(x > 1 for x in ratios)}/{a.rounds} ahead)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
