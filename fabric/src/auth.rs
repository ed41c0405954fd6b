//! The one handshake that proves a shared secret (the job token) on a byte stream: the TCP
//! store's clients and the `tcp` backend's data connections both open with it.
//!
//! Mutual challenge and response, HMAC-SHA256 keyed by the secret, never the secret itself:
//! 1. opener → acceptor: what the protocol sends first (its hello), then a fresh 32-byte nonce `n_o`;
//! 2. acceptor → opener: a fresh nonce `n_a`, then `MAC(key, "acceptor" ‖ context ‖ n_o ‖ n_a)`;
//! 3. opener → acceptor: `MAC(key, "opener" ‖ context ‖ n_o ‖ n_a)`, sent only once step 2 checked out.
//!
//! Fresh nonces on both sides make a recorded exchange worthless on another connection; the role
//! label stops a proof from being reflected back; the context (the store's name, or a data
//! connection's job, size and both ranks) binds a proof to who claims to be whom, so an exchange
//! recorded between two ranks cannot be replayed as another rank. Proofs are compared in constant
//! time (`hmac`'s `verify_slice`). Each side's reads are bounded by the stream's read timeout,
//! which the caller sets.

use std::io::{self, Read, Write};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a nonce.
pub const NONCE: usize = 32;
/// Bytes of a proof (an HMAC-SHA256 tag).
pub const PROOF: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The stream failed, ended or timed out before the exchange completed.
    #[error("handshake I/O: {0}")]
    Io(#[from] io::Error),
    /// The peer's proof does not match: it does not hold the secret (or claims another identity).
    #[error("the peer's proof is wrong: it does not hold the job's secret")]
    BadProof,
}

/// `N` bytes from the operating system's random source.
pub fn random<const N: usize>() -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// A key derived from `secret` for one purpose: `HMAC(secret, label ‖ parts…)` (each part
/// length-prefixed), so keys of different purposes or parties never coincide.
pub fn derive(secret: &[u8], label: &str, parts: &[&[u8]]) -> [u8; 32] {
    let mut m = mac(secret);
    absorb(&mut m, label.as_bytes());
    for p in parts {
        absorb(&mut m, p);
    }
    m.finalize().into_bytes().into()
}

/// The opener's side: sends `first` and its nonce in one write, checks the acceptor's proof,
/// then sends its own.
pub fn open<S: Read + Write>(s: &mut S, key: &[u8], context: &[u8], first: &[u8]) -> Result<(), AuthError> {
    let mine = random::<NONCE>()?;
    let mut hello = Vec::with_capacity(first.len() + NONCE);
    hello.extend_from_slice(first);
    hello.extend_from_slice(&mine);
    s.write_all(&hello)?;
    let mut answer = [0u8; NONCE + PROOF];
    s.read_exact(&mut answer)?;
    let (theirs, proof) = answer.split_at(NONCE);
    transcript(key, b"acceptor", context, &mine, theirs).verify_slice(proof).map_err(|_| AuthError::BadProof)?;
    s.write_all(&transcript(key, b"opener", context, &mine, theirs).finalize().into_bytes())?;
    Ok(())
}

/// The acceptor's side, after the caller read the opener's `first` bytes: reads the opener's
/// nonce, answers with its own and its proof, and checks the opener's proof.
pub fn accept<S: Read + Write>(s: &mut S, key: &[u8], context: &[u8]) -> Result<(), AuthError> {
    let mut theirs = [0u8; NONCE];
    s.read_exact(&mut theirs)?;
    let mine = random::<NONCE>()?;
    let mut answer = [0u8; NONCE + PROOF];
    answer[..NONCE].copy_from_slice(&mine);
    answer[NONCE..].copy_from_slice(&transcript(key, b"acceptor", context, &theirs, &mine).finalize().into_bytes());
    s.write_all(&answer)?;
    let mut proof = [0u8; PROOF];
    s.read_exact(&mut proof)?;
    transcript(key, b"opener", context, &theirs, &mine).verify_slice(&proof).map_err(|_| AuthError::BadProof)
}

/// The MAC over one role's view of the exchange.
fn transcript(key: &[u8], role: &[u8], context: &[u8], opener: &[u8], acceptor: &[u8]) -> HmacSha256 {
    let mut m = mac(key);
    for part in [b"fabcoll-auth-1".as_slice(), role, context, opener, acceptor] {
        absorb(&mut m, part);
    }
    m
}

fn mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length (longer ones are hashed first): this cannot fail.
    <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC accepts any key length")
}

/// Adds a length-prefixed part, so that no two different part lists feed the same bytes.
fn absorb(m: &mut HmacSha256, part: &[u8]) {
    m.update(&(part.len() as u64).to_le_bytes());
    m.update(part);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    /// Runs the opener with `ko`/`co` and the acceptor with `ka`/`ca` on a socket pair.
    fn run(
        ko: &[u8],
        co: &[u8],
        ka: &'static [u8],
        ca: &'static [u8],
    ) -> (Result<(), AuthError>, Result<(), AuthError>) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        for s in [&a, &b] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let acceptor = std::thread::spawn(move || {
            let mut first = [0u8; 5];
            b.read_exact(&mut first).unwrap();
            assert_eq!(&first, b"hello");
            accept(&mut b, ka, ca)
        });
        let opened = open(&mut a, ko, co, b"hello");
        drop(a); // an opener that gave up ends the acceptor's read
        (opened, acceptor.join().unwrap())
    }

    #[test]
    fn both_sides_holding_the_key_agree() {
        let (o, a) = run(b"token", b"ctx", b"token", b"ctx");
        assert!(o.is_ok() && a.is_ok(), "{o:?} {a:?}");
    }

    #[test]
    fn a_wrong_key_or_context_is_refused_by_the_opener_first() {
        for (ko, co) in [(&b"guess"[..], &b"ctx"[..]), (b"token", b"other rank")] {
            let (o, a) = run(ko, co, b"token", b"ctx");
            assert!(matches!(o, Err(AuthError::BadProof)), "{o:?}");
            // The acceptor never gets a proof: the opener stopped.
            assert!(matches!(a, Err(AuthError::Io(_))), "{a:?}");
        }
    }

    /// A stranger that does not check the acceptor's proof and sends any 32 bytes as its own.
    #[test]
    fn a_stranger_guessing_the_proof_is_refused() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let acceptor = std::thread::spawn(move || accept(&mut b, b"token", b"ctx"));
        a.write_all(&[7u8; NONCE]).unwrap();
        let mut answer = [0u8; NONCE + PROOF];
        a.read_exact(&mut answer).unwrap();
        // Reflecting the acceptor's own proof back does not pass either (the role differs).
        a.write_all(&answer[NONCE..]).unwrap();
        assert!(matches!(acceptor.join().unwrap(), Err(AuthError::BadProof)));
    }

    #[test]
    fn proofs_differ_by_role_context_and_nonce() {
        let t = |role: &[u8], ctx: &[u8], n: u8| {
            transcript(b"k", role, ctx, &[n; NONCE], &[0; NONCE]).finalize().into_bytes()
        };
        let base = t(b"opener", b"c", 1);
        assert_ne!(base, t(b"acceptor", b"c", 1));
        assert_ne!(base, t(b"opener", b"d", 1));
        assert_ne!(base, t(b"opener", b"c", 2));
        assert_ne!(random::<NONCE>().unwrap(), random::<NONCE>().unwrap());
        assert_ne!(derive(b"s", "a", &[b"x"]), derive(b"s", "b", &[b"x"]));
        assert_ne!(derive(b"s", "a", &[b"xy", b""]), derive(b"s", "a", &[b"x", b"y"]));
    }
}
