//! Backend `shm`: the ranks of one node as processes. Data moves in one copy (`process_vm_writev`
//! into the peer's registered memory); notifications and control messages go through per-pair SPSC
//! queues in the target's shared segment; a futex doorbell lets idle ranks sleep.
//!
//! # Design decisions
//! - **Segments.** Every rank creates its own memfd segment (header + key table + one inbound queue
//!   per source rank, see `shm/segment.rs`) — no creator rank, no names to clean up. The address blob
//!   carries `(job hash, pid, fd, rank, size)`; peers open `/proc/<pid>/fd/<fd>` and map it. A memfd
//!   disappears when the last fd and mapping go, so nothing is left behind after a crash (no
//!   `shm_unlink`). Requirement: peers run as the same user and may ptrace each other (also needed by
//!   `process_vm_writev`; `kernel.yama.ptrace_scope` ≤ 1 with same-parent launchers, or 0).
//! - **Writes.** The writer enters the key slot in the target's table (fails with `InvalidKey` on a
//!   deregistered key), checks bounds and rights against the TABLE (not the descriptor), copies, leaves
//!   the slot, and pushes the immediate (if any) into the target's queue — so data is visible before
//!   its notification. The copy is a `memcpy` through a cached mapping of the peer's memfd when the
//!   destination came from `alloc` (mapped once per key while the slot is entered, so the fd cannot
//!   be stale; mappings of retired keys are swept on the next miss or idle wait), and
//!   `process_vm_writev` into the peer's address space for memory registered with `register`.
//!   Either way it is one copy. Local completion is immediate (`Caps::inline_completion`).
//!   `process_vm_writev` pins the target's pages one by one, so it fills 4 KiB pages well below
//!   `memcpy` speed and 2 MiB pages near it (`docs/measurements/2026-11-29-huge-pages.md`). So a
//!   registration the executor hints as reused ([`Endpoint::hint_reused`])
//!   has its whole 2 MiB pages collapsed into transparent huge pages, once
//!   (`sys::back_with_huge_pages`); and [`Endpoint::writes_by_syscall`] tells the executor,
//!   which has writes of up to 1 MiB into such memory land in `alloc`ated scratch instead and
//!   copies them out. The kernel's copy is slow at some distances between source and
//!   destination; `sys::vm_write` stages those.
//! - **Reads.** [`Endpoint::read`] mirrors a write: the reader enters the key slot in the
//!   source's table, checks rights (`REMOTE_READ`) and bounds, and copies out through its mapping
//!   of an `alloc`ated memfd or with `process_vm_readv`. The executor uses it to share a large
//!   copy: the receiver, idle until the message is in, reads half of it while the sender writes
//!   the other half, two cores copying at once.
//! - **Deregistration race** is closed by the in-flight count in the key slot
//!   (`shm/keys.rs` doc): `Mr` drop waits (bounded by `Config::timeout`) for writers mid-copy. If
//!   a writer dies mid-copy the wait times out, the slot is leaked (never reused) and a warning
//!   is logged.
//! - **Node-shared memory** (mamidala-2008 §4: intra-node collectives with direct load/store on
//!   shared buffers): `alloc` returns memfd-backed memory, and any rank can
//!   [`map_remote`](crate::Endpoint::map_remote) a peer's allocation by its descriptor — e.g. the
//!   node leader allocates one buffer and broadcasts its `RemoteMr`.
//! - **Waiting.** Spin, yield, then FUTEX_WAIT on the owner's doorbell word (shared futex across
//!   processes); producers bump the doorbell after a push and FUTEX_WAKE only if a sleeper
//!   registered, so the fast path has no syscall. Blocks are bounded by `WaitPolicy::max_sleep`.
//! - **Dead peers.** A write to a dead peer fails (`Peer`) through `process_vm_writev` (ESRCH) or
//!   the liveness check on a full queue; a write into a peer's memfd mapping or a control message into
//!   a non-full queue of a dead peer succeeds unnoticed — `wait` names dead peers when it times out.
//! - **Backpressure.** Queues hold 32 slots of 4 KiB; a full queue makes `write` (with immediate)
//!   and `send_ctrl` return `Busy` before anything is copied.
//!
//! The SPSC ring, the key-slot protocol and the mailboxes are model-checked with loom
//! (`shm::queue`, `shm::keys`, `shm::mailbox`): `scripts/loom.sh`.

mod endpoint;
pub(crate) mod keys;
pub mod mailbox;
pub(crate) mod queue;
pub(crate) mod segment;
pub(crate) mod sys;

pub use endpoint::ShmEndpoint;

use crate::error::Result;
use crate::{Config, Endpoint};

/// Opens rank `cfg.rank` of a node group of `cfg.size` processes.
pub fn open(cfg: &Config) -> Result<Box<dyn Endpoint>> {
    Ok(Box::new(ShmEndpoint::open(cfg)?))
}
