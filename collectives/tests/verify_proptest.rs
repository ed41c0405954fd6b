//! Random calls through the symbolic verifier: any registered algorithm, p ≤ 40, any root,
//! count ≤ 300 (random irregular counts with zeros for the v-variants), commutative or not, in
//! place where defined, random pipeline segment. Each case must verify, or be refused by the
//! registry with a `Restriction` error exactly when the algorithm's restrictions exclude it.

use fabcoll_collectives::args::{CollArgs, Collective, SEGMENT};
use fabcoll_collectives::error::Error;
use fabcoll_collectives::registry::{self, Algorithm};
use fabcoll_collectives::verify;
use proptest::prelude::*;

/// Whether MPI_IN_PLACE is defined for the op and the input fits the receive buffer on the ranks
/// that have an in-place offset.
fn in_place_applies(a: &CollArgs) -> bool {
    let mut any = false;
    for r in 0..a.size {
        let ar = a.for_rank(r);
        match ar.in_place_offset() {
            Ok(Some(off)) => {
                any = true;
                match (ar.send_len(), ar.recv_len()) {
                    (Ok(s), Ok(l)) if off + s <= l => {}
                    _ => return false,
                }
            }
            Ok(None) => {}
            Err(_) => return false,
        }
    }
    any
}

/// Random cases per run: 400 take seconds optimized; a build with debug assertions (unoptimized, where
/// the big pipelined cases cost minutes) runs 48 unless `VERIFY_CASES` says otherwise.
fn cases() -> u32 {
    let default = if cfg!(debug_assertions) { 48 } else { 400 };
    std::env::var("VERIFY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A small deterministic generator for the per-block counts.
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *seed >> 33
}

#[derive(Debug, Clone)]
struct Call {
    alg: usize,
    p: u32,
    root: u32,
    count: u64,
    commutative: bool,
    in_place: bool,
    segment: u64,
    seed: u64,
}

fn args_of(alg: &Algorithm, c: &Call) -> CollArgs {
    let mut a = CollArgs::new(alg.coll, 0, c.p, c.count).with_root(c.root % c.p).with_commutative(c.commutative);
    let mut seed = c.seed;
    let mut draw = |n: usize| -> Vec<u64> {
        // A quarter of the blocks empty, the rest anywhere in 0..=count.
        (0..n).map(|_| if lcg(&mut seed).is_multiple_of(4) { 0 } else { lcg(&mut seed) % (c.count + 1) }).collect()
    };
    match alg.coll {
        Collective::Alltoallv => a = a.with_counts(draw((c.p * c.p) as usize)),
        k if k.is_vector() => a = a.with_counts(draw(c.p as usize)),
        _ => {}
    }
    if c.segment > 0 {
        a = a.with_param(SEGMENT, c.segment);
    }
    if c.in_place && in_place_applies(&a) {
        a.in_place = true;
    }
    a
}

fn call() -> impl Strategy<Value = Call> {
    let n = registry::all().count().max(1);
    (
        0..n,
        1..=40u32,
        any::<u32>(),
        prop_oneof![Just(0u64), 1..=300u64],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0u64), 1..=16u64],
        any::<u64>(),
    )
        .prop_map(|(alg, p, root, count, commutative, in_place, segment, seed)| Call {
            alg,
            p,
            root,
            count,
            commutative,
            in_place,
            segment,
            seed,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_calls_verify_or_are_refused(c in call()) {
        let Some(alg) = registry::all().nth(c.alg) else { return Ok(()) };
        let args = args_of(alg, &c);
        let name = format!("{}:{} ({})", alg.coll, alg.name, verify::describe_args(&args));
        let violated = alg.restrictions.violated(&args);
        match verify::check(alg, &args) {
            Ok(()) => prop_assert!(violated.is_none(), "{name}: restriction {violated:?} violated, yet built"),
            Err(Error::Restriction { .. }) => prop_assert!(violated.is_some(), "{name}: refused without reason"),
            Err(e) => prop_assert!(false, "{name}: {e}"),
        }
    }
}
