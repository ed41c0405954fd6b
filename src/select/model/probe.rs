//! The probe: a short measurement over a communicator that fits the model's parameters.
//!
//! - **α, β, o**: `bcast:binomial` (one-way messages) at 8 B, 4 KiB, 64 KiB and 1 MiB, and at
//!   256 KiB pipelined in 16 KiB segments (16 messages per hop: separates the per-message α from
//!   the per-call overhead o).
//! - **f_α, f_β**: `allgather:ring` (every message is sent while one is received) at 8 B, 4 KiB,
//!   64 KiB and 256 KiB per block.
//! - **α_h, β_h** (hot destinations, [`ModelParams::hot_alpha`], [`ModelParams::hot_beta`]): at
//!   p ≥ 3 also `bcast:linear` at 8 B, 4 KiB, 64 KiB and 256 KiB, whose receivers keep what they
//!   get where binomial's and ring's forward it (separable from the rest at p ≥ 4). On 2 cores
//!   at p = 4 the root's copies into a rank that forwards ran at half the speed of those into
//!   one that does not (1 MiB: perf samples of the root's memcpy, 87 against 69 µs for 2 against
//!   3 MiB), and linear measured 1.6-2x faster than binomial from 64 KiB to 1 MiB; once the
//!   receivers read their buffers between calls as well, linear lost that lead.
//! - **gap** ([`ModelParams::gap`]): not probed; 0.3 on node fabrics, 1 elsewhere (see
//!   `NODE_GAP`).
//! - **sends on the CPU** ([`ModelParams::cpu_sends`]): not probed; set on node fabrics (see
//!   `node_shape`).
//! - **step cost**: not probed (0; see [`super::fit`] for why).
//! - **γ, κ**: the f32-sum reduction kernel and memcpy timed on 4 MiB buffers on rank 0.
//!
//! Each configuration runs with the algorithm forced, so what is fitted is what the executor
//! really costs — the engine's executor: the probe runs on a duplicate communicator without the
//! direct path (`comm::direct`), whose per-message cost is a fraction of the engine's and would
//! otherwise set α for the messages of every size. A configuration is timed as `fabcoll bench` and the tuner time (`t0; call; t1`
//! and an untimed barrier, so that calls never overlap) in 31 repetitions of a batch of calls
//! (batch size agreed on from a first timed call, ≈ 0.5 ms per batch), interleaved across
//! configurations, each repetition's per-call mean taken as the maximum over ranks; the 5th
//! fastest of 31 repetitions is the sample (see `time_cases`). Rank 0 fits ([`super::fit`]) and
//! broadcasts the parameters, so every rank ends with the same model. About 0.2–1 s at p ≤ 8.

use std::time::Instant;

use fabcoll_collectives::kernels;
use fabcoll_collectives::op::ReduceOp;
use fabcoll_collectives::registry::{self, Algorithm};
use fabcoll_collectives::{CollArgs, Collective, Machine, Order};

use super::fit::{fit_with_rendezvous, terms_on, Sample};
use super::{model_err, segment_params, ModelParams, NodeShape, Rendezvous};
use crate::comm::{Collectives, Communicator, Options, Pinned};
use crate::error::Result;

/// One probe configuration (bytes of u8 elements).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProbeCase {
    pub coll: Collective,
    pub algorithm: &'static str,
    /// bcast: the buffer; allgather: one rank's block.
    pub bytes: u64,
    /// Pipeline segment in bytes (0 = none).
    pub segment: u64,
}

impl ProbeCase {
    /// The registry row and the call's arguments (rank 0 of `p`, u8 elements).
    pub fn resolve(&self, p: u32) -> Result<(&'static Algorithm, CollArgs)> {
        let alg = registry::find(self.coll, self.algorithm)?;
        let mut args = CollArgs::new(self.coll, 0, p, self.bytes);
        args.elem_size = 1;
        args.params = segment_params(self.segment, 1);
        Ok((alg, args))
    }
}

/// The configurations probed at p ranks (none at p = 1: nothing moves).
pub fn plan(p: u32) -> Vec<ProbeCase> {
    if p < 2 {
        return Vec::new();
    }
    let bcast = |bytes, segment| ProbeCase { coll: Collective::Bcast, algorithm: "binomial", bytes, segment };
    let ring = |bytes| ProbeCase { coll: Collective::Allgather, algorithm: "ring", bytes, segment: 0 };
    let mut v = vec![
        bcast(8, 0),
        bcast(4 << 10, 0),
        bcast(64 << 10, 0),
        bcast(1 << 20, 0),
        bcast(256 << 10, 16 << 10),
        ring(8),
        ring(4 << 10),
        ring(64 << 10),
        ring(256 << 10),
    ];
    if p > 2 {
        // At p = 2 linear is binomial.
        let linear = |bytes| ProbeCase { coll: Collective::Bcast, algorithm: "linear", bytes, segment: 0 };
        v.extend([linear(8), linear(4 << 10), linear(64 << 10), linear(256 << 10)]);
    }
    v
}

/// What a probe measured and fitted.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    pub params: ModelParams,
    /// The executor's eager limit and the fitted surcharge of a message above it.
    pub rendezvous: Rendezvous,
    /// Each configuration with its measured seconds (rank 0; empty elsewhere).
    pub samples: Vec<(ProbeCase, f64)>,
    /// Wall time of the whole probe on this rank.
    pub elapsed: f64,
}

/// Repetitions per configuration; the sample is the [`KEEP`]-th fastest, about the 15th
/// percentile (interference on a shared node only adds time, so the low end estimates the
/// machine; the fastest alone is luck). Many short batches rather than a few long ones: another
/// job's burst on a core disturbs a whole batch for milliseconds, and under a load of 5–6 on 2
/// cores 11 batches of 2 ms left too few clean ones (p = 2 shm, bcast:binomial 8 B: 6.5 µs in
/// one probe, 1.0–1.2 µs in others, and a fitted per-call overhead of 4.7 µs).
const REPS: usize = 31;
const KEEP: usize = 4;
/// Target wall time of one batch.
const BATCH_SECONDS: f64 = 5e-4;
const MAX_BATCH: f64 = 50.0;
/// Probe rounds before a fit failure is an error.
const PROBE_ATTEMPTS: usize = 3;

/// Runs the probe (collective: every rank of `comm` must call it). At p = 1 nothing moves: the
/// parameters are γ and κ with α = β = 0.
pub fn run(comm: &Communicator) -> Result<ProbeReport> {
    let start = Instant::now();
    let p = comm.size();
    // The endpoint's own limit: network fabrics default to a larger one than node fabrics.
    let eager_limit = comm.eager_limit() as u64;
    // Rank 0 measures the CPU and fits; the result (or a failure flag) goes to every rank. On a
    // busy node one round of timings can be too noisy to fit (e.g. times that do not grow with
    // bytes): the whole probe is repeated, on every rank alike, before giving up.
    // [status (1 = fitted), params (ModelParams::to_wire), rendezvous α]
    const P: usize = ModelParams::WIRE_LEN;
    let mut wire = [0.0f64; P + 2];
    let cores = job_cores(comm)?;
    let shape = node_shape(&comm.fabric_name(), cores);
    let mut samples = Vec::new();
    let engine = comm.dup_on_engine()?;
    for attempt in 1..=PROBE_ATTEMPTS {
        samples = time_cases(&engine, plan(p))?;
        if comm.rank() == 0 {
            match (Timings { p, measured: &samples, eager_limit }).fit(shape) {
                Ok((m, a_r)) => {
                    wire[0] = 1.0;
                    wire[1..=P].copy_from_slice(&m.to_wire());
                    wire[P + 1] = a_r;
                }
                Err(e) => tracing::warn!("model probe, attempt {attempt} of {PROBE_ATTEMPTS}: {e}"),
            }
        }
        comm.bcast(&mut wire, 0)?;
        if wire[0] == 1.0 {
            break;
        }
    }
    if wire[0] != 1.0 {
        return Err(model_err(format!("the probe's fit failed {PROBE_ATTEMPTS} times on rank 0 (see its log)")));
    }
    let params = ModelParams::from_wire(&wire[1..=P]);
    if comm.rank() != 0 {
        samples.clear();
    }
    let rendezvous = Rendezvous { eager_limit, alpha: wire[P + 1] };
    Ok(ProbeReport { params, rendezvous, samples, elapsed: start.elapsed().as_secs_f64() })
}

/// The cores the job's ranks share when every rank is on this node (`shm`, `local`): the CPUs
/// any of them may run on (the union of their affinity masks, agreed by two allreduces), else 0
/// (unknown: one core per rank). Not this process's own count: `fabrun` pins rank r to one CPU,
/// so `available_parallelism` says 1 in every rank of a 2-rank job on 2 CPUs, and the fit then
/// priced every exchange as two ranks on one core (p = 2 shm: f_α = 0.28, f_β = 0.29).
pub fn job_cores(comm: &Communicator) -> Result<u32> {
    if !is_node_fabric(&comm.fabric_name()) {
        return Ok(0);
    }
    let mine = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(|v| parse_cpu_list(v.trim()))))
        .flatten();
    // Without /proc: this process's count, as a set of that many CPUs.
    let mine =
        mine.unwrap_or_else(|| (0..std::thread::available_parallelism().map_or(1, |n| n.get() as u32)).collect());
    let mut len = [mine.iter().max().map_or(0, |&c| c + 1)];
    comm.allreduce_in_place(&mut len[..], &ReduceOp::Max)?;
    let mut flags = vec![0u8; len[0] as usize];
    for &c in &mine {
        flags[c as usize] = 1;
    }
    if !flags.is_empty() {
        comm.allreduce_in_place(&mut flags[..], &ReduceOp::Max)?;
    }
    Ok(flags.iter().map(|&f| u32::from(f)).sum())
}

/// A kernel CPU list (`0-3,8,10-11`) as CPU numbers; `None` if malformed or over 65536 CPUs.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let a = part.parse::<u32>().ok()?;
                (a, a)
            }
        };
        if a > b || b >= 65536 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// Whether every rank of a job on `fabric` runs on this node and moves bytes with its own CPU.
fn is_node_fabric(fabric: &str) -> bool {
    matches!(fabric, "shm" | "local")
}

/// The node the probe fits on: on node fabrics (`shm`, `local`) the job's `cores`, the gap
/// `NODE_GAP`, and sends on the sender's CPU ([`ModelParams::cpu_sends`]); elsewhere a core and
/// a NIC per rank and Hockney's model ([`NodeShape::HOCKNEY`]).
///
/// Sends take the sender's CPU on node fabrics because the rank's own thread writes the bytes
/// into its peer's memory: there is no NIC to move them while the rank reduces, so a pipeline's
/// segments cannot hide a reduction behind a transfer. With the CPU independent of the ports,
/// the model picked `allreduce:rabenseifner` with two segments per half at p = 2 from 32 KiB up
/// (predicting a pipelining gain), which the tuner measured 1.08–2.6× slower than unsegmented.
/// Measured on the tuner's grid (8 recorded probes at p = 2 and 4 on shm, fitted both ways,
/// `model --compare` on four tuner logs of 180–189 points): within 10 % of the measured best on
/// 154.8 points on average against 148.2 (log r18), 139.1 against 132.2 (r18b), 129.3 against
/// 125.1 (g1), 144.2 against 138.7 (r9); the gap kept its value (0.2, 0.5 and 1 did no better).
/// On two logs taken afterwards (14 recorded probes): 145.9 against 141.9 of 188 points (r18c),
/// 133.9 against 126.0 of 187 (r18d).
fn node_shape(fabric: &str, cores: u32) -> NodeShape {
    if is_node_fabric(fabric) {
        NodeShape { cores, gap: NODE_GAP, cpu_sends: true }
    } else {
        NodeShape { cores, ..NodeShape::HOCKNEY }
    }
}

/// The share of α a message holds the ports for on node fabrics (`shm`, `local`:
/// [`ModelParams::gap`], LogGP's gap as a share of the latency); other fabrics keep Hockney's 1.
///
/// Not fitted: the probe's points cannot tell it apart. At p = 2 only its product with α
/// shows (a pipeline's extra segments), and at p = 4 the per-call overhead, f_α and α_h absorb
/// what linear and binomial bcast differ by; a fit over the gaps 1, 0.5, 0.3, 0.2, 0.1 by the
/// probe's own misfit kept 1 in 6 of 8 probes. Measured on the tuner's grid instead (8 recorded
/// probes at p = 2 and 4 on shm, each fitted with every gap, `model --compare` on one tuner
/// log of 180 points): within 10 % of the measured best at 114.0 points on average with gap
/// 1, 120.8 with 0.5, 125.3 with 0.3, 122.5 with 0.2, 119.7 with 0.1; 0.3 was better than 1 in
/// every one of the 8 probes (by 1–24 points). The cause is physical: a rank's eager write into
/// a peer's memory costs the sender a fraction of the time until the peer has noticed it, and
/// where ranks share cores the peer notices only once it is scheduled.
const NODE_GAP: f64 = 0.3;

/// A probe's timings at p ranks, with the executor's eager limit they were taken under.
struct Timings<'a> {
    p: u32,
    measured: &'a [(ProbeCase, f64)],
    eager_limit: u64,
}

impl Timings<'_> {
    /// Fits the timings. With more ranks than `cores`, two models are fitted: one where ranks
    /// time-share the cores (`SimConfig::cores`) and one with a core per rank (the f factors and
    /// α absorb the sharing); the one whose predictions miss the probe's own points least (root
    /// mean square of the relative errors) is kept. On 2 cores, p = 4 ring exchanges (4 ranks
    /// busy) cost ≈ 10 µs a message where binomial's (≤ 2 busy) cost ≈ 3 µs: a scheduling delay
    /// that a factor k/c on the transfer does not always describe better than a large f_α. The
    /// rest of `shape` (gap, sends on the CPU) is the fabric's (`node_shape`).
    fn fit(&self, shape: NodeShape) -> Result<(ModelParams, f64)> {
        let rates = cpu_rates()?;
        let unshared = NodeShape { cores: 0, ..shape };
        if shape.cores == 0 || self.p <= shape.cores {
            return self.fit_on(rates, unshared);
        }
        match (self.fit_on(rates, shape), self.fit_on(rates, unshared)) {
            (Ok(a), Ok(b)) => {
                let (ea, eb) = (self.misfit(&a)?, self.misfit(&b)?);
                let cores = shape.cores;
                tracing::debug!("model fit: {cores} shared cores misfit {ea:.3}, a core per rank {eb:.3}");
                Ok(if ea <= eb { a } else { b })
            }
            (Ok(a), Err(_)) => Ok(a),
            (Err(_), b) => b,
        }
    }

    /// Root mean square of the relative errors of `fitted` on the probe's points.
    fn misfit(&self, fitted: &(ModelParams, f64)) -> Result<f64> {
        let (m, a_r) = fitted;
        let mut sum = 0.0;
        for (case, secs) in self.measured {
            let (alg, args) = case.resolve(self.p)?;
            let t = terms_on(alg, &args, self.eager_limit, m.shape())?.time_with(m, *a_r);
            sum += ((t - secs) / secs).powi(2);
        }
        Ok((sum / self.measured.len().max(1) as f64).sqrt())
    }

    /// One fit with the CPU's measured `(γ, κ)` ([`cpu_rates`]).
    fn fit_on(&self, (gamma, copy_beta): (f64, f64), shape: NodeShape) -> Result<(ModelParams, f64)> {
        if self.measured.is_empty() {
            let m = ModelParams {
                copy_beta,
                ..ModelParams::from_machine(Machine { alpha: 0.0, beta: 0.0, gamma, f_alpha: 1.0, f_beta: 1.0 })
            };
            return Ok((m, 0.0));
        }
        let samples = self
            .measured
            .iter()
            .map(|(case, secs)| {
                let (alg, args) = case.resolve(self.p)?;
                Ok(Sample { terms: terms_on(alg, &args, self.eager_limit, shape)?, seconds: *secs })
            })
            .collect::<Result<Vec<_>>>()?;
        let (m, a_r) = fit_with_rendezvous(&samples, gamma, copy_beta)?;
        Ok((m.with_shape(shape), a_r))
    }
}

/// One configuration ready to time: its options, buffers and agreed batch size.
///
/// The buffers are the communicator's registered allocations ([`Communicator::alloc`]), as in
/// `fabcoll bench` and `fabcoll tune`: with plain heap buffers a long message on shm cannot be
/// written into its destination (peers write shared memory only) and takes the copying path —
/// the probe then measured a different executor path than the calls it predicts (p = 2 shm:
/// bcast:binomial 1 MiB 99.8 µs from heap buffers, 25.2 µs in the tuner's log; allgather:ring
/// 256 KiB 38.7 against 13.1 µs).
struct Timed {
    case: ProbeCase,
    opts: Options,
    send: Pinned<u8>,
    recv: Pinned<u8>,
    batch: usize,
}

impl Timed {
    /// Buffers, a warm-up call (registration, eager rings) and one timed call that decides the
    /// batch size on every rank alike.
    fn new(comm: &Communicator, case: ProbeCase) -> Result<Timed> {
        let (p, n) = (comm.size() as usize, case.bytes as usize);
        let mut opts = Options::algorithm(case.algorithm);
        if case.segment > 0 {
            opts = opts.param(fabcoll_collectives::args::SEGMENT, case.segment);
        }
        let (mut send, mut recv) = match case.coll {
            Collective::Allgather => (comm.alloc::<u8>(n)?, comm.alloc::<u8>(n * p)?),
            _ => (comm.alloc::<u8>(0)?, comm.alloc::<u8>(n)?),
        };
        send.fill(1);
        if case.coll != Collective::Allgather {
            recv.fill(1);
        }
        let mut t = Timed { case, opts, send, recv, batch: 1 };
        t.call(comm)?;
        comm.barrier()?;
        let start = Instant::now();
        t.call(comm)?;
        comm.barrier()?;
        let mut one = [start.elapsed().as_secs_f64()];
        comm.allreduce_in_place(&mut one, &ReduceOp::Max)?;
        t.batch = (BATCH_SECONDS / one[0].max(1e-9)).clamp(1.0, MAX_BATCH) as usize;
        Ok(t)
    }

    fn call(&mut self, comm: &Communicator) -> Result<()> {
        let view = comm.with(&self.opts);
        match self.case.coll {
            Collective::Allgather => view.allgather(&self.send, &mut self.recv),
            _ => view.bcast(&mut self.recv, 0),
        }
    }

    /// This rank's mean time of one batch, timed as `fabcoll bench` and the tuner time:
    /// `t0; call; t1`, then an untimed barrier, so calls never overlap.
    fn batch_mean(&mut self, comm: &Communicator) -> Result<f64> {
        comm.barrier()?;
        let mut sum = 0.0;
        for _ in 0..self.batch {
            let t = Instant::now();
            self.call(comm)?;
            sum += t.elapsed().as_secs_f64();
            comm.barrier()?;
        }
        Ok(sum / self.batch as f64)
    }
}

/// Every configuration's time, seconds. Repetitions are interleaved (round r times every
/// configuration once), so a burst of load from other processes spoils one round of all
/// configurations rather than every round of one; each repetition is the maximum over ranks of
/// the per-rank mean, and a configuration's sample is its lower quartile.
fn time_cases(comm: &Communicator, cases: Vec<ProbeCase>) -> Result<Vec<(ProbeCase, f64)>> {
    let mut timed = cases.into_iter().map(|c| Timed::new(comm, c)).collect::<Result<Vec<_>>>()?;
    let mut reps = vec![0.0f64; timed.len() * REPS];
    for r in 0..REPS {
        for (i, t) in timed.iter_mut().enumerate() {
            reps[i * REPS + r] = t.batch_mean(comm)?;
        }
    }
    comm.allreduce_in_place(&mut reps, &ReduceOp::Max)?;
    Ok(timed
        .iter()
        .zip(reps.chunks_mut(REPS))
        .map(|(t, r)| {
            r.sort_by(f64::total_cmp);
            (t.case, r[KEEP])
        })
        .collect())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// (γ, κ): seconds per byte of the f32-sum kernel and of memcpy, medians over 7 runs on 4 MiB
/// buffers (larger than a core's L2: a collective's reductions and copies touch data that just
/// arrived or is about to leave, not a warm cache).
pub fn cpu_rates() -> Result<(f64, f64)> {
    const N: usize = 1 << 20; // f32 elements = 4 MiB
    let src = vec![1.0f32; N];
    let mut dst = vec![0.5f32; N];
    let bytes = (N * 4) as f64;
    let mut g = [0.0f64; 7];
    let mut k = [0.0f64; 7];
    kernels::reduce_typed(&ReduceOp::Sum, &src, &mut dst, Order::SrcFirst)?;
    for i in 0..g.len() {
        let t = Instant::now();
        kernels::reduce_typed(&ReduceOp::Sum, &src, &mut dst, Order::SrcFirst)?;
        g[i] = t.elapsed().as_secs_f64() / bytes;
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        k[i] = t.elapsed().as_secs_f64() / bytes;
        std::hint::black_box(&mut dst);
    }
    Ok((median(&mut g), median(&mut k)))
}

#[cfg(test)]
mod tests {
    use super::parse_cpu_list;

    #[test]
    fn cpu_lists_parse_and_malformed_ones_are_none() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("0-2,8,10-11"), Some(vec![0, 1, 2, 8, 10, 11]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        for bad in ["x", "3-1", "1-", "0-70000", "1,,a"] {
            assert_eq!(parse_cpu_list(bad), None, "{bad}");
        }
    }
}
