//! Cost-model selection (issue 5 §1): measure the machine once, predict every eligible algorithm's
//! time with the simulator, choose the minimum.
//!
//! # Model
//!
//! A call's predicted time is `o + T_sim(schedule; α, β, γ, f_α, f_β, κ)`:
//!
//! - `T_sim` is the simulator's replay (`fabcoll_collectives::sim`) of the algorithm's schedule on
//!   the α–β–γ machine of thakur §3 with Rabenseifner's bidirectional factors (a transfer whose
//!   sender is also receiving costs `f_α·α + f_β·n·β` instead of `α + n·β`, see
//!   [`Machine`](fabcoll_collectives::Machine)), local copies at κ s/byte
//!   ([`ModelParams::copy_beta`]) and reductions at γ s/byte. The simulator adds `o`
//!   ([`ModelParams::overhead`]): its parameters and the model's are one struct, [`ModelParams`]
//!   (defined with the simulator, re-exported here).
//!   Long messages may be pipelined: the model tries `segment` ∈ {none, ≈ n/4, ≈ n/16} (≥ 8 KiB).
//! - α is what one message costs *through the executor*: the wire latency plus the per-message
//!   software overhead (posting, completion, eager-slot bookkeeping), as NCCL folds its per-step
//!   latencies into its `baseLat`/`hwLat` table. `o` is the per-call overhead (start, schedule
//!   build, wait): the same for every algorithm, so it never changes the choice, but fitting it
//!   separately keeps it out of α, where it would penalize algorithms with many messages.
//!
//! The parameters come from a short probe over the communicator — the executor's own collectives
//! with forced algorithms ([`probe`]: what is timed and how it is fitted; the run itself is
//! `Communicator::load_or_probe_model`, in `src/probe`, above the communicator), fitted by
//! weighted least squares ([`fit`]) — cached per
//! machine, fabric and p-class in a JSON file ([`cache`]), or from `FABCOLL_MODEL=<file>`.
//! `FABCOLL_SELECT=model` makes the default selection use the model's argmin ([`predict()`]); the
//! decisions (embedded default, `FABCOLL_TUNING_FILE`) stay the default; the communicator keeps
//! its parameters and choices in a `ModelState` (`state.rs`). [`compare`] checks the model
//! against a tuner log.
//!
//! # Known gaps
//!
//! The eager/zero-copy switch is modelled by [`ModelParams::rendezvous`] (a message above the
//! executor's eager threshold pays a fitted α_r more). A message whose receiver forwards, reduces or copies what
//! it got pays a fitted α_h + n·β_h more ([`ModelParams::hot_alpha`], [`ModelParams::hot_beta`],
//! the simulator's hot destinations): the receiver has to act on it, and on shared memory the
//! next call's writer takes those lines out of the receiver's cache. The probe determines them
//! at p ≥ 4 only (`bcast:linear` against binomial and ring; see [`fit`]). On node fabrics a
//! message holds its ports for only a share of α ([`ModelParams::gap`], LogGP's gap; the
//! simulator's Gap), so a rank's next message leaves before its last one has
//! arrived: a constant 0.3 there, which the probe's points cannot tell apart from α and o (see
//! `probe::NODE_GAP` for the measurement behind it). There, too, a rank's own CPU moves the bytes
//! of its sends ([`ModelParams::cpu_sends`], the simulator's Senders' CPU), so it
//! cannot reduce while it sends and a pipeline's segments do not hide reductions (see
//! `probe::node_shape`). Two terms exist in the simulator and the model file but the probe
//! leaves them off where it cannot measure them: a fixed cost per local step
//! ([`ModelParams::step_cost`]; 0 from the probe, see [`fit`]) and ranks time-sharing the
//! node's cores ([`ModelParams::cores`]; the probe
//! fits with and without it when p > cores and keeps the better fit — on the 2-core
//! development machine at p = 4 that was "without": a busy rank there waits for a scheduling
//! slot, which no factor k/c on a transfer describes). So where ranks
//! outnumber cores, α, o and f_α still measure the scheduler and vary run to run.
//! Scratch-buffer setup is not modelled, nor are cache tiers: every byte costs the same β whether
//! the message fits the receiver's cache or not. A bcast pipelined in segments of a binomial tree
//! ran faster than unsegmented where a forwarded segment is still in L2, which the model, seeing
//! no pipelining gain there, does not pick; a per-byte surcharge above the L2 size did not help
//! (it priced every large message into segments). Measurements: `docs/measurements/2026-11-27-cost-model.md`. At small p many algorithms have the same schedule
//! shape and the model cannot tell them apart: within [`predict::TIE`] the fewest steps win,
//! then registry order.

pub mod cache;
pub mod compare;
pub mod fit;
pub mod predict;
pub mod probe;
mod state;

use fabcoll_collectives::Params;
use fabcoll_fabric::settings::{self, Selection};

use crate::error::Error;

pub use fabcoll_collectives::sim::{ModelParams, Network, NodeShape, Rendezvous};
pub use predict::{predict, Estimate};
pub(crate) use state::ModelState;

/// Whether `FABCOLL_SELECT=model` ([`settings`]) asks the default selection to use the model
/// (read once; `table` or unset = the decisions; a bad value is reported once and ignored).
pub fn select_by_model() -> bool {
    static S: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *S.get_or_init(|| match settings::FABCOLL_SELECT.get() {
        Ok(s) => s == Some(Selection::Model),
        Err(e) => {
            tracing::warn!("{e}; using the decisions");
            false
        }
    })
}

/// `FABCOLL_MODEL=<file>`: explicit parameters to load instead of probing.
pub fn explicit_file() -> Option<std::path::PathBuf> {
    settings::FABCOLL_MODEL.get().ok().flatten()
}

/// Smallest pipeline segment the model tries, bytes.
pub const MIN_SEGMENT: u64 = 8 << 10;

/// `segment` candidates (bytes) for a message of `msg` bytes: a quarter and a sixteenth of it,
/// rounded down to powers of two, at least [`MIN_SEGMENT`]. At most 16 pieces per message keep
/// a replay at about a thousand steps (the replay's cost grows faster than its step count).
pub fn segment_candidates(msg: u64) -> Vec<u64> {
    let mut v: Vec<u64> = [4u64, 16]
        .into_iter()
        .map(|d| msg / d)
        .filter(|&s| s >= MIN_SEGMENT)
        .map(|s| 1 << (63 - s.leading_zeros()))
        .collect();
    v.dedup();
    v
}

/// Parameters of a candidate with `segment` bytes at `elem_size` bytes per element (none for 0).
pub fn segment_params(segment_bytes: u64, elem_size: u32) -> Params {
    let mut p = Params::new();
    if segment_bytes > 0 {
        p.set(fabcoll_collectives::args::SEGMENT, (segment_bytes / u64::from(elem_size.max(1))).max(1));
    }
    p
}

pub(crate) fn model_err(msg: impl Into<String>) -> Error {
    Error::InvalidArgument { coll: "cost model", msg: msg.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_candidates_are_bounded() {
        assert!(segment_candidates(16 << 10).is_empty());
        assert_eq!(segment_candidates(64 << 10), vec![16 << 10]);
        assert_eq!(segment_candidates(3 << 20), vec![512 << 10, 128 << 10]);
    }
}
