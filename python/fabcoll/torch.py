"""A ``torch.distributed`` backend named "fabcoll" for CPU tensors.

    import torch.distributed as dist
    import fabcoll.torch  # registers the backend
    dist.init_process_group("fabcoll")  # under torchrun, or with init_method="env://", "tcp://…", "file://…"

Rendezvous: through the store torch hands to the backend, so no launcher of fabcoll's is needed. Rank 0 of each
group picks a free port for fabcoll's own bootstrap store (served by that rank) and a fresh job token, and
publishes both under the group's prefix in torch's store; the other ranks read them, and every rank joins with
``fabcoll.Communicator.from_env`` under those values (its address: the one that routes to torch's MASTER_ADDR).
A ``FABCOLL_TOKEN`` already in the environment is used instead of a fresh one and never enters torch's store,
which has no authentication: export one on every rank where strangers can reach torch's store.

Work: each operation starts fabcoll's nonblocking collective on the tensors' memory (no copy where the tensors
are contiguous and the layouts match; the native call reads each tensor's address, size and dtype off the tensor)
and returns a :class:`Work`. The library's progress thread moves it while
Python computes. ``wait()`` finishes it on the calling thread; ``get_future()`` (what DDP uses) hands it to one
completion thread per group, which waits with the GIL released and completes the future in issue order.

Beyond dense tensors: all_reduce of sparse COO tensors (SUM and AVG; gloo's semantics, for DDP's sparse embedding
gradients) exchanges every rank's shape and entry count, then gathers indices and values and sums them. Groups made
by ``dist.split_group`` are fabcoll splits of the parent's communicator (no store rendezvous).
"""

import math
import os
import queue
import secrets
import socket
import threading
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _CBackend
from torch.futures import Future

from . import Communicator, Error

__all__ = ["ProcessGroupFabcoll", "Work", "BACKEND"]

BACKEND = "fabcoll"

_R = dist.ReduceOp
# torch's ReduceOp as fabcoll's op name; AVG is a sum divided by the size.
_OPS = ((_R.SUM, "sum"), (_R.PRODUCT, "prod"), (_R.MIN, "min"), (_R.MAX, "max"), (_R.BAND, "band"),
        (_R.BOR, "bor"), (_R.BXOR, "bxor"))


def _op_name(op, dtype):
    """torch's ReduceOp as fabcoll's op name, plus whether the result is divided by the size (AVG)."""
    for torch_op, name in _OPS:
        if op == torch_op:
            return name, False
    if op == _R.AVG:
        if not dtype.is_floating_point:
            raise Error(f"fabcoll backend: ReduceOp.AVG needs a floating-point tensor, not {dtype}")
        return "sum", True
    # A ReduceOp object (e.g. NCCL's premultiplied sum) prints as an address; its type says which op it is.
    raise Error(f"fabcoll backend: reduce op {getattr(op, 'op', op)} is not supported (SUM, AVG, PRODUCT, MIN, MAX, "
                "BAND, BOR, BXOR)")


def _cat(tensors):
    """One contiguous tensor holding ``tensors`` one after the other (a copy)."""
    return torch.cat([_dense(t).detach().reshape(-1) for t in tensors])


def _flat(tensors, what):
    """``_cat`` of ``tensors``, checked equal in size and dtype."""
    first = tensors[0]
    for t in tensors:
        if t.dtype != first.dtype or t.numel() != first.numel():
            raise Error(f"fabcoll backend: the tensors of {what} differ in dtype or size; fabcoll needs equal blocks")
    return _cat(tensors)


def _block_counts(what, blocks, own, rank, p):
    """The element counts of ``blocks``, one per rank, checked: one dtype with ``own``, and block ``rank`` (this
    rank's) the size of ``own``."""
    if any(b.dtype != own.dtype for b in blocks):
        raise Error(f"fabcoll backend: {what}: the tensors differ in dtype")
    counts = [b.numel() for b in blocks]
    if len(counts) != p or counts[rank] != own.numel():
        raise Error(f"fabcoll backend: {what}: {len(counts)} tensors for {p} ranks, or tensor {rank} not the size "
                    f"of this rank's ({own.numel()} elements)")
    return counts


def _is_block_of(block, whole, i, p):
    """Whether ``block`` is the i-th of ``p`` equal blocks of ``whole`` in memory (both contiguous, one dtype)."""
    return (block.dtype == whole.dtype and block.is_contiguous() and whole.is_contiguous()
            and whole.numel() == block.numel() * p and block.numel() > 0
            and block.data_ptr() == whole.data_ptr() + i * block.numel() * block.element_size())


def _split_counts(t, splits, p, what):
    """all_to_all_single's element counts per rank for tensor ``t`` cut along its first dimension into
    ``splits`` rows (equal parts when empty)."""
    rows = t.shape[0] if t.dim() > 0 else t.numel()
    per_row = t.numel() // rows if rows else 0
    if not splits:
        if rows % p:
            raise Error(f"fabcoll backend: all_to_all_single: the {what}'s {rows} rows do not split into {p} "
                        f"equal parts; pass {what}_split_sizes")
        splits = [rows // p] * p
    if len(splits) != p or sum(splits) != rows:
        raise Error(f"fabcoll backend: all_to_all_single: {what}_split_sizes {list(splits)} must be {p} row "
                    f"counts summing to the {what}'s {rows} rows")
    return [s * per_row for s in splits]


def _dense(t):
    """``t``, refused with a clear error unless it is a dense (strided) tensor."""
    if t is not None and t.layout != torch.strided:
        raise Error(f"fabcoll backend: a {t.layout} tensor: fabcoll moves dense CPU tensors; of sparse ones, "
                    "all_reduce (SUM or AVG) takes sparse COO tensors")
    return t


def _contiguous(t, copies):
    """``t`` itself when contiguous, else a contiguous copy (gloo takes such tensors too), noted in ``copies`` (unless
    None: an input) to be copied back into ``t`` once the call has finished."""
    if _dense(t) is None or t.is_contiguous():
        return t
    c = t.contiguous()
    if copies is not None:
        copies.append((t, c))
    return c


# Element types a sparse tensor's values may have, numbered alike on every rank for the shape exchange.
_SPARSE_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
                  torch.int32, torch.int64, torch.complex64, torch.complex128)
_MAX_DIMS = 64  # a tensor's most dimensions in torch


def _sparse_meta(c):
    """One int64 row describing the coalesced sparse COO tensor ``c`` for the other ranks: sparse dimensions, all
    dimensions, entries, the values' dtype (its index in ``_SPARSE_DTYPES``, -1 if not there), then the sizes
    padded with -1."""
    sizes = list(c.shape)
    if len(sizes) > _MAX_DIMS:
        raise Error(f"fabcoll backend: all_reduce of a sparse tensor of {len(sizes)} dimensions")
    code = _SPARSE_DTYPES.index(c.dtype) if c.dtype in _SPARSE_DTYPES else -1
    row = [c.sparse_dim(), len(sizes), c._nnz(), code, *sizes]
    return torch.tensor(row + [-1] * (4 + _MAX_DIMS - len(row)), dtype=torch.int64)


def _check_sparse_metas(rows):
    """Raises, alike on every rank, unless every rank's row of ``_sparse_meta`` has rank 0's shape and dtype."""
    first = rows[0]
    for r in range(rows.shape[0]):
        if int(rows[r, 3]) < 0:
            raise Error(f"fabcoll backend: all_reduce of sparse tensors: rank {r}'s values have a dtype fabcoll does "
                        "not reduce")
        if not (torch.equal(rows[r, :2], first[:2]) and torch.equal(rows[r, 3:], first[3:])):
            ndim = int(rows[r, 1])
            raise Error(f"fabcoll backend: all_reduce of sparse tensors: rank {r}'s tensor (sizes "
                        f"{rows[r, 4:4 + ndim].tolist()}, {int(rows[r, 0])} sparse dimensions, dtype "
                        f"{_SPARSE_DTYPES[int(rows[r, 3])]}) differs from rank 0's (sizes "
                        f"{first[4:4 + int(first[1])].tolist()}, {int(first[0])} sparse dimensions, dtype "
                        f"{_SPARSE_DTYPES[int(first[3])]})")


class Work(dist._Work):
    """A collective in flight: ``wait()`` finishes it, ``get_future()`` gives a future completed by the group's
    completion thread. Once the requests finish, ``copies`` (pairs of a non-contiguous tensor and the contiguous copy
    the call wrote) are copied back, then ``post`` (copies out, AVG's division) runs, once."""

    def __init__(self, pg, requests, result, post=None, copies=(), source=-1):
        super().__init__()
        self._source = source
        self._pg = pg
        self._requests = requests
        self._result = result
        self._post = post
        self._copies = copies
        self._future = None
        self._lock = threading.RLock()  # a future callback may wait on its own work
        self._done = False
        self._error = None

    def _finish(self):
        with self._lock:
            if self._done:
                return
            try:
                for r in self._requests:
                    r.wait()
                for t, c in self._copies:
                    t.copy_(c)
                if self._post is not None:
                    self._post()
            except BaseException as e:  # noqa: BLE001: handed to the waiter and the future
                self._error = e
            self._requests = ()
            self._done = True
            fut = self._future
        if fut is not None:
            self._complete(fut)

    def _complete(self, fut):
        if fut.done():
            return
        if self._error is not None:
            fut.set_exception(self._error)
        else:
            fut.set_result(self._result)

    def wait(self, timeout=None):
        """Finishes the work; with a ``timeout`` (a timedelta; zero, torch's default, waits as long as it takes)
        raises if it has not finished by then, as gloo's works do. The work then keeps running; a later
        ``wait()`` finishes it."""
        seconds = timeout.total_seconds() if timeout is not None else 0
        if seconds > 0 and not self._done:
            deadline = time.monotonic() + seconds
            while not all(r.test() for r in self._requests):
                if time.monotonic() >= deadline:
                    raise Error(f"fabcoll backend: the work did not finish within {seconds:g} s")
                time.sleep(0.0002)
        self._finish()
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        return self._done

    def _source_rank(self):
        """The sender of a receive (torch asks it of a receive from any source), else -1."""
        return self._source

    source_rank = _source_rank

    def result(self):
        """The tensors the work wrote (as torch's works give them), once it has finished."""
        self.wait()
        return self._result

    def is_success(self):
        return self._done and self._error is None

    def exception(self):
        return self._error

    def get_future(self):
        with self._lock:
            if self._future is None:
                self._future = Future()
                if self._done:
                    self._complete(self._future)
                else:
                    self._pg._completer.put(self)
            return self._future


def _joined(pg, works, result):
    """One work over several started ones (a coalesced call): their requests, and their copies out in order."""
    posts = [w._post for w in works if w._post is not None]

    def post():
        for f in posts:
            f()

    copies = [c for w in works for c in w._copies]
    return Work(pg, [r for w in works for r in w._requests], result, post if posts else None, copies)


class _Completer:
    """One daemon thread per group that finishes works in issue order, for their futures."""

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._thread = None

    def put(self, work):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fabcoll-torch-completion", daemon=True)
            self._thread.start()
        self._queue.put(work)

    def _run(self):
        while True:
            work = self._queue.get()
            if work is None:
                return
            work._finish()

    def stop(self):
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None


_ENV_LOCK = threading.Lock()


def _local_address():
    """This host's address on the route to torch's MASTER_ADDR (where the other ranks reach it), else loopback."""
    master = os.environ.get("MASTER_ADDR")
    if not master or master in ("localhost", "127.0.0.1"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))
        return s.getsockname()[0]


def _free_port(host):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _join(store, rank, size, timeout):
    """fabcoll's communicator for one torch group, bootstrapped through torch's (prefixed) store. The group's
    ``timeout`` (``init_process_group(timeout=…)``; torch's default for CPU groups is 30 min) bounds each
    collective's wait for its peers, unless ``FABCOLL_TIMEOUT`` says otherwise."""
    env = {"FABCOLL_RANK": str(rank), "FABCOLL_SIZE": str(size), "FABCOLL_STORE_SERVER": "rank0"}
    if timeout is not None and "FABCOLL_TIMEOUT" not in os.environ:
        env["FABCOLL_TIMEOUT"] = str(timeout.total_seconds())
    own_token = os.environ.get("FABCOLL_TOKEN")
    # torch hands a group created again after destroy_process_group the same (prefixed) store, with the keys of the
    # group before it still there (torchrun's agent store outlives its groups; so does a store the program keeps).
    # Each incarnation of the group has keys of its own: the k-th (from 0) is the one whose joins count k·size + 1 …
    # (k + 1)·size, as no rank starts joining it before every rank has joined the one before.
    keys = f"fabcoll/{(store.add('fabcoll/joins', 1) - 1) // size}/"
    if rank == 0:
        host = _local_address()
        store.set(keys + "store", f"tcp://{host}:{_free_port(host)}")
        store.set(keys + "token", "" if own_token else secrets.token_hex(16))
    address = store.get(keys + "store").decode()
    token = own_token or store.get(keys + "token").decode()
    if not token:
        raise Error("fabcoll backend: rank 0 has FABCOLL_TOKEN set but this rank has not; set it on every rank")
    env.update(FABCOLL_STORE=address, FABCOLL_TOKEN=token)
    # from_env reads the process environment: set the values for the call only, one group at a time.
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return Communicator.from_env()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class ProcessGroupFabcoll(dist.ProcessGroup):
    """torch's ProcessGroup over a fabcoll communicator (CPU tensors only)."""

    def __init__(self, store, rank, size, timeout=None, *, comm=None):
        """A group joined through ``store`` (torch's, prefixed for the group), or over ``comm``, a communicator of
        these ranks split off another group's (:meth:`split_group`)."""
        super().__init__(store, rank, size)
        self._store = store
        self._comm = comm if comm is not None else _join(store, rank, size, timeout)
        self._c = self._comm._c
        self._completer = _Completer()
        # The group is also its own CPU backend, registered as gloo's is under its group: torch keeps a group's name
        # in its backends (DeviceMesh finds groups by name), its C++ paths (functional collectives, DTensor) call the
        # backend of the tensors' device, and its Python helpers (batch_isend_irecv) ask that backend what it
        # supports. Calls made on the group itself still come here, with this module's works.
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, _CpuBackend(self))
        self._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)

    def getBackendName(self):
        return BACKEND

    def __repr__(self):
        return f"ProcessGroupFabcoll(rank={self.rank()}, size={self.size()}, fabric={self._comm.fabric})"

    def split_group(self, new_ranks, timeout=None, opts=None, group_name=None, group_desc=None, device_types=None):
        """torch's ``dist.split_group`` (collective over this group): the group of ``new_ranks`` (ranks of this group,
        in that order) as a fabcoll split of this group's communicator, so no store rendezvous and no new connection;
        None on a rank not in ``new_ranks`` (torch passes such a rank the first split). The child keeps this group's
        timeout; ``opts`` and ``device_types`` (CPU is the only one) change nothing."""
        me = self.rank()
        member = me in new_ranks
        # Splits are disjoint, so a split's smallest rank tells it apart; the order within it is the given one.
        comm = self._comm.split(min(new_ranks) if member else None, new_ranks.index(me) if member else 0)
        if comm is None:
            return None
        store = dist.PrefixStore(f"fabcoll-split/{group_name}/", self._store)
        child = ProcessGroupFabcoll(store, comm.rank, comm.size, comm=comm)
        if group_name is not None:
            child._set_group_name(group_name)
        if group_desc is not None:
            child._set_group_desc(group_desc)
        return child

    @property
    def communicator(self):
        """The fabcoll communicator underneath."""
        return self._comm

    def _start(self, kind, send, recv, copies, op="sum", root=0, **counts):
        """fabcoll's nonblocking ``kind`` on tensors ``send`` (None: in place) and ``recv``, which the native call
        checks (CPU, dense, a dtype fabcoll moves) and reads directly, holding them until it has finished; a
        non-contiguous one goes through a contiguous copy (``recv``'s noted in ``copies``)."""
        send, recv = _contiguous(send, None), _contiguous(recv, copies)
        return self._c._call(kind, send, recv, op, root, None, False, True, **counts)

    def _single(self, kind, send, recv, op="sum", root=0, post=None, result=None, **counts):
        copies = []
        req = self._start(kind, send, recv, copies, op=op, root=root, **counts)
        return Work(self, [req], result if result is not None else [recv], post, copies)

    # Reductions.

    def allreduce(self, tensors, opts=None):
        """all_reduce; a sparse COO tensor goes by :meth:`_sparse_allreduce` (SUM or AVG, as gloo's SUM)."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        reqs, posts, copies = [], [], []
        size = self.size()
        for t in tensors:
            name, avg = _op_name(op, t.dtype)
            if t.layout == torch.sparse_coo:
                more, post = self._sparse_allreduce(t, name, avg)
                reqs += more
                posts.append(post)
                continue
            reqs.append(self._start("allreduce", None, t, copies, op=name))
            if avg:
                posts.append(lambda t=t: t.div_(size))

        def post():
            for f in posts:
                f()

        return Work(self, reqs, tensors, post if posts else None, copies)

    def _sparse_allreduce(self, t, name, avg):
        """The sum (``avg``: the mean) of every rank's sparse COO tensor ``t``, written into ``t`` coalesced, as gloo
        does: a blocking allgather of each rank's shape, dtype and entry count (checked alike on every rank, so a
        difference raises everywhere and leaves the group usable), then nonblocking allgathervs of the indices and
        the values, summed by ``coalesce`` when they have arrived. Returns the requests and the step that sums."""
        if name != "sum":
            raise Error("fabcoll backend: all_reduce of sparse tensors supports ReduceOp.SUM and AVG only")
        c = t.detach().coalesce()
        p = self.size()
        meta = _sparse_meta(c)
        metas = torch.empty(p * meta.numel(), dtype=torch.int64)
        self._c._call("allgather", meta, metas, "sum", 0, None, True, True)
        rows = metas.view(p, -1)
        _check_sparse_metas(rows)
        nnz = rows[:, 2].tolist()
        sd, dense = c.sparse_dim(), c.shape[c.sparse_dim():]
        per_entry = math.prod(dense)
        indices = torch.empty(sd * sum(nnz), dtype=torch.int64)
        values = torch.empty(sum(nnz) * per_entry, dtype=c.dtype)
        reqs = [self._start("allgatherv", c._indices().reshape(-1), indices, None,
                            recv_counts=[sd * n for n in nnz]),
                self._start("allgatherv", c._values().reshape(-1), values, None,
                            recv_counts=[n * per_entry for n in nnz])]

        def post():
            idx = torch.cat([i.view(sd, n) for i, n in zip(indices.split([sd * n for n in nnz]), nnz)], dim=1)
            val = torch.cat([v.view(n, *dense) for v, n in zip(values.split([n * per_entry for n in nnz]), nnz)])
            # Every part came from a valid tensor of these sizes (checked above): no invariant check (opting out
            # explicitly also keeps torch from warning about it).
            total = torch.sparse_coo_tensor(idx, val, c.shape, check_invariants=False).coalesce()
            if avg:
                total = torch.sparse_coo_tensor(total.indices(), total.values() / p, c.shape, check_invariants=False,
                                                is_coalesced=True)
            t.copy_(total)

        return reqs, post

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts=None):
        (t,) = tensors
        name, avg = _op_name(opts.reduceOp, t.dtype)
        root = opts.rootRank
        post = (lambda: t.div_(self.size())) if avg and self.rank() == root else None
        return self._single("reduce", None, t, op=name, root=root, post=post, result=tensors)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter(output, input, opts)

    def _reduce_scatter(self, output, input, opts, counts=None):
        """reduce_scatter of ``input`` into ``output``: in equal blocks, or in blocks of ``counts`` elements."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        name, avg = _op_name(op, output.dtype)
        post = (lambda: output.div_(self.size())) if avg else None
        if counts is None:
            return self._single("reduce_scatter", input, output, op=name, post=post)
        return self._single("reduce_scatterv", input, output, op=name, post=post, recv_counts=counts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return _joined(self, [self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)], outputs)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        """reduce_scatter; input tensors of unequal sizes (input i the size of rank i's output) go by fabcoll's
        reduce_scatter with counts."""
        (out,) = outputs
        (inputs,) = input_lists
        counts = _block_counts("reduce_scatter", inputs, out, self.rank(), self.size())
        return self._reduce_scatter(out, _cat(inputs), opts, None if len(set(counts)) == 1 else counts)

    # Data movement.

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        copies = []
        reqs = [self._start("bcast", None, t, copies, root=root) for t in tensors]
        return Work(self, reqs, tensors, None, copies)

    def all_gather_single(self, output, input, opts=None):
        """all_gather_into_tensor; in place when ``input`` is this rank's block of ``output`` (as FSDP calls it)."""
        if _is_block_of(input, output, self.rank(), self.size()):
            return self._single("allgather", None, output)
        return self._single("allgather", input, output)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return _joined(self, [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs)], outputs)

    def allgather(self, output_lists, inputs, opts=None):
        """all_gather; output tensors of unequal sizes (rank i's input the size of output i) go by allgatherv."""
        (outs,) = output_lists
        (inp,) = inputs
        counts = _block_counts("all_gather", outs, inp, self.rank(), self.size())
        flat = torch.empty(sum(counts), dtype=inp.dtype)

        def post():
            for o, chunk in zip(outs, flat.split(counts)):
                o.copy_(chunk.view_as(o))

        if len(set(counts)) == 1:
            return self._single("allgather", inp, flat, post=post, result=output_lists)
        return self._single("allgatherv", inp, flat, post=post, result=output_lists, recv_counts=counts)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        """all_gather_coalesced (deprecated in torch, still in gloo): ``output_lists[r][i]`` gets rank r's
        ``inputs[i]``, by one allgather of the inputs laid end to end."""
        p = self.size()
        if len({t.dtype for t in inputs}) > 1:
            raise Error("fabcoll backend: all_gather_coalesced: the input tensors differ in dtype")
        counts = [t.numel() for t in inputs]
        if len(output_lists) != p or any([o.numel() for o in outs] != counts for outs in output_lists):
            raise Error(f"fabcoll backend: all_gather_coalesced: the output lists must be {p} lists (one per rank) of "
                        f"tensors the sizes of the inputs ({counts} elements)")
        send = _cat(inputs)
        recv = torch.empty(send.numel() * p, dtype=send.dtype)

        def post():
            for outs, block in zip(output_lists, recv.split(send.numel())):
                for o, part in zip(outs, block.split(counts)):
                    o.copy_(part.view_as(o))

        return self._single("allgather", send, recv, post=post, result=output_lists)

    def gather(self, output_lists, inputs, opts=None):
        (inp,) = inputs
        root = opts.rootRank
        if self.rank() != root:
            return self._single("gather", inp, None, root=root, result=output_lists)
        (outs,) = output_lists
        flat = torch.empty(inp.numel() * self.size(), dtype=inp.dtype)

        def post():
            for o, chunk in zip(outs, flat.chunk(self.size())):
                o.copy_(chunk.view_as(o))

        return self._single("gather", inp, flat, root=root, post=post, result=output_lists)

    def gather_single(self, output, input, opts=None):
        """gather_single (gather_into_tensor): every rank's ``input`` one after the other into the root's ``output``
        (an empty placeholder elsewhere)."""
        root = opts.rootRank if opts is not None else 0
        recv = output if self.rank() == root else None
        return self._single("gather", input, recv, root=root, result=[output])

    gather_into_tensor = gather_single

    def scatter(self, outputs, input_lists, opts=None):
        (out,) = outputs
        root = opts.rootRank
        send = _flat(input_lists[0], "scatter") if self.rank() == root else None
        return self._single("scatter", send, out, root=root, result=outputs)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        if not output_split_sizes and not input_split_sizes:
            return self._single("alltoall", input, output)
        send_counts = _split_counts(input, input_split_sizes, self.size(), "input")
        recv_counts = _split_counts(output, output_split_sizes, self.size(), "output")
        return self._single("alltoallv", input, output, send_counts=send_counts, recv_counts=recv_counts)

    alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts=None):
        everything = [*outputs, *inputs]
        if len({t.dtype for t in everything}) != 1:
            raise Error("fabcoll backend: the tensors of alltoall differ in dtype")
        recv_counts = [o.numel() for o in outputs]
        recv = torch.empty(sum(recv_counts), dtype=outputs[0].dtype)

        def post():
            for o, chunk in zip(outputs, recv.split(recv_counts)):
                o.copy_(chunk.view_as(o))

        if len({t.numel() for t in everything}) == 1:
            return self._single("alltoall", _cat(inputs), recv, post=post, result=outputs)
        return self._single("alltoallv", _cat(inputs), recv, post=post, result=outputs,
                            send_counts=[t.numel() for t in inputs], recv_counts=recv_counts)

    def barrier(self, opts=None):
        return Work(self, [self._comm.ibarrier()], [])

    # Point to point: the n-th send from one rank to another matches the n-th receive there, which
    # must have the same tag, dtype and size (fabcoll raises on a difference). A receive from any
    # source waits for the first transfer to this rank with its tag, then receives from its sender.

    def _transfer(self, kind, tensors, peer, tag):
        (t,) = tensors
        copies = []
        buf = _contiguous(t, copies if kind == "recv" else None)
        req = self._c._transfer(kind, buf, peer, tag, None, False, True)
        return Work(self, [req], tensors, None, copies, source=peer if kind == "recv" else -1)

    def send(self, tensors, dst, tag):
        return self._transfer("send", tensors, dst, tag)

    def recv(self, tensors, src, tag):
        return self._transfer("recv", tensors, src, tag)

    def recv_anysource(self, tensors, tag):
        """torch's ``recv``/``irecv`` without a source: blocks until some rank's transfer with ``tag`` has come (its
        sender is the work's ``_source_rank()``), then receives from it as ``recv`` does."""
        if tensors[0].numel() == 0:
            raise Error("fabcoll backend: a receive from any source needs a non-empty tensor (an empty send is not "
                        "announced)")
        return self._transfer("recv", tensors, self._c._probe(None, tag)[0], tag)

    def shutdown(self):
        """torch's destroy_process_group: finishes the works that futures wait for, then lets the communicator go (the
        group object itself may outlive it: torch holds it in a reference cycle through the C++ backend)."""
        self._completer.stop()
        self._comm.free()


class _CpuBackend(_CBackend):
    """A fabcoll group as torch's C++ backend of device "cpu": each collective goes to the group's method."""

    def __init__(self, group):
        super().__init__(group.rank(), group.size())
        self._group = group

    def getBackendName(self):
        return BACKEND

    # What torch's Python helpers ask a backend (batch_isend_irecv then issues each isend/irecv alone), answered in
    # Python: the bindings' own properties look for a Python override of themselves and recurse.
    supports_coalescing = property(lambda self: False)
    supports_splitting = property(lambda self: True)
    supports_shrinking = property(lambda self: False)

    def perform_nocolor_split(self, device):
        """What torch asks of a non-member's backend when ``new_group`` splits communicators (NCCL's way): nothing
        here, as ``new_group`` bootstraps fabcoll groups afresh through the store and never splits."""


def _forward(name):
    def call(self, *args):
        return getattr(self._group, name)(*args)

    call.__name__ = name
    return call


# The backend methods torch's C++ side may call (the names its Python bindings give them).
for _name in ("allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_single",
              "_reduce_scatter_base", "reduce_scatter_single_coalesced", "broadcast", "allgather", "allgather_coalesced",
              "all_gather_single", "_allgather_base", "all_gather_single_coalesced", "gather", "gather_single",
              "gather_into_tensor", "scatter", "alltoall", "all_to_all_single", "alltoall_base", "barrier", "send",
              "recv", "recv_anysource", "shutdown"):
    setattr(_CpuBackend, _name, _forward(_name))


def _create(store, rank, size, timeout):
    return ProcessGroupFabcoll(store, rank, size, timeout)


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu"])
