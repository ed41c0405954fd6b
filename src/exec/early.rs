//! Messages that arrived for a collective not started yet (or on a communicator not created yet
//! here), kept in arrival order until the call starts.
//!
//! A sender may run ahead of its receiver by as many calls as it has eager slots, so on a
//! repeated small call the queue holds messages of several later calls whenever a call starts.
//! Every start asks two things of it: whether a control message waits for the call (then the call
//! runs as an op), and which messages are the call's. The queue counts its control messages, so
//! the first question costs nothing while there are none; and it counts its messages per bucket of
//! the sequence number's low bits, so that taking a call's messages stops once it has passed every
//! message of the call's bucket: a call's messages arrived before those of later calls, so the
//! scan usually ends with them, however many later ones wait behind.

use std::collections::VecDeque;

use super::proto::{CallSig, Kind};
use super::{seq_match, OpKey};

/// A message for a collective not started yet.
pub(super) struct Early {
    pub ctx: u32,
    pub seq_low: u64,
    pub mask: u64,
    pub peer: usize,
    pub what: EarlyWhat,
}

pub(super) enum EarlyWhat {
    /// `sig`: the sender's call signature, when the immediate carries one.
    Eager {
        idx: u32,
        slot: u32,
        sig: Option<CallSig>,
    },
    Ctrl {
        kind: Kind,
        data: Vec<u8>,
        sig: CallSig,
    },
}

impl Early {
    /// Whether this message is for call `key`.
    #[inline]
    fn is_for(&self, key: OpKey) -> bool {
        self.ctx == key.ctx
            && seq_match(key.seq, self.seq_low, self.mask)
            && (!key.is_p2p() || key.p2p_peer() == self.peer)
    }

    fn is_ctrl(&self) -> bool {
        matches!(self.what, EarlyWhat::Ctrl { .. })
    }
}

/// Buckets of the low bits of a call's sequence number. Every mask a message carries keeps these
/// bits (eager immediates carry at least 6 bits of it, control tags 32), so a message's bucket
/// is its call's.
const BUCKETS: usize = 64;

fn bucket(seq: u64) -> usize {
    (seq % BUCKETS as u64) as usize
}

/// The early messages of an engine, in arrival order (see the module doc).
pub(super) struct EarlyQueue {
    items: VecDeque<Early>,
    /// How many of `items` are control messages.
    ctrl: usize,
    /// How many of `items` fall in each bucket.
    per_bucket: [u32; BUCKETS],
}

impl Default for EarlyQueue {
    fn default() -> EarlyQueue {
        EarlyQueue { items: VecDeque::new(), ctrl: 0, per_bucket: [0; BUCKETS] }
    }
}

impl EarlyQueue {
    pub fn push(&mut self, e: Early) {
        self.ctrl += usize::from(e.is_ctrl());
        self.per_bucket[bucket(e.seq_low)] += 1;
        self.items.push_back(e);
    }

    /// The messages waiting, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = &Early> {
        self.items.iter()
    }

    /// How many messages wait (a mark for [`EarlyQueue::any_for_since`]).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Takes out every message of context `ctx` (broken: nobody will take them), into `into`.
    pub fn take_ctx(&mut self, ctx: u32, into: &mut Vec<Early>) {
        let mut kept = VecDeque::with_capacity(self.items.len());
        for e in self.items.drain(..) {
            if e.ctx == ctx {
                self.per_bucket[bucket(e.seq_low)] -= 1;
                self.ctrl -= usize::from(e.is_ctrl());
                into.push(e);
            } else {
                kept.push_back(e);
            }
        }
        self.items = kept;
    }

    /// Whether a control message for `key` waits.
    #[inline]
    pub fn has_ctrl_for(&self, key: OpKey) -> bool {
        self.ctrl > 0 && self.items.iter().any(|e| e.is_ctrl() && e.is_for(key))
    }

    /// Whether a message for `key` came in since the queue held `mark` messages.
    pub fn any_for_since(&self, mark: usize, key: OpKey) -> bool {
        self.items.range(mark.min(self.items.len())..).any(|e| e.is_for(key))
    }

    /// Takes out the messages for `key`, in arrival order, into `into`.
    #[inline]
    pub fn take_for(&mut self, key: OpKey, into: &mut impl Extend<Early>) {
        let b = bucket(key.seq);
        let mut left = self.per_bucket[b];
        let mut i = 0;
        while left > 0 {
            let Some(e) = self.items.get(i) else { break };
            if bucket(e.seq_low) != b {
                i += 1;
                continue;
            }
            left -= 1;
            if !e.is_for(key) {
                i += 1;
                continue;
            }
            let e = self.items.remove(i).expect("looked at above");
            self.per_bucket[b] -= 1;
            self.ctrl -= usize::from(e.is_ctrl());
            into.extend(Some(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eager(ctx: u32, seq: u64, idx: u32) -> Early {
        Early { ctx, seq_low: seq & 0xff, mask: 0xff, peer: 1, what: EarlyWhat::Eager { idx, slot: idx, sig: None } }
    }

    fn ctrl(ctx: u32, seq: u64) -> Early {
        Early {
            ctx,
            seq_low: seq & 0xff,
            mask: 0xff,
            peer: 1,
            what: EarlyWhat::Ctrl { kind: Kind::Grant, data: vec![], sig: CallSig::default() },
        }
    }

    #[test]
    fn a_call_takes_its_messages_in_arrival_order_and_leaves_the_rest() {
        let mut q = EarlyQueue::default();
        for e in [eager(0, 5, 0), eager(0, 6, 0), eager(1, 5, 0), eager(0, 5, 1), ctrl(0, 6)] {
            q.push(e);
        }
        let key = OpKey { ctx: 0, seq: 5 };
        assert!(!q.has_ctrl_for(key));
        assert!(q.has_ctrl_for(OpKey { ctx: 0, seq: 6 }));
        assert!(q.has_ctrl_for(OpKey { ctx: 0, seq: 6 + 256 }), "the low bits name the call");
        let mut mine = Vec::new();
        q.take_for(key, &mut mine);
        let idx: Vec<u32> = mine
            .iter()
            .map(|e| match e.what {
                EarlyWhat::Eager { idx, .. } => idx,
                EarlyWhat::Ctrl { .. } => u32::MAX,
            })
            .collect();
        assert_eq!(idx, [0, 1]);
        assert_eq!(q.len(), 3);
        let mark = q.len();
        assert!(!q.any_for_since(mark, OpKey { ctx: 0, seq: 6 }));
        q.push(eager(0, 6, 1));
        assert!(q.any_for_since(mark, OpKey { ctx: 0, seq: 6 }));
        assert!(!q.any_for_since(mark, key));
        let mut six = Vec::new();
        q.take_for(OpKey { ctx: 0, seq: 6 }, &mut six);
        assert_eq!(six.len(), 3);
        assert!(!q.has_ctrl_for(OpKey { ctx: 0, seq: 6 }), "the control count follows what was taken");
        assert_eq!(q.ctrl, 0);
        assert_eq!(q.len(), 1);
        assert_eq!(q.per_bucket.iter().sum::<u32>(), 1);
    }

    /// A later call in the same bucket (64 calls on) is passed over, and what it leaves is found
    /// behind messages of other buckets.
    #[test]
    fn calls_sharing_a_bucket_keep_their_own_messages() {
        let mut q = EarlyQueue::default();
        let wide = |seq: u64, idx: u32| Early {
            ctx: 0,
            seq_low: seq & 0xfff,
            mask: 0xfff,
            peer: 0,
            what: EarlyWhat::Eager { idx, slot: 0, sig: None },
        };
        for e in [wide(64, 0), wide(1, 0), wide(2, 0), wide(0, 0), wide(65, 0), wide(0, 1)] {
            q.push(e);
        }
        let mut zero = Vec::new();
        q.take_for(OpKey { ctx: 0, seq: 0 }, &mut zero);
        assert_eq!(zero.len(), 2);
        assert!(zero.iter().all(|e| e.seq_low == 0));
        let mut later = Vec::new();
        q.take_for(OpKey { ctx: 0, seq: 64 }, &mut later);
        assert_eq!(later.len(), 1);
        assert_eq!(q.len(), 3);
    }
}
