"""One rank of the re-join test: the job joined again on the store rank 0 serves (the conftest's FABCOLL_*
environment, as under torchrun or Slurm): a second communicator beside the first (rank 0's store server is shared,
not bound twice), a third once the second is freed, then the first freed before the third's last call, and a
fourth after every communicator is freed (rank 0 last, so the others reach its old server first). Each sums its
ranks. Prints "rejoin ok" at the end."""

import time

import numpy as np

import fabcoll


def sums(comm, what):
    x = np.full(1 << 16, comm.rank + 1.0, dtype=np.float64)
    comm.allreduce(x)
    want = comm.size * (comm.size + 1) / 2
    assert (x == want).all(), f"{what}: rank {comm.rank} got {x[:2]}, want {want}"


first = fabcoll.Communicator.from_env()
second = fabcoll.Communicator.from_env()
sums(second, "second beside the first")
sums(first, "first beside the second")
second.barrier()
second.free()
third = fabcoll.Communicator.from_env()
sums(third, "third")
first.barrier()
first.free()
sums(third, "third once the first is freed")
# The others join a fourth time while rank 0 still holds its last communicator, and with it the store's server,
# which then stops under their join: they join again on the server rank 0 starts for the fourth.
third.barrier()
if third.rank == 0:
    time.sleep(0.5)
third.free()
fourth = fabcoll.Communicator.from_env()
sums(fourth, "fourth, after every communicator was freed")
fourth.free()
print("rejoin ok", flush=True)
