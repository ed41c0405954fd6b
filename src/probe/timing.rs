//! Timing the probe's configurations: each one in 31 repetitions of a batch of calls (batch size
//! agreed on from a first timed call, [`BATCH_SECONDS`] each), interleaved across configurations,
//! timed as `fabcoll bench` and the tuner time (`t0; call; t1` and an untimed barrier, so that
//! calls never overlap); each repetition's per-call mean taken as the maximum over ranks; the
//! 5th fastest of 31 repetitions is the sample.

use std::time::Instant;

use fabcoll_collectives::op::ReduceOp;
use fabcoll_collectives::Collective;

use crate::comm::{Collectives, Communicator, Options, Pinned};
use crate::error::Result;
use crate::select::model::probe::ProbeCase;

/// Repetitions per configuration; the sample is the [`KEEP`]-th fastest, about the 15th
/// percentile (interference on a shared node only adds time, so the low end estimates the
/// machine; the fastest alone is luck). Many short batches rather than a few long ones: another
/// job's burst on a core disturbs a whole batch for milliseconds, and on a loaded machine a few
/// long batches left too few clean ones (`docs/measurements/2026-11-27-cost-model.md`).
const REPS: usize = 31;
const KEEP: usize = 4;
/// Target wall time of one batch.
const BATCH_SECONDS: f64 = 5e-4;
const MAX_BATCH: f64 = 50.0;

/// One configuration ready to time: its options, buffers and agreed batch size.
///
/// The buffers are the communicator's registered allocations ([`Communicator::alloc`]), as in
/// `fabcoll bench` and `fabcoll tune`: with plain heap buffers a long message on shm cannot be
/// written into its destination (peers write shared memory only) and takes the copying path —
/// the probe then measured a different, slower executor path than the calls it predicts
/// (`docs/measurements/2026-11-27-cost-model.md`).
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
pub(super) fn time_cases(comm: &Communicator, cases: Vec<ProbeCase>) -> Result<Vec<(ProbeCase, f64)>> {
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
