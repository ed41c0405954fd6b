//! Errors of the pure core. Invalid parameters are errors, never panics.

use crate::args::Collective;

/// Everything that can go wrong when building, verifying or simulating a schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An argument is out of range or inconsistent (root ≥ p, wrong counts length, …).
    #[error("invalid argument for {coll}: {msg}")]
    InvalidArgument { coll: Collective, msg: String },
    /// The algorithm exists but its restrictions do not hold for these arguments.
    #[error("{coll}:{alg} cannot be used here: {reason}")]
    Restriction { coll: Collective, alg: &'static str, reason: String },
    /// No algorithm of that name for that operation.
    #[error("no algorithm {name:?} for {coll} (known: {known})")]
    UnknownAlgorithm { coll: Collective, name: String, known: String },
    /// A parameter is unknown or out of its range.
    #[error("{coll}:{alg}: parameter {param}: {msg}")]
    Parameter { coll: Collective, alg: &'static str, param: String, msg: String },
    /// A size computation overflowed (count × p, displacement + count, …).
    #[error("size overflow in {coll}: {what}")]
    Overflow { coll: Collective, what: String },
    /// The verifier found a defect in a schedule (carries a human-readable description).
    #[error("verification failed: {0}")]
    Verify(String),
    /// The simulator could not replay a job (deadlock, unmatched message, …).
    #[error("simulation failed: {0}")]
    Simulate(String),
    /// A topology is malformed (a node without ranks, a level that does not fit the one below).
    #[error("topology: {0}")]
    Topology(String),
    /// A model parameter is out of range, or its text form is malformed (`sim::ModelParams`).
    #[error("cost model: {0}")]
    Model(String),
    /// A datatype or reduction-op name that does not exist.
    #[error("unknown {kind} {name:?} (known: {known})")]
    UnknownName { kind: &'static str, name: String, known: String },
    /// A reduction cannot run: op not defined on the datatype, buffer lengths wrong, …
    #[error("reduce {op} on {datatype}: {msg}")]
    Reduce { op: String, datatype: &'static str, msg: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
