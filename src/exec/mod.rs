//! The executor: runs any algorithm's schedule over a fabric endpoint. One [`Engine`] per endpoint
//! holds every collective in flight on every communicator that shares the endpoint, so one
//! `progress` call advances all of them (no cross-communicator deadlock).
//!
//! A plan ([`plan`]) is compiled once per distinct call. Small calls run it in its straight-line
//! order ([`runner`]) over a lane: node-local mailboxes ([`mailboxes`]) or the engine's eager
//! rings ([`ring`]); everything else, and a straight call that cannot go on, runs as an op
//! ([`op`]) that tracks the plan's dependencies. Protocol: eager messages go into per-pair slot
//! rings with credits and are copied (once) out of the slot ([`eager`]); larger messages are
//! written zero-copy into destinations the receiver grants ([`proto`]); messages for collectives
//! this rank has not started yet are kept (slots stay occupied, control messages are queued) until
//! it does.

mod bufs;
mod config;
mod core;
pub(crate) mod eager;
mod early;
pub(crate) mod fasthash;
pub(crate) mod mailboxes;
mod mismatch;
pub(crate) mod mrcache;
pub(crate) mod op;
mod p2p;
pub(crate) mod plan;
pub(crate) mod progress;
pub(crate) mod proto;
mod ring;
pub(crate) mod runner;
pub(crate) mod wait;

pub(crate) use bufs::{Bound, Bufs};
pub use config::{ExecConfig, Stats};
pub(crate) use core::Core;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use fabcoll_fabric::shm::mailbox::MAX_MESSAGE;
use fabcoll_fabric::{Access, Completion, Endpoint, Mr, SILENT_WRITE};

use crate::error::{Error, Result};
use eager::Eager;
use early::{Early, EarlyQueue, EarlyWhat};
use fabcoll_collectives::datatype::Datatype;
use fasthash::{FastMap, FastSet};
use mrcache::MrCache;
use op::{CallSpec, Op, Parts};
use plan::Plan;
use progress::LeftOps;
use proto::{CallSig, GrantEntry, Imm, ImmLayout, Kind, Offer, Setup};
use ring::RingState;
use wait::{yield_core, Backoff, Patience, Pause, CLOCK_EVERY};

/// Identity of a collective call: communicator context and sequence number.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct OpKey {
    pub ctx: u32,
    pub seq: u64,
}

/// What [`Engine::start`] did with a call.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Started {
    /// The call ran to its end inside the start: there is nothing to wait for.
    Done,
    /// Wait for (then take) this key.
    Pending(OpKey),
}

/// Where [`Engine::route`] takes a message.
enum Route {
    /// To the op of this call.
    Op(OpKey),
    /// Nowhere: the communicator is broken.
    Drop,
    /// A call this rank has finished.
    Past,
    /// The early queue: a call not started yet.
    Later,
}

/// A communicator's view inside the engine.
pub(crate) struct CtxState {
    /// Endpoint rank → communicator rank ([`NOT_A_MEMBER`] for endpoints outside the context).
    ep_to_comm: Vec<u32>,
    pub next_seq: u64,
    /// Sequence numbers of this context's ops in the engine (few: a plain list).
    outstanding: Vec<u64>,
    pub broken: Option<String>,
    /// Peers (communicator ranks) whose notice about a call this rank had finished came late,
    /// with the ranks they were waiting for: a later call that times out waiting for them blames
    /// those ranks instead (`mismatch::on_past`). Until when the notice counts: forever if the
    /// peer left that call (`GaveUp`); else (`Abort`, its grace period began) until a `GaveUp`
    /// would have followed, after which the peer had finished the call after all.
    past_waits: Vec<PastWait>,
    /// A point-to-point context's per-stream counters (`p2p`); `None` on a collective one.
    streams: Option<Box<p2p::Streams>>,
}

/// `CtxState::ep_to_comm` of an endpoint rank outside the context.
const NOT_A_MEMBER: u32 = u32::MAX;

/// Finished ops kept for reuse.
const SPARE_OPS: usize = 4;

/// The state of one wait for an op (see [`Engine::wait_step`]).
#[derive(Debug, Default)]
pub(crate) struct Waiter {
    b: Backoff,
    /// What to do before the next poll.
    next: Option<Pause>,
    /// The spin is spent: every round blocks on the fabric.
    blocking: bool,
    /// The op was started right before the wait (a blocking call): the wait begins at its start.
    fresh: bool,
}

impl Waiter {
    /// The wait of a blocking call, right after it started its op.
    pub fn fresh() -> Waiter {
        Waiter { fresh: true, ..Waiter::default() }
    }
}

/// Per-endpoint executor state.
pub(crate) struct Engine {
    pub core: Core,
    /// Boxed: an op is large, and the map moves its entries when it grows.
    ops: FastMap<OpKey, Box<Op>>,
    ctxs: FastMap<u32, CtxState>,
    early: EarlyQueue,
    /// Reused buffer for the early messages of the op being started.
    early_mine: Vec<Early>,
    /// Finished ops kept for reuse (`Op::reuse`): a repeated call allocates no new op. Boxed
    /// because they move back into `ops` as they are.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Op>>,
    /// Reused state of straight calls on the rings (`ring`), boxed so that taking it for a call
    /// and putting it back moves a pointer.
    ring: Option<Box<RingState>>,
    /// The straight call running (its messages are not orphans, see `route`).
    straight: Option<OpKey>,
    pub next_ctx: u32,
    comp: Vec<Completion>,
    /// Registrations of pinned buffers (`Communicator::alloc` / `register`), used before the cache.
    pinned: Vec<Mr>,
    /// Bumped by every `progress` that handled something (a waiter's poll brought news).
    events: u64,
    /// Endpoint ranks the waited-for op waits for, as of (op, `events`): recomputed when
    /// something happened, read at every idle round of an oversubscribed waiter.
    awaited: Vec<usize>,
    awaited_at: Option<(OpKey, u64)>,
    /// The wakers of ops awaited as futures (few: a plain list), woken by the progress thread.
    wakers: Vec<(OpKey, Waker)>,
    /// Contexts broken so far (any of this engine's): the mailbox path's lock-free check that
    /// it may skip asking [`Engine::broken`].
    breaks: Arc<AtomicU64>,
    /// Threads waiting for the lock this engine is behind (counted by `Communicator::lock`): a
    /// straight call that waits hands over to an op when one does, so that the lock is released
    /// between the op's polls (see `ring`).
    lock_waiters: Arc<AtomicU32>,
    /// The ops nonblocking calls left in flight for the program to collect (few: a plain list):
    /// the progress thread's work. Blocking calls move their own ops.
    left: Vec<OpKey>,
    /// `left.len()`, stored whenever it changes (the progress thread reads it without the lock),
    /// and the progress thread's alarm.
    left_ops: Arc<LeftOps>,
}

/// A peer's late notice about a finished call (`CtxState::past_waits`).
#[derive(Clone, Debug)]
pub(crate) struct PastWait {
    peer: u32,
    waits: Vec<u32>,
    /// `None`: the peer left the call; else when its notice stops counting.
    until: Option<Instant>,
}

/// How long a rank that gave up on a collective listens for its peers' abort notices before it
/// names the silent ones.
pub(crate) fn grace(timeout: Duration) -> Duration {
    (timeout / 2).min(Duration::from_secs(2))
}

/// Queues a notice of `kind` (`Abort`: the grace period began; `GaveUp`: the call failed) about
/// `op` for each of its peers: the ranks this rank waits for, as many as fit one control message.
fn queue_notices(core: &mut Core, op: &Op, kind: Kind) {
    let waits: Vec<u8> =
        op.waiting_for().iter().take(core.caps.max_ctrl.min(4096) / 4).flat_map(|r| r.to_le_bytes()).collect();
    let tag = proto::tag(kind, op.key.ctx, op.key.seq, CallSig::default());
    for ep in op_peers(op) {
        core.ctrl(ep, tag, waits.clone());
    }
}

/// Records as `op`'s lost peer the first member its endpoint knows is gone (`Endpoint::peer_gone`:
/// the peer died in this call or an earlier one), unless one is recorded already.
fn note_gone(core: &Core, op: &mut Op) {
    if op.lost.is_some() {
        return;
    }
    let gone = op_peers(op).into_iter().find_map(|ep| Some((ep, op.comm_rank(ep)?, core.ep.peer_gone(ep)?)));
    if let Some((ep, peer, why)) = gone {
        op.lost = Some((peer, Error::Fabric(fabcoll_fabric::Error::Peer { peer: ep, msg: why }).to_string()));
    }
}

/// The endpoints that take part in `op` besides this rank: every member of a collective, the one
/// peer of a point-to-point transfer.
fn op_peers(op: &Op) -> Vec<usize> {
    match op.key.is_p2p() {
        true => vec![op.key.p2p_peer()],
        false => (0..op.members.len() as u32).filter(|&p| p != op.rank).map(|p| op.ep(p)).collect(),
    }
}

/// Whether two registrations are the same (one buffer, one key).
fn same_mr(a: &Mr, b: &Mr) -> bool {
    a.as_ptr() == b.as_ptr() && a.len() == b.len() && a.remote() == b.remote()
}

fn seq_match(seq: u64, low: u64, mask: u64) -> bool {
    seq & mask == low
}

impl Engine {
    /// Wraps a connected endpoint: allocates the eager rings and announces them to every peer.
    pub fn new(mut ep: Box<dyn Endpoint>, cfg: ExecConfig) -> Result<Engine> {
        let caps = ep.caps().clone();
        let layout = ImmLayout::new(caps.imm_bits.min(cfg.imm_bits));
        let mut cfg = cfg;
        let p = ep.size();
        let oversubscribed = cfg.yield_when_idle.unwrap_or_else(|| {
            let local = cfg.local_ranks.unwrap_or(if matches!(caps.backend, "shm" | "local") { p } else { 1 });
            let cpus = cfg.local_cpus.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            local > cpus
        });
        let crowded = cfg.crowded_eager;
        if oversubscribed && crowded > cfg.eager_threshold && p * cfg.slots * crowded <= config::NETWORK_RING_BUDGET {
            cfg.eager_threshold = crowded;
            cfg.slot_size = cfg.slot_size.max(crowded);
        }
        let slot_size = cfg.slot_size.min(caps.max_write);
        cfg.eager_threshold = cfg.eager_threshold.min(slot_size);
        let (eager, setups) = if layout.eager_possible() {
            let slots = cfg.slots_for(p, slot_size);
            Eager::new(&mut *ep, slots, slot_size, cfg.credit_fraction)?
        } else {
            Eager::new(&mut *ep, 0, 0, 1)?
        };
        let (load_store, cfg_spin) = (caps.load_store, cfg.spin);
        if !oversubscribed {
            ep.never_yield();
        }
        let mrs = MrCache::new(cfg.mr_cache > 0 && mrcache::cache_safe(&caps), cfg.mr_cache, cfg.huge_pages_after);
        let me = ep.rank();
        let readable =
            (cfg.shared_copy_min > 0 || cfg.pull_reduce_min > 0) && (0..p).any(|q| q != me && ep.reads_from(q));
        let read_access = if readable { Access::REMOTE_READ } else { Access::LOCAL };
        let core = Core {
            ep,
            caps,
            layout,
            cfg,
            eager,
            writes: FastMap::default(),
            next_write: 0,
            grants_in: FastMap::default(),
            next_gid: vec![0; p],
            backlog: Vec::new(),
            ctrl_out: Vec::new(),
            ctrl_queued: false,
            stats: Stats::default(),
            mrs,
            pool: Vec::new(),
            read_access,
            patience: Patience::new(oversubscribed, load_store, cfg_spin),
            announce_to: FastSet::default(),
        };
        let mut e = Engine {
            core,
            ops: FastMap::default(),
            ctxs: FastMap::default(),
            early: EarlyQueue::default(),
            early_mine: Vec::new(),
            spare: Vec::new(),
            ring: Some(Box::default()),
            straight: None,
            next_ctx: 1,
            comp: Vec::new(),
            pinned: Vec::new(),
            events: 0,
            awaited: Vec::new(),
            awaited_at: None,
            wakers: Vec::new(),
            breaks: Arc::default(),
            lock_waiters: Arc::default(),
            left: Vec::new(),
            left_ops: Arc::default(),
        };
        for (q, s) in setups {
            e.core.ctrl(q, proto::tag(Kind::Setup, 0, 0, CallSig::default()), s.to_bytes());
        }
        e.core.flush_ctrl()?;
        Ok(e)
    }

    pub fn stats(&self) -> Stats {
        let mut s = self.core.stats.clone();
        s.registrations = self.core.mrs.registrations;
        s.cache_hits = self.core.mrs.hits;
        if let Some(r) = self.core.ep.route_counters() {
            (s.node_route_msgs, s.node_route_bytes) = (r.node.msgs, r.node.bytes);
            (s.network_route_msgs, s.network_route_bytes) = (r.network.msgs, r.network.bytes);
        }
        s
    }

    /// Entries of the tables of transfers in flight: writes whose completion has not come, and
    /// grants whose writes have not all arrived. 0 once every call has finished and its writes
    /// are reported complete; what a leak check watches.
    pub fn transfers_tracked(&self) -> usize {
        self.core.writes.len() + self.core.grants_in.len()
    }

    /// Messages up to this many bytes go eager (the executor's setting, capped by the slot size).
    pub fn eager_limit(&self) -> usize {
        self.core.cfg.eager_threshold
    }

    /// The settings that all ranks must share, as checked mode compares them: the effective
    /// eager threshold (a message goes eager on the sender exactly when the receiver expects it
    /// to), the immediate width and the mailbox limit (every rank must take the same lane).
    pub fn protocol_signature(&self) -> String {
        format!(
            "[eager<={} imm {} bits mailbox<={}]",
            self.core.cfg.eager_threshold,
            self.core.layout.bits,
            self.mailbox_limit()
        )
    }

    /// Messages of at least this many bytes may be read by their receiver's reduction out of
    /// this rank's buffers (0: none may, see `Core::pulls_reduce`).
    pub fn pull_reduce_min(&self) -> usize {
        match self.core.read_access {
            Access::REMOTE_READ => self.core.cfg.pull_reduce_min,
            _ => 0,
        }
    }

    /// Calls up to this many bytes may run on the node-local mailboxes (0 where the fabric has
    /// no load/store).
    pub fn mailbox_limit(&self) -> usize {
        if self.core.caps.load_store {
            self.core.cfg.mailbox_limit.min(MAX_MESSAGE)
        } else {
            0
        }
    }

    /// How a mailbox call waits: the engine's patience, and the deadline.
    pub fn mailbox_patience(&self) -> (Patience, Duration) {
        (self.core.patience, self.core.cfg.timeout)
    }

    /// One progress round for the collectives in flight on the engine while this thread runs a
    /// mailbox call, which does not need the engine: peers may be waiting for this rank's part of
    /// them (a rank that waits for a nonblocking op before making the blocking call we are in,
    /// while that op needs our grants or reductions — legal in MPI, whose rule is that a call
    /// blocked anywhere progresses every outstanding operation). A failure is recorded on every
    /// op in flight (their waiters report it; the first gets the original error).
    pub fn progress_others(&mut self) {
        if self.ops.is_empty() {
            return;
        }
        if let Err(e) = self.progress(None) {
            let keys: Vec<OpKey> = self.ops.keys().copied().collect();
            let text = e.to_string();
            let mut first = Some(e);
            for k in keys {
                let e = first.take().unwrap_or_else(|| Error::Protocol(format!("progress failed: {text}")));
                self.fail(k, e);
            }
        }
    }

    /// The endpoint (to set up the mailboxes).
    pub fn endpoint(&mut self) -> &mut dyn Endpoint {
        &mut *self.core.ep
    }

    /// Whether endpoint rank `ep`'s process is known to have died (see `Endpoint::peer_gone`).
    pub fn peer_gone(&self, ep: usize) -> Option<String> {
        self.core.ep.peer_gone(ep)
    }

    /// The error that broke context `ctx`, if one did.
    pub fn broken(&self, ctx: u32) -> Option<String> {
        self.ctxs.get(&ctx).and_then(|c| c.broken.clone())
    }

    /// Marks context `ctx` broken by `why` (a failed mailbox call).
    pub fn break_ctx(&mut self, ctx: u32, why: String) {
        if let Some(c) = self.ctxs.get_mut(&ctx) {
            if c.broken.is_none() {
                c.broken = Some(why);
                self.breaks.fetch_add(1, Ordering::Release);
                // What waits for the context's later calls will not be taken: give the eager
                // slots back (the rings are shared with every other context).
                let mut dropped = Vec::new();
                self.early.take_ctx(ctx, &mut dropped);
                for e in dropped {
                    if let EarlyWhat::Eager { slot, .. } = e.what {
                        let _ = self.core.release_slot(e.peer, slot);
                    }
                }
            }
        }
    }

    /// How many contexts of this engine have broken, readable without the engine's lock: while
    /// it reads 0, no communicator on the engine is broken.
    pub fn breaks(&self) -> Arc<AtomicU64> {
        self.breaks.clone()
    }

    /// The count of threads waiting for the lock this engine is behind, which
    /// `Communicator::lock` keeps.
    pub fn lock_waiters(&self) -> Arc<AtomicU32> {
        self.lock_waiters.clone()
    }

    /// The ops left in flight by nonblocking calls as the progress thread reads them, without
    /// the lock.
    pub fn left_ops(&self) -> Arc<LeftOps> {
        self.left_ops.clone()
    }

    /// A nonblocking call left op `key` in flight: the progress thread moves it until it is taken.
    pub fn leave_in_flight(&mut self, key: OpKey) {
        if self.ops.contains_key(&key) && !self.left.contains(&key) {
            self.left.push(key);
            self.left_ops.left(self.left.len());
        }
    }

    /// Registers a communicator context (members = endpoint rank of each communicator rank).
    pub fn add_ctx(&mut self, ctx: u32, members: &[u32]) -> Result<()> {
        if ctx > proto::MAX_CTX {
            return Err(Error::Protocol(format!("context ids exhausted ({ctx} > {})", proto::MAX_CTX)));
        }
        let mut ep_to_comm = vec![NOT_A_MEMBER; self.core.ep.size()];
        for (c, &e) in members.iter().enumerate() {
            *ep_to_comm.get_mut(e as usize).ok_or_else(|| {
                Error::Protocol(format!("context {ctx}: member endpoint {e} >= {}", self.core.ep.size()))
            })? = c as u32;
        }
        let state = CtxState {
            ep_to_comm,
            next_seq: 0,
            outstanding: Vec::new(),
            broken: None,
            past_waits: Vec::new(),
            streams: None,
        };
        self.ctxs.insert(ctx, state);
        self.next_ctx = self.next_ctx.max(ctx + 1);
        Ok(())
    }

    /// Registers the point-to-point context of a communicator (`p2p`).
    pub fn add_p2p_ctx(&mut self, ctx: u32, members: &[u32]) -> Result<()> {
        self.add_ctx(ctx, members)?;
        if let Some(c) = self.ctxs.get_mut(&ctx) {
            c.streams = Some(Box::default());
        }
        Ok(())
    }

    pub fn remove_ctx(&mut self, ctx: u32) {
        self.ctxs.remove(&ctx);
    }

    /// Binds a user buffer to a call (registration through the cache).
    ///
    /// # Safety
    /// `[ptr, ptr+bytes)` must stay valid (and writable if `access` is remote-write) until the op
    /// using it finished or was aborted.
    pub unsafe fn bind_user(&mut self, ptr: *mut u8, bytes: usize, access: Access) -> Result<Bound> {
        if bytes == 0 {
            return Ok(Bound::empty());
        }
        let (a, b) = (ptr as usize, ptr as usize + bytes);
        if let Some(mr) = self.pinned.iter().find(|m| m.as_ptr() as usize <= a && b <= m.as_ptr() as usize + m.len()) {
            let mr_off = a - mr.as_ptr() as usize;
            return Ok(Bound { ptr, bytes, mr: Some(mr.clone()), mr_off });
        }
        // SAFETY: forwarded from the caller.
        let mr = unsafe { self.core.mrs.get(&mut *self.core.ep, ptr, bytes, access)? };
        let mr_off = ptr as usize - mr.as_ptr() as usize;
        Ok(Bound { ptr, bytes, mr: Some(mr), mr_off })
    }

    /// Uses `mr` for buffers inside it, bypassing the cache; the cache forgets overlapping entries.
    pub fn pin(&mut self, mr: Mr) {
        self.core.mrs.evict(mr.as_ptr(), mr.len());
        self.pinned.push(mr);
    }

    pub fn unpin(&mut self, mr: &Mr) {
        self.pinned.retain(|m| !same_mr(m, mr));
    }

    /// Starts a collective on context `ctx`. Buffers are already bound. A `straight` call runs
    /// its plan straight over the eager rings (`ring`) and may end inside the start
    /// ([`Started::Done`]); else, or when it is handed over, its key is to be waited for.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        ctx: u32,
        members: &Arc<[u32]>,
        spec: CallSpec<'_>,
        send: Bound,
        recv: Bound,
        check: Option<op::Check>,
        straight: bool,
    ) -> Result<Started> {
        let window = self.core.layout.seq_window();
        let st = self.open_ctx(ctx, spec.coll, window, "collectives")?;
        let key = OpKey { ctx, seq: st.next_seq };
        if straight && check.is_none() && self.may_start_straight(key) {
            return self.run_straight(key, members, spec, send, recv);
        }
        let st = self.ctxs.get_mut(&ctx).expect("looked up above");
        st.next_seq += 1;
        self.enter(key, members, spec, send, recv, check)?;
        Ok(Started::Pending(key))
    }

    /// Context `ctx`, unless it is broken or has `window` calls (`what`) outstanding already.
    fn open_ctx(&mut self, ctx: u32, coll: &'static str, window: u64, what: &str) -> Result<&mut CtxState> {
        let st = self.ctxs.get_mut(&ctx).ok_or_else(|| Error::Protocol(format!("unknown context {ctx}")))?;
        if let Some(why) = &st.broken {
            return Err(Error::Broken(why.clone()));
        }
        if st.outstanding.len() as u64 >= window {
            let msg = format!("more than {window} {what} outstanding on one communicator");
            return Err(Error::InvalidArgument { coll, msg });
        }
        Ok(st)
    }

    /// Makes the op of call `key` (counted as started in its context), hands it what arrived for
    /// it and begins it.
    fn enter(
        &mut self,
        key: OpKey,
        members: &Arc<[u32]>,
        spec: CallSpec<'_>,
        send: Bound,
        recv: Bound,
        check: Option<op::Check>,
    ) -> Result<()> {
        let ctx = key.ctx;
        if let Some(st) = self.ctxs.get_mut(&ctx) {
            st.outstanding.push(key.seq);
        }
        // The scratch list reuses the allocation of the spare op `make_op` takes.
        let mut scratch = self.spare.last_mut().map(|o| o.release_buffers()).unwrap_or_default();
        scratch.clear();
        self.bind_scratch(spec.plan, spec.dtype, &mut scratch)?;
        let mut op = self.make_op(key, members, Parts { spec: spec.to_op(), send, recv, scratch });
        if let Some(c) = check {
            for peer in 0..op.members.len() as u32 {
                if peer != op.rank {
                    let ep = op.ep(peer);
                    self.core.ctrl(ep, proto::tag(Kind::Check, ctx, key.seq, CallSig::default()), c.mine.clone());
                }
            }
            op.check = Some(c);
        }
        self.ops.insert(key, op);
        self.admit(key, true);
        Ok(())
    }

    /// Starts a point-to-point transfer on context `ctx` (a communicator's `p2p` one) with
    /// communicator rank `peer`: a send (`outgoing`) or a receive, whose one-step plan is in
    /// `spec`. Buffers are already bound. A `straight` transfer runs on the eager rings like a
    /// straight collective (`ring`) and may end inside the start.
    #[allow(clippy::too_many_arguments)]
    pub fn start_transfer(
        &mut self,
        ctx: u32,
        members: &Arc<[u32]>,
        peer: u32,
        outgoing: bool,
        spec: CallSpec<'_>,
        send: Bound,
        recv: Bound,
        straight: bool,
    ) -> Result<Started> {
        let me = self.core.ep.rank();
        let window = self.core.layout.seq_window() / 2;
        let st = self.open_ctx(ctx, spec.coll, window, "transfers")?;
        let peer_ep = members[peer as usize] as usize;
        let streams =
            st.streams.as_mut().ok_or_else(|| Error::Protocol(format!("context {ctx} is not point-to-point")))?;
        let key = streams.next_key(ctx, me, peer_ep, outgoing);
        if straight && self.may_start_straight(key) {
            return self.run_straight(key, members, spec, send, recv);
        }
        self.enter(key, members, spec, send, recv, None)?;
        Ok(Started::Pending(key))
    }

    /// Registered scratch buffers for `plan` with elements of `dtype`, appended to `into`.
    fn bind_scratch(&mut self, plan: &Plan, dtype: Datatype, into: &mut Vec<Bound>) -> Result<()> {
        let elem = dtype.size();
        for &len in &plan.sched.scratch {
            let bytes = len as usize * elem;
            if bytes == 0 {
                into.push(Bound::empty());
            } else {
                let mr = self.core.scratch(bytes)?;
                into.push(Bound { ptr: mr.as_ptr(), bytes, mr: Some(mr), mr_off: 0 });
            }
        }
        Ok(())
    }

    /// An op for `key` (a spare one reused if there is one), not started.
    fn make_op(&mut self, key: OpKey, members: &Arc<[u32]>, call: Parts) -> Box<Op> {
        let Parts { spec, send, recv, scratch } = call;
        match self.spare.pop() {
            Some(mut op) => {
                op.reuse(key, spec, members, send, recv, scratch);
                op
            }
            None => Box::new(Op::new(key, spec, members.clone(), send, recv, scratch)),
        }
    }

    /// Hands op `key` (just entered in `ops`) the messages for it that arrived before, then
    /// begins it (`begin`: its schedule from the roots, once checked mode agrees) or runs what is
    /// ready (an op taking over a straight call, unless that failed: a lost peer is no failure
    /// yet), and sends what that queued. A failure fails the op.
    fn admit(&mut self, key: OpKey, begin: bool) {
        // Messages that arrived before we started this collective, in arrival order.
        let mut early = std::mem::take(&mut self.early_mine);
        early.clear();
        self.early.take_for(key, &mut early);
        let r = (|| {
            for e in early.drain(..) {
                self.deliver(key, e.peer, e.what)?;
            }
            if begin {
                self.maybe_begin(key)?;
            } else if let Some(op) = self.ops.get_mut(&key).filter(|o| o.error.is_none()) {
                // Also with a lost peer (its grace period): the call may still finish without it,
                // as an op that lost the peer while running does (a peer that had done its part
                // of the call and closed its endpoint is lost too, and with no running op here
                // the call waited out the grace for messages it had already been sent).
                op.run(&mut self.core)?;
            }
            let react =
                self.ops.get(&key).is_some_and(|o| o.started && !o.notices.is_empty() && o.grace_until.is_none());
            if react {
                self.begin_grace(key);
            }
            self.flush()
        })();
        early.clear();
        self.early_mine = early;
        if let Err(e) = r {
            self.fail(key, e);
        }
    }

    /// Starts the schedule once the checked-mode signatures (if any) all agree.
    fn maybe_begin(&mut self, key: OpKey) -> Result<()> {
        let Some(op) = self.ops.get_mut(&key) else { return Ok(()) };
        if op.started || op.error.is_some() {
            return Ok(());
        }
        if let Some(c) = &op.check {
            if c.missing > 0 {
                return Ok(());
            }
            for (r, sig) in c.got.iter().enumerate() {
                if let Some(sig) = sig {
                    if *sig != c.mine {
                        let msg = format!(
                            "collective #{} on rank {}: rank {r} called {} but this rank called {}",
                            key.seq,
                            op.rank,
                            (c.describe)(sig),
                            (c.describe)(&c.mine)
                        );
                        op.error = Some(Error::Mismatch(msg));
                        return Ok(());
                    }
                }
            }
        }
        op.start(&mut self.core)
    }

    fn deliver(&mut self, key: OpKey, peer_ep: usize, what: EarlyWhat) -> Result<()> {
        let ctx = self.ctxs.get(&key.ctx).ok_or_else(|| Error::Protocol(format!("unknown context {}", key.ctx)))?;
        let peer = ctx.ep_to_comm.get(peer_ep).copied().filter(|&c| c != NOT_A_MEMBER).ok_or_else(|| {
            Error::Protocol(format!("message from endpoint rank {peer_ep}, not in context {}", key.ctx))
        })?;
        let Some(op) = self.ops.get_mut(&key) else { return Ok(()) };
        if op.error.is_some() {
            return Ok(());
        }
        let theirs = match &what {
            EarlyWhat::Eager { sig, .. } => *sig,
            EarlyWhat::Ctrl { kind: Kind::Grant | Kind::Rts | Kind::Offer | Kind::Pulled, sig, .. } => Some(*sig),
            EarlyWhat::Ctrl { .. } => None,
        };
        if theirs.is_some_and(|s| s != op.sig) {
            if let EarlyWhat::Eager { slot, .. } = what {
                self.core.release_slot(peer_ep, slot)?;
            }
            return Err(mismatch::signature(&mut self.core, op, peer));
        }
        match what {
            EarlyWhat::Eager { idx, slot, .. } => op.on_eager(&mut self.core, peer, idx, slot),
            EarlyWhat::Ctrl { kind: Kind::Mismatch, data, .. } => {
                Err(Error::Mismatch(mismatch::notice(Some(peer), &data)))
            }
            EarlyWhat::Ctrl { kind: Kind::Grant, data, .. } => {
                op.on_grant(&mut self.core, peer, GrantEntry::parse_all(&data)?)
            }
            EarlyWhat::Ctrl { kind: Kind::Rts, data, .. } => {
                op.on_rts(&mut self.core, peer, &proto::parse_u32s(&data)?)
            }
            EarlyWhat::Ctrl { kind: Kind::Offer, data, .. } => {
                op.on_offer(&mut self.core, peer, Offer::from_bytes(&data)?)
            }
            EarlyWhat::Ctrl { kind: Kind::Pulled, data, .. } => {
                op.on_pulled(&mut self.core, peer, &proto::parse_u32s(&data)?)
            }
            EarlyWhat::Ctrl { kind: Kind::Abort | Kind::GaveUp, data, .. } => {
                // A peer gave up on this collective: report whom we wait for at once, so that
                // every live rank is heard within the grace period and only silent ranks are
                // blamed. The op may still finish normally if it does not need the lost rank.
                op.notices.insert(peer, proto::parse_u32s(&data)?);
                let react = op.grace_until.is_none() && op.started && !op.finished();
                if react {
                    self.begin_grace(key);
                }
                Ok(())
            }
            EarlyWhat::Ctrl { kind: Kind::Check, data, .. } => {
                if let Some(c) = op.check.as_mut() {
                    if c.got[peer as usize].replace(data).is_none() {
                        c.missing -= 1;
                    }
                }
                self.maybe_begin(key)
            }
            EarlyWhat::Ctrl { kind, .. } => Err(Error::Protocol(format!("{kind:?} message routed to a collective"))),
        }
    }

    /// Routes a message for (ctx, seq-low) to its op, or keeps it for later; data or a mismatch
    /// notice for a call this rank has finished is a mismatch (`mismatch::on_past`).
    fn route(&mut self, ctx: u32, seq_low: u64, mask: u64, peer: usize, what: EarlyWhat) -> Result<()> {
        let running = |k: OpKey| k.ctx == ctx && seq_match(k.seq, seq_low, mask);
        let route = match self.ctxs.get(&ctx) {
            Some(c) if c.broken.is_some() => Route::Drop,
            Some(c) if c.streams.is_some() => {
                let streams = c.streams.as_deref().expect("matched above");
                streams.route(c, ctx, self.core.ep.rank(), peer, seq_low, mask, self.straight)
            }
            Some(c) => match c.outstanding.iter().find(|&&s| seq_match(s, seq_low, mask)) {
                Some(&seq) => Route::Op(OpKey { ctx, seq }),
                None if !self.straight.is_some_and(running) && mismatch::is_past(c.next_seq, seq_low, mask) => {
                    Route::Past
                }
                None => Route::Later,
            },
            None => Route::Later,
        };
        match route {
            Route::Op(key) => {
                if let Err(e) = self.deliver(key, peer, what) {
                    self.fail(key, e);
                }
                Ok(())
            }
            // Broken communicator: drop the message, give eager slots back.
            Route::Drop => match what {
                EarlyWhat::Eager { slot, .. } => self.core.release_slot(peer, slot),
                EarlyWhat::Ctrl { .. } => Ok(()),
            },
            Route::Past => match self.on_past(ctx, seq_low, peer, what)? {
                None => Ok(()),
                Some(what) => {
                    self.early.push(Early { ctx, seq_low, mask, peer, what });
                    Ok(())
                }
            },
            Route::Later => {
                self.early.push(Early { ctx, seq_low, mask, peer, what });
                Ok(())
            }
        }
    }

    fn dispatch(&mut self, c: Completion) -> Result<()> {
        match c {
            Completion::WriteDone { ctx: wid } => {
                if let Some((key, s)) = self.core.writes.remove(&wid) {
                    if let Some(op) = self.ops.get_mut(&key) {
                        if op.error.is_none() {
                            if let Err(e) = op.on_write_done(&mut self.core, s) {
                                self.fail(key, e);
                            }
                        }
                    }
                }
            }
            Completion::WriteError { ctx: SILENT_WRITE, error } => {
                // A write that completed inline (an eager message), refused at its target later:
                // which op it served is not recorded, so the error goes to the op waited for.
                return Err(Error::Protocol(format!("an eager write failed at its target: {error}")));
            }
            Completion::WriteError { ctx: wid, error } => {
                if let Some((key, s)) = self.core.writes.remove(&wid) {
                    let ep = self.ops.get(&key).and_then(|o| o.step_peer(s).map(|p| o.ep(p)));
                    let e = match ep {
                        Some(peer) => Error::Fabric(fabcoll_fabric::Error::Peer { peer, msg: error }),
                        None => Error::Protocol(format!("write failed: {error}")),
                    };
                    self.fail(key, e);
                }
            }
            Completion::WriteArrived { peer, imm } => match self.core.layout.decode(imm) {
                Imm::Zcopy { gid } => {
                    let Some((key, s)) = self.core.grant_arrived(peer, gid) else {
                        // A write for a collective that was aborted here: nothing to do.
                        return Ok(());
                    };
                    if let Some(op) = self.ops.get_mut(&key) {
                        if op.error.is_none() {
                            if let Err(e) = op.on_arrived(&mut self.core, s) {
                                self.fail(key, e);
                            }
                        }
                    }
                }
                Imm::Eager { slot, ctx, seq_low, sig, idx } => {
                    let mask = self.core.layout.seq_mask();
                    self.route(ctx, seq_low, mask, peer, EarlyWhat::Eager { idx, slot, sig })?;
                }
            },
            Completion::Ctrl { peer, tag, data } => {
                let proto::Tag { kind, ctx, sig, seq_low } = proto::untag(tag)?;
                match kind {
                    Kind::Setup => self.core.eager.on_setup(peer, Setup::from_bytes(&data)?)?,
                    Kind::Credit => {
                        let mask = proto::credit_mask(peer, &data)?;
                        self.core.eager.on_credit(peer, mask)?;
                    }
                    Kind::AnySource => self.on_any_source(ctx, peer),
                    Kind::Grant
                    | Kind::Rts
                    | Kind::Offer
                    | Kind::Pulled
                    | Kind::Check
                    | Kind::Abort
                    | Kind::GaveUp
                    | Kind::Mismatch => {
                        let mask = (1u64 << proto::TAG_SEQ_BITS) - 1;
                        self.route(ctx, seq_low, mask, peer, EarlyWhat::Ctrl { kind, data, sig })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Marks an op failed (its waiter reports the error). A failure to reach a peer first opens
    /// the grace period of `check_deadline` so that the final error can name the rank that really
    /// left (the peer we failed to reach may itself only have given up because of it).
    fn fail(&mut self, key: OpKey, e: Error) {
        let Some(op) = self.ops.get_mut(&key) else { return };
        if op.error.is_some() {
            return;
        }
        // A mismatch explains a peer that left the call (it gave up on it): it is what to report.
        if op.lost.is_some() && !matches!(e, Error::Mismatch(_)) {
            return;
        }
        let ep_peer = match &e {
            Error::Fabric(fabcoll_fabric::Error::Peer { peer, .. })
            | Error::Fabric(fabcoll_fabric::Error::InvalidKey { peer, .. }) => Some(*peer),
            _ => None,
        };
        match ep_peer.and_then(|p| op.comm_rank(p)) {
            Some(peer) if op.started => {
                op.lost = Some((peer, e.to_string()));
                if op.grace_until.is_none() {
                    self.begin_grace(key);
                }
            }
            _ => op.error = Some(e),
        }
    }

    /// Sends abort notices (whom we wait for, a peer the endpoint knows is gone first among them)
    /// to every peer and opens the grace period.
    fn begin_grace(&mut self, key: OpKey) {
        let timeout = self.core.cfg.timeout;
        let Some(op) = self.ops.get_mut(&key) else { return };
        // A peer that gave up on this call and notified us may have waited for us because of a
        // rank gone in an earlier call; the notices and the final error name that rank.
        note_gone(&self.core, op);
        op.grace_until = Some(Instant::now() + grace(timeout));
        queue_notices(&mut self.core, op, Kind::Abort);
        // Dead peers may refuse the notice; that is what we are reporting anyway.
        self.flush_ctrl_lossy();
    }

    /// Sends queued control messages, dropping those to unreachable peers.
    fn flush_ctrl_lossy(&mut self) {
        for _ in 0..self.core.ctrl_out.len() + 1 {
            if self.core.flush_ctrl().is_ok() {
                return;
            }
        }
        self.core.ctrl_out.clear();
    }

    /// Sends the grants and RTS the ops queued, then the control queue.
    fn flush(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.core.ctrl_queued) {
            return self.core.flush_ctrl();
        }
        let max = self.core.caps.max_ctrl.clamp(GrantEntry::LEN, 4096);
        for op in self.ops.values_mut() {
            for peer in 0..op.grant_out.len() {
                if !op.grant_out[peer].is_empty() {
                    let ep = op.ep(peer as u32);
                    let tag = proto::tag(Kind::Grant, op.key.ctx, op.key.seq, op.sig);
                    let entries = std::mem::take(&mut op.grant_out[peer]);
                    for chunk in entries.chunks(max / GrantEntry::LEN) {
                        let mut b = Vec::with_capacity(chunk.len() * GrantEntry::LEN);
                        chunk.iter().for_each(|g| g.put(&mut b));
                        self.core.ctrl(ep, tag, b);
                    }
                }
                if !op.rts_out[peer].is_empty() {
                    let ep = op.ep(peer as u32);
                    let tag = proto::tag(Kind::Rts, op.key.ctx, op.key.seq, op.sig);
                    let idxs = std::mem::take(&mut op.rts_out[peer]);
                    for chunk in idxs.chunks(max / 4) {
                        self.core.ctrl(ep, tag, chunk.iter().flat_map(|i| i.to_le_bytes()).collect());
                    }
                }
            }
        }
        self.core.flush_ctrl()
    }

    /// Polls the endpoint once and advances everything; `block` waits up to that long for a
    /// completion first.
    pub fn progress(&mut self, block: Option<Duration>) -> Result<()> {
        let mut comp = std::mem::take(&mut self.comp);
        comp.append(&mut self.core.backlog);
        match block {
            Some(d) if comp.is_empty() => match self.core.ep.wait(&mut comp, Some(d)) {
                Ok(_) | Err(fabcoll_fabric::Error::Timeout { .. }) => {}
                Err(e) => return Err(e.into()),
            },
            _ => {
                self.core.ep.poll(&mut comp)?;
            }
        }
        if comp.is_empty() && self.core.ctrl_out.is_empty() {
            // Nothing happened: no op changed, nothing to flush.
            self.comp = comp;
            return Ok(());
        }
        let mut r = Ok(());
        self.events = self.events.wrapping_add(1);
        for c in comp.drain(..) {
            if let Err(e) = self.dispatch(c) {
                r = Err(e);
                break;
            }
        }
        comp.clear();
        self.comp = comp;
        r?;
        self.flush()
    }

    /// Whether the op finished (or failed).
    pub fn is_finished(&self, key: OpKey) -> bool {
        self.ops.get(&key).is_none_or(|o| o.finished())
    }

    /// Removes a finished op and returns its result. A failed op breaks its communicator.
    pub fn take(&mut self, key: OpKey) -> Result<()> {
        let Some(op) = self.ops.get(&key) else {
            return Err(Error::Protocol(format!("call #{} is unknown (already waited for?)", key.number())));
        };
        if !op.finished() {
            return Err(Error::Protocol(format!("call #{} has not finished", key.number())));
        }
        let mut op = self.ops.remove(&key).expect("present");
        if let Some(i) = self.left.iter().position(|&k| k == key) {
            self.left.swap_remove(i);
            self.left_ops.taken(self.left.len());
        }
        if !self.wakers.is_empty() {
            self.wakers.retain(|(k, _)| *k != key);
        }
        if let Some(c) = self.ctxs.get_mut(&key.ctx) {
            if let Some(i) = c.outstanding.iter().position(|&s| s == key.seq) {
                c.outstanding.remove(i);
            }
        }
        match op.error.take() {
            None => {
                let mut scratch = op.release_buffers();
                for b in scratch.drain(..) {
                    if let Some(mr) = b.mr {
                        self.core.give_back(mr);
                    }
                }
                op.scratch = scratch;
                if self.spare.len() < SPARE_OPS {
                    self.spare.push(op);
                }
                Ok(())
            }
            Some(e) => {
                self.abort(key, &mut op, &e);
                Err(e)
            }
        }
    }

    /// Cleans up after a failed op: no late write may land in memory handed back to the caller,
    /// so its user registrations are evicted from the cache and dropped; scratch is not reused.
    fn abort(&mut self, key: OpKey, op: &mut Op, e: &Error) {
        if !matches!(e, Error::Mismatch(_)) || op.started {
            self.break_ctx(key.ctx, e.to_string());
        }
        // Tell the peers that this rank left the call and whom it was waiting for, so that ranks
        // waiting on us can name the rank that is really missing, and those that finished it know
        // we will not join the next one (an `Abort` of the grace period may still be followed by
        // success).
        if op.started {
            queue_notices(&mut self.core, op, Kind::GaveUp);
        }
        for (peer, slot) in op.held_slots() {
            let _ = self.core.release_slot(peer, slot);
        }
        for b in [&op.send, &op.recv] {
            if b.bytes > 0 {
                self.core.mrs.evict(b.ptr, b.bytes);
            }
        }
        self.core.writes.retain(|_, (k, _)| *k != key);
        self.core.grants_in.retain(|_, (k, _, _)| *k != key);
        // A dead peer's refusal must not keep the notices from the live ones.
        self.flush_ctrl_lossy();
    }

    /// One round of waiting for `key`: progress, deadline and grace handling (on expiry the error
    /// names the ranks still missing). Returns whether the op has finished. Callers that share the
    /// engine with other threads release it between rounds.
    ///
    /// Polling follows the engine's patience (`wait`): without blocking (yielding the core once
    /// polls bring nothing where ranks share cores), then, the spin spent, each round blocks up to
    /// 1 ms on the fabric's doorbell (a peer's write wakes it). The clock is read every few rounds only.
    pub fn wait_step(&mut self, key: OpKey, w: &mut Waiter) -> bool {
        let Some(op) = self.ops.get_mut(&key) else { return true };
        if op.finished() {
            return true;
        }
        let in_grace = op.grace_until.is_some();
        // The deadline counts from the first wait.
        let t0 = op.wait_began();
        if std::mem::take(&mut w.fresh) {
            // The op was started just before this wait: the wait goes on from the polls the call
            // made straight before the op took it over, its clock from the op's start.
            w.b = op.polled;
            w.b.since.get_or_insert(t0);
        }
        let block = match w.next.take() {
            _ if w.blocking => Some(Duration::from_millis(1)),
            Some(Pause::Yield) => {
                yield_core(&*self.core.ep);
                None
            }
            Some(Pause::Stop) => {
                w.blocking = true;
                Some(Duration::from_millis(1))
            }
            Some(Pause::Poll) | None => None,
        };
        let ev = self.events;
        if let Err(e) = self.progress(block) {
            // Ends the op, possibly after the grace period of a lost peer.
            self.fail(key, e);
        }
        if self.events == ev {
            let patience = self.core.patience;
            w.next = Some(w.b.fruitless(&patience, || self.awaited_busy(key)));
        } else {
            w.b.news();
        }
        if w.blocking || in_grace || w.b.rounds.is_multiple_of(CLOCK_EVERY) {
            let now = Instant::now();
            let timeout = self.core.cfg.timeout;
            let deadline = t0 + timeout;
            if now >= deadline + grace(timeout) + Duration::from_millis(100) {
                self.time_out(key);
                return true;
            }
            let probe_due = now >= t0 + timeout / 4 && self.ops.get(&key).is_some_and(|o| !o.probed);
            if probe_due || in_grace || now >= deadline || self.ops.get(&key).is_some_and(|o| o.grace_until.is_some()) {
                self.check_deadline(key);
            }
        }
        self.is_finished(key)
    }

    /// Whether every endpoint rank op `key` waits for runs on another CPU right now (asked by an
    /// oversubscribed waiter before it yields).
    fn awaited_busy(&mut self, key: OpKey) -> bool {
        if self.awaited_at != Some((key, self.events)) {
            self.awaited.clear();
            if let Some(op) = self.ops.get(&key) {
                self.awaited.extend(op.waiting_for().into_iter().map(|p| op.ep(p)));
            }
            self.awaited_at = Some((key, self.events));
        }
        !self.awaited.is_empty() && self.awaited.iter().all(|&p| self.core.ep.peer_busy_elsewhere(p))
    }

    /// Waits until every peer's eager-ring setup arrived (until then small messages take the
    /// rendezvous path, which is correct but slower).
    pub fn await_setups(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.core.cfg.timeout;
        let me = self.core.ep.rank();
        loop {
            let missing = self.core.eager.missing_setups(me);
            if missing.is_empty() {
                // Every peer's setup came: the fabric's connections to all of them exist.
                return Ok(self.core.ep.connected()?);
            }
            if Instant::now() >= deadline {
                return Err(Error::Fabric(fabcoll_fabric::Error::Timeout {
                    after: self.core.cfg.timeout,
                    what: format!("eager-ring setup from endpoint rank(s) {missing:?}"),
                }));
            }
            self.progress(Some(Duration::from_millis(2)))?;
        }
    }

    /// Handles an op's deadline: when it passes, tell every peer whom we are waiting for (abort
    /// notice) and keep progressing for a grace period to hear theirs; then fail with a Timeout
    /// naming the silent ranks (see `Op::suspects`).
    pub fn check_deadline(&mut self, key: OpKey) {
        let timeout = self.core.cfg.timeout;
        let Some(op) = self.ops.get_mut(&key) else { return };
        if op.finished() {
            return;
        }
        // A `test` loop waits too: the deadline starts at the first check.
        let waited = op.wait_began().elapsed();
        if !op.probed && waited >= timeout / 4 && op.started {
            // A quarter of the timeout waiting to send: an empty RTS with the call's signature
            // asks each such peer whether it makes this call. One that makes another (or has
            // finished it: orphaned data) reports a mismatch to every rank instead of letting
            // them time out; one that makes it ignores it.
            op.probed = true;
            let tag = proto::tag(Kind::Rts, key.ctx, key.seq, op.sig);
            for peer in op.send_waits() {
                self.core.ctrl(op.ep(peer), tag, Vec::new());
            }
            self.flush_ctrl_lossy();
            return;
        }
        if waited < timeout && op.grace_until.is_none() {
            return;
        }
        match op.grace_until {
            None => self.begin_grace(key),
            Some(t) => {
                let everyone = op.notices.len() >= op_peers(op).len();
                if Instant::now() >= t || everyone {
                    self.time_out(key);
                }
            }
        }
    }

    /// How many polls so far brought something (a waiter's sign of news).
    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn has_op(&self, key: OpKey) -> bool {
        self.ops.contains_key(&key)
    }

    /// Remembers the waker of a task awaiting op `key` (the progress thread wakes it when the op
    /// has finished); a later waker of the same op replaces the earlier one.
    pub fn set_waker(&mut self, key: OpKey, waker: &Waker) {
        match self.wakers.iter_mut().find(|(k, _)| *k == key) {
            Some((_, w)) => w.clone_from(waker),
            None => self.wakers.push((key, waker.clone())),
        }
    }

    /// Moves the wakers of finished ops to `out`.
    fn take_finished_wakers(&mut self, out: &mut Vec<Waker>) {
        if self.wakers.is_empty() {
            return;
        }
        let ops = &self.ops;
        let finished = |k: &OpKey| ops.get(k).is_none_or(|o| o.finished());
        out.extend(self.wakers.extract_if(.., |(k, _)| finished(k)).map(|(_, w)| w));
    }

    /// The deadline check of every awaited op (their tasks poll only when woken).
    fn check_awaited_deadlines(&mut self) {
        for i in 0..self.wakers.len() {
            let key = self.wakers[i].0;
            self.check_deadline(key);
        }
    }

    fn time_out(&mut self, key: OpKey) {
        if let Some(op) = self.ops.get_mut(&key) {
            let now = Instant::now();
            for w in self.ctxs.get(&key.ctx).map_or(&[][..], |c| &c.past_waits[..]) {
                if w.until.is_none_or(|t| now < t) {
                    op.notices.entry(w.peer).or_insert_with(|| w.waits.clone());
                }
            }
            let e = match &op.lost {
                Some((lost, cause)) => Error::PeerLost {
                    coll: op.coll,
                    seq: key.number(),
                    rank: op.rank,
                    peers: op.lost_peers(*lost),
                    cause: cause.clone(),
                },
                None => Error::Timeout {
                    coll: op.coll,
                    seq: key.number(),
                    rank: op.rank,
                    after: op.waited(),
                    waiting_for: op.suspects(),
                },
            };
            op.error = Some(e);
        }
    }
}
