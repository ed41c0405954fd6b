//! Typed errors of the fabric layer; every variant carries enough text (provider message, peer,
//! key, OS error) to tell what went wrong without a debugger. Nothing in `fabric/` panics on bad input.

use std::time::Duration;

/// Result alias of the fabric layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `fabcoll-fabric`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The requested backend is not compiled into this build (e.g. `ofi` without libfabric).
    #[error("backend `{backend}` is not available in this build: {reason}")]
    Unavailable {
        /// Backend name as given (`ofi`, `verbs`, …).
        backend: String,
        /// Why, naming the missing system package.
        reason: String,
    },
    /// A caller-supplied argument is invalid (rank out of range, length too large, …).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A local or remote range lies outside its registration.
    #[error("out of bounds: {what}: offset {off} + length {len} > registered length {reg_len}")]
    OutOfBounds {
        /// Which side (`local source`, `remote destination`).
        what: &'static str,
        /// Offset into the registration.
        off: usize,
        /// Length of the access.
        len: usize,
        /// Length of the registration.
        reg_len: usize,
    },
    /// The remote key is not (or no longer) registered at the target: a write to a deregistered
    /// key fails with this error instead of touching memory.
    #[error("remote key {key:#018x} is not registered on rank {peer} (deregistered or never valid)")]
    InvalidKey {
        /// Target rank.
        peer: usize,
        /// The stale key.
        key: u64,
    },
    /// The registration does not grant the access the operation needs.
    #[error("access denied: {0}")]
    Access(String),
    /// Resources (queue slots, outstanding operations) are exhausted: poll completions, then
    /// retry the same call. Nothing was done.
    #[error("resources busy ({0}); poll completions and retry")]
    Busy(&'static str),
    /// A peer is dead, unreachable or misbehaving.
    #[error("peer rank {peer}: {msg}")]
    Peer {
        /// The peer's rank.
        peer: usize,
        /// What happened.
        msg: String,
    },
    /// An address blob could not be decoded or does not belong to this backend/job.
    #[error("bad address blob: {0}")]
    Address(String),
    /// A wait gave up.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// How long we waited.
        after: Duration,
        /// What we waited for.
        what: String,
    },
    /// The operation is not supported by this backend (e.g. direct load/store over the network).
    #[error("unsupported by backend `{backend}`: {what}")]
    Unsupported {
        /// Backend name.
        backend: &'static str,
        /// The operation.
        what: String,
    },
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Os {
        /// The call (`mmap`, `process_vm_writev`, …) and its context.
        op: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A provider call (libfabric `fi_*`, verbs `ibv_*`) failed; carries the provider's own text.
    #[error("provider {provider}: {op} failed with code {code}: {text}")]
    Provider {
        /// Provider name (`tcp`, `verbs`, …).
        provider: String,
        /// The call.
        op: String,
        /// The provider's (negative) return code.
        code: i64,
        /// `fi_strerror` / provider error text.
        text: String,
    },
}

impl Error {
    /// True for [`Error::Busy`]: the caller should poll completions and retry.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy(_))
    }

    /// Shorthand for [`Error::Os`] from the current `errno`.
    pub fn last_os(op: impl Into<String>) -> Error {
        Error::Os { op: op.into(), source: std::io::Error::last_os_error() }
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Error {
        Error::InvalidArgument(msg.into())
    }
}
