//! The TCP connections of a socket provider (tcp, net, sockets): their congestion control.
//!
//! These providers open their connections on demand and offer no option for the congestion
//! control, so the system's applies; BBR, for one, paces loopback traffic (see
//! [`crate::congestion`]). Once every peer has been heard from, the endpoint finds its
//! sockets among the process's file descriptors — the listener (connections it accepts later
//! inherit its setting) and the connections whose local address is the endpoint's or whose peer
//! is a peer's — and sets on each the algorithm `crate::congestion::choice` picks: Reno between
//! ranks of one host, `FABCOLL_TCP_CONGESTION` if set (`system`: none). Other sockets of the
//! process are never touched. A connection the provider opens later (after a peer restarted its
//! side) keeps the system's algorithm: that costs speed only. Measurements: `docs/measurements/2026-11-27-tcp.md`.

use std::net::SocketAddr;
use std::os::fd::RawFd;

use super::probe::socket_addr;
use super::{OfiEndpoint, OfiError};
use crate::congestion;

/// A TCP socket of this process: its descriptor, local address and peer (none for a listener).
struct Socket {
    fd: RawFd,
    local: SocketAddr,
    peer: Option<SocketAddr>,
}

impl OfiEndpoint {
    /// Sets the congestion control of this endpoint's TCP sockets (see the module doc); returns
    /// how many were set. Nothing for providers whose addresses are not socket addresses.
    pub fn tune_connections(&mut self) -> Result<usize, OfiError> {
        let Some(own) = self.own_socket() else { return Ok(0) };
        let peers: Vec<SocketAddr> = self.peer_sockets.iter().flatten().copied().filter(|&a| a != own).collect();
        let env = congestion::env_choice().map_err(|e| OfiError::Invalid(e.to_string()))?;
        let mut set = 0;
        for s in tcp_sockets() {
            let mine = s.local.port() == own.port() && (own.ip().is_unspecified() || s.local.ip() == own.ip());
            let same_host = match s.peer {
                Some(p) if mine || peers.contains(&p) => congestion::same_host(s.local, p),
                Some(_) => continue,
                // The listener: its connections come from the peers.
                None if mine => peers.iter().all(|&p| congestion::same_host(s.local, p)),
                None => continue,
            };
            let what = || format!("the provider's connection {} -> {:?}", s.local, s.peer);
            match congestion::apply_to(s.fd, env.as_deref(), same_host, &what) {
                Ok(done) => set += usize::from(done),
                Err(e) => return Err(OfiError::Invalid(e.to_string())),
            }
        }
        tracing::debug!(sockets = set, "ofi: congestion control of the provider's connections set");
        Ok(set)
    }

    /// Whether endpoint rank `peer` runs on this host (its published address is a loopback address
    /// or this endpoint's own); `None` where addresses are not socket addresses (shm, verbs).
    pub fn same_host(&self, peer: usize) -> Option<bool> {
        let theirs = self.peer_sockets.get(peer).copied().flatten()?;
        Some(congestion::same_host(self.own_socket()?, theirs))
    }

    /// The socket address this endpoint published, if it has one.
    fn own_socket(&self) -> Option<SocketAddr> {
        self.peer_sockets.get(self.rank as usize).copied().flatten()
    }
}

/// The process's TCP sockets (IPv4 and IPv6), from `/proc/self/fd`.
fn tcp_sockets() -> Vec<Socket> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<RawFd>().ok()) else { continue };
        if !std::fs::read_link(entry.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")) {
            continue;
        }
        if int_option(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) != Some(libc::IPPROTO_TCP) {
            continue;
        }
        let Some(local) = name_of(fd, libc::getsockname) else { continue };
        out.push(Socket { fd, local, peer: name_of(fd, libc::getpeername) });
    }
    out
}

/// An integer socket option of `fd`.
fn int_option(fd: RawFd, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` is writable for `len` bytes; a descriptor that is not a socket fails the call.
    let r = unsafe { libc::getsockopt(fd, level, name, (&raw mut v).cast::<libc::c_void>(), &mut len) };
    (r == 0).then_some(v)
}

type NameFn = unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

/// The address `get` (getsockname or getpeername) reports for `fd`, if it is an inet one.
fn name_of(fd: RawFd, get: NameFn) -> Option<SocketAddr> {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `ss` is writable for `len` bytes; the kernel writes at most that and updates `len`.
    let r = unsafe { get(fd, (&raw mut ss).cast::<libc::sockaddr>(), &mut len) };
    if r != 0 {
        return None;
    }
    // SAFETY: `ss` is a plain struct of `size_of::<sockaddr_storage>()` bytes, `len` of them written.
    let bytes = unsafe {
        std::slice::from_raw_parts((&raw const ss).cast::<u8>(), (len as usize).min(std::mem::size_of_val(&ss)))
    };
    socket_addr(bytes)
}
