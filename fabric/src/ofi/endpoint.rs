//! One libfabric `FI_EP_RDM` endpoint: registered memory with unique keys, notified one-sided writes
//! (`fi_writedata`), tagged control messages into pre-posted buffers, and progress driven by polling the CQ.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::OfiError;
use super::raw::{Av, Cq, CqEvent, Domain, Ep, Fabric, Info, Mr, ProviderAttrs};
use super::sys;
use crate::settings::{self, SettingError};

#[path = "exits.rs"]
mod exits;
#[path = "probe.rs"]
mod probe;
#[path = "sockets.rs"]
mod sockets;

/// How to open an ofi endpoint.
#[derive(Debug, Clone)]
pub struct OfiConfig {
    /// Provider name (`tcp`, `net`, `shm`, `verbs`, `efa`, …); `None`: `FI_PROVIDER` or libfabric's first choice
    /// other than the slow `sockets`/`udp` providers.
    pub provider: Option<String>,
    /// Local address to bind (e.g. `127.0.0.1`), passed to `fi_getinfo` with `FI_SOURCE`.
    pub node: Option<String>,
    /// Pre-posted control receive buffers. Keep it above the control messages that can be in flight towards
    /// this endpoint: libfabric 1.17's shm provider was seen to lose or misdeliver tagged messages that arrive
    /// before a receive is posted (unexpected messages) under load, so the default (512) avoids them.
    pub ctrl_recv_slots: usize,
    /// Control send buffers (sends beyond this many in flight wait for completions).
    pub ctrl_send_slots: usize,
    /// Largest control message in bytes, including fabcoll's 8-byte header.
    pub ctrl_max: usize,
    /// Completion queue depth.
    pub cq_size: usize,
    /// Complete writes only when the target has processed them (`FI_DELIVERY_COMPLETE`): a write the target
    /// rejects (stale key) then fails at the initiator on providers that report it (tcp), but every write costs a
    /// round trip that needs the target's progress (`docs/measurements/2026-11-27-ofi.md`).
    pub delivery_complete: bool,
    /// Post writes of at most the provider's `inject_size` bytes (tcp 64 B, net 128 B, shm 4 KiB) with
    /// `fi_inject_writedata`: the provider copies them, so they are complete when [`OfiEndpoint::write`] returns
    /// (their [`OfiEvent::WriteDone`], if asked for, is a local event). Only without `delivery_complete`.
    /// `None` (the default): on, except on providers layered over `ofi_rxm` (tcp, verbs).
    ///
    /// - **Why on.** An injected write skips the completion's trip through the CQ (on `tcp;ofi_rxm` each normal
    ///   completion costs the writer a pipe write, a `poll` and a pipe read), which small calls feel
    ///   (`docs/measurements/2026-11-27-ofi.md`).
    /// - **Why not over rxm.** libfabric 1.17's rxm dereferences the null context of an injected write that
    ///   tcp cancels when the connection drops with the write still queued: a rank that injected into a peer
    ///   that died crashes in `fi_cq_read` (SIGSEGV, reproduced with a bcast root whose receiver exited).
    /// - **Dead peers.** tcp and net report no error for some injects to a dead peer (30 s of them after the
    ///   peer exited, all "done"); the liveness probes name it, since injected writes do not count as activity
    ///   ([`OfiConfig::probe_interval`]). A failed inject names its peer.
    ///
    /// `FABCOLL_OFI_INJECT=0` / `=1` turns it off / on for every provider.
    pub inject: Option<bool>,
    /// Liveness probes: after this long without any event from the provider (the local completions of injected
    /// writes do not count), `poll` sends every peer it has exchanged control messages with an empty control message
    /// that the peer's endpoint drops unseen (one round per interval while idle). Transmit-complete writes may all
    /// succeed after a peer died (bytes handed to the socket); a probe to it fails, or is refused (tcp: `-FI_EAGAIN`
    /// while the provider fails to reconnect) for an interval while the peer's address refuses connections, or for 3
    /// intervals, and `poll` returns [`OfiError::Peer`] naming it. A live peer's established connection takes an
    /// 8-byte send without that peer's progress, so only unreachable peers are named. `None`: no probes.
    pub probe_interval: Option<Duration>,
    /// How long a post may retry on `-FI_EAGAIN` (driving progress) before giving up.
    pub timeout: Duration,
    /// How long a blocking wait keeps polling (yielding the core between polls) after its last event before it
    /// sleeps between polls. With manual progress nothing moves while a rank sleeps — neither its own large
    /// writes nor the peer's writes into it, which then stall in the socket buffers — so an early sleep costs
    /// every message that takes longer than the spin phase (`docs/measurements/2026-11-27-ofi.md`). `FABCOLL_OFI_BUSY_US` sets it.
    pub busy_wait: Duration,
}

impl Default for OfiConfig {
    fn default() -> Self {
        OfiConfig {
            provider: None,
            node: None,
            ctrl_recv_slots: 512,
            ctrl_send_slots: 64,
            ctrl_max: 4096 + CTRL_HEADER,
            cq_size: 1024,
            delivery_complete: false,
            inject: None,
            probe_interval: None,
            timeout: Duration::from_secs(30),
            busy_wait: DEFAULT_BUSY_WAIT,
        }
    }
}

impl OfiConfig {
    /// Defaults, with the knobs of [`crate::settings`]: the provider from `FABCOLL_OFI_PROVIDER` or
    /// `FI_PROVIDER`, the node from `FABCOLL_OFI_NODE`, `FABCOLL_OFI_DELIVERY_COMPLETE`, `FABCOLL_OFI_INJECT`,
    /// `FABCOLL_OFI_PROBE` (probe interval; 0: none) and `FABCOLL_OFI_BUSY_US` ([`OfiConfig::busy_wait`]).
    pub fn from_env() -> Result<Self, SettingError> {
        Ok(OfiConfig {
            provider: settings::FABCOLL_OFI_PROVIDER
                .get()?
                .or_else(|| std::env::var("FI_PROVIDER").ok().filter(|v| !v.is_empty())),
            node: settings::FABCOLL_OFI_NODE.get()?,
            delivery_complete: settings::FABCOLL_OFI_DELIVERY_COMPLETE.get()?.unwrap_or(false),
            inject: settings::FABCOLL_OFI_INJECT.get()?,
            probe_interval: settings::FABCOLL_OFI_PROBE.get()?.filter(|d| !d.is_zero()),
            busy_wait: settings::FABCOLL_OFI_BUSY_US.get()?.unwrap_or(DEFAULT_BUSY_WAIT),
            ..Default::default()
        })
    }

    /// This config with `provider` set.
    pub fn provider(mut self, p: &str) -> Self {
        self.provider = Some(p.to_string());
        self
    }
}

/// How long a closing endpoint drives its control sends out ([`OfiEndpoint::linger`]).
const LINGER: Duration = Duration::from_millis(200);

/// Default [`OfiConfig::busy_wait`]: long enough for the largest collectives' steps to stream without a sleep,
/// short enough that a rank waiting for a straggler stops burning its core soon.
const DEFAULT_BUSY_WAIT: Duration = Duration::from_millis(10);

/// Identifies a posted write until its completion is returned by [`OfiEndpoint::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpId(pub u64);

/// What a peer needs to write into a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRegion {
    /// Target address of byte 0 of the region (its virtual address under `FI_MR_VIRT_ADDR`, else 0).
    pub addr: u64,
    /// The MR key.
    pub key: u64,
    /// Region length in bytes.
    pub len: u64,
}

impl RemoteRegion {
    /// 24-byte wire form (little endian addr, key, len).
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.key.to_le_bytes());
        b[16..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Parses [`RemoteRegion::to_bytes`]; `None` when `b` is not 24 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != 24 {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(RemoteRegion { addr: w(0), key: w(8), len: w(16) })
    }
}

/// A registered memory region of an [`OfiEndpoint`]; deregistered on drop.
pub struct OfiMr {
    mr: Mr,
    base: *const u8,
    len: usize,
    remote_base: u64,
}

// SAFETY: `base` is only used as an address for libfabric calls made under the domain lock.
unsafe impl Send for OfiMr {}
// SAFETY: as above.
unsafe impl Sync for OfiMr {}

impl OfiMr {
    /// What peers need to write here.
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion { addr: self.remote_base, key: self.mr.key(), len: self.len as u64 }
    }

    /// The provider's local descriptor (`fi_mr_desc`) as an integer (0 when the provider has none).
    pub fn local_desc(&self) -> u64 {
        self.mr.desc() as u64
    }

    /// Registered length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length registration.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An event returned by [`OfiEndpoint::poll`].
#[derive(Debug)]
pub enum OfiEvent {
    /// A write posted by us completed locally (source buffer reusable; data delivered per provider semantics).
    WriteDone(OpId),
    /// A write posted by us failed (e.g. the target key was deregistered).
    WriteFailed(OpId, OfiError),
    /// A peer's `fi_writedata` landed in our memory; `imm` is its 64-bit immediate.
    RemoteWrite {
        /// The immediate (remote CQ data).
        imm: u64,
        /// Bytes written (as reported by the provider; may be 0 on providers that do not report it).
        len: usize,
    },
    /// A control message from the peer whose rank is `from`.
    Ctrl {
        /// Sender's rank.
        from: u64,
        /// The sender's tag.
        tag: u64,
        /// Payload.
        data: Vec<u8>,
    },
}

#[repr(C)]
struct OpCtx {
    ctx: sys::fi_context2,
    kind: Kind,
    id: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Write,
    CtrlSend,
    CtrlRecv,
}

impl OpCtx {
    fn new(kind: Kind, id: u64) -> OpCtx {
        OpCtx { ctx: sys::fi_context2::default(), kind, id }
    }

    fn boxed(kind: Kind, id: u64) -> Box<OpCtx> {
        Box::new(OpCtx::new(kind, id))
    }
}

/// A post that returned `-FI_EAGAIN`, retried by `progress` in order (pointers valid per the post's contract).
enum Post {
    Write {
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        imm: Option<u64>,
        dest: u64,
        addr: u64,
        key: u64,
        slot: usize,
    },
    Send {
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        tag: u64,
        slot: usize,
    },
    Recv {
        slot: usize,
    },
}

impl Post {
    /// The peer a write or send goes to; `None` for a receive.
    fn dest(&self) -> Option<u64> {
        match *self {
            Post::Write { dest, .. } | Post::Send { dest, .. } => Some(dest),
            Post::Recv { .. } => None,
        }
    }
}

/// Bytes in front of every control payload: the sender's rank and its per-destination sequence number
/// (little endian u32 each).
const CTRL_HEADER: usize = 8;
/// Writes/sends deferred after `-FI_EAGAIN` beyond which `write`/`send_ctrl` return `Busy`.
const BACKLOG_MAX: usize = 1024;

/// Flag in the rank word of a control header marking a liveness probe (dropped by the receiving endpoint).
const PROBE: u32 = 1 << 31;
/// With `PROBE`: the sender's endpoint is closing (orderly departure): stop probing it, never blame it.
const GOODBYE: u32 = 1 << 30;

/// Top bit of the [`OpId`]s of injected writes (which have no write context slot).
const INJECTED: u64 = 1 << 63;
/// Probe interval after an injected write failed (until a probe names the peer).
const INJECT_FAILED_PROBE: Duration = Duration::from_millis(50);

/// Per-process count of requested MR keys (`next_key`).
static KEY_COUNTER: AtomicU64 = AtomicU64::new(1);

/// A libfabric RDM endpoint with its fabric, domain, CQ and AV.
pub struct OfiEndpoint {
    rank: u64,
    attrs: ProviderAttrs,
    timeout: Duration,
    peers: Vec<u64>,
    writes: Vec<Option<Box<OpCtx>>>,
    free_writes: Vec<usize>,
    /// Target rank of each write slot (a completed write shows the connection to it stands).
    write_peer: Vec<usize>,
    send_ctx: Box<[OpCtx]>,
    free_sends: Vec<usize>,
    /// Destination rank of each control send slot (for errors naming the peer).
    send_peer: Vec<usize>,
    recv_ctx: Box<[OpCtx]>,
    pending: VecDeque<OfiEvent>,
    /// `WriteDone`s of injected writes whose caller asked for one: local events, which `poll` reports after
    /// `pending` and which do not count as activity for the liveness probes.
    injected: VecDeque<OpId>,
    send_seq: Vec<u32>,
    recv_seq: Vec<u32>,
    early: BTreeMap<(usize, u32), (u64, Vec<u8>)>,
    backlog: VecDeque<(Instant, Post)>,
    scratch: Vec<CqEvent>,
    /// This endpoint's random secret for its requested MR keys (`next_key`).
    key_secret: [u8; 32],
    /// Largest write posted with inject (0: none).
    inject_max: usize,
    /// Counter of the `OpId`s of injected writes.
    next_inject: u64,
    /// The first failure that named no peer (`unexplained`) and no probe has explained yet, and when
    /// it came.
    inject_failed: Option<(Instant, OfiError)>,
    probe_interval: Option<Duration>,
    /// Peers we exchanged control messages with (connected: the only ones probed), peers that said goodbye (never
    /// probed again), since when probes to a peer are refused, and since when a probe to it has been posted but
    /// has not left (cleared by anything that completes towards the peer).
    alive: Vec<bool>,
    departed: Vec<bool>,
    probe_refused: Vec<Option<Instant>>,
    probe_unsent: Vec<Option<Instant>>,
    /// Peers' socket addresses, read from their address blobs (`None`: not a socket address, e.g. shm).
    peer_sockets: Vec<Option<std::net::SocketAddr>>,
    /// shm: peers' process exits ([`exits`]).
    exit_watch: Option<exits::ExitWatch>,
    /// Events read from the CQ so far; with the count an idle poll last saw and when it saw it changed (the
    /// start of the current quiet spell). A counter, not a clock read per read that found something: the clock
    /// is read only by idle polls, which read it anyway.
    activity: u64,
    quiet: (u64, Instant),
    /// Last probe round.
    last_probe: Instant,
    /// The write whose completion `take_done` is reading the CQ for, and whether `handle` found it.
    taking: Option<OpId>,
    taken: bool,
    ctrl_max: usize,
    ctrl_recv_slots: usize,
    // Posted receives and in-flight operations point into ctrl_buf and the contexts: `Drop` hands them to the
    // `Ep`, which frees them only after `fi_close` (the Ep may outlive us while user MRs hold it).
    ctrl_mr: Mr,
    ep: Arc<Ep>,
    ctrl_buf: Box<[u8]>,
}

/// What `OfiEndpoint::drop` hands to the `Ep` to free after `fi_close`.
struct Posted {
    _ctrl_buf: Box<[u8]>,
    _send_ctx: Box<[OpCtx]>,
    _recv_ctx: Box<[OpCtx]>,
    _writes: Vec<Option<Box<OpCtx>>>,
}

// SAFETY: plain owned memory; the raw pointers inside the contexts are provider scratch, never dereferenced by us.
unsafe impl Send for Posted {}

impl Drop for OfiEndpoint {
    fn drop(&mut self) {
        if self.probe_interval.is_some() || self.exit_watch.is_some() {
            self.say_goodbye();
        }
        self.linger();
        let posted = Posted {
            _ctrl_buf: std::mem::take(&mut self.ctrl_buf),
            _send_ctx: std::mem::take(&mut self.send_ctx),
            _recv_ctx: std::mem::take(&mut self.recv_ctx),
            _writes: std::mem::take(&mut self.writes),
        };
        self.ep.keep_until_closed(Box::new(posted));
    }
}

// SAFETY: the raw pointers inside (deferred posts, CQ scratch, contexts) point into memory this endpoint owns or
// that callers of the unsafe `write`/`register` keep valid regardless of thread; all libfabric calls on the
// endpoint's objects are serialized by the domain lock, so moving the endpoint to another thread is sound.
unsafe impl Send for OfiEndpoint {}

impl OfiEndpoint {
    /// Opens fabric, domain, CQ, AV and endpoint for `cfg`, and pre-posts the control receives. `rank` is the tag
    /// our control messages carry; `max_peers` sizes the AV.
    pub fn open(cfg: &OfiConfig, rank: u64, max_peers: usize) -> Result<OfiEndpoint, OfiError> {
        if rank >= u64::from(GOODBYE) {
            return Err(OfiError::Invalid(format!("rank {rank} does not fit the 30-bit rank of the control header")));
        }
        if cfg.ctrl_max <= CTRL_HEADER || cfg.ctrl_recv_slots == 0 || cfg.ctrl_send_slots == 0 {
            return Err(OfiError::Invalid("ctrl_max, ctrl_recv_slots and ctrl_send_slots must be > 0".into()));
        }
        let info = Info::get(cfg.provider.as_deref(), cfg.node.as_deref(), cfg.delivery_complete)?;
        let attrs = info.attrs();
        if cfg.provider.is_none() && is_slow(&attrs.prov_name) {
            return Err(OfiError::Unsupported(format!(
                "libfabric's first choice is the slow `{}` provider; name a provider (tcp, shm, verbs, efa, …) \
                 explicitly (FABCOLL_OFI_PROVIDER) to use it",
                attrs.prov_name
            )));
        }
        if attrs.cq_data_size < 4 {
            return Err(OfiError::Unsupported(format!(
                "provider {} carries only {} bytes of remote CQ data; fabcoll needs at least 4",
                attrs.prov_name, attrs.cq_data_size
            )));
        }
        tracing::debug!(?attrs, "ofi: opening endpoint");
        if attrs.prov_name == "shm" {
            super::shm_leftovers::clear_once();
        }
        let fabric = Fabric::open(info)?;
        let domain = Domain::open(&fabric)?;
        let cq = Cq::open(&domain, cfg.cq_size.max(cfg.ctrl_recv_slots * 2))?;
        let av = Av::open(&domain, max_peers.max(1))?;
        let ep = Ep::open(&domain, &cq, &av)?;
        drop((fabric, domain, cq, av));

        let slots = cfg.ctrl_recv_slots + cfg.ctrl_send_slots;
        let ctrl_buf = vec![0u8; slots * cfg.ctrl_max].into_boxed_slice();
        let key_secret = crate::auth::random::<32>().map_err(|e| {
            OfiError::Unsupported(format!("cannot read /dev/urandom for unguessable memory-region keys: {e}"))
        })?;
        let key = next_key(&attrs, &key_secret);
        // SAFETY: ctrl_buf is a field of the returned endpoint dropped after ctrl_mr (field order).
        let access = sys::FI_SEND | sys::FI_RECV;
        let ctrl_mr = unsafe { Mr::register(&ep, ctrl_buf.as_ptr(), ctrl_buf.len(), access, key, attrs.mr_mode)? };
        let mut me = OfiEndpoint {
            rank,
            timeout: cfg.timeout,
            peers: Vec::new(),
            writes: Vec::new(),
            free_writes: Vec::new(),
            write_peer: Vec::new(),
            send_ctx: (0..cfg.ctrl_send_slots).map(|i| OpCtx::new(Kind::CtrlSend, i as u64)).collect(),
            free_sends: (0..cfg.ctrl_send_slots).rev().collect(),
            send_peer: vec![0; cfg.ctrl_send_slots],
            recv_ctx: (0..cfg.ctrl_recv_slots).map(|i| OpCtx::new(Kind::CtrlRecv, i as u64)).collect(),
            pending: VecDeque::new(),
            injected: VecDeque::new(),
            send_seq: Vec::new(),
            recv_seq: Vec::new(),
            early: BTreeMap::new(),
            backlog: VecDeque::new(),
            scratch: Vec::with_capacity(16),
            key_secret,
            inject_max: if cfg.inject.unwrap_or(!attrs.prov_name.contains("ofi_rxm")) && !cfg.delivery_complete {
                attrs.inject_size
            } else {
                0
            },
            next_inject: 0,
            inject_failed: None,
            probe_interval: cfg.probe_interval,
            alive: Vec::new(),
            departed: Vec::new(),
            probe_refused: Vec::new(),
            probe_unsent: Vec::new(),
            peer_sockets: Vec::new(),
            exit_watch: None,
            activity: 0,
            quiet: (0, Instant::now()),
            last_probe: Instant::now(),
            taking: None,
            taken: false,
            ctrl_max: cfg.ctrl_max,
            ctrl_recv_slots: cfg.ctrl_recv_slots,
            attrs,
            ctrl_mr,
            ep,
            ctrl_buf,
        };
        for slot in 0..cfg.ctrl_recv_slots {
            me.post_recv(slot)?;
        }
        Ok(me)
    }

    /// Provider attributes (name, mr_mode bits, sizes).
    pub fn attrs(&self) -> &ProviderAttrs {
        &self.attrs
    }

    /// Largest write posted with inject, completing at once (0: none; see [`OfiConfig::inject`]).
    pub fn inject_max(&self) -> usize {
        self.inject_max
    }

    /// Our rank (the tag of our control messages).
    pub fn rank(&self) -> u64 {
        self.rank
    }

    /// Our address blob (`fi_getname`), for peers' [`OfiEndpoint::insert_peers`]; on shm followed by our
    /// pid, which peers watch (`exits.rs`).
    pub fn address(&self) -> Result<Vec<u8>, OfiError> {
        let mut name = self.ep.name()?;
        if self.watches_exits() {
            name.extend_from_slice(&std::process::id().to_le_bytes());
        }
        Ok(name)
    }

    /// Inserts peers' address blobs in rank order (index = rank; include our own address at our rank).
    pub fn insert_peers(&mut self, addrs: &[Vec<u8>]) -> Result<(), OfiError> {
        let (names, pids) = self.split_pids(addrs)?;
        let av = self.ep.av().clone();
        self.peers = names.iter().map(|a| av.insert(a)).collect::<Result<_, _>>()?;
        self.exit_watch = pids.and_then(|p| exits::ExitWatch::start(&p, self.lock_regions(&names, &p)));
        self.alive = vec![false; self.peers.len()];
        self.departed = vec![false; self.peers.len()];
        self.probe_refused = vec![None; self.peers.len()];
        self.probe_unsent = vec![None; self.peers.len()];
        self.peer_sockets = addrs.iter().map(|a| probe::socket_addr(a)).collect();
        Ok(())
    }

    /// Number of peers inserted.
    pub fn peers(&self) -> usize {
        self.peers.len()
    }

    /// Registers `len` bytes at `buf` for local use and remote writes, with a unique key.
    ///
    /// # Safety
    /// The memory must stay allocated until the returned `OfiMr` is dropped, and must only be written by
    /// peers while registered if the caller synchronizes its own accesses with [`OfiEvent::RemoteWrite`].
    pub unsafe fn register(&self, buf: *const u8, len: usize) -> Result<OfiMr, OfiError> {
        // SAFETY: forwarded caller guarantee.
        unsafe { self.register_with(buf, len, true, true) }
    }

    /// [`OfiEndpoint::register`] granting peers only the given rights (a write into a region without remote
    /// write access is rejected by the target's provider).
    ///
    /// # Safety
    /// As for [`OfiEndpoint::register`].
    pub unsafe fn register_with(
        &self,
        buf: *const u8,
        len: usize,
        remote_write: bool,
        remote_read: bool,
    ) -> Result<OfiMr, OfiError> {
        if len == 0 {
            return Err(OfiError::Invalid("cannot register a zero-length region".into()));
        }
        let key = next_key(&self.attrs, &self.key_secret);
        // SAFETY: forwarded caller guarantee.
        let mut access = sys::FI_SEND | sys::FI_RECV | sys::FI_READ | sys::FI_WRITE;
        if remote_write {
            access |= sys::FI_REMOTE_WRITE;
        }
        if remote_read {
            access |= sys::FI_REMOTE_READ;
        }
        // SAFETY: forwarded caller guarantee.
        let mr = unsafe { Mr::register(&self.ep, buf, len, access, key, self.attrs.mr_mode)? };
        let remote_base = if self.attrs.mr_mode & sys::FI_MR_VIRT_ADDR != 0 { buf as u64 } else { 0 };
        Ok(OfiMr { mr, base: buf, len, remote_base })
    }

    /// Writes `len` bytes at `local_off` of `local` into `remote` at `remote_off` on peer `peer`, with the
    /// immediate `imm` delivered to the peer's CQ ([`OfiEvent::RemoteWrite`]) when given.
    ///
    /// A write of at most [`OfiEndpoint::inject_max`] bytes is injected: complete on return (this call drives
    /// progress while the provider has no room for it); its `WriteDone` is reported only if `report`. Larger
    /// writes always report their completion.
    ///
    /// # Safety
    /// `local` (and its memory) must stay registered and unmodified until this write's
    /// [`OfiEvent::WriteDone`]/[`OfiEvent::WriteFailed`] is returned by `poll` (injected: until it returns).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn write(
        &mut self,
        local: &OfiMr,
        local_off: usize,
        len: usize,
        peer: usize,
        remote: &RemoteRegion,
        remote_off: u64,
        imm: Option<u64>,
        report: bool,
    ) -> Result<OpId, OfiError> {
        let dest = self.peer_addr(peer)?;
        if local_off.checked_add(len).is_none_or(|e| e > local.len) {
            return Err(OfiError::Invalid(format!(
                "write source {local_off}+{len} is outside the {}-byte region",
                local.len
            )));
        }
        if remote_off.checked_add(len as u64).is_none_or(|e| e > remote.len) {
            return Err(OfiError::Invalid(format!(
                "write target {remote_off}+{len} is outside the peer's {}-byte region",
                remote.len
            )));
        }
        if len > self.attrs.max_msg_size {
            return Err(OfiError::Invalid(format!("write of {len} B exceeds max_msg_size")));
        }
        if let Some(d) = imm {
            if self.attrs.cq_data_size < 8 && d >> (8 * self.attrs.cq_data_size) != 0 {
                return Err(OfiError::Invalid(format!(
                    "immediate {d:#x} does not fit the provider's {} bytes of CQ data",
                    self.attrs.cq_data_size
                )));
            }
        }
        if self.backlog.len() >= BACKLOG_MAX {
            return Err(OfiError::Busy("deferred-post queue full"));
        }
        // SAFETY: bounds checked above; local memory validity is the caller's guarantee.
        let buf = unsafe { local.base.add(local_off) };
        let (desc, addr, key) = (local.mr.desc(), remote.addr + remote_off, remote.key);
        // Small writes: inject (copied by the provider, no completion), after any deferred posts to the same peer
        // (their order). While the provider has no room (or the connection is still being set up), drive progress
        // and retry: what the caller gets back is complete.
        if len <= self.inject_max {
            let mut start = None;
            let mut spins = 0u32;
            loop {
                self.refuse_exited(peer)?;
                if !self.deferred_to(Some(dest)) {
                    // SAFETY: the source lies in a registered region the caller keeps valid (only read during
                    // the call).
                    match unsafe { self.ep.inject_write(buf, len, imm, dest, addr, key) } {
                        Ok(()) => {
                            // Taken: the connection stands, so the probes watch this peer from now on.
                            self.mark_alive(peer);
                            break;
                        }
                        Err(e) if e.is_again() => {}
                        // net: -ENOTCONN once the peer's connection is gone.
                        Err(e) => return Err(OfiError::Peer { peer, source: Box::new(e) }),
                    }
                }
                if start.get_or_insert_with(Instant::now).elapsed() > self.timeout {
                    return Err(OfiError::Timeout(format!(
                        "no room to inject a write to rank {peer} within {:?} (peer not progressing?)",
                        self.timeout
                    )));
                }
                spins += 1;
                if spins > 100 {
                    std::thread::yield_now();
                }
                // A dead tcp peer refuses injects for good (rxm keeps reconnecting): the probes name it.
                self.progress()?;
                self.probe_when_idle()?;
            }
            let id = OpId(INJECTED | self.next_inject);
            self.next_inject = (self.next_inject + 1) & !INJECTED;
            if report {
                self.injected.push_back(id);
            }
            return Ok(id);
        }
        let slot = match self.free_writes.pop() {
            Some(s) => s,
            None => {
                self.writes.push(None);
                self.write_peer.push(0);
                self.writes.len() - 1
            }
        };
        let ctx = self.writes[slot].get_or_insert_with(|| OpCtx::boxed(Kind::Write, 0));
        ctx.id = slot as u64;
        self.write_peer[slot] = peer;
        if let Err(e) = self.submit(Post::Write { buf, len, desc, imm, dest, addr, key, slot }) {
            self.free_writes.push(slot);
            return Err(towards(peer, e));
        }
        Ok(OpId(slot as u64))
    }

    /// Largest control payload ([`OfiConfig::ctrl_max`] minus the 8-byte header carrying the sender's rank).
    pub fn max_ctrl(&self) -> usize {
        self.ctrl_max - CTRL_HEADER
    }

    /// Sends a control message of at most [`OfiEndpoint::max_ctrl`] bytes with a user `tag` to `peer`; the bytes
    /// are copied, so `data` is free on return. Never waits for a peer: `Busy` when all send buffers are in
    /// flight (poll and retry).
    pub fn send_ctrl(&mut self, peer: usize, tag: u64, data: &[u8]) -> Result<(), OfiError> {
        let dest = self.peer_addr(peer)?;
        if data.len() > self.max_ctrl() {
            return Err(OfiError::Invalid(format!(
                "control message of {} B exceeds the maximum {}",
                data.len(),
                self.max_ctrl()
            )));
        }
        let slot = match self.free_sends.pop() {
            Some(s) => s,
            None => {
                self.progress()?;
                self.free_sends.pop().ok_or(OfiError::Busy("all control send buffers in flight"))?
            }
        };
        if self.backlog.len() >= BACKLOG_MAX {
            self.free_sends.push(slot);
            return Err(OfiError::Busy("deferred-post queue full"));
        }
        let off = (self.ctrl_recv_slots + slot) * self.ctrl_max;
        if self.send_seq.len() <= peer {
            self.send_seq.resize(peer + 1, 0);
        }
        let seq = self.send_seq[peer];
        self.send_peer[slot] = peer;
        self.ctrl_buf[off..off + 4].copy_from_slice(&(self.rank as u32).to_le_bytes());
        self.ctrl_buf[off + 4..off + CTRL_HEADER].copy_from_slice(&seq.to_le_bytes());
        self.ctrl_buf[off + CTRL_HEADER..off + CTRL_HEADER + data.len()].copy_from_slice(data);
        // SAFETY: off + CTRL_HEADER + data.len() <= off + ctrl_max is within ctrl_buf (slot < ctrl_send_slots).
        let buf = unsafe { self.ctrl_buf.as_ptr().add(off) };
        let (desc, len) = (self.ctrl_mr.desc(), CTRL_HEADER + data.len());
        let posted = self.submit(Post::Send { buf, len, desc, dest, tag, slot });
        match posted {
            Ok(()) => self.send_seq[peer] = seq.wrapping_add(1),
            Err(_) => self.free_sends.push(slot),
        }
        posted.map_err(|e| towards(peer, e))
    }

    /// Drives progress and moves up to 16 new events into `out`; returns how many were added.
    pub fn poll(&mut self, out: &mut Vec<OfiEvent>) -> Result<usize, OfiError> {
        if self.pending.is_empty() {
            self.progress()?;
        }
        // Events from the provider were activity (`progress` noted when); local ones are not.
        let heard = self.pending.len();
        if heard == 0 || self.inject_failed.is_some() {
            self.probe_when_idle()?;
        }
        let n = heard + self.injected.len();
        // One event at a time: `extend` over the deques' drains cost more per poll.
        while let Some(ev) = self.pending.pop_front() {
            out.push(ev);
        }
        while let Some(id) = self.injected.pop_front() {
            out.push(OfiEvent::WriteDone(id));
        }
        Ok(n)
    }

    /// Takes write `op`'s `WriteDone` if it is there, reading the CQ once unless an event of
    /// `op` is already pending: whether the write completed. Every other event, a `WriteFailed`
    /// of `op` included, stays for `poll`.
    pub fn take_done(&mut self, op: OpId) -> Result<bool, OfiError> {
        if op.0 & INJECTED != 0 {
            // Complete on return; its `WriteDone` is a local event.
            if let Some(i) = self.injected.iter().position(|&x| x == op) {
                self.injected.remove(i);
            }
            return Ok(true);
        }
        let mine = |e: &OfiEvent| matches!(e, OfiEvent::WriteDone(x) | OfiEvent::WriteFailed(x, _) if *x == op);
        if !self.pending.iter().any(mine) {
            // `handle` keeps `op`'s completion out of `pending` (pushing it and finding it there again cost every
            // blocking write a search).
            self.taking = Some(op);
            let res = self.progress();
            self.taking = None;
            if std::mem::take(&mut self.taken) {
                if let Err(e) = res {
                    self.pending.push_back(OfiEvent::WriteDone(op));
                    return Err(e);
                }
                return Ok(true);
            }
            res?;
            return Ok(false);
        }
        match self.pending.iter().position(|e| matches!(e, OfiEvent::WriteDone(x) if *x == op)) {
            Some(i) => {
                self.pending.remove(i);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// One round of liveness probes when nothing came from the provider for a probe interval (and none was sent
    /// within one); a probe that fails names its peer ([`OfiConfig::probe_interval`]).
    fn probe_when_idle(&mut self) -> Result<(), OfiError> {
        if let Some((since, _)) = &self.inject_failed {
            // Probes name the peer whose injected write failed, or, failing that, the write's error stands.
            let every = self.probe_interval.unwrap_or(Duration::from_secs(1));
            if since.elapsed() > every * 4 {
                let (_, err) = self.inject_failed.take().expect("checked above");
                return Err(err);
            }
            if self.last_probe.elapsed() >= INJECT_FAILED_PROBE {
                self.last_probe = Instant::now();
                self.probe()?;
            }
            return Ok(());
        }
        if let Some(every) = self.probe_interval {
            if self.quiet.0 != self.activity {
                self.quiet = (self.activity, Instant::now());
            } else if self.quiet.1.elapsed() >= every && self.last_probe.elapsed() >= every {
                self.last_probe = Instant::now();
                self.probe()?;
            }
        }
        Ok(())
    }

    /// Before the endpoint closes: drives progress until every control message still queued or in
    /// flight has left, for at most [`LINGER`]. With manual progress a send posted just before the
    /// close (the abort notice of a rank that gives up and exits) would otherwise die with the
    /// endpoint, and the peer waiting for it would blame the wrong rank.
    fn linger(&mut self) {
        let t0 = Instant::now();
        while !(self.backlog.is_empty() && self.free_sends.len() == self.send_ctx.len()) && t0.elapsed() < LINGER {
            // A send to a dead peer fails here; the others still have to leave.
            let _ = self.progress();
        }
    }

    /// Whether sleeping now cannot stall our own traffic: no event pending, no deferred post, and no write or
    /// control send of ours in flight (with manual progress the provider pushes a large write into the socket
    /// only while we poll, so a sleeping initiator stalls it and the peer waiting for it).
    pub fn may_sleep(&self) -> bool {
        self.pending.is_empty()
            && self.injected.is_empty()
            && self.backlog.is_empty()
            && self.free_writes.len() == self.writes.len()
            && self.free_sends.len() == self.send_ctx.len()
    }

    /// Polls until `pred` accepts an event (returned) or `timeout` passes; other events are kept for `poll`.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&OfiEvent) -> bool,
    ) -> Result<OfiEvent, OfiError> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(i) = self.pending.iter().position(&mut pred) {
                return Ok(self.pending.remove(i).expect("index from position"));
            }
            if let Some(i) = self.injected.iter().position(|&id| pred(&OfiEvent::WriteDone(id))) {
                return Ok(OfiEvent::WriteDone(self.injected.remove(i).expect("index from position")));
            }
            if self.progress()? == 0 {
                spins += 1;
                if spins > 1000 {
                    std::thread::yield_now();
                }
                if start.elapsed() > timeout {
                    return Err(OfiError::Timeout(format!("no matching completion within {timeout:?}")));
                }
            } else {
                spins = 0;
            }
        }
    }

    fn peer_addr(&self, peer: usize) -> Result<u64, OfiError> {
        self.peers.get(peer).copied().ok_or_else(|| {
            OfiError::Invalid(format!("peer {peer} is not in the address vector ({} peers)", self.peers.len()))
        })
    }

    /// Whether a deferred post to `dest` waits in the backlog (`None`: a receive).
    fn deferred_to(&self, dest: Option<u64>) -> bool {
        self.backlog.iter().any(|(_, q)| q.dest() == dest)
    }

    /// Posts `p` now, or queues it behind earlier deferred posts to the same destination, or when the provider
    /// says `-FI_EAGAIN` (e.g. while a connection is being set up, which needs the peer's progress).
    fn submit(&mut self, p: Post) -> Result<(), OfiError> {
        if self.deferred_to(p.dest()) {
            self.backlog.push_back((Instant::now(), p));
            return Ok(());
        }
        match self.try_post(&p) {
            Err(e) if e.is_again() => {
                self.backlog.push_back((Instant::now(), p));
                Ok(())
            }
            other => other,
        }
    }

    fn try_post(&self, p: &Post) -> Result<(), OfiError> {
        match *p {
            Post::Write { slot, .. } => self.refuse_exited(self.write_peer[slot])?,
            Post::Send { slot, .. } => self.refuse_exited(self.send_peer[slot])?,
            Post::Recv { .. } => {}
        }
        match *p {
            Post::Write { buf, len, desc, imm, dest, addr, key, slot } => {
                let ctx = self.writes[slot].as_deref().expect("write context allocated before posting");
                let ctx = (ctx as *const OpCtx).cast_mut().cast::<c_void>();
                // SAFETY: the caller of `write` keeps the source registered and unmodified until completion; the
                // context is boxed in self.writes[slot] until its completion is read.
                unsafe { self.ep.write(buf, len, desc, imm, dest, addr, key, ctx) }
            }
            Post::Send { buf, len, desc, dest, tag, slot } => {
                let ctx = (&self.send_ctx[slot] as *const OpCtx).cast_mut().cast::<c_void>();
                // SAFETY: the send slot of ctrl_buf is ours until its completion frees it; the context lives in the
                // fixed self.send_ctx slice.
                unsafe { self.ep.tsend(buf, len, desc, dest, tag, ctx) }
            }
            Post::Recv { slot } => {
                let off = slot * self.ctrl_max;
                // SAFETY: slot < ctrl_recv_slots, so the slot lies within ctrl_buf.
                let buf = unsafe { self.ctrl_buf.as_ptr().add(off) }.cast_mut();
                let ctx = (&self.recv_ctx[slot] as *const OpCtx).cast_mut().cast::<c_void>();
                // SAFETY: the receive slot belongs to this receive until its completion or the endpoint's close
                // (which happens before ctrl_buf is freed); the context lives in the fixed self.recv_ctx slice.
                unsafe { self.ep.trecv_any(buf, self.ctrl_max, self.ctrl_mr.desc(), ctx) }
            }
        }
    }

    /// Retries deferred posts, in order per destination: a destination whose oldest post is refused again keeps
    /// its later posts waiting, while the others go on (a peer that died with our posts refused must not hold
    /// back the abort notices to the living). One that stays refused past the timeout fails.
    fn flush_backlog(&mut self) -> Result<(), OfiError> {
        let mut blocked: Vec<Option<u64>> = Vec::new();
        let mut i = 0;
        while i < self.backlog.len() {
            let (since, ref p) = self.backlog[i];
            if blocked.contains(&p.dest()) {
                i += 1;
                continue;
            }
            let res = match self.try_post(p) {
                Err(e) if e.is_again() => {
                    if since.elapsed() <= self.timeout {
                        blocked.push(p.dest());
                        i += 1;
                        continue;
                    }
                    Err(OfiError::Timeout(format!("{e} for {:?} (peer not progressing?)", self.timeout)))
                }
                other => other,
            };
            let (_, p) = self.backlog.remove(i).expect("index within the backlog");
            if let Err(e) = res {
                match p {
                    Post::Write { slot, .. } => {
                        self.free_writes.push(slot);
                        self.pending.push_back(OfiEvent::WriteFailed(OpId(slot as u64), e));
                    }
                    Post::Send { slot, .. } => {
                        self.free_sends.push(slot);
                        return Err(match e {
                            named @ OfiError::Peer { .. } => named,
                            e => OfiError::Peer { peer: self.send_peer[slot], source: Box::new(e) },
                        });
                    }
                    Post::Recv { .. } => return Err(e),
                }
            }
        }
        Ok(())
    }

    fn post_recv(&mut self, slot: usize) -> Result<(), OfiError> {
        self.submit(Post::Recv { slot })
    }

    /// Reads the CQ once, turning entries into pending events; returns how many entries were read.
    fn progress(&mut self) -> Result<usize, OfiError> {
        let mut evs = std::mem::take(&mut self.scratch);
        evs.clear();
        let res = self.ep.cq().read(&mut evs, 16);
        let mut out = Ok(());
        for ev in evs.drain(..) {
            if let Err(e) = self.handle(ev) {
                out = Err(e);
            }
        }
        self.scratch = evs;
        let n = res?;
        self.activity += n as u64;
        out?;
        self.flush_backlog()?;
        Ok(n)
    }

    /// Delivers control messages of each sender in its send order (providers may complete receives out of
    /// order, e.g. shm): early arrivals wait in `early` until the gap before them is filled.
    fn deliver_ctrl(&mut self, from: usize, seq: u32, tag: u64, data: Vec<u8>) {
        if self.recv_seq.len() <= from {
            self.recv_seq.resize(from + 1, 0);
        }
        if seq != self.recv_seq[from] {
            self.early.insert((from, seq), (tag, data));
            return;
        }
        self.pending.push_back(OfiEvent::Ctrl { from: from as u64, tag, data });
        let mut next = seq.wrapping_add(1);
        while let Some((tag, data)) = self.early.remove(&(from, next)) {
            self.pending.push_back(OfiEvent::Ctrl { from: from as u64, tag, data });
            next = next.wrapping_add(1);
        }
        self.recv_seq[from] = next;
    }

    fn handle(&mut self, ev: CqEvent) -> Result<(), OfiError> {
        match ev {
            CqEvent::Ok(e) => {
                if e.flags & sys::FI_REMOTE_CQ_DATA != 0 && e.flags & sys::FI_RECV == 0 {
                    self.pending.push_back(OfiEvent::RemoteWrite { imm: e.data, len: e.len });
                    return Ok(());
                }
                if e.op_context.is_null() {
                    return Ok(());
                }
                // SAFETY: every context we post points to an OpCtx boxed in self; remote events were handled above.
                let (kind, id) = unsafe {
                    let c = &*(e.op_context as *const OpCtx);
                    (c.kind, c.id as usize)
                };
                match kind {
                    Kind::Write => {
                        // Taken by the provider for that peer: the connection stands, the probes watch it.
                        self.mark_alive(self.write_peer[id]);
                        self.free_writes.push(id);
                        if self.taking == Some(OpId(id as u64)) {
                            self.taken = true;
                        } else {
                            self.pending.push_back(OfiEvent::WriteDone(OpId(id as u64)));
                        }
                    }
                    Kind::CtrlSend => {
                        self.mark_alive(self.send_peer[id]);
                        self.free_sends.push(id)
                    }
                    Kind::CtrlRecv => {
                        let off = id * self.ctrl_max;
                        let len = e.len.min(self.ctrl_max);
                        if len < CTRL_HEADER {
                            self.post_recv(id)?;
                            return Err(OfiError::Unsupported(format!("control message of {len} B lacks its header")));
                        }
                        let word = |i: usize| {
                            u32::from_le_bytes(self.ctrl_buf[off + i..off + i + 4].try_into().expect("4 bytes"))
                        };
                        let (from, seq) = (word(0), word(4));
                        let sender = (from & !(PROBE | GOODBYE)) as usize;
                        if from & GOODBYE != 0 {
                            if let Some(d) = self.departed.get_mut(sender) {
                                *d = true;
                                self.alive[sender] = false;
                            }
                        } else {
                            self.mark_alive(sender);
                        }
                        if from & PROBE != 0 {
                            // A peer's liveness probe or goodbye: nothing to deliver.
                            return self.post_recv(id);
                        }
                        let from = from as usize;
                        let data = self.ctrl_buf[off + CTRL_HEADER..off + len].to_vec();
                        self.post_recv(id)?;
                        self.deliver_ctrl(from, seq, e.tag, data);
                    }
                }
                Ok(())
            }
            CqEvent::Err { op_context, flags, err } => {
                if op_context.is_null() || flags & sys::FI_REMOTE_CQ_DATA != 0 {
                    // An injected write, or a write arriving here, failed (net: its connection is gone); it has
                    // no context to say whose.
                    return self.unexplained(err);
                }
                // SAFETY: as above, our contexts point to OpCtx boxes owned by self.
                let (kind, id) = unsafe {
                    let c = &*(op_context as *const OpCtx);
                    (c.kind, c.id as usize)
                };
                match kind {
                    Kind::Write => {
                        self.free_writes.push(id);
                        self.pending.push_back(OfiEvent::WriteFailed(OpId(id as u64), err));
                        Ok(())
                    }
                    Kind::CtrlSend => {
                        self.free_sends.push(id);
                        Err(OfiError::Peer { peer: self.send_peer[id], source: Box::new(err) })
                    }
                    Kind::CtrlRecv => {
                        if err.code() == Some(sys::FI_ECANCELED as i32) {
                            return Ok(());
                        }
                        self.post_recv(id)?;
                        // Posted for any sender: a failure (net: a connection dropped) names nobody.
                        self.unexplained(err)
                    }
                }
            }
        }
    }

    /// A failure that names no peer (an injected write, a write arriving here, a receive posted for
    /// any sender): probe at once and keep probing, so that the probe to the peer whose connection
    /// is gone fails and names it (`poll`); a failure no probe explains stands after four probe
    /// intervals. (Seen in CI: a survivor of `ofi_tcp_dies_in_zero_copy_calls` failed with such a
    /// completion error, -ENOTCONN, blaming nobody.)
    fn unexplained(&mut self, err: OfiError) -> Result<(), OfiError> {
        self.inject_failed.get_or_insert((Instant::now(), err));
        self.probe()
    }
}

/// A provider call that refused a post to `peer` names the peer (net: `-ENOTCONN` once the peer's
/// connection is gone, which the executor must blame on that rank); our own refusals stay as they are.
fn towards(peer: usize, e: OfiError) -> OfiError {
    match e {
        call @ OfiError::Call { .. } => OfiError::Peer { peer, source: Box::new(call) },
        other => other,
    }
}

fn is_slow(prov: &str) -> bool {
    prov.starts_with("sockets") || prov.starts_with("udp")
}

/// The key to request for a registration, so that a stranger who reaches the provider cannot guess
/// one (`docs/security.md`). 64-bit keys: 64 bits of HMAC-SHA256(`secret`, a per-process count),
/// fresh for each registration (two alike in a process of n registrations: a chance of about
/// n²/2⁶⁵, and the provider refuses the second). Narrower keys: the count from a random start,
/// unique but only as hard to guess as the key is wide. 0 where the provider picks the keys
/// (`FI_MR_PROV_KEY`) or does not say how wide they are.
fn next_key(attrs: &ProviderAttrs, secret: &[u8; 32]) -> u64 {
    if attrs.mr_mode & sys::FI_MR_PROV_KEY != 0 {
        return 0;
    }
    let n = KEY_COUNTER.fetch_add(1, Ordering::Relaxed);
    let bits = (attrs.mr_key_size.min(8) * 8) as u32;
    if bits >= 64 {
        let mac = crate::auth::derive(secret, "ofi memory-region key", &[&n.to_le_bytes()]);
        u64::from_le_bytes(mac[..8].try_into().expect("8 of 32 bytes"))
    } else if bits == 0 {
        n
    } else {
        let start = u64::from_le_bytes(secret[..8].try_into().expect("8 of 32 bytes"));
        start.wrapping_add(n) & ((1u64 << bits) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(mr_mode: u64, mr_key_size: usize) -> ProviderAttrs {
        ProviderAttrs {
            prov_name: "test".into(),
            fabric_name: String::new(),
            domain_name: String::new(),
            mr_mode,
            mr_key_size,
            cq_data_size: 8,
            max_msg_size: usize::MAX,
            inject_size: 0,
            mode: 0,
            manual_progress: true,
        }
    }

    #[test]
    fn requested_keys_are_unique_unguessable_and_fit_the_key_size() {
        let a = attrs(0, 8);
        let keys: Vec<u64> = (0..1000).map(|_| next_key(&a, &[1; 32])).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), keys.len(), "duplicate requested keys");
        // Not a count: neighbours differ by more than a few, in the high bits too.
        assert!(keys.windows(2).all(|w| w[0].abs_diff(w[1]) > 1 << 20), "sequential keys");
        assert!(keys.iter().any(|k| k >> 56 != keys[0] >> 56), "the high bits never change");
        // Another secret, other keys.
        let other: Vec<u64> = (0..100).map(|_| next_key(&a, &[2; 32])).collect();
        assert!(other.iter().all(|k| !keys.contains(k)));
        let small = attrs(0, 2);
        assert!((0..100).all(|_| next_key(&small, &[0xff; 32]) <= 0xffff));
        assert_eq!(next_key(&attrs(sys::FI_MR_PROV_KEY, 8), &[1; 32]), 0, "provider keys are not requested");
    }

    #[test]
    fn remote_region_round_trips_through_bytes() {
        let r = RemoteRegion { addr: 0x7fff_0000_1000, key: 42, len: 16 << 20 };
        assert_eq!(RemoteRegion::from_bytes(&r.to_bytes()), Some(r));
        assert_eq!(RemoteRegion::from_bytes(&[0; 23]), None);
    }
}
