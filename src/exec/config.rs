//! Executor settings ([`ExecConfig`], from code or the environment) and byte counters
//! ([`Stats`]) that prove which protocol moved the data and how often it was copied.

use std::time::Duration;

use fabcoll_fabric::shm::mailbox::MAX_MESSAGE;
use fabcoll_fabric::Caps;

use super::proto::MAX_SLOTS;
use crate::error::Result;
use crate::select::FabricClass;

/// Executor settings (per endpoint; all ranks of a job must use the same thresholds).
#[derive(Clone, Debug)]
pub struct ExecConfig {
    /// Messages of at most this many bytes go eager (copied once out of a slot); larger ones go
    /// zero-copy. Capped at `slot_size`.
    pub eager_threshold: usize,
    /// Eager slots per ordered pair of ranks (at most 64); the least when `ring_budget` is set.
    pub slots: usize,
    /// When non-zero, the slots per pair grow from `slots` up to 64 while a rank's p rings
    /// (p · slots · slot_size bytes) fit in this many bytes ([`ExecConfig::slots_for`]): on
    /// network fabrics, where fewer credit messages per small message pay (see
    /// `NETWORK_RING_BUDGET`). `FABCOLL_SLOTS` sets `slots` and turns this off.
    pub ring_budget: usize,
    /// Bytes per eager slot.
    pub slot_size: usize,
    /// The eager limit and slot size instead, on a fabric whose ranks share their CPUs (the
    /// engine's judgement of [`ExecConfig::local_ranks`]), while a rank's rings stay within
    /// `NETWORK_RING_BUDGET`: there a rendezvous waits for its receiver to be scheduled, which
    /// costs more than the second copy (see `CROWDED_EAGER`). 0: `eager_threshold` throughout;
    /// `FABCOLL_EAGER` sets that and turns this off.
    pub crowded_eager: usize,
    /// A receiver returns the slots it freed in one credit message once it holds
    /// `slots / credit_fraction` of them (at least 1): a quarter of the ring on node-local
    /// fabrics, half on network fabrics, where each credit message is a TCP send (see
    /// [`ExecConfig::for_class`]). The sender keeps the rest of the ring meanwhile; a sender with
    /// no free slot falls back to rendezvous, so no value can deadlock.
    pub credit_fraction: usize,
    /// How long a collective may wait for peers before failing with an error naming them.
    pub timeout: Duration,
    /// Registration cache entries for user buffers (0 disables the cache).
    pub mr_cache: usize,
    /// A user buffer used in this many calls (through the registration cache, and again every
    /// this many calls; at once when registered with `Communicator::register`) is hinted to the
    /// fabric as reused (`Endpoint::hint_reused`): on shm, its whole 2 MiB pages are then backed
    /// by transparent huge pages, which peers' `process_vm_writev` copies fill faster. The
    /// collapse costs several copies of the buffer, once per mapping. 0 turns it off.
    /// `FABCOLL_HUGE_PAGES`.
    pub huge_pages_after: u32,
    /// A zero-copy receive of at most this many bytes into memory that the sender would write
    /// with a system call (`Endpoint::writes_by_syscall`: on shm, the program's own memory,
    /// written with `process_vm_writev`) is granted in registered scratch instead, which the
    /// sender writes through its mapping, and copied out on arrival (by a receiver with a CPU of
    /// its own and nothing to send, piece by piece while the sender writes the next): two
    /// `memcpy`s beat the system call's pinning of 4 KiB pages up to about this size
    /// (`docs/measurements/2026-11-29-pipelined-staging.md`). 0 turns it off.
    /// `FABCOLL_STAGED_RECEIVE`.
    pub staged_receive_max: usize,
    /// A zero-copy message of at least this many bytes to a peer that can read this rank's memory
    /// (`Endpoint::reads_from`: shm) is copied by both ranks at once: the sender writes its first
    /// half and offers the rest, which the receiver, waiting for it anyway, reads (`exec::op`). 0
    /// turns it off. `FABCOLL_SHARED_COPY`.
    pub shared_copy_min: usize,
    /// A zero-copy message of at least this many bytes to a peer that can read this rank's memory
    /// (`Endpoint::reads_from`: shm), whose Recv only feeds a Reduce (`Plan::fuse`), is not copied
    /// at all: the receiver asks for it whole, and its Reduce reads the sender's buffer
    /// (`Endpoint::read_with`, a load through a mapping or a system call into a cached piece) —
    /// mamidala-2008 §4's reductions straight out of the peers' buffers. The sender offers it
    /// only when nothing after its Send waits for that buffer, or only Recvs do (in place) and
    /// the whole job completes with them waiting (`fabcoll_collectives::lending`), and not when
    /// the receiver would read it with a system call (the program's own memory on shm) up to
    /// [`ExecConfig::staged_receive_max`], where it writes the grant instead.
    /// 0 turns it off. `FABCOLL_PULL_REDUCE`.
    pub pull_reduce_min: usize,
    /// Use at most this many immediate bits even if the backend carries more (tests the narrow
    /// layouts of verbs-like backends on any backend). All ranks must agree.
    pub imm_bits: u32,
    /// How long a waiting rank polls without blocking on a load/store fabric (shm, local; it
    /// then sleeps on the fabric's doorbell, which costs a wake-up when the message comes). Ofi
    /// endpoints block after a few polls. `FABCOLL_SPIN_US`.
    pub spin: Duration,
    /// Ranks of the job on this node (`None`: every rank of an shm/local endpoint, else 1). When
    /// they outnumber the cores, waiting ranks yield the core almost at once (after 2 polls in a
    /// row that brought nothing), like Open MPI's `mpi_yield_when_idle` — unless every rank they
    /// wait for runs on another CPU (then they spin up to 64 polls). Otherwise a waiting rank
    /// never yields (`exec::wait`).
    pub local_ranks: Option<usize>,
    /// Forces that oversubscribed wait policy on or off (`FABCOLL_YIELD=1`/`0`); `None` = decide
    /// from `local_ranks` and `local_cpus`.
    pub yield_when_idle: Option<bool>,
    /// CPUs this node's ranks share (`FABCOLL_LOCAL_CPUS`, which `fabrun` sets when it pins
    /// ranks; a communicator that joins through the store sets the union of its machine's ranks'
    /// CPU sets, `fabcoll_fabric::bootstrap::Seat`); `None` = this process's own CPU set. A
    /// launcher that pins every rank to one CPU leaves each process a set of one, which alone
    /// would call any 2-rank job oversubscribed.
    pub local_cpus: Option<usize>,
    /// Blocking collectives whose buffers are at most this many bytes (the largest buffer of
    /// any rank; v-variants never) run on load/store fabrics through per-communicator
    /// shared-memory mailboxes instead of the engine (`exec::mailboxes`). 0 turns it off; at most
    /// `shm::mailbox::MAX_MESSAGE`. `FABCOLL_MAILBOX`.
    pub mailbox_limit: usize,
    /// Blocking calls whose every message goes eager, and nonblocking ones made of eager Sends
    /// that complete on return, run straight inside the call's start, without an op, handed over
    /// to the engine when they cannot go on (`exec::ring`). `FABCOLL_STRAIGHT=0` turns it off.
    pub straight: bool,
    /// A progress thread per engine moves nonblocking collectives while the program computes
    /// (`exec::progress`). `FABCOLL_PROGRESS=0` turns it off: requests then move only when tested
    /// or waited for.
    pub progress_thread: bool,
}

/// Defaults for node-local fabrics. The eager limit and slot size are `NODE_EAGER` (see there
/// for the measurements); 16 slots keep the rings at p·16·8 KiB per rank.
impl Default for ExecConfig {
    fn default() -> ExecConfig {
        ExecConfig {
            eager_threshold: NODE_EAGER,
            slots: 16,
            ring_budget: 0,
            slot_size: NODE_EAGER,
            crowded_eager: CROWDED_EAGER,
            credit_fraction: 4,
            timeout: Duration::from_secs(60),
            mr_cache: 64,
            huge_pages_after: DEFAULT_HUGE_PAGES_AFTER,
            staged_receive_max: DEFAULT_STAGED_RECEIVE,
            shared_copy_min: DEFAULT_SHARED_COPY,
            pull_reduce_min: DEFAULT_PULL_REDUCE,
            imm_bits: 64,
            spin: Duration::from_micros(250),
            local_ranks: None,
            yield_when_idle: None,
            local_cpus: None,
            mailbox_limit: DEFAULT_MAILBOX,
            straight: true,
            progress_thread: true,
        }
    }
}

/// Default of [`ExecConfig::huge_pages_after`]: a buffer used this often is likely used many
/// times more, over which the collapse pays (`docs/measurements/2026-11-29-huge-pages.md`).
pub const DEFAULT_HUGE_PAGES_AFTER: u32 = 8;

/// Default of [`ExecConfig::staged_receive_max`]
/// (`docs/measurements/2026-11-29-copy-distance.md`).
pub const DEFAULT_STAGED_RECEIVE: usize = 1 << 20;

/// Default of [`ExecConfig::shared_copy_min`].
pub const DEFAULT_SHARED_COPY: usize = 256 << 10;

/// Default of [`ExecConfig::pull_reduce_min`].
pub const DEFAULT_PULL_REDUCE: usize = 64 << 10;

/// Default mailbox limit (see [`ExecConfig::mailbox_limit`]).
pub const DEFAULT_MAILBOX: usize = 16384;

/// Eager limit and slot size on node-local fabrics (shm, local). An eager message is copied
/// twice (into the peer's slot, then out of it), a zero-copy one once after a grant's round trip;
/// above 8 KiB the second copy costs more than the round trip
/// (`docs/measurements/2026-11-27-executor.md`).
pub const NODE_EAGER: usize = 8192;

/// Eager limit and slot size on node-local fabrics whose ranks outnumber the CPUs
/// ([`ExecConfig::crowded_eager`]): a zero-copy message's grant is answered only once the
/// receiver runs again, so eager pays up to 64 KiB there
/// (`docs/measurements/2026-11-30-crowded-eager.md`).
pub const CROWDED_EAGER: usize = 65536;

/// Eager limit and slot size on network fabrics ([`FabricClass::Network`]). A zero-copy message
/// pays a rendezvous round trip (grant, then write) that costs more than copying 64 KiB there.
pub const NETWORK_EAGER: usize = 65536;

/// Ring memory per rank on network fabrics ([`ExecConfig::ring_budget`]): 64 slots per pair up
/// to p = 4 with 64 KiB slots, 32 at p = 8, the 16-slot minimum from p = 16 on (p MiB). Every
/// credit message costs both ranks a TCP send and receive; with 64 slots a receiver returns
/// credits every 32 messages instead of every 8.
pub const NETWORK_RING_BUDGET: usize = 16 << 20;

impl ExecConfig {
    /// The defaults for a fabric of class `class`: [`ExecConfig::default`] on node-local fabrics;
    /// on network fabrics a `NETWORK_EAGER` eager limit and slot size, 16 to 64 slots per pair
    /// (as many as fit `NETWORK_RING_BUDGET`), and credits returned every half ring instead of
    /// every quarter, since each credit message costs both ranks a TCP send and receive.
    pub fn for_class(class: FabricClass) -> ExecConfig {
        match class {
            FabricClass::Node => ExecConfig::default(),
            FabricClass::Network => ExecConfig {
                eager_threshold: NETWORK_EAGER,
                slot_size: NETWORK_EAGER,
                crowded_eager: 0,
                ring_budget: NETWORK_RING_BUDGET,
                credit_fraction: 2,
                ..ExecConfig::default()
            },
        }
    }

    /// Eager slots per pair for a job of `p` ranks with slots of `slot_size` bytes: `slots`, or
    /// with a [`ExecConfig::ring_budget`] as many as fit it, between `slots` and 64.
    pub fn slots_for(&self, p: usize, slot_size: usize) -> usize {
        if self.ring_budget == 0 || p < 2 || slot_size == 0 {
            return self.slots;
        }
        (self.ring_budget / (p * slot_size)).clamp(self.slots.min(MAX_SLOTS), MAX_SLOTS)
    }

    /// [`ExecConfig::for_class`] of an endpoint ([`FabricClass::of`] its capabilities).
    pub fn for_fabric(caps: &Caps) -> ExecConfig {
        ExecConfig::for_class(FabricClass::of(caps))
    }

    /// [`ExecConfig::default`] overridden by the environment (see [`ExecConfig::env_over`]).
    pub fn from_env() -> Result<ExecConfig> {
        ExecConfig::default().env_over()
    }

    /// The defaults of an endpoint's fabric ([`ExecConfig::for_fabric`]) overridden by the
    /// environment (see [`ExecConfig::env_over`]).
    pub fn from_env_for(caps: &Caps) -> Result<ExecConfig> {
        ExecConfig::for_fabric(caps).env_over()
    }

    /// These settings overridden by the executor's knobs ([`fabcoll_fabric::settings`]: installed,
    /// else the environment's): `FABCOLL_EAGER` (raises the slot size to fit; no crowded limit),
    /// `FABCOLL_SLOTS`, `FABCOLL_TIMEOUT`, `FABCOLL_MR_CACHE`, `FABCOLL_HUGE_PAGES`,
    /// `FABCOLL_STAGED_RECEIVE`, `FABCOLL_SHARED_COPY`, `FABCOLL_PULL_REDUCE`, `FABCOLL_SPIN_US`,
    /// `FABCOLL_YIELD`, `FABCOLL_LOCAL_CPUS`, `FABCOLL_MAILBOX` and `FABCOLL_STRAIGHT`.
    pub fn env_over(self) -> Result<ExecConfig> {
        use fabcoll_fabric::settings as s;
        let mut c = self;
        if let Some(v) = s::FABCOLL_EAGER.get()? {
            c.eager_threshold = v;
            c.slot_size = c.slot_size.max(c.eager_threshold);
            c.crowded_eager = 0;
        }
        if let Some(v) = s::FABCOLL_SLOTS.get()? {
            c.slots = v;
            c.ring_budget = 0;
        }
        if let Some(v) = s::FABCOLL_TIMEOUT.get()? {
            c.timeout = v.max(Duration::from_millis(1));
        }
        if let Some(v) = s::FABCOLL_MR_CACHE.get()? {
            c.mr_cache = v;
        }
        if let Some(v) = s::FABCOLL_HUGE_PAGES.get()? {
            c.huge_pages_after = u32::try_from(v).unwrap_or(u32::MAX);
        }
        if let Some(v) = s::FABCOLL_STAGED_RECEIVE.get()? {
            c.staged_receive_max = v;
        }
        if let Some(v) = s::FABCOLL_SHARED_COPY.get()? {
            c.shared_copy_min = v;
        }
        if let Some(v) = s::FABCOLL_PULL_REDUCE.get()? {
            c.pull_reduce_min = v;
        }
        if let Some(v) = s::FABCOLL_SPIN_US.get()? {
            c.spin = v;
        }
        if let Some(v) = s::FABCOLL_YIELD.get()? {
            c.yield_when_idle = Some(v);
        }
        if let Some(v) = s::FABCOLL_LOCAL_CPUS.get()? {
            c.local_cpus = Some(v.max(1));
        }
        if let Some(v) = s::FABCOLL_MAILBOX.get()? {
            c.mailbox_limit = v.min(MAX_MESSAGE);
        }
        if let Some(v) = s::FABCOLL_STRAIGHT.get()? {
            c.straight = v;
        }
        if let Some(v) = s::FABCOLL_PROGRESS.get()? {
            c.progress_thread = v;
        }
        Ok(c)
    }
}

/// Byte counters of one engine (all communicators on its endpoint).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages and bytes sent eagerly (into a slot at the receiver).
    pub eager_msgs: u64,
    pub eager_bytes: u64,
    /// Bytes this rank copied out of eager slots: the transport copy of the eager path.
    pub eager_copy_bytes: u64,
    /// Bytes reduced straight out of eager slots (a Reduce fused with its Recv: no copy).
    pub eager_fused_bytes: u64,
    /// Messages and bytes written zero-copy into granted destinations.
    pub zcopy_msgs: u64,
    pub zcopy_bytes: u64,
    /// Bytes the zero-copy path copied: out of the scratch a staged receive was granted in
    /// ([`ExecConfig::staged_receive_max`]); otherwise that path does not copy, and tests prove
    /// this stays 0 (every executor copy adds to a counter).
    pub zcopy_copy_bytes: u64,
    /// Bytes of zero-copy messages this rank read from its peers' memory: the tails their senders
    /// offered ([`ExecConfig::shared_copy_min`]), the one copy of those bytes.
    pub zcopy_read_bytes: u64,
    /// Messages this rank offered whole to be reduced out of its buffer, and bytes it reduced
    /// straight out of its peers' buffers ([`ExecConfig::pull_reduce_min`]): never copied.
    pub pulled_msgs: u64,
    pub pulled_bytes: u64,
    /// Rendezvous requests sent (eager message without a free slot) and grants sent.
    pub rts_msgs: u64,
    pub grants: u64,
    /// Calls the straight-line runner started on the eager rings, without an op (`exec::ring`),
    /// and those of them an op took over halfway (a rendezvous, a long wait, an error).
    pub straight_calls: u64,
    pub handovers: u64,
    /// Eager writes of straight calls whose completion was there as soon as they were posted
    /// (`Endpoint::write_settled`): no completion to wait for.
    pub settled_writes: u64,
    /// Bytes moved by the algorithms' own Copy steps (not transport copies) and Reduce steps.
    pub local_copy_bytes: u64,
    pub reduce_bytes: u64,
    /// Mailbox calls (`exec::mailboxes`): messages and bytes stored into peers' mailboxes, bytes
    /// copied out of records (their one copy) and bytes reduced straight out of them.
    pub mailbox_msgs: u64,
    pub mailbox_bytes: u64,
    pub mailbox_copy_bytes: u64,
    pub mailbox_fused_bytes: u64,
    /// MR cache: registrations made and lookups served from the cache.
    pub registrations: u64,
    pub cache_hits: u64,
    /// Writes and control messages, and their bytes, that the endpoint sent per route class on a
    /// routed endpoint (`fabric::routes`): to peers on this node, and over the network. 0 on a
    /// single fabric.
    pub node_route_msgs: u64,
    pub node_route_bytes: u64,
    pub network_route_msgs: u64,
    pub network_route_bytes: u64,
    /// Times the progress thread woke to move the ops nonblocking calls left in flight
    /// (`exec::progress`): none while the program waits for each call soon after starting it.
    pub progress_wakeups: u64,
}

/// `Stats::counters` and `Stats::since` over the one list of counters.
macro_rules! stats_counters {
    ($($f:ident),* $(,)?) => {
        impl Stats {
            /// Every counter with its name, in declaration order (for reports).
            pub fn counters(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($f), self.$f)),*]
            }

            /// What was counted after `earlier`, a snapshot of the same engine taken before
            /// (e.g. around one phase of a program).
            pub fn since(&self, earlier: &Stats) -> Stats {
                Stats { $($f: self.$f.saturating_sub(earlier.$f)),* }
            }

            /// Adds `other`'s counts to these.
            pub(crate) fn add(&mut self, other: &Stats) {
                $(self.$f += other.$f;)*
            }
        }
    };
}

stats_counters!(
    eager_msgs,
    eager_bytes,
    eager_copy_bytes,
    eager_fused_bytes,
    zcopy_msgs,
    zcopy_bytes,
    zcopy_copy_bytes,
    zcopy_read_bytes,
    pulled_msgs,
    pulled_bytes,
    rts_msgs,
    grants,
    straight_calls,
    handovers,
    settled_writes,
    local_copy_bytes,
    reduce_bytes,
    mailbox_msgs,
    mailbox_bytes,
    mailbox_copy_bytes,
    mailbox_fused_bytes,
    registrations,
    cache_hits,
    node_route_msgs,
    node_route_bytes,
    network_route_msgs,
    network_route_bytes,
    progress_wakeups,
);

impl Stats {
    /// All bytes copied by the transport paths (eager, zero-copy, mailboxes).
    pub fn transport_copy_bytes(&self) -> u64 {
        self.eager_copy_bytes + self.zcopy_copy_bytes + self.mailbox_copy_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_fabrics_get_a_larger_eager_limit_and_fewer_credit_messages() {
        let node = ExecConfig::for_class(FabricClass::Node);
        let net = ExecConfig::for_class(FabricClass::Network);
        assert_eq!((node.eager_threshold, node.slot_size, node.slots), (8192, 8192, 16));
        assert_eq!((net.eager_threshold, net.slot_size, net.slots), (NETWORK_EAGER, NETWORK_EAGER, 16));
        assert_eq!((node.credit_fraction, net.credit_fraction), (4, 2), "credits every quarter / half ring");
        assert!(net.eager_threshold <= net.slot_size, "the eager limit is capped at the slot size");
        // Everything but the eager ring is the same.
        assert_eq!((net.timeout, net.mr_cache, net.spin), (node.timeout, node.mr_cache, node.spin));
    }

    #[test]
    fn stats_since_counts_every_counter_and_lists_them_all() {
        let earlier = Stats { eager_msgs: 3, rts_msgs: 1, cache_hits: 7, ..Stats::default() };
        let later = Stats { eager_msgs: 10, rts_msgs: 1, cache_hits: 9, mailbox_bytes: 64, ..Stats::default() };
        let d = later.since(&earlier);
        assert_eq!(d, Stats { eager_msgs: 7, cache_hits: 2, mailbox_bytes: 64, ..Stats::default() });
        assert_eq!(earlier.since(&later).eager_msgs, 0, "a later snapshot never gives negative counts");
        // Every field is listed (a new counter left out of the list would not compile in `since`,
        // whose struct literal names every field).
        let names: Vec<&str> = d.counters().iter().map(|&(n, _)| n).collect();
        assert_eq!(names.len(), 28);
        assert_eq!((names[0], names[22]), ("eager_msgs", "cache_hits"));
        let nonzero: Vec<(&str, u64)> = d.counters().into_iter().filter(|&(_, v)| v > 0).collect();
        assert_eq!(nonzero, [("eager_msgs", 7), ("mailbox_bytes", 64), ("cache_hits", 2)]);
    }

    #[test]
    fn network_rings_grow_to_64_slots_within_the_budget() {
        let node = ExecConfig::for_class(FabricClass::Node);
        let net = ExecConfig::for_class(FabricClass::Network);
        let e = NETWORK_EAGER;
        let by_p: Vec<usize> = [1, 2, 4, 5, 8, 16, 64].iter().map(|&p| net.slots_for(p, e)).collect();
        assert_eq!(by_p, [16, 64, 64, 51, 32, 16, 16], "16 MiB of rings, 16 to 64 slots per pair");
        assert!([2, 4, 8].iter().all(|&p| p * net.slots_for(p, e) * e <= NETWORK_RING_BUDGET));
        assert_eq!(node.slots_for(2, node.slot_size), 16, "node-local fabrics: fixed rings");
        assert_eq!(net.slots_for(2, 1 << 30), 16, "never fewer than `slots`");
        let fixed = ExecConfig { slots: 8, ring_budget: 0, ..net.clone() };
        assert_eq!(fixed.slots_for(2, e), 8, "FABCOLL_SLOTS clears the budget");
        let many = ExecConfig { slots: 100, ..net };
        assert_eq!(many.slots_for(2, e), MAX_SLOTS, "at most 64 (the credit mask)");
    }
}
