//! The empirical autotuner behind `fabcoll tune` (faraj-yuan 2005 §3, issue 5 §3), as a pure
//! search over a `measure(candidate, bytes)` function — so it is tested with synthetic costs and
//! driven on a fabric by the command.
//!
//! - [`search`]: phase 1 (best parameters per algorithm per grid size, binary search for the
//!   sizes where they change), phase 2 (best algorithm per size against the embedded default,
//!   same change-point search), output as contiguous size ranges.
//! - [`rounds`]: a batch's repetitions interleaved across candidates, with optional racing.
//! - [`stats`]: repetitions → median and noise with outlier rejection; "beats beyond noise".
//! - [`rules`]: ranges → decision-file rules (`p: [n, n]` per tuned size), merging into a file.
//! - [`log`]: the JSON-lines log of measured points that makes a run resumable.

pub mod log;
pub mod rounds;
pub mod rules;
pub mod search;
pub mod stats;

pub use rounds::Rounds;
pub use search::{
    tune, tune_each, AlgSpace, Axis, Candidate, GridPoint, Measure, Outcome, ParamMap, Piece, Policy, Problem, Tuned,
};
pub use stats::Sample;

/// The grid of faraj-yuan §3.4 (1 B, 64 B, 512 B, 1 KiB, 2 KiB, … doubling) from `min` to `max`
/// bytes inclusive, keeping only multiples of `align` (the element size); 1 B becomes `align`.
pub fn grid(min: u64, max: u64, align: u64) -> Vec<u64> {
    let align = align.max(1);
    let mut v = vec![align, 64, 512];
    let mut s = 1024u64;
    while s <= max {
        v.push(s);
        s = match s.checked_mul(2) {
            Some(x) => x,
            None => break,
        };
    }
    v.retain(|&s| s >= min && s <= max && s % align == 0);
    v
}
