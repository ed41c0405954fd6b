//! Prepared calls and where they run. Preparing a call — selecting its algorithm (rule scan,
//! restriction checks), building its schedule and compiling its plan, deciding the lanes it may
//! take — costs more than a small collective itself, and applications repeat the same calls. So a
//! communicator remembers each call it prepared, keyed by the call as the user made it (its
//! arguments and options), in one [`Memo`]; the memo is cleared in one place when the decisions
//! change (`Communicator::set_decisions`), and not used while the cost model selects (its
//! choices can change from call to call).
//!
//! [`Prepared::path`] is the one place that decides how a call runs.

use std::sync::Arc;

use fabcoll_collectives::{lending, registry, CollArgs, Collective, Params, Topology};

use super::call::fnv;
use crate::exec::mailboxes;
use crate::exec::plan::Plan;

/// Calls (and transfers) remembered per communicator.
pub(crate) const CAPACITY: usize = 32;

/// Largest communicator whose calls may take the mailboxes (they take p · 64 KiB per rank).
pub(crate) const MAILBOX_RANKS: u32 = 64;

/// Largest communicator on which a call checks whether lending the Sends that only Recvs wait
/// for keeps the whole job deadlock-free (`fabcoll_collectives::lending`): the check replays every
/// rank's schedule once per prepared call.
const LENDING_CHECK_MAX_P: u32 = 64;

/// A call as made: its arguments before selection and its options (forced algorithm, parameters).
#[derive(Debug)]
pub(crate) struct CallKey {
    call: CollArgs,
    algorithm: Option<String>,
    params: Params,
}

impl CallKey {
    pub fn new(call: &CollArgs, algorithm: Option<&str>, params: &Params) -> CallKey {
        CallKey { call: call.clone(), algorithm: algorithm.map(str::to_owned), params: params.clone() }
    }

    /// Whether this is the call `call` with these options. The fields that tell calls apart are
    /// compared first; the pattern names them all, so that a field added to `CollArgs` is not
    /// forgotten here.
    #[inline]
    pub fn is(&self, call: &CollArgs, algorithm: Option<&str>, params: &Params) -> bool {
        let CollArgs {
            coll,
            rank,
            size,
            root,
            count,
            counts,
            displs,
            rdispls,
            commutative,
            in_place,
            elem_size,
            params: call_params,
            topology,
        } = &self.call;
        *count == call.count
            && *coll == call.coll
            && *root == call.root
            && *elem_size == call.elem_size
            && *in_place == call.in_place
            && *commutative == call.commutative
            && *rank == call.rank
            && *size == call.size
            && *counts == call.counts
            && *displs == call.displs
            && *rdispls == call.rdispls
            && *call_params == call.params
            && same_topology(topology, &call.topology)
            && self.params == *params
            && self.algorithm.as_deref() == algorithm
    }
}

/// Whether two calls' topologies are the same: the communicator's own (one `Arc`) without
/// comparing its contents.
#[inline]
fn same_topology(a: &Option<Arc<Topology>>, b: &Option<Arc<Topology>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
        _ => false,
    }
}

/// How a call runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// Straight through the communicator's node-local mailboxes, outside the engine.
    Mailbox,
    /// Straight over the engine's eager rings, handed to an op if it cannot go on.
    Straight,
    /// As an op of the engine.
    Engine,
}

/// What the engine offers the lanes, fixed when the communicator is made.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Lanes {
    /// Calls whose largest buffer is at most this many bytes may take the mailboxes (0: none).
    pub mailbox_limit: usize,
    /// Messages up to this many bytes go eager.
    pub eager_limit: usize,
    /// Writes up to this many bytes complete on return.
    pub inline_completion: usize,
    /// Straight calls on the rings are on.
    pub straight: bool,
    /// Messages of at least this many bytes may be pulled into their receiver's reduction
    /// (`ExecConfig::pull_reduce_min`; 0: no peer reads this rank's buffers).
    pub pull_reduce_min: usize,
}

/// A call prepared: its algorithm, the arguments it runs with, its plan and the lanes it fits.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub alg: &'static str,
    /// A hash of what every rank's call must agree on (see [`agreed_hash`]).
    pub agreed: u64,
    pub args: Arc<CollArgs>,
    pub plan: Arc<Plan>,
    /// A blocking call may run on the mailboxes.
    mailbox: bool,
    /// A blocking call may run straight on the rings: every message goes eager.
    straight: bool,
    /// A nonblocking call may run straight too: its steps are Sends that complete on return.
    straight_nonblocking: bool,
}

impl Prepared {
    /// Prepares the plan of `alg` for `args` (the arguments it runs with, parameters resolved).
    pub fn new(alg: &'static str, args: CollArgs, mut plan: Plan, lanes: &Lanes) -> Prepared {
        let bytes = plan.max_message.saturating_mul(u64::from(args.elem_size));
        if lanes.pull_reduce_min > 0 && bytes >= lanes.pull_reduce_min as u64 && plan.has_waited_sends() {
            let job_ok = registry::find(args.coll, alg)
                .is_ok_and(|a| lending::lending_job_completes(a, &args, LENDING_CHECK_MAX_P));
            if job_ok {
                plan.lend_waited();
            }
        }
        let straight = lanes.straight && bytes <= lanes.eager_limit as u64;
        let straight_nonblocking = straight && plan.sends_only && bytes <= lanes.inline_completion as u64;
        let mailbox = fits_mailboxes(&args, lanes.mailbox_limit) && mailboxes::fits(&args, alg);
        let agreed = agreed_hash(alg, &args);
        Prepared { alg, agreed, args: Arc::new(args), plan: Arc::new(plan), mailbox, straight, straight_nonblocking }
    }

    /// How this call runs: `blocking` or not, in checked mode or not (checked calls exchange
    /// their signatures through the engine first).
    #[inline]
    pub fn path(&self, blocking: bool, checked: bool) -> Path {
        match (checked, blocking) {
            (true, _) => Path::Engine,
            (false, true) if self.mailbox => Path::Mailbox,
            (false, true) if self.straight => Path::Straight,
            (false, false) if self.straight_nonblocking => Path::Straight,
            _ => Path::Engine,
        }
    }
}

/// A hash of what every rank's call must agree on: the operation, the communicator's size, the
/// root of a rooted one, the count or counts, the element size, the algorithm and its parameters
/// (not this rank's own: its rank, displacements, whether it is in place). The call's signature
/// (`Call::sig`) adds the element type and the reduction.
fn agreed_hash(alg: &str, args: &CollArgs) -> u64 {
    let root = if args.coll.is_rooted() { args.root } else { 0 };
    let counts = args.counts.iter().flat_map(|c| c.iter().copied());
    let params = args.params.iter().flat_map(|(k, v)| k.bytes().map(u64::from).chain([v]));
    let head = [args.coll as u64, u64::from(args.size), u64::from(root), args.count, u64::from(args.elem_size)];
    fnv(head.into_iter().chain(counts).chain(alg.bytes().map(u64::from)).chain(params))
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

/// Whether a call with these arguments (parameters resolved) is small enough for the mailboxes:
/// the same on every rank (the largest buffer of any rank, not this rank's), messages kept whole
/// (no `segment` below the buffer's length), at most [`MAILBOX_RANKS`] ranks.
fn fits_mailboxes(args: &CollArgs, limit: usize) -> bool {
    let Some(n) = largest_buffer(args) else { return false };
    let whole = args.params.get("segment").is_none_or(|seg| seg == 0 || seg >= n);
    limit > 0
        && args.size <= MAILBOX_RANKS
        && whole
        && n.checked_mul(u64::from(args.elem_size)).is_some_and(|b| b <= limit as u64)
}

/// Remembered values of a communicator, most recently used first, at most [`CAPACITY`]: its
/// prepared calls (`Memo<CallKey, Arc<Prepared>>`, found with [`CallKey::is`]) and its prepared
/// transfers (`comm::p2p`).
#[derive(Debug)]
pub(crate) struct Memo<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Memo { entries: Vec::new() }
    }
}

impl<K, V> Memo<K, V> {
    /// The value remembered under the key `is` picks, now the most recently used.
    #[inline]
    pub fn find(&mut self, is: impl Fn(&K) -> bool) -> Option<&V> {
        let i = self.entries.iter().position(|(k, _)| is(k))?;
        if i > 0 {
            self.entries[..=i].rotate_right(1);
        }
        self.entries.first().map(|(_, v)| v)
    }

    /// Remembers a value, forgetting the least recently used one when full.
    pub fn insert(&mut self, key: K, value: V) {
        if self.entries.len() >= CAPACITY {
            self.entries.pop();
        }
        self.entries.insert(0, (key, value));
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LANES: Lanes = Lanes {
        mailbox_limit: 16384,
        eager_limit: 8192,
        inline_completion: usize::MAX,
        straight: true,
        pull_reduce_min: 0,
    };

    fn prepared(coll: Collective, alg: &str, rank: u32, p: u32, count: u64, lanes: &Lanes) -> Prepared {
        let mut a = CollArgs::new(coll, rank, p, count);
        a.elem_size = 4;
        let a = registry::find(coll, alg).unwrap().prepare(&a).unwrap();
        let plan = Plan::new(registry::find(coll, alg).unwrap().schedule(&a).unwrap());
        Prepared::new(registry::find(coll, alg).unwrap().name, a, plan, lanes)
    }

    #[test]
    fn the_path_follows_size_blocking_and_checked_mode() {
        let small = prepared(Collective::Allreduce, "recursive_doubling", 0, 4, 16, &LANES);
        assert_eq!(small.path(true, false), Path::Mailbox);
        assert_eq!(small.path(false, false), Path::Engine, "a nonblocking allreduce waits: an op");
        assert_eq!(small.path(true, true), Path::Engine, "checked mode: always an op");
        let no_mailbox = Lanes { mailbox_limit: 0, ..LANES };
        let ring = prepared(Collective::Allreduce, "recursive_doubling", 0, 4, 16, &no_mailbox);
        assert_eq!(ring.path(true, false), Path::Straight);
        let large = prepared(Collective::Allreduce, "recursive_doubling", 0, 4, 8192, &LANES);
        assert_eq!(large.path(true, false), Path::Engine, "32 KiB messages go zero-copy");
        let root = prepared(Collective::Bcast, "binomial", 0, 4, 16, &no_mailbox);
        assert_eq!(root.path(false, false), Path::Straight, "a nonblocking bcast root only sends");
        let leaf = prepared(Collective::Bcast, "binomial", 1, 4, 16, &no_mailbox);
        assert_eq!(leaf.path(false, false), Path::Engine);
        let off = Lanes { straight: false, mailbox_limit: 0, ..LANES };
        assert_eq!(prepared(Collective::Bcast, "binomial", 0, 4, 16, &off).path(true, false), Path::Engine);
    }

    #[test]
    fn only_small_fixed_size_unsegmented_calls_fit_the_mailboxes() {
        let mut a = CollArgs::new(Collective::Allreduce, 0, 4, 512);
        a.elem_size = 8;
        assert!(fits_mailboxes(&a, 4096));
        assert!(!fits_mailboxes(&a, 4095));
        assert!(!fits_mailboxes(&a, 0));
        let mut g = CollArgs::new(Collective::Allgather, 1, 4, 256);
        g.elem_size = 4;
        assert!(fits_mailboxes(&g, 4096), "the receive buffer holds p blocks");
        g.count = 257;
        assert!(!fits_mailboxes(&g, 4096));
        let mut v = CollArgs::new(Collective::Allgatherv, 1, 2, 1);
        v.counts = Some(vec![1, 1].into());
        assert!(!fits_mailboxes(&v, 4096), "v-variants never");
        assert!(!fits_mailboxes(&CollArgs::new(Collective::Bcast, 0, MAILBOX_RANKS + 1, 1), 4096));
        let mut seg = a.clone();
        seg.params.set("segment", 100);
        assert!(!fits_mailboxes(&seg, 4096));
        seg.params.set("segment", 512);
        assert!(fits_mailboxes(&seg, 4096));
        seg.params.set("segment", 0);
        assert!(fits_mailboxes(&seg, 4096), "0 = no segmentation");
    }

    /// A call whose buffers fit the mailboxes but whose schedule sends a larger message (Bruck's
    /// allgather inside `allgather_reduce` sends two blocks in one message at p = 5) goes to the
    /// engine; on the mailboxes it failed on every rank with a message above a record (found by
    /// `tests/stress_procs.rs` at p = 5; docs/fuzzing.md).
    #[test]
    fn a_schedule_with_a_message_above_a_record_stays_off_the_mailboxes() {
        let mut a = CollArgs::new(Collective::Allreduce, 0, 5, 1909);
        a.elem_size = 8;
        assert!(fits_mailboxes(&a, 16384), "the buffers fit");
        let alg = registry::find(Collective::Allreduce, "allgather_reduce").unwrap();
        let ready = alg.prepare(&a).unwrap();
        assert!(!mailboxes::fits(&ready, alg.name));
        let plan = Plan::new(alg.schedule(&ready).unwrap());
        assert_ne!(Prepared::new(alg.name, ready, plan, &LANES).path(true, false), Path::Mailbox);
    }

    /// Every registered algorithm's small calls fit the mailboxes (none falls back to the engine
    /// for a possible deadlock), rooted ones at every root.
    #[test]
    fn every_algorithm_fits_the_mailboxes_on_small_calls() {
        for a in registry::all().filter(|a| !a.coll.is_vector() && a.coll != Collective::ReduceScatter) {
            for p in 1..=9u32 {
                for root in [0, p / 2, p - 1] {
                    let mut args = CollArgs::new(a.coll, 0, p, 5);
                    args.elem_size = 4;
                    args.root = root;
                    let Ok(ready) = a.prepare(&args) else { continue };
                    assert!(mailboxes::fits(&ready, a.name), "{}:{} p={p} root {root}", a.coll, a.name);
                }
            }
        }
    }

    /// In place, shmem_cyclic's Sends of contributions are waited for by the Recvs of the reduced
    /// blocks: lent only where peers may pull messages that large, once the job check passed.
    #[test]
    fn waited_sends_are_lent_only_where_pulls_may_happen() {
        let pulling = Lanes { pull_reduce_min: 64 << 10, ..LANES };
        let lends = |count: u64, lanes: &Lanes| {
            let mut a = CollArgs::new(Collective::Allreduce, 1, 4, count);
            a.elem_size = 4;
            a.in_place = true;
            let alg = registry::find(Collective::Allreduce, "shmem_cyclic").unwrap();
            let plan = Plan::new(alg.schedule(&a).unwrap());
            assert!(plan.has_waited_sends());
            Prepared::new(alg.name, a, plan, lanes).plan.lends_waited
        };
        assert!(lends(4 * 65_536, &pulling), "256 KiB blocks");
        assert!(!lends(4 * 1024, &pulling), "4 KiB blocks are never pulled");
        assert!(!lends(4 * 65_536, &LANES), "no peer reads this rank's buffers");
    }

    #[test]
    fn plans_that_send_more_than_half_an_inbox_to_a_peer_do_not_fit() {
        let max = fabcoll_fabric::shm::mailbox::MAX_MESSAGE as u64;
        let mut args = CollArgs::new(Collective::Allreduce, 0, 4, max);
        args.elem_size = 1;
        let rd = registry::find(Collective::Allreduce, "recursive_doubling").unwrap().prepare(&args).unwrap();
        assert!(mailboxes::fits(&rd, "recursive_doubling"));
        // Every vector passes through the next rank: 3 × 16 KiB to one peer.
        let ag = registry::find(Collective::Allreduce, "allgather_reduce").unwrap().prepare(&args).unwrap();
        assert!(!mailboxes::fits(&ag, "allgather_reduce"));
        assert!(mailboxes::fits(&CollArgs { count: max / 4, ..ag.clone() }, "allgather_reduce"));
        assert!(!mailboxes::fits(&args, "no_such_algorithm"));
    }

    /// The defaults keep the mailboxes: every qualifying call of the embedded decisions fits.
    #[test]
    fn the_default_choices_fit_at_the_mailbox_limit() {
        let max = fabcoll_fabric::shm::mailbox::MAX_MESSAGE as u64;
        let d = crate::select::Decisions::embedded().unwrap();
        for coll in Collective::ALL.into_iter().filter(|c| !c.is_vector() && *c != Collective::ReduceScatter) {
            for p in [2u32, 3, 4, 5, 8, 16, MAILBOX_RANKS] {
                let blocks = match coll {
                    Collective::Gather
                    | Collective::Scatter
                    | Collective::Allgather
                    | Collective::Alltoall
                    | Collective::ReduceScatterBlock => u64::from(p),
                    _ => 1,
                };
                let mut args = CollArgs::new(coll, 0, p, max / blocks);
                args.elem_size = 1;
                let features = crate::select::Features::of(&args).unwrap().on(crate::select::FabricClass::Node);
                let (alg, params) = d.choose(&args, &features).unwrap();
                let chosen = alg.prepare(&CollArgs { params, ..args.clone() }).unwrap();
                assert!(fits_mailboxes(&chosen, max as usize), "{coll}:{} p={p}", alg.name);
                assert!(mailboxes::fits(&chosen, alg.name), "{coll}:{} p={p}", alg.name);
            }
        }
    }

    #[test]
    fn the_memo_finds_calls_by_arguments_and_options_and_forgets_them() {
        let mut m = Memo::default();
        let call = CollArgs::new(Collective::Allreduce, 0, 4, 8);
        let none = Params::default();
        assert!(m.find(|k: &CallKey| k.is(&call, None, &none)).is_none());
        let p = Arc::new(prepared(Collective::Allreduce, "recursive_doubling", 0, 4, 8, &LANES));
        m.insert(CallKey::new(&call, None, &none), p.clone());
        assert!(Arc::ptr_eq(m.find(|k| k.is(&call, None, &none)).expect("remembered"), &p));
        assert!(m.find(|k| k.is(&call, Some("ring"), &none)).is_none(), "other forced algorithm");
        let seg = Params::default().with("segment", 2);
        assert!(m.find(|k| k.is(&call, None, &seg)).is_none(), "other parameters");
        for n in 0..2 * CAPACITY as u64 {
            let mut a = call.clone();
            a.count = 100 + n;
            m.insert(CallKey::new(&a, None, &none), p.clone());
        }
        assert!(m.find(|k| k.is(&call, None, &none)).is_none(), "least recently used call forgotten");
        assert_eq!(m.entries.len(), CAPACITY);
        m.clear();
        assert!(m.entries.is_empty());
    }
}
