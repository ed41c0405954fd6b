//! fabcoll's thin RMA layer: one [`Endpoint`] contract (registration, notified one-sided writes,
//! control messages, completions) over in-process ranks, node shared memory, TCP sockets and libfabric.
//!
//! Backends are chosen at run time with [`Backend`] and built by [`open`]; one that is not compiled
//! in (libfabric missing) is an [`Error::Unavailable`] naming the missing package, never a panic.
//! The contract's rules are in [`endpoint`].

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod auth;
#[allow(missing_docs)] // documented in its own module doc; owned by the bootstrap work
pub mod bootstrap;
pub mod congestion;
pub mod copy;
pub mod endpoint;
pub mod error;
#[doc(hidden)]
pub mod fuzz;
pub mod keymap;
pub mod local;
pub mod mr;
#[cfg(feature = "pair")]
pub mod pair;
pub mod routes;
pub mod settings;
#[cfg(target_os = "linux")]
pub mod shm;
#[cfg(target_os = "linux")]
pub mod tcp;
pub mod wait;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use endpoint::{Caps, Completion, Endpoint, Mapping, Pieces, Progress, RouteCount, RouteCounters, SILENT_WRITE};
pub use error::{Error, Result};
pub use local::LocalFabric;
pub use mr::{Access, LocalRange, Mr, NodeKey, RemoteMr, RemoteRange};
pub use wait::WaitPolicy;

/// Which backend to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Ranks are threads of this process (tests, multi-threaded programs).
    Local,
    /// Ranks are processes of one node sharing memory.
    Shm,
    /// Plain TCP sockets, one connection per pair (any hosts; no libfabric needed).
    Tcp,
    /// libfabric with the named provider (`tcp`, `verbs`, `shm`, `efa`, `cxi`, …).
    Ofi {
        /// Provider name passed to `fi_getinfo`.
        provider: String,
    },
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Local => f.write_str("local"),
            Backend::Shm => f.write_str("shm"),
            Backend::Tcp => f.write_str("tcp"),
            Backend::Ofi { provider } => write!(f, "ofi:{provider}"),
        }
    }
}

impl FromStr for Backend {
    type Err = Error;

    /// `local`, `shm`, `tcp`, `ofi` (provider `tcp`) or `ofi:<provider>` (`ofi:tcp` opens libfabric 1.17's `net`
    /// where it is there: see `ofi::open`).
    fn from_str(s: &str) -> Result<Backend> {
        match s.trim() {
            "local" => Ok(Backend::Local),
            "shm" => Ok(Backend::Shm),
            "tcp" => Ok(Backend::Tcp),
            "ofi" => Ok(Backend::Ofi { provider: "tcp".into() }),
            other => match other.strip_prefix("ofi:") {
                Some(p) if !p.is_empty() => Ok(Backend::Ofi { provider: p.to_string() }),
                _ => Err(Error::invalid(format!(
                    "unknown backend `{other}` (expected local, shm, tcp, ofi[:<provider>])"
                ))),
            },
        }
    }
}

/// Everything [`open`] needs.
#[derive(Clone)]
pub struct Config {
    /// The backend.
    pub backend: Backend,
    /// This process's (or thread's) rank in the endpoint's group.
    pub rank: usize,
    /// Group size (for `Shm`: the ranks of this node).
    pub size: usize,
    /// Job identifier: groups `Local` endpoints of one process and names shm resources.
    pub job: String,
    /// How `wait` waits.
    pub wait: WaitPolicy,
    /// Upper bound for internal waits on peers (e.g. deregistration waiting for in-flight writes).
    pub timeout: Duration,
    /// The job's secret, the same on every rank (the `tcp` backend keys its connection handshake
    /// with it; `docs/security.md`). `None`: `FABCOLL_TOKEN`, if set.
    pub token: Option<String>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("backend", &self.backend)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("job", &self.job)
            .field("wait", &self.wait)
            .field("timeout", &self.timeout)
            .field("token", &self.token.as_ref().map(|_| "(hidden)"))
            .finish()
    }
}

impl Config {
    /// A config with default wait policy, a 60 s timeout and no token (the `tcp` backend then
    /// reads `FABCOLL_TOKEN`).
    pub fn new(backend: Backend, rank: usize, size: usize, job: impl Into<String>) -> Config {
        Config {
            backend,
            rank,
            size,
            job: job.into(),
            wait: WaitPolicy::default(),
            timeout: Duration::from_secs(60),
            token: None,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.size == 0 || self.rank >= self.size {
            return Err(Error::invalid(format!("rank {} not in a group of size {}", self.rank, self.size)));
        }
        Ok(())
    }
}

/// FNV-1a of a job name: what a backend puts in its address blobs, segments and hellos, so that
/// ranks of another job (or a stale one) are told apart. The same on every rank of a job.
pub fn job_hash(job: &str) -> u64 {
    job.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Build an endpoint for `cfg.backend` (each backend module exports the same
/// `open(&Config) -> Result<Box<dyn Endpoint>>`). Then exchange [`Endpoint::address`] blobs and call
/// [`Endpoint::insert_peers`].
pub fn open(cfg: &Config) -> Result<Box<dyn Endpoint>> {
    cfg.validate()?;
    match &cfg.backend {
        Backend::Local => local::open(cfg),
        #[cfg(target_os = "linux")]
        Backend::Shm => shm::open(cfg),
        #[cfg(not(target_os = "linux"))]
        Backend::Shm => {
            Err(Error::Unavailable { backend: "shm".into(), reason: "shm needs Linux (memfd, futex)".into() })
        }
        #[cfg(target_os = "linux")]
        Backend::Tcp => tcp::open(cfg),
        #[cfg(not(target_os = "linux"))]
        Backend::Tcp => Err(Error::Unavailable { backend: "tcp".into(), reason: "tcp needs Linux (ppoll)".into() }),
        Backend::Ofi { provider } => open_ofi(cfg, provider),
    }
}

#[cfg(fabcoll_ofi)]
fn open_ofi(cfg: &Config, provider: &str) -> Result<Box<dyn Endpoint>> {
    ofi::open(cfg, provider)
}

#[cfg(not(fabcoll_ofi))]
fn open_ofi(_cfg: &Config, provider: &str) -> Result<Box<dyn Endpoint>> {
    Err(Error::Unavailable {
        backend: format!("ofi:{provider}"),
        reason: format!("libfabric is not compiled in: {}", env!("FABCOLL_OFI_MISSING")),
    })
}

#[cfg(fabcoll_ofi)]
#[allow(missing_docs)]
pub mod ofi;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_parse() {
        assert_eq!("local".parse::<Backend>().unwrap(), Backend::Local);
        assert_eq!("tcp".parse::<Backend>().unwrap(), Backend::Tcp);
        assert_eq!(Backend::Tcp.to_string(), "tcp");
        assert_eq!("ofi:verbs".parse::<Backend>().unwrap(), Backend::Ofi { provider: "verbs".into() });
        assert!("ofi:".parse::<Backend>().is_err());
        assert!("mpi".parse::<Backend>().is_err());
        assert_eq!(Backend::Ofi { provider: "tcp".into() }.to_string(), "ofi:tcp");
    }

    #[cfg(not(fabcoll_ofi))]
    #[test]
    fn ofi_missing_is_an_error() {
        let e = open(&Config::new(Backend::Ofi { provider: "tcp".into() }, 0, 1, "t")).err().unwrap();
        assert!(e.to_string().contains("libfabric"), "{e}");
        // Left out on purpose: the message names the feature that brings it back.
        if !cfg!(feature = "ofi") {
            assert!(e.to_string().contains("cargo feature `ofi`"), "{e}");
        }
    }
}
