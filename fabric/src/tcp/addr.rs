//! Which local IP the `tcp` backend listens on and publishes to its peers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};

use crate::error::{Error, Result};

/// `FABCOLL_TCP_ADDR` (an IP, or `ip:port`), else the local address that routes to the job's
/// store host (`FABCOLL_STORE` = `tcp://host:port` / `host:port`, or `MASTER_ADDR`), else loopback.
pub(super) fn listen_addr() -> Result<SocketAddr> {
    if let Ok(s) = std::env::var("FABCOLL_TCP_ADDR") {
        return parse_listen(&s);
    }
    let store_host = std::env::var("FABCOLL_STORE")
        .ok()
        .filter(|s| !s.starts_with("file://"))
        .map(|s| s.trim_start_matches("tcp://").to_string())
        .or_else(|| std::env::var("MASTER_ADDR").ok().map(|h| format!("{h}:1")));
    let ip = match store_host {
        Some(h) => route_to(&h).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        None => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    Ok(SocketAddr::new(ip, 0))
}

fn parse_listen(s: &str) -> Result<SocketAddr> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 0));
    }
    s.parse::<SocketAddr>()
        .map_err(|e| Error::invalid(format!("FABCOLL_TCP_ADDR=`{s}` is neither an IP nor ip:port ({e})")))
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
    fn listen_addresses_parse() {
        assert_eq!(parse_listen("127.0.0.1").unwrap(), "127.0.0.1:0".parse().unwrap());
        assert_eq!(parse_listen(" 10.0.0.2:4000 ").unwrap(), "10.0.0.2:4000".parse().unwrap());
        assert_eq!(parse_listen("::1").unwrap(), "[::1]:0".parse().unwrap());
        assert!(parse_listen("eth0").unwrap_err().to_string().contains("FABCOLL_TCP_ADDR"));
    }

    #[test]
    fn loopback_store_routes_to_loopback() {
        assert_eq!(route_to("127.0.0.1:5000"), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
}
