//! The modelled machine's parameters: what the simulator replays on, what the cost model fits and
//! what its files hold (one struct for all three).
//!
//! The five numbers of the papers (α, β, γ, f_α, f_β) are fields here, as in the files, and
//! [`ModelParams::machine`] gives them as the [`Machine`] that the cost formulas take; the rest
//! extend the papers' machine (see the simulator's module doc for what each one does). The
//! serde form is the model file's `params` object: a field added after the first files were
//! written has a default and is written only when it differs from it, so files stay readable by
//! builds that predate it (they deny unknown fields).

use serde::{Deserialize, Serialize};

use crate::cost::Machine;
use crate::error::{Error, Result};

/// The parameters of one machine and fabric (seconds, seconds per byte).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelParams {
    /// Per-message latency (through the executor: wire plus per-message software overhead).
    pub alpha: f64,
    /// Transfer time per byte.
    pub beta: f64,
    /// Reduction time per byte.
    pub gamma: f64,
    /// Latency factor of a transfer whose sender also receives ([`Machine::f_alpha`]).
    pub f_alpha: f64,
    /// Bandwidth factor of a transfer whose sender also receives ([`Machine::f_beta`]).
    pub f_beta: f64,
    /// Seconds per byte of a `Copy` step (0 = copies are free, as in the papers' formulas).
    #[serde(default)]
    pub copy_beta: f64,
    /// Per-call overhead (start, schedule, wait): added to the job's time, the same for every
    /// algorithm.
    #[serde(default)]
    pub overhead: f64,
    /// Fixed seconds of every local step (`Copy` or `Reduce`) on top of its per-byte cost: the
    /// executor's dispatch of the step, the kernel's start, a cold scratch buffer (0 = local
    /// steps cost their bytes only, as in the papers' formulas).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub step_cost: f64,
    /// Cores the ranks share (one node), 0 = as many as ranks (off). With more ranks busy than
    /// cores, the busy ones time-share them (the simulator's Oversubscription).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub cores: u32,
    /// Extra seconds of a message into a hot destination: one that the receiver reads in a step
    /// depending on the message (the simulator's Hot destinations); 0 = off.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub hot_alpha: f64,
    /// ... and extra seconds per byte of it; 0 = off.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub hot_beta: f64,
    /// Share of a message's α during which it holds the ports (LogGP's gap as a share of the
    /// latency, in [0, 1]; the simulator's Gap). 1 = Hockney: the whole `α + nβ`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub gap: f64,
    /// Whether a rank's CPU moves the bytes of its sends (shared memory: the sender's thread
    /// writes them; no NIC works beside it): a rank then transfers or computes, not both at once
    /// (the simulator's Senders' CPU). `false` = the CPU is independent of the ports.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cpu_sends: bool,
    /// The eager/rendezvous switch ([`Rendezvous::OFF`] = none). A model file keeps it beside
    /// `params`, not in it (see `fabcoll::select::model::cache`).
    #[serde(default, skip_serializing_if = "Rendezvous::is_off")]
    pub rendezvous: Rendezvous,
    /// The network between nodes (`None` = one level: every message costs `α + nβ` above,
    /// whatever the call's topology). With it, and a topology in the call, the fields above are
    /// the node's (intra-node α, β, γ) and a message between ranks on different nodes costs
    /// [`Network::alpha`] + n·[`Network::beta`], its bytes serialized on the one network
    /// interface of each node (the simulator's Two levels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
}

/// The inter-node level of a two-level machine: one network interface per node, shared by its
/// ranks (Mamidala et al. 2008 §1: the contention that makes locality-blind algorithms lose).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// Latency of a message between nodes, seconds.
    pub alpha: f64,
    /// Seconds per byte through a node's network interface (each direction: full duplex).
    pub beta: f64,
}

/// The executor's eager/rendezvous switch: a message longer than `eager_limit` bytes goes
/// zero-copy after a grant round trip and costs `alpha` more than `α + nβ` (as MPICH's
/// eager/rendezvous switch).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rendezvous {
    /// Largest eager message, bytes (the executor's eager threshold; `u64::MAX` = no switch).
    pub eager_limit: u64,
    /// Extra seconds per message above it.
    pub alpha: f64,
}

/// What the simulator assumes of a node besides its costs: the structure under which the cost
/// model's least squares fit the costs, not fitted by them.
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

pub(crate) fn model_err(msg: impl Into<String>) -> Error {
    Error::Model(msg.into())
}

impl ModelParams {
    /// The machine `m` and nothing else: free copies, no overhead, the papers' node
    /// ([`NodeShape::HOCKNEY`]), no rendezvous switch.
    pub const fn new(m: Machine) -> ModelParams {
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
            rendezvous: Rendezvous::OFF,
            network: None,
        }
    }

    /// These costs inside a node and `network` between nodes.
    pub const fn with_network(self, network: Network) -> ModelParams {
        ModelParams { network: Some(network), ..self }
    }

    /// The five parameters the cost formulas take.
    pub const fn machine(&self) -> Machine {
        Machine { alpha: self.alpha, beta: self.beta, gamma: self.gamma, f_alpha: self.f_alpha, f_beta: self.f_beta }
    }

    /// The structure part of the parameters.
    pub const fn shape(&self) -> NodeShape {
        NodeShape { cores: self.cores, gap: self.gap, cpu_sends: self.cpu_sends }
    }

    /// These costs on the node `shape`.
    pub const fn with_shape(self, shape: NodeShape) -> ModelParams {
        ModelParams { cores: shape.cores, gap: shape.gap, cpu_sends: shape.cpu_sends, ..self }
    }

    /// Every cost finite and ≥ 0, the gap in [0, 1] (the simulator refuses anything else).
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
        if let Some(n) = &self.network {
            n.validate()?;
        }
        self.rendezvous.validate()
    }

    /// Length of [`ModelParams::to_wire`].
    pub const WIRE_LEN: usize = 17;

    /// The parameters as numbers, for the rank that measured or loaded them to broadcast.
    /// (`eager_limit` goes as an `f64`: exact up to 2^53 bytes, and `u64::MAX` comes back as
    /// itself; no network goes as two −1.)
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
            self.rendezvous.eager_limit as f64,
            self.rendezvous.alpha,
            self.network.map_or(-1.0, |n| n.alpha),
            self.network.map_or(-1.0, |n| n.beta),
        ]
    }

    /// The inverse of [`ModelParams::to_wire`].
    pub fn from_wire(w: &[f64; Self::WIRE_LEN]) -> ModelParams {
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
            rendezvous: Rendezvous { eager_limit: w[13] as u64, alpha: w[14] },
            network: (w[15] >= 0.0).then_some(Network { alpha: w[15], beta: w[16] }),
        }
    }
}

impl Network {
    /// `alpha` and `beta` finite and ≥ 0.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [("net_alpha", self.alpha), ("net_beta", self.beta)] {
            if !v.is_finite() || v < 0.0 {
                return Err(model_err(format!("parameter {name} = {v} must be finite and ≥ 0")));
            }
        }
        Ok(())
    }
}

impl Rendezvous {
    /// No protocol switch: every message costs `α + nβ`.
    pub const OFF: Rendezvous = Rendezvous { eager_limit: u64::MAX, alpha: 0.0 };

    /// Whether this is [`Rendezvous::OFF`].
    pub fn is_off(&self) -> bool {
        *self == Rendezvous::OFF
    }

    /// `alpha` finite and ≥ 0.
    pub fn validate(&self) -> Result<()> {
        if !self.alpha.is_finite() || self.alpha < 0.0 {
            return Err(model_err(format!("rendezvous alpha = {} must be finite and ≥ 0", self.alpha)));
        }
        Ok(())
    }
}

impl Default for Rendezvous {
    /// [`Rendezvous::OFF`].
    fn default() -> Rendezvous {
        Rendezvous::OFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> ModelParams {
        ModelParams {
            copy_beta: 4e-11,
            overhead: 2e-6,
            step_cost: 1e-7,
            cores: 2,
            hot_alpha: 2e-7,
            hot_beta: 3e-11,
            gap: 0.3,
            cpu_sends: true,
            rendezvous: Rendezvous { eager_limit: 16384, alpha: 3e-6 },
            ..ModelParams::new(Machine { alpha: 1.5e-6, beta: 1e-10, gamma: 2e-10, f_alpha: 1.1, f_beta: 1.7 })
        }
    }

    #[test]
    fn wire_round_trip() {
        let two = node().with_network(Network { alpha: 5e-6, beta: 1e-9 });
        for m in [node(), ModelParams::new(Machine::UNIT), two] {
            assert_eq!(ModelParams::from_wire(&m.to_wire()), m);
        }
    }

    #[test]
    fn machine_and_shape() {
        let m = node();
        assert_eq!(ModelParams::new(m.machine()).machine(), m.machine());
        assert_eq!(ModelParams::new(m.machine()).with_shape(m.shape()).shape(), m.shape());
        assert_eq!(ModelParams::new(Machine::UNIT).shape(), NodeShape::HOCKNEY);
    }

    #[test]
    fn validate_names_the_bad_parameter() {
        assert!(node().validate().is_ok());
        let e = ModelParams { hot_beta: -1.0, ..node() }.validate().unwrap_err().to_string();
        assert!(e.contains("hot_beta"), "{e}");
        let e = ModelParams { gap: 1.5, ..node() }.validate().unwrap_err().to_string();
        assert!(e.contains("gap"), "{e}");
        let rdv = Rendezvous { eager_limit: 1, alpha: f64::NAN };
        assert!(ModelParams { rendezvous: rdv, ..node() }.validate().is_err());
        let e = node().with_network(Network { alpha: 1e-6, beta: -1.0 }).validate().unwrap_err().to_string();
        assert!(e.contains("net_beta"), "{e}");
    }
}
