//! Fired calls: a blocking call whose part on this rank is eager Sends only, each to a different
//! peer (the root of a binomial or linear bcast; a leaf of a gather or reduce tree), posted
//! straight from [`Engine::fire`] without an op and without the inline call's general loop
//! (`super::inline`).
//!
//! Why: such a rank's call is all overhead around its writes. On the engine's inline path it
//! binds both buffers, passes over the schedule to count the slots it needs, scans the early
//! messages, and runs the steps through the general straight-line loop, which looks at each
//! step's kind and deps. Here the plan's Sends are listed once per plan ([`FiredSends`]: peer,
//! region, message index, in the straight-line order), and a call checks the conditions, binds
//! the one buffer its Sends read, and writes.
//!
//! What stays the same: the wire (the messages an op or an inline call would send: eager writes
//! with the call's context, sequence number and message index in the immediate, from the same
//! rings and credits), the counters (`Stats::inline_calls`, `Stats::fired_calls`), and what
//! happens when a write does not complete on return or fails: the call goes on as an inline call
//! from the Sends it issued (`Engine::inline_from`), which waits for the writes and hands over to
//! an op as that path does.
//!
//! When a call is fired: inline calls are on, every Send fits the eager limit and the immediate,
//! every peer it sends to has a free slot (after reading returned credits), no control message is
//! queued, nothing for the call came before it, and its context is sound with room for one more
//! collective. Otherwise [`Engine::fire`] declines before anything is sent, and the call starts as
//! usual.
//!
//! Cost per call: the checks (a pass over the call's Sends and the early messages), one buffer
//! lookup, and per Send a slot and a write. Measured (callgrind, ofi:tcp, p = 2, bcast, rank 0,
//! the whole call from the typed API on, by the difference of 2,000 and 4,000 iterations):
//! 8 B 2,801 → 2,522 instructions per call, 1 KiB 3,642 → 3,338. In time the saving is below this
//! machine's noise: 16 interleaved rounds against the build before, with the fabric's change of
//! `take_done` too, 0.98–1.00 of it at 8 B–16 KiB (paired medians).
//!
//! Repeats: applications make the same call again and again (a training step's broadcasts, a
//! benchmark's loop). A call fired to its end is kept ([`Armed`]: its plan and its bound buffer),
//! and the communicator hands the next call's [`CallId`] to [`Engine::refire`] first: the same call
//! on the same buffers fires with the same checks and writes, without selection and the plan memo
//! (their lock and comparisons) and without binding its buffer again (counted in
//! `Stats::refired_calls`). Measured the same way: 64 B 2,806 → 2,302 instructions per call,
//! 1 KiB 3,672 → 3,250 (both counts include the benchmark's ~250 of its own). In time, 8 rounds
//! against the build before at 8 B / 64 B / 1 KiB: 1.02 / 0.99 / 0.98 (paired medians), below
//! this machine's noise, where the kernel's TCP path takes ~85 % of the root's time.

use std::sync::Arc;

use fabcoll_collectives::datatype::Datatype;
use fabcoll_collectives::schedule::{Buf, Region, StepId, StepKind};
use fabcoll_collectives::Collective;
use fabcoll_fabric::Access;

use super::op::{Bound, OpSpec, Parts};
use super::plan::Plan;
use super::{seq_match, Engine, OpKey, Started};
use crate::error::Result;

/// One Send of a fired call: its step, the communicator rank it goes to, its region and its
/// message index.
#[derive(Debug)]
struct FiredSend {
    step: StepId,
    peer: u32,
    src: Region,
    idx: u32,
}

/// A sends-only plan's Sends in the straight-line order, all from one buffer.
#[derive(Debug)]
pub(crate) struct FiredSends {
    sends: Box<[FiredSend]>,
    /// The buffer every Send reads (the user's send or receive buffer).
    buf: Buf,
    /// The largest Send, in elements, and the largest message index.
    max_len: u64,
    max_idx: u32,
}

impl FiredSends {
    /// The Sends of a sends-only plan (`Plan::sends_only`), or `None` if they read more than one
    /// buffer (or scratch).
    pub(crate) fn of(plan: &Plan) -> Option<FiredSends> {
        if !plan.sends_only {
            return None;
        }
        let order = plan.inline_order.get_or_init(|| super::straight::order(&plan.sched).into());
        let mut buf = None;
        let mut sends = Vec::with_capacity(order.len());
        for &s in order.iter() {
            let StepKind::Send { peer, src } = *plan.sched.step(s) else { return None };
            if matches!(src.buf, Buf::Scratch(_)) || buf.is_some_and(|b| b != src.buf) {
                return None;
            }
            buf = Some(src.buf);
            sends.push(FiredSend { step: s, peer, src, idx: plan.idx[s as usize] });
        }
        let max_len = sends.iter().map(|s| s.src.len).max()?;
        let max_idx = sends.iter().map(|s| s.idx).max()?;
        Some(FiredSends { sends: sends.into(), buf: buf?, max_len, max_idx })
    }
}

/// What planning a blocking call depends on besides the communicator's decisions (its arguments,
/// with default options and no reduction operator) and its buffers: the key of [`Armed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallId {
    pub coll: Collective,
    pub count: u64,
    pub root: u32,
    pub elem_size: u32,
    pub in_place: bool,
    pub dtype: Datatype,
    /// The call's send and receive buffers, as address and length in bytes.
    pub send: (usize, usize),
    pub recv: (usize, usize),
}

/// The last call the engine fired to its end (on any of its contexts), kept so that the same
/// call again fires without being planned and bound anew ([`Engine::refire`]): its plan, with
/// the buffer its Sends read bound.
///
/// Valid while the plan and the binding would come out the same: the call is the same (its
/// [`CallId`]), the communicator's decisions did not change (`Engine::disarm`), and the
/// registration still stands for the buffer. The registration holds where the cache would hand
/// it out again (backends whose registrations name an address range and pin nothing, see
/// `super::mrcache`) or where the buffer is pinned; every pin, unpin, eviction of a failed call
/// and broken context disarms.
pub(crate) struct Armed {
    ctx: u32,
    id: CallId,
    spec: OpSpec,
    bound: Bound,
}

// SAFETY: `bound` points into the buffer of a call made before, which may be gone: it is only
// used (by the engine, under its lock) for a call whose `CallId` names the same buffer, which that
// call lends for its duration; between calls nothing reads it (as the MR cache's entries).
unsafe impl Send for Armed {}

impl Engine {
    /// Fires a blocking call if its plan has [`FiredSends`] (see the module doc). `send`, `recv`:
    /// the call's buffers, as pointer and length in bytes. `None`: not fired (nothing sent),
    /// start the call as usual; else done, or handed over to an op to wait for (its key). A call
    /// fired to its end with an `id` is armed for [`Engine::refire`].
    ///
    /// # Safety
    /// As for [`Engine::bind_user`]: the buffers stay lent to the call until it is waited for.
    pub(crate) unsafe fn fire(
        &mut self,
        ctx: u32,
        members: &Arc<[u32]>,
        spec: &OpSpec,
        send: (*mut u8, usize),
        recv: (*mut u8, usize),
        id: Option<CallId>,
    ) -> Option<Result<Started>> {
        let sends = spec.plan.fired()?;
        if !self.may_fire(sends, spec.dtype.size()) {
            return None;
        }
        let user = if sends.buf == Buf::Send { send } else { recv };
        // The access the usual start binds this buffer with, so that both find one registration.
        let access = if sends.buf == Buf::Send { Access::LOCAL } else { Access::REMOTE_WRITE };
        // SAFETY: forwarded from the caller.
        let bound = match unsafe { self.bind_user(user.0, user.1, access) } {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        let started = self.shoot(ctx, members, spec, sends, &bound)?;
        if let (Some(id), Ok(Started::Done)) = (id, &started) {
            let lasting = self.core.mrs.enabled() || bound.mr.as_ref().is_some_and(|b| self.is_pinned(b));
            self.armed = lasting.then(|| Box::new(Armed { ctx, id, spec: spec.clone(), bound }));
        }
        Some(started)
    }

    /// Fires the call `id` of context `ctx` again if it is the armed one (see [`Armed`]): the
    /// checks and writes of [`Engine::fire`] without planning and binding. `None`: not armed or
    /// not fired (nothing sent), go on as usual.
    ///
    /// # Safety
    /// As for [`Engine::fire`].
    pub(crate) unsafe fn refire(&mut self, ctx: u32, members: &Arc<[u32]>, id: &CallId) -> Option<Result<Started>> {
        let armed = self.armed.take_if(|a| a.ctx == ctx && a.id == *id)?;
        let sends = armed.spec.plan.fired().expect("armed by a fired call");
        let started = if self.may_fire(sends, armed.spec.dtype.size()) {
            self.shoot(ctx, members, &armed.spec, sends, &armed.bound)
        } else {
            None
        };
        match started {
            Some(Ok(Started::Done)) => self.core.stats.refired_calls += 1,
            None => {}
            // Handed over or failed: planned anew next time.
            Some(_) => return started,
        }
        self.armed = Some(armed);
        started
    }

    /// Forgets the armed call (its plan or its binding may have changed).
    pub(crate) fn disarm(&mut self) {
        self.armed = None;
    }

    /// The checks of a fired call that need neither its context nor its buffer: inline calls are
    /// on, no control message is queued, and every Send fits the eager limit.
    fn may_fire(&self, sends: &FiredSends, elem: usize) -> bool {
        let core = &self.core;
        core.cfg.inline && core.ctrl_out.is_empty() && sends.max_len as usize * elem <= core.cfg.eager_threshold
    }

    /// Sends a fired call's Sends from `bound` (the buffer they read, bound) once the checks of
    /// its context and peers hold (see the module doc); `None` before anything is sent.
    fn shoot(
        &mut self,
        ctx: u32,
        members: &Arc<[u32]>,
        spec: &OpSpec,
        sends: &FiredSends,
        bound: &Bound,
    ) -> Option<Result<Started>> {
        let st = self.ctxs.get(&ctx)?;
        if st.broken.is_some() || st.outstanding.len() as u64 >= self.core.layout.seq_window() {
            return None;
        }
        let key = OpKey { ctx, seq: st.next_seq };
        if self.core.layout.encode_eager(0, ctx, key.seq, sends.max_idx).is_none()
            || self.early.iter().any(|e| e.ctx == ctx && seq_match(key.seq, e.seq_low, e.mask))
        {
            return None;
        }
        let short =
            |e: &Engine| sends.sends.iter().any(|s| e.core.eager.free_slots(members[s.peer as usize] as usize) == 0);
        // Credits the peers returned may wait in the endpoint (a sender does not poll otherwise).
        if short(self) && (self.core.refill_credits().is_err() || short(self)) {
            return None;
        }
        self.ctxs.get_mut(&ctx).expect("looked up above").next_seq += 1;
        self.core.stats.inline_calls += 1;
        let elem = spec.dtype.size();
        let mut st = self.inline.take().unwrap_or_default();
        st.arrived.clear();
        st.fused.clear();
        st.sending.clear();
        let mut err = None;
        let mut ran = 0;
        for s in sends.sends.iter() {
            let ep = members[s.peer as usize] as usize;
            match self.inline_send(key, s.step, s.idx, ep, s.src, bound, elem, &mut st.sending) {
                Ok(()) => ran += 1,
                // Not issued (no slot, no registration): the inline path below tries it again and
                // hands over if it must.
                Err(None) => break,
                Err(Some(e)) => {
                    err = Some(e);
                    break;
                }
            }
        }
        if ran == sends.sends.len() && st.sending.is_empty() {
            self.core.stats.fired_calls += 1;
            self.inline = Some(st);
            return Some(Ok(Started::Done));
        }
        // A write to wait for, a Send not issued, or an error: on as an inline call from there.
        let (send, recv) =
            if sends.buf == Buf::Send { (bound.clone(), Bound::empty()) } else { (Bound::empty(), bound.clone()) };
        let call = Parts { spec: spec.clone(), send, recv, scratch: Vec::new() };
        Some(Ok(self.inline_from(key, members, call, st, ran, true, err)))
    }
}

#[cfg(test)]
mod tests {
    use fabcoll_collectives::schedule::{Buf, StepKind};
    use fabcoll_collectives::{registry, CollArgs, Collective};

    use super::FiredSends;
    use crate::exec::plan::Plan;

    fn plan(coll: Collective, alg: &str, rank: u32, p: u32, count: u64) -> Plan {
        let mut a = CollArgs::new(coll, rank, p, count);
        a.elem_size = 4;
        Plan::new(registry::find(coll, alg).unwrap().schedule(&a).unwrap())
    }

    #[test]
    fn a_sends_only_plan_lists_its_sends_in_the_straight_line_order() {
        for p in [2, 3, 5, 8] {
            let pl = plan(Collective::Bcast, "binomial", 0, p, 10);
            let f = FiredSends::of(&pl).expect("a binomial root fires");
            let order = pl.inline_order.get().expect("made by FiredSends::of");
            assert_eq!(f.sends.len(), order.len(), "p = {p}");
            for (s, &step) in f.sends.iter().zip(order.iter()) {
                let StepKind::Send { peer, src } = *pl.sched.step(step) else { panic!("not a Send: {step}") };
                assert_eq!(
                    (s.step, s.peer, s.src.off, s.src.len, s.idx),
                    (step, peer, src.off, src.len, pl.idx[step as usize])
                );
            }
            assert_eq!(f.buf, Buf::Recv, "bcast sends from the buffer it receives into elsewhere");
            assert_eq!(f.max_len, 10);
        }
        // A gather leaf sends its block from the send buffer.
        let f = FiredSends::of(&plan(Collective::Gather, "binomial", 3, 4, 6)).expect("a leaf fires");
        assert_eq!((f.buf, f.sends.len(), f.max_len), (Buf::Send, 1, 6));
    }

    #[test]
    fn other_plans_do_not_fire() {
        assert!(FiredSends::of(&plan(Collective::Bcast, "binomial", 1, 4, 10)).is_none(), "a receiver");
        assert!(FiredSends::of(&plan(Collective::Allreduce, "recursive_doubling", 0, 2, 10)).is_none());
        // The root's own block is copied locally: not Sends only.
        assert!(FiredSends::of(&plan(Collective::Scatter, "binomial", 0, 2, 10)).is_none());
        assert!(FiredSends::of(&plan(Collective::Bcast, "binomial", 0, 1, 10)).is_none(), "nothing to send");
    }
}
