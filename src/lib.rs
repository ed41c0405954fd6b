//! fabcoll: MPI-style collective communication without MPI.
//!
//! The crate joins two layers (see `../shared/ARCHITECTURE.md`):
//! - [`collectives`]: the pure core — schedules, datatypes, reduction kernels, algorithms,
//!   verifier, cost model and simulator. No I/O.
//! - [`fabric`]: the thin RMA layer — libfabric, node shared memory, in-process ranks — and the
//!   bootstrap store.
//!
//! On top: [`Communicator`] (typed collectives, blocking and nonblocking, split/dup), the executor
//! that runs any algorithm's schedule over a fabric endpoint (eager slots with credits for small
//! messages, zero-copy writes into granted destinations for large ones, an MR cache), and the
//! default algorithm selection ([`select`]). Every knob is in one table, [`settings`], set from
//! the environment (`FABCOLL_*`) or from code.
//!
//! ```no_run
//! use fabcoll::{Collectives, Communicator, ReduceOp};
//! let comms = Communicator::local(4).unwrap();
//! std::thread::scope(|s| {
//!     for c in comms {
//!         s.spawn(move || {
//!             let x = vec![c.rank() as f64; 1000];
//!             let mut y = vec![0.0; 1000];
//!             c.allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
//!         });
//!     }
//! });
//! ```

pub use fabcoll_collectives as collectives;
pub use fabcoll_fabric as fabric;

mod comm;
mod element;
pub mod error;
mod exec;
#[doc(hidden)]
pub mod fuzz;
mod job;
mod probe;
pub mod select;
pub mod tune;

pub use collectives::datatype::{Complex, Datatype, Element, ValueIndex};
/// The `half` crate of [`Element`]'s `f16` and `bf16`, so a program names them without a `half` version of its own
/// to keep in step:
///
/// ```
/// use fabcoll::half::{bf16, f16};
/// use fabcoll::{Datatype, Element};
/// assert_eq!(f16::DATATYPE, Datatype::F16);
/// assert_eq!(bf16::DATATYPE, Datatype::BF16);
/// ```
pub use collectives::half;
pub use collectives::op::{ReduceOp, UserOp};
pub use collectives::{Params, Topology};
pub use comm::{
    Call, Collectives, Communicator, Options, Pinned, Probed, RawCalls, RawRequest, Registered, Request, Scope,
    Transfer, WithOptions,
};
pub use error::{Error, Result};
pub use exec::{ExecConfig, Stats};
/// Every knob (`FABCOLL_*`) in one table, from the environment or from code (`fabric::settings`).
pub use fabric::settings;
