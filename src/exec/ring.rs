//! The runner's lane over the engine's eager rings: a call whose every message goes eager runs
//! its plan straight inside `Engine::start`, without an op, on every fabric.
//!
//! Why: on the engine a small call builds an op, tracks dependencies through work lists, routes
//! each arrival through the context's outstanding list to the op and takes the op again; that
//! machinery costs more than the messages of a small call (see `docs/measurements/`).
//!
//! The wire is the op's: eager writes with the call's context, sequence number and message index
//! in the immediate, from the same rings and credits, so peers cannot tell the two apart. The
//! call hands over to an op (`Engine::hand_over`) when a Send finds no free slot, when a control
//! message for it arrives (an RTS, a grant, an abort notice), when a wait outlasts the engine's
//! spin, when another thread waits for the engine's lock (the op releases it between polls), or
//! on an error (the op fails with it, with the engine's grace period and blame). So a straight
//! line that would wait forever across ranks cannot deadlock: it waits a spin longer.
//!
//! Completions that are not the call's go to `Engine::dispatch` as in a progress round, so the
//! collectives in flight on the engine keep moving while the call waits.

use std::collections::hash_map::Entry;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fabcoll_collectives::schedule::{Region, StepId};
use fabcoll_fabric::Completion;

use super::bufs::{Bound, Bufs};
use super::core::EagerSent;
use super::early::{Early, EarlyWhat};
use super::op::{CallSpec, Parts};
use super::plan::Plan;
use super::proto::{CallSig, Imm};
use super::runner::{self, Fused, Lane, Stop};
use super::wait::{yield_core, Backoff, Pause};
use super::{seq_match, Engine, OpKey, Started, Stats};
use crate::error::{Error, Result};

/// Per-engine state of straight calls on the rings, reused call after call.
#[derive(Default)]
pub(crate) struct RingState {
    /// The call's eager messages that arrived and were not received yet: (endpoint rank, message
    /// index, slot).
    arrived: Vec<(usize, u32, u32)>,
    /// Fused Recvs done whose message waits in its slot for the Reduce.
    fused: Vec<Fused>,
    /// Sends whose write has not completed yet.
    sending: Vec<StepId>,
    /// The call's scratch buffers (empty between calls; kept for its allocation).
    scratch: Vec<Bound>,
}

// SAFETY: the raw pointers are those of registered scratch memory the engine owns and of eager
// slots, held during one call (which runs under the engine's lock) and cleared before it returns.
unsafe impl Send for RingState {}

/// Collects a straight call's early messages as arrivals (they are all eager: a control message
/// for the call keeps it off the straight line); those with another call's signature go to
/// `wrong`, for the op that reports them.
struct EagerArrivals<'a> {
    arrived: &'a mut Vec<(usize, u32, u32)>,
    sig: CallSig,
    wrong: Vec<Early>,
}

impl Extend<Early> for EagerArrivals<'_> {
    fn extend<I: IntoIterator<Item = Early>>(&mut self, iter: I) {
        for e in iter {
            match e.what {
                EarlyWhat::Eager { sig, .. } if sig.is_some_and(|s| s != self.sig) => self.wrong.push(e),
                EarlyWhat::Eager { idx, slot, .. } => self.arrived.push((e.peer, idx, slot)),
                EarlyWhat::Ctrl { .. } => {}
            }
        }
    }
}

/// A straight call on the rings: the engine, the call's identity and its per-call state.
struct RingLane<'a> {
    eng: &'a mut Engine,
    key: OpKey,
    sig: CallSig,
    members: &'a [u32],
    st: &'a mut RingState,
    w: Backoff,
}

impl Engine {
    /// Whether call `key` may start straight: no control message for it came first, and none is
    /// queued (the op's flush would have to send it first).
    pub(super) fn may_start_straight(&self, key: OpKey) -> bool {
        self.core.ctrl_out.is_empty() && !self.early.has_ctrl_for(key)
    }

    /// Runs a call straight over the eager rings (see the module doc): done ([`Started::Done`])
    /// or taken over by an op.
    pub(super) fn run_straight(
        &mut self,
        key: OpKey,
        members: &Arc<[u32]>,
        spec: CallSpec<'_>,
        send: Bound,
        recv: Bound,
    ) -> Result<Started> {
        let mut st = self.ring.take().unwrap_or_default();
        let mut scratch = std::mem::take(&mut st.scratch);
        if !spec.plan.sched.scratch.is_empty() {
            if let Err(e) = self.bind_scratch(spec.plan, spec.dtype, &mut scratch) {
                self.give_back_scratch(&mut scratch);
                st.scratch = scratch;
                self.ring = Some(st);
                return Err(e);
            }
        }
        if !key.is_p2p() {
            // (A transfer was counted in its stream as it was numbered.)
            self.ctxs.get_mut(&key.ctx).expect("checked by start").next_seq += 1;
        }
        self.core.stats.straight_calls += 1;
        st.arrived.clear();
        st.fused.clear();
        st.sending.clear();
        // The call's eager messages that came before it started (nothing else did: checked).
        let mut early = EagerArrivals { arrived: &mut st.arrived, sig: spec.sig, wrong: Vec::new() };
        self.early.take_for(key, &mut early);
        let mut ran = 0;
        let (r, w) = if early.wrong.is_empty() {
            let bufs = Bufs { send: &send, recv: &recv, scratch: &scratch, elem: spec.dtype.size() };
            let c = runner::Call { plan: spec.plan, bufs, dtype: spec.dtype, rop: spec.rop };
            self.straight = Some(key);
            let mut lane = RingLane { eng: self, key, sig: spec.sig, members, st: &mut st, w: Backoff::default() };
            let r = runner::run(&mut lane, &c, &mut ran);
            let w = lane.w;
            self.straight = None;
            (r, w)
        } else {
            // A peer made another call: the op reports it (and tells the peers).
            for e in early.wrong {
                self.early.push(e);
            }
            (Err(Stop::HandOver), Backoff::default())
        };
        let err = match r {
            Ok(()) if st.arrived.is_empty() => {
                if !scratch.is_empty() {
                    self.give_back_scratch(&mut scratch);
                }
                st.scratch = scratch;
                self.ring = Some(st);
                return Ok(Started::Done);
            }
            // Done, but a message for the call matched none of its Recvs: the op reports it.
            Ok(()) | Err(Stop::HandOver) => None,
            Err(Stop::Failed(e)) => Some(e),
        };
        let call = Parts { spec: spec.to_op(), send, recv, scratch };
        let started = self.hand_over(key, members, call, ran, &st, &w, err);
        self.ring = Some(st);
        Ok(started)
    }

    /// Returns the registered buffers of `scratch` to the pool and empties it.
    pub(super) fn give_back_scratch(&mut self, scratch: &mut Vec<Bound>) {
        for mr in scratch.drain(..).filter_map(|b| b.mr) {
            self.core.give_back(mr);
        }
    }

    /// Makes the op the call would have been, with the first `ran` steps of its straight-line
    /// order run, and lets it go on (or fail with `err`).
    #[allow(clippy::too_many_arguments)]
    fn hand_over(
        &mut self,
        key: OpKey,
        members: &Arc<[u32]>,
        call: Parts,
        ran: usize,
        st: &RingState,
        w: &Backoff,
        err: Option<Error>,
    ) -> Started {
        self.core.stats.handovers += 1;
        if let Some(c) = self.ctxs.get_mut(&key.ctx) {
            c.outstanding.push(key.seq);
        }
        let plan: Arc<Plan> = call.spec.plan.clone();
        let mut op = self.make_op(key, members, call);
        op.adopt_done(&plan.order[..ran], &st.sending, &st.fused);
        op.t0 = Some(w.since.unwrap_or_else(std::time::Instant::now));
        op.polled = *w;
        let mask = self.core.layout.seq_mask();
        for &(peer, idx, slot) in &st.arrived {
            // Their signatures were checked when they arrived.
            let what = EarlyWhat::Eager { idx, slot, sig: None };
            self.early.push(Early { ctx: key.ctx, seq_low: key.seq & mask, mask, peer, what });
        }
        self.ops.insert(key, op);
        // A failed op issues nothing more (`admit` runs only an op without error; one that lost a
        // peer runs on through its grace period).
        if let Some(e) = err {
            self.fail(key, e);
        }
        self.admit(key, false);
        Started::Pending(key)
    }
}

impl RingLane<'_> {
    /// Polls the endpoint once: keeps the call's eager messages and write completions, hands the
    /// rest to `dispatch` (and sends what that queued); when nothing came, waits as the engine
    /// would (`awaited`: the endpoint rank the call waits for, if one).
    fn poll(&mut self, awaited: Option<usize>) -> Result<(), Stop> {
        let eng = &mut *self.eng;
        let mut comp = std::mem::take(&mut eng.comp);
        comp.append(&mut eng.core.backlog);
        if let Err(e) = eng.core.ep.poll(&mut comp) {
            eng.core.backlog.append(&mut comp);
            eng.comp = comp;
            return Err(e.into());
        }
        if comp.is_empty() {
            eng.comp = comp;
            return self.fruitless(awaited);
        }
        self.w.news();
        eng.events = eng.events.wrapping_add(1);
        let early_before = eng.early.len();
        let (key, mask) = (self.key, eng.core.layout.seq_mask());
        let (mut others, mut stop) = (false, None);
        let mut it = comp.drain(..);
        while let Some(c) = it.next() {
            match c {
                Completion::WriteArrived { peer, imm } => {
                    if let Imm::Eager { slot, ctx, seq_low, sig, idx } = eng.core.layout.decode(imm) {
                        // Another call's signature: dispatched (kept for the op, which reports it).
                        let ours = ctx == key.ctx
                            && seq_match(key.seq, seq_low, mask)
                            && (!key.is_p2p() || peer == key.p2p_peer());
                        if ours && sig.is_none_or(|s| s == self.sig) {
                            self.st.arrived.push((peer, idx, slot));
                            continue;
                        }
                    }
                }
                Completion::WriteDone { ctx: wid } if !self.st.sending.is_empty() => {
                    if let Entry::Occupied(e) = eng.core.writes.entry(wid) {
                        if e.get().0 == key {
                            let (_, s) = e.remove();
                            self.st.sending.retain(|&x| x != s);
                            continue;
                        }
                    }
                }
                Completion::WriteError { ctx: wid, .. }
                    if eng.core.writes.get(&wid).is_some_and(|&(k, _)| k == key) =>
                {
                    // The op that takes the call over fails with it (its peer is named there).
                    eng.core.backlog.push(c);
                    eng.core.backlog.extend(it.by_ref());
                    stop = Some(Stop::HandOver);
                    break;
                }
                _ => {}
            }
            others = true;
            if let Err(e) = eng.dispatch(c) {
                eng.core.backlog.extend(it.by_ref());
                stop = Some(Stop::Failed(e));
                break;
            }
        }
        drop(it);
        eng.comp = comp;
        if let Some(s) = stop {
            return Err(s);
        }
        if others {
            eng.flush()?;
            // A peer's notice broke the communicator (a mismatch found after our call started);
            // the count of broken contexts answers without a lookup while none is.
            if eng.breaks.load(Ordering::Relaxed) > 0 {
                if let Some(why) = eng.ctxs.get(&key.ctx).and_then(|c| c.broken.clone()) {
                    return Err(Stop::Failed(Error::Broken(why)));
                }
            }
            // A control message for the call (RTS, grant, abort notice) is the op's to handle.
            if eng.early.any_for_since(early_before, key) {
                return Err(Stop::HandOver);
            }
        }
        Ok(())
    }

    /// A poll that brought nothing: yield the core as the engine's waiter would, and hand over
    /// once the engine would block, or when another thread waits for the engine's lock.
    fn fruitless(&mut self, awaited: Option<usize>) -> Result<(), Stop> {
        let eng = &*self.eng;
        if eng.lock_waiters.load(Ordering::Relaxed) > 0 {
            return Err(Stop::HandOver);
        }
        let ep = &*eng.core.ep;
        match self.w.fruitless(&eng.core.patience, || awaited.is_some_and(|p| ep.peer_busy_elsewhere(p))) {
            Pause::Poll => Ok(()),
            Pause::Yield => {
                yield_core(ep);
                Ok(())
            }
            Pause::Stop => Err(Stop::HandOver),
        }
    }
}

impl Lane for RingLane<'_> {
    fn send(&mut self, bufs: &Bufs<'_>, s: StepId, peer: u32, idx: u32, src: Region) -> Result<bool, Stop> {
        let bytes = src.len as usize * bufs.elem;
        if bytes == 0 {
            return Ok(true);
        }
        let core = &mut self.eng.core;
        if bytes > core.cfg.eager_threshold {
            return Err(Stop::HandOver);
        }
        let (mr, off) = bufs.mr(src)?;
        let ep = self.members[peer as usize] as usize;
        match core.send_eager(self.key, self.sig, s, ep, idx, mr, off, bytes, true)? {
            EagerSent::Done => {}
            EagerSent::InFlight => self.st.sending.push(s),
            EagerSent::NoSlot => return Err(Stop::HandOver),
        }
        Ok(true)
    }

    fn recv(&mut self, bufs: &Bufs<'_>, s: StepId, peer: u32, idx: u32, dst: Region, fuse: bool) -> Result<bool, Stop> {
        let (dp, n) = bufs.raw(dst);
        if n == 0 {
            return Ok(true);
        }
        if n > self.eng.core.cfg.eager_threshold {
            return Err(Stop::HandOver);
        }
        let ep = self.members[peer as usize] as usize;
        let Some(i) = self.st.arrived.iter().position(|&(e, x, _)| e == ep && x == idx) else { return Ok(false) };
        let slot = self.st.arrived.swap_remove(i).2;
        let ptr = self.eng.core.receive_eager(ep, slot, dp, n, fuse)?;
        if fuse {
            self.st.fused.push(Fused { step: s, ptr, peer: ep, at: u64::from(slot) });
        }
        Ok(true)
    }

    fn idle(&mut self, peer: u32) -> Result<(), Stop> {
        self.poll(Some(self.members[peer as usize] as usize))
    }

    fn take_fused(&mut self, from: StepId) -> Option<Fused> {
        let i = self.st.fused.iter().position(|f| f.step == from)?;
        Some(self.st.fused.swap_remove(i))
    }

    fn release(&mut self, f: Fused) -> Result<(), Stop> {
        Ok(self.eng.core.release_slot(f.peer, f.at as u32)?)
    }

    fn before(&mut self, plan: &Plan, s: StepId) -> Result<(), Stop> {
        while !self.st.sending.is_empty() && plan.sched.deps(s).iter().any(|d| self.st.sending.contains(d)) {
            self.poll(None)?;
        }
        Ok(())
    }

    fn settle(&mut self) -> Result<(), Stop> {
        while !self.st.sending.is_empty() {
            self.poll(None)?;
        }
        Ok(())
    }

    fn stats(&mut self) -> &mut Stats {
        &mut self.eng.core.stats
    }
}
