//! Resources of one endpoint shared by all collectives in flight: the endpoint, eager rings,
//! write and grant bookkeeping, the control-message queue, counters, MR cache and scratch pool.

use fabcoll_fabric::{Access, Caps, Completion, Endpoint, Mr, RemoteRange, SILENT_WRITE};

use super::eager::Eager;
use super::fasthash::{FastMap, FastSet};
use super::mrcache::MrCache;
use super::proto::{self, CallSig, ImmLayout, Kind};
use super::wait::{retry_busy, Patience};
use super::{ExecConfig, OpKey, Stats};
use crate::error::Result;

/// Resources shared by all ops of an endpoint.
pub(crate) struct Core {
    pub ep: Box<dyn Endpoint>,
    pub caps: Caps,
    pub layout: ImmLayout,
    pub cfg: ExecConfig,
    pub eager: Eager,
    pub writes: FastMap<u64, (OpKey, u32)>,
    pub next_write: u64,
    /// The grants this rank gave and whose writes have not all arrived: per (peer, grant id),
    /// the op and step they fill and the segments still to come.
    pub grants_in: FastMap<(usize, u64), (OpKey, u32, u32)>,
    pub next_gid: Vec<u64>,
    pub backlog: Vec<Completion>,
    pub ctrl_out: Vec<(usize, u64, Vec<u8>)>,
    /// Some op queued grants or RTS messages (in its `grant_out`/`rts_out`) since the last flush.
    pub ctrl_queued: bool,
    pub stats: Stats,
    pub mrs: MrCache,
    pub pool: Vec<Mr>,
    /// `REMOTE_READ` when peers may read this rank's buffers ([`Core::shares_copy`]), which every
    /// registration of a call's buffers then carries; else `LOCAL`.
    pub read_access: Access,
    /// When waiters yield and stop spinning; `oversubscribed` also tells a receiver whether it
    /// can copy beside its sender rather than take turns with it on a shared CPU.
    pub patience: Patience,
    /// (point-to-point context, endpoint rank) of receivers that receive from any source: every
    /// transfer to them announces itself (`exec::p2p`).
    pub announce_to: FastSet<(u32, usize)>,
}

/// What [`Core::send_eager`] did with a message.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum EagerSent {
    /// Written, and complete: the source may be reused.
    Done,
    /// Written; its completion comes as write `(key, step)` through the write table.
    InFlight,
    /// No slot of the peer's ring is free (or the identity does not fit the immediate): nothing
    /// was written; the message goes by rendezvous.
    NoSlot,
}

impl Core {
    pub fn new_write(&mut self, key: OpKey, step: u32) -> u64 {
        self.next_write += 1;
        self.writes.insert(self.next_write, (key, step));
        self.next_write
    }

    /// A grant to `peer` for step `step` of `key`, filled by `segments` writes.
    pub fn new_grant(&mut self, peer: usize, key: OpKey, step: u32, segments: u32) -> u64 {
        let gid = self.next_gid[peer] & self.layout.gid_mask();
        self.next_gid[peer] = self.next_gid[peer].wrapping_add(1);
        self.grants_in.insert((peer, gid), (key, step, segments));
        gid
    }

    /// A write arrived from `peer` under grant `gid`: the op and step it fills (`None`: the grant
    /// was withdrawn, its op failed here). The grant is forgotten with its last segment.
    pub fn grant_arrived(&mut self, peer: usize, gid: u64) -> Option<(OpKey, u32)> {
        let e = self.grants_in.get_mut(&(peer, gid))?;
        let hit = (e.0, e.1);
        e.2 = e.2.saturating_sub(1);
        if e.2 == 0 {
            self.grants_in.remove(&(peer, gid));
        }
        Some(hit)
    }

    /// Sends message `idx` of step `step` of collective `key` eagerly: `bytes` at `off` of `mr`
    /// into a free slot of endpoint rank `peer`'s ring (reading the credits the peer returned
    /// when none is free). A write the fabric does not complete on return is looked for once at
    /// once if `settle` (the caller waits for it next: `Endpoint::write_settled`), and else
    /// entered in the write table.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn send_eager(
        &mut self,
        key: OpKey,
        sig: CallSig,
        step: u32,
        peer: usize,
        idx: u32,
        mr: &Mr,
        off: usize,
        bytes: usize,
        settle: bool,
    ) -> Result<EagerSent> {
        let mut taken = self.eager.take_slot(peer, bytes);
        if taken.is_none() && self.eager.may_refill(peer, bytes) {
            // A sender whose writes complete inline may not have polled since its last call:
            // the credits it lacks may be waiting in the endpoint.
            self.refill_credits()?;
            taken = self.eager.take_slot(peer, bytes);
        }
        let Some((slot, dst)) = taken else { return Ok(EagerSent::NoSlot) };
        let Some(imm) = self.layout.encode_eager(slot, key.ctx, key.seq, sig, idx) else {
            self.eager.on_credit(peer, 1u64 << slot)?;
            return Ok(EagerSent::NoSlot);
        };
        self.stats.eager_msgs += 1;
        self.stats.eager_bytes += bytes as u64;
        if self.caps.completes_inline(bytes) {
            self.write(peer, mr, off, bytes, dst, Some(imm), SILENT_WRITE, false)?;
            return Ok(EagerSent::Done);
        }
        // The id is entered only if the write stays in flight.
        let wid = self.next_write + 1;
        self.next_write = wid;
        if self.write(peer, mr, off, bytes, dst, Some(imm), wid, settle)? {
            self.stats.settled_writes += 1;
            return Ok(EagerSent::Done);
        }
        self.writes.insert(wid, (key, step));
        Ok(EagerSent::InFlight)
    }

    /// A write (with [`Endpoint::write_settled`] if `settle`), retried while the fabric is busy.
    /// Whether the write completed already (always `false` without `settle`).
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &mut self,
        peer: usize,
        mr: &Mr,
        off: usize,
        len: usize,
        dst: RemoteRange,
        imm: Option<u64>,
        wid: u64,
        settle: bool,
    ) -> Result<bool> {
        let src = mr.slice(off, len)?;
        let (timeout, backlog) = (self.cfg.timeout, &mut self.backlog);
        let r = retry_busy(&mut *self.ep, backlog, timeout, peer, "write queue", |ep| {
            if settle {
                ep.write_settled(peer, src, dst, imm, wid)
            } else {
                ep.write(peer, src, dst, imm, wid).map(|()| false)
            }
        });
        if r.is_err() && wid != SILENT_WRITE {
            self.writes.remove(&wid);
        }
        r
    }

    /// Whether a zero-copy message of `bytes` between this rank and endpoint rank `ep` is copied
    /// by both (`ExecConfig::shared_copy_min`): the sender writes the first half, the receiver
    /// reads the rest.
    pub fn shares_copy(&self, ep: usize, bytes: usize) -> bool {
        self.reads_at_least(self.cfg.shared_copy_min, ep, bytes)
    }

    /// Whether a zero-copy message of `bytes` from endpoint rank `ep`, whose Recv only feeds a
    /// Reduce, is asked for whole, for the Reduce to read it out of the sender's buffer
    /// (`ExecConfig::pull_reduce_min`).
    pub fn pulls_reduce(&self, ep: usize, bytes: usize) -> bool {
        self.reads_at_least(self.cfg.pull_reduce_min, ep, bytes)
    }

    /// Whether this rank and endpoint rank `ep` read each other's buffers (registered readable
    /// and a fabric that reads: shm) for messages of `bytes`, given a setting's minimum `min`
    /// (0: never).
    fn reads_at_least(&self, min: usize, ep: usize, bytes: usize) -> bool {
        min > 0 && bytes >= min && self.read_access == Access::REMOTE_READ && self.ep.reads_from(ep)
    }

    /// Forgets grant `gid` to endpoint rank `peer`: its message came another way (offered whole).
    pub fn forget_grant(&mut self, peer: usize, gid: u64) {
        self.grants_in.remove(&(peer, gid));
    }

    /// Queues a control message (sent by `flush_ctrl`, retried while busy).
    pub fn ctrl(&mut self, peer: usize, tag: u64, data: Vec<u8>) {
        self.ctrl_out.push((peer, tag, data));
    }

    pub fn flush_ctrl(&mut self) -> Result<()> {
        let (timeout, backlog) = (self.cfg.timeout, &mut self.backlog);
        for i in 0..self.ctrl_out.len() {
            let (peer, tag, ref data) = self.ctrl_out[i];
            let r =
                retry_busy(&mut *self.ep, backlog, timeout, peer, "control queue", |ep| ep.send_ctrl(peer, tag, data));
            if let Err(e) = r {
                self.ctrl_out.drain(..=i);
                return Err(e);
            }
        }
        self.ctrl_out.clear();
        Ok(())
    }

    /// We consumed an eager slot: free it, returning credits when a batch is full.
    pub fn release_slot(&mut self, peer: usize, slot: u32) -> Result<()> {
        if let Some(mask) = self.eager.release(peer, slot) {
            // Credits are independent of other control messages: send at once (no allocation);
            // if that fails, queue them so that `flush_ctrl` retries or reports as for any other.
            let tag = proto::tag(Kind::Credit, 0, 0, CallSig::default());
            if self.ep.send_ctrl(peer, tag, &mask.to_le_bytes()).is_err() {
                self.ctrl(peer, tag, mask.to_le_bytes().to_vec());
            }
        }
        Ok(())
    }

    /// Receives the eager message of `n` bytes from endpoint rank `peer` in `slot`: copies it to
    /// `dst` (the one copy) and frees the slot, or, for a Recv fused with its Reduce (`fuse`),
    /// leaves it in the slot for that Reduce (no copy at all) and returns where it is.
    pub fn receive_eager(&mut self, peer: usize, slot: u32, dst: *mut u8, n: usize, fuse: bool) -> Result<*const u8> {
        let sp = self.eager.slot_ptr(peer, slot, n)?;
        if fuse {
            self.stats.eager_fused_bytes += n as u64;
            return Ok(sp);
        }
        // SAFETY: the slot holds a complete message (its WriteArrived was seen) and nobody writes
        // it until we return it; the destination is a bound, quiet Recv region of `n` bytes; they
        // are different allocations.
        unsafe { fabcoll_fabric::copy::copy_bulk(dst, sp, n) };
        self.stats.eager_copy_bytes += n as u64;
        self.release_slot(peer, slot)?;
        Ok(sp)
    }

    /// Polls the endpoint once and applies the eager credits that came back; everything else it
    /// brought waits in `backlog` for the engine's next `progress`. Credits are independent of
    /// other messages, so taking them first reorders nothing that matters.
    pub fn refill_credits(&mut self) -> Result<()> {
        let before = self.backlog.len();
        self.ep.poll(&mut self.backlog)?;
        let mut i = before;
        while i < self.backlog.len() {
            match &self.backlog[i] {
                Completion::Ctrl { peer, tag, data } if proto::untag(*tag).is_ok_and(|t| t.kind == Kind::Credit) => {
                    let mask = proto::credit_mask(*peer, data)?;
                    self.eager.on_credit(*peer, mask)?;
                    self.backlog.remove(i);
                }
                _ => i += 1,
            }
        }
        Ok(())
    }

    /// A registered scratch buffer of at least `bytes` from the pool.
    pub fn scratch(&mut self, bytes: usize) -> Result<Mr> {
        if let Some(i) =
            self.pool.iter().enumerate().filter(|(_, m)| m.len() >= bytes).min_by_key(|(_, m)| m.len()).map(|(i, _)| i)
        {
            return Ok(self.pool.swap_remove(i));
        }
        let size = bytes.next_power_of_two().max(4096);
        Ok(self.ep.alloc(size, Access::REMOTE_WRITE | self.read_access)?)
    }

    pub fn give_back(&mut self, mr: Mr) {
        const POOL: usize = 32;
        if self.pool.len() >= POOL {
            if let Some(i) = self.pool.iter().enumerate().min_by_key(|(_, m)| m.len()).map(|(i, _)| i) {
                self.pool.swap_remove(i);
            }
        }
        self.pool.push(mr);
    }
}

#[cfg(test)]
mod tests {
    use fabcoll_fabric::{Endpoint, LocalFabric, WaitPolicy};

    use crate::exec::{Engine, ExecConfig};

    /// A sender whose ring at the peer ran dry gets the credits the peer sent back by
    /// `refill_credits` alone (no engine `progress`), and other completions stay for the engine.
    #[test]
    fn a_sender_out_of_slots_takes_returned_credits_from_the_endpoint() {
        let fabric = LocalFabric::new(2).unwrap();
        let cfg = ExecConfig { slots: 4, credit_fraction: 1, ..ExecConfig::default() };
        let mut eps: Vec<Box<dyn Endpoint>> =
            (0..2).map(|r| Box::new(fabric.endpoint(r, WaitPolicy::oversubscribed()).unwrap()) as _).collect();
        let blobs: Vec<_> = eps.iter().map(|e| e.address().unwrap()).collect();
        eps.iter_mut().for_each(|e| e.insert_peers(&blobs).unwrap());
        let mut e: Vec<Engine> = eps.into_iter().map(|ep| Engine::new(ep, cfg.clone()).unwrap()).collect();
        for x in &mut e {
            x.progress(None).unwrap();
        }
        let sender = &mut e[0].core;
        for _ in 0..4 {
            assert!(sender.eager.take_slot(1, 8).is_some());
        }
        assert!(sender.eager.take_slot(1, 8).is_none());
        assert!(sender.eager.may_refill(1, 8));
        assert!(!sender.eager.may_refill(1, cfg.slot_size + 1), "a message larger than a slot never goes eager");
        for slot in 0..4 {
            e[1].core.release_slot(0, slot).unwrap();
        }
        e[1].core.ep.send_ctrl(0, 0, b"not a credit").unwrap();
        let sender = &mut e[0].core;
        sender.refill_credits().unwrap();
        for _ in 0..4 {
            assert!(sender.eager.take_slot(1, 8).is_some());
        }
        assert_eq!(sender.backlog.len(), 1, "the other control message waits for the engine: {:?}", sender.backlog);
    }
}
