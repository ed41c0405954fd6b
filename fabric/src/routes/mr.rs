//! A routed registration: the same memory registered in the node-local and in the network
//! backend. Its descriptor is the network one with the node-local `(addr, key)` attached
//! (`RemoteMr::node`), so one descriptor serves peers on either route.

use std::any::Any;

use crate::error::{Error, Result};
use crate::mr::{Mr, MrBackend, NodeKey, RemoteMr};

/// The backend part of a routed [`Mr`]: the registration in each backend. Dropping it
/// deregisters the network one first, then the node-local one, which may own the memory
/// (`alloc`), so the memory outlives both registrations.
pub struct RoutedMr {
    // Declaration order = drop order.
    network: Mr,
    node: Mr,
}

impl MrBackend for RoutedMr {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl RoutedMr {
    /// The routed registration made of `node` and `network`, registrations of the same memory.
    pub(crate) fn join(node: Mr, network: Mr) -> Result<Mr> {
        if node.as_ptr() != network.as_ptr() || node.len() != network.len() {
            return Err(Error::invalid(format!(
                "routed registration: node-local {:?}+{} and network {:?}+{} are not the same memory",
                node.as_ptr(),
                node.len(),
                network.as_ptr(),
                network.len()
            )));
        }
        let (n, w) = (node.remote(), network.remote());
        let remote = RemoteMr { node: Some(NodeKey { addr: n.addr, key: n.key }), ..w.network_part() };
        let (ptr, len, access, desc) = (network.as_ptr(), network.len(), network.access(), network.local_desc());
        // SAFETY: `[ptr, ptr+len)` is the memory of both registrations, which the backend part
        // keeps alive (the node-local one owns it when it came from `alloc`; else the caller of
        // `register` guarantees it, as for the two registrations).
        Ok(unsafe { Mr::from_parts(ptr, len, access, desc, remote, Box::new(RoutedMr { network, node }), None) })
    }

    /// The routed part of `mr`; a registration not made by a routed endpoint is an error.
    pub fn of(mr: &Mr) -> Result<&RoutedMr> {
        mr.backend()
            .as_any()
            .downcast_ref::<RoutedMr>()
            .ok_or_else(|| Error::invalid("a registration of another endpoint used on a routed endpoint"))
    }

    /// The node-local backend's registration.
    pub fn node(&self) -> &Mr {
        &self.node
    }

    /// The network backend's registration.
    pub fn network(&self) -> &Mr {
        &self.network
    }
}
