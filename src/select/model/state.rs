//! A communicator's cost model (shared with its dups and splits): its parameters, whether the
//! model chooses the algorithms (`FABCOLL_SELECT=model`), and the choices made so far.
//!
//! A choice is cached per (operation, p, count bucket, element size, commutativity, in-place,
//! uniform counts) and computed for the bucket's canonical count (the largest power of two ≤ the
//! count; the average block for v-variants), never for the call's own count: every rank then
//! makes the same choice even when ranks meet a bucket first through different calls, and only
//! the first call of a bucket pays for the simulation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use fabcoll_collectives::registry::{self, Algorithm};
use fabcoll_collectives::{CollArgs, Collective, Params};

use super::predict::{predict, predict_filtered};
use super::{cache, select_by_model, Estimate, ModelParams};
use crate::error::Result;

/// The parameters, the selection switch and the choices of a communicator and its dups and splits.
#[derive(Debug)]
pub struct ModelState {
    params: Mutex<Option<ModelParams>>,
    select: AtomicBool,
    choices: Mutex<HashMap<ChoiceKey, Option<(&'static Algorithm, Params)>>>,
}

impl Default for ModelState {
    /// No parameters; selection as `FABCOLL_SELECT` says.
    fn default() -> ModelState {
        ModelState {
            params: Mutex::new(None),
            select: AtomicBool::new(select_by_model()),
            choices: Mutex::new(HashMap::new()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ChoiceKey {
    coll: Collective,
    p: u32,
    count: u64,
    elem: u32,
    commutative: bool,
    in_place: bool,
    uniform: bool,
}

/// The largest power of two ≤ n (0 for 0).
fn bucket(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        1 << (63 - n.leading_zeros())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `count` elements per block, as the typed calls build it (uniform counts for v-variants).
fn call_args(coll: Collective, p: u32, count: u64, elem: u32, commutative: bool) -> CollArgs {
    let mut args = CollArgs::new(coll, 0, p, count).with_commutative(commutative);
    args.elem_size = elem;
    if coll.is_vector() {
        let n = if coll == Collective::Alltoallv { p as usize * p as usize } else { p as usize };
        args = args.with_counts(vec![count; n]);
    }
    args
}

impl ModelState {
    /// Whether the cost model chooses the algorithms (its choices depend on state that can change,
    /// so the communicator does not memoize calls then).
    pub fn selecting(&self) -> bool {
        self.select.load(Ordering::Relaxed)
    }

    /// Turns model selection on or off.
    pub fn set_selecting(&self, on: bool) {
        self.select.store(on, Ordering::Relaxed);
    }

    /// The parameters, if they were probed, loaded or set.
    pub fn params(&self) -> Option<ModelParams> {
        *lock(&self.params)
    }

    /// Sets the parameters (validated) and forgets the choices made with the old ones.
    pub fn set_params(&self, params: ModelParams) -> Result<()> {
        params.validate()?;
        *lock(&self.params) = Some(params);
        lock(&self.choices).clear();
        Ok(())
    }

    /// Predicted times of every eligible algorithm (and segment choice) for a call of `count`
    /// elements of `elem` bytes per block at p ranks, fastest first, with these parameters, else
    /// (without keeping them) those of `FABCOLL_MODEL` or this machine's cache file for `fabric`.
    pub fn estimate(
        &self,
        fabric: &str,
        coll: Collective,
        p: u32,
        count: u64,
        elem: u32,
        commutative: bool,
    ) -> Result<Vec<Estimate>> {
        let m = match self.params() {
            Some(m) => m,
            None => cache::stored(fabric, p)?,
        };
        let args = call_args(coll, p, count, elem, commutative);
        args.validate()?;
        predict(&args, &m)
    }

    /// The model's choice for a call under model selection: `None` when model selection is off,
    /// there are no parameters, the caller passed parameters of their own, or nothing could be
    /// simulated (the decisions choose then).
    pub fn pick(&self, args: &CollArgs) -> Result<Option<(&'static Algorithm, Params)>> {
        if !self.selecting() || args.params.iter().next().is_some() {
            return Ok(None);
        }
        let Some(m) = self.params() else { return Ok(None) };
        let p = args.size;
        let uniform = args.counts.as_ref().is_none_or(|c| c.windows(2).all(|w| w[0] == w[1]));
        let per_block = if args.coll.is_vector() { args.total_count()? / args.p().max(1) } else { args.count };
        let in_place =
            args.in_place && !matches!(args.coll, Collective::Gather | Collective::Gatherv | Collective::Reduce);
        let key = ChoiceKey {
            coll: args.coll,
            p,
            count: bucket(per_block),
            elem: args.elem_size,
            commutative: args.commutative,
            in_place,
            uniform,
        };
        if let Some(c) = lock(&self.choices).get(&key) {
            return Ok(c.clone());
        }
        let mut canon = call_args(key.coll, p, key.count, key.elem, key.commutative);
        canon.in_place = in_place;
        let choice = match predict_filtered(&canon, &m, |a| a.restrictions.violated(args).is_none()) {
            Ok(est) => match est.into_iter().next() {
                Some(e) => Some((registry::find(key.coll, e.algorithm)?, e.params)),
                None => None,
            },
            Err(e) => {
                tracing::debug!("model selection for {}: {e}; the decisions choose", key.coll);
                None
            }
        };
        lock(&self.choices).insert(key, choice.clone());
        Ok(choice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabcoll_collectives::Machine;

    #[test]
    fn buckets() {
        assert_eq!((bucket(0), bucket(1), bucket(3), bucket(4), bucket(1000)), (0, 1, 2, 4, 512));
    }

    #[test]
    fn picks_only_when_selecting_with_parameters() {
        let s = ModelState::default();
        s.set_selecting(false);
        let args = CollArgs::new(Collective::Allreduce, 0, 4, 1 << 16);
        let m = ModelParams::new(Machine { alpha: 2e-6, beta: 1e-10, gamma: 1e-10, f_alpha: 1.0, f_beta: 1.0 });
        s.set_params(m).unwrap();
        assert!(s.pick(&args).unwrap().is_none(), "selection off");
        s.set_selecting(true);
        let (alg, _) = s.pick(&args).unwrap().expect("a choice");
        let est = s.estimate("local", Collective::Allreduce, 4, 1 << 16, args.elem_size, true).unwrap();
        assert_eq!(alg.name, est[0].algorithm, "the argmin of the estimate");
        // The caller's own parameters leave the choice to the decisions.
        let mut own = args.clone();
        own.params.set(fabcoll_collectives::args::SEGMENT, 64);
        assert!(s.pick(&own).unwrap().is_none());
        assert!(s.set_params(ModelParams { alpha: -1.0, ..m }).is_err());
        assert_eq!(s.params(), Some(m), "a bad model is not installed");
    }
}
