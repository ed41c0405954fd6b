//! `PairEndpoint`: the [`Endpoint`] of one rank of a [`super::Wire`]; writes and control messages
//! go onto the wire, `poll` drains this rank's inbox, `wait` sleeps on its condition variable.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{killed_self, ItemKind, Payload, Region, Shared, MAX_CTRL, MAX_WRITE};
use crate::endpoint::{Caps, Completion, Endpoint, Mapping, Progress, SILENT_WRITE};
use crate::error::{Error, Result};
use crate::mr::{check_write, Access, AlignedBuf, LocalRange, Mr, MrBackend, RemoteMr, RemoteRange};

const MAGIC: &[u8; 8] = b"fabpair\0";
const BLOB_LEN: usize = 24;

/// One rank of a [`super::Wire`].
pub struct PairEndpoint {
    shared: Arc<Shared>,
    rank: usize,
    caps: Caps,
    connected: bool,
}

impl std::fmt::Debug for PairEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairEndpoint").field("wire", &self.shared.id).field("rank", &self.rank).finish()
    }
}

struct PairMr {
    shared: Arc<Shared>,
    rank: usize,
    key: u64,
}

impl MrBackend for PairMr {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for PairMr {
    fn drop(&mut self) {
        // Delivery copies under this lock: after it, no write lands in the region.
        self.shared.lock().ranks[self.rank].regions.remove(&self.key);
    }
}

impl PairEndpoint {
    pub(super) fn new(shared: Arc<Shared>, rank: usize) -> PairEndpoint {
        let inline_completion = shared.inline_completion;
        let caps = Caps {
            backend: "pair",
            provider: "pair".into(),
            inject_size: inline_completion.min(MAX_WRITE),
            max_write: MAX_WRITE,
            max_ctrl: MAX_CTRL,
            imm_bits: 64,
            // Delivery is the test's, not the target's poll.
            writes_land_without_target_poll: true,
            ordered_writes: false,
            inline_completion,
            progress: Progress::Manual,
            load_store: false,
        };
        PairEndpoint { shared, rank, caps, connected: false }
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        if !self.connected {
            return Err(Error::invalid("insert_peers has not been called on this endpoint"));
        }
        if peer >= self.size() {
            return Err(Error::invalid(format!("peer {peer} not in a group of {}", self.size())));
        }
        Ok(())
    }

    fn register_region(&mut self, addr: *mut u8, len: usize, access: Access, owned: Option<AlignedBuf>) -> Result<Mr> {
        let key = {
            let mut st = self.shared.lock();
            let r = &mut st.ranks[self.rank];
            if r.dead {
                return Err(killed_self(self.rank));
            }
            let key = r.next_key;
            r.next_key += 1;
            r.regions.insert(key, Region { addr: addr as usize, len, access });
            key
        };
        let remote = RemoteMr { addr: addr as u64, len: len as u64, key, access, node: None };
        let backend = Box::new(PairMr { shared: self.shared.clone(), rank: self.rank, key });
        let owned = owned.map(|o| Box::new(o) as Box<dyn Any + Send + Sync>);
        // SAFETY: for `alloc`, `owned` is the allocation (dropped after deregistration); for
        // `register`, the caller of `Endpoint::register` guarantees validity.
        Ok(unsafe { Mr::from_parts(addr, len, access, 0, remote, backend, owned) })
    }

    /// Drains this rank's inbox into `out` (an error once the rank was killed).
    fn drain(&self, out: &mut Vec<Completion>) -> Result<usize> {
        let mut st = self.shared.lock();
        let r = &mut st.ranks[self.rank];
        if r.dead {
            return Err(killed_self(self.rank));
        }
        let n = r.inbox.len();
        out.extend(r.inbox.drain(..));
        Ok(n)
    }
}

impl Drop for PairEndpoint {
    fn drop(&mut self) {
        self.shared.lock().ranks[self.rank].claimed = false;
    }
}

impl Endpoint for PairEndpoint {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.bells.len()
    }

    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn address(&self) -> Result<Vec<u8>> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&self.shared.id.to_le_bytes());
        b.extend_from_slice(&(self.rank as u64).to_le_bytes());
        Ok(b)
    }

    fn insert_peers(&mut self, blobs: &[Vec<u8>]) -> Result<()> {
        if blobs.len() != self.size() {
            return Err(Error::Address(format!("{} blobs for a group of {}", blobs.len(), self.size())));
        }
        for (r, b) in blobs.iter().enumerate() {
            if b.len() != BLOB_LEN || &b[..8] != MAGIC {
                return Err(Error::Address(format!("blob of rank {r} is not a pair-wire address")));
            }
            let id = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
            let rank = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
            if id != self.shared.id {
                return Err(Error::Address(format!(
                    "blob of rank {r} belongs to pair wire {id}, not {}",
                    self.shared.id
                )));
            }
            if rank != r as u64 {
                return Err(Error::Address(format!("blob at index {r} is rank {rank}'s")));
            }
        }
        self.connected = true;
        Ok(())
    }

    unsafe fn register(&mut self, ptr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        if ptr.is_null() && len > 0 {
            return Err(Error::invalid("register: null pointer"));
        }
        self.register_region(ptr, len, access, None)
    }

    fn alloc(&mut self, len: usize, access: Access) -> Result<Mr> {
        let buf = AlignedBuf::zeroed(len)?;
        self.register_region(buf.as_ptr(), len, access, Some(buf))
    }

    fn write(&mut self, peer: usize, src: LocalRange<'_>, dst: RemoteRange, imm: Option<u64>, ctx: u64) -> Result<()> {
        self.check_peer(peer)?;
        check_write(peer, &src, &dst)?;
        if src.len > MAX_WRITE {
            return Err(Error::invalid(format!("write of {} bytes > max {MAX_WRITE}", src.len)));
        }
        // The bytes as they are now: the wire carries this copy, whenever it is delivered.
        let mut bytes = vec![0u8; src.len];
        src.mr.read_at(src.off, &mut bytes)?;
        let inline = self.caps.completes_inline(src.len);
        let payload = Payload::Write { key: dst.mr.key, off: dst.off, bytes, ctx, done_on_delivery: !inline };
        let done_now = (inline && ctx != SILENT_WRITE).then_some(ctx);
        self.shared.issue(self.rank, peer, ItemKind::Write { imm }, payload, done_now)
    }

    fn send_ctrl(&mut self, peer: usize, tag: u64, data: &[u8]) -> Result<()> {
        self.check_peer(peer)?;
        if data.len() > MAX_CTRL {
            return Err(Error::invalid(format!("control message of {} bytes > max {MAX_CTRL}", data.len())));
        }
        let payload = Payload::Ctrl { data: data.to_vec() };
        self.shared.issue(self.rank, peer, ItemKind::Ctrl { tag }, payload, None)
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        self.drain(out)
    }

    fn never_yield(&mut self) {
        self.shared.lock().ranks[self.rank].never_yields = true;
    }

    fn wait(&mut self, out: &mut Vec<Completion>, timeout: Option<Duration>) -> Result<usize> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut st = self.shared.lock();
        loop {
            let r = &mut st.ranks[self.rank];
            if r.dead {
                return Err(killed_self(self.rank));
            }
            if !r.inbox.is_empty() {
                let n = r.inbox.len();
                out.extend(r.inbox.drain(..));
                return Ok(n);
            }
            let bell = &self.shared.bells[self.rank];
            st = match deadline {
                None => bell.wait(st).unwrap_or_else(|p| p.into_inner()),
                Some(d) => match d.checked_duration_since(Instant::now()).filter(|l| !l.is_zero()) {
                    Some(left) => bell.wait_timeout(st, left).unwrap_or_else(|p| p.into_inner()).0,
                    None => {
                        return Err(Error::Timeout {
                            after: timeout.unwrap_or_default(),
                            what: format!("a completion on pair rank {}", self.rank),
                        })
                    }
                },
            };
        }
    }

    fn map_remote(&mut self, _peer: usize, _mr: &RemoteMr) -> Result<Mapping> {
        Err(Error::Unsupported { backend: "pair", what: "map_remote (the pair wire has no load/store)".into() })
    }

    fn peer_gone(&self, peer: usize) -> Option<String> {
        let st = self.shared.lock();
        st.ranks.get(peer).filter(|r| r.dead).map(|_| format!("rank {peer} was killed on the wire"))
    }
}
