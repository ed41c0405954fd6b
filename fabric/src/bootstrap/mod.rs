//! Bootstrap: how the ranks of a job find each other before any fabric exists.
//!
//! A key-value [`Store`] (set, get, wait with timeout, atomic add) is shared by all ranks of a
//! job; endpoints publish their address blobs in it and read their peers'. Two implementations:
//! [`TcpStore`] (served by rank 0 or a launcher, every client authenticated by a per-job token,
//! every length bounded, every read timed out) and [`FileStore`] (a directory on a shared file
//! system). [`JobEnv`] reads rank, size and the store's address from the conventions people
//! already use: torchrun, Slurm and our own `FABCOLL_*`. Each rank's [`NodeId`] (which node it
//! runs on) and [`Seat`] (its machine and CPUs) travel with its address ([`exchange_with_node`]).

mod env;
mod error;
mod file;
mod node;
mod seat;
pub(crate) mod tcp;

use std::time::{Duration, Instant};

pub use env::{JobEnv, Served, StoreAddr};
pub use error::BootstrapError;
pub use file::FileStore;
pub use node::{all_on_one_node, exchange_with_node, NodeId, Placed};
pub use seat::{machine_share, some_node_crowded, Seat};
pub use tcp::{TcpStore, TcpStoreServer, MAX_KEY_LEN, MAX_VALUE_LEN};

pub type Result<T, E = BootstrapError> = std::result::Result<T, E>;

/// A job-wide key-value store.
pub trait Store: Send + Sync {
    /// Sets `key` to `value`, replacing an earlier value.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The value of `key`, or `None` if it was never set.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// Waits until `key` is set and returns its value; [`BootstrapError::Timeout`] after `timeout`.
    fn wait(&self, key: &str, timeout: Duration) -> Result<Vec<u8>>;
    /// Atomically adds `delta` to the integer stored at `key` (0 if unset) and returns the result.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;
}

/// Publishes this rank's `blob` under `name` and returns every rank's blob, indexed by rank.
/// A rank that does not publish within `timeout` yields a [`BootstrapError::Timeout`] that
/// names every missing rank.
pub fn exchange(
    store: &dyn Store,
    name: &str,
    rank: u32,
    size: u32,
    blob: &[u8],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>> {
    store.set(&format!("{name}/{rank}"), blob)?;
    let deadline = Instant::now() + timeout;
    let mut out = vec![Vec::new(); size as usize];
    let mut missing = Vec::new();
    for r in 0..size {
        let left = deadline.saturating_duration_since(Instant::now());
        match store.wait(&format!("{name}/{r}"), left) {
            Ok(v) => out[r as usize] = v,
            Err(BootstrapError::Timeout { .. }) => missing.push(r),
            Err(e) => return Err(e),
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(BootstrapError::Timeout {
            what: format!("rank(s) {missing:?} of {size} to publish {name:?} (this is rank {rank})"),
            after: timeout,
        })
    }
}

/// Waits until all `size` ranks reached the barrier called `name` (each name used once).
pub fn barrier(store: &dyn Store, name: &str, size: u32, timeout: Duration) -> Result<()> {
    let n = store.add(&format!("{name}/count"), 1)?;
    if n == i64::from(size) {
        store.set(&format!("{name}/done"), b"1")?;
    }
    store.wait(&format!("{name}/done"), timeout).map(|_| ()).map_err(|e| match e {
        BootstrapError::Timeout { after, .. } => {
            BootstrapError::Timeout { what: format!("barrier {name:?}: not all {size} ranks arrived"), after }
        }
        e => e,
    })
}

/// Polls `get` with exponential backoff (50 µs … 20 ms) until the key is set or `timeout` passes.
pub(crate) fn poll_wait(
    key: &str,
    timeout: Duration,
    mut get: impl FnMut() -> Result<Option<Vec<u8>>>,
) -> Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_micros(50);
    loop {
        if let Some(v) = get()? {
            return Ok(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(BootstrapError::Timeout { what: format!("key {key:?}"), after: timeout });
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
