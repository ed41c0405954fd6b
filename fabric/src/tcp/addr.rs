//! Which local IP the `tcp` backend listens on and publishes to its peers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};

use crate::bootstrap::StoreAddr;
use crate::error::Result;
use crate::settings;

/// `FABCOLL_TCP_ADDR` (an IP, or `ip:port`), else the local address that routes to the job's
/// store host (`FABCOLL_STORE` = `tcp://host:port` / `host:port`, or `MASTER_ADDR`), else loopback.
pub(super) fn listen_addr() -> Result<SocketAddr> {
    if let Some(at) = settings::FABCOLL_TCP_ADDR.get()? {
        return Ok(at);
    }
    let store_host = match settings::FABCOLL_STORE.get()? {
        Some(StoreAddr::Tcp(h)) => Some(h),
        Some(StoreAddr::File(_)) => None,
        None => std::env::var("MASTER_ADDR").ok().map(|h| format!("{h}:1")),
    };
    let ip = match store_host {
        Some(h) => route_to(&h).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        None => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    Ok(SocketAddr::new(ip, 0))
}

/// The local IP the kernel would use to reach `host:port` (a UDP `connect` sends nothing).
fn route_to(host_port: &str) -> Option<IpAddr> {
    let target = host_port.to_socket_addrs().ok()?.next()?;
    if target.ip().is_loopback() {
        return Some(target.ip());
    }
    let bind: SocketAddr = if target.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().ok()?;
    let s = UdpSocket::bind(bind).ok()?;
    s.connect(target).ok()?;
    Some(s.local_addr().ok()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_store_routes_to_loopback() {
        assert_eq!(route_to("127.0.0.1:5000"), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
}
