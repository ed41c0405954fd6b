//! Predicting each candidate's time: every eligible algorithm, with `segment` ∈ {none,
//! [`segment_candidates`]}, replayed by the simulator on the fitted machine (whose time includes
//! the per-call overhead).
//!
//! Replay cost: up to 8 ranks the whole job is replayed (p small schedules); above, the
//! symmetric replay where it holds (`sim::simulate_alg_sampled`: one rank's schedule, checked
//! against sampled ranks) and the whole job only where no symmetry holds (rooted trees). The
//! machine is homogeneous, so a rooted call is replayed with root 0.
//!
//! Order ([`preference`]): the candidates predicted within [`TIE`] of the fastest are ones the
//! model cannot tell apart (the probe's own fit misses its points by more): among them the one
//! with the fewest steps (messages and local steps of the whole job) comes first — less work
//! and fewer chances to wait on a descheduled peer, which the model does not see. At p = 2
//! most alltoall algorithms are one exchange plus local copies and bcast's scatter+allgather is
//! binomial's single message cut in two; by time alone they tie, or differ by a fitted f_β of
//! 0.97 — the simpler schedule is the one that measures fastest. Then registry order.

use fabcoll_collectives::registry::{self, Algorithm};
use fabcoll_collectives::sim::{simulate_alg_sampled, simulate_alg_with};
use fabcoll_collectives::{CollArgs, Collective, Params};

use super::{model_err, segment_candidates, segment_params, ModelParams};
use crate::error::Result;

/// One candidate's predicted time.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub algorithm: &'static str,
    /// The candidate's parameters (`segment` in elements of the call's datatype; absent = none).
    pub params: Params,
    pub seconds: f64,
    /// Steps of the whole job (sends, receives, copies, reductions): the tie-breaker.
    pub steps: u64,
}

/// Relative resolution of the model: candidates predicted within this fraction of the fastest
/// are ranked by their steps (see the module doc).
pub const TIE: f64 = 0.05;

/// The model's preference order of candidates given as (predicted seconds, steps), each already
/// in registry order: the indices, preferred first. Within [`TIE`] of the fastest: fewest steps,
/// then the given order; the others by time (whole picoseconds), then the given order.
pub fn preference(cands: &[(f64, u64)]) -> Vec<usize> {
    let fastest = cands.iter().map(|c| picos(c.0)).min().unwrap_or(0);
    let limit = (fastest as f64 * (1.0 + TIE)).round() as u64;
    let mut idx: Vec<usize> = (0..cands.len()).collect();
    idx.sort_by_key(|&i| {
        let t = picos(cands[i].0);
        if t <= limit {
            (0, cands[i].1, 0, i)
        } else {
            (1, 0, t, i)
        }
    });
    idx
}

/// Predicted times of every eligible algorithm (and segment choice) for `args`, fastest first
/// (ties keep registry order, so every rank sorts alike).
pub fn predict(args: &CollArgs, m: &ModelParams) -> Result<Vec<Estimate>> {
    predict_filtered(args, m, |_| true)
}

/// [`predict`] over the eligible algorithms that `keep` accepts.
pub fn predict_filtered(args: &CollArgs, m: &ModelParams, keep: impl Fn(&Algorithm) -> bool) -> Result<Vec<Estimate>> {
    m.validate()?;
    let args = canonical(args);
    let msg = block_bytes(&args)?;
    let mut out = Vec::new();
    let mut last_err = None;
    for alg in registry::eligible(&args).filter(|a| keep(a)) {
        for seg in std::iter::once(0).chain(segment_candidates(msg)) {
            let params = segment_params(seg, args.elem_size);
            match time_and_steps(alg, &CollArgs { params: params.clone(), ..args.clone() }, m) {
                Ok((t, steps)) => out.push(Estimate { algorithm: alg.name, params, seconds: t, steps }),
                Err(e) => {
                    tracing::debug!("model: {}:{} not simulated: {e}", alg.coll, alg.name);
                    last_err = Some(e);
                }
            }
        }
    }
    if out.is_empty() {
        return Err(match last_err {
            Some(e) => e,
            None => model_err(format!("no registered {} algorithm accepts these arguments", args.coll)),
        });
    }
    // Deterministic on every rank: ties on whole picoseconds and steps keep registry order,
    // unsegmented first.
    let order = preference(&out.iter().map(|e| (e.seconds, e.steps)).collect::<Vec<_>>());
    Ok(order.into_iter().map(|i| out[i].clone()).collect())
}

/// Seconds as whole picoseconds (the resolution at which candidates are ranked).
pub fn picos(seconds: f64) -> u64 {
    (seconds * 1e12).round() as u64
}

/// The model's time of one configuration (`args.params` as given), seconds.
pub fn time_of(alg: &Algorithm, args: &CollArgs, m: &ModelParams) -> Result<f64> {
    Ok(time_and_steps(alg, args, m)?.0)
}

/// [`time_of`] and the job's steps (the tie-breaker of [`preference`]).
pub fn time_and_steps(alg: &Algorithm, args: &CollArgs, m: &ModelParams) -> Result<(f64, u64)> {
    let args = canonical(args);
    let r = if args.size > 8 { simulate_alg_sampled(alg, &args, m)? } else { simulate_alg_with(alg, &args, m)? };
    Ok((r.time, r.steps))
}

/// Rank 0's view with root 0 (the model is the same for every rank and root).
fn canonical(args: &CollArgs) -> CollArgs {
    let mut a = args.for_rank(0);
    a.root = 0;
    // Only the root of gather/reduce passes MPI_IN_PLACE: every rank must predict alike.
    if matches!(a.coll, Collective::Gather | Collective::Gatherv | Collective::Reduce) {
        a.in_place = false;
    }
    a
}

/// Bytes of one block (the average block of a v-variant): what decides whether pipelining pays.
pub fn block_bytes(args: &CollArgs) -> Result<u64> {
    let es = u64::from(args.elem_size);
    Ok(if args.coll.is_vector() { args.total_count()? * es / args.p().max(1) } else { args.count * es })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::model::Rendezvous;
    use fabcoll_collectives::Machine;

    fn m() -> ModelParams {
        ModelParams {
            copy_beta: 5e-11,
            overhead: 1e-6,
            ..ModelParams::new(Machine { alpha: 2e-6, beta: 1e-10, gamma: 1e-10, f_alpha: 1.2, f_beta: 1.5 })
        }
    }

    #[test]
    fn every_eligible_algorithm_sorted() {
        for p in [3u32, 4, 16, 24] {
            let args = CollArgs::new(Collective::Allreduce, 0, p, 1 << 18);
            let est = predict(&args, &m()).unwrap();
            let eligible: Vec<&str> = registry::eligible(&args).map(|a| a.name).collect();
            for name in &eligible {
                assert!(est.iter().any(|e| e.algorithm == *name), "p={p}: {name} missing");
            }
            // Within TIE of the fastest by steps, then by time.
            let limit = est.iter().map(|e| e.seconds).fold(f64::INFINITY, f64::min) * (1.0 + TIE) * (1.0 + 1e-9);
            let (near, far): (Vec<_>, Vec<_>) = est.iter().partition(|e| e.seconds <= limit);
            assert!(near.windows(2).all(|w| w[0].steps <= w[1].steps));
            assert!(far.windows(2).all(|w| w[0].seconds <= w[1].seconds));
            assert_eq!(near.len() + far.len(), est.len());
            assert!(est[..near.len()].iter().all(|e| e.seconds <= limit), "the near ones come first");
            assert!(est.iter().any(|e| e.params.get("segment").is_some()), "1 MiB: segment candidates");
            assert!(est.iter().all(|e| e.seconds > m().overhead));
        }
    }

    #[test]
    fn ties_go_to_the_simpler_schedule() {
        // (seconds, steps) in registry order: 0, 1 and 3 are within 5 % of the fastest (3).
        let order = preference(&[(1.00e-5, 9), (1.03e-5, 3), (1.2e-5, 1), (0.99e-5, 9)]);
        assert_eq!(order, vec![1, 0, 3, 2]);
        assert_eq!(preference(&[]), Vec::<usize>::new());
        // Allgather at p = 2: every algorithm but gather_bcast is one exchange; bruck adds local
        // rotations (10 steps against 6). Without a per-step cost the times tie and the fewest
        // steps win; with one, bruck is slower too.
        for step_cost in [0.0, 3e-7] {
            let mut args = CollArgs::new(Collective::Allgather, 0, 2, 1024);
            args.elem_size = 1;
            let est = predict(&args, &ModelParams { step_cost, ..m() }).unwrap();
            let fewest = est.iter().filter(|e| e.seconds <= est[0].seconds * 1.05).map(|e| e.steps).min().unwrap();
            assert_eq!(est[0].steps, fewest, "{step_cost}: {est:?}");
            let bruck = est.iter().position(|e| e.algorithm == "bruck").unwrap();
            let ring = est.iter().position(|e| e.algorithm == "ring").unwrap();
            assert!(ring < bruck, "{step_cost}: {est:?}");
        }
    }

    #[test]
    fn latency_bound_and_bandwidth_bound_differ() {
        // Thakur §4.5: recursive doubling for short allreduce, a bandwidth-optimal one for long.
        let short = predict(&CollArgs::new(Collective::Allreduce, 0, 8, 2), &m()).unwrap();
        let long = predict(&CollArgs::new(Collective::Allreduce, 0, 8, 4 << 20), &m()).unwrap();
        assert_ne!(short[0].algorithm, long[0].algorithm);
        let rd = |v: &[Estimate]| v.iter().find(|e| e.algorithm == "recursive_doubling").unwrap().seconds;
        assert!(rd(&long) > long[0].seconds * 1.5, "recursive doubling moves n·lg p bytes");
    }

    #[test]
    fn rendezvous_penalizes_many_long_messages() {
        // 1 MiB allreduce at p = 4: unsegmented and segmented candidates; with a large α_r per
        // long message every segmented candidate loses time and never gains.
        let args = CollArgs::new(Collective::Allreduce, 0, 4, 1 << 18);
        let alg = registry::find(Collective::Allreduce, "ring").unwrap();
        let rdv = ModelParams { rendezvous: Rendezvous { eager_limit: 16 << 10, alpha: 20e-6 }, ..m() };
        let off = time_of(alg, &args, &m()).unwrap();
        let on = time_of(alg, &args, &rdv).unwrap();
        // ring: 2(p−1) = 6 messages of 256 KiB, all above the limit, in sequence.
        assert!((on - off - 6.0 * 20e-6).abs() < 1e-9, "{on} vs {off}");
        let best = predict(&args, &rdv).unwrap();
        let plain = predict(&args, &m()).unwrap();
        assert!(best[0].seconds >= plain[0].seconds);
    }

    #[test]
    fn symmetric_and_full_replays_agree() {
        let args = CollArgs::new(Collective::Allgather, 0, 16, 1000);
        let alg = registry::find(Collective::Allgather, "ring").unwrap();
        let m = ModelParams { rendezvous: Rendezvous { eager_limit: 4096, alpha: 3e-6 }, ..m() };
        let (sym, steps) = time_and_steps(alg, &args, &m).unwrap();
        let full = simulate_alg_with(alg, &args, &m).unwrap();
        assert!((sym - full.time).abs() <= 1e-9 * full.time, "{sym} vs {}", full.time);
        assert_eq!(steps, full.steps);
        assert!(full.time > m.overhead, "the overhead is in the replay's time");
    }
}
