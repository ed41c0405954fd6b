//! The communicator's side of the direct path (`exec::direct`): which calls take it, the
//! mailbox set-up on first use, waiting, and the errors a failed call leaves behind.
//!
//! A call takes the direct path when all of these hold, each the same on every rank (so every
//! rank takes the same path): the endpoint is load/store (shm, local); the call blocks; checked
//! mode is off; the operation is not a v-variant; the largest buffer any rank passes is at most
//! `ExecConfig::direct_limit` bytes; the chosen algorithm does not cut messages into segments
//! smaller than that, and sends at most half an inbox to any one peer ([`form`]); the
//! communicator has at most [`MAX_RANKS`] ranks.
//!
//! The first such call on a communicator allocates this rank's mailbox region (p inboxes of
//! 64 KiB), exchanges the descriptors with an allgather on the engine, maps the peers' regions
//! and waits in a barrier until every rank has (a rank that went on could otherwise drop its
//! communicator, and with it its region, before a slower peer mapped it).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use fabcoll_collectives::registry;
use fabcoll_collectives::schedule::{StepId, StepKind};
use fabcoll_collectives::{CollArgs, Collective};
use fabcoll_fabric::RemoteMr;

use super::cache::CallKey;
use super::call::{Call, Collectives};
use super::{Communicator, Options};
use crate::error::{Error, Result};
use crate::exec::direct::{self, DirectCounts, DirectForm, Runner, Waiting};
use crate::exec::op::OpSpec;
use crate::exec::plan::Plan;
use crate::exec::straight;
use crate::exec::Stats;
use fabcoll_fabric::shm::mailbox::{record_len, Mailbox, RING};

/// Largest communicator that uses the direct path (its mailboxes take p · 64 KiB per rank).
pub(crate) const MAX_RANKS: u32 = 64;

/// How often a long wait asks the endpoint whether a peer died.
const LIVENESS_EVERY: Duration = Duration::from_millis(10);

/// A waiting call that has spun this long sleeps this much between polls.
const NAP: Duration = Duration::from_micros(50);

/// A communicator's direct-path state.
#[derive(Default)]
pub(crate) enum DirectState {
    /// No direct call yet.
    #[default]
    Unset,
    Ready(Box<Ready>),
    /// A direct call failed: the communicator is broken (the counters of its calls kept).
    Off(DirectCounts),
}

/// The mailboxes, the reusable run state, the number of direct calls made so far, and the
/// calls remembered for [`Communicator::run_remembered`].
pub(crate) struct Ready {
    mb: Mailbox,
    runner: Runner,
    seq: u64,
    /// Most recently used first, at most [`REMEMBERED`].
    memo: Vec<Remembered>,
    /// The engine's waiting settings (`Engine::direct_waiting`: yield threshold in polls, spin
    /// time, timeout), fixed when the engine is made.
    waiting: (u32, Duration, Duration),
    /// This communicator's direct calls so far (read by `Communicator::stats` through the
    /// endpoint's [`DirectRegistry`]).
    counts: DirectCounts,
}

/// Direct calls remembered per communicator.
const REMEMBERED: usize = 8;

/// A direct call as made and its plan. The planning is a function of the call and of the
/// communicator's decisions, which forget it when they change ([`DirectState::forget_choices`]);
/// `comm::cache::PlanCache::choice` keeps the same memo for every call, behind a lock of its own.
struct Remembered {
    key: CallKey,
    plan: Arc<Plan>,
}

impl Remembered {
    #[inline]
    fn is(&self, call: &Call<'_>, opts: &Options) -> bool {
        self.key.is(&call.args, opts.algorithm.as_deref(), &opts.params)
    }
}

impl Ready {
    fn remember(&mut self, call: &Call<'_>, opts: &Options, plan: Arc<Plan>) {
        if let Some(i) = self.memo.iter().position(|m| m.is(call, opts)) {
            self.memo.remove(i);
        } else if self.memo.len() >= REMEMBERED {
            self.memo.pop();
        }
        let m = Remembered { key: CallKey::new(&call.args, opts.algorithm.as_deref(), &opts.params), plan };
        self.memo.insert(0, m);
    }
}

impl DirectState {
    /// The counters of this communicator's direct calls.
    fn counts(&self) -> DirectCounts {
        match self {
            DirectState::Unset => DirectCounts::default(),
            DirectState::Ready(r) => r.counts,
            DirectState::Off(c) => *c,
        }
    }

    /// Forgets the remembered calls (the communicator's decisions changed).
    pub(crate) fn forget_choices(&mut self) {
        if let DirectState::Ready(r) = self {
            r.memo.clear();
        }
    }
}

/// A communicator's direct-path state, shared with its endpoint's [`DirectRegistry`].
pub(crate) type SharedState = Arc<Mutex<DirectState>>;

/// The direct-path counters of every communicator on one endpoint (dup/split share it): each
/// live communicator's, kept in its own state (a call adds to them under the lock it already
/// holds, not a shared one), and the total of those dropped.
#[derive(Default)]
pub(crate) struct DirectRegistry {
    retired: DirectCounts,
    live: Vec<Weak<Mutex<DirectState>>>,
}

/// The endpoint's [`DirectRegistry`].
pub(crate) type SharedCounts = Arc<Mutex<DirectRegistry>>;

impl DirectRegistry {
    /// A new communicator's state, registered (lock order: the registry, then a state).
    pub(crate) fn register(reg: &SharedCounts) -> SharedState {
        let state = SharedState::default();
        let mut r = reg.lock().unwrap_or_else(|p| p.into_inner());
        r.live.retain(|w| w.strong_count() > 0);
        r.live.push(Arc::downgrade(&state));
        state
    }

    /// Moves a communicator's counters to the retired total (it is being dropped).
    pub(crate) fn retire(reg: &SharedCounts, state: &SharedState) {
        let mut r = reg.lock().unwrap_or_else(|p| p.into_inner());
        let counts = state.lock().unwrap_or_else(|p| p.into_inner()).counts();
        r.retired.add(&counts);
        r.live.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), Arc::as_ptr(state)));
    }

    /// The counters of every communicator of the endpoint, dropped ones included.
    pub(crate) fn total(reg: &SharedCounts) -> DirectCounts {
        let r = reg.lock().unwrap_or_else(|p| p.into_inner());
        let mut t = r.retired;
        for state in r.live.iter().filter_map(Weak::upgrade) {
            t.add(&state.lock().unwrap_or_else(|p| p.into_inner()).counts());
        }
        t
    }
}

/// Elements of the largest buffer any rank passes to this call, for the operations whose buffer
/// sizes follow from the arguments alone (not the v-variants).
fn largest_buffer(args: &CollArgs) -> Option<u64> {
    let p = u64::from(args.size);
    match args.coll {
        Collective::Barrier => Some(0),
        Collective::Bcast | Collective::Reduce | Collective::Allreduce | Collective::Scan | Collective::Exscan => {
            Some(args.count)
        }
        Collective::Gather
        | Collective::Scatter
        | Collective::Allgather
        | Collective::Alltoall
        | Collective::ReduceScatterBlock => args.count.checked_mul(p),
        Collective::Gatherv
        | Collective::Scatterv
        | Collective::Allgatherv
        | Collective::Alltoallv
        | Collective::ReduceScatter => None,
    }
}

/// Whether `args` (the call's, `elem` bytes per element) qualify, before the algorithm is known.
pub(crate) fn eligible(args: &CollArgs, limit: usize) -> bool {
    limit > 0
        && args.size <= MAX_RANKS
        && largest_buffer(args)
            .and_then(|n| n.checked_mul(u64::from(args.elem_size)))
            .is_some_and(|b| b <= limit as u64)
}

/// Whether the chosen arguments keep messages whole (no `segment` below the buffer's length).
pub(crate) fn unsegmented(args: &CollArgs) -> bool {
    match args.params.get("segment") {
        Some(seg) => seg == 0 || largest_buffer(args).is_some_and(|n| seg >= n),
        None => true,
    }
}

/// Whether the plan of `alg` for `args` (the arguments it runs with) runs on the direct path,
/// and in which order. It does when no rank's schedule sends more than half an inbox to one
/// peer — then no sender of the call waits for inbox space while its receiver waits for it (the
/// other half holds what earlier calls left; a sender running ahead by whole calls only waits
/// for a receiver that is still busy with earlier ones) — and every rank's steps can run in
/// their straight-line order without deadlock (`exec::straight`). Schedules are a function of
/// the arguments, so every rank decides alike; decided once per plan.
pub(crate) fn form(args: &CollArgs, alg: &str) -> DirectForm {
    let Ok(a) = registry::find(args.coll, alg) else { return DirectForm::Unfit };
    let mut scheds = Vec::with_capacity(args.size as usize);
    for r in 0..args.size {
        let Ok(s) = a.schedule(&CollArgs { rank: r, ..args.clone() }) else { return DirectForm::Unfit };
        let mut to = vec![0usize; args.size as usize];
        for (_, k, _) in s.iter() {
            if let StepKind::Send { peer, src } = *k {
                if src.len > 0 {
                    to[peer as usize] += record_len(src.len as usize * args.elem_size as usize);
                }
            }
        }
        if to.iter().any(|&b| b > RING / 2) {
            return DirectForm::Unfit;
        }
        scheds.push(s);
    }
    let orders: Vec<Vec<StepId>> = scheds.iter().map(straight::order).collect();
    match orders.get(args.rank as usize) {
        Some(mine) if straight::deadlock_free(&scheds, &orders) => DirectForm::InOrder(mine[..].into()),
        _ => DirectForm::Unfit,
    }
}

impl Stats {
    /// Adds the direct path's counters.
    pub(crate) fn add_direct(&mut self, d: &DirectCounts) {
        self.direct_msgs += d.msgs;
        self.direct_bytes += d.bytes;
        self.direct_copy_bytes += d.copy_bytes;
        self.direct_fused_bytes += d.fused_bytes;
        self.local_copy_bytes += d.local_copy_bytes;
        self.reduce_bytes += d.reduce_bytes;
    }
}

impl DirectCounts {
    fn add(&mut self, d: &DirectCounts) {
        self.msgs += d.msgs;
        self.bytes += d.bytes;
        self.copy_bytes += d.copy_bytes;
        self.fused_bytes += d.fused_bytes;
        self.local_copy_bytes += d.local_copy_bytes;
        self.reduce_bytes += d.reduce_bytes;
    }
}

/// Runs calls on the engine only (the mailbox set-up itself must not take the direct path).
struct EngineOnly<'a>(&'a Communicator);

impl<'b> Collectives<'b> for EngineOnly<'_> {
    type Out = ();

    fn comm(&self) -> &Communicator {
        self.0
    }

    fn submit(&self, call: &Call<'b>) -> Result<()> {
        self.0.run_engine(call, &Options::default())
    }
}

impl Communicator {
    /// Allocates and exchanges the mailboxes (collective: the first direct call of every rank).
    fn direct_setup(&self) -> Result<Mailbox> {
        let (rank, p) = (self.rank as usize, self.size as usize);
        let mut mb = Mailbox::new(self.lock().endpoint(), rank, p)?;
        let mine = mb.descriptor();
        let mut all = vec![0u8; mine.len() * p];
        EngineOnly(self).allgather(&mine[..], &mut all)?;
        let descs = all.chunks(mine.len()).map(RemoteMr::from_bytes).collect::<fabcoll_fabric::Result<Vec<_>>>()?;
        mb.connect(self.lock().endpoint(), &descs, &self.members)?;
        // Nobody goes on (and may drop its communicator, deregistering its region) before every
        // rank has mapped every region: a mapping then keeps the pages.
        EngineOnly(self).barrier()?;
        Ok(mb)
    }

    /// Runs `call` on the direct path when the same call (arguments and options) ran there
    /// before and no communicator of the engine has broken: the plan comes from this
    /// communicator's direct state, without [`Communicator::plan`] (its lock, the plan's and the
    /// op's reference counts) nor the engine's lock. `None`: plan the call
    /// ([`Communicator::run`]).
    pub(super) fn run_remembered(&self, call: &Call<'_>, opts: &Options) -> Option<Result<()>> {
        // Under cost-model selection the choice may change from call to call (nothing is
        // remembered); after a break the slow path asks the engine whether this context broke.
        if self.breaks.load(Ordering::Acquire) != 0 || self.model.selecting() {
            return None;
        }
        let mut guard = self.direct.lock().unwrap_or_else(|p| p.into_inner());
        let DirectState::Ready(ready) = &mut *guard else { return None };
        let i = ready.memo.iter().position(|m| m.is(call, opts))?;
        if i > 0 {
            ready.memo[..=i].rotate_right(1);
        }
        let r = self.run_ready(ready, call, None);
        Some(self.finish_direct(guard, r))
    }

    /// Runs a planned call on the direct path (setting the mailboxes up on the first one).
    pub(super) fn run_direct(&self, call: &Call<'_>, opts: &Options, spec: &OpSpec) -> Result<()> {
        let mut guard = self.direct.lock().unwrap_or_else(|p| p.into_inner());
        let waiting = {
            let eng = self.lock();
            if let Some(why) = eng.broken(self.ctx) {
                return Err(Error::Broken(why));
            }
            eng.direct_waiting()
        };
        if matches!(*guard, DirectState::Unset) {
            match self.direct_setup() {
                Ok(mb) => {
                    let counts = DirectCounts::default();
                    let ready = Ready { mb, runner: Runner::default(), seq: 0, memo: Vec::new(), waiting, counts };
                    *guard = DirectState::Ready(Box::new(ready));
                }
                Err(e) => {
                    *guard = DirectState::Off(DirectCounts::default());
                    self.lock().break_ctx(self.ctx, e.to_string());
                    return Err(e);
                }
            }
        }
        let DirectState::Ready(ready) = &mut *guard else {
            return Err(Error::Broken("an earlier direct call failed".into()));
        };
        if !self.model.selecting() {
            ready.remember(call, opts, spec.plan.clone());
        }
        let r = self.run_ready(ready, call, Some(&spec.plan));
        self.finish_direct(guard, r)
    }

    /// One direct call on ready mailboxes: `plan`, or the most recently remembered one.
    fn run_ready(&self, ready: &mut Ready, call: &Call<'_>, plan: Option<&Plan>) -> Result<DirectCounts> {
        let Ready { mb, runner, seq, memo, waiting: (yield_after, spin, timeout), .. } = ready;
        let (yield_after, spin, timeout) = (*yield_after, *spin, *timeout);
        let plan: &Plan = match plan {
            Some(p) => p,
            None => &memo[0].plan,
        };
        // Only plans decided `InOrder` come here (`Communicator::run`).
        let Some(DirectForm::InOrder(order)) = plan.direct.get() else {
            return Err(Error::Protocol("a direct call whose plan has no straight-line order".into()));
        };
        let c = direct::Call {
            plan,
            send: call.send.0,
            recv: call.recv.0,
            dtype: call.dtype,
            rop: call.op.as_ref(),
            seq: *seq,
        };
        let (coll, rank, this_seq) = (call.args.coll, self.rank, *seq);
        let mut last_liveness: Option<Instant> = None;
        let mut check = |waiting: &[u32], t0: Instant| -> Result<()> {
            self.lock().progress_others();
            let waited = t0.elapsed();
            if waited >= spin {
                std::thread::sleep(NAP);
            }
            if waited >= LIVENESS_EVERY && last_liveness.is_none_or(|t| t.elapsed() >= LIVENESS_EVERY) {
                last_liveness = Some(Instant::now());
                let eng = self.lock();
                let gone: Vec<(u32, String)> = (0..self.size)
                    .filter(|&r| r != rank)
                    .filter_map(|r| eng.peer_gone(self.members[r as usize] as usize).map(|why| (r, why)))
                    .collect();
                if !gone.is_empty() {
                    let cause = gone.iter().map(|(_, w)| w.as_str()).collect::<Vec<_>>().join("; ");
                    let peers = gone.into_iter().map(|(r, _)| r).collect();
                    return Err(Error::PeerLost { coll, seq: this_seq, rank, peers, cause });
                }
            }
            if waited >= timeout {
                return Err(Error::Timeout { coll, seq: this_seq, rank, after: waited, waiting_for: waiting.to_vec() });
            }
            Ok(())
        };
        let mut w = Waiting { yield_after, check: &mut check };
        let r = runner.run(&c, order, mb, &mut w);
        *seq += 1;
        r.map_err(|e| match e {
            Error::Timeout { coll, seq, rank, after, waiting_for } => {
                let grace = (timeout / 2).min(Duration::from_secs(2));
                let waiting_for = direct::blame(mb, seq, rank, self.size, waiting_for, grace);
                Error::Timeout { coll, seq, rank, after, waiting_for }
            }
            e => e,
        })
    }

    /// Adds a direct call's counters, or breaks the communicator after its failure.
    fn finish_direct(&self, mut guard: MutexGuard<'_, DirectState>, r: Result<DirectCounts>) -> Result<()> {
        match r {
            Ok(counts) => {
                if let DirectState::Ready(ready) = &mut *guard {
                    ready.counts.add(&counts);
                }
                Ok(())
            }
            Err(e) => {
                *guard = DirectState::Off(guard.counts());
                drop(guard);
                self.lock().break_ctx(self.ctx, e.to_string());
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabcoll_fabric::shm::mailbox::MAX_DIRECT;

    fn fits(args: &CollArgs, alg: &str) -> bool {
        !matches!(form(args, alg), DirectForm::Unfit)
    }

    #[test]
    fn only_small_fixed_size_calls_qualify() {
        let mut a = CollArgs::new(Collective::Allreduce, 0, 4, 512);
        a.elem_size = 8;
        assert!(eligible(&a, 4096));
        assert!(!eligible(&a, 4095));
        assert!(!eligible(&a, 0));
        // Allgather: the receive buffer holds p blocks.
        let mut g = CollArgs::new(Collective::Allgather, 1, 4, 256);
        g.elem_size = 4;
        assert!(eligible(&g, 4096));
        g.count = 257;
        assert!(!eligible(&g, 4096));
        let mut v = CollArgs::new(Collective::Allgatherv, 1, 2, 1);
        v.counts = Some(vec![1, 1].into());
        assert!(!eligible(&v, 4096), "v-variants never");
        let big = CollArgs::new(Collective::Bcast, 0, MAX_RANKS + 1, 1);
        assert!(!eligible(&big, 4096));
        let mut seg = a.clone();
        seg.params.set("segment", 100);
        assert!(!unsegmented(&seg));
        seg.params.set("segment", 512);
        assert!(unsegmented(&seg));
        seg.params.set("segment", 0);
        assert!(unsegmented(&seg), "0 = no segmentation");
        assert!(unsegmented(&a));
    }

    #[test]
    fn plans_that_send_more_than_half_an_inbox_to_a_peer_do_not_fit() {
        let mut args = CollArgs::new(Collective::Allreduce, 0, 4, MAX_DIRECT as u64);
        args.elem_size = 1;
        let rd = registry::find(Collective::Allreduce, "recursive_doubling").unwrap().prepare(&args).unwrap();
        assert!(fits(&rd, "recursive_doubling"));
        assert!(matches!(form(&rd, "recursive_doubling"), DirectForm::InOrder(_)));
        // Every vector passes through the next rank: 3 × 16 KiB to one peer.
        let ag = registry::find(Collective::Allreduce, "allgather_reduce").unwrap().prepare(&args).unwrap();
        assert!(!fits(&ag, "allgather_reduce"));
        let small = CollArgs { count: MAX_DIRECT as u64 / 4, ..ag.clone() };
        assert!(fits(&small, "allgather_reduce"));
        assert!(!fits(&args, "no_such_algorithm"));
    }

    /// Every registered algorithm's small calls run on the direct path in their straight-line
    /// order (none falls back to the engine for a possible deadlock), rooted ones at every root.
    #[test]
    fn every_algorithm_runs_in_order_on_small_calls() {
        for a in registry::all().filter(|a| !a.coll.is_vector() && a.coll != Collective::ReduceScatter) {
            for p in 1..=9u32 {
                for root in [0, p / 2, p - 1] {
                    let mut args = CollArgs::new(a.coll, 0, p, 5);
                    args.elem_size = 4;
                    args.root = root;
                    let Ok(ready) = a.prepare(&args) else { continue };
                    for rank in 0..p {
                        let mine = CollArgs { rank, ..ready.clone() };
                        let DirectForm::InOrder(order) = form(&mine, a.name) else {
                            panic!("{}:{} p={p} root {root} rank {rank}", a.coll, a.name)
                        };
                        assert_eq!(order.len(), a.schedule(&mine).unwrap().len());
                    }
                }
            }
        }
    }

    /// The defaults keep the direct path: every qualifying call of the embedded decisions fits.
    #[test]
    fn the_default_choices_fit_at_the_direct_limit() {
        let d = crate::select::Decisions::embedded().unwrap();
        for coll in Collective::ALL.into_iter().filter(|c| !c.is_vector() && *c != Collective::ReduceScatter) {
            for p in [2u32, 3, 4, 5, 8, 16, MAX_RANKS] {
                let blocks = match coll {
                    Collective::Gather
                    | Collective::Scatter
                    | Collective::Allgather
                    | Collective::Alltoall
                    | Collective::ReduceScatterBlock => u64::from(p),
                    _ => 1,
                };
                let mut args = CollArgs::new(coll, 0, p, MAX_DIRECT as u64 / blocks);
                args.elem_size = 1;
                assert!(eligible(&args, MAX_DIRECT), "{coll} p={p}");
                let features = crate::select::Features::of(&args).unwrap().on(crate::select::FabricClass::Node);
                let (alg, params) = d.choose(&args, &features).unwrap();
                let chosen = CollArgs { params, ..args.clone() };
                assert!(fits(&alg.prepare(&chosen).unwrap(), alg.name), "{coll}:{} p={p}", alg.name);
            }
        }
    }
}
