//! Seeded byte mutation for the fuzz bodies on stable: each target runs over its seeds, its
//! committed corpus (`fuzz/corpus/<target>/`) and mutations of both (bit flips, boundary
//! integers written over length fields, insertions, deletions, splices, JSON tokens). The seed
//! comes from `FABCOLL_FUZZ_SEED` (else a fixed one), the count per target from
//! `FABCOLL_FUZZ_ITERS`; a failing input is printed in hex with the seed that made it.
#![allow(dead_code)]

use std::panic::{catch_unwind, resume_unwind};
use std::path::Path;

use fabcoll_fabric::fuzz::Target;

#[path = "../rng/mod.rs"]
mod rng;
pub use rng::Rng;

const INTERESTING: [u64; 10] = [0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fff_ffff, 0xffff_ffff, 1 << 32, u64::MAX];
const TOKENS: [&str; 12] =
    ["{", "}", "[", "]", ",", ":", "\"", "null", "-1", "1e999", "18446744073709551616", "\\u0000"];

/// One mutation of `b` (`pool` supplies splices).
fn mutate_once(r: &mut Rng, b: &mut Vec<u8>, pool: &[Vec<u8>]) {
    let at = |r: &mut Rng, len: usize| if len == 0 { 0 } else { r.below(len) };
    match r.below(9) {
        0 if !b.is_empty() => {
            let i = at(r, b.len());
            b[i] ^= 1 << r.below(8);
        }
        1 if !b.is_empty() => {
            let i = at(r, b.len());
            b[i] = INTERESTING[r.below(INTERESTING.len())] as u8;
        }
        2 => {
            // A boundary integer over a 4- or 8-byte field (length fields, counts, offsets).
            let v = INTERESTING[r.below(INTERESTING.len())].to_le_bytes();
            let w = if r.below(2) == 0 { 4 } else { 8 };
            if b.len() >= w {
                let i = at(r, b.len() - w + 1);
                b[i..i + w].copy_from_slice(&v[..w]);
            }
        }
        3 => {
            let i = at(r, b.len() + 1);
            let n = 1 + r.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
            b.splice(i..i, bytes);
        }
        4 if !b.is_empty() => {
            let i = at(r, b.len());
            let n = 1 + r.below((b.len() - i).min(64));
            b.drain(i..i + n);
        }
        5 if !b.is_empty() => {
            let i = at(r, b.len());
            let n = 1 + r.below((b.len() - i).min(64));
            let copy = b[i..i + n].to_vec();
            let j = at(r, b.len() + 1);
            b.splice(j..j, copy);
        }
        6 if !pool.is_empty() => {
            let other = &pool[r.below(pool.len())];
            let i = at(r, b.len() + 1);
            let j = at(r, other.len() + 1);
            b.truncate(i);
            b.extend_from_slice(&other[j..]);
        }
        7 => {
            let i = at(r, b.len() + 1);
            let t = TOKENS[r.below(TOKENS.len())];
            b.splice(i..i, t.bytes());
        }
        _ => {
            let i = at(r, b.len() + 1);
            b.truncate(i);
        }
    }
}

/// The inputs of `t`: its seeds and its committed corpus under `corpus_root`.
pub fn inputs(t: &Target, corpus_root: &Path) -> Vec<Vec<u8>> {
    let mut v = (t.seeds)();
    if let Ok(dir) = std::fs::read_dir(corpus_root.join(t.name)) {
        let mut files: Vec<_> = dir.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
        files.sort();
        v.extend(files.iter().filter_map(|p| std::fs::read(p).ok()));
    }
    v
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn run_one(t: &Target, seed: u64, what: &str, input: &[u8]) {
    if let Err(panic) = catch_unwind(|| (t.body)(input)) {
        let shown: String = input.iter().take(512).map(|b| format!("{b:02x}")).collect();
        eprintln!(
            "fuzz body {} failed on {what} (FABCOLL_FUZZ_SEED={seed}), {} bytes: {shown}{}",
            t.name,
            input.len(),
            if input.len() > 512 { "…" } else { "" }
        );
        resume_unwind(panic);
    }
}

/// Runs `t` over its inputs, then `default_iters` (or `FABCOLL_FUZZ_ITERS`) mutated inputs.
/// Returns how many inputs ran.
pub fn run(t: &Target, corpus_root: &Path, default_iters: usize) -> usize {
    let seed = env_u64("FABCOLL_FUZZ_SEED").unwrap_or(0x00fa_bc01);
    let iters = env_u64("FABCOLL_FUZZ_ITERS").map_or(default_iters, |n| n as usize);
    let pool = inputs(t, corpus_root);
    assert!(!pool.is_empty(), "{} has no seeds", t.name);
    for (i, input) in pool.iter().enumerate() {
        run_one(t, seed, &format!("corpus input {i}"), input);
    }
    let mut r = Rng::new(seed ^ t.name.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64)));
    for i in 0..iters {
        let mut b = pool[r.below(pool.len())].clone();
        for _ in 0..1 + r.below(4) {
            mutate_once(&mut r, &mut b, &pool);
        }
        run_one(t, seed, &format!("mutation {i}"), &b);
    }
    pool.len() + iters
}
