//! `fabrun`: the single-machine launcher (like `mpirun -n` on one node). Starts the job's
//! bootstrap store, runs N copies of a program with the `FABCOLL_*` environment, prefixes their
//! output with the rank, and if one rank fails kills the rest and exits with that rank's code.
//!
//! Several machines: start the job with Slurm or torchrun instead; fabcoll's bootstrap reads
//! their variables (see `fabrun --help`).

#[path = "fabrun/launch.rs"]
mod launch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

const AFTER_HELP: &str = "\
Environment of every rank: FABCOLL_RANK, FABCOLL_SIZE, FABCOLL_LOCAL_RANK, FABCOLL_LOCAL_SIZE,
FABCOLL_STORE=tcp://127.0.0.1:PORT (a store served by fabrun), FABCOLL_STORE_SERVER=launcher,
FABCOLL_TOKEN (random per job), with --fabric FABCOLL_FABRIC, with --nodes FABCOLL_NODE, and
when ranks are pinned FABCOLL_LOCAL_CPUS (the CPUs they share). Ranks get no stdin; their stdout
and stderr lines come out on fabrun's stdout and stderr, prefixed \"[rank] \", never split.

Exit status: 0 if every rank exits 0; else the exit code of the first rank that failed (128+signal
if it was killed by a signal); 124 on --timeout; 127 if the program cannot be started.

Several machines (fabrun is for one node): let the cluster launcher start the ranks; the
bootstrap reads its variables and needs a shared secret token and a store address (the README's
\"Several machines\" has these recipes too):
  Slurm, inside an allocation (sbatch or salloc -N 2 --ntasks-per-node 8):
    export FABCOLL_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')
    export FABCOLL_STORE=tcp://$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1):29600
    export FABCOLL_FABRIC=tcp   # or ofi:verbs on InfiniBand
    srun --export=ALL ./myprog
  torchrun, on every node (NODE_RANK 0 on node0, 1 on the other); the store listens on MASTER_PORT+1:
    export FABCOLL_TOKEN=<the same secret on every node>
    torchrun --nnodes 2 --nproc-per-node 8 --node-rank $NODE_RANK --rdzv-backend static \\
      --master-addr node0 --master-port 29500 --no-python ./myprog
  FABCOLL_FABRIC names the network fabric (tcp, ofi:tcp, ofi:verbs, ...); default: shm on one node, else tcp.
  On several nodes the ranks of one node reach each other over shm (FABCOLL_NODE_FABRIC=off: the
  network fabric too); `fabcoll bench --stats` counts the traffic of each route.";

/// Runs N ranks of a program on this machine with the fabcoll bootstrap environment.
#[derive(Parser, Debug)]
#[command(name = "fabrun", version, after_help = AFTER_HELP)]
struct Cli {
    /// Number of ranks (processes) to start.
    #[arg(short = 'n', long = "np", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    n: u32,

    // The help texts with `<provider>` and `[rank]` are `help` attributes, not doc comments:
    // rustdoc would read those as an HTML tag and an intra-doc link.
    #[arg(
        long,
        value_name = "FABRIC",
        help = "Fabric the ranks use, passed as FABCOLL_FABRIC: shm, tcp, ofi:tcp, ofi:shm, ofi:<provider>. \
                Default: the ranks decide (shm on one node). `local` runs ranks as threads of one process, so it \
                cannot be launched as processes: use `fabcoll bench --fabric local -n N`"
    )]
    fabric: Option<String>,

    /// Emulate this many nodes on this machine: the ranks are split into contiguous blocks, as
    /// even as possible (5 ranks on 2 nodes: 3 + 2), and each rank gets FABCOLL_NODE=node<i>.
    /// FABCOLL_LOCAL_RANK and FABCOLL_LOCAL_SIZE still count every rank of this machine (they
    /// share its CPUs). More than one node needs a network fabric: the default is then tcp, and
    /// the ranks of one node reach each other over shm (FABCOLL_NODE_FABRIC=off: tcp too).
    #[arg(long, value_name = "NODES", value_parser = clap::value_parser!(u32).range(1..=4096))]
    nodes: Option<u32>,

    /// Kill every rank and exit 124 if the job runs longer than this many seconds.
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,

    #[arg(long, help = "Do not prefix output lines with \"[rank] \"")]
    no_prefix: bool,

    /// Extra environment for every rank (repeatable).
    #[arg(short = 'x', long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,

    /// Pin each rank to one of the CPUs fabrun may run on (`cpu`, the default for 2 or more
    /// ranks: rank r on the r-th CPU, or in balanced blocks of consecutive ranks when they
    /// outnumber the CPUs) or leave placement to the kernel (`none`). Two ranks that the kernel
    /// puts on one CPU while another idles turn every message into a context switch; ranks that
    /// outnumber the CPUs run faster in balanced blocks (0 1 | 2 3) than placed by the kernel or
    /// round-robin (docs/measurements/2026-11-27-cli.md). A rank is pinned before its program starts: libraries that save and
    /// restore the mask as they load (libpsm2 and libinfinipath under Debian's libfabric) undid
    /// a pin made after the start now and then.
    #[arg(long, value_name = "POLICY", value_parser = ["cpu", "none"])]
    bind: Option<String>,

    /// After a rank fails: seconds the others get to report and end on their own before they get
    /// SIGTERM, and again before SIGKILL.
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    grace: f64,

    /// The program to run and its arguments (everything after PROG goes to the program).
    #[arg(value_name = "PROG [ARGS]...", required = true, num_args = 1.., trailing_var_arg = true,
          allow_hyphen_values = true)]
    command: Vec<String>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

fn seconds(what: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("{what} {s} is not a non-negative number of seconds"))
}

fn check_fabric(f: &str) -> Result<(), String> {
    let backend: fabcoll::fabric::Backend = f.parse().map_err(|e| format!("--fabric {f:?}: {e}"))?;
    if backend == fabcoll::fabric::Backend::Local {
        return Err("--fabric local runs ranks as threads of one process, which fabrun (one process per \
                    rank) cannot do: use shm or ofi:<provider>, or run `fabcoll bench --fabric local -n N` \
                    without fabrun"
            .into());
    }
    Ok(())
}

/// The fabric of a job on `nodes` emulated nodes: ranks on different nodes must talk over a
/// network fabric (tcp unless `fabric` names another one); the communicator routes the peers on
/// its node over shared memory by itself (`FABCOLL_NODE_FABRIC`).
fn fabric_for_nodes(nodes: u32, n: u32, fabric: Option<&str>) -> Result<Option<String>, String> {
    if nodes > n {
        return Err(format!("--nodes {nodes} is more nodes than the {n} ranks of -n {n}"));
    }
    if nodes == 1 {
        return Ok(fabric.map(str::to_owned));
    }
    let Some(f) = fabric else { return Ok(Some("tcp".into())) };
    let backend: fabcoll::fabric::Backend = f.parse().map_err(|e| format!("--fabric {f:?}: {e}"))?;
    let node_only = match &backend {
        fabcoll::fabric::Backend::Shm | fabcoll::fabric::Backend::Local => true,
        fabcoll::fabric::Backend::Ofi { provider } => provider == "shm",
        fabcoll::fabric::Backend::Tcp => false,
    };
    if node_only {
        return Err(format!(
            "--fabric {f} reaches only the ranks of one node, and --nodes {nodes} puts the ranks on {nodes}: \
             use a network fabric (tcp, ofi:tcp, …) or leave --fabric out (tcp)"
        ));
    }
    Ok(Some(f.to_owned()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let plan = (|| -> Result<launch::Plan, String> {
        if let Some(f) = &cli.fabric {
            check_fabric(f)?;
        }
        let fabric = match cli.nodes {
            Some(nodes) => fabric_for_nodes(nodes, cli.n, cli.fabric.as_deref())?,
            None => cli.fabric.clone(),
        };
        Ok(launch::Plan {
            n: cli.n,
            fabric,
            timeout: cli.timeout.map(|t| seconds("--timeout", t)).transpose()?,
            grace: seconds("--grace", cli.grace)?,
            prefix: !cli.no_prefix,
            env: cli.env.clone(),
            prog: PathBuf::from(&cli.command[0]),
            args: cli.command[1..].to_vec(),
            bind: launch::placement(cli.n, cli.bind.as_deref() != Some("none")),
            node_of: cli.nodes.map(|k| launch::node_blocks(cli.n, k)).unwrap_or_default(),
        })
    })();
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            eprintln!("fabrun: error: {e}");
            return ExitCode::from(2);
        }
    };
    match launch::run(&plan) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("fabrun: error: {e}");
            ExitCode::from(1)
        }
    }
}
