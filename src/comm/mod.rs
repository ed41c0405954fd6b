//! The [`Communicator`]: a group of ranks that call collectives together. Every collective is a
//! schedule from the registry run by the executor; blocking calls are nonblocking calls plus wait.
//!
//! Communicators made by [`Communicator::dup`] and [`Communicator::split`] share their parent's
//! endpoint and engine and get a context id of their own (agreed on with a collective over the
//! parent), which separates their messages in control tags and eager immediates; one engine
//! progresses the collectives of all of them. Each also has a second context, the next id, for its
//! point-to-point transfers (`p2p`).
//!
//! A communicator knows where its ranks sit ([`Communicator::topology`], see `nodes`): the world
//! communicator from the bootstrap, derived ones from their parent's.

mod call;
mod mailboxes;
mod memo;
mod model;
mod nodes;
mod p2p;
mod pinned;
mod raw;
mod request;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use fabcoll_collectives::registry;
use fabcoll_collectives::{CollArgs, Params, Topology};
use fabcoll_fabric::bootstrap::{self, JobEnv, NodeId, Seat, TcpStoreServer};
use fabcoll_fabric::routes::RoutedEndpoint;
use fabcoll_fabric::settings::NodeFabric;
use fabcoll_fabric::{Access, Backend, Config, Endpoint, LocalFabric};

pub use call::{Call, Collectives, WithOptions};
pub use p2p::{Probed, Transfer};
pub use pinned::{Pinned, Registered};
pub use raw::{RawCalls, RawRequest};
pub use request::{Request, Scope};

use mailboxes::{CallsRegistry, Remembered, SharedCalls, SharedRegistry};
use memo::{CallKey, Lanes, Path, Prepared};

use crate::error::{Error, Result};
use crate::exec::op::{CallSpec, Check};
use crate::exec::plan::Plan;
use crate::exec::progress::ProgressThread;
use crate::exec::{Engine, ExecConfig, OpKey, Started, Stats, Waiter};
use crate::select::model::ModelState;
use crate::select::{self, Decisions, FabricClass, Features};

/// Per-call options: force an algorithm by name and set its parameters (see the registry's
/// `ParamSpec`s, plus `segment` for pipelining in elements). All ranks must pass the same options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub algorithm: Option<String>,
    pub params: Params,
}

impl Options {
    pub fn algorithm(name: &str) -> Options {
        Options { algorithm: Some(name.to_owned()), params: Params::default() }
    }

    pub fn param(mut self, name: &str, value: u64) -> Options {
        self.params.set(name, value);
        self
    }
}

/// A group of ranks that call collectives together (see the module doc).
pub struct Communicator {
    engine: Arc<Mutex<Engine>>,
    ctx: u32,
    rank: u32,
    size: u32,
    members: Arc<[u32]>,
    check: bool,
    /// The algorithm choice (`FABCOLL_TUNING_FILE` or the embedded defaults, see `select`).
    decisions: Arc<Decisions>,
    /// The class of the endpoint's fabric, a condition of the decisions' rules.
    fabric: FabricClass,
    /// Whether ranks share CPUs, a condition of the decisions' rules (`own_cpu`): on a job
    /// joined from the environment, whether some node holds more ranks than its machine's CPUs
    /// (alike on every rank); on an endpoint handed over, the engine's test of its own node.
    shares_cpus: bool,
    /// Where the ranks sit (`nodes`); attached to the arguments of calls as they are prepared.
    topology: Arc<Topology>,
    /// The prepared calls and the mailboxes (registered in `registry`).
    calls: SharedCalls,
    /// The calls states of the endpoint's communicators (shared with dups and splits).
    registry: SharedRegistry,
    /// What the engine offers the lanes (see `memo::Prepared::path`).
    lanes: Lanes,
    _server: Option<Arc<TcpStoreServer>>,
    /// Cost-model parameters and choices (`select::model::ModelState`), shared with dups and splits.
    model: Arc<ModelState>,
    /// The engine's count of broken contexts ([`Engine::breaks`]).
    breaks: Arc<AtomicU64>,
    /// Threads waiting for the engine's lock ([`Engine::lock_waiters`]).
    lock_waiters: Arc<AtomicU32>,
    /// The engine's progress thread (`exec::progress`), shared with dups and splits.
    progress: Arc<ProgressThread>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("ctx", &self.ctx)
            .finish()
    }
}

fn env_check() -> Result<bool> {
    Ok(fabcoll_fabric::settings::FABCOLL_CHECK.get()?.unwrap_or(false))
}

impl Communicator {
    /// `p` communicators over the in-process `local` backend, one per rank (move each to its own
    /// thread). Settings from the environment (see [`ExecConfig::from_env`]).
    pub fn local(p: usize) -> Result<Vec<Communicator>> {
        Communicator::local_with(p, ExecConfig::from_env()?)
    }

    /// [`Communicator::local`] with explicit executor settings.
    pub fn local_with(p: usize, cfg: ExecConfig) -> Result<Vec<Communicator>> {
        Communicator::local_each(vec![cfg; p])
    }

    /// Local communicators whose rank r runs with `cfgs[r]`.
    fn local_each(cfgs: Vec<ExecConfig>) -> Result<Vec<Communicator>> {
        let fabric = LocalFabric::new(cfgs.len())?;
        let mut eps: Vec<Box<dyn Endpoint>> = Vec::with_capacity(cfgs.len());
        for r in 0..cfgs.len() {
            eps.push(Box::new(fabric.endpoint(r, fabcoll_fabric::WaitPolicy::oversubscribed())?));
        }
        let blobs = eps.iter().map(|e| e.address()).collect::<fabcoll_fabric::Result<Vec<_>>>()?;
        let comms = eps
            .into_iter()
            .zip(cfgs)
            .map(|(mut ep, cfg)| {
                ep.insert_peers(&blobs)?;
                Communicator::new(ep, cfg)
            })
            .collect::<Result<Vec<_>>>()?;
        for c in &comms {
            c.lock().await_setups()?;
        }
        Ok(comms)
    }

    /// A communicator over an endpoint whose peers are already inserted (all its ranks); waits
    /// until every peer has announced its eager ring, so every rank must call it concurrently.
    /// `ExecConfig::for_fabric(ep.caps())` gives the defaults of the endpoint's fabric class
    /// (what [`Communicator::from_env`] uses).
    pub fn from_endpoint(ep: Box<dyn Endpoint>, cfg: ExecConfig) -> Result<Communicator> {
        let c = Communicator::new(ep, cfg)?;
        c.lock().await_setups()?;
        Ok(c)
    }

    fn new(ep: Box<dyn Endpoint>, cfg: ExecConfig) -> Result<Communicator> {
        let decisions = select::active()?;
        let (rank, size) = (ep.rank() as u32, ep.size() as u32);
        let fabric = FabricClass::of(ep.caps());
        let mut engine = Engine::new(ep, cfg)?;
        let members: Arc<[u32]> = (0..size).collect();
        engine.add_ctx(0, &members)?;
        engine.add_p2p_ctx(p2p::ctx_of(0), &members)?;
        let lanes = Lanes {
            mailbox_limit: engine.mailbox_limit(),
            eager_limit: engine.eager_limit(),
            inline_completion: engine.core.caps.inline_completion,
            straight: engine.core.cfg.straight,
            pull_reduce_min: engine.pull_reduce_min(),
        };
        let shares_cpus = engine.core.patience.oversubscribed;
        let breaks = engine.breaks();
        let lock_waiters = engine.lock_waiters();
        let progress = Arc::new(ProgressThread::new(engine.core.cfg.progress_thread, shares_cpus, engine.left_ops()));
        let registry = SharedRegistry::default();
        Ok(Communicator {
            engine: Arc::new(Mutex::new(engine)),
            ctx: 0,
            rank,
            size,
            members,
            check: env_check()?,
            decisions,
            fabric,
            shares_cpus,
            topology: nodes::default_topology(size, fabric),
            calls: CallsRegistry::register(&registry),
            registry,
            lanes,
            _server: None,
            model: Arc::default(),
            breaks,
            lock_waiters,
            progress,
        })
    }

    /// Joins the job the environment describes (fabrun, torchrun, Slurm or `FABCOLL_*`, see
    /// `fabric::bootstrap::JobEnv`): opens the store, the fabric (`FABCOLL_FABRIC` = `shm`,
    /// `ofi:tcp`, …; default shm when every rank is on this node, else `tcp`), exchanges
    /// addresses and node identities; on a network fabric, when the ranks sit on several nodes
    /// and some node holds several, opens the node-local fabric among this node's ranks
    /// (`FABCOLL_NODE_FABRIC`, default shm; `off`: none) and routes node peers over it
    /// (`fabric::routes`); then sets up the eager rings. [`Communicator::from_env`] (`src/job.rs`) adds
    /// the cost model.
    pub(crate) fn join_env() -> Result<Communicator> {
        // The bootstrap's timeout; the executor's settings follow once the fabric is known.
        let cfg = ExecConfig::from_env()?;
        let env = JobEnv::from_env()?;
        // A store that rank 0 serves stops with rank 0's last communicator on it, so a rank that
        // joins again quickly may reach the old server, which then goes away under its join: it
        // joins again from the start, on the server rank 0 starts for the new join.
        let retry = !env.launcher_serves && env.rank != 0 && matches!(env.store, bootstrap::StoreAddr::Tcp(_));
        let deadline = Instant::now() + cfg.timeout;
        loop {
            match Communicator::join_once(&cfg, &env) {
                Err(e) if retry && store_went_away(&e) && Instant::now() < deadline => {
                    tracing::debug!(error = %e, "the store went away during the join: joining again");
                    std::thread::sleep(Duration::from_millis(10));
                }
                joined => return joined,
            }
        }
    }

    /// One attempt of [`Communicator::join_env`].
    fn join_once(cfg: &ExecConfig, env: &JobEnv) -> Result<Communicator> {
        let (store, server) = env.open_store(cfg.timeout)?;
        // A store can outlive a communicator (a launcher's, torchrun's) and a program may join
        // again, after dropping its communicator or beside it: each join has keys of its own. Join
        // k (from 0) of a store is the one whose counts are k·size + 1 … (k + 1)·size, since no
        // rank starts join k + 1 before every rank has counted itself in join k (join k ends only
        // once every rank has published its address, which it does after counting).
        let join = (store.add("fabcoll/joins", 1)? - 1) / i64::from(env.size);
        let key = |name: &str| format!("fabcoll/{join}/{name}");
        let me = NodeId::of_this_process()?;
        let seat = Seat::of_this_process();
        // Where the launcher does not say how many ranks share this node (FABCOLL_* without
        // FABCOLL_LOCAL_SIZE, as the torch backend's groups start, or a bare Slurm), the ranks'
        // node identities do, in one round of the store.
        let backend = match (fabcoll_fabric::settings::FABCOLL_FABRIC.get()?, env.local_size) {
            (Some(b), _) => b,
            (None, Some(n)) if n == env.size => Backend::Shm,
            (None, Some(_)) => Backend::Tcp,
            (None, None) => {
                match bootstrap::all_on_one_node(&*store, &key("node"), env.rank, env.size, (&me, &seat), cfg.timeout)?
                {
                    true => Backend::Shm,
                    false => Backend::Tcp,
                }
            }
        };
        let job = format!("fabcoll-{}-{join}", env.store);
        let mut fcfg = Config::new(backend, env.rank as usize, env.size as usize, job);
        fcfg.timeout = cfg.timeout;
        let mut ep = fabcoll_fabric::open(&fcfg)?;
        // Each rank's node identity and seat travel with its address: the placement costs no extra
        // round.
        let placed = bootstrap::exchange_with_node(
            &*store,
            &key("addr"),
            env.rank,
            env.size,
            (&me, &seat),
            &ep.address()?,
            cfg.timeout,
        )?;
        let (mut ids, mut seats, mut blobs) = (Vec::new(), Vec::new(), Vec::new());
        for p in placed {
            ids.push(p.node);
            seats.push(p.seat);
            blobs.push(p.blob);
        }
        ep.insert_peers(&blobs)?;
        let topology = nodes::world_topology(&ids, FabricClass::of(ep.caps()))?;
        // A job over several nodes, some holding several ranks: the peers on this node go over
        // the node-local fabric (FABCOLL_NODE_FABRIC, default shm), the others over this one.
        let several = (0..topology.nodes()).any(|n| topology.ranks_on(n).len() > 1);
        let node_fabric = match fabcoll_fabric::settings::FABCOLL_NODE_FABRIC.get()? {
            Some(NodeFabric::Off) => None,
            Some(NodeFabric::Fabric(b)) => Some((b, true)),
            None => Some((Backend::Shm, false)),
        };
        if let (Some((b, named)), true, true) =
            (node_fabric, topology.nodes() > 1 && several, FabricClass::of(ep.caps()) == FabricClass::Network)
        {
            let n = topology.node_of(env.rank);
            let members: Vec<usize> = topology.ranks_on(n).iter().map(|&r| r as usize).collect();
            let local = topology.local_rank(env.rank);
            let mut ncfg = Config::new(b, local as usize, members.len(), format!("{}-node{n}", fcfg.job));
            ncfg.timeout = cfg.timeout;
            match fabcoll_fabric::open(&ncfg) {
                Ok(mut node) => {
                    // Each node exchanges its addresses under its own prefix, by local rank.
                    let name = key(&format!("node{n}/addr"));
                    let local_size = members.len() as u32;
                    let blobs = bootstrap::exchange(&*store, &name, local, local_size, &node.address()?, cfg.timeout)?;
                    node.insert_peers(&blobs)?;
                    ep = Box::new(RoutedEndpoint::new(node, ep, members, fcfg.wait)?);
                }
                // The default route only where this build has it; a named one must open.
                Err(fabcoll_fabric::Error::Unavailable { .. }) if !named => {}
                Err(e) => return Err(e.into()),
            }
        }
        // The fabric's own defaults (network fabrics: a larger eager limit), under the environment's.
        // Ranks sharing this node's cores (the launcher's count, else this machine's) against the
        // CPUs they share (FABCOLL_LOCAL_CPUS, else the union of this machine's ranks' CPU sets),
        // counted alike on each of them (`bootstrap::Seat`).
        let (on_machine, cpus) = bootstrap::machine_share(&seats, &seat.machine);
        let here = env.local_size.map_or(on_machine, |n| n as usize);
        let cfg = ExecConfig::from_env_for(ep.caps())?;
        // The rules' `own_cpu` must read alike on every rank, and the job's machines may differ.
        let crowded = cfg.yield_when_idle.unwrap_or_else(|| bootstrap::some_node_crowded(&ids, &seats, cfg.local_cpus));
        let cfg = ExecConfig { local_ranks: Some(here), local_cpus: cfg.local_cpus.or(Some(cpus)), ..cfg };
        let mut c = Communicator::from_endpoint(ep, cfg)?;
        c.shares_cpus = crowded;
        c._server = server;
        c.topology = topology;
        c.agree_with_rank_0(&*store, &key("protocol"), env.rank)?;
        Ok(c)
    }

    /// The executor settings every rank must share (`Engine::protocol_signature`: eager limit,
    /// immediate width, mailbox limit), compared with rank 0's in one round of the store: a rank
    /// whose environment says otherwise stops at its start with both, where its first call would
    /// wait for messages that go another way until the timeout.
    fn agree_with_rank_0(&self, store: &dyn bootstrap::Store, key: &str, rank: u32) -> Result<()> {
        let (mine, timeout) = {
            let e = self.lock();
            (e.protocol_signature(), e.core.cfg.timeout)
        };
        if rank == 0 {
            store.set(key, mine.as_bytes())?;
            return Ok(());
        }
        let theirs = store.wait(key, timeout)?;
        if theirs == mine.as_bytes() {
            return Ok(());
        }
        Err(Error::Mismatch(format!(
            "rank {rank} runs the executor with {mine} where rank 0 runs {}: FABCOLL_EAGER, FABCOLL_MAILBOX, \
             FABCOLL_LOCAL_CPUS and FABCOLL_YIELD must be alike on every rank",
            String::from_utf8_lossy(&theirs)
        )))
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// Whether ranks share CPUs: on a job joined from the environment, whether some node of the
    /// job holds more ranks than its machine's CPUs (`FABCOLL_YIELD` says so outright), the same
    /// on every rank; on a communicator made from an endpoint, whether this node's ranks do, as
    /// the engine counts them. The `own_cpu` condition of the decision rules reads this.
    pub fn shares_cpus(&self) -> bool {
        self.shares_cpus
    }

    /// The CPUs this node's ranks share, as the engine counts them: `FABCOLL_LOCAL_CPUS`, else the
    /// union of the CPU sets of this machine's ranks (joined through the store, alike on every
    /// rank), else (ranks as threads of one process) this process's count.
    pub(crate) fn shared_cpus(&self) -> usize {
        let cpus = self.lock().core.cfg.local_cpus;
        cpus.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Turns checked mode on or off for this communicator (default: `FABCOLL_CHECK=1`). In checked
    /// mode every rank sends its call's signature (operation, count(s), root, datatype, op,
    /// algorithm) to every other rank before any data moves; a difference is an
    /// [`Error::Mismatch`] naming the first differing rank, on every rank, and the communicator
    /// stays usable.
    pub fn set_checked(&mut self, on: bool) {
        self.check = on;
    }

    /// Replaces the algorithm choice of this communicator (communicators made from it by `dup` and
    /// `split` inherit it). Operations the decisions do not cover use the embedded defaults;
    /// per-call [`Options`] and `FABCOLL_ALGO` still win. All ranks must set the same decisions.
    pub fn set_decisions(&mut self, decisions: Arc<Decisions>) {
        self.decisions = decisions;
        self.calls().memo.clear();
    }

    /// Messages up to this many bytes take the eager path on this communicator's endpoint (the
    /// fabric's default or `FABCOLL_EAGER`); larger ones go zero-copy.
    pub fn eager_limit(&self) -> usize {
        self.lock().eager_limit()
    }

    /// Executor counters of the endpoint this communicator runs on (shared with dup/split).
    pub fn stats(&self) -> Stats {
        let mut s = self.lock().stats();
        s.add(&CallsRegistry::total(&self.registry));
        s
    }

    /// How many transfers the engine still tracks (writes not yet reported complete, grants
    /// whose writes have not all arrived): 0 when the communicator is idle. For leak tests.
    #[doc(hidden)]
    pub fn transfers_tracked(&self) -> usize {
        self.lock().transfers_tracked()
    }

    fn lock(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock leaves consistent-enough state to report errors.
        match self.engine.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // Counted while waiting: a straight call holding the lock hands over (`exec::ring`).
                self.lock_waiters.fetch_add(1, Ordering::Relaxed);
                let g = self.engine.lock().unwrap_or_else(|p| p.into_inner());
                self.lock_waiters.fetch_sub(1, Ordering::Relaxed);
                g
            }
        }
    }

    /// The call prepared (see `memo`): remembered, or selected and planned now (and
    /// remembered unless the cost model selects).
    fn prepared(&self, call: &Call<'_>, opts: &Options) -> Result<Arc<Prepared>> {
        let memo = !self.model.selecting();
        if memo {
            if let Some(p) = self.calls().memo.find(|k| k.is(&call.args, opts.algorithm.as_deref(), &opts.params)) {
                return Ok(p.clone());
            }
        }
        self.prepare(call, opts, memo)
    }

    /// Selects, plans and (if `memo`) remembers a call.
    fn prepare(&self, call: &Call<'_>, opts: &Options, memo: bool) -> Result<Arc<Prepared>> {
        let (alg, args) = self.choose(call, opts)?;
        let plan = Plan::new(alg.schedule(&args)?);
        let p = Arc::new(Prepared::new(alg.name, args, plan, &self.lanes));
        if memo {
            self.calls().memo.insert(CallKey::new(&call.args, opts.algorithm.as_deref(), &opts.params), p.clone());
        }
        Ok(p)
    }

    /// Selection for a call: the algorithm and the arguments it runs with.
    fn choose(&self, call: &Call<'_>, opts: &Options) -> Result<(&'static registry::Algorithm, CollArgs)> {
        let mut args = call.args.clone();
        args.params = opts.params.clone();
        // Only the prepared arguments carry the topology (the memo looks calls up without it).
        args.topology = Some(self.topology.clone());
        let coll = args.coll;
        // A per-call choice is strict (its restrictions must hold); a FABCOLL_ALGO choice applies
        // where its restrictions hold and leaves the other calls to the default selection.
        let forced = match &opts.algorithm {
            Some(n) => Some(registry::find(coll, n)?),
            None => match select::env_overrides()?.iter().find(|(c, _)| *c == coll) {
                Some((_, n)) => Some(registry::find(coll, n)?).filter(|a| a.restrictions.violated(&args).is_none()),
                None => None,
            },
        };
        // FABCOLL_SELECT=model: the cost model's argmin (select::model::ModelState) instead of the decisions.
        if let Some((alg, params)) = forced.is_none().then(|| self.model.pick(&args)).transpose()?.flatten() {
            args.params = params;
            return Ok((alg, args));
        }
        let alg = match forced {
            Some(a) => a,
            None => {
                let (a, params) = self
                    .decisions
                    .choose(&args, &Features::of(&args)?.on(self.fabric).sharing_cpus(self.shares_cpus))?;
                args.params = params;
                a
            }
        };
        Ok((alg, args))
    }

    /// Starts a call; the buffers behind `call` must stay lent until the op is waited for. A
    /// `blocking` call is waited for right away. Returns the algorithm too.
    fn start(&self, call: &Call<'_>, opts: &Options, blocking: bool) -> Result<(Started, &'static str)> {
        let p = self.prepared(call, opts)?;
        let path = match p.path(blocking, self.check) {
            Path::Mailbox => Path::Engine,
            path => path,
        };
        Ok((self.start_prepared(call, &p, path)?, p.alg))
    }

    /// Starts a prepared call on the engine, straight over the rings or as an op (`path`).
    fn start_prepared(&self, call: &Call<'_>, p: &Prepared, path: Path) -> Result<Started> {
        let spec = CallSpec {
            coll: call.args.coll.name(),
            alg: p.alg,
            sig: call.sig(p),
            plan: &p.plan,
            dtype: call.dtype,
            rop: call.op.as_ref(),
        };
        let mut eng = self.lock();
        let check = self.check.then(|| {
            // The executor settings every rank must share (they decide eager vs zero-copy per
            // message on both sides) are part of the signature.
            let mine = format!("{} {}", call.signature(&p.args, p.alg), eng.protocol_signature()).into_bytes();
            Check {
                mine,
                got: vec![None; self.size as usize],
                missing: self.size as usize - 1,
                describe: |b| String::from_utf8_lossy(b).into_owned(),
            }
        });
        // SAFETY: the buffers are lent to this call by `Call`'s lifetime: blocking calls wait
        // before returning, nonblocking ones live in a `Scope` that waits for them before the
        // borrows end. Send is only read (LOCAL), Recv may be written by peers (REMOTE_WRITE);
        // peers may read either where they share copies (`Core::read_access`).
        let read = eng.core.read_access;
        let send = unsafe { eng.bind_user(call.send.0, call.send.1, Access::LOCAL | read)? };
        // SAFETY: as above.
        let recv = unsafe { eng.bind_user(call.recv.0, call.recv.1, Access::REMOTE_WRITE | read)? };
        eng.start(self.ctx, &self.members, spec, send, recv, check, path == Path::Straight)
    }

    /// Op `key` was left in flight for the program to collect: the progress thread moves it.
    fn left_in_flight(&self, key: OpKey) {
        if !self.progress.is_on() {
            return;
        }
        self.lock().leave_in_flight(key);
        self.progress.start(&self.engine, &self.lock_waiters);
    }

    /// Waits for `key`, releasing the engine between rounds so that other threads using
    /// communicators on the same endpoint (dup/split) can start and progress theirs.
    fn wait_key(&self, key: OpKey) -> Result<()> {
        self.wait_with(key, Waiter::default())
    }

    /// [`Communicator::wait_key`] with a given wait state.
    fn wait_with(&self, key: OpKey, mut w: Waiter) -> Result<()> {
        let _moving = self.progress.stand_by();
        loop {
            let mut eng = self.lock();
            if eng.wait_step(key, &mut w) {
                return eng.take(key);
            }
        }
    }

    /// A blocking call, the way its prepared form says (`memo::Prepared::path`).
    fn run(&self, call: &Call<'_>, opts: &Options) -> Result<()> {
        let p = match self.model.selecting() {
            true => self.prepare(call, opts, false)?,
            false => match self.run_remembered(call, opts) {
                Remembered::Ran(r) => return r,
                Remembered::Found(p) => p,
                Remembered::Missing => self.prepare(call, opts, true)?,
            },
        };
        match p.path(true, self.check) {
            Path::Mailbox => self.run_on_mailboxes(call, &p),
            path => {
                let started = self.start_prepared(call, &p, path)?;
                self.finish(started)
            }
        }
    }

    /// Waits for a blocking call the engine started, unless it already ran to its end.
    fn finish(&self, started: Started) -> Result<()> {
        match started {
            Started::Done => Ok(()),
            Started::Pending(key) => self.wait_with(key, Waiter::fresh()),
        }
    }

    /// The algorithm the default selection (or `FABCOLL_ALGO`) would run for `call`.
    pub fn algorithm_for(&self, call: &Call<'_>) -> Result<&'static str> {
        Ok(self.prepared(call, &Options::default())?.alg)
    }

    /// A new communicator with the same ranks and a new context.
    pub fn dup(&self) -> Result<Communicator> {
        let mine = self.lock().next_ctx;
        let mut all = vec![0u32; self.size as usize];
        self.allgather(&[mine], &mut all)?;
        let ctx = all.iter().copied().max().unwrap_or(mine);
        self.derive(ctx, self.members.clone(), self.rank, self.topology.clone())
    }

    /// [`Communicator::dup`] whose calls all run on the engine (never the mailboxes): what the
    /// cost model's probe measures (collective).
    pub(crate) fn dup_on_engine(&self) -> Result<Communicator> {
        let mut d = self.dup()?;
        d.lanes.mailbox_limit = 0;
        Ok(d)
    }

    /// MPI_Comm_split: ranks with the same `color` form a communicator, ordered by (`key`, old
    /// rank); `color = None` takes part but gets no communicator.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        let next = self.lock().next_ctx;
        let me = [color.map_or(-1, i64::from), i64::from(key), i64::from(next)];
        let mut all = vec![0i64; 3 * self.size as usize];
        self.allgather(&me, &mut all)?;
        let ctx = all.chunks(3).map(|c| c[2]).max().unwrap_or(i64::from(next)) as u32;
        let Some(color) = color else {
            let mut e = self.lock();
            e.next_ctx = e.next_ctx.max(p2p::ctx_of(ctx) + 1);
            return Ok(None);
        };
        let mut group: Vec<(i64, u32)> = all
            .chunks(3)
            .enumerate()
            .filter(|(_, c)| c[0] == i64::from(color))
            .map(|(r, c)| (c[1], r as u32))
            .collect();
        group.sort_unstable();
        let members: Arc<[u32]> = group.iter().map(|&(_, r)| self.members[r as usize]).collect();
        let rank = group.iter().position(|&(_, r)| r == self.rank).unwrap_or(0) as u32;
        let ranks: Vec<u32> = group.iter().map(|&(_, r)| r).collect();
        let topology = Arc::new(nodes::restrict(&self.topology, &ranks)?);
        self.derive(ctx, members, rank, topology).map(Some)
    }

    /// A communicator of `members` (endpoint ranks) on context `ctx`, where this rank is `rank`
    /// and the ranks sit as `topology` says.
    fn derive(&self, ctx: u32, members: Arc<[u32]>, rank: u32, topology: Arc<Topology>) -> Result<Communicator> {
        {
            let mut e = self.lock();
            e.add_ctx(ctx, &members)?;
            e.add_p2p_ctx(p2p::ctx_of(ctx), &members)?;
        }
        Ok(Communicator {
            engine: self.engine.clone(),
            ctx,
            rank,
            size: members.len() as u32,
            members,
            check: self.check,
            decisions: self.decisions.clone(),
            fabric: self.fabric,
            shares_cpus: self.shares_cpus,
            topology,
            calls: CallsRegistry::register(&self.registry),
            registry: self.registry.clone(),
            lanes: self.lanes,
            _server: self._server.clone(),
            model: self.model.clone(),
            breaks: self.breaks.clone(),
            lock_waiters: self.lock_waiters.clone(),
            progress: self.progress.clone(),
        })
    }

    /// Runs `f` with a [`Scope`] in which collectives are started without waiting; every request
    /// started in the scope is finished when `scope` returns (like `std::thread::scope`), so the
    /// buffers lent to them are safe even if a `Request` is leaked.
    pub fn scope<'env, F, R>(&'env self, f: F) -> Result<R>
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R>,
    {
        request::run_scope(self, f)
    }

    /// This communicator with per-call options applied to every collective called through the
    /// returned view.
    pub fn with<'a>(&'a self, opts: &'a Options) -> WithOptions<'a> {
        WithOptions { comm: self, opts }
    }

    /// The timeout of collectives on this communicator's engine.
    pub fn timeout(&self) -> Duration {
        self.lock().core.cfg.timeout
    }
}

/// Whether a join failed because its connection to the store ended (the server stopped under it).
fn store_went_away(e: &Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(e, Error::Bootstrap(bootstrap::BootstrapError::Io { source, .. })
        if matches!(source.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe))
}

impl Drop for Communicator {
    fn drop(&mut self) {
        CallsRegistry::retire(&self.registry, &self.calls);
        if self.ctx != 0 {
            let mut e = self.lock();
            e.remove_ctx(self.ctx);
            e.remove_ctx(p2p::ctx_of(self.ctx));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabcoll_collectives::op::ReduceOp;

    #[test]
    fn checked_mode_refuses_different_eager_thresholds() {
        // Without the crowded limit, so that a machine of one core keeps 8 KiB too.
        let base = ExecConfig { timeout: Duration::from_secs(10), crowded_eager: 0, ..ExecConfig::default() };
        let small = ExecConfig { eager_threshold: 1024, ..base.clone() };
        let mut comms = Communicator::local_each(vec![base, small]).unwrap();
        comms.iter_mut().for_each(|c| c.set_checked(true));
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .iter()
                .map(|c| {
                    s.spawn(move || {
                        let send = vec![1.0f32; 1024];
                        let mut recv = vec![0.0f32; 1024];
                        c.allreduce(&send, &mut recv, &ReduceOp::Sum).unwrap_err().to_string()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for e in &errs {
            assert!(e.contains("eager<=1024") && e.contains("eager<=8192"), "{e}");
        }
        // Equal settings pass the check.
        let mut same = Communicator::local_each(vec![ExecConfig::default(); 2]).unwrap();
        same.iter_mut().for_each(|c| c.set_checked(true));
        std::thread::scope(|s| {
            for c in &same {
                s.spawn(move || {
                    let mut buf = [c.rank() as f32 + 1.0; 4];
                    c.allreduce_in_place(&mut buf, &ReduceOp::Sum).unwrap();
                    assert_eq!(buf, [3.0; 4]);
                });
            }
        });
    }
}
