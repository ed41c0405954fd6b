//! Backend `local`: ranks are threads of one process sharing a [`LocalFabric`]; a write is one
//! `memcpy` into the peer's registration, notifications and control messages go to per-rank inboxes.
//!
//! Deregistration race: a writer holds the target's region table read-locked for the whole copy and
//! deregistration takes the write lock, so after `Mr` drop returns no write lands; keys are never
//! reused (per-rank counter), so a stale key always fails with `InvalidKey`.
//! Addresses: the blob names the fabric instance and rank; blobs of another fabric are rejected.

mod endpoint;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};

pub use endpoint::LocalEndpoint;

use crate::endpoint::Completion;
use crate::error::{Error, Result};
use crate::mr::{Access, AlignedBuf};
use crate::{Config, Endpoint};

/// Opens rank `cfg.rank` of the process-wide fabric named `cfg.job` (created by the first rank that
/// joins; all ranks must agree on `cfg.size`).
pub fn open(cfg: &Config) -> Result<Box<dyn Endpoint>> {
    Ok(Box::new(LocalFabric::join(&cfg.job, cfg.size)?.endpoint(cfg.rank, cfg.wait)?))
}

/// A registered region of one rank, as peers see it.
pub(crate) struct Region {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) access: Access,
    /// Keeps `alloc`ated memory alive for `map_remote` mappings.
    pub(crate) owner: Option<Arc<AlignedBuf>>,
}

/// Per-rank state reachable by every rank of the fabric.
pub(crate) struct RankState {
    pub(crate) inbox: Mutex<VecDeque<Completion>>,
    pub(crate) bell: Condvar,
    pub(crate) regions: RwLock<HashMap<u64, Region>>,
    pub(crate) next_key: AtomicU64,
    claimed: AtomicBool,
}

pub(crate) struct Shared {
    pub(crate) id: u64,
    pub(crate) ranks: Vec<RankState>,
}

/// A group of `size` in-process ranks. Cheap to clone.
#[derive(Clone)]
pub struct LocalFabric {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LocalFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFabric").field("id", &self.shared.id).field("size", &self.shared.ranks.len()).finish()
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static JOBS: Mutex<Vec<(String, Weak<Shared>)>> = Mutex::new(Vec::new());

impl LocalFabric {
    /// A new fabric of `size` ranks.
    pub fn new(size: usize) -> Result<LocalFabric> {
        if size == 0 {
            return Err(Error::invalid("a local fabric needs at least one rank"));
        }
        let ranks = (0..size)
            .map(|_| RankState {
                inbox: Mutex::new(VecDeque::new()),
                bell: Condvar::new(),
                regions: RwLock::new(HashMap::new()),
                next_key: AtomicU64::new(1),
                claimed: AtomicBool::new(false),
            })
            .collect();
        Ok(LocalFabric { shared: Arc::new(Shared { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), ranks }) })
    }

    /// The fabric registered under `job` in this process, created with `size` ranks if absent.
    pub fn join(job: &str, size: usize) -> Result<LocalFabric> {
        let mut jobs = JOBS.lock().map_err(|_| Error::invalid("local job table poisoned"))?;
        jobs.retain(|(_, w)| w.strong_count() > 0);
        if let Some(shared) = jobs.iter().find(|(j, _)| j == job).and_then(|(_, w)| w.upgrade()) {
            if shared.ranks.len() != size {
                return Err(Error::invalid(format!(
                    "local job `{job}` has {} ranks, asked for {size}",
                    shared.ranks.len()
                )));
            }
            return Ok(LocalFabric { shared });
        }
        let fabric = LocalFabric::new(size)?;
        jobs.push((job.to_string(), Arc::downgrade(&fabric.shared)));
        Ok(fabric)
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.shared.ranks.len()
    }

    /// The endpoint of `rank` (each rank can be taken once while its endpoint lives).
    pub fn endpoint(&self, rank: usize, wait: crate::WaitPolicy) -> Result<LocalEndpoint> {
        let st = self
            .shared
            .ranks
            .get(rank)
            .ok_or_else(|| Error::invalid(format!("rank {rank} not in a local fabric of {}", self.size())))?;
        if st.claimed.swap(true, Ordering::AcqRel) {
            return Err(Error::invalid(format!("rank {rank} of local fabric {} is already open", self.shared.id)));
        }
        Ok(LocalEndpoint::new(self.shared.clone(), rank, wait))
    }

    /// All endpoints at once (ranks 0..size), default wait policy.
    pub fn endpoints(&self) -> Result<Vec<LocalEndpoint>> {
        (0..self.size()).map(|r| self.endpoint(r, crate::WaitPolicy::default())).collect()
    }
}

impl Shared {
    pub(crate) fn release(&self, rank: usize) {
        if let Some(st) = self.ranks.get(rank) {
            st.claimed.store(false, Ordering::Release);
        }
    }
}
