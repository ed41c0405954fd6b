//! Splitting a vector of `count` elements into `p` nearly equal contiguous blocks, the partition
//! that the reduce-scatter, allgather and scatter phases of the large-message algorithms share.
//! Block i has ⌊count/p⌋ + 1 elements for i < count mod p and ⌊count/p⌋ after, so any count
//! (0, < p, not divisible by p) is handled; blocks may be empty.

/// Offset and length of block `i` of `count` elements split into `p` blocks.
pub fn block(count: u64, p: u64, i: u64) -> (u64, u64) {
    debug_assert!(p > 0 && i < p);
    let base = count / p;
    let extra = count % p;
    let off = i * base + i.min(extra);
    let len = base + u64::from(i < extra);
    (off, len)
}

/// Offset and total length of the consecutive blocks `first..first + n`.
pub fn blocks(count: u64, p: u64, first: u64, n: u64) -> (u64, u64) {
    if n == 0 {
        return (block(count, p, first.min(p - 1)).0, 0);
    }
    let (off, _) = block(count, p, first);
    let (last_off, last_len) = block(count, p, first + n - 1);
    (off, last_off + last_len - off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_partition_the_vector() {
        for count in [0u64, 1, 5, 7, 8, 1001] {
            for p in 1..=9u64 {
                let mut next = 0;
                for i in 0..p {
                    let (off, len) = block(count, p, i);
                    assert_eq!(off, next);
                    next = off + len;
                }
                assert_eq!(next, count);
                assert_eq!(blocks(count, p, 0, p), (0, count));
            }
        }
    }
}
