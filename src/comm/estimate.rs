//! The communicator's cost model (issue 5 §1): its parameters (probed, loaded from the per-machine
//! cache or from `FABCOLL_MODEL`), [`Communicator::estimate`] — every eligible algorithm's
//! predicted time for a call, without running anything (like NCCL's group simulate) — and the
//! model's choice for the default selection under `FABCOLL_SELECT=model`.
//!
//! The choice is cached per (operation, p, count bucket, element size, commutativity, in-place,
//! uniform counts) and computed for the bucket's canonical count (the largest power of two ≤ the
//! count; the average block for v-variants), never for the call's own count: every rank then
//! makes the same choice even when ranks meet a bucket first through different calls (dup/split
//! communicators share the cache), and only the first call of a bucket pays for the simulation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use fabcoll_collectives::datatype::Datatype;
use fabcoll_collectives::registry::{self, Algorithm};
use fabcoll_collectives::{CollArgs, Collective, Machine, Params};

use super::{Collectives, Communicator};
use crate::error::Result;
use crate::select::model::predict::predict_filtered_with;
use crate::select::model::Rendezvous;
use crate::select::model::{self, cache, model_err, probe, Estimate, ModelParams};

/// The model state a communicator shares with its dups and splits.
#[derive(Debug)]
pub(crate) struct ModelState {
    params: Mutex<Option<ModelParams>>,
    /// The eager/rendezvous switch of the executor, when the probe fitted one.
    rendezvous: Mutex<Rendezvous>,
    select: AtomicBool,
    choices: Mutex<HashMap<ChoiceKey, Option<(&'static Algorithm, Params)>>>,
}

impl Default for ModelState {
    fn default() -> ModelState {
        ModelState {
            params: Mutex::new(None),
            rendezvous: Mutex::new(Rendezvous::OFF),
            select: AtomicBool::new(model::select_by_model()),
            choices: Mutex::new(HashMap::new()),
        }
    }
}

impl ModelState {
    /// Whether the cost model chooses the algorithms (its choices depend on state that can change,
    /// so the communicator does not memoize calls then).
    pub(crate) fn selecting(&self) -> bool {
        self.select.load(Ordering::Relaxed)
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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

impl Communicator {
    /// The model's machine parameters, if the model was probed, loaded or set.
    pub fn model(&self) -> Option<Machine> {
        self.model_params().map(|m| m.machine())
    }

    /// All the model's parameters (with the copy cost and per-call overhead).
    pub fn model_params(&self) -> Option<ModelParams> {
        *lock(&self.model.params)
    }

    /// Sets the model's parameters on this rank (and its dups and splits). With model selection
    /// on, every rank must set the same parameters, or ranks may choose different algorithms.
    pub fn set_model(&self, params: ModelParams) -> Result<()> {
        params.validate()?;
        *lock(&self.model.params) = Some(params);
        lock(&self.model.choices).clear();
        Ok(())
    }

    /// The eager/rendezvous switch the model charges (`Rendezvous::OFF` unless a probe or a
    /// model file fitted one).
    pub fn model_rendezvous(&self) -> Rendezvous {
        *lock(&self.model.rendezvous)
    }

    /// Sets the model's eager/rendezvous switch (same rule as [`Communicator::set_model`]).
    pub fn set_model_rendezvous(&self, rdv: Rendezvous) -> Result<()> {
        rdv.validate()?;
        *lock(&self.model.rendezvous) = rdv;
        lock(&self.model.choices).clear();
        Ok(())
    }

    /// Turns model selection on or off for this communicator and its dups and splits (default:
    /// `FABCOLL_SELECT=model`). Every rank must make the same setting. Without parameters the
    /// decisions choose.
    pub fn set_select_model(&self, on: bool) {
        self.model.select.store(on, Ordering::Relaxed);
    }

    /// The fabric this communicator runs on, as `FABCOLL_FABRIC` would name it to open the same
    /// (`shm`, `ofi:net`, `ofi:tcp;ofi_rxm`, …): on ofi the provider that opened, which for
    /// `FABCOLL_FABRIC=ofi:tcp` is `net` where libfabric has it.
    pub fn fabric_name(&self) -> String {
        let eng = self.lock();
        let caps = &eng.core.caps;
        if caps.backend == "ofi" {
            format!("ofi:{}", caps.provider)
        } else {
            caps.backend.to_owned()
        }
    }

    /// Probes the machine now (collective: every rank calls it) and keeps the parameters; see
    /// `select::model::probe`. The cache file is not touched.
    pub fn probe_model(&self) -> Result<probe::ProbeReport> {
        let report = probe::run(self)?;
        self.set_model(report.params)?;
        self.set_model_rendezvous(report.rendezvous)?;
        Ok(report)
    }

    /// Collective: parameters from `FABCOLL_MODEL`, else from this machine's cache file for this
    /// fabric and p-class, else from a probe (rank 0 then writes the cache file). Rank 0 reads
    /// and broadcasts, so every rank ends with the same parameters; a corrupt cache file is
    /// reported and probed over. A bad `FABCOLL_MODEL` file is an error on every rank.
    pub fn load_or_probe_model(&self) -> Result<ModelParams> {
        let path = cache::dir().map(|d| cache::path_in(&d, &cache::hostname(), &self.fabric_name(), self.size()));
        // [status, params (ModelParams::to_wire), eager limit (-1 = no switch), rendezvous α]:
        // status 1 = loaded, 0 = probe, -1 = FABCOLL_MODEL failed.
        const P: usize = ModelParams::WIRE_LEN;
        let mut wire = [0.0f64; P + 3];
        if self.rank() == 0 {
            let loaded = match model::explicit_file() {
                Some(f) => cache::load_explicit(&f).map(Some).map_err(|e| {
                    tracing::error!("{e}");
                    wire[0] = -1.0;
                }),
                None => Ok(path.as_deref().and_then(|p| match cache::load(p) {
                    Ok(f) => f.map(|f| (f.params, f.rendezvous.unwrap_or(Rendezvous::OFF))),
                    Err(e) => {
                        tracing::warn!("model cache: {e}; probing again");
                        None
                    }
                })),
            };
            if let Ok(Some((m, r))) = loaded {
                let limit = if r.eager_limit == u64::MAX { -1.0 } else { r.eager_limit as f64 };
                wire[0] = 1.0;
                wire[1..=P].copy_from_slice(&m.to_wire());
                wire[P + 1] = limit;
                wire[P + 2] = r.alpha;
            }
        }
        self.bcast(&mut wire, 0)?;
        let status = wire[0] as i32;
        let (params, rdv) = match status {
            1 => {
                let params = ModelParams::from_wire(&wire[1..=P]);
                let rdv = if wire[P + 1] < 0.0 {
                    Rendezvous::OFF
                } else {
                    Rendezvous { eager_limit: wire[P + 1] as u64, alpha: wire[P + 2] }
                };
                (params, rdv)
            }
            -1 => return Err(model_err("FABCOLL_MODEL could not be loaded on rank 0 (see its log)")),
            _ => {
                let report = probe::run(self)?;
                if self.rank() == 0 {
                    if let Some(p) = &path {
                        let mut file =
                            cache::ModelFile::new(&cache::hostname(), &self.fabric_name(), self.size(), report.params);
                        file.rendezvous = Some(report.rendezvous);
                        if let Err(e) = cache::save(p, &file) {
                            tracing::warn!("model cache not written: {e}");
                        }
                    }
                }
                (report.params, report.rendezvous)
            }
        };
        self.set_model(params)?;
        self.set_model_rendezvous(rdv)?;
        Ok(params)
    }

    /// Predicted times of every eligible algorithm (and segment choice) for a call of `count`
    /// elements of `dtype` per block (OSU semantics: the whole buffer of allreduce/bcast/reduce/
    /// scan, one rank's block of gather/allgather/scatter, one pair's block of alltoall, every
    /// block of a v-variant), fastest first. Nothing runs. Uses the communicator's parameters,
    /// else (without keeping them) `FABCOLL_MODEL` or this machine's cache file.
    pub fn estimate(
        &self,
        coll: Collective,
        count: usize,
        dtype: Datatype,
        commutative: bool,
    ) -> Result<Vec<Estimate>> {
        let (m, rdv) = match self.model_params() {
            Some(m) => (m, self.model_rendezvous()),
            None => self.stored_model()?,
        };
        let args = call_args(coll, self.size(), count as u64, dtype.size() as u32, commutative);
        args.validate()?;
        model::predict::predict_with(&args, &m, &rdv)
    }

    /// Parameters from `FABCOLL_MODEL` or the cache file, without a collective.
    fn stored_model(&self) -> Result<(ModelParams, Rendezvous)> {
        if let Some(f) = model::explicit_file() {
            return cache::load_explicit(&f);
        }
        let dir = cache::dir().ok_or_else(|| model_err("no cache directory (set FABCOLL_MODEL_DIR or HOME)"))?;
        let path = cache::path_in(&dir, &cache::hostname(), &self.fabric_name(), self.size());
        cache::load(&path)?.map(|f| (f.params, f.rendezvous.unwrap_or(Rendezvous::OFF))).ok_or_else(|| {
            model_err(format!(
                "no model parameters: probe them (Communicator::load_or_probe_model, `fabcoll model`) or set \
                 FABCOLL_MODEL; {} does not exist",
                path.display()
            ))
        })
    }

    /// The model's choice for a call under model selection: `None` when model selection is off,
    /// there are no parameters, the caller passed parameters of their own, or nothing could be
    /// simulated (the decisions choose then).
    pub(crate) fn model_pick(&self, args: &CollArgs) -> Result<Option<(&'static Algorithm, Params)>> {
        if !self.model.select.load(Ordering::Relaxed) || args.params.iter().next().is_some() {
            return Ok(None);
        }
        let Some(m) = self.model_params() else { return Ok(None) };
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
        if let Some(c) = lock(&self.model.choices).get(&key) {
            return Ok(c.clone());
        }
        let mut canon = call_args(key.coll, p, key.count, key.elem, key.commutative);
        canon.in_place = in_place;
        let rdv = self.model_rendezvous();
        let choice = match predict_filtered_with(&canon, &m, &rdv, |a| a.restrictions.violated(args).is_none()) {
            Ok(est) => match est.into_iter().next() {
                Some(e) => Some((registry::find(key.coll, e.algorithm)?, e.params)),
                None => None,
            },
            Err(e) => {
                tracing::debug!("model selection for {}: {e}; the decisions choose", key.coll);
                None
            }
        };
        lock(&self.model.choices).insert(key, choice.clone());
        Ok(choice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!((bucket(0), bucket(1), bucket(3), bucket(4), bucket(1000)), (0, 1, 2, 4, 512));
    }
}
