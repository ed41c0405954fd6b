//! Decision files: the versioned JSON format of selection rules (issue 5 §2). This module holds
//! the data types — the contract between the loader/validator (`select`), the autotuner
//! (`fabcoll tune`, which writes files) and the embedded default (the papers' cutoffs).
//!
//! ```json
//! {
//!   "format": "fabcoll-decisions",
//!   "version": 1,
//!   "provenance": { "tool": "fabcoll tune", "machine": "...", "fabric": "shm", "ranks": [2, 4],
//!                   "created": "2026-11-22T14:00:00Z", "notes": "..." },
//!   "rules": [
//!     { "op": "allreduce", "p": [2, 4], "bytes": [0, 2048], "commutative": true,
//!       "algorithm": "recursive_doubling", "params": {}, "fallbacks": ["ring"] },
//!     { "op": "allreduce", "fabric": "network", "p": [1, 2], "bytes": [0, 65536],
//!       "algorithm": "recursive_doubling" }
//!   ]
//! }
//! ```
//!
//! Semantics: rules of an operation are tried in file order; the first rule whose conditions all
//! hold and whose algorithm (or, failing that, one of its fallbacks, in order) is registered and
//! eligible for the call wins. Ranges are inclusive `[min, max]`; an absent condition always
//! holds. `bytes` is the per-block message size in bytes as the OSU benchmarks count it
//! (allreduce/reduce/bcast/scan: the whole per-rank buffer; allgather/gather: one rank's
//! contribution; alltoall/scatter: one peer's block; v-variants: the average block), `total`
//! the bytes of the whole result, `fabric` the [`FabricClass`] of the communicator's endpoint
//! (`"node"`: shm, local, libfabric's shm provider; `"network"`: every other libfabric provider
//! such as tcp, verbs, efa, cxi), `nodes` the number of nodes the communicator's ranks sit on and
//! `per_node` the most ranks on one node (from the call's topology; a call without one counts
//! every rank as a node of its own: nodes = p, per_node = 1), `own_cpu` whether each rank has
//! a CPU of its own: no node of the job holds more ranks than its machine's CPUs
//! (`FABCOLL_LOCAL_CPUS`, else the union of the CPU sets of the machine's ranks; alike on every
//! rank). A file written before `fabric`,
//! `nodes`, `per_node` or `own_cpu` existed has no such condition and loads unchanged. Every operation must end with a rule without conditions (the
//! fallback), so every call gets an answer.
//!
//! A file may cover only some operations; the embedded default answers the others. Validation
//! (and the compiled form used for lookup) is [`Decisions`](super::Decisions); writing is
//! [`DecisionFile::to_json`] (header pretty-printed, one rule per line).

use std::collections::BTreeMap;

use fabcoll_fabric::Caps;
use serde::{Deserialize, Serialize};

/// The value of `format`.
pub const FORMAT_NAME: &str = "fabcoll-decisions";
/// The version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// A whole decision file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionFile {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] for files this build writes.
    pub version: u32,
    /// Where the rules came from (tuner runs record machine, fabric and p).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    pub rules: Vec<RuleSpec>,
}

/// Where a file came from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// What wrote it: "embedded defaults (thakur 2005 §4, §5.4)", "fabcoll tune", ….
    pub tool: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub machine: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fabric: String,
    /// Communicator sizes measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<u32>,
    /// RFC 3339 time of writing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
}

/// The class of fabric a communicator runs on, as rules and per-fabric executor defaults see it:
/// node-local fabrics move bytes by memory copies (a message costs about as much as its copy),
/// network fabrics pay a per-message latency an order of magnitude above shm's and a round trip
/// per rendezvous, so they favour fewer, larger messages.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FabricClass {
    /// Ranks of one node sharing memory: `local`, `shm`, and libfabric's `shm` provider. The
    /// class of calls whose fabric is not known (e.g. offline selection).
    #[default]
    Node,
    /// Every other libfabric provider (`tcp`, `verbs`, `efa`, `cxi`, …).
    Network,
}

impl FabricClass {
    /// The class of an endpoint from its capabilities.
    pub fn of(caps: &Caps) -> FabricClass {
        FabricClass::of_backend(caps.backend, &caps.provider)
    }

    /// The class of a fabric as `FABCOLL_FABRIC` names it (`shm`, `ofi:tcp`, …).
    pub fn of_name(fabric: &str) -> FabricClass {
        let fabric = fabric.trim();
        let (backend, provider) = fabric.split_once(':').unwrap_or((fabric, ""));
        FabricClass::of_backend(backend, provider)
    }

    fn of_backend(backend: &str, provider: &str) -> FabricClass {
        match (backend, provider) {
            ("local" | "shm", _) | ("ofi", "shm") => FabricClass::Node,
            _ => FabricClass::Network,
        }
    }

    /// `node` or `network`, as files spell it.
    pub fn name(self) -> &'static str {
        match self {
            FabricClass::Node => "node",
            FabricClass::Network => "network",
        }
    }
}

impl std::fmt::Display for FabricClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One rule: conditions → algorithm + parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// Operation name as `Collective::from_name` reads it ("allreduce", "alltoallv", …).
    pub op: String,
    /// Holds only on this class of fabric (see [`FabricClass`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<FabricClass>,
    /// Inclusive range of communicator sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<[u64; 2]>,
    /// Inclusive range of the number of nodes the ranks sit on (see the module doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<[u64; 2]>,
    /// Inclusive range of the most ranks on one node (see the module doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_node: Option<[u64; 2]>,
    /// Inclusive range of the per-block message size in bytes (see the module doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<[u64; 2]>,
    /// Inclusive range of the whole result's size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<[u64; 2]>,
    /// Holds only for commutative (`true`) or non-commutative (`false`) reductions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commutative: Option<bool>,
    /// Holds only when p is (`true`) or is not (`false`) a power of two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pow2: Option<bool>,
    /// Holds only when every rank on a node has a CPU of its own (`true`) or when they share
    /// (`false`; more ranks on the node than CPUs, as the executor counts them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_cpu: Option<bool>,
    /// Registered algorithm name (`fabcoll info`).
    pub algorithm: String,
    /// The algorithm's parameters (`segment`, `barriers`, …). `segment` is in BYTES here (the
    /// selection converts it to elements of the call's datatype, at least 1); the others are as
    /// `Params` takes them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, u64>,
    /// Tried in order when `algorithm`'s restrictions do not hold for a call (they run with
    /// their default parameters).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One measured point of the autotuner (`fabcoll tune`), one JSON object per line in its log
/// (JSON Lines). The log makes a tuning run resumable and feeds the model-versus-measurement
/// comparison (`fabcoll model --compare`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub op: String,
    pub p: u32,
    /// `shm`, `ofi:tcp`, … (as `FABCOLL_FABRIC` names it).
    pub fabric: String,
    pub algorithm: String,
    /// As in [`RuleSpec::params`] (`segment` in bytes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, u64>,
    /// Per-block message size in bytes (see the module doc).
    pub bytes: u64,
    /// Median over the kept repetitions of the per-repetition average latency, µs (max over ranks).
    pub median_us: f64,
    /// Every repetition's average latency, µs, including rejected outliers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples_us: Vec<f64>,
    /// Measured with every rank reading its receive buffer after each call (`fabcoll tune
    /// --touch`); absent = untouched buffers, as OSU and `fabcoll bench` measure by default.
    #[serde(default, skip_serializing_if = "is_false")]
    pub touch: bool,
}
