//! `ShmEndpoint`: the [`Endpoint`] of one process of a node group (see the `shm` module doc for
//! the design: per-rank memfd segments, key table, SPSC queues, futex doorbell).

use std::any::Any;
use std::cell::Cell;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::keys::KeySlot;
use super::segment::{self, Msg, Queue, Segment, KIND_CTRL, KIND_WRITE, NKEYS, PAYLOAD};
use super::sys;
use crate::endpoint::{Caps, Completion, Endpoint, Mapping, Pieces, Progress};
use crate::error::{Error, Result};
use crate::keymap::KeyMap;
use crate::mr::{check_bounds, Access, LocalRange, Mr, MrBackend, RemoteMr, RemoteRange};
use crate::wait::{poll_until, WaitPolicy};
use crate::{job_hash, Config};

const BLOB_MAGIC: &[u8; 8] = b"fabshmad";
const BLOB_LEN: usize = 32;
const HAS_FD: u64 = 1 << 8;

struct Peer {
    pid: u32,
    seg: Arc<Segment>,
    /// Our last view of the head of our queue at this peer (`Spsc::push_seen`).
    head_seen: Cell<u64>,
}

/// `queue.free_seen` through the peer's cached head.
fn free_slots(queue: &Queue, seen: &Cell<u64>) -> usize {
    let mut h = seen.get();
    let n = queue.free_seen(&mut h);
    seen.set(h);
    n
}

/// `queue.push_seen` through the peer's cached head.
fn push(queue: &Queue, seen: &Cell<u64>, fill: impl FnOnce(&mut Msg)) -> bool {
    let mut h = seen.get();
    let pushed = queue.push_seen(&mut h, fill);
    seen.set(h);
    pushed
}

/// Free key-table slots of our own segment, shared with registrations (returned on drop).
struct Keys {
    seg: Arc<Segment>,
    free: Mutex<Vec<u32>>,
    timeout: Duration,
}

/// One process's shm endpoint.
pub struct ShmEndpoint {
    rank: usize,
    size: usize,
    job: u64,
    wait: WaitPolicy,
    caps: Caps,
    seg: Arc<Segment>,
    seg_fd: OwnedFd,
    keys: Arc<Keys>,
    peers: Vec<Peer>,
    done: VecDeque<Completion>,
    next: usize,
    /// Peers' `alloc`ated (memfd) registrations mapped here, by (peer, key): writes into them are
    /// a plain memcpy instead of a `process_vm_writev` syscall. Entries of retired keys are swept.
    maps: Maps,
    /// Where writes into a peer's heap memory are staged at a slow copy distance.
    stage: sys::Stage,
    /// Where `read_with` reads a peer's heap memory piece by piece.
    bounce: Vec<u8>,
}

/// Peer mappings by (peer, key) (a write looks its destination up here).
type Maps = KeyMap<(usize, u64), sys::Mmap>;

/// Cached peer mappings above this count are dropped wholesale (they are re-created on demand).
const MAX_MAPS: usize = 256;

impl std::fmt::Debug for ShmEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmEndpoint").field("rank", &self.rank).field("size", &self.size).finish()
    }
}

struct ShmMr {
    keys: Arc<Keys>,
    idx: u32,
    _fd: Option<OwnedFd>,
}

impl MrBackend for ShmMr {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for ShmMr {
    fn drop(&mut self) {
        let Some(slot) = self.keys.seg.key(self.idx as usize) else { return };
        if slot.retire(self.keys.timeout) {
            if let Ok(mut free) = self.keys.free.lock() {
                free.push(self.idx);
            }
        } else {
            tracing::warn!(
                slot = self.idx,
                "shm deregistration: a peer's write stayed in flight past the timeout; slot leaked"
            );
        }
        // `_fd` closes after the slot is retired, so `map_remote` never opens a recycled fd number
        // under a live generation.
    }
}

impl ShmEndpoint {
    /// Creates this rank's segment; connect with `address` / `insert_peers`.
    pub fn open(cfg: &Config) -> Result<ShmEndpoint> {
        if cfg.size == 0 || cfg.rank >= cfg.size {
            return Err(Error::invalid(format!("rank {} not in a group of size {}", cfg.rank, cfg.size)));
        }
        if cfg.size > u32::MAX as usize / 2 {
            return Err(Error::invalid(format!("shm group of {} ranks is too large", cfg.size)));
        }
        let len = segment::segment_len(cfg.size);
        let fd = sys::memfd(&format!("fabcoll-shm-r{}", cfg.rank), len)?;
        let seg = Arc::new(Segment::new(sys::map_shared(fd.as_raw_fd(), len)?, cfg.size)?);
        let h = seg.header();
        h.job.store(job_hash(&cfg.job), Ordering::Relaxed);
        h.pid.store(std::process::id(), Ordering::Relaxed);
        h.rank.store(cfg.rank as u32, Ordering::Relaxed);
        h.size.store(cfg.size as u32, Ordering::Relaxed);
        h.presence.store(sys::current_cpu(), Ordering::Relaxed);
        h.magic.store(segment::MAGIC, Ordering::Release);
        let keys = Arc::new(Keys {
            seg: seg.clone(),
            free: Mutex::new((0..NKEYS as u32).rev().collect()),
            timeout: cfg.timeout,
        });
        let caps = Caps {
            backend: "shm",
            provider: "shm".into(),
            inject_size: isize::MAX as usize,
            max_write: isize::MAX as usize,
            max_ctrl: PAYLOAD,
            imm_bits: 64,
            writes_land_without_target_poll: true,
            ordered_writes: true,
            inline_completion: usize::MAX,
            progress: Progress::Auto,
            load_store: true,
        };
        Ok(ShmEndpoint {
            rank: cfg.rank,
            size: cfg.size,
            job: job_hash(&cfg.job),
            wait: cfg.wait,
            caps,
            seg,
            seg_fd: fd,
            keys,
            peers: Vec::new(),
            done: VecDeque::new(),
            next: 0,
            maps: Maps::default(),
            stage: sys::Stage::default(),
            bounce: Vec::new(),
        })
    }

    fn peer(&self, peer: usize) -> Result<&Peer> {
        if self.peers.is_empty() {
            return Err(Error::invalid("insert_peers has not been called on this endpoint"));
        }
        self.peers.get(peer).ok_or_else(|| Error::invalid(format!("peer {peer} not in a group of {}", self.size)))
    }

    fn register_slot(&mut self, addr: *mut u8, len: usize, access: Access, aux: u64) -> Result<(usize, RemoteMr)> {
        let idx = self
            .keys
            .free
            .lock()
            .map_err(|_| Error::invalid("key table lock poisoned"))?
            .pop()
            .ok_or_else(|| Error::invalid(format!("too many live registrations (shm limit {NKEYS} per rank)")))?;
        let slot = self.seg.key(idx as usize).ok_or_else(|| Error::invalid("key slot out of range"))?;
        let key = slot.publish(idx as usize, addr as u64, len as u64, aux | u64::from(access.bits()));
        Ok((idx as usize, RemoteMr { addr: addr as u64, len: len as u64, key, access, node: None }))
    }

    /// The error for `peer`'s `key` that no longer names a live registration; forgets its mapping.
    fn stale_key(&mut self, peer: usize, key: u64) -> Error {
        if self.maps.remove(&(peer, key)).is_some() {
            sweep(&mut self.maps, &self.peers);
        }
        Error::InvalidKey { peer, key }
    }

    /// Enters the key slot of `src` (a range of `peer`'s registration that peers may read),
    /// locates its bytes and hands them to `use_them`, leaving the slot after: the registration
    /// stays live meanwhile.
    fn with_source(
        &mut self,
        peer: usize,
        src: &RemoteRange,
        use_them: impl FnOnce(Place) -> Result<()>,
    ) -> Result<()> {
        let me = self.rank;
        let key = src.mr.key;
        let seg = self.peer(peer)?.seg.clone();
        let slot = seg.key((key & 0xffff_ffff) as usize).ok_or(Error::InvalidKey { peer, key })?;
        if !slot.enter(key) {
            return Err(self.stale_key(peer, key));
        }
        let (maps, peers) = (&mut self.maps, &self.peers);
        let used = locate(maps, peers, me, peer, key, slot, src.off, src.len, Access::REMOTE_READ, "remote source")
            .and_then(use_them);
        slot.leave();
        used
    }

    fn dead_peer(&self, peer: usize) -> Option<Error> {
        let pid = self.peers.get(peer)?.pid;
        (!sys::pid_alive(pid)).then(|| Error::Peer { peer, msg: format!("process {pid} is gone") })
    }

    /// A peer whose process is gone without having closed its endpoint (crashed or killed). A
    /// peer that finished and closed cleanly is not a failure by itself, so a timed-out wait does
    /// not blame it (a write to it still fails through `dead_peer`).
    fn crashed_peer(&self, peer: usize) -> Option<Error> {
        let p = self.peers.get(peer)?;
        if p.seg.header().closed.load(Ordering::Acquire) != 0 {
            return None;
        }
        self.dead_peer(peer)
    }

    fn any_pending(&self) -> bool {
        !self.done.is_empty() || (0..self.size).any(|i| self.seg.queue(i).is_some_and(|q| !q.is_empty()))
    }
}

/// Where a range of a peer's registration lies, for a copy into or out of it.
enum Place {
    /// In this process: our own registration.
    Own(*mut u8),
    /// In a mapping here of the peer's `alloc`ated memfd.
    Mapped(*mut u8),
    /// At `addr` in process `pid` (memory of `register`), reached by `process_vm_writev`/`readv`.
    Process { pid: u32, addr: u64 },
}

/// Finds `[off, off+len)` of `peer`'s registration `key`, whose `slot` the caller has entered
/// (so the registration stays live and its fd names its memfd), after checking its rights
/// against `need` and its bounds; maps an `alloc`ated registration on first use.
#[allow(clippy::too_many_arguments)]
fn locate(
    maps: &mut Maps,
    peers: &[Peer],
    me: usize,
    peer: usize,
    key: u64,
    slot: &KeySlot,
    off: usize,
    len: usize,
    need: Access,
    what: &'static str,
) -> Result<Place> {
    let (addr, reg_len) = (slot.addr.load(Ordering::Relaxed), slot.len.load(Ordering::Relaxed) as usize);
    let aux = slot.aux.load(Ordering::Relaxed);
    let access = Access::from_bits((aux & 3) as u8)?;
    if !access.contains(need) {
        let right = if need == Access::REMOTE_READ { "readable" } else { "writable" };
        return Err(Error::Access(format!("key {key:#x} on rank {peer} is not remotely {right}")));
    }
    check_bounds(what, off, len, reg_len)?;
    if peer == me {
        return Ok(Place::Own((addr as usize + off) as *mut u8));
    }
    if aux & HAS_FD == 0 || len == 0 {
        return Ok(Place::Process { pid: peers[peer].pid, addr: addr + off as u64 });
    }
    if let Some(map) = maps.get(&(peer, key)) {
        // SAFETY: `off + len <= reg_len`, the mapping's length (checked above).
        return Ok(Place::Mapped(unsafe { map.as_ptr().add(off) }));
    }
    // While the slot is entered it cannot be retired, so the fd still names the registration's
    // memfd (deregistration retires the slot before closing it). The registration's fd can only
    // be missing if the peer is going away: an exiting process closes its descriptors before it is
    // a zombie that `dead_peer` would see (a killed-peer test caught that window).
    let pid = peers[peer].pid;
    let fd = sys::open_proc_fd(pid, (aux >> 32) as u32).map_err(|e| match e {
        Error::Os { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Error::Peer { peer, msg: format!("process {pid} is exiting ({e})") }
        }
        e => e,
    })?;
    let map = sys::map_shared(fd.as_raw_fd(), reg_len)?;
    sweep(maps, peers);
    let base = map.as_ptr();
    maps.insert((peer, key), map);
    // SAFETY: as above, inside the new mapping of `reg_len` bytes.
    Ok(Place::Mapped(unsafe { base.add(off) }))
}

/// Drops cached mappings of keys that are no longer live at their peer; all of them if too many.
fn sweep(maps: &mut Maps, peers: &[Peer]) {
    maps.retain(|&(peer, key), _| {
        let slot = peers.get(peer).and_then(|p| p.seg.key((key & 0xffff_ffff) as usize));
        slot.is_some_and(|s| s.state.load(Ordering::Relaxed) >> 32 == key >> 32)
    });
    if maps.len() >= MAX_MAPS {
        maps.clear();
    }
}

impl Drop for ShmEndpoint {
    fn drop(&mut self) {
        // Peers that time out waiting from now on see an orderly departure, not a crash.
        self.seg.header().closed.store(1, Ordering::Release);
    }
}

impl ShmEndpoint {
    /// Idle: releases mappings of retired peer keys, then sleeps on our doorbell for at most `d`.
    /// Lost-wakeup freedom: read the doorbell, announce ourselves, re-check the queues, then sleep
    /// only if the doorbell is unchanged (a producer's push is ordered before its bump, and it
    /// wakes when it sees a sleeper).
    fn sleep_on_doorbell(&mut self, d: Duration) -> Result<()> {
        sweep(&mut self.maps, &self.peers);
        let h = self.seg.header();
        let seq = h.doorbell.load(Ordering::SeqCst);
        h.sleepers.fetch_add(1, Ordering::SeqCst);
        if !self.any_pending() {
            self.set_idle(true);
            sys::futex_wait(&h.doorbell, seq, d);
            self.set_idle(false);
        }
        h.sleepers.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

impl Endpoint for ShmEndpoint {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn address(&self) -> Result<Vec<u8>> {
        let mut b = BLOB_MAGIC.to_vec();
        b.extend_from_slice(&self.job.to_le_bytes());
        b.extend_from_slice(&std::process::id().to_le_bytes());
        b.extend_from_slice(&(self.seg_fd.as_raw_fd() as u32).to_le_bytes());
        b.extend_from_slice(&(self.rank as u32).to_le_bytes());
        b.extend_from_slice(&(self.size as u32).to_le_bytes());
        Ok(b)
    }

    fn insert_peers(&mut self, blobs: &[Vec<u8>]) -> Result<()> {
        if !self.peers.is_empty() {
            return Err(Error::invalid("insert_peers called twice"));
        }
        if blobs.len() != self.size {
            return Err(Error::Address(format!("{} blobs for a group of {}", blobs.len(), self.size)));
        }
        let mut peers = Vec::with_capacity(self.size);
        for (r, b) in blobs.iter().enumerate() {
            if b.len() != BLOB_LEN || &b[..8] != BLOB_MAGIC {
                return Err(Error::Address(format!("blob of rank {r} is not an shm address")));
            }
            let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
            let job = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
            let (pid, fd, rank, size) = (u32_at(16), u32_at(20), u32_at(24) as usize, u32_at(28) as usize);
            if job != self.job || rank != r || size != self.size {
                return Err(Error::Address(format!(
                    "blob at index {r} is rank {rank} of a group of {size} (job hash {job:#x}); \
                     expected rank {r} of {} (job hash {:#x})",
                    self.size, self.job
                )));
            }
            if r == self.rank {
                peers.push(Peer { pid, seg: self.seg.clone(), head_seen: Cell::new(0) });
                continue;
            }
            let pfd = sys::open_proc_fd(pid, fd).map_err(|e| Error::Peer { peer: r, msg: e.to_string() })?;
            let len = sys::fd_len(pfd.as_raw_fd())?;
            let seg = Segment::new(sys::map_shared(pfd.as_raw_fd(), len)?, self.size)?;
            let h = seg.header();
            let ok = h.magic.load(Ordering::Acquire) == segment::MAGIC
                && h.job.load(Ordering::Relaxed) == self.job
                && h.pid.load(Ordering::Relaxed) == pid
                && h.rank.load(Ordering::Relaxed) as usize == r
                && h.size.load(Ordering::Relaxed) as usize == self.size;
            if !ok {
                return Err(Error::Address(format!("segment of rank {r} (pid {pid}, fd {fd}) has a foreign header")));
            }
            peers.push(Peer { pid, seg: Arc::new(seg), head_seen: Cell::new(0) });
        }
        self.peers = peers;
        Ok(())
    }

    unsafe fn register(&mut self, ptr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        if ptr.is_null() && len > 0 {
            return Err(Error::invalid("register: null pointer"));
        }
        let (idx, remote) = self.register_slot(ptr, len, access, 0)?;
        let backend = Box::new(ShmMr { keys: self.keys.clone(), idx: idx as u32, _fd: None });
        // SAFETY: the caller of `Endpoint::register` guarantees the memory's validity.
        Ok(unsafe { Mr::from_parts(ptr, len, access, 0, remote, backend, None) })
    }

    fn alloc(&mut self, len: usize, access: Access) -> Result<Mr> {
        let fd = sys::memfd("fabcoll-buf", len)?;
        let map = sys::map_shared(fd.as_raw_fd(), len)?;
        let aux = HAS_FD | (fd.as_raw_fd() as u64) << 32;
        let (idx, remote) = self.register_slot(map.as_ptr(), len, access, aux)?;
        let backend = Box::new(ShmMr { keys: self.keys.clone(), idx: idx as u32, _fd: Some(fd) });
        let ptr = map.as_ptr();
        // SAFETY: `map` (the owned allocation) keeps `[ptr, ptr+len)` mapped until after deregistration.
        Ok(unsafe { Mr::from_parts(ptr, len, access, 0, remote, backend, Some(Box::new(map))) })
    }

    fn write(&mut self, peer: usize, src: LocalRange<'_>, dst: RemoteRange, imm: Option<u64>, ctx: u64) -> Result<()> {
        let me = self.rank;
        self.peer(peer)?;
        let p = &self.peers[peer];
        check_bounds("local source", src.off, src.len, src.mr.len())?;
        if src.len != dst.len {
            return Err(Error::invalid(format!("write: source length {} != destination length {}", src.len, dst.len)));
        }
        let queue = p.seg.queue(me).ok_or_else(|| Error::invalid("own rank has no queue at the peer"))?;
        if imm.is_some() && free_slots(queue, &p.head_seen) == 0 {
            return Err(self.dead_peer(peer).unwrap_or(Error::Busy("shm notification queue full")));
        }
        let key = dst.mr.key;
        let slot = p.seg.key((key & 0xffff_ffff) as usize).ok_or(Error::InvalidKey { peer, key })?;
        if !slot.enter(key) {
            return Err(self.stale_key(peer, key));
        }
        let copied = (|| -> Result<()> {
            // SAFETY: the source range is inside a live registration (bounds checked, `src.mr`
            // borrowed for the call).
            let s = unsafe { src.mr.as_ptr().add(src.off) };
            let what = "remote destination";
            match locate(
                &mut self.maps,
                &self.peers,
                me,
                peer,
                key,
                slot,
                dst.off,
                dst.len,
                Access::REMOTE_WRITE,
                what,
            )? {
                // SAFETY: our own registration, held live by the entered slot; `copy` allows overlap.
                Place::Own(d) => unsafe { std::ptr::copy(s, d, dst.len) },
                // SAFETY: `d` starts `dst.len` mapped bytes of the registration's memfd (checked);
                // source readable (above); shared memory is written only through raw copies,
                // ordered before the notification by its Release (a streaming copy ends with its
                // own store fence).
                Place::Mapped(d) => unsafe { crate::copy::copy_bulk(d, s, dst.len) },
                // SAFETY: source readable (above); the kernel checks the remote range.
                Place::Process { pid, addr } => unsafe { sys::vm_write(pid, s, addr, dst.len, peer, &mut self.stage)? },
            }
            Ok(())
        })();
        slot.leave();
        copied?;
        if let Some(imm) = imm {
            let pushed = push(queue, &p.head_seen, |m| {
                m.kind = KIND_WRITE;
                m.len = 0;
                m.tag = 0;
                m.imm = imm;
            });
            if !pushed {
                return Err(Error::Peer { peer, msg: "notification queue filled up under a single producer".into() });
            }
            p.seg.ring();
        }
        if ctx != crate::endpoint::SILENT_WRITE {
            self.done.push_back(Completion::WriteDone { ctx });
        }
        Ok(())
    }

    fn read(&mut self, peer: usize, src: RemoteRange, dst: LocalRange<'_>) -> Result<()> {
        check_bounds("local destination", dst.off, dst.len, dst.mr.len())?;
        if src.len != dst.len {
            return Err(Error::invalid(format!("read: source length {} != destination length {}", src.len, dst.len)));
        }
        // SAFETY: the destination range is inside our live registration (bounds checked, `dst.mr`
        // borrowed for the call), which the caller lends us to write.
        let d = unsafe { dst.mr.as_ptr().add(dst.off) };
        self.with_source(peer, &src, |place| {
            match place {
                // SAFETY: our own registration, held live by the entered slot; `copy` allows overlap.
                Place::Own(s) => unsafe { std::ptr::copy(s, d, dst.len) },
                // SAFETY: `s` starts `src.len` mapped bytes of the peer's memfd (checked); the
                // destination is ours (above).
                Place::Mapped(s) => unsafe { crate::copy::copy_bulk(d, s, dst.len) },
                // SAFETY: destination writable (above); the kernel checks the remote range.
                Place::Process { pid, addr } => unsafe { sys::vm_read(pid, addr, d, dst.len, peer)? },
            }
            Ok(())
        })
    }

    fn read_with(&mut self, peer: usize, src: RemoteRange, piece: usize, f: Pieces<'_>) -> Result<()> {
        let mut bounce = std::mem::take(&mut self.bounce);
        let piece = piece.max(1);
        let lent = self.with_source(peer, &src, |place| {
            match place {
                Place::Own(s) | Place::Mapped(s) => {
                    // SAFETY: `s` starts `src.len` bytes of a live registration, our own or the
                    // peer's memfd mapped here (bounds and rights checked, slot entered); the
                    // peer lends them to be read and leaves them unchanged until told they were.
                    f(0, unsafe { std::slice::from_raw_parts(s, src.len) })
                }
                Place::Process { pid, addr } => {
                    bounce.resize(piece.min(src.len), 0);
                    for off in (0..src.len).step_by(piece) {
                        let len = piece.min(src.len - off);
                        // SAFETY: the bounce buffer is ours and holds `len` bytes; the kernel
                        // checks the remote range.
                        unsafe { sys::vm_read(pid, addr + off as u64, bounce.as_mut_ptr(), len, peer)? };
                        f(off, &bounce[..len]);
                    }
                }
            }
            Ok(())
        });
        self.bounce = bounce;
        lent
    }

    fn reads_from(&self, peer: usize) -> bool {
        peer < self.peers.len()
    }

    fn send_ctrl(&mut self, peer: usize, tag: u64, data: &[u8]) -> Result<()> {
        let me = self.rank;
        let p = self.peer(peer)?;
        if data.len() > PAYLOAD {
            return Err(Error::invalid(format!("control message of {} bytes > max {PAYLOAD}", data.len())));
        }
        let queue = p.seg.queue(me).ok_or_else(|| Error::invalid("own rank has no queue at the peer"))?;
        let pushed = push(queue, &p.head_seen, |m| {
            m.kind = KIND_CTRL;
            m.len = data.len() as u32;
            m.tag = tag;
            m.imm = 0;
            m.data[..data.len()].copy_from_slice(data);
        });
        if !pushed {
            return Err(self.dead_peer(peer).unwrap_or(Error::Busy("shm control queue full")));
        }
        p.seg.ring();
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        let before = out.len();
        if !self.done.is_empty() {
            out.extend(self.done.drain(..));
        }
        for k in 0..self.size {
            let from = (self.next + k) % self.size;
            let Some(q) = self.seg.queue(from) else { continue };
            while q.pop(|m| {
                out.push(match m.kind {
                    KIND_WRITE => Completion::WriteArrived { peer: from, imm: m.imm },
                    _ => Completion::Ctrl {
                        peer: from,
                        tag: m.tag,
                        data: m.data[..(m.len as usize).min(PAYLOAD)].to_vec(),
                    },
                })
            }) {}
        }
        self.next = (self.next + 1) % self.size;
        Ok(out.len() - before)
    }

    fn never_yield(&mut self) {
        self.wait.yields = 0;
    }

    fn wait(&mut self, out: &mut Vec<Completion>, timeout: Option<Duration>) -> Result<usize> {
        poll_until(self, self.wait, timeout, out, Self::poll, Self::sleep_on_doorbell, |ep, after| {
            (0..ep.peers.len())
                .find_map(|r| ep.crashed_peer(r))
                .unwrap_or_else(|| Error::Timeout { after, what: format!("a completion on shm rank {}", ep.rank) })
        })
    }

    fn map_remote(&mut self, peer: usize, mr: &RemoteMr) -> Result<Mapping> {
        let p = self.peer(peer)?;
        let key = mr.key;
        let slot = p.seg.key((key & 0xffff_ffff) as usize).ok_or(Error::InvalidKey { peer, key })?;
        // Seqlock-style: read the slot under a live generation, map, and re-check the generation
        // (deregistration bumps it before closing the fd, so an unchanged generation means the
        // fd we opened was the registration's).
        let gen = key >> 32;
        let live = |s: u64| s >> 32 == gen && gen & 1 == 1;
        if !live(slot.state.load(Ordering::Acquire)) {
            return Err(Error::InvalidKey { peer, key });
        }
        let (aux, len) = (slot.aux.load(Ordering::Relaxed), slot.len.load(Ordering::Relaxed) as usize);
        if aux & 3 == 0 {
            return Err(Error::Access(format!("key {key:#x} on rank {peer} grants no remote access")));
        }
        if aux & HAS_FD == 0 {
            return Err(Error::Unsupported {
                backend: "shm",
                what: "map_remote of memory registered with `register` (only `alloc`ated memory is shared)".into(),
            });
        }
        let fd = sys::open_proc_fd(p.pid, (aux >> 32) as u32)?;
        let map = sys::map_shared(fd.as_raw_fd(), len)?;
        if !live(slot.state.load(Ordering::Acquire)) {
            return Err(Error::InvalidKey { peer, key });
        }
        let ptr = map.as_ptr();
        // SAFETY: `map` keeps `[ptr, ptr+len)` mapped while the Mapping lives.
        Ok(unsafe { Mapping::from_parts(ptr, len, Box::new(map)) })
    }

    fn set_idle(&self, idle: bool) {
        let p = &self.seg.header().presence;
        // Only this rank writes its word: a load and a store, no read-modify-write.
        let v = if idle { p.load(Ordering::Relaxed) | segment::IDLE } else { sys::current_cpu() };
        p.store(v, Ordering::Relaxed);
    }

    fn peer_gone(&self, peer: usize) -> Option<String> {
        self.crashed_peer(peer).map(|e| e.to_string())
    }

    fn peer_busy_elsewhere(&self, peer: usize) -> bool {
        let Some(p) = self.peers.get(peer) else { return false };
        let theirs = p.seg.header().presence.load(Ordering::Relaxed);
        let mine = self.seg.header().presence.load(Ordering::Relaxed) & segment::NO_CPU;
        let cpu = theirs & segment::NO_CPU;
        theirs & segment::IDLE == 0 && cpu != segment::NO_CPU && mine != segment::NO_CPU && cpu != mine
    }

    fn writes_by_syscall(&self, peer: usize, mr: &Mr) -> bool {
        peer != self.rank && !mr.owns_memory()
    }

    fn writes_into_by_syscall(&self, peer: usize, mr: &RemoteMr) -> bool {
        let slot = self.peers.get(peer).and_then(|p| p.seg.key((mr.key & 0xffff_ffff) as usize));
        peer != self.rank && slot.is_some_and(|s| s.aux.load(Ordering::Relaxed) & HAS_FD == 0)
    }

    fn hint_reused(&mut self, mr: &Mr) {
        // Peers copy into memory of `alloc` through a mapping already; into memory of `register`
        // with `process_vm_writev`, whose cost per page the huge pages cut.
        if mr.owns_memory() || mr.access() == Access::LOCAL {
            return;
        }
        match sys::back_with_huge_pages(mr.as_ptr(), mr.len()) {
            Ok(0) => {}
            Ok(bytes) => tracing::debug!(bytes, "shm: a reused registration is backed by huge pages"),
            Err(e) => tracing::debug!(%e, "shm: huge pages for a reused registration refused"),
        }
    }
}
