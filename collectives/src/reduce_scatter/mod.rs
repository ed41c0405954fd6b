//! Algorithms of `reduce_scatter` (irregular counts) and `reduce_scatter_block`, one file each;
//! every algorithm gives one row per operation.

#[cfg(test)]
mod cost_tests;
mod hier_multi_leader;
mod pairwise;
pub(crate) mod phases;
mod recursive_doubling;
mod recursive_halving;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[
    recursive_halving::ALGORITHM,
    recursive_halving::ALGORITHM_BLOCK,
    recursive_doubling::ALGORITHM,
    recursive_doubling::ALGORITHM_BLOCK,
    pairwise::ALGORITHM,
    pairwise::ALGORITHM_BLOCK,
    hier_multi_leader::ALGORITHM,
    hier_multi_leader::ALGORITHM_BLOCK,
];

#[cfg(test)]
mod tests {
    /// The full matrix (p = 1..=20, every root, counts up to 997, both op kinds, in place where
    /// defined) through the verifier; run with `cargo test --release -- --ignored`.
    #[test]
    #[ignore = "slow: full verification matrix"]
    fn full_verification_matrix() {
        for alg in super::ALGORITHMS {
            crate::verify::sweep::sweep_counts(alg, 20, 997);
        }
    }
}
