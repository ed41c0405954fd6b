//! Routes: one endpoint over two backends, so that one communicator reaches the peers on its
//! node through shared memory and the others through the network fabric (issue 35, point 2).
//!
//! [`RoutedEndpoint`] implements [`Endpoint`](crate::Endpoint) over a node-local endpoint (shm,
//! among the ranks of this node, numbered by local rank) and a network endpoint (tcp, `ofi:*`,
//! among all ranks). Each peer has one route ([`RouteTable`]); ranks are translated on the way
//! in and out, so the caller sees global ranks only. A registration is made in both backends
//! ([`RoutedMr`]; `alloc` comes from the node-local one, so node peers can map it) and its
//! descriptor carries both keys (`RemoteMr::node`). Both endpoints are opened and connected by
//! the caller (the communicator's bootstrap); this module only routes. Traffic is counted per
//! route class ([`RouteCounters`](crate::RouteCounters)).

mod caps;
mod endpoint;
mod mr;
mod table;
#[cfg(test)]
mod tests;

pub use endpoint::RoutedEndpoint;
pub use mr::RoutedMr;
pub use table::{Route, RouteTable};
