//! Backend `tcp`: one-sided writes emulated over plain TCP sockets, one connection per pair of
//! ranks — the design of Gloo's tcp transport and Open MPI's tcp BTL, with fabcoll's contract.
//!
//! Why a second TCP path beside `ofi:tcp`: libfabric 1.17's TCP providers alone cost what Open
//! MPI's whole tcp stack costs per small message (`scripts/tcp-floor.sh`; `docs/measurements/2026-11-27-tcp.md`), so little
//! built on them can beat Open MPI's tcp BTL at small sizes. This backend costs one `sendmsg` per
//! write and one `recv` per batch of arrivals, the same system calls as raw sockets.
//!
//! # Design
//! - **Frames** (`tcp/wire.rs`): a 48-byte header (write: key, target address, length, immediate,
//!   the initiator's ctx; control: tag, length; refusal; goodbye), then the payload. One stream
//!   per pair carries writes and control messages in issue order (`Caps::ordered_writes`).
//! - **Writes** are one `sendmsg` of header and payload from the caller's memory; what the socket
//!   does not take at once stays queued (pointing at the caller's memory, no copy) and leaves as
//!   the endpoint is polled; `WriteDone` is reported when the last byte is in the kernel. Writes
//!   of at most 64 KiB are complete on return instead (`Caps::inline_completion`: their queued
//!   part is copied), so the executor's eager messages need no completion. The
//!   target reads payloads through a 64 KiB staging buffer (many small frames per `recv`, one
//!   copy each) or, from `conn::DIRECT_MIN` bytes on, straight into the registration.
//! - **Registration** is a table of (key → address, length, access) of this endpoint, consulted
//!   by the receiver: nothing is pinned. Keys count up from 1 and are never reused. The receiver
//!   holds the table's read lock while bytes go into a registration and `Mr` drop takes the write
//!   lock, so after the drop returns nothing lands there. A write to an unknown key, outside its
//!   registration or into memory that is not remote-writable is read and dropped; the target
//!   sends a refusal and the initiator reports `WriteError` for the write's ctx (after its
//!   `WriteDone`, which meant only that the bytes left; `InvalidKey`'s text for an unknown key).
//! - **Progress** is manual: bytes move inside `poll`/`wait` of both sides (the kernel buffers a
//!   few MB per connection meanwhile). `wait` spins, yields, then sleeps in `ppoll` on every
//!   socket, which wakes it as soon as bytes arrive (or a full socket drains).
//! - **Connections** are set up in `insert_peers`: each rank connects to every lower rank and
//!   accepts the higher ones, each connection opened by a hello (magic, job hash, rank, size)
//!   and a mutual challenge and response (`crate::auth`) keyed by [`pair_key`]: the job token
//!   (`Config::token`, else `FABCOLL_TOKEN`) and both endpoints' random secrets, which travel in
//!   the address blobs after the hello. Strangers are logged and closed before any frame is
//!   read; the listener closes once every peer is in (`docs/security.md`).
//! - **Dead peers**: a connection that ends without the goodbye frame a closing endpoint sends
//!   (the process died or was killed) or that fails is lost: `poll` returns `Error::Peer` naming
//!   the rank once, `peer_gone` says why, writes and control messages to it fail.
//! - **Addresses**: the endpoint listens on `FABCOLL_TCP_ADDR` (an IP of this host; port 0 = any),
//!   else on the address through which this host reaches the job's store (`FABCOLL_STORE` or
//!   `MASTER_ADDR`), else on 127.0.0.1.
//! - **Congestion control**: connections between ranks of one host use Reno instead of the
//!   system's algorithm (BBR paces loopback traffic); `FABCOLL_TCP_CONGESTION` overrides it
//!   (`crate::congestion`).

mod addr;
mod conn;
pub(crate) mod connect;
mod endpoint;
pub(crate) mod wire;

use crate::keymap::KeyMap;
use std::any::Any;
use std::sync::{Arc, PoisonError, RwLock};

pub use connect::{pair_key, PairKey, SECRET};
pub use endpoint::TcpEndpoint;

use crate::error::Result;
use crate::mr::{Access, MrBackend};
use crate::{Config, Endpoint};

/// Opens a tcp endpoint for `cfg` (listening at once; peers connect in `insert_peers`).
pub fn open(cfg: &Config) -> Result<Box<dyn Endpoint>> {
    Ok(Box::new(TcpEndpoint::open(cfg)?))
}

/// A registration of this endpoint as the receiver checks it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Region {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) access: Access,
}

/// This endpoint's registrations by key.
pub(crate) type Regions = Arc<RwLock<KeyMap<u64, Region>>>;

/// Deregisters on drop (the write lock waits for a receive into the region in progress).
struct TcpMr {
    regions: Regions,
    key: u64,
}

impl MrBackend for TcpMr {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for TcpMr {
    fn drop(&mut self) {
        self.regions.write().unwrap_or_else(PoisonError::into_inner).remove(&self.key);
    }
}
