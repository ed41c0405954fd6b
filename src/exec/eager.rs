//! Eager rings: per ordered pair of ranks, S slots of E bytes in a registered buffer at the
//! receiver; the sender owns a free-slot mask (its credits) and the receiver returns freed slots in
//! batches by a `Credit` control message.
//!
//! Every rank allocates one region of p·S·E bytes at start-up (`Endpoint::alloc`, remotely
//! writable) and sends each peer a `Setup` message naming its part. Until a peer's `Setup` has
//! arrived, or when no slot is free, the sender falls back to rendezvous (RTS, then a grant), so a
//! full ring never deadlocks.

use fabcoll_fabric::{Access, Endpoint, Mr, RemoteRange};

use super::proto::{Setup, MAX_SLOTS};
use crate::error::{Error, Result};

/// One peer's state: its ring for us (sender side) and our ring for it (receiver side).
#[derive(Default)]
struct Peer {
    /// The peer's ring for our messages.
    remote: Option<Setup>,
    /// Free slots of `remote` (credits).
    free: u64,
    /// Slots of our ring for this peer that we consumed and have not returned yet.
    freed: u64,
}

pub(crate) struct Eager {
    slots: usize,
    slot_size: usize,
    ring: Option<Mr>,
    peers: Vec<Peer>,
    /// Return credits once this many slots are freed.
    batch: u32,
}

impl Eager {
    /// Allocates this rank's inbound rings (none if `slots` or `slot_size` is 0, or alone) and
    /// returns the `Setup` message for every peer. Freed slots go back to their sender once
    /// `slots / credit_fraction` of them (at least 1) have gathered.
    pub fn new(
        ep: &mut dyn Endpoint,
        slots: usize,
        slot_size: usize,
        credit_fraction: usize,
    ) -> Result<(Eager, Vec<(usize, Setup)>)> {
        let (me, p) = (ep.rank(), ep.size());
        let slots = slots.min(MAX_SLOTS);
        let mut eager = Eager {
            slots,
            slot_size,
            ring: None,
            peers: (0..p).map(|_| Peer::default()).collect(),
            batch: (slots / credit_fraction.max(1)).max(1) as u32,
        };
        if slots == 0 || slot_size == 0 || p < 2 {
            return Ok((eager, Vec::new()));
        }
        let per_peer = slots * slot_size;
        let ring = ep.alloc(per_peer * p, Access::REMOTE_WRITE)?;
        let setups = (0..p)
            .filter(|&q| q != me)
            .map(|q| {
                let s = Setup {
                    mr: ring.remote(),
                    off: (q * per_peer) as u64,
                    slots: slots as u32,
                    slot_size: slot_size as u32,
                };
                (q, s)
            })
            .collect();
        eager.ring = Some(ring);
        Ok((eager, setups))
    }

    /// Peers whose ring for us is still unknown (empty when eager is off here).
    pub fn missing_setups(&self, me: usize) -> Vec<usize> {
        if self.ring.is_none() {
            return Vec::new();
        }
        (0..self.peers.len()).filter(|&q| q != me && self.peers[q].remote.is_none()).collect()
    }

    /// The peer told us where its ring for us is.
    pub fn on_setup(&mut self, peer: usize, s: Setup) -> Result<()> {
        if s.slots as usize > MAX_SLOTS || s.slots == 0 {
            return Err(Error::Protocol(format!("rank {peer} announced an eager ring of {} slots", s.slots)));
        }
        let st = self.peer(peer)?;
        st.remote = Some(s);
        st.free = if s.slots as usize == 64 { u64::MAX } else { (1u64 << s.slots) - 1 };
        Ok(())
    }

    /// The peer freed these slots of its ring for us.
    pub fn on_credit(&mut self, peer: usize, mask: u64) -> Result<()> {
        let st = self.peer(peer)?;
        if st.free & mask != 0 {
            return Err(Error::Protocol(format!("rank {peer} returned eager slots {mask:#x} that were not in use")));
        }
        st.free |= mask;
        Ok(())
    }

    /// A free slot of `peer`'s ring for a message of `bytes`, taken; `None` if none (use
    /// rendezvous).
    pub fn take_slot(&mut self, peer: usize, bytes: usize) -> Option<(u32, RemoteRange)> {
        let st = self.peers.get_mut(peer)?;
        let s = st.remote?;
        if bytes > s.slot_size as usize || st.free == 0 {
            return None;
        }
        let slot = st.free.trailing_zeros();
        let dst = s.mr.slice(s.off as usize + slot as usize * s.slot_size as usize, bytes).ok()?;
        st.free &= !(1u64 << slot);
        Some((slot, dst))
    }

    /// Whether credits returned by `peer` could give a message of `bytes` a slot (its ring for us
    /// is known, the message fits a slot, and none is free now).
    pub fn may_refill(&self, peer: usize, bytes: usize) -> bool {
        self.peers.get(peer).is_some_and(|st| st.free == 0 && st.remote.is_some_and(|s| bytes <= s.slot_size as usize))
    }

    /// Start of `slot` of our ring for `peer`, after checking that `bytes` fit.
    pub fn slot_ptr(&self, peer: usize, slot: u32, bytes: usize) -> Result<*const u8> {
        let ring =
            self.ring.as_ref().ok_or_else(|| Error::Protocol(format!("eager write from rank {peer} but no ring")))?;
        if slot as usize >= self.slots || bytes > self.slot_size || peer >= self.peers.len() {
            return Err(Error::Protocol(format!(
                "eager message of {bytes} bytes from rank {peer} in slot {slot} (ring: {} slots of {} bytes)",
                self.slots, self.slot_size
            )));
        }
        let off = (peer * self.slots + slot as usize) * self.slot_size;
        // SAFETY: in bounds of the ring allocation (checked above: peer < p, slot < S, E bytes).
        Ok(unsafe { ring.as_ptr().add(off) })
    }

    /// We consumed `slot` of `peer`'s ring; returns the mask to send back when a batch is full.
    pub fn release(&mut self, peer: usize, slot: u32) -> Option<u64> {
        let batch = self.batch;
        let st = self.peers.get_mut(peer)?;
        st.freed |= 1u64 << slot;
        if st.freed.count_ones() >= batch {
            return Some(std::mem::take(&mut st.freed));
        }
        None
    }

    fn peer(&mut self, peer: usize) -> Result<&mut Peer> {
        self.peers.get_mut(peer).ok_or_else(|| Error::Protocol(format!("eager message from unknown rank {peer}")))
    }
}
