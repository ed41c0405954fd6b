//! Liveness probes of an idle [`OfiEndpoint`] (see [`super::OfiConfig::probe_interval`]) and the goodbye of a
//! closing one.
//!
//! Transmit-complete writes to a dead tcp peer may all succeed (bytes handed to the socket) when nothing else is
//! sent to it. A probe is an empty control message (header flag `PROBE`) the receiving endpoint drops unseen;
//! sent to a dead peer, tcp refuses it (`-FI_EAGAIN` while rxm fails to reconnect) or fails it, and after 3
//! intervals of refusals `poll` returns [`OfiError::Peer`] naming the peer. Injected writes to a dead tcp peer are
//! refused for good (`write` keeps driving progress and probing meanwhile). Only connected peers are probed (we
//! exchanged control messages with them or injected a write to them; an unconnected live peer that does not poll
//! would look the same as a dead one), never one that said goodbye (`PROBE | GOODBYE`, sent by `Drop`): an orderly departure is not a death.

use std::time::{Duration, Instant};

use super::{OfiEndpoint, OfiError, Post, CTRL_HEADER, GOODBYE, PROBE};

impl OfiEndpoint {
    /// Sends every other connected peer a liveness probe (see [`super::OfiConfig::probe_interval`]); stops early when
    /// all control send buffers are in flight. A failed or long-refused probe names the peer.
    pub(super) fn probe(&mut self) -> Result<(), OfiError> {
        let patience = self.probe_interval.unwrap_or_default() * 3;
        for peer in 0..self.peers.len() {
            if peer as u64 == self.rank || !self.alive[peer] {
                continue;
            }
            let Some(slot) = self.free_sends.pop() else { return Ok(()) };
            let off = (self.ctrl_recv_slots + slot) * self.ctrl_max;
            self.send_peer[slot] = peer;
            self.ctrl_buf[off..off + 4].copy_from_slice(&(self.rank as u32 | PROBE).to_le_bytes());
            self.ctrl_buf[off + 4..off + CTRL_HEADER].fill(0);
            // SAFETY: off + CTRL_HEADER lies within ctrl_buf (slot < ctrl_send_slots).
            let buf = unsafe { self.ctrl_buf.as_ptr().add(off) };
            let (desc, dest) = (self.ctrl_mr.desc(), self.peers[peer]);
            // Posted directly, never deferred: probes are unordered, and one to a dead peer must not hold up others.
            match self.try_post(&Post::Send { buf, len: CTRL_HEADER, desc, dest, tag: 0, slot }) {
                Ok(()) => self.probe_refused[peer] = None,
                Err(e) if e.is_again() => {
                    self.free_sends.push(slot);
                    let since = *self.probe_refused[peer].get_or_insert_with(Instant::now);
                    if since.elapsed() >= patience {
                        let why = format!("liveness probes refused for {:?} ({e}): peer unreachable", since.elapsed());
                        return Err(OfiError::Peer { peer, source: Box::new(OfiError::Timeout(why)) });
                    }
                }
                Err(e) => {
                    self.free_sends.push(slot);
                    return Err(OfiError::Peer { peer, source: Box::new(e) });
                }
            }
        }
        Ok(())
    }

    pub(super) fn mark_alive(&mut self, peer: usize) {
        if let Some(a) = self.alive.get_mut(peer) {
            *a = !self.departed[peer];
        }
    }

    /// Orderly departure (from `Drop`, with probes on): tells every connected peer to stop probing us, and drives
    /// progress briefly (at most 200 ms) so that the messages leave before the endpoint closes.
    pub(super) fn say_goodbye(&mut self) {
        let mut sent = Vec::new();
        for peer in 0..self.peers.len() {
            if peer as u64 == self.rank || !self.alive[peer] {
                continue;
            }
            let Some(slot) = self.free_sends.pop() else { break };
            let off = (self.ctrl_recv_slots + slot) * self.ctrl_max;
            self.send_peer[slot] = peer;
            self.ctrl_buf[off..off + 4].copy_from_slice(&(self.rank as u32 | PROBE | GOODBYE).to_le_bytes());
            self.ctrl_buf[off + 4..off + CTRL_HEADER].fill(0);
            // SAFETY: off + CTRL_HEADER lies within ctrl_buf (slot < ctrl_send_slots).
            let buf = unsafe { self.ctrl_buf.as_ptr().add(off) };
            let (desc, dest) = (self.ctrl_mr.desc(), self.peers[peer]);
            match self.try_post(&Post::Send { buf, len: CTRL_HEADER, desc, dest, tag: 0, slot }) {
                Ok(()) => sent.push(slot),
                Err(_) => self.free_sends.push(slot),
            }
        }
        let t0 = Instant::now();
        while !sent.iter().all(|s| self.free_sends.contains(s)) && t0.elapsed() < Duration::from_millis(200) {
            let _ = self.progress();
        }
    }
}
