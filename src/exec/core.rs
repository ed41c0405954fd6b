//! Resources of one endpoint shared by all collectives in flight: the endpoint, eager rings,
//! write and grant bookkeeping, the control-message queue, counters, MR cache and scratch pool.

use std::time::Instant;

use fabcoll_fabric::{Access, Caps, Completion, Endpoint, Mr, RemoteRange, SILENT_WRITE};

use super::eager::Eager;
use super::fasthash::FastMap;
use super::mrcache::MrCache;
use super::proto::{self, ImmLayout, Kind};
use super::{ExecConfig, OpKey, Stats};
use crate::error::{Error, Result};

/// Resources shared by all ops of an endpoint.
pub(crate) struct Core {
    pub ep: Box<dyn Endpoint>,
    pub caps: Caps,
    pub layout: ImmLayout,
    pub cfg: ExecConfig,
    pub eager: Eager,
    pub writes: FastMap<u64, (OpKey, u32)>,
    pub next_write: u64,
    pub grants_in: FastMap<(usize, u64), (OpKey, u32)>,
    pub next_gid: Vec<u64>,
    pub backlog: Vec<Completion>,
    pub ctrl_out: Vec<(usize, u64, Vec<u8>)>,
    /// Some op queued grants or RTS messages (in its `grant_out`/`rts_out`) since the last flush.
    pub ctrl_queued: bool,
    pub stats: Stats,
    pub mrs: MrCache,
    pub pool: Vec<Mr>,
}

impl Core {
    pub fn new_write(&mut self, key: OpKey, step: u32) -> u64 {
        self.next_write += 1;
        self.writes.insert(self.next_write, (key, step));
        self.next_write
    }

    pub fn new_grant(&mut self, peer: usize, key: OpKey, step: u32) -> u64 {
        let gid = self.next_gid[peer] & self.layout.gid_mask();
        self.next_gid[peer] = self.next_gid[peer].wrapping_add(1);
        self.grants_in.insert((peer, gid), (key, step));
        gid
    }

    /// A write, retried while the fabric is busy (polling meanwhile so peers can drain).
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
    ) -> Result<()> {
        let mut deadline = None;
        loop {
            match self.ep.write(peer, mr.slice(off, len)?, dst, imm, wid) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_busy() => {
                    self.ep.poll(&mut self.backlog)?;
                    let now = Instant::now();
                    if now > *deadline.get_or_insert(now + self.cfg.timeout) {
                        return Err(Error::Fabric(fabcoll_fabric::Error::Peer {
                            peer,
                            msg: format!("write queue stayed full for {:?}", self.cfg.timeout),
                        }));
                    }
                    std::thread::yield_now();
                }
                Err(e) => {
                    if wid != SILENT_WRITE {
                        self.writes.remove(&wid);
                    }
                    return Err(e.into());
                }
            }
        }
    }

    /// Queues a control message (sent by `flush_ctrl`, retried while busy).
    pub fn ctrl(&mut self, peer: usize, tag: u64, data: Vec<u8>) {
        self.ctrl_out.push((peer, tag, data));
    }

    pub fn flush_ctrl(&mut self) -> Result<()> {
        if self.ctrl_out.is_empty() {
            return Ok(());
        }
        let mut deadline = None;
        let mut i = 0;
        while i < self.ctrl_out.len() {
            let (peer, tag, ref data) = self.ctrl_out[i];
            match self.ep.send_ctrl(peer, tag, data) {
                Ok(()) => i += 1,
                Err(e) if e.is_busy() => {
                    self.ep.poll(&mut self.backlog)?;
                    let now = Instant::now();
                    if now > *deadline.get_or_insert(now + self.cfg.timeout) {
                        return Err(Error::Fabric(fabcoll_fabric::Error::Peer {
                            peer,
                            msg: format!("control queue stayed full for {:?}", self.cfg.timeout),
                        }));
                    }
                    std::thread::yield_now();
                }
                Err(e) => {
                    self.ctrl_out.drain(..=i);
                    return Err(e.into());
                }
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
            let tag = proto::tag(Kind::Credit, 0, 0);
            if self.ep.send_ctrl(peer, tag, &mask.to_le_bytes()).is_err() {
                self.ctrl(peer, tag, mask.to_le_bytes().to_vec());
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
        let mr = self.ep.alloc(size, Access::REMOTE_WRITE)?;
        // A peer's write into scratch is read once by this rank's next step (a reduction, a
        // copy or a forward), so its lines sit in our cache when the next call's write comes:
        // writers may bypass their caches instead of fetching every line from ours. On shm at
        // p = 2, recursive doubling 32-128 KiB ran 3x slower in about a third of the runs
        // without this (26/49/93 against 8/14/25 us), and never with it (8 alternating runs).
        self.ep.hint_read_once(&mr);
        Ok(mr)
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
