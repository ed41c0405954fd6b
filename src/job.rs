//! Joining the job the environment describes: the communicator (`comm`'s bootstrap) and, when
//! it is asked for, its cost model (`src/probe`). Above both, so that the communicator never
//! imports the probe that runs collectives over it.

use crate::comm::Communicator;
use crate::error::Result;
use crate::select::model::{explicit_file, select_by_model};

impl Communicator {
    /// Joins the job the environment describes (fabrun, torchrun, Slurm or `FABCOLL_*`, see
    /// `fabric::bootstrap::JobEnv`): opens the store, the fabric (`FABCOLL_FABRIC` = `shm`,
    /// `ofi:tcp`, …; default shm when every rank is on this node, else `tcp`), exchanges
    /// addresses and sets up the eager rings. With `FABCOLL_SELECT=model` or `FABCOLL_MODEL`
    /// set, the cost model is then loaded or probed (issue 5 §1; collective, see
    /// [`Communicator::load_or_probe_model`]); where that fails the decisions choose.
    pub fn from_env() -> Result<Communicator> {
        let c = Communicator::join_env()?;
        if select_by_model() || explicit_file().is_some() {
            if let Err(e) = c.load_or_probe_model() {
                tracing::warn!("cost model unavailable ({e}); the decisions choose");
            }
        }
        Ok(c)
    }
}
