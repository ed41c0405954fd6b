//! Liveness probes of an idle [`OfiEndpoint`] (see [`super::OfiConfig::probe_interval`]) and the goodbye of a
//! closing one.
//!
//! Transmit-complete writes to a dead tcp peer may all succeed (bytes handed to the socket) when nothing else is
//! sent to it. A probe is an empty control message (header flag `PROBE`) the receiving endpoint drops unseen;
//! sent to a dead peer, tcp refuses it (`-FI_EAGAIN` while the provider fails to reconnect) or fails it. Refused in
//! two rounds in a row, the endpoint asks the kernel whether the peer still listens (below), and after 3 intervals
//! of refusals `poll` returns [`OfiError::Peer`] naming the peer in any case. Injected writes to a dead tcp peer are
//! refused for good (`write` keeps driving progress and probing meanwhile). On net, writes and sends to a dead peer
//! neither fail nor complete (the provider keeps reconnecting, `ECONNREFUSED`, and reports nothing): a probe that
//! has not left by the next round makes the endpoint ask the kernel whether the peer still listens at its
//! address (a TCP connect, which a live process accepts even when it is not polling); a refusal names the peer.
//! Only connected peers are probed (we exchanged control messages with them or a write to them completed; an
//! unconnected live peer that does not poll would look the same as a dead one), never one that said goodbye
//! (`PROBE | GOODBYE`, sent by `Drop`): an orderly departure is not a death.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, TcpStream};
use std::time::{Duration, Instant};

use super::{OfiEndpoint, OfiError, Post, CTRL_HEADER, GOODBYE, PROBE};

impl OfiEndpoint {
    /// Sends every other connected peer a liveness probe (see [`super::OfiConfig::probe_interval`]); stops early when
    /// all control send buffers are in flight. A failed or long-refused probe names the peer.
    pub(super) fn probe(&mut self) -> Result<(), OfiError> {
        let every = self.probe_interval.unwrap_or_default();
        let patience = every * 3;
        // "Since the last round": rounds come an interval apart, and the times below are taken just after a round
        // began, so a whole interval would only be seen a round later.
        let a_round = every / 2;
        for peer in 0..self.peers.len() {
            if peer as u64 == self.rank || !self.alive[peer] {
                continue;
            }
            if let Some(since) = self.probe_unsent[peer] {
                // The last probe has not left: no second one; a round later, ask whether the peer still listens.
                if since.elapsed() >= a_round {
                    if let Some(addr) = self.listener_gone(peer) {
                        let why = format!(
                            "a liveness probe has not left for {:?} and {addr} refuses connections: peer gone",
                            since.elapsed()
                        );
                        return Err(OfiError::Peer { peer, source: Box::new(OfiError::Timeout(why)) });
                    }
                    self.probe_unsent[peer] = Some(Instant::now());
                }
                continue;
            }
            let Some(slot) = self.free_sends.pop() else { return Ok(()) };
            let off = (self.ctrl_recv_slots + slot) * self.ctrl_max;
            self.send_peer[slot] = peer;
            self.ctrl_buf[off..off + 4].copy_from_slice(&(self.rank as u32 | PROBE).to_le_bytes());
            self.ctrl_buf[off + 4..off + CTRL_HEADER].fill(0);
            // SAFETY: off + CTRL_HEADER lies within ctrl_buf (slot < ctrl_send_slots).
            let buf = unsafe { self.ctrl_buf.as_ptr().add(off) };
            let (desc, dest) = (self.ctrl_mr.desc(), self.peers[peer]);
            // Posted directly, never deferred: probes are unordered, and one to a dead peer must not hold up others.
            match self.try_post(&Post::Send { buf, len: CTRL_HEADER, desc, dest, tag: 0, slot }) {
                Ok(()) => {
                    self.probe_refused[peer] = None;
                    self.probe_unsent[peer] = Some(Instant::now());
                }
                Err(e) if e.is_again() => {
                    self.free_sends.push(slot);
                    let since = *self.probe_refused[peer].get_or_insert_with(Instant::now);
                    // Refused in the last round too: a peer whose address refuses connections is gone; past the
                    // patience, refusals alone name it.
                    let gone = since.elapsed() >= a_round && self.listener_gone(peer).is_some();
                    if gone || since.elapsed() >= patience {
                        let verdict = if gone {
                            ", and its address refuses connections: peer gone"
                        } else {
                            ": peer unreachable"
                        };
                        let why = format!("liveness probes refused for {:?} ({e}){verdict}", since.elapsed());
                        return Err(OfiError::Peer { peer, source: Box::new(OfiError::Timeout(why)) });
                    }
                }
                Err(e) => {
                    self.free_sends.push(slot);
                    return Err(OfiError::Peer { peer, source: Box::new(e) });
                }
            }
        }
        Ok(())
    }

    /// `peer`'s socket address if the kernel refuses connections there: the process that listened is gone (a live
    /// one's listening socket accepts even when it does not poll). `None` also for peers without a socket address.
    fn listener_gone(&self, peer: usize) -> Option<SocketAddr> {
        self.peer_sockets[peer].filter(|a| refuses_connections(*a))
    }

    pub(super) fn mark_alive(&mut self, peer: usize) {
        if let Some(a) = self.alive.get_mut(peer) {
            *a = !self.departed[peer];
            self.probe_unsent[peer] = None;
        }
    }

    /// Orderly departure (from `Drop`, with probes or the exit watch on): tells every connected peer (on shm: every
    /// peer) to stop probing us and not to take our exit for a death, and drives progress briefly (at most 200 ms)
    /// so that the messages leave before the endpoint closes; a refused one is retried meanwhile (shm refuses the
    /// first message to a peer until that peer's progress has set the connection up).
    pub(super) fn say_goodbye(&mut self) {
        let mut todo: Vec<usize> = (0..self.peers.len())
            .filter(|&peer| peer as u64 != self.rank && (self.alive[peer] || self.exit_watch.is_some()))
            .collect();
        let mut sent = Vec::new();
        let t0 = Instant::now();
        loop {
            let mut i = 0;
            while i < todo.len() {
                match self.post_goodbye(todo[i]) {
                    Ok(slot) => {
                        sent.push(slot);
                        todo.swap_remove(i);
                    }
                    Err(e) if e.is_again() || matches!(e, OfiError::Busy(_)) => i += 1,
                    Err(_) => {
                        todo.swap_remove(i);
                    }
                }
            }
            let done = todo.is_empty() && sent.iter().all(|s| self.free_sends.contains(s));
            if done || t0.elapsed() >= Duration::from_millis(200) {
                return;
            }
            let _ = self.progress();
        }
    }

    /// Posts a goodbye to `peer`; the send slot it took.
    fn post_goodbye(&mut self, peer: usize) -> Result<usize, OfiError> {
        let slot = self.free_sends.pop().ok_or(OfiError::Busy("all control send buffers in flight"))?;
        let off = (self.ctrl_recv_slots + slot) * self.ctrl_max;
        self.send_peer[slot] = peer;
        self.ctrl_buf[off..off + 4].copy_from_slice(&(self.rank as u32 | PROBE | GOODBYE).to_le_bytes());
        self.ctrl_buf[off + 4..off + CTRL_HEADER].fill(0);
        // SAFETY: off + CTRL_HEADER lies within ctrl_buf (slot < ctrl_send_slots).
        let buf = unsafe { self.ctrl_buf.as_ptr().add(off) };
        let (desc, dest) = (self.ctrl_mr.desc(), self.peers[peer]);
        match self.try_post(&Post::Send { buf, len: CTRL_HEADER, desc, dest, tag: 0, slot }) {
            Ok(()) => Ok(slot),
            Err(e) => {
                self.free_sends.push(slot);
                Err(e)
            }
        }
    }
}

/// The socket address in a provider address blob that is a `sockaddr_in` or `sockaddr_in6` (tcp, net, sockets).
pub(super) fn socket_addr(blob: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(blob.get(..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(blob.get(2..4)?.try_into().ok()?);
    match i32::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = blob.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
        }
        libc::AF_INET6 => {
            let flow = u32::from_be_bytes(blob.get(4..8)?.try_into().ok()?);
            let ip: [u8; 16] = blob.get(8..24)?.try_into().ok()?;
            let scope = u32::from_ne_bytes(blob.get(24..28)?.try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, flow, scope)))
        }
        _ => None,
    }
}

/// Whether `addr` actively refuses a TCP connection (nobody listens there: the process that did is gone). A timeout
/// or any other failure says nothing.
fn refuses_connections(addr: SocketAddr) -> bool {
    match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_are_read_from_sockaddr_blobs() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&4242u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(socket_addr(&v4), Some("127.0.0.1:4242".parse().unwrap()));
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&80u16.to_be_bytes());
        v6[23] = 1;
        assert_eq!(socket_addr(&v6), Some("[::1]:80".parse().unwrap()));
        assert_eq!(socket_addr(b"fi_shm://1234"), None, "shm names are not sockets");
        assert_eq!(socket_addr(&v4[..6]), None, "truncated");
    }

    #[test]
    fn a_closed_port_refuses_and_a_listener_does_not() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        assert!(!refuses_connections(addr));
        drop(l);
        assert!(refuses_connections(addr));
    }
}
