//! `fabcoll pingpong`: point-to-point latency and bandwidth between ranks 0 and 1 (the others
//! wait at the barrier): per size, each round times `iters` round trips (rank 0 sends, rank 1
//! receives and sends back the same bytes), the round's figure is half a round trip; rank 0
//! prints the median over rounds, the best round, and the bandwidth of the median. The same
//! measurement as `scripts/mpi-pingpong.c` does for MPI (`scripts/bench-p2p.sh` runs both).

use std::time::Instant;

use fabcoll::{Collectives, Communicator};

/// Options of `fabcoll pingpong`.
#[derive(clap::Args, Debug)]
pub struct PingpongArgs {
    /// Smallest message in bytes (K, M, G suffixes); sizes double up to --max.
    #[arg(long, default_value = "8", value_parser = crate::parse_size)]
    min: u64,
    /// Largest message in bytes.
    #[arg(long, default_value = "4M", value_parser = crate::parse_size)]
    max: u64,
    /// Rounds per size.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Round trips per round (fewer above 64 KiB: at least 10, at most this many, about 64 MiB moved).
    #[arg(long, default_value_t = 1000)]
    iters: usize,
}

/// Round trips of a round at `bytes`.
fn iters_for(bytes: u64, most: usize) -> usize {
    if bytes <= 65536 {
        return most;
    }
    ((64 << 20) / bytes as usize).clamp(10, most.max(10))
}

/// Runs the measurement on this rank; rank 0 prints one line per size.
pub fn run(c: &Communicator, a: &PingpongArgs) -> Result<(), String> {
    if c.size() < 2 {
        return Err("pingpong needs at least 2 ranks".into());
    }
    let err = |e: fabcoll::Error| e.to_string();
    let me = c.rank();
    let mut buf = vec![0u8; a.max as usize];
    if me == 0 {
        println!(
            "# fabcoll pingpong over {}: half round trip, µs (median of {} rounds, best), MB/s",
            c.fabric_name(),
            a.rounds
        );
        println!("{:>10} {:>10} {:>10} {:>10}", "bytes", "median_us", "best_us", "MB/s");
    }
    let mut bytes = a.min.max(1);
    while bytes <= a.max {
        let n = bytes as usize;
        let iters = iters_for(bytes, a.iters);
        let mut rounds = Vec::with_capacity(a.rounds);
        // One warm-up round trip (registration, first grants).
        for round in 0..=a.rounds {
            c.barrier().map_err(err)?;
            let t0 = Instant::now();
            for _ in 0..if round == 0 { 1 } else { iters } {
                match me {
                    0 => {
                        c.send(&buf[..n], 1, 0).map_err(err)?;
                        c.recv(&mut buf[..n], 1, 0).map_err(err)?;
                    }
                    1 => {
                        c.recv(&mut buf[..n], 0, 0).map_err(err)?;
                        c.send(&buf[..n], 0, 0).map_err(err)?;
                    }
                    _ => {}
                }
            }
            if round > 0 {
                rounds.push(t0.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64);
            }
        }
        if me == 0 {
            rounds.sort_by(f64::total_cmp);
            let median = rounds[rounds.len() / 2];
            println!("{bytes:>10} {median:>10.2} {:>10.2} {:>10.1}", rounds[0], bytes as f64 / median);
        }
        bytes *= 2;
    }
    c.barrier().map_err(err)
}
