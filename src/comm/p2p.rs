//! Tagged point-to-point transfers: [`Collectives::send`] and [`Collectives::recv`], blocking on a
//! communicator and nonblocking in a scope like the collectives, for pipeline parallelism and
//! torch's `send`/`recv`.
//!
//! A transfer is an op of one step on the engine (`exec::p2p`): the same eager slots with credits
//! below the eager limit, the same zero-copy writes into a granted receive buffer above it (no
//! intermediate copy on either side), the same timeouts naming the silent peer. It runs on the
//! communicator's point-to-point context (its context id + 1), so transfers never match a
//! collective's messages and dups and splits have their own.
//!
//! Matching and what is not supported: see [`Transfer`]. The tag travels in the call signature
//! with the element type and count, and a transfer's plan and signature are remembered in the
//! communicator's memo; the tag also travels whole as the message's index (`Plan::transfer`). A
//! receive from any source ([`Communicator::recv_any`]) waits until some rank's next transfer to
//! this one announces itself with the receive's tag ([`Communicator::probe`]), then
//! receives from that rank (`exec::p2p`).

use std::marker::PhantomData;
use std::mem::size_of_val;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabcoll_collectives::datatype::{Datatype, Element};
use fabcoll_collectives::schedule::{Buf, Region, ScheduleBuilder};
use fabcoll_fabric::Access;

use super::call::fnv;
#[cfg(doc)]
use super::Collectives;
use super::Communicator;
use crate::error::{Error, Result};
use crate::exec::op::CallSpec;
use crate::exec::plan::Plan;
use crate::exec::proto::CallSig;
use crate::exec::wait::{yield_core, Backoff, Pause, CLOCK_EVERY};
use crate::exec::Started;

/// The point-to-point context of the communicator on context `ctx`.
pub(super) fn ctx_of(ctx: u32) -> u32 {
    ctx + 1
}

/// The operation's name in errors.
fn what(outgoing: bool) -> &'static str {
    if outgoing {
        "send"
    } else {
        "recv"
    }
}

/// One transfer on this rank, checked and ready to start: the peer, the tag and the buffer lent
/// for `'b` ([`Collectives::send`], [`Collectives::recv`]).
///
/// Matching follows MPI's non-overtaking rule per ordered pair: the n-th send from rank a to rank
/// b is b's n-th receive from a. Both must have the same tag, element type and count; a
/// difference is [`Error::Mismatch`] on both ranks, and the communicator's transfers are then
/// broken (its collectives are not). Refused with a clear error: a peer out of range, a send to
/// oneself. A receive from any source is [`Communicator::recv_any`]. Not supported: a receive that
/// picks a later message from its sender by its tag, or a receive buffer longer than the message.
pub struct Transfer<'b> {
    peer: u32,
    tag: u32,
    outgoing: bool,
    ptr: *mut u8,
    bytes: usize,
    dtype: Datatype,
    _lent: PhantomData<&'b mut [u8]>,
}

impl<'b> Transfer<'b> {
    /// A send of `buf` to communicator rank `dst`.
    pub(crate) fn send<T: Element>(comm: &Communicator, buf: &'b [T], dst: u32, tag: u32) -> Result<Transfer<'b>> {
        Transfer::new(comm, buf.as_ptr().cast_mut().cast(), size_of_val(buf), T::DATATYPE, dst, tag, true)
    }

    /// A receive into `buf` from communicator rank `src`.
    pub(crate) fn recv<T: Element>(comm: &Communicator, buf: &'b mut [T], src: u32, tag: u32) -> Result<Transfer<'b>> {
        Transfer::new(comm, buf.as_mut_ptr().cast(), size_of_val(buf), T::DATATYPE, src, tag, false)
    }

    fn new(
        comm: &Communicator,
        ptr: *mut u8,
        bytes: usize,
        dtype: Datatype,
        peer: u32,
        tag: u32,
        outgoing: bool,
    ) -> Result<Transfer<'b>> {
        let what = what(outgoing);
        let invalid = |msg: String| Error::InvalidArgument { coll: what, msg };
        if peer >= comm.size() {
            return Err(invalid(format!("peer rank {peer} out of range 0..{}", comm.size())));
        }
        if peer == comm.rank() {
            return Err(invalid(format!("rank {peer} cannot {what} to itself (copy locally instead)")));
        }
        if !bytes.is_multiple_of(dtype.size()) {
            return Err(invalid(format!("{bytes} bytes are not whole {dtype} elements")));
        }
        Ok(Transfer { peer, tag, outgoing, ptr, bytes, dtype, _lent: PhantomData })
    }

    /// What tells this transfer's plan and signature apart from another's.
    fn key(&self) -> TransferKey {
        TransferKey { peer: self.peer, outgoing: self.outgoing, bytes: self.bytes, tag: self.tag, dtype: self.dtype }
    }

    /// The signature both ends compute alike (tag, element type and count) and the one-step plan
    /// of this rank's side: remembered in the communicator's memo, as a collective's are.
    fn prepared(&self, comm: &Communicator) -> (Arc<Plan>, CallSig) {
        let key = self.key();
        if let Some(p) = comm.calls().transfers.find(|k| *k == key) {
            return p.clone();
        }
        let sig = signature(self.tag, self.dtype, self.bytes);
        let count = (self.bytes / self.dtype.size()) as u64;
        let mut b = ScheduleBuilder::new(comm.rank(), comm.size());
        match self.outgoing {
            true => b.send(self.peer, Region::new(Buf::Send, 0, count), &[]),
            false => b.recv(self.peer, Region::new(Buf::Recv, 0, count), &[]),
        };
        let p = (Arc::new(Plan::transfer(b.finish(), self.tag)), sig);
        comm.calls().transfers.insert(key, p.clone());
        p
    }
}

/// What [`Communicator::probe`] found: the next transfer to this rank from `source` has `tag`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Probed {
    pub source: u32,
    pub tag: u32,
}

/// A poll's outcome for a probe: a peer that failed (a write or control message to it) is its
/// endpoint rank and why, any other error the probe's.
fn failed_peer(r: Result<()>) -> Result<Option<(usize, String)>> {
    match r {
        Ok(()) => Ok(None),
        Err(Error::Fabric(fabcoll_fabric::Error::Peer { peer, msg })) => Ok(Some((peer, msg))),
        Err(e) => Err(e),
    }
}

/// What a receive from any source into an empty buffer gets.
pub(super) fn empty_from_any_source() -> Error {
    let msg = "a receive from any source needs at least one element (a zero-length send is not announced)";
    Error::InvalidArgument { coll: "recv", msg: msg.into() }
}

/// The signature both ends of a transfer compute alike: tag, element type and byte count.
fn signature(tag: u32, dtype: Datatype, bytes: usize) -> CallSig {
    CallSig::of(fnv([0x7032_7020, u64::from(tag), dtype as u64, bytes as u64]))
}

/// A transfer as the memo knows it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct TransferKey {
    peer: u32,
    outgoing: bool,
    bytes: usize,
    tag: u32,
    dtype: Datatype,
}

impl Communicator {
    /// Starts a transfer on the engine; its buffer must stay lent until it has finished. A
    /// `blocking` one, and a nonblocking send, may run straight on the eager rings (a small
    /// message is then done as it starts); a nonblocking receive is left in flight at once.
    pub(crate) fn start_transfer(&self, t: &Transfer, blocking: bool) -> Result<Started> {
        let (plan, sig) = t.prepared(self);
        let spec = CallSpec { coll: what(t.outgoing), alg: "p2p", sig, plan: &plan, dtype: t.dtype, rop: None };
        let mut eng = self.lock();
        // SAFETY: the buffer is lent to this transfer: a blocking call waits before returning, a
        // nonblocking one lives in a `Scope` (or, through `RawCalls`, under MPI's rule) that waits
        // for it before the borrow ends. A send is only read (LOCAL), a receive may be written by
        // the peer (REMOTE_WRITE); the peer may read either where they share copies.
        let access = if t.outgoing { Access::LOCAL } else { Access::REMOTE_WRITE } | eng.core.read_access;
        let buf = unsafe { eng.bind_user(t.ptr, t.bytes, access)? };
        let (send, recv) = match t.outgoing {
            true => (buf, crate::exec::Bound::empty()),
            false => (crate::exec::Bound::empty(), buf),
        };
        let straight = self.lanes.straight && (blocking || t.outgoing);
        eng.start_transfer(ctx_of(self.ctx), &self.members, t.peer, t.outgoing, spec, send, recv, straight)
    }

    /// Waits until the next transfer to this rank from `source` (any rank when `None`; the first
    /// to arrive) has `tag` (any tag when `None`), and returns its sender and tag: MPI's
    /// `MPI_Probe`, with `MPI_ANY_SOURCE` and `MPI_ANY_TAG` as `None`. The next receive from that
    /// rank on this communicator takes the message (which must then have the receive's tag,
    /// element type and count, as any transfer's); a sender whose next transfer has another tag
    /// is passed over (its later ones wait behind it). As with `MPI_Probe`, another thread
    /// receiving from the same rank in between would take the message instead. Waits at most the
    /// communicator's timeout ([`Error::Timeout`] names the ranks probed), and stops with
    /// [`Error::PeerLost`] once every rank probed is known to be gone (a message it sent before
    /// is still found). A zero-length send moves nothing and announces nothing, so it is not
    /// found here.
    pub fn probe(&self, source: Option<u32>, tag: Option<u32>) -> Result<Probed> {
        let from = self.probed_endpoint(source)?;
        let (coll, rank) = ("recv", self.rank());
        // The ranks probed, for the errors.
        let candidates: Vec<u32> = match source {
            Some(s) => vec![s],
            None => (0..self.size()).filter(|&r| r != rank).collect(),
        };
        let _moving = self.progress.stand_by();
        let (mut w, mut blocking) = (Backoff::default(), false);
        // Endpoint ranks a poll reported failed (a write or control message to them), and why.
        let mut failed: Vec<(usize, String)> = Vec::new();
        let t0 = Instant::now();
        loop {
            let mut eng = self.lock();
            let ev = eng.events();
            if let Some(f) = failed_peer(eng.progress(blocking.then_some(Duration::from_millis(1))))? {
                failed.push(f);
            }
            if let Some((source, tag)) = eng.announced(ctx_of(self.ctx), from, tag)? {
                return Ok(Probed { source, tag });
            }
            match eng.events() == ev {
                true => match w.fruitless(&eng.core.patience, || false) {
                    Pause::Poll => {}
                    Pause::Yield => yield_core(&*eng.core.ep),
                    Pause::Stop => blocking = true,
                },
                false => w.news(),
            }
            if blocking || w.rounds.is_multiple_of(CLOCK_EVERY) {
                // Once the spin is spent, every round: ranks whose process is gone cannot send.
                let after = t0.elapsed();
                let (mut gone, mut cause) = (Vec::new(), String::new());
                for &r in candidates.iter().filter(|_| blocking) {
                    let ep = self.members[r as usize] as usize;
                    let why = eng.peer_gone(ep).or_else(|| failed.iter().find(|f| f.0 == ep).map(|f| f.1.clone()));
                    if let Some(why) = why {
                        gone.push(r);
                        cause = why;
                    }
                }
                if gone.len() == candidates.len() {
                    return Err(Error::PeerLost { coll, seq: 0, rank, peers: gone, cause });
                }
                if after >= eng.core.cfg.timeout {
                    let waiting_for = candidates.iter().copied().filter(|r| !gone.contains(r)).collect();
                    return Err(Error::Timeout { coll, seq: 0, rank, after, waiting_for });
                }
            }
        }
    }

    /// [`Communicator::probe`] that does not wait: polls once and returns what has announced
    /// itself by then, if anything (MPI's `MPI_Iprobe`).
    pub fn iprobe(&self, source: Option<u32>, tag: Option<u32>) -> Result<Option<Probed>> {
        let from = self.probed_endpoint(source)?;
        let mut eng = self.lock();
        // A peer that failed is not what is asked about (the next receive from it reports it).
        failed_peer(eng.progress(None))?;
        Ok(eng.announced(ctx_of(self.ctx), from, tag)?.map(|(source, tag)| Probed { source, tag }))
    }

    /// The endpoint rank of a probe's `source` (`None`: any), checked.
    fn probed_endpoint(&self, source: Option<u32>) -> Result<Option<usize>> {
        let invalid = |msg: String| Err(Error::InvalidArgument { coll: "recv", msg });
        match source {
            Some(s) if s >= self.size() => invalid(format!("source rank {s} out of range 0..{}", self.size())),
            Some(s) if s == self.rank() => invalid(format!("rank {s} cannot receive from itself")),
            None if self.size() < 2 => invalid("no other rank to receive from".into()),
            _ => Ok(source.map(|s| self.members[s as usize] as usize)),
        }
    }

    /// Sends `send` to rank `dest` with `send_tag` while receiving into `recv` from rank `source`
    /// (any rank when `None`, as [`Communicator::recv_any`]) with `recv_tag`, and returns the
    /// sender: MPI's `MPI_Sendrecv`. Both transfers are in flight at once, so ranks that exchange
    /// along a ring or in pairs, large messages too, do not wait for each other.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<T: Element, U: Element>(
        &self,
        send: &[T],
        dest: u32,
        send_tag: u32,
        recv: &mut [U],
        source: Option<u32>,
        recv_tag: u32,
    ) -> Result<u32> {
        if source.is_none() && recv.is_empty() {
            // Refused before the send starts: a bad call moves nothing.
            return Err(empty_from_any_source());
        }
        self.scope(|s| {
            let sent = super::Collectives::send(s, send, dest, send_tag)?;
            let (received, src) = match source {
                Some(r) => (super::Collectives::recv(s, recv, r, recv_tag)?, r),
                None => s.recv_any(recv, recv_tag)?,
            };
            received.wait()?;
            sent.wait()?;
            Ok(src)
        })
    }

    /// Receives into `buf` the first transfer to arrive from any rank with `tag`, which must
    /// have exactly `buf.len()` elements, and returns its sender ([`Communicator::probe`], then
    /// a receive from that rank): torch's `recv` without a source, MPI's `MPI_ANY_SOURCE`. An
    /// empty `buf` is refused (see [`Communicator::probe`]).
    pub fn recv_any<T: Element>(&self, buf: &mut [T], tag: u32) -> Result<u32> {
        if buf.is_empty() {
            return Err(empty_from_any_source());
        }
        let src = self.probe(None, Some(tag))?.source;
        super::Collectives::recv(self, buf, src, tag)?;
        Ok(src)
    }
}
