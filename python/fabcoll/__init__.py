"""fabcoll: MPI-style collectives without MPI, over shared memory and TCP (and libfabric).

Launch ranks with ``fabrun -n 4 python prog.py`` (or torchrun, Slurm, the ``FABCOLL_*`` variables), then::

    import numpy as np, fabcoll
    comm = fabcoll.Communicator.from_env()
    x = np.full(1000, comm.rank, dtype=np.float32)
    comm.allreduce(x)                      # in place: every rank now holds the sum
    req = comm.iallreduce(x, op="max")     # nonblocking: overlaps with what runs before wait()
    req.wait()

Buffers are any C-contiguous object with the buffer protocol (numpy arrays, bytearray, memoryview, torch CPU tensors
through ``.numpy()``); nothing is copied. The datatype comes from the buffer's format, or from ``dtype=``
("bfloat16", …), which reinterprets the buffer's bytes. Complex arrays (complex64, complex128) reduce by sum and
prod (MPI's rule for complex types); bool arrays reduce by logical and bitwise ops, min and max. Every failure — a
wrong length, a read-only, non-contiguous or misaligned buffer, an unknown op or dtype, a peer that died — raises
:class:`Error`. Nonblocking calls return a :class:`Request` that holds its buffers until it has finished; as in MPI,
do not touch them until ``wait()`` returns (or ``test()`` says True). Python objects go by ``bcast_object``,
``allgather_object``, ``gather_object``, ``scatter_object``, ``alltoall_object`` and ``send_object``/``recv_object``
(pickled, as mpi4py's lowercase calls). The PyTorch backend is :mod:`fabcoll.torch`.
"""

import pickle

from ._native import DATATYPES, Error, Request
from ._native import Communicator as _Native

__all__ = ["Communicator", "Error", "Request", "DATATYPES", "OPS", "ANY_SOURCE", "ANY_TAG"]

#: The reductions, by name (torch's "product" is accepted for "prod").
OPS = ("sum", "prod", "min", "max", "band", "bor", "bxor", "land", "lor", "lxor")

# ``recv``'s and ``probe``'s source and tag that match any (as MPI.ANY_SOURCE and MPI.ANY_TAG).
ANY_SOURCE = -1
ANY_TAG = -1


class Communicator:
    """A group of ranks that run collectives together (MPI's communicator).

    Each collective ``x`` blocks (the GIL is released while it runs); ``ix`` starts it and returns a
    :class:`Request`. Block-structured calls (allgather, gather, scatter, alltoall, reduce_scatter) cut their
    p-times-larger buffer into ``size`` equal blocks, block i for rank i. Their v-variants (allgatherv, gatherv,
    scatterv, alltoallv) take the blocks' element counts per rank, and displacements (in elements; packed when
    None), as MPI's do; every rank passes the same counts of the root-side buffer.
    """

    __slots__ = ("_c",)

    def __init__(self, native):
        self._c = native

    @staticmethod
    def from_env():
        """Joins the job the environment describes (fabrun, torchrun, Slurm or ``FABCOLL_*``)."""
        return Communicator(_Native.from_env())

    @property
    def rank(self):
        """This process's rank, 0 … size-1."""
        return self._c.rank

    @property
    def size(self):
        """The number of ranks."""
        return self._c.size

    @property
    def fabric(self):
        """The fabric the ranks use (shm, tcp, ofi:…)."""
        return self._c.fabric

    def free(self):
        """Lets the communicator go now (MPI's ``MPI_Comm_free``): its connections, shared memory and threads are
        released once the requests it started have finished. Later calls raise :class:`Error`; freeing again does
        nothing."""
        self._c.free()

    def dup(self):
        """A communicator over the same ranks whose traffic never mixes with this one's (collective)."""
        return Communicator(self._c.dup())

    def split(self, color, key=0):
        """Ranks with equal ``color`` form a new communicator, ordered by ``key`` then rank; ``color=None``
        takes part but joins none and gets ``None`` (collective)."""
        c = self._c.split(color, key)
        return None if c is None else Communicator(c)

    def __repr__(self):
        return repr(self._c)

    # Blocking collectives.

    def barrier(self):
        """Returns once every rank has entered it."""
        self._c._call("barrier", None, None)

    def bcast(self, buf, root=0, *, dtype=None):
        """Root's ``buf`` into every rank's ``buf``."""
        self._c._call("bcast", None, buf, root=root, dtype=dtype)

    def allreduce(self, buf, op="sum", *, out=None, dtype=None):
        """Reduces ``buf`` over the ranks: in place, or into ``out`` when given."""
        self._call_reduction("allreduce", buf, out, op, 0, dtype, True)

    def reduce(self, buf, op="sum", root=0, *, out=None, dtype=None):
        """Reduces ``buf`` over the ranks into root's ``buf`` (or root's ``out``); other ranks only send."""
        self._call_reduction("reduce", buf, out, op, root, dtype, True)

    def allgather(self, send, recv, *, dtype=None):
        """Every rank's ``send`` into block i (of rank i) of every rank's ``recv`` (size × len(send)); ``send=None``:
        in place, each rank's block already in its ``recv``."""
        self._c._call("allgather", send, recv, dtype=dtype)

    def gather(self, send, recv=None, root=0, *, dtype=None):
        """Every rank's ``send`` into block i of root's ``recv``; ``recv`` is ignored off the root."""
        self._c._call("gather", send, recv, root=root, dtype=dtype)

    def scatter(self, send, recv, root=0, *, dtype=None):
        """Block i of root's ``send`` into rank i's ``recv``; ``send`` is ignored off the root."""
        self._c._call("scatter", send, recv, root=root, dtype=dtype)

    def alltoall(self, send, recv, *, dtype=None):
        """Block j of rank i's ``send`` into block i of rank j's ``recv``."""
        self._c._call("alltoall", send, recv, dtype=dtype)

    def reduce_scatter(self, send, recv, op="sum", *, dtype=None):
        """Reduces ``send`` (size blocks) over the ranks; rank i gets block i in ``recv``."""
        self._c._call("reduce_scatter", send, recv, op=op, dtype=dtype)

    def reduce_scatterv(self, send, recv, counts, op="sum", *, dtype=None):
        """Reduces ``send`` (blocks of ``counts[i]`` elements one after the other) over the ranks; rank i gets block i
        in ``recv`` (MPI_Reduce_scatter)."""
        self._v("reduce_scatterv", send, recv, None, None, counts, None, 0, dtype, True, op)

    def scan(self, buf, op="sum", *, out=None, dtype=None):
        """Inclusive prefix reduction: rank r gets buf_0 ⊕ … ⊕ buf_r, in place or into ``out``."""
        self._call_reduction("scan", buf, out, op, 0, dtype, True)

    def exscan(self, buf, op="sum", *, out=None, dtype=None):
        """Exclusive prefix reduction: rank r > 0 gets buf_0 ⊕ … ⊕ buf_(r-1), in place or into ``out``; rank 0's is
        left as it was."""
        self._call_reduction("exscan", buf, out, op, 0, dtype, True)

    def allgatherv(self, send, recv, counts, displs=None, *, dtype=None):
        """Rank i's ``send`` (``counts[i]`` elements) at ``displs[i]`` of every rank's ``recv``."""
        self._v("allgatherv", send, recv, None, None, counts, displs, 0, dtype, True)

    def gatherv(self, send, recv, counts, displs=None, root=0, *, dtype=None):
        """Rank i's ``send`` (``counts[i]`` elements) at ``displs[i]`` of root's ``recv`` (ignored elsewhere)."""
        self._v("gatherv", send, recv, None, None, counts, displs, root, dtype, True)

    def scatterv(self, send, counts, recv, displs=None, root=0, *, dtype=None):
        """``counts[i]`` elements at ``displs[i]`` of root's ``send`` (ignored elsewhere) into rank i's ``recv``."""
        self._v("scatterv", send, recv, counts, displs, None, None, root, dtype, True)

    def alltoallv(self, send, send_counts, recv, recv_counts, send_displs=None, recv_displs=None, *, dtype=None):
        """``send_counts[j]`` elements at ``send_displs[j]`` of rank i's ``send`` into rank j's ``recv`` at its
        ``recv_displs[i]``, where it expects ``recv_counts[i]`` of them."""
        self._v("alltoallv", send, recv, send_counts, send_displs, recv_counts, recv_displs, 0, dtype, True)

    # Tagged point-to-point: the n-th send from one rank to another matches the n-th receive
    # there, which must have the same tag, dtype and size (a difference raises fabcoll.Error on
    # both ranks). ``recv`` from ``ANY_SOURCE`` (or ``None``) takes the first transfer to arrive
    # with its tag; ``probe`` also finds one with ``ANY_TAG``.

    def send(self, buf, dest, tag=0, *, dtype=None):
        """Sends ``buf`` to rank ``dest``; returns once ``buf`` may be reused."""
        self._c._transfer("send", buf, dest, tag, dtype=dtype)

    def recv(self, buf, source=ANY_SOURCE, tag=0, *, dtype=None):
        """Receives into ``buf`` the message rank ``source`` sends with ``tag`` (exactly its size); from any rank when
        ``source`` is ``ANY_SOURCE`` (or ``None``): the first message to arrive with ``tag``; any tag with
        ``ANY_TAG``. Returns the sender."""
        if _wildcard(buf, source, tag):
            source, tag = self.probe(source, tag)
        self._c._transfer("recv", buf, source, tag, dtype=dtype)
        return source

    def sendrecv(self, sendbuf, dest, recvbuf, source=ANY_SOURCE, sendtag=0, recvtag=0, *, dtype=None):
        """Sends ``sendbuf`` to rank ``dest`` while receiving ``recvbuf`` from rank ``source`` (any rank when
        ``ANY_SOURCE`` or ``None``), both in flight at once (MPI_Sendrecv); returns the sender."""
        _wildcard(recvbuf, source, recvtag)  # a bad receive is refused before the send starts
        sent = self.isend(sendbuf, dest, sendtag, dtype=dtype)
        try:
            source = self.recv(recvbuf, source, recvtag, dtype=dtype)
        except BaseException:
            try:
                sent.wait()  # the send buffer is the caller's again; the receive's error is the one to report
            except Error:
                pass
            raise
        sent.wait()
        return source

    def probe(self, source=ANY_SOURCE, tag=ANY_TAG):
        """Waits until the next message to this rank from ``source`` (any rank: ``ANY_SOURCE`` or ``None``, the first
        to arrive) has ``tag`` (any: ``ANY_TAG``), and returns its ``(source, tag)`` (MPI_Probe): the next ``recv``
        or ``irecv`` from that rank takes that message. A sender whose next message has another tag is passed over;
        a zero-length message is not announced, so it is never found here."""
        any_source = source is None or source == ANY_SOURCE
        return self._c._probe(None if any_source else source, None if tag == ANY_TAG else tag)

    def iprobe(self, source=ANY_SOURCE, tag=ANY_TAG):
        """``probe`` that does not wait (MPI_Iprobe): ``(source, tag)`` of such a message if one has come, else
        ``None``."""
        any_source = source is None or source == ANY_SOURCE
        return self._c._iprobe(None if any_source else source, None if tag == ANY_TAG else tag)

    def isend(self, buf, dest, tag=0, *, dtype=None):
        return self._c._transfer("send", buf, dest, tag, dtype=dtype, blocking=False)

    def irecv(self, buf, source, tag=0, *, dtype=None):
        """Nonblocking ``recv`` from rank ``source`` (for any source, ``probe`` first: it names the rank)."""
        if source is None or source == ANY_SOURCE or tag == ANY_TAG:
            raise Error("irecv needs its source rank and tag: probe() names those of the message that comes first")
        return self._c._transfer("recv", buf, source, tag, dtype=dtype, blocking=False)

    # Python objects (mpi4py's lowercase calls): pickled, their sizes exchanged first, then the bytes by the buffer
    # calls above. Unpickling runs code the sender chose: the job's peers are trusted (its token admits them).

    def bcast_object(self, obj, root=0):
        """Rank ``root``'s ``obj`` on every rank (a copy elsewhere, ``obj`` itself on the root)."""
        data = pickle.dumps(obj) if self.rank == root else b""
        n = _sizes([len(data)])
        self.bcast(n, root)
        if self.rank == root:
            buf = bytearray(data)
            self.bcast(buf, root)
            return obj
        buf = bytearray(_size(n, 0))
        self.bcast(buf, root)
        return pickle.loads(buf)

    def allgather_object(self, obj):
        """Every rank's ``obj``, as a list in rank order."""
        data = pickle.dumps(obj)
        counts = self._all_sizes(len(data))
        out = bytearray(sum(counts))
        self.allgatherv(bytearray(data), out, counts)
        return _unpickle_blocks(out, counts)

    def gather_object(self, obj, root=0):
        """Every rank's ``obj`` as a list in rank order on rank ``root``; None elsewhere."""
        data = pickle.dumps(obj)
        counts = self._all_sizes(len(data))
        out = bytearray(sum(counts)) if self.rank == root else None
        self.gatherv(bytearray(data), out, counts, root=root)
        return _unpickle_blocks(out, counts) if self.rank == root else None

    def scatter_object(self, objs, root=0):
        """Element i of rank ``root``'s list ``objs`` (``size`` objects) on rank i; ``objs`` is ignored elsewhere."""
        if self.rank == root:
            if len(objs) != self.size:
                raise Error(f"scatter_object: {len(objs)} objects for {self.size} ranks")
            blocks = [pickle.dumps(o) for o in objs]
            counts = [len(b) for b in blocks]
        else:
            blocks, counts = [], [0] * self.size
        n = _sizes(counts)
        self.bcast(n, root)
        counts = [_size(n, i) for i in range(self.size)]
        out = bytearray(counts[self.rank])
        self.scatterv(bytearray(b"".join(blocks)) if self.rank == root else None, counts, out, root=root)
        return pickle.loads(out)

    def alltoall_object(self, objs):
        """Element j of this rank's list ``objs`` (``size`` objects) to rank j; the objects received, in rank
        order."""
        if len(objs) != self.size:
            raise Error(f"alltoall_object: {len(objs)} objects for {self.size} ranks")
        blocks = [pickle.dumps(o) for o in objs]
        send_counts = [len(b) for b in blocks]
        sizes = bytearray(8 * self.size)
        self.alltoall(_sizes(send_counts), sizes)
        recv_counts = [_size(sizes, i) for i in range(self.size)]
        out = bytearray(sum(recv_counts))
        self.alltoallv(bytearray(b"".join(blocks)), send_counts, out, recv_counts)
        return _unpickle_blocks(out, recv_counts)

    def send_object(self, obj, dest, tag=0):
        """Sends ``obj`` to rank ``dest`` (its size, then its bytes, both with ``tag``); as ``send`` (and MPI_Send), a
        large object's send returns once the receiver is taking it, so two ranks that send to each other first
        wait for each other."""
        data = pickle.dumps(obj)
        self.send(_sizes([len(data)]), dest, tag)
        self.send(bytearray(data), dest, tag)

    def recv_object(self, source=ANY_SOURCE, tag=0):
        """The object rank ``source`` (any rank when ``ANY_SOURCE`` or ``None``) sends with ``send_object`` and
        ``tag``."""
        n = bytearray(8)
        source = self.recv(n, source, tag)
        buf = bytearray(_size(n, 0))
        self.recv(buf, source, tag)
        return pickle.loads(buf)

    def _all_sizes(self, mine):
        """Every rank's ``mine``, by an allgather of 8-byte sizes."""
        sizes = bytearray(8 * self.size)
        self.allgather(_sizes([mine]), sizes)
        return [_size(sizes, i) for i in range(self.size)]

    # Nonblocking collectives: the same arguments, a Request back.

    def ibarrier(self):
        return self._c._call("barrier", None, None, blocking=False)

    def ibcast(self, buf, root=0, *, dtype=None):
        return self._c._call("bcast", None, buf, root=root, dtype=dtype, blocking=False)

    def iallreduce(self, buf, op="sum", *, out=None, dtype=None):
        return self._call_reduction("allreduce", buf, out, op, 0, dtype, False)

    def ireduce(self, buf, op="sum", root=0, *, out=None, dtype=None):
        return self._call_reduction("reduce", buf, out, op, root, dtype, False)

    def iallgather(self, send, recv, *, dtype=None):
        return self._c._call("allgather", send, recv, dtype=dtype, blocking=False)

    def igather(self, send, recv=None, root=0, *, dtype=None):
        return self._c._call("gather", send, recv, root=root, dtype=dtype, blocking=False)

    def iscatter(self, send, recv, root=0, *, dtype=None):
        return self._c._call("scatter", send, recv, root=root, dtype=dtype, blocking=False)

    def ialltoall(self, send, recv, *, dtype=None):
        return self._c._call("alltoall", send, recv, dtype=dtype, blocking=False)

    def ireduce_scatter(self, send, recv, op="sum", *, dtype=None):
        return self._c._call("reduce_scatter", send, recv, op=op, dtype=dtype, blocking=False)

    def ireduce_scatterv(self, send, recv, counts, op="sum", *, dtype=None):
        return self._v("reduce_scatterv", send, recv, None, None, counts, None, 0, dtype, False, op)

    def iscan(self, buf, op="sum", *, out=None, dtype=None):
        return self._call_reduction("scan", buf, out, op, 0, dtype, False)

    def iexscan(self, buf, op="sum", *, out=None, dtype=None):
        return self._call_reduction("exscan", buf, out, op, 0, dtype, False)

    def iallgatherv(self, send, recv, counts, displs=None, *, dtype=None):
        return self._v("allgatherv", send, recv, None, None, counts, displs, 0, dtype, False)

    def igatherv(self, send, recv, counts, displs=None, root=0, *, dtype=None):
        return self._v("gatherv", send, recv, None, None, counts, displs, root, dtype, False)

    def iscatterv(self, send, counts, recv, displs=None, root=0, *, dtype=None):
        return self._v("scatterv", send, recv, counts, displs, None, None, root, dtype, False)

    def ialltoallv(self, send, send_counts, recv, recv_counts, send_displs=None, recv_displs=None, *, dtype=None):
        return self._v("alltoallv", send, recv, send_counts, send_displs, recv_counts, recv_displs, 0, dtype, False)

    def _v(self, kind, send, recv, sc, sd, rc, rd, root, dtype, blocking, op="sum"):
        if not isinstance(op, str):
            raise Error(f"op must be a name ({', '.join(OPS)}), not {type(op).__name__}")
        ints = lambda v: None if v is None else [int(x) for x in v]  # noqa: E731: lists of numpy ints too
        return self._c._call(kind, send, recv, op=op, root=root, dtype=dtype, blocking=blocking, send_counts=ints(sc),
                             send_displs=ints(sd), recv_counts=ints(rc), recv_displs=ints(rd))

    def _call_reduction(self, kind, buf, out, op, root, dtype, blocking):
        if not isinstance(op, str):
            raise Error(f"op must be a name ({', '.join(OPS)}), not {type(op).__name__}")
        if out is None:
            return self._c._call(kind, None, buf, op=op, root=root, dtype=dtype, blocking=blocking)
        return self._c._call(kind, buf, out, op=op, root=root, dtype=dtype, blocking=blocking)


def _wildcard(buf, source, tag):
    """Whether a receive names no source or no tag (then a probe names them); refuses an empty ``buf`` there, as a
    zero-length message is never announced."""
    if not (source is None or source == ANY_SOURCE or tag == ANY_TAG):
        return False
    if memoryview(buf).nbytes == 0:
        raise Error("a receive from any source or with any tag needs at least one element (a zero-length send is "
                    "not announced)")
    return True


def _sizes(values):
    """Byte counts as consecutive 8-byte little-endian integers (what the object calls exchange)."""
    return bytearray(b"".join(int(v).to_bytes(8, "little") for v in values))


def _size(buf, i):
    """The i-th 8-byte size of ``buf``."""
    return int.from_bytes(buf[8 * i:8 * i + 8], "little")


def _unpickle_blocks(buf, counts):
    """The objects pickled one after the other in ``buf``, ``counts`` bytes each."""
    out, at = [], 0
    for n in counts:
        out.append(pickle.loads(buf[at:at + n]))
        at += n
    return out
