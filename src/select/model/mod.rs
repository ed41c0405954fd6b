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
//!   [`Machine`]), local copies at κ s/byte (`SimConfig::copy_beta`) and reductions at γ s/byte.
//!   Long messages may be pipelined: the model tries `segment` ∈ {none, ≈ n/4, ≈ n/16} (≥ 8 KiB).
//! - α is what one message costs *through the executor*: the wire latency plus the per-message
//!   software overhead (posting, completion, eager-slot bookkeeping), as NCCL folds its per-step
//!   latencies into its `baseLat`/`hwLat` table. `o` is the per-call overhead (start, schedule
//!   build, wait): the same for every algorithm, so it never changes the choice, but fitting it
//!   separately keeps it out of α, where it would penalize algorithms with many messages.
//!
//! The parameters come from a short probe over the communicator ([`probe`]) — the executor's own
//! collectives with forced algorithms, fitted by weighted least squares ([`fit`]) — cached per
//! machine, fabric and p-class in a JSON file ([`cache`]), or from `FABCOLL_MODEL=<file>`.
//! `FABCOLL_SELECT=model` makes the default selection use the model's argmin ([`predict()`]); the
//! decisions (embedded default, `FABCOLL_TUNING_FILE`) stay the default. [`compare`] checks the
//! model against a tuner log.
//!
//! # Known gaps
//!
//! The eager/zero-copy switch is modelled by [`Rendezvous`] (a message above the executor's eager
//! threshold pays a fitted α_r more). A message whose receiver forwards, reduces or copies what
//! it got pays a fitted α_h + n·β_h more ([`ModelParams::hot_alpha`], [`ModelParams::hot_beta`],
//! the simulator's hot destinations): the receiver has to act on it, and on shared memory the
//! next call's writer takes those lines out of the receiver's cache. The probe determines them
//! at p ≥ 4 only (`bcast:linear` against binomial and ring; see [`fit`]). On node fabrics a
//! message holds its ports for only a share of α ([`ModelParams::gap`], LogGP's gap; the
//! simulator's `SimConfig::gap`), so a rank's next message leaves before its last one has
//! arrived: a constant 0.3 there, which the probe's points cannot tell apart from α and o (see
//! `probe::NODE_GAP` for the measurement behind it). There, too, a rank's own CPU moves the bytes
//! of its sends ([`ModelParams::cpu_sends`], the simulator's `SimConfig::cpu_sends`), so it
//! cannot reduce while it sends and a pipeline's segments do not hide reductions (see
//! `probe::node_shape`). Two terms exist in
//! the simulator and the model file but the probe leaves them off where it cannot measure them: a fixed cost per local step
//! ([`ModelParams::step_cost`], `SimConfig::step_cost`; 0 from the probe, see [`fit`]) and
//! ranks time-sharing the node's cores ([`ModelParams::cores`], `SimConfig::cores`; the probe
//! fits with and without it when p > cores and keeps the better fit — on the 2-core
//! development machine at p = 4 that was "without": a busy rank there waits for a scheduling
//! slot, ≈ 10 µs a message, which no factor k/c on a transfer describes). So where ranks
//! outnumber cores, α, o and f_α still measure the scheduler and vary run to run.
//! Scratch-buffer setup is not modelled, nor are cache tiers: every byte costs the same β whether
//! the message fits the receiver's cache or not. At p = 4 on 2 cores a bcast of 2–4 MiB
//! pipelined in 0.5–1 MiB segments of a binomial tree measured 1.3–1.6× faster than unsegmented
//! (a forwarded segment is still in L2), which the model, seeing no pipelining gain there, does
//! not pick; a per-byte surcharge above the L2 size did not help (it priced every large message
//! into segments). At small p many algorithms have the same schedule
//! shape and the model cannot tell them apart: within [`predict::TIE`] the fewest steps win,
//! then registry order.

pub mod cache;
pub mod compare;
pub mod fit;
pub mod predict;
pub mod probe;

use fabcoll_collectives::{Machine, Params};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use predict::{predict, predict_with, Estimate};

/// The fitted parameters of one machine and fabric (seconds, seconds per byte).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelParams {
    /// Per-message latency through the executor (wire + per-message software overhead).
    pub alpha: f64,
    /// Transfer time per byte.
    pub beta: f64,
    /// Reduction time per byte (f32 sum kernel on this CPU).
    pub gamma: f64,
    /// Latency factor of a transfer whose sender also receives (≥ 1 = slower than one-way).
    pub f_alpha: f64,
    /// Bandwidth factor of a transfer whose sender also receives.
    pub f_beta: f64,
    /// Local copy time per byte (memcpy on this CPU).
    #[serde(default)]
    pub copy_beta: f64,
    /// Per-call overhead, added to every prediction.
    #[serde(default)]
    pub overhead: f64,
    /// Fixed cost of one local step (`Copy` or `Reduce`) through the executor, on top of its
    /// bytes: dispatch, kernel start, a cold scratch buffer (`SimConfig::step_cost`). Written
    /// only when set, so files stay readable by builds that predate it.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub step_cost: f64,
    /// Cores the job's ranks share on this node when all of them are on it (shm, local), else 0
    /// (= one core per rank): p > cores time-shares them (`SimConfig::cores`). Written only when
    /// set.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub cores: u32,
    /// Extra seconds of a message into a destination its receiver reads in the same call
    /// (forwards, reduces, copies: `SimConfig::hot_alpha`): the receiver has to act on it, and
    /// where ranks share cores, be scheduled first. Written only when set.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub hot_alpha: f64,
    /// ... and extra seconds per byte of it (`SimConfig::hot_beta`): on a load/store fabric the
    /// next call's writer first takes those lines from the receiver's cache. Written only when set.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub hot_beta: f64,
    /// Share of α during which a message holds the sender's and receiver's ports (LogGP's gap as
    /// a share of the latency, `SimConfig::gap`); 1 = Hockney. Written only when below 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub gap: f64,
    /// Whether a rank's own CPU moves the bytes of its sends (node fabrics: the sender's thread
    /// writes into the peer's memory), so that it transfers or computes, never both at once
    /// (`SimConfig::cpu_sends`). Written only when set.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cpu_sends: bool,
}

/// What the simulator assumes of a node besides its costs: the structure under which the
/// probe's least squares fit the costs ([`fit::terms_on`]), not fitted by them.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct NodeShape {
    /// [`ModelParams::cores`].
    pub cores: u32,
    /// [`ModelParams::gap`].
    pub gap: f64,
    /// [`ModelParams::cpu_sends`].
    pub cpu_sends: bool,
}

impl NodeShape {
    /// The papers' machine: a core and a NIC per rank, Hockney's model.
    pub const HOCKNEY: NodeShape = NodeShape { cores: 0, gap: 1.0, cpu_sends: false };
}

fn one() -> f64 {
    1.0
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

impl ModelParams {
    /// Length of [`ModelParams::to_wire`].
    pub const WIRE_LEN: usize = 13;

    /// The parameters as numbers, for the rank that measured or loaded them to broadcast.
    pub fn to_wire(&self) -> [f64; Self::WIRE_LEN] {
        [
            self.alpha,
            self.beta,
            self.gamma,
            self.f_alpha,
            self.f_beta,
            self.copy_beta,
            self.overhead,
            self.step_cost,
            f64::from(self.cores),
            self.hot_alpha,
            self.hot_beta,
            self.gap,
            f64::from(u8::from(self.cpu_sends)),
        ]
    }

    /// The inverse of [`ModelParams::to_wire`] (`w` holds at least [`ModelParams::WIRE_LEN`] numbers).
    pub fn from_wire(w: &[f64]) -> ModelParams {
        ModelParams {
            alpha: w[0],
            beta: w[1],
            gamma: w[2],
            f_alpha: w[3],
            f_beta: w[4],
            copy_beta: w[5],
            overhead: w[6],
            step_cost: w[7],
            cores: w[8] as u32,
            hot_alpha: w[9],
            hot_beta: w[10],
            gap: w[11],
            cpu_sends: w[12] == 1.0,
        }
    }

    /// The simulator's machine.
    pub fn machine(&self) -> Machine {
        Machine { alpha: self.alpha, beta: self.beta, gamma: self.gamma, f_alpha: self.f_alpha, f_beta: self.f_beta }
    }

    /// Parameters from a machine (no copy cost, no per-call overhead).
    pub fn from_machine(m: Machine) -> ModelParams {
        ModelParams {
            alpha: m.alpha,
            beta: m.beta,
            gamma: m.gamma,
            f_alpha: m.f_alpha,
            f_beta: m.f_beta,
            copy_beta: 0.0,
            overhead: 0.0,
            step_cost: 0.0,
            cores: 0,
            hot_alpha: 0.0,
            hot_beta: 0.0,
            gap: 1.0,
            cpu_sends: false,
        }
    }

    /// The structure part of the parameters.
    pub fn shape(&self) -> NodeShape {
        NodeShape { cores: self.cores, gap: self.gap, cpu_sends: self.cpu_sends }
    }

    /// These costs on the node `shape`.
    pub fn with_shape(self, shape: NodeShape) -> ModelParams {
        ModelParams { cores: shape.cores, gap: shape.gap, cpu_sends: shape.cpu_sends, ..self }
    }

    /// Every parameter finite and ≥ 0 (the simulator refuses anything else).
    pub fn validate(&self) -> Result<()> {
        let vals = [
            ("alpha", self.alpha),
            ("beta", self.beta),
            ("gamma", self.gamma),
            ("f_alpha", self.f_alpha),
            ("f_beta", self.f_beta),
            ("copy_beta", self.copy_beta),
            ("overhead", self.overhead),
            ("step_cost", self.step_cost),
            ("hot_alpha", self.hot_alpha),
            ("hot_beta", self.hot_beta),
        ];
        for (name, v) in vals {
            if !v.is_finite() || v < 0.0 {
                return Err(model_err(format!("parameter {name} = {v} must be finite and ≥ 0")));
            }
        }
        if !(0.0..=1.0).contains(&self.gap) {
            return Err(model_err(format!("parameter gap = {} must be in [0, 1]", self.gap)));
        }
        Ok(())
    }

    /// Parses `alpha=1e-6,beta=1e-10,gamma=2e-10[,f_alpha=..,f_beta=..,copy_beta=..,overhead=..]`
    /// (`fabcoll model --machine`; also `step_cost=..`, `hot_alpha=..`, `hot_beta=..`, `gap=..`,
    /// `cores=N`, `cpu_sends=0|1`). Missing factors (and the gap) default to 1, missing costs to 0,
    /// `cpu_sends` to 0.
    pub fn parse_kv(s: &str) -> Result<ModelParams> {
        let mut p = ModelParams::from_machine(Machine { alpha: 0.0, beta: 0.0, gamma: 0.0, f_alpha: 1.0, f_beta: 1.0 });
        let mut seen = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| model_err(format!("{item:?} is not name=value")))?;
            let v: f64 = v.trim().parse().map_err(|_| model_err(format!("{item:?}: {v:?} is not a number")))?;
            let slot = match k.trim() {
                "alpha" => &mut p.alpha,
                "beta" => &mut p.beta,
                "gamma" => &mut p.gamma,
                "f_alpha" => &mut p.f_alpha,
                "f_beta" => &mut p.f_beta,
                "copy_beta" => &mut p.copy_beta,
                "overhead" => &mut p.overhead,
                "step_cost" => &mut p.step_cost,
                "hot_alpha" => &mut p.hot_alpha,
                "hot_beta" => &mut p.hot_beta,
                "gap" => &mut p.gap,
                "cores" => {
                    if v.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&v) {
                        return Err(model_err(format!("{item:?}: cores must be a whole number ≥ 0")));
                    }
                    p.cores = v as u32;
                    seen.push(k.trim().to_owned());
                    continue;
                }
                "cpu_sends" => {
                    if v != 0.0 && v != 1.0 {
                        return Err(model_err(format!("{item:?}: cpu_sends must be 0 or 1")));
                    }
                    p.cpu_sends = v == 1.0;
                    seen.push(k.trim().to_owned());
                    continue;
                }
                other => {
                    return Err(model_err(format!(
                        "unknown parameter {other:?} (alpha, beta, gamma, f_alpha, f_beta, copy_beta, overhead, step_cost, \
                         hot_alpha, hot_beta, gap, cores, cpu_sends)"
                    )))
                }
            };
            *slot = v;
            seen.push(k.trim().to_owned());
        }
        for need in ["alpha", "beta"] {
            if !seen.iter().any(|k| k == need) {
                return Err(model_err(format!("{need} is required")));
            }
        }
        p.validate()?;
        Ok(p)
    }
}

impl std::fmt::Display for ModelParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "alpha={:.3e},beta={:.3e},gamma={:.3e},f_alpha={:.3},f_beta={:.3},copy_beta={:.3e},overhead={:.3e},\
             step_cost={:.3e},hot_alpha={:.3e},hot_beta={:.3e},gap={:.3},cores={},cpu_sends={}",
            self.alpha,
            self.beta,
            self.gamma,
            self.f_alpha,
            self.f_beta,
            self.copy_beta,
            self.overhead,
            self.step_cost,
            self.hot_alpha,
            self.hot_beta,
            self.gap,
            self.cores,
            u8::from(self.cpu_sends)
        )
    }
}

/// The executor's eager/rendezvous switch as the model sees it: a message longer than
/// `eager_limit` bytes goes zero-copy after a grant round trip and costs `alpha` more than
/// `α + nβ` (the simulator's `SimConfig::eager_limit` / `alpha_rendezvous`). Kept apart from
/// [`ModelParams`] so that parameter files and wire formats without it stay valid
/// (= [`Rendezvous::OFF`]).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rendezvous {
    /// Largest eager message, bytes (the executor's `eager_threshold`).
    pub eager_limit: u64,
    /// Extra seconds per message above it.
    pub alpha: f64,
}

impl Rendezvous {
    /// No protocol switch: every message costs `α + nβ`.
    pub const OFF: Rendezvous = Rendezvous { eager_limit: u64::MAX, alpha: 0.0 };

    /// `alpha` finite and ≥ 0.
    pub fn validate(&self) -> Result<()> {
        if !self.alpha.is_finite() || self.alpha < 0.0 {
            return Err(model_err(format!("rendezvous alpha = {} must be finite and ≥ 0", self.alpha)));
        }
        Ok(())
    }

    /// Parses `eager_limit=16384,alpha=3e-6` (`fabcoll model --rendezvous`).
    pub fn parse_kv(s: &str) -> Result<Rendezvous> {
        let mut r = Rendezvous { eager_limit: 0, alpha: 0.0 };
        let (mut has_limit, mut has_alpha) = (false, false);
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| model_err(format!("{item:?} is not name=value")))?;
            let bad = || model_err(format!("{item:?}: {v:?} is not a number"));
            match k.trim() {
                "eager_limit" => {
                    r.eager_limit = v.trim().parse().map_err(|_| bad())?;
                    has_limit = true;
                }
                "alpha" => {
                    r.alpha = v.trim().parse().map_err(|_| bad())?;
                    has_alpha = true;
                }
                other => return Err(model_err(format!("unknown rendezvous parameter {other:?} (eager_limit, alpha)"))),
            }
        }
        if !(has_limit && has_alpha) {
            return Err(model_err("rendezvous needs eager_limit and alpha"));
        }
        r.validate()?;
        Ok(r)
    }

    /// The simulator's configuration for `m` with this protocol switch.
    pub fn sim_config(&self, m: &ModelParams) -> fabcoll_collectives::sim::SimConfig {
        fabcoll_collectives::sim::SimConfig {
            copy_beta: m.copy_beta,
            step_cost: m.step_cost,
            cores: m.cores,
            hot_alpha: m.hot_alpha,
            hot_beta: m.hot_beta,
            gap: m.gap,
            cpu_sends: m.cpu_sends,
            eager_limit: self.eager_limit,
            alpha_rendezvous: self.alpha,
            ..fabcoll_collectives::sim::SimConfig::new(m.machine())
        }
    }
}

/// Whether `FABCOLL_SELECT=model` asks the default selection to use the model (read once;
/// `table`, empty or unset = the decisions; anything else is reported once and ignored).
pub fn select_by_model() -> bool {
    static S: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *S.get_or_init(|| match std::env::var("FABCOLL_SELECT").as_deref() {
        Ok("model") => true,
        Ok("table") | Ok("") | Err(_) => false,
        Ok(other) => {
            tracing::warn!("FABCOLL_SELECT={other:?} is not `model` or `table`; using the decisions");
            false
        }
    })
}

/// `FABCOLL_MODEL=<file>`: explicit parameters to load instead of probing.
pub fn explicit_file() -> Option<std::path::PathBuf> {
    std::env::var_os("FABCOLL_MODEL").filter(|s| !s.is_empty()).map(Into::into)
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

    #[test]
    fn kv_parses_and_rejects() {
        let p = ModelParams::parse_kv("alpha=2e-6, beta=1e-10,gamma=3e-10").unwrap();
        assert_eq!((p.alpha, p.beta, p.gamma, p.f_alpha), (2e-6, 1e-10, 3e-10, 1.0));
        assert!(ModelParams::parse_kv("beta=1").unwrap_err().to_string().contains("alpha is required"));
        assert!(ModelParams::parse_kv("alpha=1,beta=x").is_err());
        assert!(ModelParams::parse_kv("alpha=1,beta=1,delta=2").unwrap_err().to_string().contains("delta"));
        assert!(ModelParams::parse_kv("alpha=-1,beta=1").is_err());
        let back = ModelParams::parse_kv(&p.to_string()).unwrap();
        assert!((back.alpha - p.alpha).abs() < 1e-9 && (back.beta - p.beta).abs() < 1e-13);
        // Sends on the CPU: a flag, 0 or 1, printed and parsed back.
        let node = ModelParams::parse_kv("alpha=1e-6,beta=1e-10,cpu_sends=1,gap=0.3").unwrap();
        assert!(node.cpu_sends && !p.cpu_sends);
        let back = ModelParams::parse_kv(&node.to_string()).unwrap();
        assert_eq!((back.cpu_sends, back.gap), (true, 0.3));
        assert_eq!(ModelParams::from_wire(&node.to_wire()), node);
        assert!(ModelParams::parse_kv("alpha=1,beta=1,cpu_sends=0.5").unwrap_err().to_string().contains("0 or 1"));
    }

    #[test]
    fn rendezvous_parses_and_rejects() {
        let r = Rendezvous::parse_kv("eager_limit=16384, alpha=3e-6").unwrap();
        assert_eq!(r, Rendezvous { eager_limit: 16384, alpha: 3e-6 });
        assert!(Rendezvous::parse_kv("alpha=3e-6").is_err());
        assert!(Rendezvous::parse_kv("eager_limit=1,alpha=-1").is_err());
        assert!(Rendezvous::parse_kv("eager_limit=x,alpha=1").is_err());
        assert!(Rendezvous::parse_kv("eager_limit=1,alpha=1,beta=2").is_err());
    }
}
