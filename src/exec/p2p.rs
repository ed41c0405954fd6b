//! Point-to-point transfers on the engine: a tagged `send` or `recv` is an op whose one-step plan
//! (a Send or a Recv) runs on the same eager slots, rendezvous and zero-copy grants as the
//! collectives' steps, on a context of its own that every communicator reserves beside its
//! collective one (`Communicator::p2p_ctx`).
//!
//! Matching. Only two ranks take part in a transfer, so the collectives' numbering (one sequence
//! per context, every member making every call) does not apply. Each ordered pair of ranks is a
//! *stream*: the n-th send of a to b is b's n-th receive from a, as in MPI's non-overtaking rule
//! (and as NCCL matches its point-to-point calls). The tag travels in the call signature, so a
//! receive whose tag (or element type, or count) differs from the matching send's is reported as
//! a mismatch on both ranks instead of taking the wrong message; a receive cannot pick a later
//! message by its tag (no out-of-order tag matching).
//!
//! Any source. A receive from any source ([`Engine::announced`]) takes the rank whose next
//! transfer to this rank, in arrival order, has announced itself with the receive's tag, then
//! receives from it as from a named rank, so the per-pair numbering stays as it is (MPI's probe
//! and receive). An eager message is its own announcement (a transfer's message index is its
//! tag, `Plan::transfer`, so eager immediates and RTS carry it whole; one too large for the
//! immediate goes by RTS). A larger transfer waits for its receiver's grant and sends nothing
//! first, unless its receiver receives from any source: the first such receive on a
//! communicator asks every peer (`Kind::AnySource`), which from then on sends an RTS for each
//! transfer to it that waits for a grant, those waiting already included. So transfers between
//! ranks that always name their sender cost what they did. A zero-length send moves nothing and
//! announces nothing.
//!
//! Wire. The messages of a stream carry w = 2n + d in the sequence field of eager immediates and
//! control tags, where d = 1 when the sender's endpoint rank is above the receiver's: the two
//! streams between a pair (a → b: data from a and grants from b; b → a: the reverse) differ in that
//! bit, so a message from a peer names its stream by its parity. The engine keys such an op by
//! `P2P | peer << 32 | w` (`Streams::next_key`): unique per peer and direction on this rank.

use super::early::EarlyWhat;
use super::proto::{self, CallSig, Kind};
use super::{seq_match, CtxState, Engine, OpKey, Route, NOT_A_MEMBER};
use crate::error::{Error, Result};
use crate::exec::mismatch;

/// The flag of a point-to-point op's sequence key.
pub(crate) const P2P: u64 = 1 << 63;
const PEER_SHIFT: u32 = 32;
const LOW: u64 = (1 << PEER_SHIFT) - 1;

/// The per-stream counters of a point-to-point context: transfers started per (peer endpoint,
/// direction).
#[derive(Default)]
pub(super) struct Streams {
    next: super::FastMap<u64, u64>,
    /// The peers were asked to announce their transfers (a receive from any source ran here).
    asked: bool,
}

fn stream_id(peer: usize, outgoing: bool) -> u64 {
    ((peer as u64) << 1) | u64::from(outgoing)
}

/// The direction bit of the stream from endpoint `sender` to endpoint `receiver`.
fn parity(sender: usize, receiver: usize) -> u64 {
    u64::from(sender > receiver)
}

/// The wire sequence number of the `n`-th transfer from `sender` to `receiver`.
fn wire(n: u64, sender: usize, receiver: usize) -> u64 {
    (2 * n + parity(sender, receiver)) & LOW
}

/// The op key of a transfer with endpoint `peer` whose wire number is `w`.
fn key_seq(peer: usize, w: u64) -> u64 {
    P2P | ((peer as u64) << PEER_SHIFT) | (w & LOW)
}

impl OpKey {
    /// Whether this is a point-to-point transfer's key.
    pub(crate) fn is_p2p(&self) -> bool {
        self.seq & P2P != 0
    }

    /// The peer endpoint of a point-to-point key.
    pub(crate) fn p2p_peer(&self) -> usize {
        ((self.seq & !P2P) >> PEER_SHIFT) as usize
    }

    /// The number users see in messages: a collective's sequence number, a transfer's index in
    /// its stream.
    pub(crate) fn number(&self) -> u64 {
        match self.is_p2p() {
            true => (self.seq & LOW) >> 1,
            false => self.seq,
        }
    }
}

impl Streams {
    /// The key of the next transfer between this rank (endpoint `me`) and endpoint `peer` in the
    /// direction `outgoing`, counted as started.
    pub(super) fn next_key(&mut self, ctx: u32, me: usize, peer: usize, outgoing: bool) -> OpKey {
        let key = self.peek_key(ctx, me, peer, outgoing);
        *self.next.entry(stream_id(peer, outgoing)).or_insert(0) += 1;
        key
    }

    /// The key [`Streams::next_key`] would give, not counted.
    fn peek_key(&self, ctx: u32, me: usize, peer: usize, outgoing: bool) -> OpKey {
        let n = self.next.get(&stream_id(peer, outgoing)).copied().unwrap_or(0);
        let (sender, receiver) = if outgoing { (me, peer) } else { (peer, me) };
        OpKey { ctx, seq: key_seq(peer, wire(n, sender, receiver)) }
    }

    /// Where a message from endpoint `peer` (to this rank, endpoint `me`) with wire number
    /// `seq_low` (under `mask`) goes: the op of its stream that has that number, else a past
    /// transfer (one this rank finished) or a later one (not started yet, or the one running
    /// `straight`, which takes it from the early queue).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn route(
        &self,
        c: &CtxState,
        ctx: u32,
        me: usize,
        peer: usize,
        seq_low: u64,
        mask: u64,
        straight: Option<OpKey>,
    ) -> Route {
        let is = |s: u64| OpKey { ctx, seq: s }.p2p_peer() == peer && seq_match(s, seq_low, mask);
        if let Some(&seq) = c.outstanding.iter().find(|&&s| is(s)) {
            return Route::Op(OpKey { ctx, seq });
        }
        if straight.is_some_and(|k| k.ctx == ctx && is(k.seq)) {
            return Route::Later;
        }
        // The parity says whose data it is: the peer's (for a receive here) or ours (a grant).
        let from_peer = seq_low & 1 == parity(peer, me);
        let (sender, receiver) = if from_peer { (peer, me) } else { (me, peer) };
        let n = self.next.get(&stream_id(peer, !from_peer)).copied().unwrap_or(0);
        match mismatch::is_past(wire(n, sender, receiver), seq_low, mask) {
            true => Route::Past,
            false => Route::Later,
        }
    }
}

impl Engine {
    /// The communicator rank and tag of the transfer to this rank (on point-to-point context
    /// `ctx`) that is the next from its sender and came first, among those from endpoint `from`
    /// (any when `None`) with `tag` (any when `None`), once it has announced itself: an eager
    /// message or an RTS for it waits in the early queue (a transfer's message index is its tag,
    /// `Plan::transfer`). `None` while none has. A receive from that rank now takes it. The first
    /// call on a context asks its members to announce their transfers.
    pub fn announced(&mut self, ctx: u32, from: Option<usize>, tag: Option<u32>) -> Result<Option<(u32, u32)>> {
        self.ask_for_announcements(ctx);
        let c = self.ctxs.get(&ctx).ok_or_else(|| Error::Protocol(format!("unknown context {ctx}")))?;
        if let Some(why) = &c.broken {
            return Err(Error::Broken(why.clone()));
        }
        let streams =
            c.streams.as_deref().ok_or_else(|| Error::Protocol(format!("context {ctx} is not point-to-point")))?;
        let me = self.core.ep.rank();
        let found = self.early.iter().find_map(|e| {
            let theirs = match &e.what {
                EarlyWhat::Eager { idx, .. } => *idx,
                EarlyWhat::Ctrl { kind: Kind::Rts, data, .. } => u32::from_le_bytes(data.get(..4)?.try_into().ok()?),
                EarlyWhat::Ctrl { .. } => return None,
            };
            let next = seq_match(streams.peek_key(ctx, me, e.peer, false).seq, e.seq_low, e.mask);
            let rank = c.ep_to_comm.get(e.peer).copied().filter(|&r| r != NOT_A_MEMBER)?;
            let wanted = tag.is_none_or(|t| t == theirs) && from.is_none_or(|f| f == e.peer);
            (e.ctx == ctx && next && wanted).then_some((rank, theirs))
        });
        Ok(found)
    }

    /// Tells every other member of point-to-point context `ctx` that this rank receives from any
    /// source there (`Kind::AnySource`), once.
    fn ask_for_announcements(&mut self, ctx: u32) {
        let me = self.core.ep.rank();
        let Some(c) = self.ctxs.get_mut(&ctx) else { return };
        let Some(streams) = c.streams.as_deref_mut() else { return };
        if std::mem::replace(&mut streams.asked, true) {
            return;
        }
        let tag = proto::tag(Kind::AnySource, ctx, 0, CallSig::default());
        for ep in (0..c.ep_to_comm.len()).filter(|&e| e != me && c.ep_to_comm[e] != NOT_A_MEMBER) {
            self.core.ctrl(ep, tag, Vec::new());
        }
        // A peer that is gone refuses it; it has nothing to announce.
        self.flush_ctrl_lossy();
    }

    /// Endpoint rank `peer` receives from any source on point-to-point context `ctx`: every
    /// transfer to it announces itself from now on, those waiting for its grant at once.
    pub(super) fn on_any_source(&mut self, ctx: u32, peer: usize) {
        if !self.core.announce_to.insert((ctx, peer)) {
            return;
        }
        for (key, op) in &mut self.ops {
            if key.ctx == ctx && key.is_p2p() && key.p2p_peer() == peer && op.error.is_none() {
                op.announce(&mut self.core);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_streams_of_a_pair_differ_in_parity_and_keys() {
        let mut a = Streams::default();
        let mut b = Streams::default();
        // Endpoint 3 sends twice to 5 and receives once from it; 5 mirrors that.
        let s0 = a.next_key(7, 3, 5, true);
        let s1 = a.next_key(7, 3, 5, true);
        let r0 = a.next_key(7, 3, 5, false);
        let rb0 = b.next_key(7, 5, 3, false);
        let rb1 = b.next_key(7, 5, 3, false);
        let sb0 = b.next_key(7, 5, 3, true);
        for (x, y) in [(s0, rb0), (s1, rb1), (r0, sb0)] {
            assert_eq!(x.seq & LOW, y.seq & LOW, "both ends number a transfer alike");
            assert_eq!((x.number(), x.p2p_peer(), y.p2p_peer()), (y.number(), 5, 3));
        }
        assert_ne!(s0.seq & 1, r0.seq & 1, "the directions differ in the low bit");
        assert!(s0.is_p2p() && !OpKey { ctx: 7, seq: 12 }.is_p2p());
        assert_eq!((s0.number(), s1.number(), r0.number()), (0, 1, 0));
    }

    fn ctx_with(outstanding: Vec<u64>) -> CtxState {
        CtxState {
            ep_to_comm: (0..8).collect(),
            next_seq: 0,
            outstanding,
            broken: None,
            past_waits: Vec::new(),
            streams: None,
        }
    }

    fn routed(r: Route) -> &'static str {
        match r {
            Route::Op(_) => "op",
            Route::Drop => "drop",
            Route::Past => "past",
            Route::Later => "later",
        }
    }

    #[test]
    fn a_message_goes_to_its_stream_by_peer_and_parity() {
        // This rank is endpoint 3; its receives from 5 and its sends to 5 are two streams.
        let (me, mask) = (3, (1 << 16) - 1);
        let mut st = Streams::default();
        let recv0 = st.next_key(9, me, 5, false);
        let data0 = recv0.seq & LOW;
        // Running: 5's data for receive 0 goes to its op; the same number from 6 does not.
        let c = ctx_with(vec![recv0.seq]);
        assert_eq!(routed(st.route(&c, 9, me, 5, data0, mask, None)), "op");
        assert_eq!(routed(st.route(&c, 9, me, 6, data0, mask, None)), "later");
        // Finished: the same message again is past; the next one from 5 is later.
        let done = ctx_with(Vec::new());
        assert_eq!(routed(st.route(&done, 9, me, 5, data0, mask, None)), "past");
        assert_eq!(routed(st.route(&done, 9, me, 5, data0 + 2, mask, None)), "later");
        // A grant from 5 for this rank's first send (the other parity) is later, not past, though
        // the receive stream with 5 has moved on; once that send was counted, it is past.
        let grant0 = OpKey { ctx: 9, seq: key_seq(5, wire(0, me, 5)) }.seq & LOW;
        assert_ne!(grant0 & 1, data0 & 1);
        assert_eq!(routed(st.route(&done, 9, me, 5, grant0, mask, None)), "later");
        let send0 = st.next_key(9, me, 5, true);
        assert_eq!(send0.seq & LOW, grant0);
        assert_eq!(routed(st.route(&done, 9, me, 5, grant0, mask, None)), "past");
        // The call running straight takes its own messages from the early queue.
        assert_eq!(routed(st.route(&done, 9, me, 5, grant0, mask, Some(send0))), "later");
    }
}
