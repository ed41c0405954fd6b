//! The fabric contract ([`crate::Endpoint`]) over an [`OfiEndpoint`]: ranks, registrations as [`crate::Mr`],
//! notified writes whose immediate carries the initiator's rank in its top bits, tagged control messages.
//!
//! Provider facts this adapter relies on or reports (libfabric 1.17, found by the tests and benches): tcp
//! (`tcp;ofi_rxm`), net (what `ofi:tcp` opens, see `resolve_provider`) and shm use manual data progress — a write
//! lands only when the target polls (`writes_land_without_target_poll` is false). A write to a deregistered key
//! never touches the target's memory on any of them, but only `tcp;ofi_rxm` with delivery-complete semantics
//! (`FABCOLL_OFI_DELIVERY_COMPLETE=1`) reports it to the initiator (`WriteError` naming [`Error::InvalidKey`]: the
//! completion's provider errno is `ENOENT`; a dead peer gives `ENOTCONN`); shm and net drop it silently and report
//! `WriteDone` (shm hangs the completion under delivery-complete).
//!
//! Every provider runs transmit-complete by default: delivery-complete costs each write a round trip that
//! needs the target's progress, which doubled fabcoll's small-message latency on tcp. What it detected is still
//! detected, later: a write to a dead tcp peer fails once the provider saw the connection close (the next write or
//! control message, `ENOTCONN`), and a collective whose peer stays silent ends through the executor's deadline,
//! abort notices and grace period, which name the silent ranks — and sooner through liveness probes: an endpoint
//! that found no event for 1 s sends every peer an empty control message its endpoint drops unseen; one to a dead
//! peer fails and `poll` returns `Error::Peer` naming it (not on shm; `FABCOLL_OFI_PROBE=<seconds>`, 0 = off).
//! Writes of at most the provider's `inject_size` (net: 128 B, shm: 4 KiB) are injected, except over `ofi_rxm`
//! (tcp, verbs), whose injects crash libfabric 1.17 when a peer dies (`OfiConfig::inject`): complete on return
//! (`Caps::inline_completion`), and one with ctx [`SILENT_WRITE`] reports nothing. A dead peer is named by the
//! failed inject or by the probes. On shm, which has no probes, each endpoint watches its peers' processes
//! (their pids travel in the address blobs): nothing more is posted to a peer that exited without closing its
//! endpoint (a rank that dies holding a lock of libfabric's shm regions would leave the post spinning), a
//! timed-out `wait` names it (`exits.rs`), and a region lock a dead rank left held is released (`shm_locks.rs`).
//!
//! Waiting (`Endpoint::wait`): after the spin and yield rounds of the [`WaitPolicy`], the endpoint keeps polling (and
//! yielding, where the policy yields) for `FABCOLL_OFI_BUSY_US` (default 10 ms) after its last event, and as long as
//! its own writes or control sends are in flight, before it sleeps 200 µs between polls: with manual progress
//! nothing moves while a rank sleeps. There is no fi_wait object: a tcp CQ opened with `FI_WAIT_FD` woke a waiting rank sooner but halved
//! streaming bandwidth and slowed small exchanges, because every completion then signals the wait fd.
//!
//! net costs more per message than plain sockets: every socket it reads sits in its progress epoll set, so each
//! message delivered runs the epoll callback on the sender's CPU, and learning that a write completed takes a CQ
//! read whose progress is an `epoll_wait`, which a blocking call pays before it returns its buffer. Figures for all
//! of this: `docs/measurements/2026-11-27-ofi.md`.
//!
//! Writes are not ordered with respect to each other or to control messages (shm gives no
//! write-after-write order), so `ordered_writes` is false: protocols learn arrival from immediates.

use std::any::Any;
use std::time::{Duration, Instant};

use super::endpoint::{OfiConfig, OfiEndpoint, OfiEvent, OfiMr, OpId, RemoteRegion};
use super::error::OfiError;
use super::raw::Info;
use crate::congestion;
use crate::endpoint::{Caps, Completion, Endpoint, Mapping, Progress, SILENT_WRITE};
use crate::error::{Error, Result};
use crate::keymap::KeyMap;
use crate::mr::{check_write, Access, AlignedBuf, LocalRange, Mr, MrBackend, RemoteMr, RemoteRange};
use crate::settings;
use crate::wait::{poll_until, WaitPolicy};
use crate::Config;

/// Opens an ofi endpoint for `cfg` on `provider` (`tcp`, `shm`, `net`, `verbs`, `efa`, …; `tcp` opens `net` where
/// libfabric has it, see `resolve_provider`). The local address to bind comes from `FABCOLL_OFI_NODE` (e.g.
/// `127.0.0.1`; ignored for shm), delivery-complete from `FABCOLL_OFI_DELIVERY_COMPLETE` (default off: see the
/// module doc), inject from `FABCOLL_OFI_INJECT` (default on except over rxm), liveness probes from
/// `FABCOLL_OFI_PROBE` (default 1 s except on shm and under delivery-complete).
pub fn open(cfg: &Config, provider: &str) -> Result<Box<dyn Endpoint>> {
    let mut oc = OfiConfig::from_env()?;
    let provider = resolve_provider(provider, &oc);
    oc = oc.provider(provider);
    if provider == "shm" {
        // shm has no network address; a node given for tcp/net would make fi_getinfo fail or hang.
        oc.node = None;
    }
    if settings::FABCOLL_OFI_PROBE.get()?.is_none() && provider != "shm" && !oc.delivery_complete {
        // Transmit-complete writes to a dead peer may all succeed: probe idle peers so it is named.
        oc.probe_interval = Some(PROBE_INTERVAL);
    }
    oc.timeout = cfg.timeout;
    Ok(Box::new(OfiBackend::open(&oc, cfg.rank, cfg.size, cfg.wait)?))
}

/// The provider `ofi:<name>` opens. `tcp` means libfabric's TCP transport with RDM endpoints of its own: the
/// provider libfabric 1.17 calls `net` when it is there (a fork of tcp that upstream merged back as `tcp` from
/// 1.18 on), else `tcp` (on 1.17 that is `tcp;ofi_rxm`, on later releases the merged provider). `net` speaks
/// RDM natively where 1.17's tcp needs the `ofi_rxm` layer on top, and is faster for it (`docs/measurements/2026-11-27-ofi.md`).
/// `tcp;ofi_rxm` names the layered provider explicitly.
fn resolve_provider<'a>(provider: &'a str, oc: &OfiConfig) -> &'a str {
    if provider != "tcp" {
        return provider;
    }
    match Info::get(Some("net"), oc.node.as_deref(), oc.delivery_complete) {
        Ok(_) => "net",
        Err(e) => {
            tracing::debug!("ofi:tcp: no net provider ({e}); using tcp");
            "tcp"
        }
    }
}

/// The libfabric provider `ofi:<provider>` opens here, with the node and completion mode of the environment
/// (`OfiConfig::from_env`): `tcp` names `net` where libfabric offers it. For baselines that must run the same
/// provider (`benches/ofi.rs` hands it to the raw C program). A bad setting counts as unset here (`open` reports it).
pub fn provider_opened(provider: &str) -> String {
    resolve_provider(provider, &OfiConfig::from_env().unwrap_or_default()).to_string()
}

/// Default liveness-probe interval of network providers in transmit-complete mode (`FABCOLL_OFI_PROBE` sets it).
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// `FABCOLL_OFI_SEGMENT`, if set.
fn segment_env() -> Result<Option<usize>> {
    Ok(settings::FABCOLL_OFI_SEGMENT.get()?)
}

/// The pieces a large transfer over one connection goes in ([`Endpoint::write_segment`]), never above `max_write`
/// (the provider's largest message); `reno`: the connection runs Reno (fabcoll's choice between ranks of one host,
/// see `crate::congestion`). `FABCOLL_OFI_SEGMENT` (`env`), when set, is the piece everywhere (0: `max_write`).
///
/// On the socket providers (`tcp`, `net`, `sockets`) the kernel's congestion control decides. Under BBR one write of
/// several MiB streamed slower than the same bytes in 512 KiB writes, so connections that keep the system's
/// algorithm (to other hosts, or all with `FABCOLL_TCP_CONGESTION=system`) take 512 KiB pieces. Under Reno the
/// pieces cost time instead, so those connections take one write. Other providers (shm) write whole transfers,
/// which cost no more there. Measurements: `docs/measurements/2026-11-27-ofi.md`.
fn segment_for(provider: &str, max_write: usize, env: Option<usize>, reno: bool) -> usize {
    let socket = matches!(provider.split(';').next(), Some("tcp" | "net" | "sockets"));
    let seg = match env {
        Some(0) => max_write,
        Some(n) => n,
        None if reno || !socket => max_write,
        None => STREAM_SEGMENT,
    };
    seg.clamp(1, max_write.max(1))
}

/// [`segment_for`] of the socket providers' connections that do not run Reno.
const STREAM_SEGMENT: usize = 512 << 10;

/// Bits of the immediate that carry the initiator's rank (enough for `size` ranks).
fn rank_bits(size: usize) -> u32 {
    usize::BITS - (size.max(1) - 1).leading_zeros()
}

struct InFlight {
    ctx: u64,
    peer: usize,
    key: u64,
    // Keeps the source registration alive until the write completes (contract: backends hold a clone).
    _src: Mr,
}

/// An ofi endpoint implementing the fabric contract.
pub struct OfiBackend {
    ep: OfiEndpoint,
    caps: Caps,
    size: usize,
    rank_bits: u32,
    wait: WaitPolicy,
    inserted: bool,
    /// Writes awaiting their completion, by `OpId` (hashed by [`KeyHasher`](crate::keymap::KeyHasher), cheaper per
    /// write than SipHash).
    inflight: KeyMap<u64, InFlight>,
    /// An error the endpoint reported while `write_settled` looked for its write's completion:
    /// the next `poll` returns it.
    deferred: Option<OfiError>,
    events: Vec<OfiEvent>,
    /// How long `wait` yields between polls after the last event before it sleeps ([`OfiConfig::busy_wait`]).
    busy_wait: Duration,
    /// Since when `wait` has found no event (`None`: the last poll found one).
    idle_since: Option<Instant>,
    /// [`Endpoint::write_segment`] per endpoint rank (set by `insert_peers`).
    segments: Vec<usize>,
    // Zero-length registrations share this 1-byte registration (providers reject 0-byte MRs).
    null_mr: OfiMr,
    _null_buf: Box<[u8; 1]>,
}

impl OfiBackend {
    /// Opens the endpoint (see [`open`]).
    pub fn open(oc: &OfiConfig, rank: usize, size: usize, wait: WaitPolicy) -> Result<OfiBackend> {
        if size == 0 || rank >= size {
            return Err(Error::invalid(format!("rank {rank} not in a group of size {size}")));
        }
        let provider = oc.provider.clone().unwrap_or_default();
        let ep = OfiEndpoint::open(oc, rank as u64, size).map_err(|e| to_error(&provider, e))?;
        let a = ep.attrs().clone();
        let rank_bits = rank_bits(size);
        let data_bits = (a.cq_data_size.min(8) * 8) as u32;
        if data_bits <= rank_bits {
            return Err(Error::Unsupported {
                backend: "ofi",
                what: format!("{} carries {data_bits} bits of CQ data, too few for {size} ranks", a.prov_name),
            });
        }
        let caps = Caps {
            backend: "ofi",
            provider: a.prov_name.clone(),
            inject_size: ep.inject_max(),
            max_write: a.max_msg_size,
            max_ctrl: ep.max_ctrl(),
            imm_bits: data_bits - rank_bits,
            writes_land_without_target_poll: !a.manual_progress,
            ordered_writes: false,
            inline_completion: ep.inject_max(),
            progress: if a.manual_progress { Progress::Manual } else { Progress::Auto },
            load_store: false,
        };
        let null_buf = Box::new([0u8; 1]);
        // SAFETY: null_buf is a field dropped after null_mr (declaration order).
        let null_mr = unsafe { ep.register(null_buf.as_ptr(), 1) }.map_err(|e| to_error(&provider, e))?;
        Ok(OfiBackend {
            ep,
            caps,
            size,
            rank_bits,
            wait,
            inserted: false,
            inflight: KeyMap::default(),
            deferred: None,
            events: Vec::new(),
            busy_wait: oc.busy_wait,
            idle_since: None,
            segments: Vec::new(),
            null_mr,
            _null_buf: null_buf,
        })
    }

    fn err(&self, e: OfiError) -> Error {
        to_error(&self.caps.provider, e)
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        if !self.inserted {
            return Err(Error::invalid("insert_peers must be called before data operations"));
        }
        if peer >= self.size {
            return Err(Error::invalid(format!("peer {peer} out of range for size {}", self.size)));
        }
        Ok(())
    }

    fn translate(&mut self, out: &mut Vec<Completion>) -> usize {
        let n0 = out.len();
        let imm_bits = self.caps.imm_bits;
        for ev in self.events.drain(..) {
            out.push(match ev {
                OfiEvent::WriteDone(op) => match self.inflight.remove(&op.0) {
                    Some(f) => Completion::WriteDone { ctx: f.ctx },
                    None => {
                        tracing::warn!(op = op.0, "ofi: completion of an unknown write ignored");
                        continue;
                    }
                },
                OfiEvent::WriteFailed(op, e) => {
                    let Some(f) = self.inflight.remove(&op.0) else {
                        tracing::warn!(op = op.0, "ofi: failure of an unknown write ignored: {e}");
                        continue;
                    };
                    Completion::WriteError { ctx: f.ctx, error: write_error(f.peer, f.key, &e) }
                }
                OfiEvent::RemoteWrite { imm, .. } => {
                    let (peer, imm) = if self.rank_bits == 0 {
                        (0, imm)
                    } else {
                        ((imm >> imm_bits) as usize, imm & ((1u64 << imm_bits) - 1))
                    };
                    Completion::WriteArrived { peer, imm }
                }
                OfiEvent::Ctrl { from, tag, data } => Completion::Ctrl { peer: from as usize, tag, data },
            });
        }
        out.len() - n0
    }
}

/// The ofi part of a [`Mr`]: the registration (deregistered on drop), or nothing for zero-length regions.
struct OfiMrBackend {
    mr: Option<OfiMr>,
}

impl MrBackend for OfiMrBackend {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl OfiBackend {
    /// Idle in `wait`. Manual progress: a sleeping rank moves no bytes (its writes nor its
    /// peers'), so keep polling for `busy_wait` after the last event, and always while our own
    /// operations are in flight — yielding the core between polls only where the policy yields
    /// (our ranks share cores, [`Endpoint::never_yield`]); then sleep briefly between polls (no
    /// fi_wait object: a CQ opened with FI_WAIT_FD halved tcp's streaming bandwidth; see the
    /// module doc).
    fn idle(&mut self, d: Duration) -> Result<()> {
        let idle = *self.idle_since.get_or_insert_with(Instant::now);
        if idle.elapsed() < self.busy_wait || !self.ep.may_sleep() {
            if self.wait.yields > 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else {
            std::thread::sleep(d.min(Duration::from_micros(200)));
        }
        Ok(())
    }
}

impl Endpoint for OfiBackend {
    fn rank(&self) -> usize {
        self.ep.rank() as usize
    }

    fn size(&self) -> usize {
        self.size
    }

    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn connected(&mut self) -> Result<()> {
        self.ep.tune_connections().map(drop).map_err(|e| self.err(e))
    }

    fn address(&self) -> Result<Vec<u8>> {
        self.ep.address().map_err(|e| self.err(e))
    }

    fn insert_peers(&mut self, blobs: &[Vec<u8>]) -> Result<()> {
        if self.inserted {
            return Err(Error::invalid("insert_peers called twice"));
        }
        if blobs.len() != self.size {
            return Err(Error::Address(format!("{} address blobs for a group of {}", blobs.len(), self.size)));
        }
        self.ep.insert_peers(blobs).map_err(|e| match e {
            OfiError::Unsupported(m) | OfiError::Invalid(m) => Error::Address(m),
            other => to_error(&self.caps.provider, other),
        })?;
        let (env, cc) = (segment_env()?, congestion::env_choice()?);
        self.segments = (0..self.size)
            .map(|peer| {
                let reno = self
                    .ep
                    .same_host(peer)
                    .is_some_and(|same| congestion::choice(cc.as_deref(), same) == Some(congestion::SAME_HOST));
                segment_for(&self.caps.provider, self.caps.max_write, env, reno)
            })
            .collect();
        self.inserted = true;
        Ok(())
    }

    fn write_segment(&self, peer: usize) -> usize {
        self.segments.get(peer).copied().unwrap_or(self.caps.max_write)
    }

    unsafe fn register(&mut self, ptr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        // SAFETY: forwarded caller guarantee.
        let (backend, remote, desc) = unsafe { self.register_parts(ptr, len, access)? };
        // SAFETY: the caller guarantees [ptr, ptr+len) stays valid while the Mr lives.
        Ok(unsafe { Mr::from_parts(ptr, len, access, desc, remote, Box::new(backend), None) })
    }

    fn alloc(&mut self, len: usize, access: Access) -> Result<Mr> {
        let buf = AlignedBuf::zeroed(len)?;
        let ptr = buf.as_ptr();
        // SAFETY: `buf` is valid for len bytes and becomes the Mr's owned memory, dropped after the registration.
        let (backend, remote, desc) = unsafe { self.register_parts(ptr, len, access)? };
        // SAFETY: as above.
        Ok(unsafe { Mr::from_parts(ptr, len, access, desc, remote, Box::new(backend), Some(Box::new(buf))) })
    }

    fn write(&mut self, peer: usize, src: LocalRange<'_>, dst: RemoteRange, imm: Option<u64>, ctx: u64) -> Result<()> {
        if let Some(op) = self.post(peer, &src, &dst, imm, ctx)? {
            self.inflight.insert(op.0, InFlight { ctx, peer, key: dst.mr.key, _src: src.mr.clone() });
        }
        Ok(())
    }

    fn write_settled(
        &mut self,
        peer: usize,
        src: LocalRange<'_>,
        dst: RemoteRange,
        imm: Option<u64>,
        ctx: u64,
    ) -> Result<bool> {
        let Some(op) = self.post(peer, &src, &dst, imm, ctx)? else {
            // A silent write, complete on return.
            return Ok(true);
        };
        // A provider error while looking is `poll`'s to report (as it would have been without
        // the look), so the write stays in flight and the error waits there.
        let settled = match self.ep.take_done(op) {
            Ok(done) => done,
            Err(e) => {
                self.deferred.get_or_insert(e);
                false
            }
        };
        if !settled {
            self.inflight.insert(op.0, InFlight { ctx, peer, key: dst.mr.key, _src: src.mr.clone() });
        }
        Ok(settled)
    }

    fn send_ctrl(&mut self, peer: usize, tag: u64, data: &[u8]) -> Result<()> {
        self.check_peer(peer)?;
        self.ep.send_ctrl(peer, tag, data).map_err(|e| self.err(e))
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        if let Some(e) = self.deferred.take() {
            return Err(to_error(&self.caps.provider, e));
        }
        self.ep.poll(&mut self.events).map_err(|e| to_error(&self.caps.provider, e))?;
        let n = self.translate(out);
        if n > 0 {
            self.idle_since = None;
        }
        Ok(n)
    }

    fn never_yield(&mut self) {
        self.wait.yields = 0;
    }

    fn peer_gone(&self, peer: usize) -> Option<String> {
        self.ep.exited(peer).map(|why| format!("ofi:{}: {why}", self.caps.provider))
    }

    fn wait(&mut self, out: &mut Vec<Completion>, timeout: Option<Duration>) -> Result<usize> {
        // shm: a peer whose process ended unannounced explains the silence (as on fabcoll's shm).
        poll_until(self, self.wait, timeout, out, Self::poll, Self::idle, |ep, after| match ep.ep.crashed_peer() {
            Ok(Some((peer, why))) => Error::Peer { peer, msg: format!("ofi:{}: {why}", ep.caps.provider) },
            Ok(None) => {
                Error::Timeout { after, what: format!("a completion on ofi:{} rank {}", ep.caps.provider, ep.rank()) }
            }
            Err(e) => ep.err(e),
        })
    }

    fn map_remote(&mut self, _peer: usize, _mr: &RemoteMr) -> Result<Mapping> {
        Err(Error::Unsupported { backend: "ofi", what: "direct load/store of a peer's registration".into() })
    }
}

impl OfiBackend {
    /// Checks and posts a write (see [`Endpoint::write`]); the id of its completion to come, or
    /// `None` for a `SILENT_WRITE` that completed inline. Inlined into its two callers: it is
    /// the whole of `write` (a call layer of its own cost instructions on every write).
    #[inline]
    fn post(
        &mut self,
        peer: usize,
        src: &LocalRange<'_>,
        dst: &RemoteRange,
        imm: Option<u64>,
        ctx: u64,
    ) -> Result<Option<OpId>> {
        self.check_peer(peer)?;
        check_write(peer, src, dst)?;
        let imm = match imm {
            Some(v) if self.caps.imm_bits < 64 && v >> self.caps.imm_bits != 0 => {
                return Err(Error::invalid(format!("immediate {v:#x} does not fit in {} bits", self.caps.imm_bits)));
            }
            Some(v) if self.rank_bits > 0 => Some(((self.ep.rank()) << self.caps.imm_bits) | v),
            other => other,
        };
        let backend = src
            .mr
            .backend()
            .as_any()
            .downcast_ref::<OfiMrBackend>()
            .ok_or_else(|| Error::invalid("write source is not an ofi registration of this endpoint"))?;
        let local: &OfiMr = backend.mr.as_ref().unwrap_or(&self.null_mr);
        let remote = RemoteRegion { addr: dst.mr.addr, key: dst.mr.key, len: dst.mr.len.max(1) };
        let (off, len) = if src.len == 0 { (0, 0) } else { (src.off, src.len) };
        // An injected write (at most `inline_completion` bytes) is complete on return; one with ctx SILENT_WRITE
        // reports nothing.
        let silent = ctx == SILENT_WRITE && self.caps.completes_inline(len);
        // SAFETY: `InFlight` keeps a clone of the source Mr (and so its memory, per the register contract) until
        // the write's completion is translated; an injected write is done with the source when it returns.
        let op = unsafe { self.ep.write(local, off, len, peer, &remote, dst.off as u64, imm, !silent) }
            .map_err(|e| self.err(e))?;
        Ok((!silent).then_some(op))
    }

    /// Registers `[ptr, ptr+len)` (zero-length regions share the endpoint's 1-byte null registration).
    ///
    /// # Safety
    /// As for [`Endpoint::register`].
    unsafe fn register_parts(
        &mut self,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<(OfiMrBackend, RemoteMr, u64)> {
        if len == 0 {
            let r = self.null_mr.remote();
            return Ok((
                OfiMrBackend { mr: None },
                RemoteMr { addr: r.addr, len: 0, key: r.key, access, node: None },
                0,
            ));
        }
        let (w, r) = (access.contains(Access::REMOTE_WRITE), access.contains(Access::REMOTE_READ));
        // SAFETY: forwarded caller guarantee.
        let m = unsafe { self.ep.register_with(ptr, len, w, r) }.map_err(|e| self.err(e))?;
        let (rr, desc) = (m.remote(), m.local_desc());
        Ok((
            OfiMrBackend { mr: Some(m) },
            RemoteMr { addr: rr.addr, len: len as u64, key: rr.key, access, node: None },
            desc,
        ))
    }
}

/// The text of a failed write: names the peer, and says [`Error::InvalidKey`] when the provider reports that the
/// target refused the key (tcp: `FI_ECANCELED` with provider errno `ENOENT`, or `FI_ENOKEY`/`FI_EKEYREJECTED`).
fn write_error(peer: usize, key: u64, e: &OfiError) -> String {
    if is_stale_key(e) {
        format!("{} ({e})", Error::InvalidKey { peer, key })
    } else {
        format!("write to rank {peer} (key {key:#x}) failed: {e}")
    }
}

fn is_stale_key(e: &OfiError) -> bool {
    use super::sys::{FI_ECANCELED, FI_EKEYREJECTED, FI_ENOKEY};
    match e {
        OfiError::Completion { code, prov_errno, .. } => {
            let code = *code as u64;
            code == FI_ENOKEY as u64 || code == FI_EKEYREJECTED || (code == FI_ECANCELED && *prov_errno == libc::ENOENT)
        }
        _ => false,
    }
}

/// Turns a backend error into the contract's error type.
pub(crate) fn to_error(provider: &str, e: OfiError) -> Error {
    match e {
        OfiError::Call { op, code, text } => Error::Provider {
            provider: provider.to_string(),
            op: op.to_string(),
            code: -(code as i64),
            text: text.into_owned(),
        },
        OfiError::Completion { op, code, text, .. } => {
            Error::Provider { provider: provider.to_string(), op: op.to_string(), code: -(code as i64), text }
        }
        OfiError::Unsupported(what) => Error::Unsupported { backend: "ofi", what },
        OfiError::Invalid(m) => Error::InvalidArgument(m),
        OfiError::Busy(m) => Error::Busy(m),
        OfiError::Timeout(what) => Error::Timeout { after: Duration::ZERO, what },
        // Always wrapped in `Peer` by the endpoint; bare, there is no rank to name.
        OfiError::Exited(text) => {
            Error::Provider { provider: provider.to_string(), op: "exit watch".into(), code: 0, text }
        }
        OfiError::Peer { peer, source } => Error::Peer { peer, msg: format!("ofi:{provider}: {source}") },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_providers_write_in_512_kib_pieces_unless_the_connection_runs_reno() {
        for p in ["tcp", "net", "tcp;ofi_rxm", "sockets"] {
            assert_eq!(segment_for(p, 1 << 30, None, false), STREAM_SEGMENT, "{p}");
            assert_eq!(segment_for(p, 1 << 30, None, true), 1 << 30, "{p}");
        }
        assert_eq!(segment_for("shm", 1 << 30, None, false), 1 << 30);
        assert_eq!(segment_for("verbs;ofi_rxm", 1 << 30, None, false), 1 << 30);
        // Never above what the provider takes; the environment decides otherwise (0: the provider's maximum).
        assert_eq!(segment_for("net", 4096, None, false), 4096);
        assert_eq!(segment_for("net", 1 << 30, Some(0), false), 1 << 30);
        assert_eq!(segment_for("net", 1 << 30, Some(65536), true), 65536);
        assert_eq!(segment_for("shm", 1 << 30, Some(65536), false), 65536);
        assert_eq!(segment_for("net", 4096, Some(65536), false), 4096);
    }
}
