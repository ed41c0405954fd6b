"""One rank of the collectives test: every operation, blocking and nonblocking, against numpy references computed
from every rank's input (each rank's input is a function of its rank). Prints "ops ok" at the end."""

import numpy as np

import fabcoll

comm = fabcoll.Communicator.from_env()
me, p = comm.rank, comm.size
N = 37  # not a multiple of p: the block ops use N * p elements


def data(rank, n, dtype):
    """Rank `rank`'s input: small integers, exact in every dtype (float16 and bfloat16 included)."""
    return ((np.arange(n) * 3 + rank * 5) % 11 + 1).astype(dtype)


def check(got, want, what):
    if not np.array_equal(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)):
        raise AssertionError(f"rank {me}: {what}: got {got[:8]}…, want {want[:8]}…")


REDUCE = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}

for dtype in (np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8, np.float16, np.uint16):
    for op, fn in REDUCE.items():
        if op == "prod" and np.dtype(dtype).itemsize == 1:
            continue
        want = data(0, N, dtype)
        for r in range(1, p):
            want = fn(want, data(r, N, dtype))
        x = data(me, N, dtype)
        comm.allreduce(x, op)
        check(x, want, f"allreduce {op} {np.dtype(dtype).name}")
        # Out of place.
        y = np.zeros(N, dtype=dtype)
        comm.allreduce(data(me, N, dtype), op, out=y)
        check(y, want, f"allreduce {op} out= {np.dtype(dtype).name}")

# bfloat16: no numpy type; its bit patterns travel in an int16 array named dtype="bfloat16".
def to_bf16(a):
    return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.int16)


def from_bf16(b):
    return (b.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


x = to_bf16(data(me, N, np.float32))
comm.allreduce(x, "sum", dtype="bfloat16")
check(from_bf16(x), sum(data(r, N, np.float32) for r in range(p)), "allreduce bfloat16")

for root in range(p):
    b = data(me, N, np.float64)
    comm.bcast(b, root)
    check(b, data(root, N, np.float64), f"bcast root {root}")

    x = data(me, N, np.int64)
    comm.reduce(x, "sum", root)
    if me == root:
        check(x, sum(data(r, N, np.int64) for r in range(p)), f"reduce root {root}")

    g = np.zeros(N * p, dtype=np.float32) if me == root else None
    comm.gather(data(me, N, np.float32), g, root)
    if me == root:
        check(g, np.concatenate([data(r, N, np.float32) for r in range(p)]), f"gather root {root}")

    s = np.concatenate([data(root * 10 + r, N, np.int32) for r in range(p)]) if me == root else None
    out = np.zeros(N, dtype=np.int32)
    comm.scatter(s, out, root)
    check(out, data(root * 10 + me, N, np.int32), f"scatter root {root}")

ag = np.zeros(N * p, dtype=np.float64)
comm.allgather(data(me, N, np.float64), ag)
check(ag, np.concatenate([data(r, N, np.float64) for r in range(p)]), "allgather")
ag = np.zeros(N * p, dtype=np.int32)
ag[me * N:(me + 1) * N] = data(me, N, np.int32)
comm.allgather(None, ag)
check(ag, np.concatenate([data(r, N, np.int32) for r in range(p)]), "allgather in place")

# alltoall: rank i's block j is data(10 * i + j); rank j receives block i = data(10 * i + j).
send = np.concatenate([data(10 * me + j, N, np.int64) for j in range(p)])
recv = np.zeros_like(send)
comm.alltoall(send, recv)
check(recv, np.concatenate([data(10 * i + me, N, np.int64) for i in range(p)]), "alltoall")

send = data(me, N * p, np.float32)
rs = np.zeros(N, dtype=np.float32)
comm.reduce_scatter(send, rs, "max")
full = np.maximum.reduce([data(r, N * p, np.float32) for r in range(p)])
check(rs, full[me * N:(me + 1) * N], "reduce_scatter max")

# The v-variants: rank i's block has i + 1 elements; the root-side buffers leave a gap of 2 between blocks.
counts = [r + 1 for r in range(p)]
displs = [sum(counts[:r]) + 2 * r for r in range(p)]
spaced = lambda blocks, fill: np.concatenate([np.append(b, [fill, fill]).astype(b.dtype) for b in blocks])[:-2]  # noqa: E731
agv = np.full(sum(counts) + 2 * (p - 1), -1, dtype=np.float32)
comm.allgatherv(data(me, me + 1, np.float32), agv, counts, displs)
check(agv, spaced([data(r, r + 1, np.float32) for r in range(p)], -1), "allgatherv")
agv = np.zeros(sum(counts), dtype=np.int64)
comm.allgatherv(data(me, me + 1, np.int64), agv, np.array(counts))
check(agv, np.concatenate([data(r, r + 1, np.int64) for r in range(p)]), "allgatherv packed")
for root in range(p):
    g = np.full(sum(counts) + 2 * (p - 1), 7, dtype=np.int32) if me == root else None
    comm.gatherv(data(me, me + 1, np.int32), g, counts, displs, root)
    if me == root:
        check(g, spaced([data(r, r + 1, np.int32) for r in range(p)], 7), f"gatherv root {root}")
    s = spaced([data(root * 10 + r, r + 1, np.float64) for r in range(p)], 0) if me == root else None
    out = np.zeros(me + 1, dtype=np.float64)
    comm.scatterv(s, counts, out, displs, root)
    check(out, data(root * 10 + me, me + 1, np.float64), f"scatterv root {root}")
# alltoallv: rank i sends (i + j) % 3 + 1 elements data(10 * i + j) to rank j.
size = lambda i, j: (i + j) % 3 + 1  # noqa: E731
send = np.concatenate([data(10 * me + j, size(me, j), np.int32) for j in range(p)])
recv = np.zeros(sum(size(i, me) for i in range(p)), dtype=np.int32)
comm.alltoallv(send, [size(me, j) for j in range(p)], recv, [size(i, me) for i in range(p)])
check(recv, np.concatenate([data(10 * i + me, size(i, me), np.int32) for i in range(p)]), "alltoallv")
recv[:] = 0
rd = [sum(size(i, me) for i in range(p) if i > r) for r in range(p)]  # blocks in reverse rank order
comm.ialltoallv(send, [size(me, j) for j in range(p)], recv, [size(i, me) for i in range(p)], recv_displs=rd).wait()
check(recv, np.concatenate([data(10 * i + me, size(i, me), np.int32) for i in reversed(range(p))]),
      "ialltoallv reversed")
# reduce_scatterv: blocks of counts[i] elements; scan and exscan.
out = np.zeros(me + 1, dtype=np.float64)
comm.reduce_scatterv(data(me, sum(counts), np.float64), out, counts, "max")
whole = np.maximum.reduce([data(r, sum(counts), np.float64) for r in range(p)])
check(out, whole[sum(counts[:me]):sum(counts[:me + 1])], "reduce_scatterv max")
x = data(me, N, np.int64)
comm.scan(x)
check(x, sum(data(r, N, np.int64) for r in range(me + 1)), "scan in place")
y = np.full(N, -5, dtype=np.int32)
comm.iexscan(data(me, N, np.int32), out=y).wait()
check(y, sum(data(r, N, np.int32) for r in range(me)) if me else np.full(N, -5, dtype=np.int32), "iexscan")
agv = np.zeros(sum(counts), dtype=np.uint8)
comm.iallgatherv(data(me, me + 1, np.uint8), agv, counts).wait()
check(agv, np.concatenate([data(r, r + 1, np.uint8) for r in range(p)]), "iallgatherv")

comm.barrier()

# Nonblocking: several in flight at once, finished by test() polling or wait(), results checked after.
big = data(me, 1 << 16, np.float32)
small = data(me, N, np.int32)
r1 = comm.iallreduce(big)
r2 = comm.iallreduce(small, "max")
r3 = comm.ibarrier()
while not r1.test():
    pass
r2.wait()
r3.wait()
assert r1.test() and r2.test(), "test() after completion must stay True"
r1.wait()  # wait after a successful test is fine
check(big, sum(data(r, 1 << 16, np.float32) for r in range(p)), "iallreduce")
check(small, np.maximum.reduce([data(r, N, np.int32) for r in range(p)]), "iallreduce max")

ag = np.zeros(N * p, dtype=np.int16)
reqs = [comm.iallgather(data(me, N, np.int16), ag), comm.ibcast(b, 0)]
for q in reqs:
    q.wait()
check(ag, np.concatenate([data(r, N, np.int16) for r in range(p)]), "iallgather")
out = np.zeros(N, dtype=np.float64)
comm.ireduce_scatter(data(me, N * p, np.float64), out).wait()
check(out, sum(data(r, N * p, np.float64) for r in range(p))[me * N:(me + 1) * N], "ireduce_scatter")
send = np.concatenate([data(10 * me + j, N, np.int32) for j in range(p)])
recv = np.zeros_like(send)
comm.ialltoall(send, recv).wait()
check(recv, np.concatenate([data(10 * i + me, N, np.int32) for i in range(p)]), "ialltoall")
g = np.zeros(N * p, dtype=np.uint8) if me == 0 else None
comm.igather(data(me, N, np.uint8), g, 0).wait()
if me == 0:
    check(g, np.concatenate([data(r, N, np.uint8) for r in range(p)]), "igather")
x = data(me, N, np.float64)
comm.ireduce(x, "min", 0).wait()
if me == 0:
    check(x, np.minimum.reduce([data(r, N, np.float64) for r in range(p)]), "ireduce")
out = np.zeros(N, dtype=np.int64)
comm.iscatter(np.concatenate([data(r, N, np.int64) for r in range(p)]) if me == 0 else None, out, 0).wait()
check(out, data(me, N, np.int64), "iscatter")

# A request dropped unfinished is finished first (its buffers stay lent until then).
x = data(me, 1 << 15, np.float64)
del_req = comm.iallreduce(x)
del del_req
check(x, sum(data(r, 1 << 15, np.float64) for r in range(p)), "dropped request")

# Other buffer types: bytearray and memoryview (bytes are uint8).
ba = bytearray([me + 1] * 16)
comm.allreduce(ba)
assert list(ba) == [sum(range(1, p + 1))] * 16, list(ba)
comm.allreduce(memoryview(ba), "max")

# Complex numbers (MPI's complex types: reduced by sum and prod) and bools (logical and bitwise ops, min, max); the
# v-variants' counts are in complex elements.
for ctype in (np.complex64, np.complex128):
    z = data(me, N, np.float64) + 1j * data(me + 3, N, np.float64)
    want = sum(data(r, N, np.float64) + 1j * data(r + 3, N, np.float64) for r in range(p))
    x = z.astype(ctype)
    comm.allreduce(x)
    assert np.array_equal(x, want.astype(ctype)), f"rank {me}: complex allreduce {np.dtype(ctype).name}"
    agv = np.zeros(sum(counts), dtype=ctype)
    comm.iallgatherv(z[:me + 1].astype(ctype), agv, counts).wait()
    parts = [(data(r, N, np.float64) + 1j * data(r + 3, N, np.float64))[:r + 1] for r in range(p)]
    assert np.array_equal(agv, np.concatenate(parts).astype(ctype)), f"rank {me}: complex allgatherv"
    # A product of complex numbers, not of their parts: (r + 1) + k·i, exact small integers throughout.
    k = np.arange(N) % 3
    y = ((me + 1) + 1j * k).astype(ctype)
    comm.allreduce(y, "prod")
    want = np.prod([(r + 1) + 1j * k for r in range(p)], axis=0)
    assert np.array_equal(y, want.astype(ctype)), f"rank {me}: complex prod {np.dtype(ctype).name}: {y[:3]}"
flags = np.array([me == 0, True, False, me % 2 == 1])
for op, fn in (("lor", np.any), ("land", np.all), ("max", np.any), ("min", np.all)):
    want = fn([np.array([r == 0, True, False, r % 2 == 1]) for r in range(p)], axis=0)
    b = flags.copy()
    comm.allreduce(b, op)
    assert b.dtype == bool and np.array_equal(b, want), f"rank {me}: bool allreduce {op}: {b} against {want}"

# Tagged send/recv on the ring: blocking (small: eager sends complete before their receives) and
# nonblocking in both directions at once (large: zero-copy).
right, left = (me + 1) % p, (me - 1) % p
got = np.zeros(N, dtype=np.float64)
comm.send(data(me, N, np.float64), right, tag=3)
comm.recv(got, left, tag=3)
check(got, data(left, N, np.float64), "send/recv")
big_out = data(me, 1 << 17, np.float32)
from_left = np.zeros(1 << 17, dtype=np.float32)
rr = comm.irecv(from_left, left, tag=4)
rs = comm.isend(big_out, right, tag=4)
rs.wait()
rr.wait()
check(from_left, data(left, 1 << 17, np.float32), "isend/irecv")
for call in (lambda: comm.recv(bytearray(0)), lambda: comm.sendrecv(big_out, right, bytearray(0))):
    try:
        call()
    except fabcoll.Error as e:
        assert "at least one element" in str(e), e
    else:
        raise AssertionError("an empty receive from any source was not refused")
for source in (left, fabcoll.ANY_SOURCE):
    from_left[:] = 0
    assert comm.sendrecv(big_out, right, from_left, source, sendtag=7, recvtag=7) == left
    check(from_left, data(left, 1 << 17, np.float32), f"sendrecv from {source}")
# From any source: every other rank sends rank 0 a small and a large message; rank 0 receives each from whichever
# sender comes first (recv with ANY_SOURCE returns the sender; a tag per size, as a message with the receive's tag
# but another size is a mismatch), and an object from any source.
for tag, n in ((5, N), (15, 1 << 17)):
    if me == 0:
        senders = []
        for _ in range(1, p):
            buf = np.zeros(n, dtype=np.float32)
            src = comm.recv(buf, fabcoll.ANY_SOURCE, tag=tag)
            check(buf, data(src, n, np.float32), f"recv from any source ({n})")
            senders.append(src)
        assert sorted(senders) == list(range(1, p)), senders
    else:
        comm.send(data(me, n, np.float32), 0, tag=tag)
if me == 0:
    assert sorted(comm.recv_object(tag=6)["from"] for _ in range(1, p)) == list(range(1, p)), "recv_object any"
else:
    comm.send_object({"from": me}, 0, tag=6)
# probe: any source and any tag (each sender's own tag), then the receive it names; the first found by polling.
if me == 0:
    found = []
    for k in range(1, p):
        if k == 1:
            hit = None
            while hit is None:
                hit = comm.iprobe(tag=30 + 1)
            src, tag = hit
            assert (src, tag) == (1, 31), hit
        else:
            src, tag = comm.probe()
        buf = np.zeros(N, dtype=np.int32)
        assert comm.recv(buf, src, tag) == src
        check(buf, data(src, N, np.int32), "recv after probe")
        found.append((src, tag))
    assert sorted(found) == [(r, 30 + r) for r in range(1, p)], found
else:
    comm.send(data(me, N, np.int32), 0, tag=30 + me)

# Python objects (pickled): sizes differ per rank, one rank's object is empty-ish, the root varies.
def obj(r):
    return {"rank": r, "pad": "x" * (r * 1000), "nested": [r, (r, "t"), None]} if r != 1 else None


for root in range(p):
    assert comm.bcast_object(obj(me) if me == root else "ignored", root) == obj(root), f"bcast_object {root}"
    got = comm.gather_object(obj(me), root)
    assert got == ([obj(r) for r in range(p)] if me == root else None), f"rank {me}: gather_object {root}"
    mine = comm.scatter_object([obj(10 + r) for r in range(p)] if me == root else None, root)
    assert mine == obj(10 + me), f"rank {me}: scatter_object {root}: {mine}"
assert comm.allgather_object(obj(me)) == [obj(r) for r in range(p)], "allgather_object"
assert comm.alltoall_object([(me, j, "y" * j) for j in range(p)]) == [(i, me, "y" * me) for i in range(p)]
# A large send waits for its receiver (as MPI_Send may): even ranks send first, odd ones receive first.
for turn in (me % 2, 1 - me % 2):
    if turn == 0:
        comm.send_object({"from": me, "big": list(range(50_000))}, right, tag=8)
    else:
        assert comm.recv_object(left, tag=8) == {"from": left, "big": list(range(50_000))}, "send/recv_object"

# dup and split.
d = comm.dup()
x = np.ones(4, dtype=np.int32)
d.allreduce(x)
check(x, np.full(4, p), "dup allreduce")
half = comm.split(me % 2, key=-me)
x = np.ones(3, dtype=np.int64)
half.allreduce(x)
check(x, np.full(3, half.size), "split allreduce")
assert half.size == len(range(me % 2, p, 2)), (half.size, p)
none = comm.split(None if me == 0 else 1)
assert (none is None) == (me == 0)

print("ops ok", comm.fabric, flush=True)
