//! The cost model's probe, run over a communicator: times the configurations that
//! `select::model::probe` plans, with their algorithms forced, has rank 0 fit them there and
//! gives its fit to every rank; and the [`Communicator`] methods that probe the model or load it
//! (`probe_model`, `load_or_probe_model`, in `load.rs`).
//!
//! It sits above the communicator (it runs collectives) and above selection (what it times and
//! how it fits): nothing below imports it. The probe measures the engine's executor: it runs on a
//! duplicate communicator without the mailboxes, whose per-message cost is a fraction of the
//! engine's and would otherwise set α for the messages of every size. About 0.2–1 s at p ≤ 8.
//!
//! On a job over several nodes whose rank 0 shares its node, the model has two levels (issue 35,
//! `ModelParams::network`): the node's parameters come from the probe on each node's
//! communicator (`split_by_node`; node 0's fit is kept), the network's α and β from the probe
//! among the node leaders (`node_leaders`: one rank per node, so its messages all cross nodes).

mod load;
mod timing;

use std::time::Instant;

use fabcoll_collectives::sim::Network;
use fabcoll_collectives::Machine;

use crate::comm::{Collectives, Communicator};
use crate::error::Result;
use crate::select::model::probe::{fit_timings, is_node_fabric, node_shape, plan, ProbeReport};
use crate::select::model::{model_err, ModelParams};

/// Probe rounds before a fit failure is an error.
const PROBE_ATTEMPTS: usize = 3;

/// Rank 0's `status` and `params` on every rank (collective; the other ranks' are ignored).
fn share(comm: &Communicator, status: f64, params: &ModelParams) -> Result<(f64, ModelParams)> {
    const P: usize = ModelParams::WIRE_LEN;
    let mut wire = [0.0f64; P + 1];
    wire[0] = status;
    wire[1..].copy_from_slice(&params.to_wire());
    comm.bcast(&mut wire, 0)?;
    let mut w = [0.0f64; P];
    w.copy_from_slice(&wire[1..]);
    Ok((wire[0], ModelParams::from_wire(&w)))
}

/// What a rank without parameters of its own puts on the wire (rank 0's replace it).
const NO_PARAMS: ModelParams = ModelParams::new(Machine::UNIT);

/// Runs the probe (collective: every rank of `comm` must call it): two levels on a job over
/// several nodes whose rank 0 shares its node (see the module doc), else one.
pub(crate) fn run(comm: &Communicator) -> Result<ProbeReport> {
    let t = comm.topology();
    if t.nodes() > 1 && t.local_size(0) > 1 {
        run_two_levels(comm)
    } else {
        run_one_level(comm)
    }
}

/// The node level from each node's probe (rank 0's node's fit), the network's α and β from the
/// leaders'; rank 0 holds both and gives them to every rank. Samples: rank 0's, node level first.
fn run_two_levels(comm: &Communicator) -> Result<ProbeReport> {
    let start = Instant::now();
    let node = comm.split_by_node()?;
    let inner = run_one_level(&node)?;
    let leaders = comm.node_leaders()?;
    let outer = leaders.as_ref().map(run_one_level).transpose()?;
    let mut params = inner.params;
    if let Some(o) = &outer {
        params.network = Some(Network { alpha: o.params.alpha, beta: o.params.beta });
    }
    let (_, params) = share(comm, 1.0, &params)?;
    let mut samples = inner.samples;
    samples.extend(outer.into_iter().flat_map(|o| o.samples));
    if comm.rank() != 0 {
        samples.clear();
    }
    Ok(ProbeReport { params, samples, elapsed: start.elapsed().as_secs_f64() })
}

/// The probe of one level: every rank of `comm` alike. At p = 1 nothing moves: the parameters
/// are γ and κ with α = β = 0.
fn run_one_level(comm: &Communicator) -> Result<ProbeReport> {
    let start = Instant::now();
    let p = comm.size();
    // The endpoint's own limit: network fabrics default to a larger one than node fabrics.
    let eager_limit = comm.eager_limit() as u64;
    let shape = node_shape(&comm.fabric_name(), job_cores(comm));
    let engine = comm.dup_on_engine()?;
    // Rank 0 measures the CPU and fits; the result (or a failure flag) goes to every rank. On a
    // busy node one round of timings can be too noisy to fit (e.g. times that do not grow with
    // bytes): the whole probe is repeated, on every rank alike, before giving up.
    for attempt in 1..=PROBE_ATTEMPTS {
        let mut samples = timing::time_cases(&engine, plan(p))?;
        let mut fitted = None;
        if comm.rank() == 0 {
            match fit_timings(p, &samples, eager_limit, shape) {
                Ok(m) => fitted = Some(m),
                Err(e) => tracing::warn!("model probe, attempt {attempt} of {PROBE_ATTEMPTS}: {e}"),
            }
        }
        let (status, params) = share(comm, f64::from(u8::from(fitted.is_some())), &fitted.unwrap_or(NO_PARAMS))?;
        if status == 1.0 {
            if comm.rank() != 0 {
                samples.clear();
            }
            return Ok(ProbeReport { params, samples, elapsed: start.elapsed().as_secs_f64() });
        }
    }
    Err(model_err(format!("the probe's fit failed {PROBE_ATTEMPTS} times on rank 0 (see its log)")))
}

/// The cores the job's ranks share when every rank is on this node (`shm`, `local`): the CPUs
/// any of them may run on, as the engine counts them (`Communicator::shared_cpus`: the union of
/// the ranks' CPU sets, agreed as they joined), else 0 (unknown: one core per rank). Not this
/// process's own count: `fabrun` pins rank r to one CPU, so `available_parallelism` says 1 in
/// every rank of a 2-rank job on 2 CPUs, and the fit then priced every exchange as two ranks on
/// one core (p = 2 shm: f_α = 0.28, f_β = 0.29).
fn job_cores(comm: &Communicator) -> u32 {
    if !is_node_fabric(&comm.fabric_name()) {
        return 0;
    }
    u32::try_from(comm.shared_cpus()).unwrap_or(u32::MAX)
}
