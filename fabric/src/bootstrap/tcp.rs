//! The TCP store: a small server (run by rank 0 or by a launcher) and its client.
//!
//! Wire format (all integers little-endian):
//! - handshake: the client opens with `b"FABCOLL2"`, then both sides prove they hold the job
//!   token by the challenge and response of `crate::auth` (context `b"fabcoll store"`): the
//!   token never travels. Server → client: one status byte (0 = accepted). A client without the
//!   token is refused, logged with its address, and the connection is closed; a client learns
//!   that a server without the token is not its store. The handshake must complete within
//!   [`HANDSHAKE_TIMEOUT`].
//! - request: op (u8: 1 set, 2 get, 3 wait, 4 add), key length (u32), key, then for set a value
//!   length (u32) and value, for wait a timeout in ms (u64), for add a delta (i64).
//! - response: status (u8: 0 ok, 1 not found, 2 timeout, 3 error), length (u32), payload.
//!
//! Every length read from a peer is checked against [`MAX_KEY_LEN`] / [`MAX_VALUE_LEN`] before
//! anything is allocated for it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{BootstrapError, Result, Store};
use crate::auth::{self, AuthError};

const MAGIC: &[u8; 8] = b"FABCOLL2";
/// What the store's handshake proofs are bound to (`crate::auth`).
const AUTH_CONTEXT: &[u8] = b"fabcoll store";
/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 4096;
/// Longest value accepted.
pub const MAX_VALUE_LEN: usize = 16 << 20;
const MAX_TOKEN_LEN: usize = 256;
/// Time a client has to present its token.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

const OP_SET: u8 = 1;
const OP_GET: u8 = 2;
const OP_WAIT: u8 = 3;
const OP_ADD: u8 = 4;

const ST_OK: u8 = 0;
const ST_NOT_FOUND: u8 = 1;
const ST_TIMEOUT: u8 = 2;
const ST_ERROR: u8 = 3;

#[derive(Default)]
pub(crate) struct Table {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

/// A running store server. Dropping it stops accepting and ends every connection (idle ones
/// within a second, others at their next request or a wait's next check).
pub struct TcpStoreServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl TcpStoreServer {
    /// Binds `bind` (port 0 = any free port) and serves clients that present `token`.
    pub fn start(bind: impl ToSocketAddrs, token: &str) -> Result<TcpStoreServer> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Err(BootstrapError::Config(format!("token must be 1..={MAX_TOKEN_LEN} bytes")));
        }
        let addrs: Vec<SocketAddr> =
            bind.to_socket_addrs().map_err(BootstrapError::io("resolving the store's address"))?.collect();
        let listener = TcpListener::bind(&addrs[..]).map_err(|e| {
            let taken = e.kind() == std::io::ErrorKind::AddrInUse;
            let hint = if taken { "; FABCOLL_STORE_PORT picks another" } else { "" };
            let at = addrs.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(", ");
            BootstrapError::io(format!("binding the store's port at {at}{hint}"))(e)
        })?;
        let addr = listener.local_addr().map_err(BootstrapError::io("store address"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let table = Arc::new(Table::default());
        let token = Arc::new(token.as_bytes().to_vec());
        let stop2 = stop.clone();
        let accept = std::thread::Builder::new()
            .name("fabcoll-store".into())
            .spawn(move || accept_loop(listener, table, token, stop2))
            .map_err(BootstrapError::io("spawning the store thread"))?;
        tracing::debug!(%addr, "store serving");
        Ok(TcpStoreServer { addr, stop, accept: Some(accept) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // The accept thread blocks in `accept`: a connection of our own wakes it to see `stop`.
        // If that cannot connect, the thread is left behind rather than joined forever.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let woken = TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok();
        if let Some(h) = self.accept.take() {
            if woken {
                let _ = h.join();
            }
        }
    }
}

/// Accepts clients until `stop` (blocking: a polling accept woke up every few milliseconds for
/// the whole job, on the CPUs the ranks are pinned to).
fn accept_loop(listener: TcpListener, table: Arc<Table>, token: Arc<Vec<u8>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok(_) if stop.load(Ordering::Acquire) => break,
            Ok((stream, peer)) => {
                let (table, token, stop) = (table.clone(), token.clone(), stop.clone());
                let _ = std::thread::Builder::new().name("fabcoll-store-conn".into()).spawn(move || {
                    if let Err(e) = serve(stream, peer, &table, &token, &stop) {
                        tracing::debug!(%peer, error = %e, "store connection ended");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "store accept failed");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn serve(mut s: TcpStream, peer: SocketAddr, table: &Table, token: &[u8], stop: &AtomicBool) -> Result<()> {
    s.set_nonblocking(false).map_err(BootstrapError::io("store connection"))?;
    s.set_nodelay(true).map_err(BootstrapError::io("store connection"))?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(BootstrapError::io("store connection"))?;
    if let Err(why) = admit_client(&mut s, token) {
        tracing::warn!(%peer, %why, "store: refused a client that did not prove the job's token");
        let _ = s.write_all(&[1]);
        let _ = s.shutdown(Shutdown::Both);
        return Err(BootstrapError::Auth(format!("client {peer} presented no valid token")));
    }
    s.write_all(&[0]).map_err(BootstrapError::io("store handshake"))?;
    // Idle clients are fine; poll the stop flag once a second.
    s.set_read_timeout(Some(Duration::from_secs(1))).map_err(BootstrapError::io("store connection"))?;
    loop {
        let mut op = [0u8; 1];
        match s.read(&mut op) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if stop.load(Ordering::Acquire) {
                    return Ok(());
                }
                continue;
            }
            Err(e) => return Err(BootstrapError::io("store request")(e)),
        }
        s.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(BootstrapError::io("store connection"))?;
        let req = read_request(&mut s, op[0]).map_err(|e| match e {
            BootstrapError::Protocol(m) => BootstrapError::Protocol(format!("{m} (from {peer})")),
            e => e,
        })?;
        let (status, payload) = answer(table, req, stop);
        if stop.load(Ordering::Acquire) {
            // The server is going away: its clients see their connections end rather than answers
            // from a table nobody serves any more (a rank joining again starts over on the server
            // that replaces it).
            return Ok(());
        }
        s.write_all(&encode_response(status, &payload)).map_err(BootstrapError::io("store response"))?;
        s.set_read_timeout(Some(Duration::from_secs(1))).map_err(BootstrapError::io("store connection"))?;
    }
}

/// The server's side of the handshake, after which the caller sends the status byte: the
/// magic, then the token's proof (`crate::auth`). `Err` says why the client was refused.
pub(crate) fn admit_client<S: Read + Write>(s: &mut S, token: &[u8]) -> std::result::Result<(), String> {
    let mut magic = [0u8; 8];
    match read_exact(s, &mut magic) {
        Err(e) => Err(e.to_string()),
        Ok(()) if &magic != MAGIC => Err(format!("it opened with {magic:?}, not the store's {MAGIC:?}")),
        Ok(()) => auth::accept(s, token, AUTH_CONTEXT).map_err(|e| e.to_string()),
    }
}

/// One request, as the server decodes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    Set { key: String, value: Vec<u8> },
    Get { key: String },
    Wait { key: String, ms: u64 },
    Add { key: String, delta: i64 },
}

impl Request {
    /// The request's bytes on the wire, op byte first (what [`TcpStore`] sends).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let (op, key, extra) = match self {
            Request::Set { key, value } => {
                let mut extra = Vec::with_capacity(4 + value.len());
                extra.extend_from_slice(&(value.len() as u32).to_le_bytes());
                extra.extend_from_slice(value);
                (OP_SET, key, extra)
            }
            Request::Get { key } => (OP_GET, key, Vec::new()),
            Request::Wait { key, ms } => (OP_WAIT, key, ms.to_le_bytes().to_vec()),
            Request::Add { key, delta } => (OP_ADD, key, delta.to_le_bytes().to_vec()),
        };
        let mut req = Vec::with_capacity(5 + key.len() + extra.len());
        req.push(op);
        req.extend_from_slice(&(key.len() as u32).to_le_bytes());
        req.extend_from_slice(key.as_bytes());
        req.extend_from_slice(&extra);
        req
    }
}

/// Reads the rest of a request whose op byte was `op`: an unknown op, a length above its limit
/// (checked before anything is allocated) or a key that is not UTF-8 is a protocol error.
pub(crate) fn read_request<R: Read>(s: &mut R, op: u8) -> Result<Request> {
    if !matches!(op, OP_SET | OP_GET | OP_WAIT | OP_ADD) {
        return Err(BootstrapError::Protocol(format!("unknown store op {op}")));
    }
    let key = read_bytes(s, MAX_KEY_LEN, "key")?;
    let key = String::from_utf8(key).map_err(|_| BootstrapError::Protocol("key is not UTF-8".into()))?;
    Ok(match op {
        OP_SET => Request::Set { key, value: read_bytes(s, MAX_VALUE_LEN, "value")? },
        OP_GET => Request::Get { key },
        OP_WAIT => Request::Wait { key, ms: read_u64(s)? },
        _ => Request::Add { key, delta: read_u64(s)? as i64 },
    })
}

/// Carries out one request on the table: the response's status and payload. A wait blocks until
/// the key is set, its timeout (at most a day) passes, or the server stops.
pub(crate) fn answer(table: &Table, req: Request, stop: &AtomicBool) -> (u8, Vec<u8>) {
    match req {
        Request::Set { key, value } => {
            table.map.lock().unwrap_or_else(|e| e.into_inner()).insert(key, value);
            table.changed.notify_all();
            (ST_OK, Vec::new())
        }
        Request::Get { key } => match table.map.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            Some(v) => (ST_OK, v.clone()),
            None => (ST_NOT_FOUND, Vec::new()),
        },
        Request::Wait { key, ms } => {
            let deadline = Instant::now() + Duration::from_millis(ms.min(24 * 3600 * 1000));
            let mut map = table.map.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(v) = map.get(&key) {
                    break (ST_OK, v.clone());
                }
                let now = Instant::now();
                if now >= deadline || stop.load(Ordering::Acquire) {
                    break (ST_TIMEOUT, Vec::new());
                }
                let step = (deadline - now).min(Duration::from_millis(500));
                map = table.changed.wait_timeout(map, step).unwrap_or_else(|e| e.into_inner()).0;
            }
        }
        Request::Add { key, delta } => {
            let mut map = table.map.lock().unwrap_or_else(|e| e.into_inner());
            let cur = match map.get(&key) {
                None => Ok(0i64),
                Some(v) => std::str::from_utf8(v).ok().and_then(|t| t.parse::<i64>().ok()).ok_or(()),
            };
            match cur {
                Ok(c) => {
                    let n = c.wrapping_add(delta);
                    map.insert(key, n.to_string().into_bytes());
                    drop(map);
                    table.changed.notify_all();
                    (ST_OK, n.to_le_bytes().to_vec())
                }
                Err(()) => (ST_ERROR, format!("value of {key:?} is not an integer").into_bytes()),
            }
        }
    }
}

/// A response's bytes: status, payload length (u32), payload.
pub(crate) fn encode_response(status: u8, payload: &[u8]) -> Vec<u8> {
    let mut resp = Vec::with_capacity(5 + payload.len());
    resp.push(status);
    resp.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    resp.extend_from_slice(payload);
    resp
}

/// Reads one response (the client's side): an unknown status or a payload above
/// [`MAX_VALUE_LEN`] (checked before allocating) is a protocol error, a status of "error" is an
/// error carrying the server's message. `io` names a failed read.
pub(crate) fn read_response<R: Read>(
    s: &mut R,
    io: impl Fn(std::io::Error) -> BootstrapError,
) -> Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).map_err(&io)?;
    if head[0] > ST_ERROR {
        return Err(BootstrapError::Protocol(format!("store answered with unknown status {}", head[0])));
    }
    let n = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if n > MAX_VALUE_LEN {
        return Err(BootstrapError::Protocol(format!("store answered with {n} bytes, above the limit")));
    }
    let mut payload = vec![0u8; n];
    s.read_exact(&mut payload).map_err(io)?;
    if head[0] == ST_ERROR {
        return Err(BootstrapError::Protocol(String::from_utf8_lossy(&payload).into_owned()));
    }
    Ok((head[0], payload))
}

fn read_exact<R: Read>(s: &mut R, buf: &mut [u8]) -> Result<()> {
    s.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            BootstrapError::Timeout { what: "the store's peer to send".into(), after: HANDSHAKE_TIMEOUT }
        }
        _ => BootstrapError::io("store read")(e),
    })
}

fn read_u32<R: Read>(s: &mut R) -> Result<u32> {
    let mut b = [0u8; 4];
    read_exact(s, &mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_u64<R: Read>(s: &mut R) -> Result<u64> {
    let mut b = [0u8; 8];
    read_exact(s, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Reads a length-prefixed byte string, refusing lengths above `max` before allocating.
fn read_bytes<R: Read>(s: &mut R, max: usize, what: &str) -> Result<Vec<u8>> {
    let n = read_u32(s)? as usize;
    if n > max {
        return Err(BootstrapError::Protocol(format!("{what} of {n} bytes exceeds the limit of {max}")));
    }
    let mut v = vec![0u8; n];
    read_exact(s, &mut v)?;
    Ok(v)
}

/// A client of a [`TcpStoreServer`].
pub struct TcpStore {
    addr: SocketAddr,
    conn: Mutex<TcpStream>,
}

impl TcpStore {
    /// Connects to the store at `addr`, retrying while it is not up yet, for at most `timeout`.
    pub fn connect(addr: impl ToSocketAddrs, token: &str, timeout: Duration) -> Result<TcpStore> {
        let addr = addr
            .to_socket_addrs()
            .map_err(BootstrapError::io("resolving the store's address"))?
            .next()
            .ok_or_else(|| BootstrapError::Config("store address resolves to nothing".into()))?;
        if token.len() > MAX_TOKEN_LEN {
            return Err(BootstrapError::Config(format!("token longer than {MAX_TOKEN_LEN} bytes")));
        }
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(5);
        let mut s = loop {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            match TcpStream::connect_timeout(&addr, left) {
                Ok(s) => break s,
                Err(e) if Instant::now() + pause < deadline => {
                    tracing::trace!(%addr, error = %e, "store not reachable yet");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err(e) => {
                    return Err(BootstrapError::Timeout {
                        what: format!("the store at {addr} to accept a connection (last error: {e})"),
                        after: timeout,
                    })
                }
            }
        };
        s.set_nodelay(true).map_err(BootstrapError::io("store connection"))?;
        s.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(BootstrapError::io("store connection"))?;
        s.set_write_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(BootstrapError::io("store connection"))?;
        prove_to_store(&mut s, token.as_bytes(), addr)?;
        s.set_write_timeout(None).map_err(BootstrapError::io("store connection"))?;
        Ok(TcpStore { addr, conn: Mutex::new(s) })
    }

    pub fn server_addr(&self) -> SocketAddr {
        self.addr
    }

    fn request(&self, req: &Request, read_timeout: Duration) -> Result<(u8, Vec<u8>)> {
        let key = match req {
            Request::Set { key, .. } | Request::Get { key } | Request::Wait { key, .. } | Request::Add { key, .. } => {
                key
            }
        };
        if key.len() > MAX_KEY_LEN {
            return Err(BootstrapError::Config(format!("key longer than {MAX_KEY_LEN} bytes")));
        }
        let mut s = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        s.set_read_timeout(Some(read_timeout)).map_err(BootstrapError::io("store connection"))?;
        s.write_all(&req.encode()).map_err(BootstrapError::io(format!("sending to the store at {}", self.addr)))?;
        read_response(&mut *s, |e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                BootstrapError::Timeout { what: format!("the store at {} to answer", self.addr), after: read_timeout }
            }
            _ => BootstrapError::io(format!("reading from the store at {}", self.addr))(e),
        })
    }
}

/// The client's side of the handshake: the magic and the token's proof (`crate::auth`), then the
/// server's status byte. A server without the token, or one that refuses ours, is an error.
pub(crate) fn prove_to_store<S: Read + Write>(s: &mut S, token: &[u8], addr: SocketAddr) -> Result<()> {
    match auth::open(s, token, AUTH_CONTEXT, MAGIC) {
        Ok(()) => {}
        Err(AuthError::BadProof) => {
            return Err(BootstrapError::Auth(format!(
                "the server at {addr} does not hold our token: FABCOLL_TOKEN differs from the store's, or it is \
                 not the job's store"
            )))
        }
        Err(e) => return Err(BootstrapError::Auth(format!("the store at {addr} refused us ({e})"))),
    }
    let mut st = [0u8; 1];
    match s.read(&mut st) {
        Ok(1) if st[0] == 0 => Ok(()),
        _ => Err(BootstrapError::Auth(format!("the store at {addr} refused our token"))),
    }
}

const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        if value.len() > MAX_VALUE_LEN {
            return Err(BootstrapError::Config(format!("value longer than {MAX_VALUE_LEN} bytes")));
        }
        self.request(&Request::Set { key: key.to_owned(), value: value.to_vec() }, ANSWER_TIMEOUT).map(|_| ())
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self.request(&Request::Get { key: key.to_owned() }, ANSWER_TIMEOUT)? {
            (ST_OK, v) => Ok(Some(v)),
            (ST_NOT_FOUND, _) => Ok(None),
            (st, _) => Err(BootstrapError::Protocol(format!("unexpected status {st} for get"))),
        }
    }

    fn wait(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        match self.request(&Request::Wait { key: key.to_owned(), ms }, timeout + ANSWER_TIMEOUT)? {
            (ST_OK, v) => Ok(v),
            (ST_TIMEOUT, _) => Err(BootstrapError::Timeout { what: format!("key {key:?}"), after: timeout }),
            (st, _) => Err(BootstrapError::Protocol(format!("unexpected status {st} for wait"))),
        }
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        match self.request(&Request::Add { key: key.to_owned(), delta }, ANSWER_TIMEOUT)? {
            (ST_OK, v) if v.len() == 8 => Ok(i64::from_le_bytes(v.try_into().expect("8 bytes"))),
            (st, v) => {
                Err(BootstrapError::Protocol(format!("unexpected answer to add: status {st}, {} bytes", v.len())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store port another socket holds is an error naming the address and the setting that
    /// moves it.
    #[test]
    fn a_taken_store_port_is_named_with_the_way_around() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = held.local_addr().unwrap();
        let e = TcpStoreServer::start(at, "token").map(drop).unwrap_err().to_string();
        assert!(e.contains(&at.to_string()) && e.contains("FABCOLL_STORE_PORT"), "{e}");
    }

    fn server() -> TcpStoreServer {
        TcpStoreServer::start("127.0.0.1:0", "secret-token").unwrap()
    }

    /// The accept thread blocks in `accept`; dropping the server wakes it, and once the drop
    /// returns the port is closed (the thread, which owns the listener, has ended).
    #[test]
    fn dropping_the_server_ends_its_accept_thread() {
        let srv = server();
        let addr = srv.local_addr();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(srv);
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("the server's drop returned");
        assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(), "still listening on {addr}");
    }

    #[test]
    fn set_get_wait_add() {
        let srv = server();
        let a = TcpStore::connect(srv.local_addr(), "secret-token", Duration::from_secs(5)).unwrap();
        let b = TcpStore::connect(srv.local_addr(), "secret-token", Duration::from_secs(5)).unwrap();
        assert_eq!(a.get("k").unwrap(), None);
        a.set("k", b"v1").unwrap();
        assert_eq!(b.get("k").unwrap().as_deref(), Some(&b"v1"[..]));
        let h = std::thread::spawn(move || b.wait("later", Duration::from_secs(5)).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        a.set("later", b"x").unwrap();
        assert_eq!(h.join().unwrap(), b"x");
        assert_eq!(a.add("n", 3).unwrap(), 3);
        assert_eq!(a.add("n", -1).unwrap(), 2);
        assert!(matches!(a.add("k", 1), Err(BootstrapError::Protocol(_))));
    }

    #[test]
    fn wrong_token_is_refused() {
        let srv = server();
        let e = TcpStore::connect(srv.local_addr(), "wrong", Duration::from_secs(5)).err().unwrap();
        assert!(matches!(e, BootstrapError::Auth(_)), "{e}");
        // A stranger speaking garbage is refused too, and the server keeps serving.
        let mut s = TcpStream::connect(srv.local_addr()).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let mut buf = [0u8; 1];
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(s.read(&mut buf).unwrap(), 1);
        assert_eq!(buf[0], 1);
        assert!(TcpStore::connect(srv.local_addr(), "secret-token", Duration::from_secs(5)).is_ok());
    }

    /// A client proves the token without sending it: a server that records what a client sends
    /// (a stranger posing as the store) never sees the token, and the client refuses that server.
    /// The first protocol sent the token in clear, so this failed before the handshake changed.
    #[test]
    fn the_token_never_travels_and_a_fake_store_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let fake = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut seen = vec![0u8; MAGIC.len() + auth::NONCE];
            s.read_exact(&mut seen).unwrap();
            // Answer as if it were the store, with a proof made up without the token.
            s.write_all(&[0x5a; auth::NONCE + auth::PROOF]).unwrap();
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            seen.extend_from_slice(&rest);
            seen
        });
        let e = TcpStore::connect(addr, "secret-token", Duration::from_secs(5)).err().unwrap();
        assert!(e.to_string().contains("does not hold our token"), "{e}");
        let seen = fake.join().unwrap();
        assert!(seen.len() >= MAGIC.len() + auth::NONCE, "the client sent its hello");
        assert!(!seen.windows(b"secret-token".len()).any(|w| w == b"secret-token"), "the token travelled in clear");
    }

    #[test]
    fn oversized_lengths_are_refused_without_allocating() {
        let srv = server();
        let mut s = TcpStream::connect(srv.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        auth::open(&mut s, b"secret-token", AUTH_CONTEXT, MAGIC).unwrap();
        let mut st = [0u8; 1];
        s.read_exact(&mut st).unwrap();
        assert_eq!(st[0], 0);
        // set with a key length of 4 GiB - 1: the server must drop the connection.
        let mut req = vec![OP_SET];
        req.extend_from_slice(&u32::MAX.to_le_bytes());
        s.write_all(&req).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 8];
        assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
    }

    /// The decoders alone (what `crate::fuzz` drives): lengths above the limits, unknown ops and
    /// statuses are protocol errors before anything is allocated or read for them.
    #[test]
    fn malformed_requests_and_responses_are_protocol_errors() {
        let io = |e| BootstrapError::io("test")(e);
        let mut huge = vec![ST_OK];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        for bad in [huge, vec![9, 0, 0, 0, 0]] {
            let e = read_response(&mut bad.as_slice(), io).unwrap_err();
            assert!(matches!(e, BootstrapError::Protocol(_)), "{e}");
        }
        let mut set = Vec::new();
        set.extend_from_slice(&(MAX_KEY_LEN as u32 + 1).to_le_bytes());
        let e = read_request(&mut set.as_slice(), OP_SET).unwrap_err();
        assert!(e.to_string().contains("exceeds the limit"), "{e}");
        let e = read_request(&mut &b"\x01\0\0\0k"[..], 99).unwrap_err();
        assert!(e.to_string().contains("unknown store op 99"), "{e}");
        let req = Request::Add { key: "n".into(), delta: -2 };
        let bytes = req.encode();
        assert_eq!(read_request(&mut &bytes[1..], bytes[0]).unwrap(), req);
    }

    #[test]
    fn wait_times_out_naming_the_key() {
        let srv = server();
        let a = TcpStore::connect(srv.local_addr(), "secret-token", Duration::from_secs(5)).unwrap();
        let e = a.wait("addr/3", Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("addr/3"), "{e}");
    }

    #[test]
    fn exchange_names_the_missing_rank() {
        let srv = server();
        let a = TcpStore::connect(srv.local_addr(), "secret-token", Duration::from_secs(5)).unwrap();
        a.set("addr/1", b"one").unwrap();
        let e = super::super::exchange(&a, "addr", 0, 3, b"zero", Duration::from_millis(200)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("[2]") && !msg.contains("[1"), "{msg}");
    }

    #[test]
    fn connect_to_nothing_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let e = TcpStore::connect(addr, "t", Duration::from_millis(200)).err().unwrap();
        assert!(matches!(e, BootstrapError::Timeout { .. }), "{e}");
    }
}
