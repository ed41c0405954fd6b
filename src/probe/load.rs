//! The [`Communicator`] methods that give it a cost model by probing the machine or by loading
//! the parameters (`FABCOLL_MODEL`, this machine's cache file).

use super::{run, share, NO_PARAMS};
use crate::comm::Communicator;
use crate::error::Result;
use crate::select::model::probe::ProbeReport;
use crate::select::model::{cache, explicit_file, model_err, ModelParams};

/// What rank 0 found, as [`share`] sends it.
const LOADED: f64 = 1.0;
const PROBE: f64 = 0.0;
const FAILED: f64 = -1.0;

impl Communicator {
    /// Probes the machine now (collective: every rank calls it) and keeps the parameters; see
    /// `select::model::probe`. The cache file is not touched.
    pub fn probe_model(&self) -> Result<ProbeReport> {
        let report = run(self)?;
        self.set_model(report.params)?;
        Ok(report)
    }

    /// Collective: parameters from `FABCOLL_MODEL`, else from this machine's cache file for this
    /// fabric and p-class, else from a probe (rank 0 then writes the cache file). Rank 0 reads
    /// and broadcasts, so every rank ends with the same parameters; a corrupt cache file is
    /// reported and probed over. A bad `FABCOLL_MODEL` file is an error on every rank.
    pub fn load_or_probe_model(&self) -> Result<ModelParams> {
        let path = cache::dir().map(|d| cache::path_in(&d, &cache::hostname(), &self.fabric_name(), self.size()));
        let (mut status, mut found) = (PROBE, None);
        if self.rank() == 0 {
            match explicit_file() {
                Some(f) => match cache::load_params(&f) {
                    Ok(m) => found = Some(m),
                    Err(e) => {
                        tracing::error!("{e}");
                        status = FAILED;
                    }
                },
                None => match path.as_deref().map(cache::load).transpose() {
                    Ok(f) => found = f.flatten().map(|f| f.model()),
                    Err(e) => tracing::warn!("model cache: {e}; probing again"),
                },
            }
            if found.is_some() {
                status = LOADED;
            }
        }
        let (status, loaded) = share(self, status, &found.unwrap_or(NO_PARAMS))?;
        let params = if status == LOADED {
            loaded
        } else if status == FAILED {
            return Err(model_err("FABCOLL_MODEL could not be loaded on rank 0 (see its log)"));
        } else {
            let report = run(self)?;
            if let (0, Some(p)) = (self.rank(), &path) {
                let file = cache::ModelFile::new(&cache::hostname(), &self.fabric_name(), self.size(), report.params);
                if let Err(e) = cache::save(p, &file) {
                    tracing::warn!("model cache not written: {e}");
                }
            }
            report.params
        };
        self.set_model(params)?;
        Ok(params)
    }
}
