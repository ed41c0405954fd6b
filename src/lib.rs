//! fabcoll: MPI-style collective communication without MPI.
//!
//! The crate joins two layers (see `../shared/ARCHITECTURE.md`):
//! - [`collectives`]: the pure core — schedules, datatypes, reduction kernels, algorithms,
//!   verifier, cost model and simulator. No I/O.
//! - [`fabric`]: the thin RMA layer — libfabric, node shared memory, in-process ranks — and the
//!   bootstrap store.
//!
//! The communicator and executor that run schedules over a fabric come on top of these.

pub use fabcoll_collectives as collectives;
pub use fabcoll_fabric as fabric;
