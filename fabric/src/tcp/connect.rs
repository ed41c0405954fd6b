//! Connection set-up of the `tcp` backend: every rank connects to each lower rank and accepts
//! each higher one. A connect completes in the kernel's backlog before the peer accepts, and a
//! rank accepts only after its own connects, which by induction from rank 0 (no connects) always
//! complete: no order between ranks is needed.
//!
//! Each connection opens with a [`Hello`] (who claims to be whom) and the handshake of
//! `crate::auth` keyed by the pair's key ([`pair_key`]) and bound to the job, its size and both
//! ranks: both ends prove the job's secret, and nothing else is read from a connection before.
//! A connection that fails is logged and closed. The acceptor runs each handshake on a thread of
//! its own whose reads time out after [`HANDSHAKE_TIMEOUT`], so a silent stranger delays no one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::auth::{self, AuthError};
use crate::error::{Error, Result};

/// How long an accepted connection has for each read of its hello and handshake.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes of an endpoint's secret (random, published with its address after the hello).
pub const SECRET: usize = 32;
/// The key of one connection ([`pair_key`]).
pub type PairKey = [u8; 32];

/// The key of the connection between ranks `a` and `b` (each with its endpoint's secret): derived
/// from the job token (empty when the job has none) and both secrets, the same at both ends.
pub fn pair_key(token: &[u8], a: (usize, &[u8; SECRET]), b: (usize, &[u8; SECRET])) -> PairKey {
    let (lo, hi) = if a.0 < b.0 { (a.1, b.1) } else { (b.1, a.1) };
    auth::derive(token, "fabcoll tcp connection", &[lo, hi])
}

/// What a connection's proofs are bound to: the job hash, the size, the opener's and the
/// acceptor's rank, as four little-endian u64s.
fn context(me: Hello, opener: u64, acceptor: u64) -> [u8; 32] {
    let mut c = [0u8; 32];
    for (i, v) in [me.job, me.size, opener, acceptor].into_iter().enumerate() {
        c[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    c
}

const HELLO_MAGIC: &[u8; 8] = b"fabtcph1";
/// Bytes of a [`Hello`] (also the start of a tcp endpoint's address blob).
pub(crate) const HELLO: usize = 32;

/// Who opens a connection: what its first 32 bytes say (and what a rank's address blob starts with).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub job: u64,
    pub rank: u64,
    pub size: u64,
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; HELLO] {
        let mut b = [0u8; HELLO];
        b[..8].copy_from_slice(HELLO_MAGIC);
        b[8..16].copy_from_slice(&self.job.to_le_bytes());
        b[16..24].copy_from_slice(&self.rank.to_le_bytes());
        b[24..32].copy_from_slice(&self.size.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8; HELLO]) -> Option<Hello> {
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        (&b[..8] == HELLO_MAGIC).then(|| Hello { job: u(8), rank: u(16), size: u(24) })
    }
}

/// Connects this rank (`me`) to all peers at `addrs` (indexed by rank; `me`'s own entry is not
/// used), each connection authenticated with `keys[peer]`. Returns the streams indexed by rank
/// (`None` at `me`), blocking, before any data.
pub(super) fn mesh(
    listener: &TcpListener,
    me: Hello,
    addrs: &[SocketAddr],
    keys: Arc<Vec<PairKey>>,
    timeout: Duration,
) -> Result<Vec<Option<TcpStream>>> {
    let deadline = Instant::now() + timeout;
    let n = addrs.len();
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    for (peer, addr) in addrs.iter().enumerate().take(me.rank as usize) {
        streams[peer] = Some(connect(peer, *addr, me, &keys[peer], deadline)?);
    }
    listener.set_nonblocking(true).map_err(|e| Error::Os { op: "listener set_nonblocking".into(), source: e })?;
    let (admitted, admissions) = mpsc::channel::<(usize, TcpStream)>();
    let mut missing = n - 1 - me.rank as usize;
    while missing > 0 {
        while let Ok((r, s)) = admissions.try_recv() {
            if streams[r].is_some() {
                tracing::warn!(rank = r, "tcp: a second connection proved this rank; dropped");
                continue;
            }
            streams[r] = Some(s);
            missing -= 1;
        }
        if missing == 0 {
            break;
        }
        let (s, from) = match listener.accept() {
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
        let (admitted, keys) = (admitted.clone(), keys.clone());
        let spawned = std::thread::Builder::new().name("fabcoll-tcp-admit".into()).spawn(move || {
            if let Some(r) = admit(s, from, me, &keys) {
                let _ = admitted.send(r);
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(%from, "tcp: dropped a connection: no thread for its handshake ({e})");
        }
    }
    Ok(streams)
}

/// Opens the connection to `peer` at `addr` and proves this rank to it (and it to us).
fn connect(peer: usize, addr: SocketAddr, me: Hello, key: &PairKey, deadline: Instant) -> Result<TcpStream> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let attempt = TcpStream::connect_timeout(&addr, left).map_err(AuthError::Io).and_then(|mut s| {
            s.set_nodelay(true)?;
            // The peer answers once it accepts, after its own connects: wait up to the deadline.
            s.set_read_timeout(Some(left))?;
            s.set_write_timeout(Some(left))?;
            auth::open(&mut s, key, &context(me, me.rank, peer as u64), &me.encode())?;
            s.set_read_timeout(None)?;
            s.set_write_timeout(None)?;
            Ok(s)
        });
        match attempt {
            Ok(s) => return Ok(s),
            Err(AuthError::BadProof) => {
                return Err(Error::Peer {
                    peer,
                    msg: format!(
                        "tcp: the endpoint at {addr} does not prove the job's secret (another job, a different \
                         FABCOLL_TOKEN, or not a rank of this job)"
                    ),
                })
            }
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

/// Reads an accepted connection's hello and runs the handshake as the acceptor: the rank it
/// proved, or `None` after logging why it was refused (dropping the stream closes it).
fn admit(mut s: TcpStream, from: SocketAddr, me: Hello, keys: &[PairKey]) -> Option<(usize, TcpStream)> {
    let refuse = |why: String| {
        tracing::warn!(%from, "tcp: refused a connection that is not from a rank of this job: {why}");
        None
    };
    let setup = s
        .set_nonblocking(false)
        .and_then(|()| s.set_nodelay(true))
        .and_then(|()| s.set_read_timeout(Some(HANDSHAKE_TIMEOUT)))
        .and_then(|()| s.set_write_timeout(Some(HANDSHAKE_TIMEOUT)));
    if let Err(e) = setup {
        return refuse(format!("socket set-up: {e}"));
    }
    let r = match prove_opener(&mut s, me, keys) {
        Ok(r) => r,
        Err(why) => return refuse(why),
    };
    match s.set_read_timeout(None).and_then(|()| s.set_write_timeout(None)) {
        Ok(()) => Some((r, s)),
        Err(e) => refuse(format!("socket set-up: {e}")),
    }
}

/// The acceptor's side of a connection's opening, on any stream: reads the opener's hello,
/// which must name a higher rank of this job, and runs the handshake keyed by that rank's pair
/// key. The rank it proved, or why it was refused.
pub(crate) fn prove_opener<S: Read + Write>(
    s: &mut S,
    me: Hello,
    keys: &[PairKey],
) -> std::result::Result<usize, String> {
    let mut b = [0u8; HELLO];
    s.read_exact(&mut b).map_err(|e| format!("no hello: {e}"))?;
    let h = match Hello::decode(&b) {
        Some(h) if h.job == me.job && h.size == me.size && h.rank > me.rank && h.rank < me.size => h,
        other => return Err(format!("its hello {other:?} names no higher rank of this job")),
    };
    let r = usize::try_from(h.rank).map_err(|_| format!("rank {} does not fit", h.rank))?;
    let key = keys.get(r).ok_or_else(|| format!("it claims rank {r}, beyond the {} keys", keys.len()))?;
    auth::accept(s, key, &context(me, h.rank, me.rank)).map_err(|e| format!("it claims rank {r}: {e}"))?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same key for every pair (what `pair_key` gives when all ranks agree).
    fn keys(n: usize) -> Arc<Vec<PairKey>> {
        Arc::new(vec![[9u8; 32]; n])
    }

    #[test]
    fn pair_keys_agree_at_both_ends_and_differ_by_secret_and_token() {
        let (a, b, c) = ([1u8; SECRET], [2u8; SECRET], [3u8; SECRET]);
        assert_eq!(pair_key(b"t", (0, &a), (1, &b)), pair_key(b"t", (1, &b), (0, &a)));
        assert_ne!(pair_key(b"t", (0, &a), (1, &b)), pair_key(b"t", (0, &a), (1, &c)));
        assert_ne!(pair_key(b"t", (0, &a), (1, &b)), pair_key(b"u", (0, &a), (1, &b)));
    }

    /// A stranger that sends the hello of rank 1 (public: the job hash) is closed, then rank 1
    /// connects; a second stranger that stays silent delays no one.
    #[test]
    fn a_stranger_with_a_right_hello_is_closed_and_the_rank_still_connects() {
        let l0 = TcpListener::bind("127.0.0.1:0").unwrap();
        let l1 = TcpListener::bind("127.0.0.1:0").unwrap();
        let addrs = vec![l0.local_addr().unwrap(), l1.local_addr().unwrap()];
        let _silent = TcpStream::connect(addrs[0]).unwrap();
        let mut stranger = TcpStream::connect(addrs[0]).unwrap();
        stranger.write_all(&Hello { job: 7, rank: 1, size: 2 }.encode()).unwrap();
        stranger.write_all(&[0u8; auth::NONCE + auth::PROOF]).unwrap();
        let a0 = addrs.clone();
        let rank0 = std::thread::spawn(move || {
            mesh(&l0, Hello { job: 7, rank: 0, size: 2 }, &a0, keys(2), Duration::from_secs(20))
        });
        stranger.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        let closed = stranger.read_to_end(&mut rest);
        assert!(closed.is_ok() && rest.len() == auth::NONCE + auth::PROOF, "{closed:?}, {} bytes", rest.len());
        let s1 = mesh(&l1, Hello { job: 7, rank: 1, size: 2 }, &addrs, keys(2), Duration::from_secs(20)).unwrap();
        assert!(s1[0].is_some());
        assert!(rank0.join().unwrap().unwrap()[1].is_some());
    }

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
                    let s = mesh(&l, me, &addrs, keys(3), Duration::from_secs(10)).unwrap();
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
        let e = mesh(&l, Hello { job: 1, rank: 0, size: 2 }, &addrs, keys(2), Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().contains("ranks [1]"), "{e}");
    }
}
