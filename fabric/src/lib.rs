//! (in progress)
#![deny(unsafe_op_in_unsafe_fn)]

pub mod bootstrap;
pub mod ofi;
