//! `LocalEndpoint`: the [`Endpoint`] of one in-process rank; writes copy under the target's region
//! read lock, arrivals go to the target's inbox (mutex + condvar).

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{Region, Shared};
use crate::endpoint::{Caps, Completion, Endpoint, Mapping, Pieces, Progress};
use crate::error::{Error, Result};
use crate::mr::{check_bounds, Access, AlignedBuf, LocalRange, Mr, MrBackend, RemoteMr, RemoteRange};
use crate::wait::{poll_until, WaitPolicy};

const MAGIC: &[u8; 8] = b"fablocal";
const MAX_CTRL: usize = 64 * 1024;

/// One rank of a [`super::LocalFabric`].
pub struct LocalEndpoint {
    shared: Arc<Shared>,
    rank: usize,
    wait: WaitPolicy,
    caps: Caps,
    connected: bool,
    done: VecDeque<Completion>,
}

impl std::fmt::Debug for LocalEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEndpoint").field("fabric", &self.shared.id).field("rank", &self.rank).finish()
    }
}

struct LocalMr {
    shared: Arc<Shared>,
    rank: usize,
    key: u64,
}

impl MrBackend for LocalMr {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for LocalMr {
    fn drop(&mut self) {
        // The write lock waits for copies in flight (they hold the read lock): after this, no
        // write lands in the region. A poisoned lock still gives us the map.
        let st = &self.shared.ranks[self.rank];
        let mut regions = st.regions.write().unwrap_or_else(|p| p.into_inner());
        regions.remove(&self.key);
    }
}

impl LocalEndpoint {
    pub(super) fn new(shared: Arc<Shared>, rank: usize, wait: WaitPolicy) -> LocalEndpoint {
        let caps = Caps {
            backend: "local",
            provider: "local".into(),
            inject_size: isize::MAX as usize,
            max_write: isize::MAX as usize,
            max_ctrl: MAX_CTRL,
            imm_bits: 64,
            writes_land_without_target_poll: true,
            ordered_writes: true,
            inline_completion: usize::MAX,
            progress: Progress::Auto,
            load_store: true,
        };
        LocalEndpoint { shared, rank, wait, caps, connected: false, done: VecDeque::new() }
    }

    /// Copies between `local`, a range of our registration, and `remote`, a range of `peer`'s,
    /// which must grant `need`: into it for `REMOTE_WRITE`, out of it for `REMOTE_READ`.
    fn copy_remote(&self, peer: usize, local: &LocalRange<'_>, remote: &RemoteRange, need: Access) -> Result<()> {
        let write = need == Access::REMOTE_WRITE;
        let (op, mine) = if write { ("write", "local source") } else { ("read", "local destination") };
        check_bounds(mine, local.off, local.len, local.mr.len())?;
        if local.len != remote.len {
            return Err(Error::invalid(format!("{op}: local length {} != remote length {}", local.len, remote.len)));
        }
        self.with_remote(peer, remote, need, |r| {
            // SAFETY: our range is inside a live registration (bounds checked, `local.mr`
            // borrowed, lent to us to write when reading); `r` starts the remote range, inside a
            // registration held live (`with_remote`). A loopback copy may overlap (`copy`);
            // another rank's registration is a different allocation.
            unsafe {
                let l = local.mr.as_ptr().add(local.off);
                let (s, d) = if write { (l, r) } else { (r, l) };
                if peer == self.rank {
                    std::ptr::copy(s, d, local.len)
                } else {
                    crate::copy::copy_bulk(d, s, local.len)
                }
            }
        })
    }

    /// Hands `use_it` the start of `remote`, a range of `peer`'s registration that must grant
    /// `need`, after checking the rights and bounds; `peer`'s region table stays read-locked
    /// meanwhile, so its registration cannot go.
    fn with_remote(&self, peer: usize, remote: &RemoteRange, need: Access, use_it: impl FnOnce(*mut u8)) -> Result<()> {
        self.check_peer(peer)?;
        let (theirs, right) = if need == Access::REMOTE_WRITE {
            ("remote destination", "writable")
        } else {
            ("remote source", "readable")
        };
        let st = &self.shared.ranks[peer];
        let regions = st.regions.read().map_err(|_| Error::Peer { peer, msg: "region table poisoned".into() })?;
        let key = remote.mr.key;
        let region = regions.get(&key).ok_or(Error::InvalidKey { peer, key })?;
        if !region.access.contains(need) {
            return Err(Error::Access(format!("key {key:#x} on rank {peer} is not remotely {right}")));
        }
        check_bounds(theirs, remote.off, remote.len, region.len)?;
        // SAFETY: `remote.off` is inside the registration (bounds checked).
        use_it(unsafe { (region.addr as *mut u8).add(remote.off) });
        Ok(())
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        if !self.connected {
            return Err(Error::invalid("insert_peers has not been called on this endpoint"));
        }
        if peer >= self.shared.ranks.len() {
            return Err(Error::invalid(format!("peer {peer} not in a group of {}", self.shared.ranks.len())));
        }
        Ok(())
    }

    fn register_region(
        &mut self,
        addr: *mut u8,
        len: usize,
        access: Access,
        owner: Option<Arc<AlignedBuf>>,
    ) -> Result<Mr> {
        let st = &self.shared.ranks[self.rank];
        let key = st.next_key.fetch_add(1, Ordering::Relaxed);
        let region = Region { addr: addr as usize, len, access, owner: owner.clone() };
        st.regions.write().map_err(|_| Error::invalid("region table poisoned"))?.insert(key, region);
        let remote = RemoteMr { addr: addr as u64, len: len as u64, key, access, node: None };
        let backend = Box::new(LocalMr { shared: self.shared.clone(), rank: self.rank, key });
        let owned = owner.map(|o| Box::new(o) as Box<dyn Any + Send + Sync>);
        // SAFETY: for `alloc`, `owned` is the allocation (dropped after deregistration); for
        // `register`, the caller of `Endpoint::register` guarantees validity.
        Ok(unsafe { Mr::from_parts(addr, len, access, 0, remote, backend, owned) })
    }

    /// Sleeps on our inbox's condition variable for at most `d` unless something is there.
    fn sleep_on_inbox(&mut self, d: Duration) -> Result<()> {
        let st = &self.shared.ranks[self.rank];
        let inbox = st.inbox.lock().map_err(|_| Error::invalid("own inbox poisoned"))?;
        if inbox.is_empty() {
            let _ = st.bell.wait_timeout(inbox, d).map_err(|_| Error::invalid("own inbox poisoned"))?;
        }
        Ok(())
    }

    fn push(&self, peer: usize, c: Completion) -> Result<()> {
        let st = &self.shared.ranks[peer];
        st.inbox
            .lock()
            .map_err(|_| Error::Peer { peer, msg: "inbox poisoned (peer thread panicked)".into() })?
            .push_back(c);
        st.bell.notify_all();
        Ok(())
    }
}

impl Drop for LocalEndpoint {
    fn drop(&mut self) {
        self.shared.release(self.rank);
    }
}

impl Endpoint for LocalEndpoint {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.ranks.len()
    }

    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn address(&self) -> Result<Vec<u8>> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&std::process::id().to_le_bytes());
        b.extend_from_slice(&self.shared.id.to_le_bytes());
        b.extend_from_slice(&(self.rank as u64).to_le_bytes());
        Ok(b)
    }

    fn insert_peers(&mut self, blobs: &[Vec<u8>]) -> Result<()> {
        if blobs.len() != self.size() {
            return Err(Error::Address(format!("{} blobs for a group of {}", blobs.len(), self.size())));
        }
        for (r, b) in blobs.iter().enumerate() {
            if b.len() != 28 || &b[..8] != MAGIC {
                return Err(Error::Address(format!("blob of rank {r} is not a local-backend address")));
            }
            let pid = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
            let id = u64::from_le_bytes(b[12..20].try_into().expect("8 bytes"));
            let rank = u64::from_le_bytes(b[20..28].try_into().expect("8 bytes"));
            if pid != std::process::id() || id != self.shared.id {
                return Err(Error::Address(format!(
                    "blob of rank {r} belongs to another local fabric (pid {pid}, fabric {id}); \
                     the local backend only connects threads of one process"
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
        let buf = Arc::new(AlignedBuf::zeroed(len)?);
        self.register_region(buf.as_ptr(), len, access, Some(buf))
    }

    fn write(&mut self, peer: usize, src: LocalRange<'_>, dst: RemoteRange, imm: Option<u64>, ctx: u64) -> Result<()> {
        self.copy_remote(peer, &src, &dst, Access::REMOTE_WRITE)?;
        if let Some(imm) = imm {
            self.push(peer, Completion::WriteArrived { peer: self.rank, imm })?;
        }
        if ctx != crate::endpoint::SILENT_WRITE {
            self.done.push_back(Completion::WriteDone { ctx });
        }
        Ok(())
    }

    fn read(&mut self, peer: usize, src: RemoteRange, dst: LocalRange<'_>) -> Result<()> {
        self.copy_remote(peer, &dst, &src, Access::REMOTE_READ)
    }

    fn read_with(&mut self, peer: usize, src: RemoteRange, _piece: usize, f: Pieces<'_>) -> Result<()> {
        self.with_remote(peer, &src, Access::REMOTE_READ, |s| {
            // SAFETY: `s` starts `src.len` bytes of a registration held live meanwhile
            // (`with_remote`); its owner lends them to be read and leaves them unchanged until told.
            f(0, unsafe { std::slice::from_raw_parts(s, src.len) })
        })
    }

    fn reads_from(&self, peer: usize) -> bool {
        peer < self.shared.ranks.len()
    }

    fn send_ctrl(&mut self, peer: usize, tag: u64, data: &[u8]) -> Result<()> {
        self.check_peer(peer)?;
        if data.len() > MAX_CTRL {
            return Err(Error::invalid(format!("control message of {} bytes > max {MAX_CTRL}", data.len())));
        }
        self.push(peer, Completion::Ctrl { peer: self.rank, tag, data: data.to_vec() })
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        let before = out.len();
        out.extend(self.done.drain(..));
        let st = &self.shared.ranks[self.rank];
        out.extend(st.inbox.lock().map_err(|_| Error::invalid("own inbox poisoned"))?.drain(..));
        Ok(out.len() - before)
    }

    fn never_yield(&mut self) {
        self.wait.yields = 0;
    }

    fn wait(&mut self, out: &mut Vec<Completion>, timeout: Option<Duration>) -> Result<usize> {
        poll_until(self, self.wait, timeout, out, Self::poll, Self::sleep_on_inbox, |ep, after| Error::Timeout {
            after,
            what: format!("a completion on local rank {}", ep.rank),
        })
    }

    fn map_remote(&mut self, peer: usize, mr: &RemoteMr) -> Result<Mapping> {
        self.check_peer(peer)?;
        let regions = self.shared.ranks[peer].regions.read().map_err(|_| Error::invalid("region table poisoned"))?;
        let region = regions.get(&mr.key).ok_or(Error::InvalidKey { peer, key: mr.key })?;
        if region.access == Access::LOCAL {
            return Err(Error::Access(format!("key {:#x} on rank {peer} grants no remote access", mr.key)));
        }
        let owner = region.owner.clone().ok_or_else(|| Error::Unsupported {
            backend: "local",
            what: "map_remote of memory registered with `register` (only `alloc`ated memory can be mapped)".into(),
        })?;
        // SAFETY: `owner` keeps the allocation `[addr, addr+len)` alive while the mapping lives.
        Ok(unsafe { Mapping::from_parts(region.addr as *mut u8, region.len, Box::new(owner)) })
    }
}
