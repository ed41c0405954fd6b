//! `fabcoll`: the command-line tool. `fabcoll bench` is an OSU-style latency/bandwidth sweep of any
//! collective, algorithm and fabric (run it under fabrun, or in-process with `--fabric local -n N`);
//! `fabcoll info` lists the backends' capabilities and every registered algorithm; `fabcoll sim`
//! replays every algorithm on a modelled machine and `--map` draws the fastest per (p, size).

#[path = "fabcoll/bench.rs"]
mod bench;
#[path = "fabcoll/info.rs"]
mod info;
#[path = "fabcoll/map.rs"]
mod map;
#[path = "fabcoll/model.rs"]
mod model;
#[path = "fabcoll/ops.rs"]
mod ops;
#[path = "fabcoll/overlap.rs"]
mod overlap;
#[path = "fabcoll/pingpong.rs"]
mod pingpong;
#[path = "fabcoll/report.rs"]
mod report;
#[path = "fabcoll/sim.rs"]
mod sim;
#[path = "fabcoll/soak.rs"]
mod soak;
#[path = "fabcoll/tune.rs"]
mod tune;
#[path = "fabcoll/tune_compare.rs"]
mod tune_compare;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use fabcoll::collectives::{registry, Collective};
use fabcoll::fabric::settings::{self, Settings};
use fabcoll::Communicator;

use report::{Format, Meta, Report};

#[derive(Parser, Debug)]
#[command(name = "fabcoll", version, about = "MPI-style collectives without MPI: benchmarks and information")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// OSU-style sweep of one collective over message sizes (run under `fabrun -n N`, or with
    /// `--fabric local -n N` as threads of this process). Rank 0 prints.
    #[command(after_help = BENCH_HELP)]
    Bench(BenchArgs),
    /// Backend capabilities and the algorithm registry (every op:algorithm with its restrictions);
    /// with --settings, every setting (FABCOLL_* knob) and the values this environment gives them.
    Info {
        /// Backends to probe.
        #[arg(long = "fabric", value_name = "FABRIC", default_values_t = ["local".to_string(), "shm".into(), "tcp".into(), "ofi:tcp".into(), "ofi:shm".into()])]
        fabrics: Vec<String>,
        /// Print the settings table instead: name, type, default, layer and meaning of every knob,
        /// then the knobs this environment sets (exit status 1 if one of them does not parse).
        #[arg(long)]
        settings: bool,
        /// Format of --settings: `text`, or `markdown` (the table of docs/settings.md alone).
        #[arg(long, value_enum, default_value_t = info::SettingsFormat::Text, requires = "settings")]
        format: info::SettingsFormat,
    },
    /// Probe the cost model's parameters (run under `fabrun -n N`) or compare it with a tuner log.
    Model(model::ModelArgs),
    /// Simulated times of every algorithm per (p, size) on a modelled machine; `--map` draws the
    /// fastest per cell (SVG/PNG) like thakur Fig 14.
    Sim(sim::SimArgs),
    /// Empirical autotuner (faraj-yuan 2005 §3): measures every algorithm and parameter over a
    /// size grid on this job's fabric and writes a decision file (run under `fabrun -n N`).
    #[command(after_help = tune::TUNE_HELP)]
    Tune(tune::TuneArgs),
    /// Whether a nonblocking allreduce moves while the program computes: the allreduce alone,
    /// a computation alone, and both overlapped, per round (run under `fabrun -n N`).
    Overlap(overlap::OverlapArgs),
    /// Point-to-point latency and bandwidth between ranks 0 and 1 (tagged send/recv round
    /// trips), per size (run under `fabrun -n 2`).
    Pingpong(pingpong::PingpongArgs),
    /// Many allreduces in a row (10⁶ small, 10⁴ large by default) with every rank's resident
    /// memory and open descriptors watched; fails when they grow (run under `fabrun -n N`).
    Soak(soak::SoakArgs),
}

const BENCH_HELP: &str = "\
Sizes (OSU semantics): allreduce, reduce, bcast, scan, exscan, reduce_scatter(_block) = the whole
per-rank buffer; gather, scatter, allgather(v) = one rank's block; alltoall(v) = one pair's block.
Reductions use f32 + sum, the data movers u8. Each size: warm-up, then timed iterations
`t0; collective; t1` each followed by an untimed barrier (--sync none: back to back; --touch: each
rank also reads its receive buffer, untimed, as an application would); avg/min/max
over ranks of the per-rank mean, p50/p99 over all ranks' iterations. With --sync none (and no
--touch) the mean is timed over the whole block of calls, as mpibench does (two clock reads per
call would add to every call), and p50/p99 come from a second pass timed per call. algbw = S/t with S as
nccl-tests defines it (allgather, alltoall, gather, scatter: p x block); busbw = algbw x 2(n-1)/n
(allreduce), (n-1)/n (allgather, reduce_scatter, alltoall, gather, scatter), 1 (bcast, reduce, scan).
Buffers are allocated once from the communicator (registered memory), so registration is not timed.

Examples:
  fabrun -n 4 fabcoll bench --op allreduce --max-size 16M
  fabrun -n 2 --fabric ofi:tcp fabcoll bench --op alltoall --algo pairwise --check --format csv
  fabcoll bench --fabric local -n 4 --op bcast --format json --output bcast.json";

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Sync {
    /// OSU: an untimed barrier after every timed iteration.
    Barrier,
    /// Back-to-back iterations (like mpibench.c and nccl-tests).
    None,
}

#[derive(clap::Args, Debug)]
struct BenchArgs {
    /// The collective (barrier, bcast, reduce, allreduce, gather(v), scatter(v), allgather(v),
    /// alltoall(v), reduce_scatter, reduce_scatter_block, scan, exscan).
    #[arg(long, default_value = "allreduce", value_parser = parse_coll)]
    op: Collective,
    /// Algorithm name (see `fabcoll info`) or `auto` for the automatic choice; a comma-separated
    /// list measures each at every size in turn, in this one launch (rows compare within the
    /// same processes; the CSV's `asked` column says which row is which).
    #[arg(long, default_value = "auto")]
    algo: String,
    /// Smallest size (bytes; suffixes K, M, G = KiB, MiB, GiB).
    #[arg(long, default_value = "8", value_parser = parse_size)]
    min_size: u64,
    /// Largest size; sizes double from --min-size.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    max_size: u64,
    /// Timed iterations per size up to --large-size (scaled down by large-size/size above it).
    #[arg(long, default_value_t = 1000)]
    iters: usize,
    /// Warm-up iterations per size up to --large-size (scaled like --iters).
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    /// Above this size the iteration counts shrink in proportion to the size.
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    large_size: u64,
    /// Scaled-down timed iterations never go below this (nor above --iters).
    #[arg(long, default_value_t = 20)]
    min_iters: usize,
    /// Validate the result of one call per size on every rank (outside the timed loop).
    #[arg(long)]
    check: bool,
    /// Synchronisation between timed iterations.
    #[arg(long, value_enum, default_value_t = Sync::Barrier)]
    sync: Sync,
    /// After each timed call every rank reads its whole receive buffer (untimed), as an
    /// application that uses the result does; OSU and nccl-tests do not.
    #[arg(long)]
    touch: bool,
    /// After each size every rank prints to stderr what its engine counted during that size's
    /// calls (warm-ups and the untimed barriers included): eager and zero-copy messages and
    /// bytes, rendezvous requests and grants, calls run inline and handed over, direct-path
    /// messages, transport copies, registrations. Counters that stayed 0 are left out.
    #[arg(long)]
    stats: bool,
    /// Buffers from the heap, as most programs pass them, instead of `Communicator::alloc`'s
    /// shared memory (which peers on shm copy into through a mapping; into heap memory they copy
    /// with process_vm_writev).
    #[arg(long)]
    heap: bool,
    /// With --heap: the buffers start this many bytes past a 4 KiB boundary (torch's tensors lie
    /// 64 bytes past one, glibc's large blocks 16), instead of where the allocator puts them.
    /// Copies run at different speeds at different offsets.
    #[arg(long, value_name = "BYTES", requires = "heap")]
    heap_offset: Option<usize>,
    /// Calls made in place, as ML frameworks make them (allreduce, allgather and alltoall only):
    /// the input is in the receive buffer, which the result overwrites.
    #[arg(long)]
    in_place: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write the results to FILE instead of stdout (rank 0).
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Fabric: `local` runs -n ranks as threads here; anything else (shm, ofi:tcp, …) sets
    /// FABCOLL_FABRIC for a job started by fabrun, srun or torchrun.
    #[arg(long)]
    fabric: Option<String>,
    /// Ranks, with --fabric local only.
    #[arg(short = 'n', value_parser = clap::value_parser!(u32).range(1..=1024))]
    n: Option<u32>,
}

fn parse_coll(s: &str) -> Result<Collective, String> {
    Collective::from_name(s).ok_or_else(|| {
        let all: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
        format!("unknown operation {s:?} (one of {})", all.join(", "))
    })
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (digits, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a size in bytes (e.g. 8, 64K, 16M)"))
}

/// The fabric a `from_env` job uses, for the report (mirrors `Communicator::from_env`).
fn env_fabric() -> String {
    match settings::FABCOLL_FABRIC.get() {
        Ok(Some(f)) => return f.to_string(),
        Ok(None) => {}
        Err(_) => return "?".into(),
    }
    match fabcoll::fabric::bootstrap::JobEnv::from_env() {
        Ok(e) if e.local_size == Some(e.size) => "shm".into(),
        Ok(_) => "tcp".into(),
        Err(_) => "?".into(),
    }
}

/// One rank's part: the sweep, and on rank 0 the report.
fn rank_main(c: &Communicator, a: &BenchArgs, cfg: &bench::Config, meta: &Meta) -> Result<bool, String> {
    let mut report = if c.rank() == 0 {
        let out: Box<dyn Write + Send> = match &a.output {
            Some(path) => Box::new(std::io::BufWriter::new(
                std::fs::File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?,
            )),
            None => Box::new(std::io::stdout()),
        };
        Some(Report::new(a.format, meta.clone(), out).map_err(|e| format!("writing the report: {e}"))?)
    } else {
        None
    };
    let mut io_err = None;
    let ok = bench::run(c, cfg, &mut |row| {
        if let Some(r) = report.as_mut() {
            if let Err(e) = r.row(row) {
                io_err.get_or_insert(e);
            }
        }
    })?;
    if let Some(e) = io_err {
        return Err(format!("writing the report: {e}"));
    }
    if let Some(r) = report {
        r.finish().map_err(|e| format!("writing the report: {e}"))?;
    }
    Ok(ok)
}

fn bench_main(a: BenchArgs) -> Result<bool, String> {
    let rows = a
        .algo
        .split(',')
        .map(|name| match name.trim() {
            "auto" => Ok(None),
            name => registry::find(a.op, name).map(|_| Some(name.to_owned())).map_err(|e| e.to_string()),
        })
        .collect::<Result<Vec<_>, String>>()?;
    if a.min_size > a.max_size {
        return Err(format!("--min-size {} is larger than --max-size {}", a.min_size, a.max_size));
    }
    if a.in_place && !ops::IN_PLACE.contains(&a.op) {
        return Err(format!("--in-place: {} is not measured in place (allreduce, allgather and alltoall are)", a.op));
    }
    let cfg = bench::Config {
        coll: a.op,
        rows,
        min_size: a.min_size,
        max_size: a.max_size,
        iters: a.iters,
        warmup: a.warmup,
        large: a.large_size.max(1),
        min_iters: a.min_iters,
        check: a.check,
        pace: bench::Pace { barrier: a.sync == Sync::Barrier, touch: a.touch, block: false },
        stats: a.stats,
        heap: a.heap,
        heap_offset: a.heap_offset,
        in_place: a.in_place,
    };
    let local = a.fabric.as_deref() == Some("local");
    let meta = |fabric: String, c: &Communicator| Meta {
        op: a.op.name().into(),
        algo: a.algo.clone(),
        fabric,
        runs_on: None,
        ranks: c.size(),
        topology: c.topology().to_string(),
        dtype: if a.op.is_reduction() { "f32" } else { "u8" }.into(),
        sync: if cfg.pace.barrier { "barrier" } else { "none" }.into(),
        touch: cfg.pace.touch,
        heap: cfg.heap,
        heap_offset: cfg.heap_offset,
        in_place: cfg.in_place,
    };
    if local {
        let n = a.n.unwrap_or(1);
        let comms = Communicator::local(n as usize).map_err(|e| e.to_string())?;
        let meta = meta("local".into(), comms.first().ok_or("-n 0: a job needs at least one rank")?);
        let results: Vec<Result<bool, String>> = std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .into_iter()
                .map(|c| {
                    let (a, cfg, meta) = (&a, &cfg, &meta);
                    s.spawn(move || rank_main(&c, a, cfg, meta).map_err(|e| format!("rank {}: {e}", c.rank())))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a rank thread panicked".into()))).collect()
        });
        let mut ok = true;
        for r in results {
            ok &= r?;
        }
        return Ok(ok);
    }
    if a.n.is_some() {
        return Err(
            "-n is for --fabric local (ranks as threads); for processes run `fabrun -n N fabcoll bench …`".into()
        );
    }
    if let Some(f) = &a.fabric {
        let fabric = f.parse::<fabcoll::fabric::Backend>().map_err(|e| format!("--fabric {f:?}: {e}"))?;
        Settings { fabric: Some(fabric), ..Settings::installed() }.install();
    }
    let c = Communicator::from_env().map_err(|e| e.to_string())?;
    let mut meta = meta(env_fabric(), &c);
    let runs_on = c.fabric_name();
    if runs_on != meta.fabric {
        meta.runs_on = Some(runs_on);
    }
    let ok = rank_main(&c, &a, &cfg, &meta).map_err(|e| format!("rank {}: {e}", c.rank()))?;
    // No exit barrier is needed: the sweep ends with a collective barrier, and a rank that leaves
    // first closes its shm segment in order, so a slower peer never takes it for a crashed one.
    Ok(ok)
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Info { fabrics, settings: false, .. } => {
            // A closed stdout (`| head`) is not an error worth a panic.
            let _ = std::io::stdout().lock().write_all(info::text(&fabrics).as_bytes());
            ExitCode::SUCCESS
        }
        Cmd::Info { settings: true, format, .. } => {
            let (text, ok) = info::settings(format);
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Cmd::Model(a) => match model::main(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fabcoll model: error: {e}");
                ExitCode::from(1)
            }
        },
        Cmd::Sim(a) => match sim::run(&a, &mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fabcoll sim: error: {e}");
                ExitCode::from(1)
            }
        },
        Cmd::Overlap(a) => match Communicator::from_env().map_err(|e| e.to_string()).and_then(|c| overlap::run(&c, &a))
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fabcoll overlap: error: {e}");
                ExitCode::from(1)
            }
        },
        Cmd::Pingpong(a) => {
            match Communicator::from_env().map_err(|e| e.to_string()).and_then(|c| pingpong::run(&c, &a)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("fabcoll pingpong: error: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Cmd::Soak(a) => match Communicator::from_env().map_err(|e| e.to_string()).and_then(|c| soak::run(&c, &a)) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => {
                eprintln!("fabcoll soak: memory or descriptors grew, or a result was wrong (see the table)");
                ExitCode::from(1)
            }
            Err(e) => {
                eprintln!("fabcoll soak: error: {e}");
                ExitCode::from(1)
            }
        },
        Cmd::Tune(a) => match tune::main(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fabcoll tune: error: {e}");
                ExitCode::from(1)
            }
        },
        Cmd::Bench(a) => match bench_main(a) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => {
                eprintln!("fabcoll bench: result check failed (see the check column)");
                ExitCode::from(1)
            }
            Err(e) => {
                eprintln!("fabcoll bench: error: {e}");
                ExitCode::from(1)
            }
        },
    }
}

/// The library's `tracing` events on stderr: warnings and errors by default, `RUST_LOG` (e.g.
/// `RUST_LOG=fabcoll=debug`) to see more. A malformed `RUST_LOG` falls back to the default.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).try_init();
}
