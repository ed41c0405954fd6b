//! Maps keyed by small integers on the per-message path (registration keys, (peer, key) pairs,
//! the executor's op and step tables): hashed with FxHash's mixing (rotate, xor, multiply by an
//! odd 64-bit constant, as in rustc) instead of SipHash. The keys are ours — a peer can only look
//! keys up, never insert them — so SipHash's resistance to flooding buys nothing, and it cost a
//! tcp receiver time on every arriving write (two lookups each; `docs/measurements/2026-11-27-tcp.md`).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed by [`KeyHasher`].
pub type KeyMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;
/// A `HashSet` hashed by [`KeyHasher`].
pub type KeySet<K> = HashSet<K, BuildHasherDefault<KeyHasher>>;

/// FxHash-style hasher state.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl KeyHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(K);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_work_and_hashes_spread() {
        let mut m: KeyMap<(usize, u64), u64> = KeyMap::default();
        for i in 0..1000u64 {
            m.insert(((i % 7) as usize, i), i);
        }
        assert_eq!(m.len(), 1000);
        assert_eq!(m.get(&(3, 10)), Some(&10));
        assert_eq!(m.get(&(4, 10)), None);
        let h = |v: u64| {
            let mut s = KeyHasher::default();
            s.write_u64(v);
            s.finish()
        };
        assert_ne!(h(1), h(2));
        assert_ne!(h(0), h(1) >> 1);
        let s: KeySet<u32> = (0..100).collect();
        assert!(s.contains(&99) && !s.contains(&100));
    }
}
