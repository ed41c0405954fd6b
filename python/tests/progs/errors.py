"""One rank of the error test: every bad argument raises fabcoll.Error (a RuntimeError) with a clear message and
leaves the communicator usable. Prints "errors ok" at the end."""

import numpy as np

import fabcoll

comm = fabcoll.Communicator.from_env()
me, p = comm.rank, comm.size
assert issubclass(fabcoll.Error, RuntimeError)


def expect(fragment, f, *args, **kw):
    try:
        f(*args, **kw)
    except fabcoll.Error as e:
        if fragment not in str(e):
            raise AssertionError(f"message {str(e)!r} lacks {fragment!r}") from e
        return
    raise AssertionError(f"no error for {fragment!r}")


x = np.zeros(8, dtype=np.float32)
expect("not contiguous", comm.allreduce, np.zeros((4, 4), dtype=np.float32)[:, 1])
ro = np.zeros(8, dtype=np.float32)
ro.flags.writeable = False
expect("read-only", comm.allreduce, ro)
expect("read-only", comm.bcast, b"abcd")
expect("no datatype", comm.allreduce, np.zeros(4, dtype=np.complex256))
expect("not ordered", comm.allreduce, np.zeros(4, dtype=np.complex64), "max")
expect("bools, which reduce by land", comm.allreduce, np.zeros(4, dtype=bool))
expect("holds complex64 but", comm.allreduce, np.zeros(4, dtype=np.complex64),
       out=np.zeros(8, dtype=np.float32))
expect("unknown op", comm.allreduce, x, "median")
expect("op must be a name", comm.allreduce, x, 3)
expect("unknown dtype", comm.allreduce, x, dtype="float128")
expect("not a whole number", comm.allreduce, np.zeros(3, dtype=np.uint8), dtype="float32")
expect("root 7 out of range", comm.bcast, x, 7)
expect("holds float32 but", comm.allreduce, x, out=np.zeros(8, dtype=np.float64))
expect("overlap", comm.allreduce, x, out=x)
expect("expected", comm.allreduce, x, out=np.zeros(7, dtype=np.float32))
expect("expected", comm.allgather, x, np.zeros(8, dtype=np.float32))
expect("send buffer has", comm.reduce_scatter, np.zeros(8 * p + 1, dtype=np.float32), x)
expect("is not a contiguous buffer", comm.allreduce, [1.0, 2.0])
expect(f"{2 * p + 2} objects for {p} ranks", comm.alltoall_object, [1, 2] * (p + 1))
expect("is not a contiguous buffer", comm.iallreduce, "text")
expect("entries", comm.allgatherv, x, np.zeros(8 * p, dtype=np.float32), [8] * (p + 1))
expect("alltoallv", comm.alltoallv, x, [8] * p, np.zeros(8, dtype=np.float32), [8] * p)
expect("allgatherv needs recv_counts", comm._c._call, "allgatherv", x, np.zeros(8 * p, dtype=np.float32))
expect("allgather takes no recv_counts", comm._c._call, "allgather", x, np.zeros(8 * p, dtype=np.float32),
       recv_counts=[8] * p)
expect("takes no recv_displs", comm._c._call, "reduce_scatterv", np.zeros(8 * p, dtype=np.float32), x,
       recv_counts=[8] * p, recv_displs=[0] * p)
# Bitwise ops on floats are refused by the library, with its message.
expect("allreduce", comm.allreduce, x, "band")

# Still usable.
y = np.ones(8, dtype=np.float32)
comm.allreduce(y)
assert (y == p).all(), y

# free(): a request in flight keeps the communicator until it finishes; later calls raise; freeing twice is fine.
d = comm.dup()
z = np.ones(1 << 16, dtype=np.float32)
req = d.iallreduce(z)
d.free()
req.wait()
assert (z == p).all(), z[:4]
expect("freed", d.allreduce, y)
expect("freed", d.iallreduce, y)
expect("freed", d.dup)
expect("freed", lambda: d.rank)
assert "freed" in repr(d._c), repr(d._c)
d.free()
comm.allreduce(y)
print("errors ok", flush=True)
