//! Replays a job's schedules in virtual time on a modelled network and reports the time, the
//! α–β–γ terms of the critical path and the traffic of the busiest rank.
//!
//! # Model
//!
//! Parameters are [`ModelParams`]: the papers' [`Machine`] (α, β, γ, f_α, f_β) and what extends
//! it (each off by default):
//!
//! - **Message.** A message of n bytes (`len × elem_size`) costs `α + n·β` on its own. Its
//!   transfer occupies the sender's *send port* and the receiver's *receive port* for that time
//!   (single-port, full-duplex nodes: one message out and one message in at a time, thakur §3).
//! - **Bidirectional factors.** A transfer that starts while its sender is also receiving, or its
//!   receiver is also sending (a transfer into the sender, or out of the receiver, is in progress
//!   or starts at the same instant), costs `f_α·α + f_β·n·β` instead. The decision is made once,
//!   at the transfer's start, from the ports' state at that instant (transfers that start later
//!   do not change it). This is [`Machine`]'s convention (α, β are the unidirectional costs and
//!   f ≥ 1 prices a node that sends and receives at once); thakur §3 / rabenseifner §3.1 write it
//!   the other way round, with α, β bidirectional and `f = α_uni/α ≤ 1`: their machine
//!   (α, β, f_α, f_β) is ours with `α' = f_α·α`, `β' = f_β·β`, `f' = 1/f`.
//! - **Ports.** Sends of a rank enter its send port in the order they become ready (ties: lower
//!   step id); the head message holds the port from the moment it is at the head until its
//!   transfer ends, even while it waits for the receiver's port (a single-ported NIC works on one
//!   message at a time). A receive port serves waiting messages in the order they asked for it
//!   (ties: lower sender rank, then lower step id). Transfers are eager: they do not wait for the
//!   matching `Recv` to be posted, and a `Recv` step completes when its deps are done and its
//!   message has arrived.
//! - **Rendezvous.** With the switch [`ModelParams::rendezvous`], a message longer than
//!   [`Rendezvous::eager_limit`] bytes costs [`Rendezvous::alpha`] more (the grant round trip of
//!   a zero-copy protocol, as MPICH's eager/rendezvous switch); off by default.
//! - **Computation.** `Reduce` of n bytes costs `n·γ`, `Copy` of n bytes costs
//!   `n·copy_beta` (0 by default, as in the papers' formulas, which leave local copies out).
//!   Both serialize on the rank's CPU in ready order (ties: lower step id); the CPU is
//!   independent of the ports, so a rank computes while its NIC transfers (but see Senders'
//!   CPU).
//! - **Local steps.** Every `Copy` and `Reduce` also costs [`ModelParams::step_cost`] seconds on
//!   the CPU, whatever its size (the executor's dispatch and the kernel's start); 0 by default.
//! - **Oversubscription.** With [`ModelParams::cores`] = c > 0, the ranks share c cores (ranks of
//!   one node on shared memory, where moving bytes and waiting for them is the ranks' own CPU
//!   work). A transfer or computation that starts while k activities (transfers and
//!   computations, its own included) are under way costs max(1, k/c) times its time: k busy
//!   ranks on c cores each run k/c of the time. The factor is decided once, at the start (as f);
//!   all that starts at one instant counts each other. In a symmetric replay every rank does
//!   what rank 0 does: k is p × rank 0's. Off by default; with c ≥ p nothing changes. The
//!   critical path's α, β, γ and copy terms include the factor applied.
//! - **Hot destinations.** A message whose destination region the receiver reads in a step that
//!   depends on it (forwards it, reduces it or into it, copies it) costs
//!   [`ModelParams::hot_alpha`] + [`ModelParams::hot_beta`]·n more. The receiver has to act on it
//!   (where ranks share cores, be scheduled first), and after such a call the receiver's cache
//!   holds those lines, so on a load/store fabric the next call's writer first takes each line
//!   from it (`docs/measurements/2026-11-27-cost-model.md`). Both 0 by default.
//! - **Gap.** With [`ModelParams::gap`] = g < 1, a message holds the sender's send port and the
//!   receiver's receive port for `g·α + nβ` (its share of the α factor and the rest as above),
//!   and arrives `(1 − g)·α` later (times the factor applied): the latency L and gap of LogP
//!   (culler-et-al. 1993; LogGP adds the per-byte gap, our β), where Hockney's model (g = 1,
//!   the default) lets a port start its next message only when the last one has arrived. The
//!   `Send` completes when the ports are free (its buffer may be reused). On shared memory a
//!   sender's eager write takes a fraction of the time in which its receiver notices it (where
//!   ranks share cores, when it is scheduled): where ranks outnumber cores the root of a linear
//!   bcast finished sooner than a binomial tree, which a Hockney model cannot say.
//! - **Senders' CPU.** With [`ModelParams::cpu_sends`], the send port and the CPU of a rank are one
//!   resource: a send holds the rank's CPU from the moment it heads the send port until its
//!   transfer frees the ports, and a computation waits for it (and a send for a computation).
//!   The earliest ready step goes first (ties: lower step id). This is shared memory, where the
//!   sender's own thread writes the bytes into its peer's memory: no NIC moves them while the
//!   rank reduces, so a pipeline's segments do not hide a reduction behind a transfer (a
//!   pipelined rabenseifner allreduce ran slower than unsegmented, where an independent CPU
//!   predicted a gain). The receive side stays passive (one-sided writes).
//! - **Instants.** Everything that happens at one virtual instant is arbitrated after all of it is
//!   known (completions, then send ports and CPUs, then receive ports, then the f decision), so
//!   results never depend on the order in which the engine processes simultaneous events.
//! - **Completion.** A `Send` step completes when its transfer ends (its buffer may be reused;
//!   with a gap below 1, when it frees the ports), a `Recv` when its message arrived and its deps
//!   are done.
//! - **Two levels.** With [`ModelParams::network`] and a topology in the call
//!   ([`CollArgs::topology`]), the fields above price what happens inside a node and a message
//!   between ranks on different nodes costs [`Network::alpha`] + n·[`Network::beta`] (times the
//!   factors applied) instead. Each node has one network interface, full duplex, shared by its
//!   ranks: a message between nodes waits, holding its ports, until the sending node's interface
//!   and the receiving node's are both free, and holds both for its n·β (the latency is not
//!   serialized). Transfers that start at one instant take the interfaces in (rank, step) order.
//!   This is the contention that makes locality-blind algorithms lose (mamidala §1); without a
//!   network, or without a topology, the model is one level whatever the placement.
//! - **Per-call overhead.** [`ModelParams::overhead`] is added to the job's time: the call's
//!   start and wait outside its steps, the same for every algorithm (0 by default).
//!
//! The job's time is the latest completion of any step plus the overhead. The **critical path** is the chain of
//! steps, messages and port/CPU waits that determined it, and [`SimResult::critical_path`] sums
//! its terms: α multiplied by the factor applied (1 or f_α) per message, bytes·factor (1 or f_β)
//! per message, bytes reduced. So the job's time is `overhead` plus `critical_path.time(machine)`
//! plus `critical_copy_bytes·copy_beta` plus `critical_rendezvous·rendezvous.alpha` plus
//! `critical_local_steps·step_cost` plus `critical_hot_messages·hot_alpha` plus
//! `critical_hot_bytes·hot_beta` (plus, with two levels, the network's terms
//! [`SimResult::critical_network`] at its prices and [`SimResult::critical_nic_wait`]), and with
//! [`Machine::UNIT`] the terms are the (a, b, c) that the papers' formulas predict.
//! Where two chains finish at the same instant the one with more α (then β, then γ) terms is
//! taken, so results do not depend on event order.
//!
//! # Symmetric replay
//!
//! [`simulate_symmetric`] replays one rank's schedule when every rank runs the same schedule up
//! to a relabeling of ranks ([`Symmetry`]); then every rank has the same timeline, and the k-th
//! message rank 0 receives from q is the mirror image of the k-th message it sends to σ_q⁻¹(0).
//! This simulates a 65,536-rank ring allreduce (≈ 5p steps per rank, ≈ 2·10¹⁰ for the job) in
//! the time of one rank's schedule. [`check_symmetry`] tells whether a rank's schedule is the
//! relabeled rank-0 schedule (same steps, lengths and deps; peers mapped; offsets may differ).
//! With two levels the ranks of node 0 stand for every node instead (the placement regular and
//! in blocks, rank j·k + i running rank i's schedule shifted by j·k; [`simulate_alg_sampled`]).

mod engine;
mod params;
mod params_text;
mod symmetric;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod two_level_tests;

use crate::args::CollArgs;
use crate::cost::{Cost, Machine};
use crate::error::{Error, Result};
use crate::registry::Algorithm;
use crate::schedule::Schedule;

pub use params::{ModelParams, Network, NodeShape, Rendezvous};
pub use symmetric::{check_symmetry, Symmetry};

use crate::topology::Topology;

/// The largest job (steps of all ranks) that [`simulate_alg_sampled`] replays in full: above it
/// the replay would take gigabytes and minutes, and it refuses with an error instead.
pub const FULL_REPLAY_STEPS: u64 = 1 << 25;

/// Memory a step of a full replay takes, about: the step and its dependencies in the schedule,
/// and the simulator's state for it (the estimate a refusal gives).
pub const REPLAY_BYTES_PER_STEP: u64 = std::mem::size_of::<crate::schedule::Step>() as u64 + 48;

/// What the error of a job refused above [`FULL_REPLAY_STEPS`] says (for callers that skip it).
pub const TOO_LARGE_TO_REPLAY: &str = "too large to replay in full";

/// The topology the replay applies: the call's, when the parameters have a network level
/// (checked to place the call's ranks); `None` with one level.
fn two_level<'a>(args: &'a CollArgs, cfg: &ModelParams) -> Result<Option<&'a Topology>> {
    let Some(t) = args.topology.as_deref().filter(|_| cfg.network.is_some()) else { return Ok(None) };
    if t.size() != args.size {
        return Err(Error::Simulate(format!("the topology places {} ranks, the call has {}", t.size(), args.size)));
    }
    Ok(Some(t))
}

/// Ranks per node when every node holds the same number of consecutive ranks (then one node's
/// ranks may stand for all in a symmetric replay).
fn node_block(t: &Topology) -> Option<u32> {
    t.per_node().filter(|_| t.is_blocked())
}

/// What a replay found.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    /// Virtual time at which the last step of the job completed, plus the per-call overhead.
    pub time: f64,
    /// α, β, γ terms along the critical path (α and β terms include the f factors applied).
    pub critical_path: Cost,
    /// Bytes copied along the critical path (they cost `copy_beta` each).
    pub critical_copy_bytes: f64,
    /// Messages on the critical path.
    pub critical_messages: u64,
    /// Rendezvous messages (longer than [`Rendezvous::eager_limit`]) on the critical path: each
    /// costs [`Rendezvous::alpha`] on top of its α and β terms.
    pub critical_rendezvous: u64,
    /// Local steps (`Copy`, `Reduce`) on the critical path: each costs [`ModelParams::step_cost`].
    pub critical_local_steps: u64,
    /// Messages on the critical path whose destination is hot (each costs
    /// [`ModelParams::hot_alpha`] more) and their bytes (each [`ModelParams::hot_beta`] more).
    pub critical_hot_messages: u64,
    pub critical_hot_bytes: f64,
    /// Two levels: α and β terms of the messages between nodes on the critical path (priced at
    /// [`Network::alpha`] and [`Network::beta`]; `critical_path` holds the node's), and seconds
    /// its transfers waited for a node's network interface. Zero with one level.
    pub critical_network: Cost,
    pub critical_nic_wait: f64,
    /// Local steps of the busiest rank (the most `Copy` and `Reduce` steps).
    pub max_local_steps: u64,
    /// The critical path, first step to last: each step and the step that held it back (a dep, the
    /// message's send, the previous transfer on a port or the previous computation on the CPU).
    /// In a symmetric replay every rank is rank 0.
    pub critical_chain: Vec<ChainLink>,
    /// Bytes sent by the busiest rank.
    pub max_bytes_sent: u64,
    /// Bytes received by the busiest receiving rank.
    pub max_bytes_received: u64,
    /// Messages sent by the busiest rank.
    pub max_messages_sent: u64,
    /// Completion time of each rank's last step (0 for a rank with no steps).
    pub finish: Vec<f64>,
    /// Messages sent in the whole job.
    pub messages: u64,
    /// Bytes sent in the whole job.
    pub bytes: u64,
    /// Steps in the whole job.
    pub steps: u64,
    /// Steps actually replayed (one rank's for a symmetric replay).
    pub replayed_steps: u64,
}

/// One step of the critical path.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ChainLink {
    pub rank: u32,
    pub step: crate::schedule::StepId,
    /// When the step completed.
    pub finish: f64,
}

impl SimResult {
    /// The critical path as text, one step per line (`rank r step s (kind) done at t`).
    pub fn describe_critical_path(&self, schedules: &[Schedule]) -> String {
        let mut out = String::new();
        for l in &self.critical_chain {
            let kind = schedules.get(l.rank as usize).filter(|s| (l.step as usize) < s.len()).map(|s| s.step(l.step));
            let kind = kind.map_or_else(|| "?".to_string(), |k| k.to_string());
            out.push_str(&format!("rank {} step {} ({kind}) done at {}\n", l.rank, l.step, l.finish));
        }
        out
    }
}

/// Replays a whole job: `schedules[r]` is rank r's schedule of the call `args` (any rank's
/// arguments; `args.size` ranks, `args.elem_size` bytes per element).
pub fn simulate(args: &CollArgs, schedules: &[Schedule], m: &Machine) -> Result<SimResult> {
    simulate_with(args, schedules, &ModelParams::new(*m))
}

/// [`simulate`] with a full [`ModelParams`].
pub fn simulate_with(args: &CollArgs, schedules: &[Schedule], cfg: &ModelParams) -> Result<SimResult> {
    cfg.validate()?;
    let p = args.size as usize;
    if schedules.len() != p {
        return Err(Error::Simulate(format!("{} schedules for a job of {p} ranks", schedules.len())));
    }
    for (r, s) in schedules.iter().enumerate() {
        if s.rank as usize != r || s.size as usize != p {
            return Err(Error::Simulate(format!(
                "schedule {r} is for rank {} of {} (expected rank {r} of {p})",
                s.rank, s.size
            )));
        }
    }
    let topo = two_level(args, cfg)?;
    let refs: Vec<&Schedule> = schedules.iter().collect();
    engine::run(&refs, engine::Mode::Full, u64::from(args.elem_size), cfg, topo)
}

/// Builds every rank's schedule of `alg` for the call `args` and replays the job.
pub fn simulate_alg(alg: &Algorithm, args: &CollArgs, m: &Machine) -> Result<SimResult> {
    simulate_alg_with(alg, args, &ModelParams::new(*m))
}

/// [`simulate_alg`] with a full [`ModelParams`].
pub fn simulate_alg_with(alg: &Algorithm, args: &CollArgs, cfg: &ModelParams) -> Result<SimResult> {
    let schedules = build_all(alg, args)?;
    simulate_with(args, &schedules, cfg)
}

/// Every rank's schedule of `alg` for `args`.
pub fn build_all(alg: &Algorithm, args: &CollArgs) -> Result<Vec<Schedule>> {
    args.validate()?;
    (0..args.size).map(|r| alg.schedule(&args.for_rank(r)).map(compact)).collect()
}

/// The schedule without the builder's spare capacity (a clone allocates exactly what it holds):
/// about an eighth less memory for a large job.
fn compact(s: Schedule) -> Schedule {
    s.clone()
}

/// Replays rank 0's schedule `schedule0` of a job whose ranks all run it up to the relabeling
/// `sym` (not checked here: see [`check_symmetry`] and [`simulate_alg_symmetric`]).
pub fn simulate_symmetric(args: &CollArgs, schedule0: &Schedule, sym: Symmetry, m: &Machine) -> Result<SimResult> {
    simulate_symmetric_with(args, schedule0, sym, &ModelParams::new(*m))
}

/// [`simulate_symmetric`] with a full [`ModelParams`].
pub fn simulate_symmetric_with(
    args: &CollArgs,
    schedule0: &Schedule,
    sym: Symmetry,
    cfg: &ModelParams,
) -> Result<SimResult> {
    cfg.validate()?;
    if schedule0.rank != 0 || schedule0.size != args.size {
        return Err(Error::Simulate(format!(
            "symmetric replay needs rank 0's schedule of {} ranks, got rank {} of {}",
            args.size, schedule0.rank, schedule0.size
        )));
    }
    sym.check_size(args.size)?;
    let topo = two_level(args, cfg)?;
    if let Some(t) = topo.filter(|t| t.nodes() != args.size) {
        return Err(Error::Simulate(format!(
            "rank 0 stands for every rank only with one rank per node ({t}): replay the job, or \
             simulate_alg_sampled, which lets one node stand for all"
        )));
    }
    engine::run(&[schedule0], engine::Mode::Symmetric(sym, 1), u64::from(args.elem_size), cfg, topo)
}

/// Ranks whose schedules [`simulate_alg_symmetric`] compares with rank 0's: neighbours, the
/// middle, the last rank, and a few spread in between.
pub fn sample_ranks(p: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [1, 2, 3, p / 2, p / 2 + 1, p - 1, p / 3, (p / 7).wrapping_mul(5)]
        .into_iter()
        .filter(|&r| r > 0 && r < p)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Builds rank 0's schedule of `alg`, checks that the [`sample_ranks`] run the same schedule up to
/// `sym` (an `Err` if not: the symmetric replay would be wrong) and replays it symmetrically.
pub fn simulate_alg_symmetric(alg: &Algorithm, args: &CollArgs, sym: Symmetry, m: &Machine) -> Result<SimResult> {
    args.validate()?;
    sym.check_size(args.size)?;
    let s0 = alg.schedule(&args.for_rank(0))?;
    for r in sample_ranks(args.size) {
        let sr = alg.schedule(&args.for_rank(r))?;
        check_symmetry(&s0, &sr, sym)?;
    }
    simulate_symmetric(args, &s0, sym, m)
}

/// The replay of `alg` for `args` at the least cost that is still exact: the symmetric replay of
/// rank 0 where the [`sample_ranks`] run rank 0's schedule relabeled (XOR first for a
/// power-of-two p, then rotation), else the replay of every rank's schedule. The symmetry is
/// checked on the sampled ranks only: the caller trusts the algorithm to treat the others alike.
///
/// With two levels (a network in `cfg`, a topology in `args`) the block is a node: where every
/// node holds k consecutive ranks and the sampled ranks run their node-0 counterpart's schedule
/// shifted by a multiple of k, node 0's k ranks are replayed for all; otherwise the whole job.
/// A whole job of more than [`FULL_REPLAY_STEPS`] steps (estimated from rank 0's) is an `Err`.
pub fn simulate_alg_sampled(alg: &Algorithm, args: &CollArgs, cfg: &ModelParams) -> Result<SimResult> {
    simulate_alg_sampled_within(alg, args, cfg, u32::MAX)
}

/// [`simulate_alg_sampled`], refusing (with [`TOO_LARGE_TO_REPLAY`]) a job of more than
/// `full_ranks` ranks that no symmetry lets it shorten: building and replaying every rank's
/// schedule grows with p² for many algorithms (a decision map over thousands of nodes skips those
/// cells instead of taking minutes).
pub fn simulate_alg_sampled_within(
    alg: &Algorithm,
    args: &CollArgs,
    cfg: &ModelParams,
    full_ranks: u32,
) -> Result<SimResult> {
    args.validate()?;
    if let Some(t) = two_level(args, cfg)? {
        if let Some(r) = simulate_node_symmetric(alg, args, cfg, t)? {
            return Ok(r);
        }
        return simulate_alg_checked(alg, args, cfg, full_ranks);
    }
    if args.size > 1 {
        let s0 = alg.schedule(&args.for_rank(0))?;
        let others: Vec<_> = sample_ranks(args.size).into_iter().map(|r| alg.schedule(&args.for_rank(r))).collect();
        let syms: &[Symmetry] =
            if args.size.is_power_of_two() { &[Symmetry::Xor, Symmetry::Rotation] } else { &[Symmetry::Rotation] };
        for &sym in syms {
            if others.iter().all(|s| s.as_ref().is_ok_and(|s| check_symmetry(&s0, s, sym).is_ok())) {
                return simulate_symmetric_with(args, &s0, sym, cfg);
            }
        }
    }
    simulate_alg_checked(alg, args, cfg, full_ranks)
}

/// [`simulate_alg_with`], refused above `full_ranks` ranks or [`FULL_REPLAY_STEPS`] (rank 0's
/// steps times p).
fn simulate_alg_checked(alg: &Algorithm, args: &CollArgs, cfg: &ModelParams, full_ranks: u32) -> Result<SimResult> {
    let steps = alg.schedule(&args.for_rank(0))?.len() as u64 * u64::from(args.size);
    if steps > FULL_REPLAY_STEPS || args.size > full_ranks {
        let gib = steps as f64 * REPLAY_BYTES_PER_STEP as f64 / f64::from(1u32 << 30);
        return Err(Error::Simulate(format!(
            "{}:{} on {} ranks is not symmetric and {TOO_LARGE_TO_REPLAY} (≈ {steps} steps, about {gib:.1} GiB \
             to build and replay; limits {} steps, {full_ranks} ranks)",
            alg.coll, alg.name, args.size, FULL_REPLAY_STEPS
        )));
    }
    simulate_alg_with(alg, args, cfg)
}

/// Two levels: node 0's ranks replayed for every node when the placement is regular and the
/// sampled ranks (and every rank of node 1 and of the last node) run their node-0 counterpart's
/// schedule shifted by whole nodes, and the replay matches every message; `None` when not.
fn simulate_node_symmetric(
    alg: &Algorithm,
    args: &CollArgs,
    cfg: &ModelParams,
    t: &Topology,
) -> Result<Option<SimResult>> {
    let p = args.size;
    let Some(k) = node_block(t).filter(|&k| k < p) else { return Ok(None) };
    let block: Vec<Schedule> = (0..k).map(|r| alg.schedule(&args.for_rank(r)).map(compact)).collect::<Result<_>>()?;
    // every rank of node 1 and of the last node, and the usual spread
    let mut samples = sample_ranks(p);
    samples.extend((k..2 * k).chain(p - k..p));
    samples.retain(|&r| r >= k);
    samples.sort_unstable();
    samples.dedup();
    let others: Vec<_> = samples.iter().map(|&r| alg.schedule(&args.for_rank(r))).collect();
    let syms: &[Symmetry] = if p.is_power_of_two() && k.is_power_of_two() {
        &[Symmetry::Xor, Symmetry::Rotation]
    } else {
        &[Symmetry::Rotation]
    };
    for &sym in syms {
        let holds = others.iter().all(|s| {
            s.as_ref().is_ok_and(|s| symmetric::check_block_symmetry(&block[(s.rank % k) as usize], s, sym, k).is_ok())
        });
        if holds {
            // The replay matches every message with its image; one that has none (a length
            // that differs on an unsampled rank) shows the job is not symmetric after all.
            let refs: Vec<&Schedule> = block.iter().collect();
            let mode = engine::Mode::Symmetric(sym, k);
            return Ok(engine::run(&refs, mode, u64::from(args.elem_size), cfg, Some(t)).ok());
        }
    }
    Ok(None)
}
