//! Sends-only calls: a rank whose part of a collective is nothing but Sends to distinct peers (the
//! root of a binomial or linear bcast, of a scatter), each small enough to go eager and complete
//! on return, sends them as the call starts and is done, without an op.
//!
//! Why: such a rank waits for nothing, yet on the engine its call still builds an op (`Op::reuse`
//! of the step tables and maps), enters it in the op table, runs the work list, and `take`s it
//! again: about 1,100 of the ~3,000 instructions of a tcp bcast root's 8-byte call (callgrind,
//! p = 2, back to back), whose sends complete inline and report nothing (`Caps::completes_inline`).
//! The messages are the same ones the op would send, in the same order, with the same identity
//! (context, sequence number, message index) in their immediates, so receivers cannot tell.
//!
//! When a Send would not go eager at once (too large, not complete on return, no free slot even
//! after reading returned credits, an identity that does not fit the immediate), nothing is sent
//! and the call takes the engine as usual. A write that fails after some went out makes the op
//! the engine would have made, with the sent steps done, and fails it there: the error, the
//! grace period and the broken communicator are the engine's.

use fabcoll_collectives::schedule::{Buf, Schedule, StepId, StepKind};
use fabcoll_fabric::SILENT_WRITE;

use super::op::{Bound, OpSpec};
use super::plan::Plan;
use super::{Engine, OpKey};
use crate::error::Error;

/// Whether a plan's steps are all Sends, each to a different peer, with no scratch: the shape
/// [`Engine::fire`] may send at once.
pub(crate) fn sends_only(plan_sched: &Schedule) -> bool {
    let mut peers = Vec::new();
    for (_, k, _) in plan_sched.iter() {
        let StepKind::Send { peer, .. } = *k else { return false };
        if peers.contains(&peer) {
            return false;
        }
        peers.push(peer);
    }
    !peers.is_empty() && plan_sched.scratch.iter().all(|&n| n == 0)
}

/// How [`Engine::fire`] ended.
pub(crate) enum Fired {
    /// Every Send went out: the call is done.
    Done,
    /// Nothing was sent: run the call on the engine.
    Declined,
    /// The Sends before this step went out (the steps are in id order), then its write failed.
    Failed(StepId, Error),
}

impl Engine {
    /// Sends a sends-only call's messages at once (see the module doc). `spec.plan.fire` must
    /// hold.
    pub(super) fn fire(&mut self, key: OpKey, members: &[u32], spec: &OpSpec, send: &Bound, recv: &Bound) -> Fired {
        let plan: &Plan = &spec.plan;
        let elem = spec.dtype.size();
        let core = &mut self.core;
        // Check every Send before the first goes out: a call either sends all or none here.
        for (s, k, _) in plan.sched.iter() {
            let StepKind::Send { peer, src } = *k else { return Fired::Declined };
            let bytes = src.len as usize * elem;
            let ep = members[peer as usize] as usize;
            let bound = if src.buf == Buf::Send { send } else { recv };
            if matches!(src.buf, Buf::Scratch(_)) || bound.mr.is_none() && bytes > 0 {
                return Fired::Declined;
            }
            if bytes == 0 {
                continue;
            }
            if bytes > core.cfg.eager_threshold
                || !core.caps.completes_inline(bytes)
                || core.layout.encode_eager(0, key.ctx, key.seq, plan.idx[s as usize]).is_none()
            {
                return Fired::Declined;
            }
            // No free slot: credits may be waiting in the endpoint (a sender that only sends
            // does not poll otherwise).
            if !core.eager.has_free(ep, bytes)
                && (!core.eager.may_refill(ep, bytes)
                    || core.refill_credits().is_err()
                    || !core.eager.has_free(ep, bytes))
            {
                return Fired::Declined;
            }
        }
        for (s, k, _) in plan.sched.iter() {
            let StepKind::Send { peer, src } = *k else {
                return Fired::Failed(s, Error::Protocol("not a Send".into()));
            };
            let bytes = src.len as usize * elem;
            if bytes == 0 {
                continue;
            }
            let ep = members[peer as usize] as usize;
            let bound = if src.buf == Buf::Send { send } else { recv };
            // Registered and with a free slot: checked above (each peer appears once).
            let (Some(mr), Some((slot, dst))) = (bound.mr.as_ref(), core.eager.take_slot(ep, bytes)) else {
                return Fired::Failed(s, Error::Protocol(format!("no eager slot for rank {peer}")));
            };
            let Some(imm) = core.layout.encode_eager(slot, key.ctx, key.seq, plan.idx[s as usize]) else {
                return Fired::Failed(s, Error::Protocol("eager identity does not fit the immediate".into()));
            };
            let off = bound.mr_off + src.off as usize * elem;
            if let Err(e) = core.write_eager(ep, mr, off, bytes, dst, imm, SILENT_WRITE) {
                return Fired::Failed(s, e);
            }
        }
        Fired::Done
    }
}

#[cfg(test)]
mod tests {
    use fabcoll_collectives::{registry, CollArgs, Collective};

    use super::sends_only;

    fn shape(coll: Collective, alg: &str, rank: u32, p: u32, count: u64, segment: Option<u64>) -> bool {
        let mut a = CollArgs::new(coll, rank, p, count);
        a.elem_size = 4;
        if let Some(s) = segment {
            a.params.set("segment", s);
        }
        sends_only(&registry::find(coll, alg).unwrap().schedule(&a).unwrap())
    }

    #[test]
    fn only_ranks_that_send_once_to_each_peer_and_nothing_else_qualify() {
        for p in [2, 3, 8] {
            assert!(shape(Collective::Bcast, "binomial", 0, p, 10, None), "binomial root, p = {p}");
            assert!(shape(Collective::Bcast, "linear", 0, p, 10, None), "linear root, p = {p}");
            assert!(!shape(Collective::Bcast, "binomial", 1, p, 10, None), "a receiver, p = {p}");
        }
        // A root that sends a peer several segments, or also receives, takes the engine.
        assert!(!shape(Collective::Bcast, "binomial", 0, 2, 1000, Some(100)), "segmented");
        assert!(!shape(Collective::Bcast, "scatter_ring_allgather", 0, 4, 1000, None), "the root also receives");
        assert!(!shape(Collective::Allreduce, "recursive_doubling", 0, 2, 10, None));
        // Nothing to send (p = 1) is no sends-only call either.
        assert!(!shape(Collective::Bcast, "binomial", 0, 1, 10, None));
    }
}
