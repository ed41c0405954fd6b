//! Algorithms of `reduce`, one file each.

mod binary_blocks;
mod binomial;
mod hier_leader;
mod rabenseifner;
mod ring;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] =
    &[binary_blocks::ALGORITHM, binomial::ALGORITHM, rabenseifner::ALGORITHM, ring::ALGORITHM, hier_leader::ALGORITHM];

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
