//! The communicator's cost-model methods (issue 5 §1): its parameters, [`Communicator::estimate`]
//! — every eligible algorithm's predicted time for a call, without running anything (like NCCL's
//! group simulate) — and the switch of model selection (`FABCOLL_SELECT=model`).
//!
//! The state behind them, and the model's choice that `plan` consults, is
//! `select::model::ModelState`, shared with dups and splits; probing and loading the parameters
//! run collectives and live above the communicator (`src/probe`).

use fabcoll_collectives::datatype::Datatype;
use fabcoll_collectives::{Collective, Machine};

use super::Communicator;
use crate::error::Result;
use crate::select::model::{Estimate, ModelParams};

impl Communicator {
    /// The model's machine parameters, if the model was probed, loaded or set.
    pub fn model(&self) -> Option<Machine> {
        self.model_params().map(|m| m.machine())
    }

    /// All the model's parameters (with the copy cost, per-call overhead, rendezvous switch, …).
    pub fn model_params(&self) -> Option<ModelParams> {
        self.model.params()
    }

    /// Sets the model's parameters on this rank (and its dups and splits). With model selection
    /// on, every rank must set the same parameters, or ranks may choose different algorithms.
    pub fn set_model(&self, params: ModelParams) -> Result<()> {
        self.model.set_params(params)
    }

    /// Turns model selection on or off for this communicator and its dups and splits (default:
    /// `FABCOLL_SELECT=model`). Every rank must make the same setting. Without parameters the
    /// decisions choose.
    pub fn set_select_model(&self, on: bool) {
        self.model.set_selecting(on);
    }

    /// The fabric this communicator runs on, as `FABCOLL_FABRIC` would name it to open the same
    /// (`shm`, `ofi:net`, `ofi:tcp;ofi_rxm`, …): on ofi the provider that opened, which for
    /// `FABCOLL_FABRIC=ofi:tcp` is `net` where libfabric has it. It names the model's cache file.
    pub fn fabric_name(&self) -> String {
        let eng = self.lock();
        let caps = &eng.core.caps;
        if caps.backend == "ofi" {
            format!("ofi:{}", caps.provider)
        } else {
            caps.backend.to_owned()
        }
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
        let elem = dtype.size() as u32;
        self.model.estimate(&self.fabric_name(), coll, self.size(), count as u64, elem, commutative)
    }
}
