//! The probe: a short measurement over a communicator that fits the model's parameters.
//!
//! - **α, β, o**: `bcast:binomial` (one-way messages) at 8 B, 4 KiB, 64 KiB and 1 MiB, and at
//!   256 KiB pipelined in 16 KiB segments (16 messages per hop: separates the per-message α from
//!   the per-call overhead o).
//! - **f_α, f_β**: `allgather:ring` (every message is sent while one is received) at 8 B, 4 KiB,
//!   64 KiB and 256 KiB per block.
//! - **γ, κ**: the f32-sum reduction kernel and memcpy timed on 256 KiB buffers on rank 0.
//!
//! Each configuration runs with the algorithm forced, so what is fitted is what the executor
//! really costs. A configuration is timed as `fabcoll bench` and the tuner time (`t0; call; t1`
//! and an untimed barrier, so that calls never overlap) in 7 repetitions of a batch of calls
//! (batch size agreed on from a first timed call, ≈ 2 ms per batch), each repetition's per-call
//! mean taken as the maximum over ranks; the second fastest repetition is the sample. Rank 0 fits ([`super::fit`]) and
//! broadcasts the parameters, so every rank ends with the same model. About 0.2–1 s at p ≤ 8.

use std::time::Instant;

use fabcoll_collectives::kernels;
use fabcoll_collectives::op::ReduceOp;
use fabcoll_collectives::registry::{self, Algorithm};
use fabcoll_collectives::{CollArgs, Collective, Order};

use super::fit::{fit, terms, Sample};
use super::{model_err, segment_params, ModelParams};
use crate::comm::{Collectives, Communicator, Options};
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
    vec![
        bcast(8, 0),
        bcast(4 << 10, 0),
        bcast(64 << 10, 0),
        bcast(1 << 20, 0),
        bcast(256 << 10, 16 << 10),
        ring(8),
        ring(4 << 10),
        ring(64 << 10),
        ring(256 << 10),
    ]
}

/// What a probe measured and fitted.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    pub params: ModelParams,
    /// Each configuration with its measured seconds (rank 0; empty elsewhere).
    pub samples: Vec<(ProbeCase, f64)>,
    /// Wall time of the whole probe on this rank.
    pub elapsed: f64,
}

/// Repetitions per configuration; the sample is the second fastest (interference on a shared
/// node only adds time, so the low end estimates the machine; the fastest alone is luck).
const REPS: usize = 7;
/// Target wall time of one batch.
const BATCH_SECONDS: f64 = 2e-3;
const MAX_BATCH: f64 = 50.0;

/// Runs the probe (collective: every rank of `comm` must call it). At p = 1 nothing moves: the
/// parameters are γ and κ with α = β = 0.
pub fn run(comm: &Communicator) -> Result<ProbeReport> {
    let start = Instant::now();
    let p = comm.size();
    let mut samples = Vec::new();
    for case in plan(p) {
        let secs = time_case(comm, &case)?;
        samples.push((case, secs));
    }
    // Rank 0 measures the CPU and fits; the result (or a failure flag) goes to every rank.
    let mut wire = [0.0f64; 8];
    if comm.rank() == 0 {
        match fit_samples(p, &samples) {
            Ok(m) => {
                wire = [1.0, m.alpha, m.beta, m.gamma, m.f_alpha, m.f_beta, m.copy_beta, m.overhead];
            }
            Err(e) => tracing::warn!("model probe: {e}"),
        }
    }
    comm.bcast(&mut wire, 0)?;
    if wire[0] != 1.0 {
        return Err(model_err("the probe's fit failed on rank 0 (see its log)"));
    }
    let params = ModelParams {
        alpha: wire[1],
        beta: wire[2],
        gamma: wire[3],
        f_alpha: wire[4],
        f_beta: wire[5],
        copy_beta: wire[6],
        overhead: wire[7],
    };
    if comm.rank() != 0 {
        samples.clear();
    }
    Ok(ProbeReport { params, samples, elapsed: start.elapsed().as_secs_f64() })
}

fn fit_samples(p: u32, measured: &[(ProbeCase, f64)]) -> Result<ModelParams> {
    let (gamma, copy_beta) = cpu_rates()?;
    if measured.is_empty() {
        return Ok(ModelParams { alpha: 0.0, beta: 0.0, gamma, f_alpha: 1.0, f_beta: 1.0, copy_beta, overhead: 0.0 });
    }
    let samples = measured
        .iter()
        .map(|(case, secs)| {
            let (alg, args) = case.resolve(p)?;
            Ok(Sample { terms: terms(alg, &args)?, seconds: *secs })
        })
        .collect::<Result<Vec<_>>>()?;
    fit(&samples, gamma, copy_beta)
}

/// One configuration's median time (max over ranks), seconds.
fn time_case(comm: &Communicator, case: &ProbeCase) -> Result<f64> {
    let p = comm.size() as usize;
    let n = case.bytes as usize;
    let mut opts = Options::algorithm(case.algorithm);
    if case.segment > 0 {
        opts = opts.param(fabcoll_collectives::args::SEGMENT, case.segment);
    }
    let view = comm.with(&opts);
    let mut bufs: (Vec<u8>, Vec<u8>) = match case.coll {
        Collective::Allgather => (vec![1u8; n], vec![0u8; n * p]),
        _ => (Vec::new(), vec![1u8; n]),
    };
    let mut call = || -> Result<()> {
        match case.coll {
            Collective::Allgather => view.allgather(&bufs.0, &mut bufs.1),
            _ => view.bcast(&mut bufs.1, 0),
        }
    };
    // Warm-up (registration, eager rings), then one timed call decides the batch size for all.
    call()?;
    comm.barrier()?;
    let t = Instant::now();
    call()?;
    comm.barrier()?;
    let mut one = [t.elapsed().as_secs_f64()];
    comm.allreduce_in_place(&mut one, &ReduceOp::Max)?;
    let batch = (BATCH_SECONDS / one[0].max(1e-9)).clamp(1.0, MAX_BATCH) as usize;
    // As `fabcoll bench` and the tuner time: `t0; call; t1`, then an untimed barrier, so calls
    // never overlap; per-rank mean, max over ranks.
    let mut reps = [0.0f64; REPS];
    for r in reps.iter_mut() {
        comm.barrier()?;
        let mut sum = 0.0;
        for _ in 0..batch {
            let t = Instant::now();
            call()?;
            sum += t.elapsed().as_secs_f64();
            comm.barrier()?;
        }
        *r = sum / batch as f64;
    }
    comm.allreduce_in_place(&mut reps, &ReduceOp::Max)?;
    reps.sort_by(f64::total_cmp);
    Ok(reps[1])
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// (γ, κ): seconds per byte of the f32-sum kernel and of memcpy, medians over 7 runs on 256 KiB.
pub fn cpu_rates() -> Result<(f64, f64)> {
    const N: usize = 64 << 10; // f32 elements = 256 KiB
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
