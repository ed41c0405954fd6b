//! Rank, size and the store's address from the environment conventions people already use.
//!
//! Read in this order (the first convention whose rank and size are both set wins; ours are knobs
//! of [`crate::settings`], so code may set them too):
//! 1. ours: `FABCOLL_RANK`, `FABCOLL_SIZE`, `FABCOLL_LOCAL_RANK`, `FABCOLL_LOCAL_SIZE`;
//! 2. torchrun: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`;
//! 3. Open MPI's `mpirun`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
//!    `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE`;
//! 4. PMI launchers (MPICH's and Intel MPI's Hydra `mpiexec`): `PMI_RANK`, `PMI_SIZE`,
//!    `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`;
//! 5. Slurm: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, `SLURM_NTASKS_PER_NODE`.
//!    (without `--ntasks-per-node`, the tasks on this node from `SLURM_TASKS_PER_NODE` and
//!    `SLURM_NODEID`).
//!
//! The MPI launchers come before Slurm: an `mpirun` inside a Slurm allocation passes the
//! allocation's Slurm variables to every rank it starts, the same on all of them.
//!
//! The store: `FABCOLL_STORE` (`tcp://host:port`, `host:port` or `file:///dir`), else
//! `MASTER_ADDR` with `FABCOLL_STORE_PORT`, else `MASTER_ADDR` and `MASTER_PORT + 1` (torchrun's
//! own store already holds `MASTER_PORT`). A TCP store is served by rank 0 unless
//! `FABCOLL_STORE_SERVER=launcher` says a launcher (fabrun) serves it; rank 0's server lives while
//! a communicator of its process holds it, and a join beside one (on the same address) shares it.
//! Every rank needs the same secret `FABCOLL_TOKEN` for a TCP store.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use super::{BootstrapError, FileStore, Result, Store, TcpStore, TcpStoreServer};
use crate::settings::{self, StoreServer, Vars};

/// Where the job's store is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreAddr {
    /// `host:port` of a [`TcpStoreServer`].
    Tcp(String),
    /// Directory of a [`FileStore`].
    File(PathBuf),
}

impl StoreAddr {
    pub fn parse(s: &str) -> Result<StoreAddr> {
        if let Some(rest) = s.strip_prefix("tcp://") {
            return Ok(StoreAddr::Tcp(rest.to_owned()));
        }
        if let Some(rest) = s.strip_prefix("file://") {
            return Ok(StoreAddr::File(PathBuf::from(rest)));
        }
        if s.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()) {
            return Ok(StoreAddr::Tcp(s.to_owned()));
        }
        Err(BootstrapError::Config(format!("store address {s:?} is neither tcp://host:port nor file:///dir")))
    }
}

impl std::fmt::Display for StoreAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreAddr::Tcp(a) => write!(f, "tcp://{a}"),
            StoreAddr::File(d) => write!(f, "file://{}", d.display()),
        }
    }
}

/// This process's place in the job, as the environment describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnv {
    pub rank: u32,
    pub size: u32,
    /// Rank among the processes of this node, when the launcher says.
    pub local_rank: Option<u32>,
    /// Processes on this node, when the launcher says.
    pub local_size: Option<u32>,
    pub store: StoreAddr,
    /// Whether a launcher serves the TCP store (else rank 0 does).
    pub launcher_serves: bool,
    pub token: Option<String>,
    /// Which convention supplied rank and size: "fabcoll", "torchrun", "open mpi", "pmi" or "slurm".
    pub convention: &'static str,
}

const TOKEN_HINT: &str = "set FABCOLL_TOKEN to the same secret on every rank, e.g. \
     export FABCOLL_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') before torchrun or srun \
     (fabrun sets it itself)";

impl JobEnv {
    /// Reads the process's settings ([`crate::settings`]: installed ones first) and the other
    /// launchers' variables from the environment.
    pub fn from_env() -> Result<JobEnv> {
        JobEnv::from_vars(settings::var)
    }

    /// Reads the variables through `var` (for tests and embedding).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<JobEnv> {
        let var: Vars<'_> = &var;
        let num = |k: &str| -> Result<Option<u32>> {
            match var(k) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<u32>()
                    .map(Some)
                    .map_err(|_| BootstrapError::Config(format!("{k}={v:?} is not a non-negative integer"))),
            }
        };
        let ours = [
            &settings::FABCOLL_RANK,
            &settings::FABCOLL_SIZE,
            &settings::FABCOLL_LOCAL_RANK,
            &settings::FABCOLL_LOCAL_SIZE,
        ];
        let mut found = None;
        if let (Some(rank), Some(size)) = (ours[0].read(var)?, ours[1].read(var)?) {
            found = Some(("fabcoll", rank, size, ours[2].read(var)?, ours[3].read(var)?));
        }
        let conventions: [(&'static str, [&str; 4]); 4] = [
            ("torchrun", ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"]),
            (
                "open mpi",
                [
                    "OMPI_COMM_WORLD_RANK",
                    "OMPI_COMM_WORLD_SIZE",
                    "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_LOCAL_SIZE",
                ],
            ),
            ("pmi", ["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"]),
            ("slurm", ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"]),
        ];
        for (name, [r, s, lr, ls]) in conventions {
            if found.is_some() {
                break;
            }
            if let (Some(rank), Some(size)) = (num(r)?, num(s)?) {
                found = Some((name, rank, size, num(lr)?, num(ls)?));
            }
        }
        let (convention, rank, size, local_rank, mut local_size) = found.ok_or_else(|| {
            BootstrapError::Config(
                "no rank/size in the environment: set FABCOLL_RANK and FABCOLL_SIZE, or start the job with \
                 fabrun, torchrun (RANK, WORLD_SIZE), mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE), \
                 mpiexec (PMI_RANK, PMI_SIZE) or srun (SLURM_PROCID, SLURM_NTASKS)"
                    .into(),
            )
        })?;
        if size == 0 || rank >= size {
            return Err(BootstrapError::Config(format!("rank {rank} is not in 0..{size} ({convention} variables)")));
        }
        if convention == "slurm" && local_size.is_none() {
            // Without --ntasks-per-node Slurm sets no SLURM_NTASKS_PER_NODE, but always says how
            // many tasks each node runs.
            local_size = slurm_tasks_here(var)?;
        }
        if let (Some(lr), Some(ls)) = (local_rank, local_size) {
            if lr >= ls {
                return Err(BootstrapError::Config(format!("local rank {lr} is not in 0..{ls}")));
            }
        }
        let store = if let Some(s) = settings::FABCOLL_STORE.read(var)? {
            s
        } else if let Some(host) = var("MASTER_ADDR") {
            let port = match (settings::FABCOLL_STORE_PORT.read(var)?, num("MASTER_PORT")?) {
                (Some(p), _) => u32::from(p),
                (None, Some(p)) => p + 1,
                (None, None) => {
                    return Err(BootstrapError::Config(
                        "MASTER_ADDR is set but neither MASTER_PORT nor FABCOLL_STORE_PORT".into(),
                    ))
                }
            };
            let port = u16::try_from(port).map_err(|_| BootstrapError::Config(format!("store port {port} > 65535")))?;
            StoreAddr::Tcp(format!("{host}:{port}"))
        } else {
            return Err(BootstrapError::Config(format!(
                "no store address: set FABCOLL_STORE (tcp://host:port, served by rank 0, or file:///shared/dir) or \
                 MASTER_ADDR and MASTER_PORT{}",
                match convention {
                    "open mpi" | "pmi" => ", and export it to the ranks (mpirun -x FABCOLL_STORE -x FABCOLL_TOKEN)",
                    _ => "",
                }
            )));
        };
        Ok(JobEnv {
            rank,
            size,
            local_rank,
            local_size,
            store,
            launcher_serves: settings::FABCOLL_STORE_SERVER.read(var)? == Some(StoreServer::Launcher),
            token: settings::FABCOLL_TOKEN.read(var)?,
            convention,
        })
    }

    /// Opens the store: a file store, or a TCP store that rank 0 serves (returned alongside, to
    /// be kept alive for the job; the server of an earlier join of this process that is still
    /// alive, on the same address and token, when there is one) unless a launcher serves it.
    pub fn open_store(&self, timeout: Duration) -> Result<(Box<dyn Store>, Option<Served>)> {
        match &self.store {
            StoreAddr::File(dir) => Ok((Box::new(FileStore::new(dir)?), None)),
            StoreAddr::Tcp(addr) => {
                let token = self.token.as_deref().ok_or_else(|| {
                    BootstrapError::Config(format!("the TCP store at {addr} needs a job token: {TOKEN_HINT}"))
                })?;
                let server = if self.rank == 0 && !self.launcher_serves {
                    let bind: SocketAddr = addr
                        .to_socket_addrs()
                        .map_err(BootstrapError::io(format!("resolving {addr}")))?
                        .next()
                        .ok_or_else(|| BootstrapError::Config(format!("{addr} resolves to nothing")))?;
                    Some(serve(bind, token)?)
                } else {
                    None
                };
                let client = TcpStore::connect(addr.as_str(), token, timeout)?;
                Ok((Box::new(client), server))
            }
        }
    }
}

/// Rank 0's store server, shared by the joins of this process that use it.
pub type Served = Arc<TcpStoreServer>;

/// The store servers this process runs as rank 0: (address, token, server). A second join while
/// the first's communicator lives could not bind the address again; it shares the server instead.
static SERVING: Mutex<Vec<(SocketAddr, String, Weak<TcpStoreServer>)>> = Mutex::new(Vec::new());

/// The live server of this process at `bind` with `token`, else a new one.
fn serve(bind: SocketAddr, token: &str) -> Result<Served> {
    let mut serving = SERVING.lock().unwrap_or_else(PoisonError::into_inner);
    serving.retain(|(_, _, server)| server.strong_count() > 0);
    // Port 0 names no address to share (each bind picks another).
    let shared = |at: &SocketAddr, t: &str| bind.port() != 0 && *at == bind && t == token;
    let live = serving.iter().find(|(at, t, _)| shared(at, t)).and_then(|(_, _, s)| s.upgrade());
    if let Some(server) = live {
        return Ok(server);
    }
    let server = Arc::new(TcpStoreServer::start(bind, token)?);
    serving.push((bind, token.to_owned(), Arc::downgrade(&server)));
    Ok(server)
}

/// The tasks Slurm runs on this node, from `SLURM_TASKS_PER_NODE` (e.g. `2(x3),1`: 2 on each of
/// the first three nodes, 1 on the fourth) and `SLURM_NODEID` (this node's index), or `None`
/// when Slurm does not say.
fn slurm_tasks_here(var: Vars<'_>) -> Result<Option<u32>> {
    let (Some(list), Some(node)) = (var("SLURM_TASKS_PER_NODE"), var("SLURM_NODEID")) else { return Ok(None) };
    let bad = || BootstrapError::Config(format!("SLURM_TASKS_PER_NODE={list:?} with SLURM_NODEID={node:?}"));
    let mut left: u64 = node.trim().parse().map_err(|_| bad())?;
    for item in list.split(',') {
        let (tasks, times) = match item.trim().split_once("(x") {
            Some((t, rest)) => (t, rest.strip_suffix(')').ok_or_else(bad)?),
            None => (item.trim(), "1"),
        };
        let (tasks, times): (u32, u64) = (tasks.parse().map_err(|_| bad())?, times.parse().map_err(|_| bad())?);
        if left < times {
            return Ok(Some(tasks));
        }
        left -= times;
    }
    Err(bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<JobEnv> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        JobEnv::from_vars(|k| m.get(k).cloned())
    }

    /// Rank 0 joining again beside a live communicator shares its store server (a second bind of
    /// the address would fail); once every holder is gone the address is free for a new one.
    #[test]
    fn rank_0_shares_its_live_store_server() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let store = format!("tcp://127.0.0.1:{port}");
        let e = env(&[("FABCOLL_RANK", "0"), ("FABCOLL_SIZE", "2"), ("FABCOLL_STORE", &store), ("FABCOLL_TOKEN", "t")])
            .unwrap();
        let (a, first) = e.open_store(Duration::from_secs(5)).unwrap();
        let (b, second) = e.open_store(Duration::from_secs(5)).unwrap();
        let (first, second) = (first.expect("rank 0 serves"), second.expect("rank 0 serves"));
        assert!(Arc::ptr_eq(&first, &second), "one server for both joins");
        assert_eq!(a.add("n", 1).unwrap() + b.add("n", 1).unwrap(), 3, "one table behind both clients");
        drop((a, b, first, second));
        let (c, third) = e.open_store(Duration::from_secs(5)).unwrap();
        assert!(third.is_some());
        assert_eq!(c.add("n", 1).unwrap(), 1, "a new server once the old one is gone");
    }

    #[test]
    fn torchrun_convention() {
        let e = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.size, e.local_rank, e.local_size), (3, 8, Some(1), Some(2)));
        assert_eq!(e.store, StoreAddr::Tcp("127.0.0.1:29501".into()));
        assert_eq!(e.convention, "torchrun");
        assert!(e.token.is_none());
    }

    #[test]
    fn slurm_convention_with_store() {
        let e = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "0"),
            ("FABCOLL_STORE", "file:///tmp/x"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.size, e.convention), (0, 4, "slurm"));
        assert_eq!(e.store, StoreAddr::File("/tmp/x".into()));
    }

    /// Slurm without `--ntasks-per-node`: the tasks on this node come from `SLURM_TASKS_PER_NODE`, so a
    /// one-node job knows all its ranks are local (and picks shm).
    #[test]
    fn slurm_local_size_without_ntasks_per_node() {
        let base = [("SLURM_PROCID", "5"), ("SLURM_NTASKS", "7"), ("FABCOLL_STORE", "file:///tmp/x")];
        let here = |list: &str, node: &str| {
            env(&[&base[..], &[("SLURM_TASKS_PER_NODE", list), ("SLURM_NODEID", node)]].concat()).map(|e| e.local_size)
        };
        assert_eq!(here("7", "0").unwrap(), Some(7));
        assert_eq!(here("2(x3),1", "2").unwrap(), Some(2));
        assert_eq!(here("2(x3),1", "3").unwrap(), Some(1));
        assert!(here("2(x3),1", "4").unwrap_err().to_string().contains("SLURM_TASKS_PER_NODE=\"2(x3),1\""));
        assert!(here("2(x3", "0").is_err());
        assert_eq!(env(&base).unwrap().local_size, None, "Slurm says nothing: unknown");
        let given = [("SLURM_NTASKS_PER_NODE", "3"), ("SLURM_TASKS_PER_NODE", "7"), ("SLURM_NODEID", "0")];
        assert_eq!(env(&[&base[..], &given[..]].concat()).unwrap().local_size, Some(3));
    }

    /// `mpirun -n 2 ./app` (Open MPI) and `mpiexec -n 2 ./app` (Hydra) inside a Slurm allocation: the
    /// MPI launcher's variables win over the allocation's Slurm ones, which every rank inherits alike.
    #[test]
    fn mpi_launchers_conventions_win_over_an_inherited_slurm_allocation() {
        let slurm = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "8"), ("FABCOLL_STORE", "file:///tmp/x")];
        let ompi = [
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ];
        let e = env(&[&slurm[..], &ompi[..]].concat()).unwrap();
        assert_eq!((e.rank, e.size, e.local_rank, e.local_size, e.convention), (1, 2, Some(1), Some(2), "open mpi"));
        let pmi = [("PMI_RANK", "3"), ("PMI_SIZE", "4"), ("MPI_LOCALRANKID", "1"), ("MPI_LOCALNRANKS", "2")];
        let e = env(&[&slurm[..], &pmi[..]].concat()).unwrap();
        assert_eq!((e.rank, e.size, e.local_rank, e.local_size, e.convention), (3, 4, Some(1), Some(2), "pmi"));
        let e = env(&ompi).unwrap_err().to_string();
        assert!(e.contains("no store address") && e.contains("mpirun -x FABCOLL_STORE"), "{e}");
        let e = env(&[("PMI_RANK", "4"), ("PMI_SIZE", "4"), ("FABCOLL_STORE", "file:///tmp/x")]).unwrap_err();
        assert!(e.to_string().contains("rank 4 is not in 0..4 (pmi variables)"), "{e}");
    }

    #[test]
    fn ours_win_over_torchrun() {
        let e = env(&[
            ("FABCOLL_RANK", "1"),
            ("FABCOLL_SIZE", "2"),
            ("RANK", "5"),
            ("WORLD_SIZE", "9"),
            ("FABCOLL_STORE", "tcp://127.0.0.1:4000"),
            ("FABCOLL_STORE_SERVER", "launcher"),
            ("FABCOLL_TOKEN", "t"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.size, e.convention), (1, 2, "fabcoll"));
        assert!(e.launcher_serves);
        assert_eq!(e.token.as_deref(), Some("t"));
    }

    #[test]
    fn bad_values_are_clear_errors() {
        assert!(env(&[]).unwrap_err().to_string().contains("FABCOLL_RANK"));
        assert!(env(&[("RANK", "x"), ("WORLD_SIZE", "2")]).unwrap_err().to_string().contains("RANK=\"x\""));
        let e = env(&[("RANK", "2"), ("WORLD_SIZE", "2"), ("FABCOLL_STORE", "a:1")]).unwrap_err();
        assert!(e.to_string().contains("not in 0..2"), "{e}");
        assert!(env(&[("RANK", "0"), ("WORLD_SIZE", "2")]).unwrap_err().to_string().contains("store"));
        assert!(StoreAddr::parse("nonsense").is_err());
    }

    #[test]
    fn tcp_store_without_token_is_refused_with_a_hint() {
        let e = env(&[("RANK", "1"), ("WORLD_SIZE", "2"), ("FABCOLL_STORE", "127.0.0.1:1")]).unwrap();
        let err = e.open_store(Duration::from_millis(10)).err().unwrap();
        assert!(err.to_string().contains("FABCOLL_TOKEN"), "{err}");
    }
}
