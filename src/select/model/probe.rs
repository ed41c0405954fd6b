//! The probe's plan and its fit: which configurations a probe times, and how their timings
//! become the model's parameters (no communicator: the run over one is `src/probe`, above the
//! communicator, which times [`plan`] and hands the timings to [`fit_timings`]).
//!
//! - **α, β, o**: `bcast:binomial` (one-way messages) at 8 B, 4 KiB, 64 KiB and 1 MiB, and at
//!   256 KiB pipelined in 16 KiB segments (16 messages per hop: separates the per-message α from
//!   the per-call overhead o).
//! - **f_α, f_β**: `allgather:ring` (every message is sent while one is received) at 8 B, 4 KiB,
//!   64 KiB and 256 KiB per block.
//! - **α_h, β_h** (hot destinations, [`ModelParams::hot_alpha`], [`ModelParams::hot_beta`]): at
//!   p ≥ 3 also `bcast:linear` at 8 B, 4 KiB, 64 KiB and 256 KiB, whose receivers keep what they
//!   get where binomial's and ring's forward it (separable from the rest at p ≥ 4): the root's
//!   copies into a rank that forwards ran slower than those into one that does not (`docs/measurements/2026-11-27-cost-model.md`).
//! - **gap** ([`ModelParams::gap`]): not probed; 0.3 on node fabrics, 1 elsewhere (see
//!   `NODE_GAP`).
//! - **sends on the CPU** ([`ModelParams::cpu_sends`]): not probed; set on node fabrics (see
//!   [`node_shape`]).
//! - **step cost**: not probed (0; see [`super::fit`] for why).
//! - **γ, κ**: the f32-sum reduction kernel and memcpy timed on 4 MiB buffers on rank 0
//!   ([`cpu_rates`]).
//!
//! Each configuration runs with the algorithm forced, so what is fitted is what the executor
//! really costs. Rank 0 fits and broadcasts the parameters, so every rank ends with the same
//! model.

use std::time::Instant;

use fabcoll_collectives::kernels;
use fabcoll_collectives::op::ReduceOp;
use fabcoll_collectives::registry::{self, Algorithm};
use fabcoll_collectives::{CollArgs, Collective, Machine, Order};

use super::fit::{fit, terms_on, Sample};
use super::{segment_params, ModelParams, NodeShape};
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
    /// The fit, with the executor's eager limit and the fitted surcharge of a message above it
    /// ([`ModelParams::rendezvous`]).
    pub params: ModelParams,
    /// Each configuration with its measured seconds (rank 0; empty elsewhere).
    pub samples: Vec<(ProbeCase, f64)>,
    /// Wall time of the whole probe on this rank.
    pub elapsed: f64,
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
pub fn is_node_fabric(fabric: &str) -> bool {
    matches!(fabric, "shm" | "local")
}

/// The node the probe fits on: on node fabrics (`shm`, `local`) the job's `cores`, the gap
/// `NODE_GAP`, and sends on the sender's CPU ([`ModelParams::cpu_sends`]); elsewhere a core and
/// a NIC per rank and Hockney's model ([`NodeShape::HOCKNEY`]).
///
/// Sends take the sender's CPU on node fabrics because the rank's own thread writes the bytes
/// into its peer's memory: there is no NIC to move them while the rank reduces, so a pipeline's
/// segments cannot hide a reduction behind a transfer. With the CPU independent of the ports,
/// the model picked pipelined `allreduce:rabenseifner` (predicting a gain) where the tuner found
/// it slower than unsegmented; with sends on the CPU its picks came closer to the tuner's best on
/// every tuner log tried (`docs/measurements/2026-11-27-cost-model.md`).
pub fn node_shape(fabric: &str, cores: u32) -> NodeShape {
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
/// what linear and binomial bcast differ by, so a fit by the probe's own misfit mostly kept 1.
/// Chosen on the tuner's grid instead: of 1, 0.5, 0.3, 0.2 and 0.1, 0.3 brought the model's
/// picks closest to the tuner's best, and did better than 1 in every recorded probe
/// (`docs/measurements/2026-11-27-cost-model.md`). The cause is physical: a rank's eager write into
/// a peer's memory costs the sender a fraction of the time until the peer has noticed it, and
/// where ranks share cores the peer notices only once it is scheduled.
const NODE_GAP: f64 = 0.3;

/// The parameters that fit a probe's timings `measured` at p ranks, taken under the executor's
/// `eager_limit` on a node of shape `shape` ([`node_shape`]), with this CPU's γ and κ
/// ([`cpu_rates`]; the caller is rank 0). See `Timings::fit` for the choice between shared
/// and unshared cores.
pub fn fit_timings(p: u32, measured: &[(ProbeCase, f64)], eager_limit: u64, shape: NodeShape) -> Result<ModelParams> {
    Timings { p, measured, eager_limit }.fit(shape)
}

/// A probe's timings at p ranks, with the executor's eager limit they were taken under.
struct Timings<'a> {
    p: u32,
    measured: &'a [(ProbeCase, f64)],
    eager_limit: u64,
}

impl Timings<'_> {
    /// Fits the timings. With more ranks than `cores`, two models are fitted: one where ranks
    /// time-share the cores ([`ModelParams::cores`]) and one with a core per rank (the f factors and
    /// α absorb the sharing); the one whose predictions miss the probe's own points least (root
    /// mean square of the relative errors) is kept. Where ranks outnumber cores, exchanges that
    /// keep every rank busy pay a scheduling delay per message that calls with fewer busy ranks
    /// do not, and a factor k/c on the transfer does not always describe it better than a large
    /// f_α. The
    /// rest of `shape` (gap, sends on the CPU) is the fabric's (`node_shape`).
    fn fit(&self, shape: NodeShape) -> Result<ModelParams> {
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

    /// Root mean square of the relative errors of `m` on the probe's points.
    fn misfit(&self, m: &ModelParams) -> Result<f64> {
        let mut sum = 0.0;
        for (case, secs) in self.measured {
            let (alg, args) = case.resolve(self.p)?;
            let t = terms_on(alg, &args, self.eager_limit, m.shape())?.time(m);
            sum += ((t - secs) / secs).powi(2);
        }
        Ok((sum / self.measured.len().max(1) as f64).sqrt())
    }

    /// One fit with the CPU's measured `(γ, κ)` ([`cpu_rates`]).
    fn fit_on(&self, (gamma, copy_beta): (f64, f64), shape: NodeShape) -> Result<ModelParams> {
        if self.measured.is_empty() {
            let m = ModelParams {
                copy_beta,
                ..ModelParams::new(Machine { alpha: 0.0, beta: 0.0, gamma, f_alpha: 1.0, f_beta: 1.0 })
            };
            return Ok(m);
        }
        let samples = self
            .measured
            .iter()
            .map(|(case, secs)| {
                let (alg, args) = case.resolve(self.p)?;
                Ok(Sample { terms: terms_on(alg, &args, self.eager_limit, shape)?, seconds: *secs })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(fit(&samples, gamma, copy_beta, self.eager_limit)?.with_shape(shape))
    }
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
