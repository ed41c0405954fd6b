//! Inline calls: a blocking collective whose every message goes eager runs its schedule in a
//! straight line inside `Engine::start`, without an op, and is handed over to one when anything
//! but its own eager messages concerns it.
//!
//! Why: on the engine, a small call builds an op (`Op::reuse` of its step tables and maps),
//! enters it in the op table, tracks dependencies through work lists, routes each arrival through
//! the context's outstanding list to the op, and `take`s the op again. Callgrind on ofi:shm (p =
//! 2, 8 B allreduce, rank 0, by the difference of 2,000 and 4,000 iterations) put ~4,500 of the ~6,800
//! instructions of a call in the engine, spread thinly over that machinery, ~2,350 in libfabric.
//! The shared-memory fabrics take their own direct path (`super::direct`); this one serves every
//! fabric, through the engine's eager rings, so it needs no other memory and no set-up.
//!
//! What stays the same: the wire. The messages are the ones the op would send (eager writes with
//! the call's context, sequence number and message index in the immediate, from the same rings
//! and credits), so peers cannot tell an inline call from an op. Steps run in the plan's
//! straight-line order (`super::straight::order`): Sends as soon as their deps are done, then
//! local steps, then Recvs, each Recv waited for in turn; a Recv read by one Reduce is reduced
//! straight out of its slot, other Recvs copy the slot once (as on the engine).
//!
//! A blocking call whose part is eager Sends only takes a shorter way still (`super::fired`),
//! and goes on here when one of its writes does not complete on return.
//!
//! When the call runs inline: it is blocking, not in checked mode, every message fits the eager
//! limit, the rings at its peers have a free slot for every Send it makes (after reading returned
//! credits), no control message for it came before, and the control queue is empty. Otherwise
//! it starts an op as usual. A nonblocking call runs inline too when its part is Sends only, to
//! distinct peers (`plan::sends_only`: the root of a binomial or linear bcast, of a scatter),
//! each complete when its write returns (`Caps::completes_inline`): it never waits there, and
//! the call is done as it starts (counted in `Stats::fired_calls` as well). Such a root's call
//! cost ~3,000 instructions on the engine (tcp, p = 2, 8 B), ~1,100 of them the op's.
//!
//! The hand-over: the call becomes the op it would have been, with the steps run so far adopted
//! (`Op::adopt_done`: done, Sends whose write is in flight waiting, fused messages still in their
//! slots) and the messages for it that came meanwhile delivered, and the caller waits for the op
//! as usual. It happens when a control message for the call arrives (an RTS from a sender out of
//! slots, an abort notice, a grant), when a wait lasts as long as the engine's would before it
//! blocks (its rounds and spin budget; the op's deadline counts from the call's first wait), when
//! another thread waits for the engine's lock (the op releases it between polls), or on an error
//! (the op fails with it, with the engine's grace period and blame). So a straight line that
//! would wait forever across ranks cannot deadlock: it waits a spin budget longer.
//!
//! Cost per call: the engine's per-message work (a slot, a write; a poll and a copy or fused
//! reduction per arrival) plus a pass over the plan's steps to count the slots it needs and, per
//! step, a look at its deps while writes are in flight. Measured (callgrind, ofi:shm, p = 2, 8 B
//! allreduce, rank 0, by the difference of 2,000 and 4,000 iterations, the whole call from the
//! typed API on): 5,960 instructions per call, 7,150 on the engine (`FABCOLL_INLINE=0`), of
//! which ~2,350 are libfabric's either way. ofi:tcp p = 2, 8 B–32 KiB, 5 interleaved rounds with
//! Open MPI's tcp BTL (medians): allreduce at or below Open MPI at 12 of 13 sizes (7 on the
//! engine), allgather 7 (1), alltoall 5 (3); bcast unchanged (its receivers' calls are short
//! either way, and its root's sends went out at once before as well).
//!
//! A Send the fabric does not complete inside `write` (more than `Caps::inline_completion`
//! bytes) goes out with `Endpoint::write_settled`. On ofi `net` the completion of such a write
//! is there as soon as it is posted (the bytes went to the socket inside `fi_writedata`), and the
//! fabric takes it at once. The call then has no write to wait for, and neither the engine's
//! write table nor a poll sees it (`Stats::settled_writes`). Measured: callgrind, ofi:tcp, p = 2,
//! 1 KiB bcast, rank 0, as above: 3,991 → 3,484 instructions per call. Every write settled
//! (4,100 of 4,100 per size, 256 B–4 KiB, `fabcoll bench --stats`).
//!
//! Completions that are not this call's (credits, other calls' messages, other ops' grants and
//! writes) go to `Engine::dispatch` as in a progress round, so collectives in flight on the
//! engine keep moving while the call waits.

use std::collections::hash_map::Entry;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use fabcoll_collectives::schedule::{Buf, Region, StepId, StepKind};
use fabcoll_fabric::Completion;

use super::core::Completes;
use super::op::{receive_eager, run_local, Bound, Bufs, OpSpec, Parts};
use super::plan::{Plan, NOT_FUSED};
use super::proto::Imm;
use super::{seq_match, Early, EarlyWhat, Engine, OpKey, Started, BUSY_PEER_SPIN, CLOCK_EVERY};
use crate::error::Error;

/// How [`Engine::run_inline`] ended.
pub(super) enum Inline {
    /// Not inline: start an op with these as usual.
    Declined(OpSpec, Bound, Bound),
    /// The call ran inline: to its end ([`Started::Done`] when blocking; a nonblocking one's key
    /// is among the engine's fired calls) or until it was handed over to an op.
    Ran(Started),
}

/// Per-engine state of inline calls, reused call after call.
#[derive(Default)]
pub(crate) struct InlineState {
    /// Sends the call makes to each endpoint rank (slots it needs in that rank's ring).
    need: Vec<u32>,
    /// The call's eager messages that arrived and were not received yet: (endpoint rank, message
    /// index, slot).
    pub(super) arrived: Vec<(usize, u32, u32)>,
    /// Fused Recvs done whose message waits in its slot for the Reduce: (Recv step, (endpoint
    /// rank, slot)).
    pub(super) fused: Vec<(StepId, (usize, u32))>,
    /// Sends whose write has not completed yet (larger than the fabric completes on return).
    pub(super) sending: Vec<StepId>,
    /// The call's scratch buffers (empty between calls; kept for its allocation).
    scratch: Vec<Bound>,
}

// SAFETY: the only raw pointers are those of `scratch`'s bounds, registered scratch memory the
// engine owns, held during one inline call (which runs under the engine's lock) and cleared
// before it returns.
unsafe impl Send for InlineState {}

/// The state of the call's waits.
#[derive(Default)]
struct Wait {
    /// When the first fruitless poll came (the op's deadline counts from there after a
    /// hand-over).
    since: Option<Instant>,
    rounds: u32,
    /// Polls in a row that brought nothing.
    idle: u32,
}

/// What one poll of an inline call brought.
enum Polled {
    Something,
    Nothing,
    /// Hand the call over to an op (failing it with the error, if any).
    HandOver(Option<Error>),
}

impl Engine {
    /// Runs a call inline if it qualifies (see the module doc; a nonblocking one must be made of
    /// Sends only). `key` is the call's (its context exists and is not broken).
    pub(super) fn run_inline(
        &mut self,
        key: OpKey,
        members: &Arc<[u32]>,
        spec: OpSpec,
        send: Bound,
        recv: Bound,
        blocking: bool,
    ) -> Inline {
        let mut st = self.inline.take().unwrap_or_default();
        let mut scratch = std::mem::take(&mut st.scratch);
        let fits = self.inline_fits(key, members, &spec, &send, blocking, &mut st);
        if !fits || self.bind_scratch(&spec, &mut scratch).is_err() {
            self.give_back_scratch(&mut scratch);
            st.scratch = scratch;
            self.inline = Some(st);
            return Inline::Declined(spec, send, recv);
        }
        self.ctxs.get_mut(&key.ctx).expect("checked by start").next_seq += 1;
        self.core.stats.inline_calls += 1;
        st.arrived.clear();
        st.fused.clear();
        st.sending.clear();
        // The call's eager messages that came before it started (nothing else did: checked).
        let mut i = 0;
        while i < self.early.len() {
            let e = &self.early[i];
            match e.what {
                EarlyWhat::Eager { idx, slot } if e.ctx == key.ctx && seq_match(key.seq, e.seq_low, e.mask) => {
                    st.arrived.push((e.peer, idx, slot));
                    self.early.remove(i);
                }
                _ => i += 1,
            }
        }
        let call = Parts { spec, send, recv, scratch };
        Inline::Ran(self.inline_from(key, members, call, st, 0, blocking, None))
    }

    /// Runs a call's steps in its straight-line order from the `ran`-th on (the ones before were
    /// issued, their writes still in flight listed in `st.sending`) to the call's end or its
    /// hand-over to an op, failing it with `err` at once if there is one. Puts `st` back.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn inline_from(
        &mut self,
        key: OpKey,
        members: &Arc<[u32]>,
        mut call: Parts,
        mut st: Box<InlineState>,
        mut ran: usize,
        blocking: bool,
        err: Option<Error>,
    ) -> Started {
        let plan = &call.spec.plan;
        let order = plan.inline_order.get_or_init(|| super::straight::order(&plan.sched).into());
        let elem = call.spec.dtype.size();
        let bufs = Bufs { send: &call.send, recv: &call.recv, scratch: &call.scratch, elem };
        let mut w = Wait::default();
        let stop = match err {
            Some(e) => Some(Some(e)),
            None => self.inline_steps(key, members, &call.spec, order, &bufs, &mut st, &mut w, &mut ran),
        };
        let ended = match stop {
            None if st.arrived.is_empty() => {
                self.give_back_scratch(&mut call.scratch);
                st.scratch = call.scratch;
                if call.spec.plan.sends_only {
                    self.core.stats.fired_calls += 1;
                }
                if blocking {
                    Started::Done
                } else {
                    self.fired.push((key, call.spec.alg));
                    Started::Pending(key)
                }
            }
            // Done, but a message for the call matched none of its Recvs: the op reports it.
            None => {
                self.hand_over(key, members, call, ran, &st, &w, None);
                Started::Pending(key)
            }
            Some(e) => {
                self.hand_over(key, members, call, ran, &st, &w, e);
                Started::Pending(key)
            }
        };
        self.inline = Some(st);
        ended
    }

    /// Returns the registered buffers of `scratch` to the pool and empties it.
    fn give_back_scratch(&mut self, scratch: &mut Vec<Bound>) {
        if scratch.is_empty() {
            return;
        }
        for mr in scratch.drain(..).filter_map(|b| b.mr) {
            self.core.give_back(mr);
        }
    }

    /// Whether the call qualifies (see the module doc); counts in `st.need` the slots it takes.
    fn inline_fits(
        &mut self,
        key: OpKey,
        members: &[u32],
        spec: &OpSpec,
        send: &Bound,
        blocking: bool,
        st: &mut InlineState,
    ) -> bool {
        let core = &mut self.core;
        if !core.ctrl_out.is_empty() {
            return false;
        }
        let mine = |e: &Early| e.ctx == key.ctx && seq_match(key.seq, e.seq_low, e.mask);
        if self.early.iter().any(|e| mine(e) && matches!(e.what, EarlyWhat::Ctrl { .. })) {
            return false;
        }
        let (plan, elem) = (&spec.plan, spec.dtype.size());
        // Sized once per endpoint; zeroing in place is cheaper than `clear` + `resize`.
        let size = core.ep.size();
        if st.need.len() == size {
            st.need.fill(0);
        } else {
            st.need.clear();
            st.need.resize(size, 0);
        }
        for (s, k, _) in plan.sched.iter() {
            match *k {
                StepKind::Send { peer, src } => {
                    let bytes = src.len as usize * elem;
                    if bytes == 0 {
                        continue;
                    }
                    let registered = match src.buf {
                        Buf::Send => send.mr.is_some(),
                        // The receive buffer is bound for remote writes; scratch always is.
                        Buf::Recv | Buf::Scratch(_) => true,
                    };
                    if bytes > core.cfg.eager_threshold
                        || !registered
                        // A nonblocking call must not wait for its writes.
                        || !blocking && !core.caps.completes_inline(bytes)
                        || core.layout.encode_eager(0, key.ctx, key.seq, plan.idx[s as usize]).is_none()
                    {
                        return false;
                    }
                    st.need[members[peer as usize] as usize] += 1;
                }
                StepKind::Recv { dst, .. } if dst.len as usize * elem > core.cfg.eager_threshold => return false,
                _ => {}
            }
        }
        let short = |core: &super::Core, st: &InlineState| {
            st.need.iter().enumerate().any(|(ep, &n)| n > 0 && core.eager.free_slots(ep) < n)
        };
        // Credits the peers returned may wait in the endpoint (a sender does not poll otherwise).
        !short(core, st) || (core.refill_credits().is_ok() && !short(core, st))
    }

    /// Runs the call's steps in `order` from `*ran` on; `None` when all ran and every write
    /// completed, else the reason to hand over (`*ran`: the steps issued).
    #[allow(clippy::too_many_arguments)]
    fn inline_steps(
        &mut self,
        key: OpKey,
        members: &[u32],
        spec: &OpSpec,
        order: &[StepId],
        bufs: &Bufs<'_>,
        st: &mut InlineState,
        w: &mut Wait,
        ran: &mut usize,
    ) -> Option<Option<Error>> {
        let plan: &Plan = &spec.plan;
        while let Some(&s) = order.get(*ran) {
            // A step waits for the writes of the Sends it depends on (it may overwrite their data).
            while !st.sending.is_empty() && plan.sched.deps(s).iter().any(|d| st.sending.contains(d)) {
                if let Polled::HandOver(e) = self.inline_poll(key, st, w, None) {
                    return Some(e);
                }
            }
            let kind = *plan.sched.step(s);
            match kind {
                StepKind::Send { peer, src } => {
                    let (ep, idx, bound) = (members[peer as usize] as usize, plan.idx[s as usize], bufs.bound(src.buf));
                    if let Err(e) = self.inline_send(key, s, idx, ep, src, bound, bufs.elem, &mut st.sending) {
                        return Some(e);
                    }
                }
                StepKind::Recv { peer, dst } => {
                    let ep = members[peer as usize] as usize;
                    if let Err(e) = self.inline_recv(key, plan, s, ep, dst, bufs, st, w) {
                        return Some(e);
                    }
                }
                StepKind::Reduce { .. } | StepKind::Copy { .. } => {
                    let from = plan.fused_from[s as usize];
                    let fused = if from == NOT_FUSED {
                        None
                    } else {
                        st.fused.iter().position(|&(r, _)| r == from).map(|i| st.fused.swap_remove(i).1)
                    };
                    let r = run_local(&mut self.core, kind, &|r| bufs.raw(r), fused, spec.dtype, spec.rop.as_ref());
                    if let Err(e) = r {
                        return Some(Some(e));
                    }
                }
            }
            *ran += 1;
        }
        // The caller may reuse the send buffers once the call returns.
        while !st.sending.is_empty() {
            if let Polled::HandOver(e) = self.inline_poll(key, st, w, None) {
                return Some(e);
            }
        }
        None
    }

    /// Sends Send step `s` (message index `idx`, region `src` of `bound`, `elem` bytes per
    /// element) eagerly to endpoint rank `ep`; a write still in flight is listed in `sending`.
    /// `Err`: hand the call over (the step not issued), failing it with the error if there is one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn inline_send(
        &mut self,
        key: OpKey,
        s: StepId,
        idx: u32,
        ep: usize,
        src: Region,
        bound: &Bound,
        elem: usize,
        sending: &mut Vec<StepId>,
    ) -> Result<(), Option<Error>> {
        let bytes = src.len as usize * elem;
        if bytes == 0 {
            return Ok(());
        }
        let core = &mut self.core;
        // Slots for every Send were counted free before the call began, and only it sends now.
        let (Some(mr), Some((slot, dst))) = (bound.mr.as_ref(), core.eager.take_slot(ep, bytes)) else {
            return Err(None);
        };
        let Some(imm) = core.layout.encode_eager(slot, key.ctx, key.seq, idx) else {
            let _ = core.eager.on_credit(ep, 1u64 << slot);
            return Err(None);
        };
        let off = bound.mr_off + src.off as usize * elem;
        let how = if core.caps.completes_inline(bytes) { Completes::Inline } else { Completes::Settle(key, s) };
        if !core.write_eager(ep, mr, off, bytes, dst, imm, how).map_err(Some)? {
            sending.push(s);
        }
        Ok(())
    }

    /// Receives Recv step `s`'s message from endpoint rank `ep`, polling until it is there.
    /// `Err`: hand the call over (the step not done), failing it with the error if there is one.
    #[allow(clippy::too_many_arguments)]
    fn inline_recv(
        &mut self,
        key: OpKey,
        plan: &Plan,
        s: StepId,
        ep: usize,
        dst: Region,
        bufs: &Bufs<'_>,
        st: &mut InlineState,
        w: &mut Wait,
    ) -> Result<(), Option<Error>> {
        let (dp, n) = bufs.raw(dst);
        if n == 0 {
            return Ok(());
        }
        let idx = plan.idx[s as usize];
        loop {
            if let Some(i) = st.arrived.iter().position(|&(e, x, _)| e == ep && x == idx) {
                let slot = st.arrived.swap_remove(i).2;
                let fuse = plan.fuse[s as usize];
                receive_eager(&mut self.core, ep, slot, dp, n, fuse).map_err(Some)?;
                if fuse {
                    st.fused.push((s, (ep, slot)));
                }
                return Ok(());
            }
            if let Polled::HandOver(e) = self.inline_poll(key, st, w, Some(ep)) {
                return Err(e);
            }
        }
    }

    /// Polls the endpoint once: keeps the call's eager messages and write completions, hands the
    /// rest to `dispatch` (and sends what that queued); when nothing came, waits as the engine
    /// would (`awaited`: the endpoint rank the call waits for, if one).
    fn inline_poll(&mut self, key: OpKey, st: &mut InlineState, w: &mut Wait, awaited: Option<usize>) -> Polled {
        w.rounds = w.rounds.wrapping_add(1);
        let mut comp = std::mem::take(&mut self.comp);
        comp.append(&mut self.core.backlog);
        if let Err(e) = self.core.ep.poll(&mut comp) {
            self.core.backlog.append(&mut comp);
            self.comp = comp;
            return Polled::HandOver(Some(e.into()));
        }
        if comp.is_empty() {
            self.comp = comp;
            return self.inline_idle(w, awaited);
        }
        w.idle = 0;
        self.events = self.events.wrapping_add(1);
        let early_before = self.early.len();
        let mask = self.core.layout.seq_mask();
        let (mut others, mut stop) = (false, None);
        let mut it = comp.drain(..);
        while let Some(c) = it.next() {
            match c {
                Completion::WriteArrived { peer, imm } => {
                    if let Imm::Eager { slot, ctx, seq_low, idx } = self.core.layout.decode(imm) {
                        if ctx == key.ctx && seq_match(key.seq, seq_low, mask) {
                            st.arrived.push((peer, idx, slot));
                            continue;
                        }
                    }
                }
                Completion::WriteDone { ctx: wid } if !st.sending.is_empty() => {
                    if let Entry::Occupied(e) = self.core.writes.entry(wid) {
                        if e.get().0 == key {
                            let (_, s) = e.remove();
                            st.sending.retain(|&x| x != s);
                            continue;
                        }
                    }
                }
                Completion::WriteError { ctx: wid, .. }
                    if self.core.writes.get(&wid).is_some_and(|&(k, _)| k == key) =>
                {
                    // The op that takes the call over fails with it (its peer is named there).
                    self.core.backlog.push(c);
                    self.core.backlog.extend(it.by_ref());
                    stop = Some(None);
                    break;
                }
                _ => {}
            }
            others = true;
            if let Err(e) = self.dispatch(c) {
                self.core.backlog.extend(it.by_ref());
                stop = Some(Some(e));
                break;
            }
        }
        drop(it);
        self.comp = comp;
        if let Some(e) = stop {
            return Polled::HandOver(e);
        }
        if others {
            if let Err(e) = self.flush() {
                return Polled::HandOver(Some(e));
            }
            // A control message for the call (RTS, grant, abort notice) is the op's to handle.
            if self.early[early_before..].iter().any(|e| e.ctx == key.ctx && seq_match(key.seq, e.seq_low, e.mask)) {
                return Polled::HandOver(None);
            }
        }
        Polled::Something
    }

    /// A poll that brought nothing: yield the core as the engine's waiter would, and hand over
    /// once the engine would block (its rounds and spin budget spent, or the deadline passed).
    fn inline_idle(&mut self, w: &mut Wait, awaited: Option<usize>) -> Polled {
        w.idle = w.idle.saturating_add(1);
        if self.lock_waiters.load(Ordering::Relaxed) > 0 {
            // Another thread waits for the engine (a communicator sharing the endpoint): the op
            // releases the lock between its polls, this loop never does.
            return Polled::HandOver(None);
        }
        let since = *w.since.get_or_insert_with(Instant::now);
        if w.idle >= self.yield_after
            && (!self.oversubscribed
                || w.idle >= BUSY_PEER_SPIN
                || awaited.is_none_or(|p| !self.core.ep.peer_busy_elsewhere(p)))
        {
            self.yield_core();
        }
        if w.rounds.is_multiple_of(CLOCK_EVERY) {
            let waited = since.elapsed();
            if (w.rounds > self.min_polls && waited >= self.spin) || waited >= self.core.cfg.timeout {
                return Polled::HandOver(None);
            }
        }
        Polled::Nothing
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
        st: &InlineState,
        w: &Wait,
        err: Option<Error>,
    ) {
        self.core.stats.inline_handovers += 1;
        if let Some(c) = self.ctxs.get_mut(&key.ctx) {
            c.outstanding.push(key.seq);
        }
        let plan = call.spec.plan.clone();
        let order = plan.inline_order.get().map_or(&[][..], |o| &o[..ran]);
        let mut op = self.make_op(key, members, call);
        op.adopt_done(order, &st.sending, &st.fused);
        op.t0 = Some(w.since.unwrap_or_else(Instant::now));
        op.polled = (w.rounds, w.idle);
        let mask = self.core.layout.seq_mask();
        for &(peer, idx, slot) in &st.arrived {
            let what = EarlyWhat::Eager { idx, slot };
            self.early.push(Early { ctx: key.ctx, seq_low: key.seq & mask, mask, peer, what });
        }
        self.ops.insert(key, op);
        // A failed op issues nothing more (`admit` runs only an op without error or lost peer).
        if let Some(e) = err {
            self.fail(key, e);
        }
        self.admit(key, false);
    }
}
