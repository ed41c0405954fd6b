//! Which congestion control a TCP connection between ranks uses (`TCP_CONGESTION`): the tcp
//! backend's connections (`apply`) and the socket providers' under ofi (`ofi::sockets`).
//!
//! Congestion control shares a network path among flows. Two ranks on the same host share none:
//! their bytes go through the kernel's loopback, yet the system's algorithm still regulates them,
//! and BBR paces every large message at the rate it estimated. So a connection to a rank on this
//! host (loopback peer, or the same address at both ends) uses Reno, which every kernel has and
//! lets any user choose (`tcp_allowed_congestion_control`); on an idle loopback it never backs
//! off. Connections to other hosts keep the system's choice. `FABCOLL_TCP_CONGESTION` overrides
//! both: an algorithm name for every connection, or `system` for none. Measurements:
//! `docs/measurements/2026-11-27-tcp.md`.

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

use crate::error::{Error, Result};
use crate::settings::{self, Knob};

/// The algorithm of connections between ranks of one host, unless the environment says otherwise.
pub(crate) const SAME_HOST: &str = "reno";

/// The knob that overrides the choice.
const ENV: &Knob<String> = &settings::FABCOLL_TCP_CONGESTION;

/// The algorithm to set on a connection (`None`: keep the system's), from the value of
/// [`ENV`] and whether the peer runs on this host.
pub(crate) fn choice(env: Option<&str>, same_host: bool) -> Option<&str> {
    match env.map(str::trim) {
        Some("system") => None,
        Some(name) if !name.is_empty() => Some(name),
        _ => same_host.then_some(SAME_HOST),
    }
}

/// Whether the two ends of a connection are on one host: a loopback peer, or the same address.
pub(crate) fn same_host(local: SocketAddr, peer: SocketAddr) -> bool {
    let loopback = match peer.ip() {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    };
    loopback || peer.ip() == local.ip()
}

/// The value of [`ENV`], if set.
pub(crate) fn env_choice() -> Result<Option<String>> {
    Ok(ENV.get()?)
}

/// Sets congestion control `name` on TCP socket `fd`.
fn set(fd: RawFd, name: &str) -> std::io::Result<()> {
    // SAFETY: the option value is `name`'s bytes, for its length; an fd that is not a TCP socket
    // makes the call fail, nothing else.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast::<libc::c_void>(),
            name.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sets on TCP socket `fd` the algorithm [`choice`] picks from `env` (the value of [`ENV`]) and
/// `same_host`; returns whether it set one. A name the user chose that the kernel refuses is an
/// error naming `what` (the connection); the default for ranks of one host that the kernel refuses
/// leaves the system's choice (logged).
pub(crate) fn apply_to(fd: RawFd, env: Option<&str>, same_host: bool, what: &dyn Fn() -> String) -> Result<bool> {
    let Some(name) = choice(env, same_host) else { return Ok(false) };
    match set(fd, name) {
        Ok(()) => Ok(true),
        Err(e) if env.is_some() => {
            let allowed =
                std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control").unwrap_or_default();
            Err(Error::invalid(format!(
                "{}={name}: the kernel refused it for {} ({e}); allowed here: {}",
                ENV.name,
                what(),
                allowed.trim()
            )))
        }
        Err(e) => {
            tracing::debug!(connection = what(), name, error = %e, "congestion control not set; the system's stays");
            Ok(false)
        }
    }
}

/// Sets the congestion control of the connection to `peer` (see the module doc and [`apply_to`]).
pub(crate) fn apply(stream: &TcpStream, peer: usize) -> Result<()> {
    let same = match (stream.local_addr(), stream.peer_addr()) {
        (Ok(local), Ok(remote)) => same_host(local, remote),
        _ => false,
    };
    apply_to(stream.as_raw_fd(), env_choice()?.as_deref(), same, &|| format!("the connection to rank {peer}")).map(drop)
}

/// The congestion control of TCP socket `fd` as the kernel reports it (empty if `fd` is none).
pub fn current(fd: RawFd) -> String {
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes; the kernel writes at most that and updates `len`.
    let r = unsafe {
        libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, buf.as_mut_ptr().cast::<libc::c_void>(), &mut len)
    };
    if r != 0 {
        return String::new();
    }
    String::from_utf8_lossy(&buf[..len as usize]).trim_end_matches('\0').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn same_host_peers_get_reno_unless_the_environment_says_otherwise() {
        assert_eq!(choice(None, true), Some("reno"));
        assert_eq!(choice(None, false), None);
        assert_eq!(choice(Some("system"), true), None);
        assert_eq!(choice(Some(" cubic "), false), Some("cubic"));
        assert_eq!(choice(Some(""), true), Some("reno"));
    }

    #[test]
    fn a_loopback_connection_is_same_host_and_takes_the_algorithm() {
        if ENV.get().unwrap().is_some() {
            return; // the test's expectation is the default
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        for s in [&a, &b] {
            assert!(same_host(s.local_addr().unwrap(), s.peer_addr().unwrap()));
        }
        apply(&a, 1).unwrap();
        assert_eq!(current(a.as_raw_fd()), SAME_HOST);
    }
}
