//! Algorithms of `allreduce`, one file each.

mod allgather_reduce;
mod binary_blocks;
mod rabenseifner;
mod recursive_doubling;
mod reduce_bcast;
mod ring;
mod rsag_halving_ring;
mod rsag_pairwise_ring;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[
    binary_blocks::ALGORITHM,
    recursive_doubling::ALGORITHM,
    reduce_bcast::ALGORITHM,
    allgather_reduce::ALGORITHM,
    rabenseifner::ALGORITHM,
    ring::ALGORITHM,
    rsag_halving_ring::ALGORITHM,
    rsag_pairwise_ring::ALGORITHM,
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
