//! (in progress)

pub mod bootstrap;
