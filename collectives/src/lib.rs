//! fabcoll's pure core: what the collective algorithms are, with no I/O.
//!
//! - [`schedule`]: the IR — per rank, a DAG of Send/Recv/Reduce/Copy steps over buffer regions.
//! - [`straight`]: the fixed order the executor runs a schedule in without tracking its
//!   dependencies, and the check that all ranks following it cannot deadlock.
//! - [`lending`]: which messages a receiver may read out of the sender's buffer (the executor's
//!   pulled reductions), and the whole-job check that the sender's wait cannot deadlock.
//! - [`args`]: what a call is (operation, rank, size, counts, root, op properties, parameters).
//! - [`registry`]: one table of every algorithm (restrictions, parameters, cost, constructor).
//! - one module per operation (`bcast`, `allreduce`, …), one file per algorithm, cost formula
//!   and paper section in each file's doc.
//! - [`datatype`], [`op`], [`kernels`]: element types, reduction ops and vectorized kernels.
//! - [`verify`]: executes a whole job symbolically and checks results, matching, deadlock
//!   freedom, races and scratch bounds.
//! - [`cost`], [`sim`]: the α–β–γ model and a replay of a job's schedules in virtual time.
//! - [`topology`]: where ranks sit (nodes, and levels above them); `two_level` builds the
//!   hierarchical (`hier_*`) algorithms' schedules from flat ones run on groups of ranks.
#![deny(unsafe_code)]

pub mod args;
pub mod blocks;
pub mod cost;
pub mod error;
pub mod lending;
pub mod registry;
pub mod schedule;
pub mod straight;
pub mod topology;
pub(crate) mod two_level;

pub mod datatype;
pub mod kernels;
pub mod op;

pub mod sim;
pub mod verify;

pub mod allgather;
pub mod allreduce;
pub mod alltoall;
pub mod barrier;
pub mod bcast;
pub mod gather;
pub mod reduce;
pub mod reduce_scatter;
pub mod scan;
pub mod scatter;

/// The `half` crate whose `f16` and `bf16` are [`datatype::Element`]s, so users name the same types.
pub use half;

pub use args::{CollArgs, Collective, Params};
pub use cost::{Cost, Machine};
pub use error::{Error, Result};
pub use registry::Algorithm;
pub use schedule::{Buf, Order, Region, Schedule, ScheduleBuilder, StepId, StepKind};
pub use topology::Topology;
