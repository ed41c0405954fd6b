//! The fabric contract: one object-safe [`Endpoint`] trait every backend (local, shm, ofi, later
//! verbs) implements — addresses, registration, notified one-sided writes, control messages, completions.
//!
//! # Life cycle
//! 1. [`crate::open`] builds an endpoint for a [`crate::Backend`] with this process's `rank` in a
//!    group of `size` ranks.
//! 2. [`Endpoint::address`] returns an opaque blob; the caller exchanges blobs through its bootstrap
//!    store and hands ALL of them (indexed by rank, its own included) to [`Endpoint::insert_peers`].
//!    Data operations before `insert_peers` fail with `InvalidArgument`.
//! 3. Register memory ([`Endpoint::register`] for caller memory, `unsafe`; [`Endpoint::alloc`] for a
//!    safe registered allocation), send the [`RemoteMr`] descriptors to peers in control messages,
//!    write, poll.
//!
//! # Rules every backend guarantees (the executor relies on them)
//! - **Write-with-immediate visibility.** When the target sees [`Completion::WriteArrived`] for a
//!   write, all bytes of that write are visible in the target's memory.
//! - **Write without immediate** is silent at the target; the initiator learns only local completion.
//! - **Local completion.** [`Completion::WriteDone`] with the caller's `ctx` is reported exactly once
//!   per successful `write` call; after it the source range may be reused. A backend whose writes
//!   are done on return (up to `Caps::inline_completion` bytes) still reports `WriteDone` through
//!   `poll`, except for a write whose `ctx` is [`SILENT_WRITE`].
//!   A `write` that returned `Err` reports nothing and had no effect at the target.
//! - **Control messages** from one sender to one receiver arrive in send order, exactly once,
//!   intact, up to `Caps::max_ctrl` bytes (local 64 KiB, shm 4072 B; protocol headers should stay
//!   under 1 KiB to fit every provider's eager path). `send_ctrl` copies the payload (the buffer is
//!   reusable on return) and reports no completion.
//! - **Ordering between a pair.** If `Caps::ordered_writes`, a write's data and immediate are
//!   visible at the target no later than those of the next write/control message from the same
//!   initiator (FIFO per pair); otherwise only the first rule holds and the protocol must use
//!   immediates to learn arrival.
//! - **Deregistered keys.** A write whose remote key is not (or no longer) registered at the
//!   target fails with [`Error::InvalidKey`] (synchronously, or as `Completion::WriteError` for
//!   asynchronous backends) and never touches the target's memory. Deregistration is on drop of the
//!   last [`Mr`] clone; the race with a concurrently arriving write is closed per backend (documented
//!   in each backend module): after `drop` returns, no write lands in that memory.
//! - **Backpressure.** When queues are full, `write`/`send_ctrl` return [`Error::Busy`] without
//!   side effects; the caller polls (which lets peers drain) and retries. Neither call blocks on a
//!   peer, so two ranks sending to each other can never deadlock inside the fabric.
//! - **Progress.** With `Caps::progress == Progress::Manual`, operations advance only inside
//!   `poll`/`wait` of the endpoint (libfabric manual progress); with `Auto` they advance on their own
//!   and `writes_land_without_target_poll` says whether a target that never polls still receives
//!   data (true for shm and local: the initiator copies).
//! - **Immediate width.** `imm` is 64 bits in the API; backends carry `Caps::imm_bits` of them
//!   (verbs: 32). A value that does not fit is `InvalidArgument`, never silently truncated.
//! - **Loopback.** `peer == rank` is allowed for writes and control messages.
//! - **Errors** are typed, carry the provider's text, and nothing panics.
//! - **Dead peers.** A write or control message to a dead peer is an `Err` naming the peer;
//!   `wait` returns `Err(Timeout)` when its timeout expires so the executor can name silent peers.
//! - **Threads.** An endpoint is `Send` (moved to a progress thread) and used through `&mut self`;
//!   `Mr` clones are `Send + Sync` and may be dropped on any thread.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::mr::{Access, LocalRange, Mr, RemoteMr, RemoteRange};

/// How operations make progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Operations complete without the caller driving them (shm, local, hardware RMA).
    Auto,
    /// The caller must call `poll`/`wait` for anything to move (libfabric `FI_PROGRESS_MANUAL`).
    Manual,
}

/// Properties the executor adapts to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Backend name (`local`, `shm`, `ofi`).
    pub backend: &'static str,
    /// Provider (`ofi`: `tcp`, `verbs`, …; otherwise same as backend).
    pub provider: String,
    /// Writes up to this many bytes complete locally at once (source reusable on return).
    pub inject_size: usize,
    /// Largest single write; larger transfers must be split by the caller.
    pub max_write: usize,
    /// Largest control-message payload.
    pub max_ctrl: usize,
    /// Bits of the immediate carried to the target (64 for shm/local, 32 for verbs).
    pub imm_bits: u32,
    /// Writes land in target memory even if the target never polls.
    pub writes_land_without_target_poll: bool,
    /// Writes and control messages of one initiator to one target become visible in issue order.
    pub ordered_writes: bool,
    /// Writes of at most this many bytes are complete when `write` returns: the source may be
    /// reused at once (`WriteDone` is still reported through `poll`, unless the write's `ctx` is
    /// [`SILENT_WRITE`]). 0: none; `usize::MAX`: all (shm, local).
    pub inline_completion: usize,
    /// Progress model.
    pub progress: Progress,
    /// Peers' registrations can be mapped for direct load/store ([`Endpoint::map_remote`]).
    pub load_store: bool,
}

impl Caps {
    /// Whether a write of `len` bytes is complete when `write` returns.
    #[inline]
    pub fn completes_inline(&self, len: usize) -> bool {
        len <= self.inline_completion
    }
}

/// The `ctx` of a write that reports no [`Completion::WriteDone`] when it completes inside `write`
/// (at most [`Caps::inline_completion`] bytes); on larger writes it is an ordinary value. Saves the
/// executor's per-message completion bookkeeping (shared memory; small writes on tcp).
pub const SILENT_WRITE: u64 = u64::MAX;

/// Something `poll` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// A write issued by this endpoint finished locally; `ctx` is the caller's value.
    WriteDone {
        /// User context given to `write`.
        ctx: u64,
    },
    /// An asynchronous write issued by this endpoint failed (e.g. `InvalidKey` detected by the
    /// target NIC); `ctx` is the caller's value and `error` the provider's text.
    WriteError {
        /// User context given to `write`.
        ctx: u64,
        /// What failed.
        error: String,
    },
    /// A peer's write with immediate data into our memory arrived (data visible).
    WriteArrived {
        /// Initiator rank.
        peer: usize,
        /// The immediate value.
        imm: u64,
    },
    /// A control message arrived.
    Ctrl {
        /// Sender rank.
        peer: usize,
        /// Sender's tag.
        tag: u64,
        /// Payload.
        data: Vec<u8>,
    },
}

/// What one route class carried from this endpoint: writes and control messages, and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteCount {
    /// Writes and control messages sent.
    pub msgs: u64,
    /// Their payload bytes.
    pub bytes: u64,
}

/// Traffic per route class of an endpoint that routes peers over two backends (`crate::routes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteCounters {
    /// To peers on this node, over the node-local backend (shm).
    pub node: RouteCount,
    /// To the other peers, over the network backend.
    pub network: RouteCount,
}

/// A peer's registration mapped into this process for direct load/store (node-local backends).
/// Stays valid while it lives, even if the peer deregisters (the mapping keeps the pages).
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
    _keep: Box<dyn Send + Sync>,
}

// SAFETY: a Mapping is a (ptr, len) view of shared pages kept alive by `_keep`; all access goes
// through raw pointers whose synchronisation is the user's responsibility (documented on `as_ptr`).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Built by backends.
    ///
    /// # Safety
    /// `[ptr, ptr+len)` must stay mapped read/write while `keep` lives.
    pub unsafe fn from_parts(ptr: *mut u8, len: usize, keep: Box<dyn Send + Sync>) -> Mapping {
        Mapping { ptr, len, _keep: keep }
    }

    /// Start of the mapping. Loads/stores are shared with other processes: synchronise with
    /// atomics (e.g. `AtomicU64::from_ptr`) or through completions/control messages.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

/// Where [`Endpoint::read_with`] hands a peer's bytes: their offset in the source range, and
/// the bytes.
pub type Pieces<'a> = &'a mut dyn FnMut(usize, &[u8]);

/// The contract. Object-safe: the executor holds a `Box<dyn Endpoint>`.
pub trait Endpoint: Send {
    /// This endpoint's rank in its group.
    fn rank(&self) -> usize;

    /// Number of ranks in the group.
    fn size(&self) -> usize;

    /// Capabilities.
    fn caps(&self) -> &Caps;

    /// This endpoint's address blob (opaque; exchange it through the bootstrap store).
    fn address(&self) -> Result<Vec<u8>>;

    /// All ranks' address blobs indexed by rank (length `size`, own blob included). Call once.
    fn insert_peers(&mut self, blobs: &[Vec<u8>]) -> Result<()>;

    /// Register caller memory `[ptr, ptr+len)`.
    ///
    /// # Safety
    /// The memory must stay valid (allocated, not moved) until the returned [`Mr`] and all its
    /// clones are dropped, and until every write using it has been reported complete by `poll`.
    /// While peers may write into it, local code must access it only through raw pointers (or
    /// `Mr::read_at`), never through a live `&`/`&mut` reference.
    unsafe fn register(&mut self, ptr: *mut u8, len: usize, access: Access) -> Result<Mr>;

    /// A zeroed, registered allocation of `len` bytes owned by the returned [`Mr`] (page-aligned;
    /// on shm it is shared memory that peers can also [`map_remote`](Endpoint::map_remote)).
    fn alloc(&mut self, len: usize, access: Access) -> Result<Mr>;

    /// One-sided write of `src` into the peer's `dst` (equal lengths), optionally with immediate
    /// data reported at the target as [`Completion::WriteArrived`]. `ctx` comes back in
    /// [`Completion::WriteDone`] — except `ctx` = [`SILENT_WRITE`] on a write of at most
    /// [`Caps::inline_completion`] bytes: that write is complete on return and reports nothing.
    fn write(&mut self, peer: usize, src: LocalRange<'_>, dst: RemoteRange, imm: Option<u64>, ctx: u64) -> Result<()>;

    /// [`Endpoint::write`] for a caller that waits for the write's local completion next (a
    /// blocking call's eager Sends): `Ok(true)` when the write completed within this call, and
    /// then no [`Completion::WriteDone`] is reported for it; `Ok(false)` when it is in flight, and
    /// its `WriteDone` (or `WriteError`) comes through `poll` as after `write`.
    ///
    /// A backend whose completion of a larger write is usually ready as soon as it is posted
    /// (ofi `net` hands the bytes to the socket inside `fi_writedata`) looks for it once, which
    /// spares the completion its way through `poll` and the caller's bookkeeping. The default
    /// is `write`, then `false`.
    fn write_settled(
        &mut self,
        peer: usize,
        src: LocalRange<'_>,
        dst: RemoteRange,
        imm: Option<u64>,
        ctx: u64,
    ) -> Result<bool> {
        self.write(peer, src, dst, imm, ctx).map(|()| false)
    }

    /// One-sided read: copies `src`, a range of `peer`'s registration made with `REMOTE_READ`,
    /// into `dst`, a range of this rank's own registration (equal lengths), and returns once the
    /// bytes are there (no completion). Only where [`Endpoint::reads_from`] says so; the default
    /// is `Unsupported`.
    fn read(&mut self, peer: usize, src: RemoteRange, dst: LocalRange<'_>) -> Result<()> {
        let _ = (peer, src, dst);
        Err(Error::Unsupported { backend: self.caps().backend, what: "one-sided reads".into() })
    }

    /// One-sided read without a copy where possible: hands `f` the bytes of `src` (a range of
    /// `peer`'s registration made with `REMOTE_READ`) with their offset in `src`, all at once
    /// where they are mapped here (`shm`: `alloc`ated memory), else in pieces of at most `piece`
    /// bytes read into a buffer of the endpoint's (a consumer that reduces them keeps the pieces
    /// in cache). The peer must leave the range unchanged until told it was read. Only where
    /// [`Endpoint::reads_from`] says so; the default is `Unsupported`.
    fn read_with(&mut self, peer: usize, src: RemoteRange, piece: usize, f: Pieces<'_>) -> Result<()> {
        let _ = (peer, src, piece, f);
        Err(Error::Unsupported { backend: self.caps().backend, what: "one-sided reads".into() })
    }

    /// Whether [`Endpoint::read`] from `peer` works, and `peer` can read from this rank alike
    /// (`shm`: `process_vm_readv`, or a load through a mapping of `alloc`ated memory). Default: no.
    fn reads_from(&self, _peer: usize) -> bool {
        false
    }

    /// Send a small tagged control message (≤ `Caps::max_ctrl` bytes); copied, no completion.
    fn send_ctrl(&mut self, peer: usize, tag: u64, data: &[u8]) -> Result<()>;

    /// Busy poll: appends ready completions to `out`, returns how many were appended (0 if none).
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize>;

    /// Like `poll` but waits (spin, yield, then block — see [`crate::WaitPolicy`]) until at least
    /// one completion is appended; `Err(Timeout)` after `timeout` (`None` = wait forever).
    fn wait(&mut self, out: &mut Vec<Completion>, timeout: Option<Duration>) -> Result<usize>;

    /// Map a peer's registration (made with `alloc` and `REMOTE_READ` or `REMOTE_WRITE`) for
    /// direct load/store; node-local backends only (`Caps::load_store`), else `Unsupported`.
    fn map_remote(&mut self, peer: usize, mr: &RemoteMr) -> Result<Mapping>;

    /// Hint for a registration of this rank's own memory (made with `register`): the program
    /// uses it call after call, so a one-time cost that makes peers' writes into it cheaper pays.
    /// On `shm` its 2 MiB-aligned pages are then backed by transparent huge pages, which peers'
    /// `process_vm_writev` copies fill faster than 4 KiB pages. Default: ignored.
    fn hint_reused(&mut self, _mr: &Mr) {}

    /// Whether `peer`'s writes into `mr`, a registration of this rank, are a system call each
    /// rather than stores through a mapping (as its reads from it are): on `shm`, memory of
    /// `register` is written with `process_vm_writev`, which pins its pages one by one. The executor then has a write of
    /// moderate size land in memory of `alloc` and copies it out, piece by piece as the pieces arrive: a backend that
    /// answers yes must deliver one peer's writes with immediate data in the order they were made. Default: no.
    fn writes_by_syscall(&self, _peer: usize, _mr: &Mr) -> bool {
        false
    }

    /// Whether this rank's writes into `mr`, a registration of `peer`, are a system call each
    /// (as reads from it are): on `shm`, memory `peer` made with `register` rather than `alloc`.
    /// Default: no.
    fn writes_into_by_syscall(&self, _peer: usize, _mr: &RemoteMr) -> bool {
        false
    }

    /// The pieces a transfer larger than this to `peer` goes in, one write each (at most
    /// [`Caps::max_write`], which is the default). The target of a zero-copy transfer picks it
    /// for the connection from the initiator and tells the initiator in its grant, so the two
    /// always agree on how many writes make the transfer, whatever each side's settings.
    fn write_segment(&self, peer: usize) -> usize {
        let _ = peer;
        self.caps().max_write
    }

    /// Every peer has been heard from, so connections a provider opens on demand exist now: a
    /// backend may adjust them (ofi: the congestion control of a socket provider's connections,
    /// see `crate::congestion`). Default: nothing.
    fn connected(&mut self) -> Result<()> {
        Ok(())
    }

    /// The executor found that this node's ranks do not outnumber its cores: from now on `wait`
    /// polls without yielding the core (the [`crate::WaitPolicy`]'s yield rounds are dropped, and
    /// so are the yields of a backend's own idle phase). A yield helps only a rank of ours that
    /// shares the core; to an unrelated busy process on it, a yield under the kernel's EEVDF
    /// scheduler hands a whole time slice, which the peer waiting for us then waits too.
    /// Default: nothing (a backend that never yields).
    fn never_yield(&mut self) {}

    /// Announces that this rank gives up its CPU (`true`: it yields or sleeps waiting for
    /// peers) or runs again (`false`), so that node-local peers can tell whether waiting for it
    /// by spinning is worth it ([`Endpoint::peer_busy_elsewhere`]). Default: ignored.
    fn set_idle(&self, _idle: bool) {}

    /// Whether `peer` is running right now on another CPU than this rank (so a message from it
    /// can come while we spin, and yielding our CPU would not help it). `false` when it yields or
    /// sleeps, shares our CPU, or the backend cannot tell (the default).
    fn peer_busy_elsewhere(&self, _peer: usize) -> bool {
        false
    }

    /// `Some(reason)` when `peer`'s process is known to be gone without having closed its
    /// endpoint (crashed or killed: node-local backends can tell); `None` when it is alive,
    /// closed cleanly, or the backend cannot tell (the default).
    fn peer_gone(&self, _peer: usize) -> Option<String> {
        None
    }

    /// What went over each route class so far, on an endpoint with routes (`crate::routes`);
    /// `None` on a single backend (the default).
    fn route_counters(&self) -> Option<RouteCounters> {
        None
    }
}
