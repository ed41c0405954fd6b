//! The typed collective calls: argument checks (lengths, roots, counts) turn typed slices into a
//! [`Call`] — the operation's `CollArgs` plus the raw buffers — which a [`Collectives`]
//! implementor submits: blocking ([`Communicator`], [`WithOptions`]) or nonblocking
//! ([`Scope`](super::request::Scope)).
//!
//! Buffer conventions follow `fabcoll_collectives::Collective`: buffers that an operation ignores
//! on this rank (recv of gather/reduce off the root, send of scatter off the root) may be empty.

use std::marker::PhantomData;
use std::sync::Arc;

use fabcoll_collectives::datatype::{Datatype, Element};
use fabcoll_collectives::op::ReduceOp;
use fabcoll_collectives::{CollArgs, Collective};

use super::memo::Prepared;
use super::p2p::Transfer;
use super::{Communicator, Options};
use crate::error::{Error, Result};
use crate::exec::proto::CallSig;

/// One collective call on this rank, checked and ready to start. Holds raw views of the lent
/// buffers for the lifetime `'b`.
pub struct Call<'b> {
    pub(crate) args: CollArgs,
    pub(crate) send: (*mut u8, usize),
    pub(crate) recv: (*mut u8, usize),
    pub(crate) dtype: Datatype,
    pub(crate) op: Option<ReduceOp>,
    _lent: PhantomData<&'b mut [u8]>,
}

fn sbuf<T: Element>(s: &[T]) -> (*mut u8, usize) {
    (s.as_ptr() as *mut u8, std::mem::size_of_val(s))
}

fn rbuf<T: Element>(s: &mut [T]) -> (*mut u8, usize) {
    (s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s))
}

const NONE: (*mut u8, usize) = (std::ptr::null_mut(), 0);

/// The block length of a buffer of `len` elements cut into one equal block per rank.
fn equal_blocks(comm: &Communicator, coll: Collective, what: &str, len: usize) -> Result<usize> {
    let p = comm.size() as usize;
    if !len.is_multiple_of(p) {
        return Err(Error::invalid(coll, format!("{what} has {len} elements, not {p} equal blocks")));
    }
    Ok(len / p)
}

pub(super) fn fnv(values: impl IntoIterator<Item = u64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in values {
        for b in v.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

impl<'b> Call<'b> {
    pub(super) fn new<T: Element>(comm: &Communicator, coll: Collective, count: usize) -> Call<'b> {
        let mut args = CollArgs::new(coll, comm.rank(), comm.size(), count as u64);
        args.elem_size = T::DATATYPE.size() as u32;
        Call { args, send: NONE, recv: NONE, dtype: T::DATATYPE, op: None, _lent: PhantomData }
    }

    fn root(&mut self, root: u32) -> Result<()> {
        if root >= self.args.size {
            return Err(Error::invalid(self.args.coll, format!("root {root} out of range 0..{}", self.args.size)));
        }
        self.args.root = root;
        Ok(())
    }

    fn reduce_op(&mut self, op: &ReduceOp) -> Result<()> {
        op.check(self.dtype).map_err(|e| Error::invalid(self.args.coll, e.to_string()))?;
        self.args.commutative = op.is_commutative();
        self.op = Some(op.clone());
        Ok(())
    }

    fn counts(&mut self, counts: &[usize], displs: Option<&[usize]>) -> Result<()> {
        let p = self.args.size as usize;
        if counts.len() != p {
            return Err(Error::invalid(self.args.coll, format!("counts has {} entries for {p} ranks", counts.len())));
        }
        self.args.counts = Some(counts.iter().map(|&c| c as u64).collect());
        if let Some(d) = displs {
            if d.len() != p {
                return Err(Error::invalid(self.args.coll, format!("displs has {} entries for {p} ranks", d.len())));
            }
            self.args.displs = Some(d.iter().map(|&c| c as u64).collect());
        }
        Ok(self.args.validate()?)
    }

    fn in_place(&mut self) {
        self.args.in_place = true;
    }

    fn expect(&self, what: &str, got_bytes: usize, want_elems: u64) -> Result<()> {
        let es = self.dtype.size();
        if got_bytes as u64 != want_elems * es as u64 {
            return Err(Error::invalid(
                self.args.coll,
                format!("{what} has {} elements, expected {want_elems}", got_bytes / es),
            ));
        }
        Ok(())
    }

    /// Checks the arguments, and both buffers against the lengths the operation needs on this
    /// rank.
    fn sized(&self) -> Result<()> {
        let (send, recv) = self.args.checked_lens()?;
        if !self.args.in_place {
            self.expect("send buffer", self.send.1, send)?;
        }
        self.expect("receive buffer", self.recv.1, recv)
    }

    /// The call's signature, sent with its messages: the prepared call's agreed hash with the
    /// element type and the reduction (which calls that share a prepared call may differ in).
    #[inline]
    pub(crate) fn sig(&self, p: &Prepared) -> CallSig {
        let op = self.op.as_ref().map_or(0, op_code);
        CallSig::of(p.agreed ^ (self.dtype as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ op.rotate_left(17))
    }

    /// What checked mode compares across ranks.
    pub(crate) fn signature(&self, args: &CollArgs, alg: &str) -> String {
        let a = &self.args;
        let counts = a.counts.as_ref().map_or(String::new(), |c| format!(" counts#{:016x}", fnv(c.iter().copied())));
        let root = if a.coll.is_rooted() { format!(" root {}", a.root) } else { String::new() };
        let op = self.op.as_ref().map_or(String::new(), |o| format!(" op {}", o.name()));
        let count = if a.coll.is_vector() { String::new() } else { format!(" count {}", a.count) };
        let params: Vec<String> = args.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}({count}{counts}{root} {}{op} algorithm {alg} {})", a.coll, self.dtype, params.join(","))
    }
}

/// A number for each reduction: the built-ins' own, a hash of a user op's name.
#[inline]
fn op_code(op: &ReduceOp) -> u64 {
    match op {
        ReduceOp::Sum => 1,
        ReduceOp::Prod => 2,
        ReduceOp::Min => 3,
        ReduceOp::Max => 4,
        ReduceOp::Band => 5,
        ReduceOp::Bor => 6,
        ReduceOp::Bxor => 7,
        ReduceOp::Land => 8,
        ReduceOp::Lor => 9,
        ReduceOp::Lxor => 10,
        ReduceOp::Minloc => 11,
        ReduceOp::Maxloc => 12,
        ReduceOp::User(u) => fnv(u.name().bytes().map(u64::from)),
    }
}

/// The element-wise reductions (allreduce, reduce_scatter_block, scan, exscan) share one shape:
/// `count` elements per call, input in `send` or, when `send` is `None`, in place in `recv`.
fn reduction<'b, S: Collectives<'b> + ?Sized, T: Element>(
    s: &S,
    coll: Collective,
    count: usize,
    send: Option<&'b [T]>,
    recv: &'b mut [T],
    op: &ReduceOp,
) -> Result<S::Out> {
    let comm = s.comm();
    let mut c = Call::new::<T>(comm, coll, count);
    c.reduce_op(op)?;
    match send {
        Some(send) => c.send = sbuf(send),
        None => c.in_place(),
    }
    c.recv = rbuf(recv);
    c.sized()?;
    s.submit(&c)
}

/// The collectives and point-to-point transfers, once for every way of submitting them: blocking
/// on a [`Communicator`] or a [`WithOptions`] view (`Out = ()`), nonblocking in a
/// [`Scope`](super::Scope) (`Out = Request`) or through [`RawCalls`](super::RawCalls). `'b` is
/// how long the buffers are lent.
pub trait Collectives<'b> {
    /// What a call returns: `()` when blocking, a [`Request`](super::Request) when not.
    type Out;

    /// The communicator the calls run on.
    fn comm(&self) -> &Communicator;

    /// Starts (and for blocking forms finishes) a checked call.
    fn submit(&self, call: &Call<'b>) -> Result<Self::Out>;

    /// Starts (and for blocking forms finishes) a checked transfer.
    fn submit_transfer(&self, transfer: &Transfer<'b>) -> Result<Self::Out>;

    /// Sends `buf` to rank `dst` with `tag`. A blocking send returns once `buf` may be reused
    /// (the data is in `dst`'s eager slot or its receive buffer). The n-th send to a rank matches
    /// that rank's n-th receive from this one, which must have the same tag, element type and
    /// count (see [`Transfer`]).
    fn send<T: Element>(&self, buf: &'b [T], dst: u32, tag: u32) -> Result<Self::Out> {
        self.submit_transfer(&Transfer::send(self.comm(), buf, dst, tag)?)
    }

    /// Receives from rank `src` the message it sends with `tag`, of exactly `buf.len()` elements.
    fn recv<T: Element>(&self, buf: &'b mut [T], src: u32, tag: u32) -> Result<Self::Out> {
        self.submit_transfer(&Transfer::recv(self.comm(), buf, src, tag)?)
    }

    fn barrier(&self) -> Result<Self::Out> {
        self.submit(&Call::new::<u8>(self.comm(), Collective::Barrier, 0))
    }

    /// `buf` holds the data at the root on entry and everywhere on return.
    fn bcast<T: Element>(&self, buf: &'b mut [T], root: u32) -> Result<Self::Out> {
        let mut c = Call::new::<T>(self.comm(), Collective::Bcast, buf.len());
        c.root(root)?;
        c.recv = rbuf(buf);
        c.sized()?;
        self.submit(&c)
    }

    /// Element-wise reduction of every rank's `send` into the root's `recv` (ignored elsewhere).
    fn reduce<T: Element>(&self, send: &'b [T], recv: &'b mut [T], op: &ReduceOp, root: u32) -> Result<Self::Out> {
        let comm = self.comm();
        let mut c = Call::new::<T>(comm, Collective::Reduce, send.len());
        c.root(root)?;
        c.reduce_op(op)?;
        c.send = sbuf(send);
        if comm.rank() == root {
            c.recv = rbuf(recv);
        }
        c.sized()?;
        self.submit(&c)
    }

    /// [`Collectives::reduce`] with the root's input in `buf` (other ranks: `buf` is the input).
    fn reduce_in_place<T: Element>(&self, buf: &'b mut [T], op: &ReduceOp, root: u32) -> Result<Self::Out> {
        let comm = self.comm();
        let mut c = Call::new::<T>(comm, Collective::Reduce, buf.len());
        c.root(root)?;
        c.reduce_op(op)?;
        if comm.rank() == root {
            c.recv = rbuf(buf);
            c.in_place();
        } else {
            c.send = sbuf(buf);
        }
        c.sized()?;
        self.submit(&c)
    }

    fn allreduce<T: Element>(&self, send: &'b [T], recv: &'b mut [T], op: &ReduceOp) -> Result<Self::Out> {
        reduction(self, Collective::Allreduce, send.len(), Some(send), recv, op)
    }

    fn allreduce_in_place<T: Element>(&self, buf: &'b mut [T], op: &ReduceOp) -> Result<Self::Out> {
        reduction(self, Collective::Allreduce, buf.len(), None, buf, op)
    }

    /// `recv` (root only, p·count) gets block i from rank i.
    fn gather<T: Element>(&self, send: &'b [T], recv: &'b mut [T], root: u32) -> Result<Self::Out> {
        let comm = self.comm();
        let mut c = Call::new::<T>(comm, Collective::Gather, send.len());
        c.root(root)?;
        c.send = sbuf(send);
        if comm.rank() == root {
            c.recv = rbuf(recv);
        }
        c.sized()?;
        self.submit(&c)
    }

    /// Gather with the root's own block already in place in `buf` (p blocks of `count`); other
    /// ranks pass their `count` elements in `buf`.
    fn gather_in_place<T: Element>(&self, buf: &'b mut [T], count: usize, root: u32) -> Result<Self::Out> {
        let comm = self.comm();
        let mut c = Call::new::<T>(comm, Collective::Gather, count);
        c.root(root)?;
        if comm.rank() == root {
            c.recv = rbuf(buf);
            c.in_place();
        } else {
            c.send = sbuf(buf);
        }
        c.sized()?;
        self.submit(&c)
    }

    /// Rank i's `send` (`counts[i]` elements) lands at `displs[i]` (packed if `None`) of the root's recv.
    fn gatherv<T: Element>(
        &self,
        send: &'b [T],
        recv: &'b mut [T],
        counts: &[usize],
        displs: Option<&[usize]>,
        root: u32,
    ) -> Result<Self::Out> {
        let comm = self.comm();
        let mut c = Call::new::<T>(comm, Collective::Gatherv, 0);
        c.root(root)?;
        c.counts(counts, displs)?;
        c.send = sbuf(send);
        if comm.rank() == root {
            c.recv = rbuf(recv);
        }
        c.sized()?;
        self.submit(&c)
    }

    /// Gatherv with the root's own block already at its displacement in `buf`; other ranks pass
    /// their `counts[rank]` elements in `buf`.
    fn gatherv_in_place<T: Element>(
        &self,
        buf: &'b mut [T],
        counts: &[usize],
        displs: Option<&[usize]>,
        root: u32,
    ) -> Result<Self::Out> {
        let comm = self.comm();
        let mut c = Call::new::<T>(comm, Collective::Gatherv, 0);
        c.root(root)?;
        c.counts(counts, displs)?;
        if comm.rank() == root {
            c.recv = rbuf(buf);
            c.in_place();
        } else {
            c.send = sbuf(buf);
        }
        c.sized()?;
        self.submit(&c)
    }

    /// The root's `send` (p·count) is cut into blocks; rank i gets block i in `recv`.
    fn scatter<T: Element>(&self, send: &'b [T], recv: &'b mut [T], root: u32) -> Result<Self::Out> {
        let comm = self.comm();
        let mut c = Call::new::<T>(comm, Collective::Scatter, recv.len());
        c.root(root)?;
        if comm.rank() == root {
            c.send = sbuf(send);
        }
        c.recv = rbuf(recv);
        c.sized()?;
        self.submit(&c)
    }

    fn scatterv<T: Element>(
        &self,
        send: &'b [T],
        counts: &[usize],
        displs: Option<&[usize]>,
        recv: &'b mut [T],
        root: u32,
    ) -> Result<Self::Out> {
        let comm = self.comm();
        let mut c = Call::new::<T>(comm, Collective::Scatterv, 0);
        c.root(root)?;
        c.counts(counts, displs)?;
        if comm.rank() == root {
            c.send = sbuf(send);
        }
        c.recv = rbuf(recv);
        c.sized()?;
        self.submit(&c)
    }

    fn allgather<T: Element>(&self, send: &'b [T], recv: &'b mut [T]) -> Result<Self::Out> {
        let mut c = Call::new::<T>(self.comm(), Collective::Allgather, send.len());
        c.send = sbuf(send);
        c.recv = rbuf(recv);
        c.sized()?;
        self.submit(&c)
    }

    /// Allgather with this rank's block already at its place in `buf` (p equal blocks).
    fn allgather_in_place<T: Element>(&self, buf: &'b mut [T]) -> Result<Self::Out> {
        let block = equal_blocks(self.comm(), Collective::Allgather, "buffer", buf.len())?;
        let mut c = Call::new::<T>(self.comm(), Collective::Allgather, block);
        c.in_place();
        c.recv = rbuf(buf);
        c.sized()?;
        self.submit(&c)
    }

    fn allgatherv<T: Element>(
        &self,
        send: &'b [T],
        recv: &'b mut [T],
        counts: &[usize],
        displs: Option<&[usize]>,
    ) -> Result<Self::Out> {
        let mut c = Call::new::<T>(self.comm(), Collective::Allgatherv, 0);
        c.counts(counts, displs)?;
        c.send = sbuf(send);
        c.recv = rbuf(recv);
        c.sized()?;
        self.submit(&c)
    }

    /// Allgatherv with this rank's block already at its displacement in `buf`.
    fn allgatherv_in_place<T: Element>(
        &self,
        buf: &'b mut [T],
        counts: &[usize],
        displs: Option<&[usize]>,
    ) -> Result<Self::Out> {
        let mut c = Call::new::<T>(self.comm(), Collective::Allgatherv, 0);
        c.counts(counts, displs)?;
        c.in_place();
        c.recv = rbuf(buf);
        c.sized()?;
        self.submit(&c)
    }

    /// Block j of `send` goes to rank j; block i of `recv` came from rank i.
    fn alltoall<T: Element>(&self, send: &'b [T], recv: &'b mut [T]) -> Result<Self::Out> {
        let block = equal_blocks(self.comm(), Collective::Alltoall, "send", send.len())?;
        let mut c = Call::new::<T>(self.comm(), Collective::Alltoall, block);
        c.send = sbuf(send);
        c.recv = rbuf(recv);
        c.sized()?;
        self.submit(&c)
    }

    /// Alltoall on one buffer of p equal blocks: block j is sent to rank j and replaced by the
    /// block rank j sends here.
    fn alltoall_in_place<T: Element>(&self, buf: &'b mut [T]) -> Result<Self::Out> {
        let block = equal_blocks(self.comm(), Collective::Alltoall, "buffer", buf.len())?;
        let mut c = Call::new::<T>(self.comm(), Collective::Alltoall, block);
        c.in_place();
        c.recv = rbuf(buf);
        c.sized()?;
        self.submit(&c)
    }

    /// MPI_Alltoallv: `send_counts[j]` elements at `send_displs[j]` go to rank j; `recv_counts[i]`
    /// from rank i land at `recv_displs[i]` (packed if `None`). The full count matrix that the
    /// algorithms need is gathered first with a blocking allgather of the send counts.
    #[allow(clippy::too_many_arguments)]
    fn alltoallv<T: Element>(
        &self,
        send: &'b [T],
        send_counts: &[usize],
        send_displs: Option<&[usize]>,
        recv: &'b mut [T],
        recv_counts: &[usize],
        recv_displs: Option<&[usize]>,
    ) -> Result<Self::Out> {
        let comm = self.comm();
        let (p, r) = (comm.size() as usize, comm.rank() as usize);
        let coll = Collective::Alltoallv;
        for (name, v) in [
            ("send_counts", Some(send_counts)),
            ("recv_counts", Some(recv_counts)),
            ("send_displs", send_displs),
            ("recv_displs", recv_displs),
        ] {
            if let Some(v) = v {
                if v.len() != p {
                    return Err(Error::invalid(coll, format!("{name} has {} entries for {p} ranks", v.len())));
                }
            }
        }
        let row: Vec<u64> = send_counts.iter().map(|&c| c as u64).collect();
        let mut matrix = vec![0u64; p * p];
        comm.allgather(&row, &mut matrix)?;
        for i in 0..p {
            if matrix[i * p + r] != recv_counts[i] as u64 {
                return Err(Error::invalid(
                    coll,
                    format!(
                        "recv_counts[{i}] = {} but rank {i} sends {} elements here",
                        recv_counts[i],
                        matrix[i * p + r]
                    ),
                ));
            }
        }
        let mut c = Call::new::<T>(comm, coll, 0);
        c.args.counts = Some(Arc::from(matrix));
        c.args.displs = send_displs.map(|d| d.iter().map(|&x| x as u64).collect());
        c.args.rdispls = recv_displs.map(|d| d.iter().map(|&x| x as u64).collect());
        c.send = sbuf(send);
        c.recv = rbuf(recv);
        c.sized()?;
        self.submit(&c)
    }

    /// Element-wise reduction of `send` (Σ counts) over all ranks; rank r gets block r (`counts[r]` elements).
    fn reduce_scatter<T: Element>(
        &self,
        send: &'b [T],
        recv: &'b mut [T],
        counts: &[usize],
        op: &ReduceOp,
    ) -> Result<Self::Out> {
        let comm = self.comm();
        let mut c = Call::new::<T>(comm, Collective::ReduceScatter, 0);
        c.counts(counts, None)?;
        c.reduce_op(op)?;
        c.send = sbuf(send);
        c.recv = rbuf(recv);
        c.sized()?;
        self.submit(&c)
    }

    /// Reduce-scatter with equal blocks: `send` has p·`recv.len()` elements.
    fn reduce_scatter_block<T: Element>(&self, send: &'b [T], recv: &'b mut [T], op: &ReduceOp) -> Result<Self::Out> {
        reduction(self, Collective::ReduceScatterBlock, recv.len(), Some(send), recv, op)
    }

    /// Inclusive prefix reduction: rank r gets x_0 ⊕ … ⊕ x_r.
    fn scan<T: Element>(&self, send: &'b [T], recv: &'b mut [T], op: &ReduceOp) -> Result<Self::Out> {
        reduction(self, Collective::Scan, send.len(), Some(send), recv, op)
    }

    fn scan_in_place<T: Element>(&self, buf: &'b mut [T], op: &ReduceOp) -> Result<Self::Out> {
        reduction(self, Collective::Scan, buf.len(), None, buf, op)
    }

    /// [`Collectives::exscan`] with the input in `buf` (rank 0's `buf` is left as it was).
    fn exscan_in_place<T: Element>(&self, buf: &'b mut [T], op: &ReduceOp) -> Result<Self::Out> {
        reduction(self, Collective::Exscan, buf.len(), None, buf, op)
    }

    /// Exclusive prefix reduction: rank r > 0 gets x_0 ⊕ … ⊕ x_{r−1}; rank 0's `recv` is untouched.
    fn exscan<T: Element>(&self, send: &'b [T], recv: &'b mut [T], op: &ReduceOp) -> Result<Self::Out> {
        reduction(self, Collective::Exscan, send.len(), Some(send), recv, op)
    }
}

impl<'b> Collectives<'b> for Communicator {
    type Out = ();

    fn comm(&self) -> &Communicator {
        self
    }

    fn submit(&self, call: &Call<'b>) -> Result<()> {
        self.run(call, &Options::default())
    }

    fn submit_transfer(&self, transfer: &Transfer<'b>) -> Result<()> {
        let started = self.start_transfer(transfer, true)?;
        self.finish(started)
    }
}

/// A communicator with per-call [`Options`] (from [`Communicator::with`]); calls block.
pub struct WithOptions<'a> {
    pub(super) comm: &'a Communicator,
    pub(super) opts: &'a Options,
}

impl<'b> Collectives<'b> for WithOptions<'_> {
    type Out = ();

    fn comm(&self) -> &Communicator {
        self.comm
    }

    fn submit(&self, call: &Call<'b>) -> Result<()> {
        self.comm.run(call, self.opts)
    }

    /// Options select algorithms, which transfers do not have: as on the communicator.
    fn submit_transfer(&self, transfer: &Transfer<'b>) -> Result<()> {
        self.comm.submit_transfer(transfer)
    }
}
