//! Ranks that made different calls, found without checked mode (see `proto`'s call signature): a
//! message with another call's signature, data for a call this rank finished without it (an
//! orphan), or a peer's notice becomes `Error::Mismatch` naming the peer; the rank that finds it
//! tells every peer (`Kind::Mismatch`), so that each reports the mismatch rather than a timeout.

use std::time::Instant;

use super::early::EarlyWhat;
use super::op::Op;
use super::proto::{self, CallSig, Kind};
use super::{grace, op_peers, Core, Engine, OpKey, PastWait, NOT_A_MEMBER};
use crate::error::{Error, Result};

/// What every mismatch message ends with.
pub(crate) const HINT: &str = "ranks called different collectives or passed different roots, counts, types, \
                               operations or algorithms (FABCOLL_CHECK=1 names the difference)";

/// What a point-to-point mismatch message ends with.
pub(crate) const P2P_HINT: &str = "the n-th send from one rank to another matches the n-th receive there, which must \
                                   have the same tag, element type and count";

/// Whether a message for the call whose sequence number's low bits are `low` is for a call
/// before `next` (one this rank has finished), rather than a later one: peers run at most half
/// the sequence space ahead or behind.
pub(super) fn is_past(next: u64, low: u64, mask: u64) -> bool {
    let behind = next.wrapping_sub(low) & mask;
    behind > 0 && behind <= mask / 2
}

/// "rank r", or "a peer" when the sender is not a member.
fn rank_name(rank: Option<u32>) -> String {
    rank.map_or_else(|| "a peer".to_owned(), |r| format!("rank {r}"))
}

/// Queues a mismatch notice `msg` for call `seq` of context `ctx` to each endpoint of `eps`.
fn tell(core: &mut Core, ctx: u32, seq: u64, eps: impl IntoIterator<Item = usize>, msg: &str) {
    let tag = proto::tag(Kind::Mismatch, ctx, seq, CallSig::default());
    for ep in eps {
        core.ctrl(ep, tag, msg.as_bytes().to_vec());
    }
}

/// A message of communicator rank `peer` carried another call's signature than `op`'s: tells
/// every peer of the op and returns the error.
pub(super) fn signature(core: &mut Core, op: &Op, peer: u32) -> Error {
    let rop = op.rop().map_or(String::new(), |o| format!(", {}", o.name()));
    let msg = format!(
        "{} #{}: rank {peer} made a different call than rank {}'s {} ({}, {}{rop}): {}",
        if op.key.is_p2p() { "transfer" } else { "collective" },
        op.key.number(),
        op.rank,
        op.coll,
        op.dtype(),
        op.alg,
        if op.key.is_p2p() { P2P_HINT } else { HINT },
    );
    tell(core, op.key.ctx, op.key.seq, op_peers(op), &msg);
    Error::Mismatch(msg)
}

/// What a peer's mismatch notice (`Kind::Mismatch`, its text in `data`) tells this rank.
pub(super) fn notice(peer: Option<u32>, data: &[u8]) -> String {
    format!("{} reports: {}", rank_name(peer), String::from_utf8_lossy(data))
}

impl Engine {
    /// A message from endpoint rank `peer` for call `seq_low` of context `ctx`, which this rank
    /// has finished. Data (an eager message, a grant, an RTS: the peer made another call; not a
    /// transfer's RTS, which may trail its data) or a peer's mismatch notice breaks the
    /// communicator and fails the calls this rank made since; data is also told to the context's
    /// other members. A peer's notice about that call (it was waiting for the ranks it names) is
    /// kept, so that a later timeout blames those ranks rather than the peer; one saying the peer
    /// left the call (`GaveUp`: it will not join the later calls) also opens the grace period of
    /// those started. An `Abort` (the peer's grace period began) does not, and counts only as long
    /// as a `GaveUp` could still follow it: the peer may have finished the call after all.
    /// Anything else is given back, for the early queue.
    pub(super) fn on_past(
        &mut self,
        ctx: u32,
        seq_low: u64,
        peer: usize,
        what: EarlyWhat,
    ) -> Result<Option<EarlyWhat>> {
        let Some(c) = self.ctxs.get(&ctx) else { return Ok(Some(what)) };
        let from = c.ep_to_comm.get(peer).copied().filter(|&r| r != NOT_A_MEMBER);
        let p2p = c.streams.is_some();
        let why = match &what {
            EarlyWhat::Ctrl { kind: kind @ (Kind::Abort | Kind::GaveUp), data, .. } => {
                // A transfer's peer that gave up says nothing about later transfers.
                if let (Some(from), false) = (from, p2p) {
                    self.waited_in_past(ctx, from, proto::parse_u32s(data)?, *kind == Kind::GaveUp);
                }
                return Ok(None);
            }
            EarlyWhat::Ctrl { kind: Kind::Mismatch, data, .. } => notice(from, data),
            // A transfer's announcement may come after its data (`exec::p2p`).
            EarlyWhat::Ctrl { kind: Kind::Rts, .. } if p2p => return Ok(None),
            EarlyWhat::Eager { .. }
            | EarlyWhat::Ctrl { kind: Kind::Grant | Kind::Rts | Kind::Offer | Kind::Pulled, .. } => {
                let me = c.ep_to_comm.get(self.core.ep.rank()).copied().unwrap_or(NOT_A_MEMBER);
                let msg = format!(
                    "{} made a different call: it sent data for a call that rank {me} finished without it; {HINT}",
                    rank_name(from)
                );
                let me_ep = self.core.ep.rank();
                let eps: Vec<usize> = match p2p {
                    true => vec![peer],
                    false => {
                        (0..c.ep_to_comm.len()).filter(|&e| c.ep_to_comm[e] != NOT_A_MEMBER && e != me_ep).collect()
                    }
                };
                tell(&mut self.core, ctx, seq_low, eps, &msg);
                msg
            }
            EarlyWhat::Ctrl { .. } => return Ok(Some(what)),
        };
        if let EarlyWhat::Eager { slot, .. } = what {
            self.core.release_slot(peer, slot)?;
        }
        // The peers are in an unknown state: the communicator is broken, and the calls this rank
        // made since fail with the mismatch.
        let later = self.ctxs.get(&ctx).map(|c| c.outstanding.clone()).unwrap_or_default();
        self.break_ctx(ctx, format!("collective mismatch: {why}"));
        for seq in later {
            self.fail(OpKey { ctx, seq }, Error::Mismatch(why.clone()));
        }
        Ok(None)
    }

    /// Communicator rank `from` waited for `waits` in an earlier call of `ctx`, and `left` it.
    /// A notice that the peer only began its grace period counts for twice the grace period
    /// (ranks share the timeout), within which a `GaveUp` follows if the peer fails the call.
    fn waited_in_past(&mut self, ctx: u32, from: u32, waits: Vec<u32>, left: bool) {
        let until = (!left).then(|| Instant::now() + 2 * grace(self.core.cfg.timeout));
        let Some(c) = self.ctxs.get_mut(&ctx) else { return };
        let known = PastWait { peer: from, waits: waits.clone(), until };
        match c.past_waits.iter_mut().find(|w| w.peer == from) {
            // A peer that left a call stays gone: a later notice does not make it temporary.
            Some(w) if w.until.is_none() && !left => {}
            Some(w) => *w = known,
            None => c.past_waits.push(known),
        }
        if !left {
            return;
        }
        for seq in c.outstanding.clone() {
            let key = OpKey { ctx, seq };
            let Some(op) = self.ops.get_mut(&key) else { continue };
            if op.finished() || !op.started {
                continue;
            }
            op.notices.insert(from, waits.clone());
            if op.grace_until.is_none() {
                self.begin_grace(key);
            }
        }
    }
}
