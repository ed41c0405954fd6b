//! Fuzz bodies: each feeds arbitrary bytes to one decoder of bytes that come from outside the
//! process, as the real code path calls it, and checks what must hold whatever the bytes: no
//! panic, no allocation driven by an unchecked length, no stranger admitted, and a decoded value
//! re-encodes to the bytes it came from (or decodes again to itself). The cargo-fuzz targets in
//! `fuzz/` call these, and so do stable tests over the seed corpus plus mutated inputs
//! (`fabric/tests/fuzz_bodies.rs`), so CI runs every body without nightly.
//!
//! Not an API: hidden from the docs and free to change.

use std::io::{self, Read, Write};
use std::sync::atomic::AtomicBool;

use crate::bootstrap::tcp as store;
use crate::bootstrap::{NodeId, Seat};
use crate::mr::RemoteMr;

/// One target: its name (the cargo-fuzz target and the corpus folder `fuzz/corpus/<name>`), its
/// body, and seeds built with the real encoders.
pub struct Target {
    /// Name of the cargo-fuzz target.
    pub name: &'static str,
    /// The body: any bytes, never a panic.
    pub body: fn(&[u8]),
    /// Well-formed inputs, made by the encoders.
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// Every fabric target.
pub const TARGETS: &[Target] = &[
    Target { name: "store_handshake", body: store_handshake, seeds: handshake_seeds },
    Target { name: "store_request", body: store_request, seeds: request_seeds },
    Target { name: "store_response", body: store_response, seeds: response_seeds },
    #[cfg(target_os = "linux")]
    Target { name: "tcp_hello", body: tcp_hello, seeds: hello_seeds },
    #[cfg(target_os = "linux")]
    Target { name: "tcp_frame", body: tcp_frame, seeds: frame_seeds },
    Target { name: "remote_mr", body: remote_mr, seeds: remote_mr_seeds },
];

/// A peer that says `input` and swallows whatever it is told.
struct Replay<'a>(&'a [u8]);

impl Read for Replay<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Replay<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

const TOKEN: &[u8] = b"fuzz-token";

/// Both ends of the store's handshake against a peer that says `data`: neither may accept it
/// (the peer cannot know the fresh nonce's proof).
pub fn store_handshake(data: &[u8]) {
    assert!(store::admit_client(&mut Replay(data), TOKEN).is_err(), "the store admitted a stranger");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
    assert!(store::prove_to_store(&mut Replay(data), TOKEN, addr).is_err(), "a client accepted a fake store");
}

/// The server's request decoder over a stream of requests, each carried out on a table (waits
/// with their timeout cut to zero); every decoded request re-encodes to the bytes it consumed.
pub fn store_request(data: &[u8]) {
    let table = store::Table::default();
    let stop = AtomicBool::new(false);
    let mut rest = data;
    while let Some((&op, after)) = rest.split_first() {
        let mut cursor = after;
        let Ok(req) = store::read_request(&mut cursor, op) else { return };
        let used = data.len() - rest.len()..data.len() - cursor.len();
        assert_eq!(req.encode(), data[used].to_vec(), "{req:?} does not re-encode to its bytes");
        let req = match req {
            store::Request::Wait { key, .. } => store::Request::Wait { key, ms: 0 },
            r => r,
        };
        let _ = store::answer(&table, req, &stop);
        rest = cursor;
    }
}

/// The client's response decoder over a stream of responses; a payload is also read as a
/// node-identified address blob (what the bootstrap's exchange stores).
pub fn store_response(data: &[u8]) {
    let mut rest = data;
    while !rest.is_empty() {
        let before = rest;
        let Ok((status, payload)) =
            store::read_response(&mut rest, |e| crate::bootstrap::BootstrapError::io("fuzz")(e))
        else {
            return;
        };
        assert_eq!(store::encode_response(status, &payload), before[..before.len() - rest.len()].to_vec());
        if let Ok((node, rest)) = NodeId::split(&payload, 1) {
            assert_eq!(node.prefix(rest), payload, "a node identity does not re-encode");
            if let Ok((seat, blob)) = Seat::split(rest, 1) {
                assert_eq!(seat.prefix(blob), rest, "a seat does not re-encode");
            }
        }
    }
}

/// The `tcp` backend's acceptor against an opener that says `data` (rank 0 of 4, every pair
/// key known): it must refuse, whatever hello the bytes carry.
#[cfg(target_os = "linux")]
pub fn tcp_hello(data: &[u8]) {
    use crate::tcp::connect::{prove_opener, Hello, HELLO};
    if let Some(h) = data.first_chunk::<HELLO>().and_then(Hello::decode) {
        assert_eq!(Hello::decode(&h.encode()), Some(h));
    }
    let me = Hello { job: 7, rank: 0, size: 4 };
    let got = prove_opener(&mut Replay(data), me, &[[9u8; 32]; 4]);
    assert!(got.is_err(), "the acceptor admitted a stranger as rank {got:?}");
}

/// The `tcp` backend's frame headers, 48 bytes at a time: a decoded header encodes to one that
/// decodes to the same frame.
#[cfg(target_os = "linux")]
pub fn tcp_frame(data: &[u8]) {
    use crate::tcp::wire::{Frame, HDR};
    for h in data.chunks_exact(HDR) {
        if let Ok(f) = Frame::decode(h.try_into().expect("a whole header")) {
            assert_eq!(Frame::decode(&f.encode()).ok(), Some(f));
        }
    }
}

/// A registration descriptor as a peer sends it: a decoded one re-encodes to the same bytes,
/// and every sub-range taken from it is checked.
pub fn remote_mr(data: &[u8]) {
    let (head, rest) = data.split_at(data.len().min(RemoteMr::WIRE_LEN));
    if let Ok(mr) = RemoteMr::from_bytes(head) {
        assert_eq!(mr.to_bytes().as_slice(), head);
        let word = |i: usize| rest.get(i..i + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let (off, len) = (word(0) as usize, word(8) as usize);
        if let Ok(r) = mr.slice(off, len) {
            assert!(r.off.checked_add(r.len).is_some_and(|end| end as u64 <= mr.len));
        }
    }
}

fn handshake_seeds() -> Vec<Vec<u8>> {
    // What an opener sends: the magic, a nonce, then a proof; what an acceptor answers: a nonce
    // and a proof, then the status byte.
    let mut opener = b"FABCOLL2".to_vec();
    opener.extend_from_slice(&[0x11; 64]);
    let mut acceptor = vec![0x22; 64];
    acceptor.push(0);
    vec![opener, acceptor]
}

fn request_seeds() -> Vec<Vec<u8>> {
    use store::Request::*;
    let k = |s: &str| s.to_owned();
    let all = [
        Set { key: k("addr/0"), value: b"127.0.0.1:4000".to_vec() },
        Get { key: k("addr/1") },
        Wait { key: k("ready"), ms: 30_000 },
        Add { key: k("count"), delta: -3 },
    ];
    let mut seeds: Vec<Vec<u8>> = all.iter().map(|r| r.encode()).collect();
    seeds.push(all.iter().flat_map(|r| r.encode()).collect());
    seeds
}

fn response_seeds() -> Vec<Vec<u8>> {
    let seat = Seat { machine: "host/boot".into(), cpus: vec![0b11], usable: 2 };
    let node = NodeId { name: "host/boot".into(), explicit: false }.prefix(&seat.prefix(b"blob"));
    vec![
        store::encode_response(0, &node),
        store::encode_response(1, &[]),
        store::encode_response(2, &[]),
        store::encode_response(3, b"value of \"k\" is not an integer"),
        store::encode_response(0, &7i64.to_le_bytes()),
    ]
}

#[cfg(target_os = "linux")]
fn hello_seeds() -> Vec<Vec<u8>> {
    use crate::tcp::connect::Hello;
    let mut right = Hello { job: 7, rank: 1, size: 4 }.encode().to_vec();
    right.extend_from_slice(&[0x33; 64]);
    vec![right, Hello { job: 7, rank: 9, size: 4 }.encode().to_vec()]
}

#[cfg(target_os = "linux")]
fn frame_seeds() -> Vec<Vec<u8>> {
    use crate::tcp::wire::{Frame, Refusal};
    let frames = [
        Frame::Write { key: 7, addr: 0x1000, len: 8, imm: Some(3), ctx: 9, pad: 0 },
        Frame::Write { key: 1, addr: 0, len: 0, imm: None, ctx: 0, pad: 5 },
        Frame::Ctrl { tag: 3, len: 64 },
        Frame::Refused { why: Refusal::OutOfBounds, key: 9, ctx: 5 },
        Frame::Goodbye,
    ];
    vec![frames.iter().flat_map(|f| f.encode()).collect()]
}

fn remote_mr_seeds() -> Vec<Vec<u8>> {
    use crate::mr::{Access, NodeKey};
    let mr = RemoteMr { addr: 1 << 33, len: 4096, key: 42, access: Access::REMOTE_WRITE, node: None };
    let routed = RemoteMr { node: Some(NodeKey { addr: 64, key: 5 }), ..mr };
    let mut with_range = routed.to_bytes().to_vec();
    with_range.extend_from_slice(&128u64.to_le_bytes());
    with_range.extend_from_slice(&256u64.to_le_bytes());
    vec![mr.to_bytes().to_vec(), with_range]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every seed runs through its body; a well-formed request stream is consumed to the end.
    #[test]
    fn seeds_pass_their_bodies() {
        for t in TARGETS {
            for s in (t.seeds)() {
                (t.body)(&s);
            }
        }
    }
}
