//! The direct path: a small blocking collective on a load/store fabric (shm, local) runs its
//! schedule straight through the communicator's [`Mailbox`]es, outside the engine.
//!
//! Why: on shared memory the engine's per-call machinery (op tables, slot credits, notification
//! queue, completions, the registration cache) costs about 4,000 instructions per call, 4–8× the
//! data movement of an 8-byte collective between two cores (one cache line each way, ~0.1 µs).
//! Open MPI's vader BTL and MPICH's ch4 shm take the same shortcut for small messages.
//!
//! What stays the same: the schedule. Its steps run in a straight-line order fixed once per plan
//! (`super::straight`: Sends as early as their deps allow, then local steps, then Recvs), waiting
//! on each Send and Recv in turn, with no dependency tracking per call; a plan whose order could
//! deadlock across ranks runs on the engine. The k-th Send to a peer matches the peer's k-th
//! Recv from us (the record's tag carries k and the call's sequence number); a Recv read by
//! exactly one Reduce is reduced straight out of the record (no copy), other Recvs copy the
//! record once into their region.
//!
//! Cost per call: a record store into the peer's inbox per message, polls of our own inboxes,
//! the local steps; a repeated call takes its plan from the communicator's remembered calls
//! without the engine's lock (`comm::direct`). Measured (callgrind, p = 2, 8 B, rank 0, the whole
//! call from the typed API on, argument checks and the bench loop included): bcast root ~1,200
//! instructions, allreduce (recursive doubling: copy, send, receive, reduce) ~1,900, allgather
//! ~1,500 (with per-call dependency tracking: 1,330, 2,310, 1,800; ~4,000 on the engine).
//! p = 2 back to back, same run as Open MPI's vader (`scripts/bench-vs-openmpi.sh`, medians of
//! 5): 8 B allreduce 0.18 µs (Open MPI 0.20), allgather 0.19 (0.24), alltoall 0.16 (0.21), bcast
//! 0.09 (0.08).

use std::time::{Duration, Instant};

use fabcoll_collectives::datatype::Datatype;
use fabcoll_collectives::kernels;
use fabcoll_collectives::op::ReduceOp;
use fabcoll_collectives::schedule::{Buf, Region, StepId, StepKind};

use super::fasthash::FastMap;
use super::plan::{Plan, NOT_FUSED};
use crate::error::{Error, Result};
use fabcoll_fabric::shm::mailbox::{self, Found, Mailbox};

/// Byte counters of direct calls (added to the engine's [`super::Stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DirectCounts {
    pub msgs: u64,
    pub bytes: u64,
    /// Bytes copied out of records into Recv regions (the one copy of this path).
    pub copy_bytes: u64,
    /// Bytes reduced straight out of records (no copy).
    pub fused_bytes: u64,
    pub local_copy_bytes: u64,
    pub reduce_bytes: u64,
}

/// How a waiting direct call polls, and what it asks when it has waited long.
pub(crate) struct Waiting<'a> {
    /// Polls in a row that bring nothing before each further poll yields the core.
    pub yield_after: u32,
    /// Called every [`CHECK_EVERY`] fruitless polls with the ranks the call waits for (and when
    /// the wait began): progresses the engine's other collectives, naps after the spin budget;
    /// an `Err` (deadline passed, a peer died) ends the call with it.
    pub check: &'a mut dyn FnMut(&[u32], Instant) -> Result<()>,
}

/// Fruitless polls between two [`Waiting::check`] calls.
pub(crate) const CHECK_EVERY: u32 = 64;

/// Mailbox polls that cost about one engine progress round: a direct poll reads one line
/// (~10 ns), a round polls the endpoint's queues and the ops (~0.1–0.3 µs). The engine's
/// yield thresholds are in rounds; counted in direct polls they would yield after ~0.3 µs,
/// inside the wait for a message already on its way (p = 2, 16 B allreduce: p99 15 µs, avg
/// twice the p50, from yields that handed the core away). Not when oversubscribed: there the
/// yield is what lets the peer run (`Engine::direct_waiting`).
pub(crate) const POLLS_PER_ROUND: u32 = 32;

/// Per-communicator state reused by every direct call (no allocation per call once warm).
#[derive(Default)]
pub(crate) struct Runner {
    /// Fused Recv steps done whose record waits for its Reduce: (recv step, sender, record).
    fused: Vec<(StepId, u32, Found)>,
    /// Scratch buffers (16-byte aligned) and each one's byte offset in it.
    scratch: Vec<u128>,
    scratch_off: Vec<usize>,
}

// SAFETY: the only raw pointers are the records in `fused`, which live during one `run` (its
// Reduce steps consume them before it returns) and point into the mailbox passed to that run;
// between runs the runner holds plain data.
unsafe impl Send for Runner {}

/// One direct call's buffers and types.
pub(crate) struct Call<'a> {
    pub plan: &'a Plan,
    pub send: *mut u8,
    pub recv: *mut u8,
    pub dtype: Datatype,
    pub rop: Option<&'a ReduceOp>,
    /// The call's number among this communicator's direct calls (the same on every rank).
    pub seq: u64,
}

/// Whether and how a plan runs on the direct path: the same on every rank (a function of the
/// call's arguments), decided once per plan (`comm::direct::form`).
#[derive(Debug)]
pub(crate) enum DirectForm {
    /// On the engine: a message too large for an inbox, an order that could deadlock, or an
    /// unknown algorithm.
    Unfit,
    /// In this straight-line order of the steps (`super::straight`), proved free of deadlock.
    InOrder(Box<[StepId]>),
}

/// Polls in a row that brought nothing in the current wait, and when the call's first long wait
/// began.
#[derive(Default)]
struct Idle {
    polls: u32,
    since: Option<Instant>,
}

impl Idle {
    /// One poll that brought nothing while waiting for `peer`: spins, or yields the core after
    /// `w.yield_after` in a row; every [`CHECK_EVERY`] asks `w.check`.
    fn fruitless(&mut self, w: &mut Waiting<'_>, peer: u32) -> Result<()> {
        self.polls = self.polls.saturating_add(1);
        if self.polls.is_multiple_of(CHECK_EVERY) {
            let t0 = *self.since.get_or_insert_with(Instant::now);
            (w.check)(&[peer], t0)?;
        }
        if self.polls > w.yield_after {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        Ok(())
    }
}

impl Runner {
    /// Runs `c`'s steps in `order` (its plan's [`DirectForm::InOrder`]), each Send and Recv
    /// waited for in turn. On `Err` the communicator must not be used for direct calls again
    /// (records of this call may still arrive).
    pub fn run(
        &mut self,
        c: &Call<'_>,
        order: &[StepId],
        mb: &mut Mailbox,
        w: &mut Waiting<'_>,
    ) -> Result<DirectCounts> {
        let elem = c.dtype.size();
        self.fused.clear();
        self.bind_scratch(&c.plan.sched.scratch, elem);
        let mut st = State { c, elem, counts: DirectCounts::default() };
        let mut idle = Idle::default();
        for &s in order {
            match *c.plan.sched.step(s) {
                StepKind::Send { peer, .. } => {
                    while !self.try_send(&mut st, mb, s)? {
                        idle.fruitless(w, peer)?;
                    }
                }
                StepKind::Recv { peer, .. } => {
                    while !self.try_recv(&mut st, mb, s)? {
                        idle.fruitless(w, peer)?;
                    }
                }
                StepKind::Reduce { .. } | StepKind::Copy { .. } => self.local(&mut st, mb, s)?,
            }
            idle.polls = 0;
        }
        Ok(st.counts)
    }

    fn bind_scratch(&mut self, lens: &[u64], elem: usize) {
        self.scratch_off.clear();
        let mut total = 0usize;
        for &len in lens {
            self.scratch_off.push(total);
            total += (len as usize * elem).div_ceil(64) * 64;
        }
        let words = total.div_ceil(16);
        if self.scratch.len() < words {
            self.scratch.resize(words, 0);
        }
    }

    /// Start pointer and byte length of a region (bounds were checked when the schedule was built
    /// against the same buffer lengths).
    fn raw(&mut self, st: &State<'_>, r: Region) -> (*mut u8, usize) {
        let base = match r.buf {
            Buf::Send => st.c.send,
            Buf::Recv => st.c.recv,
            Buf::Scratch(i) => {
                // SAFETY: the offset lies inside `scratch` (sized in `bind_scratch`).
                unsafe { self.scratch.as_mut_ptr().cast::<u8>().add(self.scratch_off[i as usize]) }
            }
        };
        // SAFETY: in bounds of the buffer (see above).
        (unsafe { base.add(r.off as usize * st.elem) }, r.len as usize * st.elem)
    }

    /// Runs local step `s` (a Reduce or a Copy).
    fn local(&mut self, st: &mut State<'_>, mb: &mut Mailbox, s: StepId) -> Result<()> {
        let plan = st.c.plan;
        match *plan.sched.step(s) {
            StepKind::Reduce { src, dst, order } => {
                let (mut sp, n) = self.raw(st, src);
                let (dp, _) = self.raw(st, dst);
                let from = plan.fused_from[s as usize];
                let fused = if from == NOT_FUSED {
                    None
                } else {
                    self.fused.iter().position(|&(r, _, _)| r == from).map(|i| self.fused.swap_remove(i))
                };
                if let Some((_, _, f)) = fused {
                    // The Recv left its message in the record: reduce straight out of it.
                    sp = f.payload.cast_mut();
                }
                let rop = st.c.rop.ok_or_else(|| Error::Protocol("reduce step without an op".into()))?;
                if n > 0 {
                    // SAFETY: both regions lie in this call's buffers or a record of `n` bytes
                    // (lengths checked on arrival); they do not overlap (the schedule's checks
                    // refuse overlapping Reduce regions, and a record is not a call buffer).
                    let (a, b) = unsafe { (std::slice::from_raw_parts(sp, n), std::slice::from_raw_parts_mut(dp, n)) };
                    kernels::reduce(rop, st.c.dtype, a, b, order)?;
                }
                st.counts.reduce_bytes += n as u64;
                if let Some((_, sender, f)) = fused {
                    mb.consume(sender as usize, f.pos);
                }
            }
            StepKind::Copy { src, dst } => {
                let (sp, n) = self.raw(st, src);
                let (dp, _) = self.raw(st, dst);
                // SAFETY: as for Reduce: in bounds, non-overlapping (checked with the schedule).
                unsafe { fabcoll_fabric::copy::copy_bulk(dp, sp, n) };
                st.counts.local_copy_bytes += n as u64;
            }
            StepKind::Send { .. } | StepKind::Recv { .. } => unreachable!("a local step"),
        }
        Ok(())
    }

    /// Stores Send step `s`'s message in the peer's inbox; `false` while the inbox is full.
    fn try_send(&mut self, st: &mut State<'_>, mb: &mut Mailbox, s: StepId) -> Result<bool> {
        let StepKind::Send { peer, src } = *st.c.plan.sched.step(s) else { unreachable!("a Send step") };
        let (sp, n) = self.raw(st, src);
        if n == 0 {
            return Ok(true);
        }
        if n > mailbox::MAX_DIRECT {
            return Err(Error::Protocol(format!("direct message of {n} bytes exceeds {}", mailbox::MAX_DIRECT)));
        }
        let tag = mailbox::tag(st.c.seq, st.c.plan.idx[s as usize]);
        // SAFETY: `sp` is a region of this call's buffers, `n` bytes, at most MAX_DIRECT.
        let sent = unsafe { mb.send(peer as usize, tag, sp, n)? };
        if sent {
            st.counts.msgs += 1;
            st.counts.bytes += n as u64;
        }
        Ok(sent)
    }

    /// Receives Recv step `s`'s message if its record has arrived (`true`: the step is done).
    fn try_recv(&mut self, st: &mut State<'_>, mb: &mut Mailbox, s: StepId) -> Result<bool> {
        let plan = st.c.plan;
        let StepKind::Recv { peer, dst } = *plan.sched.step(s) else { unreachable!("a Recv step") };
        let (dp, n) = self.raw(st, dst);
        if n == 0 {
            return Ok(true);
        }
        let Some(f) = mb.find(peer as usize, mailbox::tag(st.c.seq, plan.idx[s as usize]))? else {
            return Ok(false);
        };
        if f.len != n {
            return Err(Error::Protocol(format!(
                "rank {peer} sent a {}-byte message for a {n}-byte receive (message {} of direct call {})",
                f.len, plan.idx[s as usize], st.c.seq
            )));
        }
        if plan.fuse[s as usize] {
            // Its only consumer reduces straight out of the record.
            self.fused.push((s, peer, f));
            st.counts.fused_bytes += n as u64;
        } else {
            // SAFETY: a published record of `n` bytes (nobody writes it until we consume it) and
            // a region of this call's buffers; different memory.
            unsafe { std::ptr::copy_nonoverlapping(f.payload, dp, n) };
            st.counts.copy_bytes += n as u64;
            mb.consume(peer as usize, f.pos);
        }
        Ok(true)
    }
}

struct State<'a> {
    c: &'a Call<'a>,
    elem: usize,
    counts: DirectCounts,
}

/// Message index of abort notices (no schedule has that many messages to one peer).
const NOTICE: u32 = 0x7fff_ffff;

/// After a timeout of direct call `seq`: tells every peer whom this rank waits for (`waiting`)
/// and listens for their notices for `grace` or until every peer spoke, as the engine does
/// (`Engine::check_deadline`); returns the ranks to blame (`op::suspects`: the silent ones that
/// someone waits for). Notices to a full inbox are dropped.
pub(crate) fn blame(mb: &mut Mailbox, seq: u64, rank: u32, p: u32, waiting: Vec<u32>, grace: Duration) -> Vec<u32> {
    let words = waiting.len().min(mailbox::MAX_DIRECT / 4);
    let payload: Vec<u8> = waiting[..words].iter().flat_map(|r| r.to_le_bytes()).collect();
    let tag = mailbox::tag(seq, NOTICE);
    for peer in (0..p).filter(|&q| q != rank) {
        // SAFETY: `payload` is readable for its length, at most MAX_DIRECT bytes.
        let _ = unsafe { mb.send(peer as usize, tag, payload.as_ptr(), payload.len()) };
    }
    let mut notices: FastMap<u32, Vec<u32>> = FastMap::default();
    let until = Instant::now() + grace;
    while notices.len() + 1 < p as usize && Instant::now() < until {
        for peer in (0..p).filter(|&q| q != rank) {
            if notices.contains_key(&peer) {
                continue;
            }
            // A malformed inbox: that peer's notice is lost, like one to a full inbox.
            if let Ok(Some(f)) = mb.find(peer as usize, tag) {
                // SAFETY: a published record's payload, readable until consumed.
                let bytes = unsafe { std::slice::from_raw_parts(f.payload, f.len) };
                let waits = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                mb.consume(peer as usize, f.pos);
                notices.insert(peer, waits);
            }
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    super::op::suspects(rank, waiting, &notices)
}
