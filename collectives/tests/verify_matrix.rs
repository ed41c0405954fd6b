//! Every registered algorithm through the symbolic verifier over the test matrix: p = 1..=64, roots
//! (all for p ≤ 16; 0, 1, p/2, p−1 above), counts {0, 1, p−1, p, p+1, 997}, commutative and not
//! for reductions, in place where the algorithm and the operation allow it, uniform and irregular
//! (with zeros, and with gaps between blocks) counts for the v-variants, and pipelined runs
//! (`segment` = 3 and 16, p ∈ {1, 2, 3, 5, 8, 12}, counts 10 and 61) of each. Restricted cases are skipped after checking that the registry refuses
//! them.
//!
//! `VERIFY_MIN_P=17`, `VERIFY_MAX_P=16` and `VERIFY_ALG=allreduce:ring` (substring of `op:name`) narrow the matrix for
//! debugging; `VERIFY_SEGMENT=7` pipelines every case; `VERIFY_THREADS` sets the worker count (default: available parallelism).
//! `VERIFY_SAMPLE_ABOVE=32` keeps every p up to 32 and, above, the powers of two, their neighbours, the multiples of 8
//! and the largest (scripts/test.sh, whose build keeps debug assertions on and so runs the verifier slower).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fabcoll_collectives::args::{CollArgs, Collective, SEGMENT};
use fabcoll_collectives::error::Error;
use fabcoll_collectives::registry::{self, Algorithm};
use fabcoll_collectives::verify;

/// The odd count "near 1000": prime, so no p ≤ 64 divides it.
const LARGE: u64 = 997;

/// The full matrix (p ≤ 64) is meant for `cargo test --release` (about a minute of CPU per core
/// pair); an unoptimized `cargo test` covers p ≤ 16 unless `VERIFY_MAX_P` says otherwise.
const DEFAULT_MAX_P: u32 = if cfg!(debug_assertions) { 16 } else { 64 };

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn roots(coll: Collective, p: u32) -> Vec<u32> {
    if !coll.is_rooted() {
        return vec![0];
    }
    if p <= 16 {
        return (0..p).collect();
    }
    let mut r = vec![0, 1, p / 2, p - 1];
    r.dedup();
    r
}

fn counts(p: u32) -> Vec<u64> {
    let p = u64::from(p);
    let mut c = vec![0, 1, p - 1, p, p + 1, LARGE];
    c.sort_unstable();
    c.dedup();
    c
}

/// An irregular count around `c` with zeros: pattern c, 0, c/3 + 1, 2c + 1 (all 0 when c = 0).
fn irregular(c: u64, i: u64) -> u64 {
    if c == 0 {
        return 0;
    }
    [c, 0, c / 3 + 1, 2 * c + 1][(i % 4) as usize]
}

/// The argument sets (rank 0's view) of one algorithm at one p, root and count.
fn variants(alg: &Algorithm, p: u32, root: u32, count: u64) -> Vec<CollArgs> {
    let coll = alg.coll;
    let base = CollArgs::new(coll, 0, p, count).with_root(root);
    let pu = u64::from(p);
    let mut out = Vec::new();
    match coll {
        Collective::Gatherv | Collective::Scatterv | Collective::Allgatherv | Collective::ReduceScatter => {
            let uniform: Vec<u64> = vec![count; p as usize];
            let irreg: Vec<u64> = (0..pu).map(|i| irregular(count, i)).collect();
            out.push(base.clone().with_counts(uniform));
            out.push(base.clone().with_counts(irreg.clone()));
            if coll != Collective::ReduceScatter {
                // Blocks in reverse order with a gap of one element before each.
                let mut displs = vec![0u64; p as usize];
                let mut next = 0;
                for i in (0..p as usize).rev() {
                    displs[i] = next + 1;
                    next = displs[i] + irreg[i];
                }
                let mut g = base.clone().with_counts(irreg);
                g.displs = Some(displs.into());
                out.push(g);
            }
        }
        Collective::Alltoallv => {
            let uniform: Vec<u64> = vec![count; (pu * pu) as usize];
            let irreg: Vec<u64> = (0..pu * pu).map(|k| irregular(count, (k / pu) * 7 + (k % pu) * 3)).collect();
            out.push(base.clone().with_counts(uniform));
            out.push(base.with_counts(irreg));
        }
        _ => out.push(base),
    }
    let mut all = Vec::new();
    for a in out {
        let comms: &[bool] = if coll.is_reduction() { &[true, false] } else { &[true] };
        for &c in comms {
            let a = a.clone().with_commutative(c);
            if in_place_applies(&a) {
                let mut ip = a.clone();
                ip.in_place = true;
                all.push(ip);
            }
            all.push(a);
        }
    }
    all
}

/// Whether MPI_IN_PLACE is defined for the op and the input fits the receive buffer on the ranks
/// that have an in-place offset (reduce_scatter's input is larger than its output, so not there).
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

struct Case {
    alg: &'static Algorithm,
    args: CollArgs,
}

fn selected(alg: &Algorithm) -> bool {
    match std::env::var("VERIFY_ALG") {
        Ok(f) => format!("{}:{}", alg.coll, alg.name).contains(&f),
        Err(_) => true,
    }
}

/// Whether `p` is in the matrix under `VERIFY_SAMPLE_ABOVE` (see the module doc).
fn sampled(p: u32, max_p: u32) -> bool {
    let Some(above) = env_u32("VERIFY_SAMPLE_ABOVE") else { return true };
    let near_power = [p - 1, p, p + 1].iter().any(|q| q.is_power_of_two());
    p <= above || near_power || p.is_multiple_of(8) || p == max_p
}

fn matrix() -> Vec<Case> {
    let max_p = env_u32("VERIFY_MAX_P").unwrap_or(DEFAULT_MAX_P);
    let min_p = env_u32("VERIFY_MIN_P").unwrap_or(1);
    let seg = env_u32("VERIFY_SEGMENT").map(u64::from);
    let mut cases = Vec::new();
    for alg in registry::all().filter(|a| selected(a)) {
        for p in (min_p..=max_p).filter(|&p| sampled(p, max_p)) {
            for root in roots(alg.coll, p) {
                for count in counts(p) {
                    for args in variants(alg, p, root, count) {
                        let args = match seg {
                            Some(s) => args.with_param(SEGMENT, s),
                            None => args,
                        };
                        cases.push(Case { alg, args });
                    }
                }
            }
        }
        // Pipelining: segments of 3 and 16 elements, counts that give partial last segments.
        for p in [1, 2, 3, 5, 8, 12] {
            for count in [10, 61] {
                for seg in [3, 16] {
                    for args in variants(alg, p, p - 1, count) {
                        cases.push(Case { alg, args: args.with_param(SEGMENT, seg) });
                    }
                }
            }
        }
    }
    cases
}

/// Runs one case; `Ok(false)` = skipped because a restriction excludes it (and the registry
/// refused it as it must).
fn run(case: &Case) -> Result<bool, String> {
    let (alg, args) = (case.alg, &case.args);
    let name = format!("{}:{} ({})", alg.coll, alg.name, verify::describe_args(args));
    if let Some(why) = alg.restrictions.violated(args) {
        return match alg.schedule(args) {
            Err(Error::Restriction { .. }) => Ok(false),
            Err(e) => Err(format!("{name}: restricted ({why}) but refused with another error: {e}")),
            Ok(_) => Err(format!("{name}: restriction violated ({why}) but the registry built a schedule")),
        };
    }
    match verify::check(alg, args) {
        Ok(()) => Ok(true),
        Err(e @ Error::Verify(_)) => Err(e.to_string()),
        Err(e) => Err(format!("{name}: could not build a schedule: {e}")),
    }
}

#[test]
fn every_algorithm_passes_the_matrix() {
    let cases = Arc::new(matrix());
    let next = Arc::new(AtomicUsize::new(0));
    let failures: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let times: Mutex<Vec<(String, f64)>> = Mutex::default();
    let ran = AtomicUsize::new(0);
    let skipped = AtomicUsize::new(0);
    let threads = env_u32("VERIFY_THREADS")
        .map(|t| t as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let t = Instant::now();
                let res = run(case);
                let key = format!("{}:{}", case.alg.coll, case.alg.name);
                {
                    let mut times = times.lock().unwrap();
                    match times.iter_mut().find(|(k, _)| *k == key) {
                        Some(e) => e.1 += t.elapsed().as_secs_f64(),
                        None => times.push((key.clone(), t.elapsed().as_secs_f64())),
                    }
                }
                match res {
                    Ok(true) => ran.fetch_add(1, Ordering::Relaxed),
                    Ok(false) => skipped.fetch_add(1, Ordering::Relaxed),
                    Err(msg) => {
                        failures.lock().unwrap().push((key, msg));
                        0
                    }
                };
            });
        }
    });
    let failures = failures.lock().unwrap();
    eprintln!(
        "verify matrix (p ≤ {}): {} cases ({} verified, {} refused by restrictions, {} failed) in {:.1?} on {threads} \
         threads",
        env_u32("VERIFY_MAX_P").unwrap_or(DEFAULT_MAX_P),
        cases.len(),
        ran.load(Ordering::Relaxed),
        skipped.load(Ordering::Relaxed),
        failures.len(),
        t0.elapsed()
    );
    let mut times = times.into_inner().unwrap();
    times.sort_by(|a, b| b.1.total_cmp(&a.1));
    let slow: Vec<String> = times.iter().take(8).map(|(k, t)| format!("{k} {t:.1}s")).collect();
    eprintln!("slowest: {}", slow.join(", "));
    if failures.is_empty() {
        return;
    }
    // Per algorithm: number of failing cases and the first (smallest) one.
    let mut per: Vec<(String, usize, String)> = Vec::new();
    for (k, m) in failures.iter() {
        match per.iter_mut().find(|(n, _, _)| n == k) {
            Some(e) => {
                e.1 += 1;
                if m.len() < e.2.len() {
                    e.2 = m.clone();
                }
            }
            None => per.push((k.clone(), 1, m.clone())),
        }
    }
    let report: Vec<String> = per.iter().map(|(k, n, m)| format!("{k}: {n} failing case(s), e.g. {m}")).collect();
    panic!("{} algorithm(s) fail the verifier:\n{}", per.len(), report.join("\n"));
}

/// The registry must refuse every case whose restrictions do not hold (pow2, commutative,
/// in place, uniform counts), and never a case whose restrictions hold for a reason of its own.
#[test]
fn restricted_cases_are_refused() {
    let mut refused = 0;
    for alg in registry::all() {
        for p in [3u32, 6, 12] {
            for args in variants(alg, p, p - 1, 5) {
                if let Some(why) = alg.restrictions.violated(&args) {
                    match alg.schedule(&args) {
                        Err(Error::Restriction { .. }) => refused += 1,
                        other => panic!(
                            "{}:{} ({}): restriction violated ({why}) but schedule gave {other:?}",
                            alg.coll,
                            alg.name,
                            verify::describe_args(&args)
                        ),
                    }
                }
            }
            // In place on an algorithm that declares no_in_place.
            if alg.restrictions.no_in_place {
                for mut args in variants(alg, p, 0, 5).into_iter().filter(|a| !a.in_place) {
                    args.in_place = true;
                    assert!(alg.schedule(&args).is_err(), "{}:{} accepted in place", alg.coll, alg.name);
                }
            }
        }
    }
    // Whatever the registry holds, p = 3 with a non-commutative op exercises the check once there
    // is a pow2 or commutative-only algorithm; the count only documents how much was covered.
    eprintln!("{refused} restricted cases refused");
}
