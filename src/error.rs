//! Errors of the communicator and executor: bad arguments, algorithm and fabric failures, timeouts
//! that name the ranks still awaited, and mismatched calls. Nothing in `src/` panics on bad input.

use std::time::Duration;

use fabcoll_collectives::Collective;

/// Everything a collective call can report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An argument is wrong (buffer length, root out of range, counts of the wrong length, …).
    #[error("{coll}: {msg}")]
    InvalidArgument { coll: &'static str, msg: String },
    /// The collective core refused the call (unknown algorithm, restriction, parameter, …).
    #[error(transparent)]
    Collectives(#[from] fabcoll_collectives::Error),
    /// The fabric layer failed.
    #[error("fabric: {0}")]
    Fabric(#[from] fabcoll_fabric::Error),
    /// Bootstrapping failed (environment, store).
    #[error("bootstrap: {0}")]
    Bootstrap(#[from] fabcoll_fabric::bootstrap::BootstrapError),
    /// A collective or transfer did not finish in time; `waiting_for` are the ranks (of this
    /// communicator) whose messages or grants were still missing — dead or silent peers. `coll` is
    /// the operation's name (`send` or `recv` for a transfer), `seq` a collective's number on its
    /// communicator or a transfer's among those from its sender to its receiver.
    #[error("{coll} (call #{seq}) timed out after {after:?} on rank {rank}, waiting for rank(s) {waiting_for:?}")]
    Timeout { coll: &'static str, seq: u64, rank: u32, after: Duration, waiting_for: Vec<u32> },
    /// A peer failed or left during a collective (a write to it failed); `peers` are the ranks
    /// to blame after hearing the other survivors (see `Timeout`), `cause` the fabric's report.
    #[error("{coll} (call #{seq}) failed on rank {rank}: rank(s) {peers:?} failed or left ({cause})")]
    PeerLost { coll: &'static str, seq: u64, rank: u32, peers: Vec<u32>, cause: String },
    /// A peer violated the protocol (malformed control message, unknown grant, …).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Ranks called different collectives or with different arguments: found by the call
    /// signature every message carries, or in full by checked mode (`FABCOLL_CHECK=1`).
    #[error("collective mismatch: {0}")]
    Mismatch(String),
    /// An earlier error left the communicator unusable (peers may be in an unknown state).
    #[error("communicator is broken by an earlier error: {0}")]
    Broken(String),
}

impl Error {
    pub(crate) fn invalid(coll: Collective, msg: impl Into<String>) -> Error {
        Error::InvalidArgument { coll: coll.name(), msg: msg.into() }
    }
}

impl From<fabcoll_fabric::settings::SettingError> for Error {
    fn from(e: fabcoll_fabric::settings::SettingError) -> Error {
        Error::InvalidArgument { coll: "settings", msg: e.to_string() }
    }
}

/// Result alias of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
