//! `fabcoll sim`: every eligible algorithm of one operation, replayed by the simulator
//! (`fabcoll_collectives::sim`) on a modelled machine for each (p, size) of a grid. `--map`
//! keeps the fastest per cell and draws it ([`crate::map`]) and/or prints it (`--table`); without
//! `--map` every algorithm's time is printed as CSV.
//!
//! Each cell replays one rank when the ranks run rank 0's schedule relabeled by a rotation (or,
//! p a power of two, by XOR) — the simulator's symmetric replay, ~p times less work — and the
//! whole job otherwise. Ties (times within 1e-9 relative) go to the algorithm listed first (`--algos`, or
//! the registry's order). With `--nodes` and `--per-node` the grid is nodes × ranks per node on
//! a two-level machine instead ([`nodes`]).

use std::path::PathBuf;
use std::time::Instant;

use fabcoll::collectives::sim::{self, ModelParams, Network};
use fabcoll::collectives::{registry, Algorithm, CollArgs, Collective, Machine, Schedule};

use crate::map::{self, MapGrid};

#[path = "sim_nodes.rs"]
mod nodes;

/// A Cray T3E-900 as thakur §5.4 measured it (MPI_DOUBLE, MPI_SUM); docs/maps/README.md gives
/// the sources. α = 5 µs: Cray MPI's latency; β = 1 / (300 MB/s): Cray MPI reaches 85–90 % of
/// SHMEM's 340 MB/s; γ = 1 / (150 MB/s): a 450 MHz Alpha 21164 summing doubles streamed from
/// memory (3 memory words per element at ≈ 450 MB/s); f_α = f_β = 1: full-duplex links.
pub const T3E: Machine = Machine { alpha: 5e-6, beta: 1.0 / 300e6, gamma: 1.0 / 150e6, f_alpha: 1.0, f_beta: 1.0 };

const SIM_HELP: &str = "\
Machine: a preset (`t3e`, `unit` = α = β = γ = 1) and/or key=value pairs, comma-separated, later
items overriding earlier ones: alpha (seconds per message), beta (seconds per byte), gamma
(seconds per byte reduced), f_alpha, f_beta (factors for a rank that sends and receives at once,
default 1). Values take an optional unit: s, ms, us, ns (e.g. alpha=6us,beta=3.3ns).
Sizes are bytes of one `count` of the call: the whole vector (allreduce, reduce, bcast, scan,
exscan), one block (gather, scatter, allgather, alltoall, reduce_scatter_block), every rank's
count (v-variants, all equal). A size range doubles: 8..=4M is 8, 16, …, 4 MiB. Process counts:
`2..=128` (every p), `2,4,8`, or mixed; a range may step: `4..=128:4`, or double: `1..=1024:*2`.

Two levels: --nodes and --per-node place the ranks on nodes (regular, in blocks) and make the
grid nodes × ranks per node (one map per size); --network alpha=..,beta=.. prices messages
between nodes (units as for the machine), whose bytes share one interface per node; --machine
is then the node (intra-node α, β, γ).

Examples:
  fabcoll sim --map --op allreduce --machine t3e --commutative --ps 2..=128 --sizes 8..=4M \\
      --algos recursive_doubling,reduce_bcast,rabenseifner,binary_blocks,ring \\
      --out docs/maps/allreduce-t3e.svg --out docs/maps/allreduce-t3e.png
  fabcoll sim --map --table --machine alpha=1,beta=0,gamma=0 --ps 2..=8 --sizes 8..=64
  fabcoll sim --op bcast --machine alpha=2us,beta=0.1ns,gamma=0 --ps 4,8 --sizes 1K..=1M
  fabcoll sim --op bcast --machine alpha=4us,beta=0.1ns,gamma=0 --ps 8,16 --sizes 8..=16K \
      --algos binomial,binary_tree --calls 32
  fabcoll sim --map --table --op allgather --machine alpha=0.5us,beta=0.33ns,gamma=1ns \\
      --network alpha=3us,beta=0.67ns --nodes 1..=1024:*2 --per-node 1..=64:*2 --sizes 512";

#[derive(clap::Args, Debug)]
#[command(after_help = SIM_HELP)]
pub struct SimArgs {
    /// Keep the fastest algorithm per (p, size): draw it (--out) and/or print it (--table).
    #[arg(long)]
    map: bool,
    /// The collective.
    #[arg(long, default_value = "allreduce", value_parser = crate::parse_coll)]
    op: Collective,
    /// The machine model (see below).
    #[arg(long, default_value = "t3e", value_parser = parse_machine)]
    machine: Machine,
    /// Process counts.
    #[arg(long, default_value = "2..=128", value_parser = parse_ps, conflicts_with = "nodes")]
    ps: List<u32>,
    /// Nodes (with --per-node): the rows of a two-level grid instead of --ps.
    #[arg(long, value_parser = parse_ps, requires = "per_node")]
    nodes: Option<List<u32>>,
    /// Ranks per node (with --nodes): the columns of a two-level grid, one grid per size.
    #[arg(long, value_parser = parse_ps, requires = "nodes")]
    per_node: Option<List<u32>>,
    /// The network between nodes (with --nodes): alpha=..,beta=.. (see below).
    #[arg(long, value_parser = parse_network)]
    network: Option<Network>,
    /// With --nodes: a job above this many ranks that no symmetry shortens (rooted trees, some
    /// meshes) is not simulated (named on stderr) instead of replayed rank by rank.
    #[arg(long, default_value_t = 2048, requires = "nodes")]
    max_full_replay: u32,
    /// Sizes in bytes (K, M, G suffixes).
    #[arg(long, default_value = "8..=4M", value_parser = parse_sizes)]
    sizes: List<u64>,
    /// Bytes per element.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    dtype_size: u32,
    /// The reduction op is commutative (MPI_SUM); otherwise only algorithms that keep rank order
    /// compete.
    #[arg(long)]
    commutative: bool,
    /// Only these algorithms compete (comma-separated, in tie-break order); default: all.
    #[arg(long, value_delimiter = ',')]
    algos: Vec<String>,
    /// Write the map here (.svg or .png; repeat for both).
    #[arg(long, value_name = "FILE")]
    out: Vec<PathBuf>,
    /// Print the map as text: per p, the runs of sizes each algorithm wins.
    #[arg(long)]
    table: bool,
    /// Map title (default: op and machine).
    #[arg(long)]
    title: Option<String>,
    /// Time one call of this many back to back, as mpibench and `fabcoll bench --sync none` time
    /// them: each rank starts its next call once its own part of the last is done, so the busiest
    /// rank sets the pace rather than the longest path. Replays every rank. Default: one call.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000), conflicts_with = "nodes")]
    calls: u32,
}

/// A list given as one argument (`2..=128`, `8,16`): clap would take a `Vec` for repeated values.
#[derive(Clone, Debug, PartialEq)]
pub struct List<T>(pub Vec<T>);

fn value_with_unit(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let units = [("ns", 1e-9), ("us", 1e-6), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)];
    let (num, mult) = units.iter().find_map(|(u, m)| t.strip_suffix(u).map(|n| (n, *m))).unwrap_or((t, 1.0));
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * mult),
        _ => Err(format!("{s:?} is not a non-negative number (optionally with a unit s, ms, us, ns)")),
    }
}

/// `t3e`, `unit`, `alpha=..,beta=..,gamma=..,f_alpha=..,f_beta=..` or a preset with overrides.
pub fn parse_machine(s: &str) -> Result<Machine, String> {
    let (mut alpha, mut beta, mut gamma, mut fa, mut fb) = (None, None, None, 1.0, 1.0);
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.split_once('=') {
            None => {
                let m = match item {
                    "t3e" => T3E,
                    "unit" => Machine::UNIT,
                    _ => return Err(format!("unknown machine {item:?} (presets: t3e, unit; or alpha=..,beta=..,…)")),
                };
                (alpha, beta, gamma, fa, fb) = (Some(m.alpha), Some(m.beta), Some(m.gamma), m.f_alpha, m.f_beta);
            }
            Some((k, v)) => {
                let v = value_with_unit(v)?;
                match k.trim() {
                    "alpha" => alpha = Some(v),
                    "beta" => beta = Some(v),
                    "gamma" => gamma = Some(v),
                    "f_alpha" => fa = v,
                    "f_beta" => fb = v,
                    k => return Err(format!("unknown machine parameter {k:?} (alpha, beta, gamma, f_alpha, f_beta)")),
                }
            }
        }
    }
    match (alpha, beta, gamma) {
        (Some(alpha), Some(beta), Some(gamma)) => Ok(Machine { alpha, beta, gamma, f_alpha: fa, f_beta: fb }),
        _ => Err(format!("machine {s:?} lacks alpha, beta or gamma (or a preset: t3e, unit)")),
    }
}

/// `alpha=..,beta=..` of the network between nodes (units as in [`parse_machine`]).
fn parse_network(s: &str) -> Result<Network, String> {
    let (mut alpha, mut beta) = (None, None);
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item.split_once('=').ok_or(format!("{item:?} is not name=value (alpha=..,beta=..)"))?;
        match k.trim() {
            "alpha" => alpha = Some(value_with_unit(v)?),
            "beta" => beta = Some(value_with_unit(v)?),
            k => return Err(format!("unknown network parameter {k:?} (alpha, beta)")),
        }
    }
    match (alpha, beta) {
        (Some(alpha), Some(beta)) => Ok(Network { alpha, beta }),
        _ => Err(format!("network {s:?} needs alpha and beta")),
    }
}

/// Comma-separated items: `n`, `a..=b`, `a..b` (exclusive), each range with an optional `:step`
/// (added) or `:*factor` (multiplied); `next` gives the value after v in a range without a step.
/// The result is sorted, deduplicated.
fn parse_list(
    s: &str,
    parse: impl Fn(&str) -> Result<u64, String>,
    next: impl Fn(u64) -> u64,
) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (range, step) = match item.split_once(':') {
            Some((r, st)) => {
                let (times, st) = st.trim().strip_prefix('*').map_or((false, st), |f| (true, f));
                let least = if times { 2 } else { 1 };
                let v = st.trim().parse::<u64>().ok().filter(|&x| x >= least).ok_or(format!("bad step in {item:?}"))?;
                (r, Some((times, v)))
            }
            None => (item, None),
        };
        let (lo, hi) = if let Some((a, b)) = range.split_once("..=") {
            (parse(a)?, parse(b)?)
        } else if let Some((a, b)) = range.split_once("..") {
            let b = parse(b)?;
            (parse(a)?, b.checked_sub(1).ok_or(format!("empty range {item:?}"))?)
        } else if step.is_some() {
            return Err(format!("a step needs a range: {item:?}"));
        } else {
            let v = parse(range)?;
            (v, v)
        };
        if lo > hi {
            return Err(format!("empty range {item:?}"));
        }
        let mut v = lo;
        while v <= hi {
            out.push(v);
            if out.len() > 100_000 {
                return Err(format!("{s:?} lists more than 100000 values"));
            }
            let n = match step {
                None => next(v),
                Some((false, st)) => v.saturating_add(st),
                Some((true, f)) => v.saturating_mul(f),
            };
            if n <= v {
                break;
            }
            v = n;
        }
    }
    if out.is_empty() {
        return Err(format!("{s:?} lists nothing"));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn parse_ps(s: &str) -> Result<List<u32>, String> {
    let num = |t: &str| t.trim().parse::<u64>().map_err(|_| format!("{t:?} is not a process count"));
    let v = parse_list(s, num, |v| v + 1)?;
    let range = |p: u64| u32::try_from(p).ok().filter(|&p| (1..=1 << 20).contains(&p));
    v.into_iter().map(|p| range(p).ok_or(format!("p = {p} outside 1..=1048576"))).collect::<Result<_, _>>().map(List)
}

fn parse_sizes(s: &str) -> Result<List<u64>, String> {
    parse_list(s, crate::parse_size, |v| v.saturating_mul(2)).map(List)
}

/// The simulated time of `alg` for `args`: the symmetric replay of rank 0 where the
/// simulator's sample ranks ([`sim::sample_ranks`]: neighbours, middle, last, a few in between)
/// run rank 0's schedule relabeled, otherwise the replay of every rank's schedule
/// ([`sim::simulate_alg_sampled`]). (`sampled_symmetry_matches_full_replay` below checks, for
/// every allreduce, bcast and allgather row at small p, that the shortcut gives the full
/// replay's time.)
fn simulate(alg: &Algorithm, args: &CollArgs, cfg: &ModelParams) -> Result<f64, String> {
    sim::simulate_alg_sampled(alg, args, cfg).map(|r| r.time).map_err(|e| e.to_string())
}

/// The time of one of `calls` calls of `alg` back to back ([`Schedule::back_to_back`], every rank
/// replayed); [`simulate`] for one call.
fn simulate_calls(alg: &Algorithm, args: &CollArgs, cfg: &ModelParams, calls: u32) -> Result<f64, String> {
    if calls <= 1 {
        return simulate(alg, args, cfg);
    }
    let err = |e: fabcoll::collectives::Error| e.to_string();
    let schedules: Vec<Schedule> =
        sim::build_all(alg, args).map_err(err)?.iter().map(|s| s.back_to_back(calls as usize)).collect();
    sim::simulate_with(args, &schedules, cfg).map(|r| r.time / f64::from(calls)).map_err(err)
}

/// The call of `size` bytes on p ranks.
fn call(a: &SimArgs, p: u32, size: u64) -> CollArgs {
    let count = size / u64::from(a.dtype_size);
    let mut args = CollArgs::new(a.op, 0, p, count).with_commutative(a.commutative);
    args.elem_size = a.dtype_size;
    if a.op.is_vector() {
        let n = if a.op == Collective::Alltoallv { p as usize * p as usize } else { p as usize };
        args = args.with_counts(vec![count; n]);
    }
    args
}

fn candidates(a: &SimArgs) -> Result<Vec<&'static Algorithm>, String> {
    if a.algos.is_empty() {
        return Ok(registry::for_op(a.op).collect());
    }
    a.algos.iter().map(|n| registry::find(a.op, n.trim()).map_err(|e| e.to_string())).collect()
}

fn machine_note(m: &Machine, net: Option<Network>, dtype: u32, commutative: bool) -> String {
    let net = net.map_or(String::new(), |n| {
        format!(
            "; between nodes α = {:.3} µs, β = {:.4} ns/B ({:.0} MB/s)",
            n.alpha * 1e6,
            n.beta * 1e9,
            if n.beta > 0.0 { 1e-6 / n.beta } else { f64::INFINITY }
        )
    });
    format!(
        "α = {:.3} µs, β = {:.4} ns/B ({:.0} MB/s), γ = {:.4} ns/B ({:.0} MB/s), f_α = {}, f_β = {}{net}; {dtype}-byte elements, {}",
        m.alpha * 1e6,
        m.beta * 1e9,
        if m.beta > 0.0 { 1e-6 / m.beta } else { f64::INFINITY },
        m.gamma * 1e9,
        if m.gamma > 0.0 { 1e-6 / m.gamma } else { f64::INFINITY },
        m.f_alpha,
        m.f_beta,
        if commutative { "commutative op" } else { "non-commutative op" }
    )
}

/// Runs `fabcoll sim`; the text output goes to `out`.
pub fn run(a: &SimArgs, out: &mut dyn std::io::Write) -> Result<(), String> {
    if !a.map && (a.table || !a.out.is_empty()) {
        return Err("--table and --out draw the decision map: add --map".into());
    }
    if a.map && !a.table && a.out.is_empty() {
        return Err("--map needs somewhere to put the map: --out FILE.svg|FILE.png and/or --table".into());
    }
    if let Some(&s) = a.sizes.0.iter().find(|&&s| !s.is_multiple_of(u64::from(a.dtype_size))) {
        return Err(format!("size {s} is not a multiple of --dtype-size {}", a.dtype_size));
    }
    if let (Some(n), Some(k)) = (&a.nodes, &a.per_node) {
        return nodes::run(a, &n.0, &k.0, out);
    }
    if a.network.is_some() {
        return Err("--network prices messages between nodes: add --nodes and --per-node".into());
    }
    let algs = candidates(a)?;
    let cfg = ModelParams::new(a.machine);
    let io = |e: std::io::Error| format!("writing the output: {e}");
    let t0 = Instant::now();
    let mut cells = Vec::with_capacity(a.ps.0.len());
    if !a.map {
        writeln!(out, "op,p,bytes,algorithm,time_us").map_err(io)?;
    }
    let (mut runs, mut skipped) = (0u64, 0u64);
    for &p in &a.ps.0 {
        let mut row = Vec::with_capacity(a.sizes.0.len());
        for &size in &a.sizes.0 {
            let args = call(a, p, size);
            let mut best: Option<(&str, f64)> = None;
            for alg in &algs {
                if alg.restrictions.violated(&args).is_some() {
                    continue;
                }
                let t = match simulate_calls(alg, &args, &cfg, a.calls) {
                    Ok(t) => t,
                    // Too large to replay within bounded memory: the others still run.
                    Err(e) if e.contains(sim::TOO_LARGE_TO_REPLAY) => {
                        eprintln!("fabcoll sim: skipped: {e}");
                        skipped += 1;
                        continue;
                    }
                    Err(e) => return Err(format!("{}:{} p={p} {size} B: {e}", a.op, alg.name)),
                };
                runs += 1;
                if !a.map {
                    writeln!(out, "{},{p},{size},{},{:.4}", a.op, alg.name, t * 1e6).map_err(io)?;
                }
                if best.is_none_or(|(_, b)| t < b * (1.0 - 1e-9)) {
                    best = Some((alg.name, t));
                }
            }
            row.push(best.map(|(n, _)| n.to_string()));
        }
        cells.push(row);
    }
    eprintln!("fabcoll sim: {runs} simulations in {:.2} s", t0.elapsed().as_secs_f64());
    if skipped > 0 {
        eprintln!("fabcoll sim: {skipped} not simulated (above): pass --algos to leave them out");
    }
    if !a.map {
        return Ok(());
    }
    let note = machine_note(&a.machine, None, a.dtype_size, a.commutative);
    let grid = MapGrid {
        title: a.title.clone().unwrap_or_else(|| format!("fastest {} (simulated)", a.op)),
        x_label: "message size (bytes)".into(),
        y_label: "processes p".into(),
        ps: a.ps.0.clone(),
        sizes: a.sizes.0.clone(),
        cells,
        note,
    };
    if a.table {
        out.write_all(table(&grid, "p").as_bytes()).map_err(io)?;
    }
    for path in &a.out {
        map::render(&grid, path)?;
    }
    Ok(())
}

/// The map as text: a line per row (`label` = what the rows are: p, nodes) with the runs of consecutive
/// columns each algorithm wins, `p=33: 8..32 recursive_doubling, 64..16K rabenseifner, 32K..4M
/// binary_blocks`.
pub fn table(g: &MapGrid, label: &str) -> String {
    let mut s = format!("# {}\n# {}\n", g.title, g.note);
    for (p, row) in g.ps.iter().zip(&g.cells) {
        let mut parts = Vec::new();
        let mut i = 0;
        while i < row.len() {
            let j = (i..row.len()).find(|&j| row[j] != row[i]).unwrap_or(row.len());
            let name = row[i].as_deref().unwrap_or("-");
            let range = if j - i == 1 {
                map::size_label(g.sizes[i])
            } else {
                format!("{}..{}", map::size_label(g.sizes[i]), map::size_label(g.sizes[j - 1]))
            };
            parts.push(format!("{range} {name}"));
            i = j;
        }
        s.push_str(&format!("{label}={p}: {}\n", parts.join(", ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines() {
        assert_eq!(parse_machine("t3e").unwrap(), T3E);
        let m = parse_machine("alpha=6us,beta=2ns,gamma=0,f_beta=2").unwrap();
        assert_eq!((m.alpha, m.beta, m.gamma, m.f_alpha, m.f_beta), (6e-6, 2e-9, 0.0, 1.0, 2.0));
        assert_eq!(parse_machine("t3e,alpha=1").unwrap().alpha, 1.0);
        assert!(parse_machine("alpha=1,beta=1").unwrap_err().contains("lacks"));
        assert!(parse_machine("alpha=-1,beta=1,gamma=1").is_err());
        assert!(parse_machine("cray").is_err());
        assert!(parse_machine("delta=1").is_err());
    }

    #[test]
    fn lists() {
        assert_eq!(parse_ps("2..=5").unwrap().0, vec![2, 3, 4, 5]);
        assert_eq!(parse_ps("2..5,8").unwrap().0, vec![2, 3, 4, 8]);
        assert_eq!(parse_ps("4..=16:4,2").unwrap().0, vec![2, 4, 8, 12, 16]);
        assert_eq!(parse_sizes("8..=64").unwrap().0, vec![8, 16, 32, 64]);
        assert_eq!(parse_sizes("1K..=4K,8").unwrap().0, vec![8, 1024, 2048, 4096]);
        assert!(parse_ps("0").is_err());
        assert!(parse_ps("5..=2").is_err());
        assert!(parse_sizes("8..=x").is_err());
        assert!(parse_ps("3:2").is_err());
        assert!(parse_ps("1..=200000").unwrap_err().contains("more than"));
        assert_eq!(parse_ps("1..=64:*2").unwrap().0, vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(parse_ps("3..=20:*3").unwrap().0, vec![3, 9]);
        assert!(parse_ps("1..=8:*1").is_err());
        let n = parse_network("alpha=3us,beta=0.5ns").unwrap();
        assert_eq!((n.alpha, n.beta), (3e-6, 0.5e-9));
        assert!(parse_network("alpha=3us").unwrap_err().contains("needs alpha and beta"));
        assert!(parse_network("alpha=1,beta=1,gamma=1").is_err());
    }

    /// The replay of every rank's schedule.
    fn full(alg: &Algorithm, args: &CollArgs, cfg: &ModelParams) -> Result<f64, String> {
        sim::simulate_alg_with(alg, args, cfg).map(|r| r.time).map_err(|e| e.to_string())
    }

    /// The symmetric shortcut of [`simulate`] (symmetry checked on sample ranks only) gives the
    /// time of the full replay, for every row of three ops, p = 2..=24 (and some larger p of the
    /// T3E map), counts that do and do not divide evenly.
    #[test]
    fn sampled_symmetry_matches_full_replay() {
        let cfg = ModelParams::new(T3E);
        for op in [Collective::Allreduce, Collective::Bcast, Collective::Allgather] {
            for p in (2..=24u32).chain([33, 48, 63, 65, 100]) {
                for count in [1u64, 7, 64, 1000] {
                    let mut args = CollArgs::new(op, 0, p, count);
                    args.elem_size = 8;
                    for alg in registry::eligible(&args) {
                        let (fast, slow) = (simulate(alg, &args, &cfg).unwrap(), full(alg, &args, &cfg).unwrap());
                        assert!(
                            (fast - slow).abs() <= 1e-12 * slow,
                            "{op}:{} p={p} count={count}: {fast} vs {slow}",
                            alg.name
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn table_runs() {
        let n = |s: &str| Some(s.to_string());
        let g = MapGrid {
            title: "t".into(),
            note: "n".into(),
            ps: vec![2, 3],
            sizes: vec![8, 16, 32, 1024],
            cells: vec![vec![n("a"), n("a"), n("b"), n("a")], vec![None, n("c"), n("c"), n("c")]],
            ..MapGrid::default()
        };
        assert_eq!(table(&g, "p"), "# t\n# n\np=2: 8..16 a, 32 b, 1K a\np=3: 8 -, 16..1K c\n");
    }
}
