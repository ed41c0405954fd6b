//! `TcpEndpoint`: the [`Endpoint`] of the `tcp` backend (design in the module doc of `tcp`).

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use super::addr::listen_addr;
use super::conn::{Conn, Peer};
use super::connect::{mesh, pair_key, Hello, PairKey, HELLO, SECRET};
use super::wire::{pad_for, Frame, MAX_CTRL};
use super::{Region, Regions, TcpMr};
use crate::endpoint::{Caps, Completion, Endpoint, Mapping, Progress, SILENT_WRITE};
use crate::error::{Error, Result};
use crate::keymap::KeyMap;
use crate::mr::{check_bounds, check_write, Access, AlignedBuf, LocalRange, Mr, RemoteMr, RemoteRange};
use crate::wait::{poll_until, WaitPolicy};
use crate::{auth, job_hash, settings, Config};

/// With more connections than this, `poll` asks `ppoll` which sockets are ready instead of trying
/// a `recv` on each. Asking `ppoll` first with few connections (it does not take the socket lock
/// that an empty `recv` takes) made small calls slower (`docs/measurements/2026-11-27-tcp.md`).
const SCAN_ALL_MAX: usize = 8;
/// Writes of at most this many bytes complete inside `write` (`Caps::inline_completion`): the part
/// the socket does not take at once is copied into the queue. That is at most one eager message
/// (the executor's network eager limit), and only when the socket is full; in exchange a small
/// write needs no `WriteDone` and its sender no poll to learn it.
const INLINE_MAX: usize = 64 * 1024;

/// One rank of a `tcp` group.
pub struct TcpEndpoint {
    rank: usize,
    size: usize,
    job: u64,
    caps: Caps,
    wait: WaitPolicy,
    timeout: Duration,
    listener: Option<TcpListener>,
    /// The job's token (empty when the job has none); with the peers' secrets, the connections' keys.
    token: Vec<u8>,
    /// This endpoint's random secret, published with its address (`connect::pair_key`).
    secret: [u8; SECRET],
    /// Indexed by rank; `None` at our own rank and before `insert_peers`.
    conns: Vec<Option<Conn>>,
    connected: bool,
    regions: Regions,
    next_key: u64,
    /// Completions produced outside `poll` (write completions, writes and messages to ourselves).
    pending: Vec<Completion>,
    pollfds: Vec<libc::pollfd>,
    /// The ranks whose connections the current `poll` serves (kept to reuse its allocation).
    serve: Vec<usize>,
}

impl std::fmt::Debug for TcpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpEndpoint").field("rank", &self.rank).field("size", &self.size).finish()
    }
}

impl TcpEndpoint {
    /// Listens on `listen_addr` (`tcp::addr`) and waits for `insert_peers`.
    pub fn open(cfg: &Config) -> Result<TcpEndpoint> {
        let at = listen_addr()?;
        let listener =
            TcpListener::bind(at).map_err(|e| Error::Os { op: format!("tcp: listen on {at}"), source: e })?;
        let token = match &cfg.token {
            Some(t) => Some(t.clone()),
            None => settings::FABCOLL_TOKEN.get()?,
        };
        let token = token.map(String::into_bytes).unwrap_or_default();
        let secret =
            auth::random::<SECRET>().map_err(|e| Error::Os { op: "tcp: reading /dev/urandom".into(), source: e })?;
        let caps = Caps {
            backend: "tcp",
            provider: "tcp".into(),
            inject_size: 0,
            max_write: isize::MAX as usize,
            max_ctrl: MAX_CTRL,
            imm_bits: 64,
            writes_land_without_target_poll: false,
            ordered_writes: true,
            inline_completion: INLINE_MAX,
            progress: Progress::Manual,
            load_store: false,
        };
        Ok(TcpEndpoint {
            rank: cfg.rank,
            size: cfg.size,
            job: job_hash(&cfg.job),
            caps,
            wait: cfg.wait,
            timeout: cfg.timeout,
            listener: Some(listener),
            token,
            secret,
            conns: Vec::new(),
            connected: false,
            regions: Arc::new(RwLock::new(KeyMap::default())),
            next_key: 1,
            pending: Vec::new(),
            pollfds: Vec::new(),
            serve: Vec::new(),
        })
    }

    /// What this rank's connections open with.
    fn hello(&self) -> Hello {
        Hello { job: self.job, rank: self.rank as u64, size: self.size as u64 }
    }

    fn check_connected(&self) -> Result<()> {
        match self.connected {
            true => Ok(()),
            false => Err(Error::invalid("insert_peers has not been called on this endpoint")),
        }
    }

    fn conn(&mut self, peer: usize) -> Result<&mut Conn> {
        if peer >= self.size {
            return Err(Error::invalid(format!("peer {peer} not in a group of {}", self.size)));
        }
        self.conns[peer].as_mut().ok_or_else(|| Error::invalid("no connection to this rank itself"))
    }

    fn register_region(&mut self, addr: *mut u8, len: usize, access: Access, owned: Option<AlignedBuf>) -> Result<Mr> {
        let key = self.next_key;
        self.next_key += 1;
        let region = Region { addr: addr as usize, len, access };
        self.regions.write().unwrap_or_else(PoisonError::into_inner).insert(key, region);
        let remote = RemoteMr { addr: addr as u64, len: len as u64, key, access, node: None };
        let backend = Box::new(TcpMr { regions: self.regions.clone(), key });
        let owned = owned.map(|o| Box::new(o) as Box<dyn std::any::Any + Send + Sync>);
        // SAFETY: for `alloc`, `owned` is the allocation (freed after deregistration: `Mr` drops
        // its backend first); for `register`, the caller of `Endpoint::register` guarantees validity.
        Ok(unsafe { Mr::from_parts(addr, len, access, 0, remote, backend, owned) })
    }

    /// A write to ourselves: one copy under the region table's read lock.
    fn write_self(&mut self, src: *const u8, dst: RemoteRange, imm: Option<u64>, ctx: u64) -> Result<()> {
        let regions = self.regions.read().unwrap_or_else(PoisonError::into_inner);
        let key = dst.mr.key;
        let r = regions.get(&key).ok_or(Error::InvalidKey { peer: self.rank, key })?;
        if !r.access.contains(Access::REMOTE_WRITE) {
            return Err(Error::Access(format!("key {key:#x} on rank {} is not remote-writable", self.rank)));
        }
        let off = (dst.mr.addr as usize + dst.off).wrapping_sub(r.addr);
        check_bounds("remote destination", off, dst.len, r.len)?;
        // SAFETY: the destination lies in a live registration (checked under the read lock, held);
        // the source is `dst.len` readable bytes of a local registration (checked by the caller).
        unsafe { std::ptr::copy(src, (r.addr + off) as *mut u8, dst.len) };
        drop(regions);
        if let Some(imm) = imm {
            self.pending.push(Completion::WriteArrived { peer: self.rank, imm });
        }
        if !(ctx == SILENT_WRITE && self.caps.completes_inline(dst.len)) {
            self.pending.push(Completion::WriteDone { ctx });
        }
        Ok(())
    }

    /// `ppoll` on every open connection (reading; writing too where frames wait) for at most `d`.
    fn sleep_on_sockets(&mut self, d: Duration) -> Result<()> {
        self.pollfds.clear();
        for c in self.conns.iter().flatten().filter(|c| c.state == Peer::Open) {
            let events = libc::POLLIN | if c.sending() { libc::POLLOUT } else { 0 };
            self.pollfds.push(libc::pollfd { fd: c.fd(), events, revents: 0 });
        }
        let ts = libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long };
        // SAFETY: `pollfds` is a valid array of `len` entries; the timespec lives across the call.
        let r = unsafe {
            libc::ppoll(self.pollfds.as_mut_ptr(), self.pollfds.len() as libc::nfds_t, &ts, std::ptr::null())
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::Os { op: "ppoll".into(), source: e });
            }
        }
        Ok(())
    }

    /// Fills `self.serve` with the connections to serve in this `poll`: all of them when there are
    /// few, else those that `ppoll` says are ready or that have frames waiting to be sent.
    fn ready(&mut self) -> Result<()> {
        self.serve.clear();
        if self.size - 1 <= SCAN_ALL_MAX {
            self.serve.extend((0..self.conns.len()).filter(|&r| self.conns[r].is_some()));
            return Ok(());
        }
        self.sleep_on_sockets(Duration::ZERO)?;
        // `pollfds` lists the open connections in rank order.
        let mut fds = self.pollfds.iter().filter(|p| p.revents != 0).map(|p| p.fd).peekable();
        for (r, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            if fds.next_if_eq(&c.fd()).is_some() || c.sending() {
                self.serve.push(r);
            }
        }
        Ok(())
    }
}

impl Drop for TcpEndpoint {
    fn drop(&mut self) {
        for c in self.conns.iter_mut().flatten() {
            c.close(Duration::from_secs(1));
        }
    }
}

impl Endpoint for TcpEndpoint {
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
        let l = self.listener.as_ref().ok_or_else(|| Error::invalid("address after insert_peers"))?;
        let at = l.local_addr().map_err(|e| Error::Os { op: "tcp: listener address".into(), source: e })?;
        // The hello this rank opens its connections with, its secret, then its listening address.
        let mut b = self.hello().encode().to_vec();
        b.extend_from_slice(&self.secret);
        b.extend_from_slice(at.to_string().as_bytes());
        Ok(b)
    }

    fn insert_peers(&mut self, blobs: &[Vec<u8>]) -> Result<()> {
        if self.connected {
            return Err(Error::invalid("insert_peers called twice"));
        }
        if blobs.len() != self.size {
            return Err(Error::Address(format!("{} blobs for a group of {}", blobs.len(), self.size)));
        }
        let mut addrs = Vec::with_capacity(blobs.len());
        let mut keys: Vec<PairKey> = Vec::with_capacity(blobs.len());
        for (r, b) in blobs.iter().enumerate() {
            let hello = b.first_chunk::<HELLO>().and_then(Hello::decode);
            let Some(h) = hello else {
                return Err(Error::Address(format!("blob of rank {r} is not a tcp-backend address")));
            };
            if h != (Hello { rank: r as u64, ..self.hello() }) {
                return Err(Error::Address(format!(
                    "blob of rank {r} belongs to another job or group (job {:#x}, rank {}, size {})",
                    h.job, h.rank, h.size
                )));
            }
            let secret = b[HELLO..]
                .first_chunk::<SECRET>()
                .ok_or_else(|| Error::Address(format!("blob of rank {r} holds no secret")))?;
            keys.push(pair_key(&self.token, (self.rank, &self.secret), (r, secret)));
            let at = std::str::from_utf8(&b[HELLO + SECRET..])
                .ok()
                .and_then(|s| s.parse::<SocketAddr>().ok())
                .ok_or_else(|| Error::Address(format!("blob of rank {r} holds no socket address")))?;
            addrs.push(at);
        }
        let listener = self.listener.take().ok_or_else(|| Error::invalid("listener gone"))?;
        let streams = mesh(&listener, self.hello(), &addrs, Arc::new(keys), self.timeout)?;
        self.conns = streams
            .into_iter()
            .enumerate()
            .map(|(r, s)| s.map(|s| Conn::new(r, s)).transpose())
            .collect::<Result<_>>()?;
        self.connected = true;
        Ok(())
    }

    unsafe fn register(&mut self, ptr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        self.register_region(ptr, len, access, None)
    }

    fn alloc(&mut self, len: usize, access: Access) -> Result<Mr> {
        let buf = AlignedBuf::zeroed(len)?;
        self.register_region(buf.as_ptr(), len, access, Some(buf))
    }

    fn write(&mut self, peer: usize, src: LocalRange<'_>, dst: RemoteRange, imm: Option<u64>, ctx: u64) -> Result<()> {
        self.check_connected()?;
        check_write(peer, &src, &dst)?;
        // SAFETY: in bounds of the source registration (checked above).
        let p = unsafe { src.mr.as_ptr().add(src.off) } as *const u8;
        if peer == self.rank {
            return self.write_self(p, dst, imm, ctx);
        }
        let (addr, len) = (dst.mr.addr + dst.off as u64, dst.len as u64);
        let frame = Frame::Write { key: dst.mr.key, addr, len, imm, ctx, pad: pad_for(addr, len) };
        let inline = self.caps.completes_inline(src.len);
        let mut done = std::mem::take(&mut self.pending);
        let r = self.conn(peer).and_then(|c| c.send_write(frame, src.mr, p, src.len, ctx, inline, &mut done));
        self.pending = done;
        r
    }

    fn send_ctrl(&mut self, peer: usize, tag: u64, data: &[u8]) -> Result<()> {
        self.check_connected()?;
        if data.len() > MAX_CTRL {
            return Err(Error::invalid(format!("control message of {} bytes (at most {MAX_CTRL})", data.len())));
        }
        if peer == self.rank {
            self.pending.push(Completion::Ctrl { peer, tag, data: data.to_vec() });
            return Ok(());
        }
        let mut done = std::mem::take(&mut self.pending);
        let r = self.conn(peer).and_then(|c| c.send_ctrl(tag, data, &mut done));
        self.pending = done;
        r
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        let before = out.len();
        out.append(&mut self.pending);
        if !self.connected {
            return Ok(out.len() - before);
        }
        self.ready()?;
        for &r in &self.serve {
            let Some(c) = self.conns[r].as_mut() else { continue };
            // A failure marks the connection lost (`Conn::loss`), reported below.
            let _ = c.flush(out).and_then(|()| c.receive(&self.regions, out)).and_then(|()| c.flush(out));
        }
        let n = out.len() - before;
        if n > 0 {
            return Ok(n);
        }
        // A loss is reported once, by a poll that found nothing else (so nothing is dropped).
        for c in self.conns.iter_mut().flatten().filter(|c| !c.loss_reported) {
            if let Some(e) = c.loss() {
                c.loss_reported = true;
                return Err(e);
            }
        }
        Ok(0)
    }

    fn never_yield(&mut self) {
        self.wait.yields = 0;
    }

    fn wait(&mut self, out: &mut Vec<Completion>, timeout: Option<Duration>) -> Result<usize> {
        poll_until(self, self.wait, timeout, out, Self::poll, Self::sleep_on_sockets, |ep, after| Error::Timeout {
            after,
            what: format!("a completion on tcp rank {}", ep.rank),
        })
    }

    fn map_remote(&mut self, _peer: usize, _mr: &RemoteMr) -> Result<Mapping> {
        Err(Error::Unsupported { backend: "tcp", what: "direct load/store of a peer's memory over the network".into() })
    }

    fn peer_gone(&self, peer: usize) -> Option<String> {
        match self.conns.get(peer)?.as_ref()?.state {
            Peer::Lost(ref why) => Some(format!("tcp: {why}")),
            _ => None,
        }
    }
}
