//! Connection set-up of the `tcp` backend: every rank connects to each lower rank and accepts
//! each higher one. A connect completes in the kernel's backlog before the peer accepts, and a
//! rank accepts only after its own connects, which by induction from rank 0 (no connects) always
//! complete: no order between ranks is needed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

const HELLO_MAGIC: &[u8; 8] = b"fabtcph1";
/// Bytes of a [`Hello`] (also the start of a tcp endpoint's address blob).
pub(super) const HELLO: usize = 32;

/// Who opens a connection: what its first 32 bytes say (and what a rank's address blob starts with).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hello {
    pub job: u64,
    pub rank: u64,
    pub size: u64,
}

impl Hello {
    pub(super) fn encode(&self) -> [u8; HELLO] {
        let mut b = [0u8; HELLO];
        b[..8].copy_from_slice(HELLO_MAGIC);
        b[8..16].copy_from_slice(&self.job.to_le_bytes());
        b[16..24].copy_from_slice(&self.rank.to_le_bytes());
        b[24..32].copy_from_slice(&self.size.to_le_bytes());
        b
    }

    pub(super) fn decode(b: &[u8; HELLO]) -> Option<Hello> {
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        (&b[..8] == HELLO_MAGIC).then(|| Hello { job: u(8), rank: u(16), size: u(24) })
    }
}

/// Connects this rank (`me`) to all peers at `addrs` (indexed by rank; `me`'s own entry is not
/// used). Returns the streams indexed by rank (`None` at `me`), blocking, before any data.
pub(super) fn mesh(
    listener: &TcpListener,
    me: Hello,
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<Vec<Option<TcpStream>>> {
    let deadline = Instant::now() + timeout;
    let n = addrs.len();
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    for (peer, addr) in addrs.iter().enumerate().take(me.rank as usize) {
        streams[peer] = Some(connect(peer, *addr, me, deadline)?);
    }
    listener.set_nonblocking(true).map_err(|e| Error::Os { op: "listener set_nonblocking".into(), source: e })?;
    let mut missing = n - 1 - me.rank as usize;
    while missing > 0 {
        let (mut s, from) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let absent: Vec<usize> = (me.rank as usize + 1..n).filter(|&r| streams[r].is_none()).collect();
                    return Err(Error::Timeout {
                        after: timeout,
                        what: format!("tcp connections from ranks {absent:?}"),
                    });
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Os { op: "accept".into(), source: e }),
        };
        match read_hello(&mut s, deadline) {
            Some(h) if h.job == me.job && h.size == me.size && h.rank > me.rank && h.rank < me.size => {
                let r = h.rank as usize;
                if streams[r].is_some() {
                    tracing::warn!(rank = r, %from, "tcp: a second connection claims this rank; dropped");
                    continue;
                }
                streams[r] = Some(s);
                missing -= 1;
            }
            other => tracing::warn!(%from, hello = ?other, "tcp: dropped a connection that is not from this job"),
        }
    }
    Ok(streams)
}

fn connect(peer: usize, addr: SocketAddr, me: Hello, deadline: Instant) -> Result<TcpStream> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1))).and_then(|mut s| {
            s.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
            s.write_all(&me.encode())?;
            s.set_write_timeout(None)?;
            Ok(s)
        });
        match attempt {
            Ok(s) => return Ok(s),
            // The peer's listener exists before its address is published; a refusal means a
            // stale or foreign address, or a peer that died: retry until the deadline.
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(peer, %addr, "tcp: connect failed ({e}); retrying");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                return Err(Error::Peer { peer, msg: format!("tcp: cannot connect to {addr}: {e}") });
            }
        }
    }
}

fn read_hello(s: &mut TcpStream, deadline: Instant) -> Option<Hello> {
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
    s.set_nonblocking(false).ok()?;
    s.set_read_timeout(Some(left)).ok()?;
    let mut b = [0u8; HELLO];
    s.read_exact(&mut b).ok()?;
    s.set_read_timeout(None).ok()?;
    Hello::decode(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_strangers_are_refused() {
        let h = Hello { job: 0xfeed, rank: 3, size: 8 };
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        let mut b = h.encode();
        b[0] = b'x';
        assert_eq!(Hello::decode(&b), None);
    }

    #[test]
    fn three_ranks_connect_in_any_start_order() {
        let ls: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let addrs: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
        let handles: Vec<_> = ls
            .into_iter()
            .enumerate()
            .rev()
            .map(|(r, l)| {
                let addrs = addrs.clone();
                std::thread::spawn(move || {
                    let me = Hello { job: 7, rank: r as u64, size: 3 };
                    let s = mesh(&l, me, &addrs, Duration::from_secs(10)).unwrap();
                    s.iter().enumerate().all(|(p, s)| s.is_some() == (p != r))
                })
            })
            .collect();
        assert!(handles.into_iter().all(|h| h.join().unwrap()));
    }

    #[test]
    fn a_missing_peer_times_out_naming_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addrs = vec![l.local_addr().unwrap(), "127.0.0.1:9".parse().unwrap()];
        let e = mesh(&l, Hello { job: 1, rank: 0, size: 2 }, &addrs, Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().contains("ranks [1]"), "{e}");
    }
}
