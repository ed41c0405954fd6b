//! Maps keyed by small integers on the per-message path (registration keys, (peer, key) pairs):
//! hashed with FxHash's mixing (rotate, xor, multiply by an odd 64-bit constant, as in rustc)
//! instead of SipHash. The keys are ours — a peer can only look keys up, never insert them — so
//! SipHash's resistance to flooding buys nothing, and it cost a tcp receiver ~55 instructions per
//! lookup (two lookups per arriving write, callgrind).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed by [`KeyHasher`].
pub(crate) type KeyMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// FxHash-style hasher state.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|&b| self.write_u64(u64::from(b)));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_keys_stay_distinct() {
        let mut m: KeyMap<(usize, u64), u32> = KeyMap::default();
        for peer in 0..8usize {
            for key in 0..64u64 {
                m.insert((peer, key), (peer * 64) as u32 + key as u32);
            }
        }
        assert_eq!(m.len(), 8 * 64);
        assert_eq!(m.get(&(3, 17)), Some(&(3 * 64 + 17)));
        assert_eq!(m.get(&(8, 0)), None);
        m.remove(&(3, 17));
        assert_eq!(m.get(&(3, 17)), None);
        assert_eq!(m.len(), 8 * 64 - 1);
    }
}
