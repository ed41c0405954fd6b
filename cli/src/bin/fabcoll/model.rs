//! `fabcoll model`: probes the cost model's parameters (α, β, γ, f_α, f_β, copy cost, per-call
//! overhead) over a job and writes this machine's cache file; `--compare LOG` instead checks the
//! model against an autotuner log (no fabric needed). See `fabcoll::select::model`.

use std::path::PathBuf;

use fabcoll::fabric::settings::Settings;
use fabcoll::select::model::fit::terms_on;
use fabcoll::select::model::probe::ProbeReport;
use fabcoll::select::model::{cache, compare, predict, ModelParams, Rendezvous};
use fabcoll::{Collectives, Communicator};

#[derive(clap::Args, Debug)]
#[command(after_help = MODEL_HELP)]
pub struct ModelArgs {
    /// Compare the model with a tuner log (JSON Lines of measurements) instead of probing.
    #[arg(long, value_name = "LOG")]
    compare: Option<PathBuf>,
    /// Print the model's prediction for every eligible algorithm of OP (at -p ranks, --bytes per
    /// block; f32 for reductions, u8 otherwise) instead of probing. Nothing runs.
    #[arg(long, value_name = "OP", value_parser = crate::parse_coll)]
    estimate: Option<fabcoll::collectives::Collective>,
    /// --estimate: bytes per block (suffixes K, M, G).
    #[arg(long, default_value = "1M", value_parser = crate::parse_size)]
    bytes: u64,
    /// --estimate: number of ranks.
    #[arg(short = 'p', default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=65536))]
    p: u32,
    /// --compare, --estimate: use these parameters for every fabric (alpha=..,beta=..[,gamma=..,f_alpha=..,
    /// f_beta=..,copy_beta=..,overhead=..,gap=..,cpu_sends=0|1], seconds and seconds per byte; gap is a share of
    /// alpha).
    #[arg(long, value_name = "K=V,...")]
    machine: Option<String>,
    /// --compare, --estimate: read the parameters from this model file (default: this machine's cache file
    /// for each fabric and p of the log).
    #[arg(long, value_name = "FILE")]
    model_file: Option<PathBuf>,
    /// --compare, --estimate: the executor's eager/rendezvous switch (eager_limit=BYTES,alpha=SECONDS:
    /// messages above the limit cost alpha more); default: the model file's, else none.
    #[arg(long, value_name = "K=V,...")]
    rendezvous: Option<String>,
    /// Probe without writing the cache file.
    #[arg(long)]
    no_cache: bool,
    /// Fabric: `local` runs -n ranks as threads here; anything else sets FABCOLL_FABRIC for a job
    /// started by fabrun.
    #[arg(long)]
    fabric: Option<String>,
    /// Ranks, with --fabric local only.
    #[arg(short = 'n', value_parser = clap::value_parser!(u32).range(1..=1024))]
    n: Option<u32>,
}

const MODEL_HELP: &str = "\
The probe times forced bcast:binomial (one-way messages, and pipelined) and allgather:ring
(exchanges) over a few sizes, the reduction kernel and memcpy, and fits the parameters by least
squares; the cache file is $FABCOLL_MODEL_DIR, $XDG_CACHE_HOME/fabcoll or ~/.cache/fabcoll
/model-<host>-<fabric>-p<class>.json. FABCOLL_SELECT=model makes the default selection use it.

Examples:
  fabrun -n 4 fabcoll model
  fabrun -n 2 --fabric ofi:tcp fabcoll model
  fabcoll model --compare tune-log.jsonl
  fabcoll model --compare tune-log.jsonl --machine alpha=2e-6,beta=1e-10,gamma=1e-10
  fabcoll model --estimate allreduce --bytes 64K -p 64 --model-file ~/.cache/fabcoll/model-node1-shm-p4.json";

/// Runs the subcommand.
pub fn main(a: ModelArgs) -> Result<(), String> {
    if let Some(log) = &a.compare {
        return compare_main(&a, log);
    }
    if let Some(coll) = a.estimate {
        return estimate_main(&a, coll);
    }
    if a.machine.is_some() || a.model_file.is_some() || a.rendezvous.is_some() {
        return Err("--machine, --model-file and --rendezvous go with --compare or --estimate".into());
    }
    if a.fabric.as_deref() == Some("local") {
        let n = a.n.unwrap_or(2);
        let comms = Communicator::local(n as usize).map_err(|e| e.to_string())?;
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let a = &a;
            let hs: Vec<_> = comms.into_iter().map(|c| s.spawn(move || rank_main(&c, a))).collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a rank thread panicked".into()))).collect()
        });
        return results.into_iter().collect();
    }
    if a.n.is_some() {
        return Err("-n is for --fabric local; for processes run `fabrun -n N fabcoll model`".into());
    }
    if let Some(f) = &a.fabric {
        let fabric = f.parse::<fabcoll::fabric::Backend>().map_err(|e| format!("--fabric {f:?}: {e}"))?;
        Settings { fabric: Some(fabric), ..Settings::installed() }.install();
    }
    let c = Communicator::from_env().map_err(|e| e.to_string())?;
    rank_main(&c, &a)
}

/// One rank: the probe, the report and cache file on rank 0, and a closing barrier (as bench:
/// no rank leaves while a peer may still be in the last collective).
fn rank_main(c: &Communicator, a: &ModelArgs) -> Result<(), String> {
    let err = |e: fabcoll::Error| format!("rank {}: {e}", c.rank());
    let report = c.probe_model().map_err(err)?;
    let out = if c.rank() == 0 { report_and_save(c, a, &report) } else { Ok(()) };
    c.barrier().map_err(err)?;
    out
}

fn report_and_save(c: &Communicator, a: &ModelArgs, report: &ProbeReport) -> Result<(), String> {
    let fabric = c.fabric_name();
    let host = cache::hostname();
    print!("{}", describe(report, &host, &fabric, c.size()));
    if a.no_cache || fabric == "local" {
        return Ok(());
    }
    let dir = cache::dir().ok_or("no cache directory: set FABCOLL_MODEL_DIR or HOME")?;
    let path = cache::path_in(&dir, &host, &fabric, c.size());
    let file = cache::ModelFile::new(&host, &fabric, c.size(), report.params);
    cache::save(&path, &file).map_err(|e| e.to_string())?;
    println!("written to {}", path.display());
    Ok(())
}

/// The parameters and each probe point's measured and fitted time.
fn describe(r: &ProbeReport, host: &str, fabric: &str, p: u32) -> String {
    let m = &r.params;
    let mut s = format!(
        "cost model of {host}, fabric {fabric}, p = {p} (probe took {:.2} s)\n\
         alpha     {:>10.3} µs   per message, through the executor\n\
         beta      {:>10.3} ns/B ({:.2} GB/s)\n\
         gamma     {:>10.3} ns/B ({:.2} GB/s, f32 sum)\n\
         f_alpha   {:>10.3}\n\
         f_beta    {:>10.3}\n\
         copy_beta {:>10.3} ns/B\n\
         overhead  {:>10.3} µs   per call\n\
         rendezvous{:>10.3} µs   more per message above {} B (eager limit)\n\
         step_cost {:>10.3} µs   per local step (copy, reduction)\n\
         hot_alpha {:>10.3} µs   more per message its receiver forwards, reduces or copies\n\
         hot_beta  {:>10.3} ns/B more per byte of such a message\n\
         gap       {:>10.3}      share of alpha a message holds the ports (1 = all of it)\n\
         cores     {:>10}      shared by the ranks (0 = one per rank)\n\
         cpu_sends {:>10}      a rank's CPU moves its sends' bytes (no computing meanwhile)\n",
        r.elapsed,
        m.alpha * 1e6,
        m.beta * 1e9,
        gbps(m.beta),
        m.gamma * 1e9,
        gbps(m.gamma),
        m.f_alpha,
        m.f_beta,
        m.copy_beta * 1e9,
        m.overhead * 1e6,
        m.rendezvous.alpha * 1e6,
        m.rendezvous.eager_limit,
        m.step_cost * 1e6,
        m.hot_alpha * 1e6,
        m.hot_beta * 1e9,
        m.gap,
        m.cores,
        if m.cpu_sends { "yes" } else { "no" }
    );
    if !r.samples.is_empty() {
        s += &format!(
            "{:<28} {:>9} {:>8} {:>12} {:>12} {:>7}\n",
            "probe", "bytes", "segment", "measured µs", "model µs", "ratio"
        );
    }
    for (case, secs) in &r.samples {
        let model = case
            .resolve(p)
            .and_then(|(alg, args)| terms_on(alg, &args, m.rendezvous.eager_limit, m.shape()))
            .map(|t| t.time(m));
        let model = model.map_or(f64::NAN, |t| t * 1e6);
        s += &format!(
            "{:<28} {:>9} {:>8} {:>12.2} {:>12.2} {:>7.3}\n",
            format!("{}:{}", case.coll, case.algorithm),
            case.bytes,
            case.segment,
            secs * 1e6,
            model,
            model / (secs * 1e6)
        );
    }
    s
}

fn gbps(per_byte: f64) -> f64 {
    if per_byte > 0.0 {
        1e-9 / per_byte
    } else {
        f64::INFINITY
    }
}

/// Parameters from --machine or --model-file, if given, with --rendezvous (else their own switch).
fn given_params(a: &ModelArgs) -> Result<Option<ModelParams>, String> {
    let m = match (&a.machine, &a.model_file) {
        (Some(_), Some(_)) => return Err("give --machine or --model-file, not both".into()),
        (Some(kv), None) => ModelParams::parse_kv(kv).map_err(|e| e.to_string())?,
        (None, Some(f)) => cache::load_params(f).map_err(|e| e.to_string())?,
        (None, None) => return Ok(None),
    };
    Ok(Some(with_rendezvous(m, given_rendezvous(a)?)))
}

fn given_rendezvous(a: &ModelArgs) -> Result<Option<Rendezvous>, String> {
    a.rendezvous.as_deref().map(|kv| Rendezvous::parse_kv(kv).map_err(|e| format!("--rendezvous: {e}"))).transpose()
}

/// `m` with the switch `rdv`, if given.
fn with_rendezvous(m: ModelParams, rdv: Option<Rendezvous>) -> ModelParams {
    ModelParams { rendezvous: rdv.unwrap_or(m.rendezvous), ..m }
}

fn estimate_main(a: &ModelArgs, coll: fabcoll::collectives::Collective) -> Result<(), String> {
    let m = given_params(a)?.ok_or("--estimate needs --machine or --model-file")?;
    let elem: u32 = if coll.is_reduction() { 4 } else { 1 };
    let count = a.bytes / u64::from(elem);
    let mut args = fabcoll::collectives::CollArgs::new(coll, 0, a.p, count);
    args.elem_size = elem;
    if coll.is_vector() {
        let n = if coll == fabcoll::collectives::Collective::Alltoallv {
            a.p as usize * a.p as usize
        } else {
            a.p as usize
        };
        args = args.with_counts(vec![count; n]);
    }
    let t = std::time::Instant::now();
    let est = predict(&args, &m).map_err(|e| e.to_string())?;
    let took = t.elapsed();
    println!("{coll}, p = {}, {} B per block, model {m}", a.p, a.bytes);
    println!("{:<40} {:>12} {:>8}", "algorithm", "predicted µs", "steps");
    for e in &est {
        let params: Vec<String> = e.params.iter().map(|(k, v)| format!(",{k}={v}")).collect();
        println!("{:<40} {:>12.2} {:>8}", format!("{}{}", e.algorithm, params.concat()), e.seconds * 1e6, e.steps);
    }
    println!(
        "(in the model's order: within {:.0}% of the fastest, fewest steps first; then by time)",
        fabcoll::select::model::predict::TIE * 100.0
    );
    println!("{} candidates simulated in {:.1} ms", est.len(), took.as_secs_f64() * 1e3);
    Ok(())
}

fn compare_main(a: &ModelArgs, log: &PathBuf) -> Result<(), String> {
    let text = std::fs::read_to_string(log).map_err(|e| format!("reading {}: {e}", log.display()))?;
    let entries = compare::read_log(&text).map_err(|e| e.to_string())?;
    let fixed = given_params(a)?;
    let host = cache::hostname();
    let given_rdv = given_rendezvous(a)?;
    let c = compare::compare(&entries, |fabric, p| {
        if let Some(m) = fixed {
            return Ok(m);
        }
        let dir = cache::dir().ok_or_else(|| fabcoll::Error::InvalidArgument {
            coll: "fabcoll model",
            msg: "no cache directory (set FABCOLL_MODEL_DIR or HOME), or pass --machine".into(),
        })?;
        let path = cache::path_in(&dir, &host, fabric, p);
        let found = cache::load(&path)?.map(|f| with_rendezvous(f.model(), given_rdv));
        found.ok_or_else(|| fabcoll::Error::InvalidArgument {
            coll: "fabcoll model",
            msg: format!(
                "no parameters for fabric {fabric} at p = {p} ({} missing): run `fabrun -n {p} --fabric {fabric} \
                 fabcoll model` first, or pass --machine / --model-file",
                path.display()
            ),
        })
    })
    .map_err(|e| e.to_string())?;
    print!("{}", c.table());
    for s in c.skipped.iter().take(10) {
        println!("skipped: {s}");
    }
    Ok(())
}
