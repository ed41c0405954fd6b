//! `fabcoll soak`: many allreduces in a row, with every rank's resident memory and open file
//! descriptors watched (issue 37's soak: 10⁶ small and 10⁴ large calls per fabric, memory flat
//! within 5 %, descriptors flat). Per phase (small, then large): a warm-up of 1 % of the calls
//! (registration, plans, rings), a first reading, then the calls, read again after every tenth;
//! every `--check-every`-th result is checked. The baseline is the reading after the first
//! tenth: pools that fill once (libfabric's, the kernel's socket buffers) settle by then, while a
//! leak keeps growing through the other nine. Rank 0 prints each rank's readings and a verdict;
//! the exit status is 1 when a phase grew or a result was wrong.

use std::time::Instant;

use fabcoll::{Collectives, Communicator, ReduceOp};

/// Options of `fabcoll soak`.
#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Calls of the small phase (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    small_calls: u64,
    /// Bytes of a small call (f32 sum); K, M, G suffixes.
    #[arg(long, default_value = "8", value_parser = crate::parse_size)]
    small_size: u64,
    /// Calls of the large phase (0 skips it).
    #[arg(long, default_value_t = 10_000)]
    large_calls: u64,
    /// Bytes of a large call.
    #[arg(long, default_value = "1M", value_parser = crate::parse_size)]
    large_size: u64,
    /// Check the result of every this many calls (and of the last).
    #[arg(long, default_value_t = 1000)]
    check_every: u64,
    /// Largest growth of resident memory over a phase, in percent of its baseline.
    #[arg(long, default_value_t = 5.0)]
    tolerance: f64,
}

/// This process's resident memory (KiB) and open file descriptors.
fn reading() -> Result<[u64; 2], String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| format!("/proc/self/status: {e}"))?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or("no VmRSS in /proc/self/status")?;
    let fds = std::fs::read_dir("/proc/self/fd").map_err(|e| format!("/proc/self/fd: {e}"))?.count() as u64;
    Ok([rss, fds])
}

/// What one rank saw in one phase: resident KiB after the warm-up, at the baseline (a tenth in),
/// at most and at the end; the descriptors after the warm-up, at most and at the end; and the
/// results found wrong.
type Seen = [u64; 8];

fn phase(c: &Communicator, calls: u64, bytes: u64, check_every: u64) -> Result<(Seen, f64), String> {
    let err = |e: fabcoll::Error| e.to_string();
    let n = (bytes / 4).max(1) as usize;
    let send = vec![(c.rank() + 1) as f32; n];
    let mut recv = vec![0.0f32; n];
    let p = u64::from(c.size());
    let want = (p * (p + 1) / 2) as f32;
    for _ in 0..(calls / 100).max(10) {
        c.allreduce(&send, &mut recv, &ReduceOp::Sum).map_err(err)?;
    }
    c.barrier().map_err(err)?;
    let [rss0, fds0] = reading()?;
    let (mut rss_max, mut fds_max, mut wrong) = (rss0, fds0, 0u64);
    let (mut rss, mut fds, mut base) = (rss0, fds0, rss0);
    let tenth = (calls / 10).max(1);
    let t0 = Instant::now();
    for i in 1..=calls {
        recv.fill(0.0);
        c.allreduce(&send, &mut recv, &ReduceOp::Sum).map_err(err)?;
        if (i % check_every.max(1) == 0 || i == calls) && recv.iter().any(|&x| x != want) {
            wrong += 1;
        }
        if i % tenth == 0 || i == calls {
            [rss, fds] = reading()?;
            rss_max = rss_max.max(rss);
            fds_max = fds_max.max(fds);
            if i == tenth {
                base = rss;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(([rss0, base, rss_max, rss, fds0, fds_max, fds, wrong], secs))
}

/// Runs both phases on this rank; rank 0 prints. Returns whether every phase stayed flat and
/// every checked result was right.
pub fn run(c: &Communicator, a: &SoakArgs) -> Result<bool, String> {
    let mut ok = true;
    for (name, calls, bytes) in [("small", a.small_calls, a.small_size), ("large", a.large_calls, a.large_size)] {
        if calls == 0 {
            continue;
        }
        let (seen, secs) = phase(c, calls, bytes, a.check_every)?;
        let mut all = vec![0u64; seen.len() * c.size() as usize];
        c.allgather(&seen, &mut all).map_err(|e| e.to_string())?;
        let mut flat = true;
        if c.rank() == 0 {
            println!(
                "{name}: {calls} allreduces of {bytes} B on {} ranks in {secs:.2} s ({:.2} µs per call, rank 0)",
                c.size(),
                secs * 1e6 / calls as f64
            );
            println!(
                "  rank  rss_warm_kib  rss_base_kib  rss_max_kib  rss_end_kib  growth  fds_warm  fds_max  fds_end  wrong"
            );
        }
        for (r, s) in all.chunks(seen.len()).enumerate() {
            let growth = (s[3] as f64 / s[1].max(1) as f64 - 1.0) * 100.0;
            let this = growth <= a.tolerance && s[6] <= s[4] && s[7] == 0;
            flat &= this;
            if c.rank() == 0 {
                println!(
                    "  {r:>4}  {:>12}  {:>12}  {:>11}  {:>11}  {growth:>5.1}%  {:>8}  {:>7}  {:>7}  {:>5}{}",
                    s[0],
                    s[1],
                    s[2],
                    s[3],
                    s[4],
                    s[5],
                    s[6],
                    s[7],
                    if this { "" } else { "  <- grew or wrong" }
                );
            }
        }
        if c.rank() == 0 {
            println!("  {}", if flat { "flat" } else { "NOT FLAT" });
        }
        ok &= flat;
    }
    Ok(ok)
}
