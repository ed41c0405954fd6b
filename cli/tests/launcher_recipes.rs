//! The README's recipes for several machines ("Several machines": Slurm and torchrun) run as
//! written, and `fabrun --help` gives the same ones (one recipe per launcher).
//!
//! The recipes run under `bash` with stand-ins for `srun`, `scontrol` and `torchrun` first in
//! `PATH`: they start the tasks on this machine with the variables the real launchers set (Slurm:
//! `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, `SLURM_NODEID`, `SLURM_TASKS_PER_NODE`;
//! torchrun: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `MASTER_ADDR`,
//! `MASTER_PORT`, with its own store holding `MASTER_PORT` on node 0) and give each emulated node a
//! host identity of its own (`FABCOLL_NODE`, as distinct host names would). The stand-in torchrun
//! behaves as the real one where the recipe depends on it: without `--no-python` it hands the
//! program to the Python interpreter, and without `--node-rank` every node is node 0. The only
//! edits to the recipe text: the program, a free port for the fixed ones, the node name and a
//! token. Every job has a wall-clock limit.

#[path = "common/child.rs"]
mod child;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FABRUN: &str = env!("CARGO_BIN_EXE_fabrun");
const FABCOLL: &str = env!("CARGO_BIN_EXE_fabcoll");
const LIMIT: Duration = Duration::from_secs(120);

const SCONTROL: &str = r#"#!/usr/bin/env python3
# Stand-in for Slurm's scontrol: `scontrol show hostnames LIST` prints one host per line.
import sys
if sys.argv[1:3] != ["show", "hostnames"]:
    sys.exit("scontrol stand-in: only 'show hostnames'")
print("localhost")
print("localhost")
"#;

const SRUN: &str = r#"#!/usr/bin/env python3
# Stand-in for srun inside an allocation of SLURM_JOB_NUM_NODES nodes x SLURM_NTASKS_PER_NODE:
# one task per slot, with the variables srun sets, each emulated node a host of its own.
import os, subprocess, sys
args = [a for a in sys.argv[1:] if not a.startswith("--export")]
nodes = int(os.environ["SLURM_JOB_NUM_NODES"]); per = int(os.environ["SLURM_NTASKS_PER_NODE"])
n = nodes * per
procs = []
for i in range(n):
    env = dict(os.environ, SLURM_PROCID=str(i), SLURM_NTASKS=str(n), SLURM_LOCALID=str(i % per),
               SLURM_NODEID=str(i // per), SLURM_TASKS_PER_NODE=f"{per}(x{nodes})",
               FABCOLL_NODE=f"slurm-node{i // per}")
    procs.append(subprocess.Popen(args, env=env))
sys.exit(max(abs(p.wait()) for p in procs))
"#;

const TORCHRUN: &str = r#"#!/usr/bin/env python3
# Stand-in for torchrun with the static rendezvous: --nproc-per-node local workers per node, the
# variables torchrun sets, and torchrun's own store listening on MASTER_PORT on node 0.
import argparse, os, socket, subprocess, sys
p = argparse.ArgumentParser()
p.add_argument("--nnodes", type=int, required=True)
p.add_argument("--nproc-per-node", type=int, required=True)
p.add_argument("--node-rank", type=int, default=0)
p.add_argument("--rdzv-backend", default="static")
p.add_argument("--master-addr", required=True)
p.add_argument("--master-port", type=int, required=True)
p.add_argument("--no-python", action="store_true")
p.add_argument("prog")
p.add_argument("args", nargs=argparse.REMAINDER)
a = p.parse_args()
store = None
if a.node_rank == 0:
    store = socket.socket()
    store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    store.bind(("127.0.0.1", a.master_port))
    store.listen()
cmd = [a.prog] + a.args if a.no_python else [sys.executable, "-u", a.prog] + a.args
k, world = a.nproc_per_node, a.nnodes * a.nproc_per_node
procs = []
for l in range(k):
    env = dict(os.environ, RANK=str(a.node_rank * k + l), WORLD_SIZE=str(world), LOCAL_RANK=str(l),
               LOCAL_WORLD_SIZE=str(k), GROUP_RANK=str(a.node_rank), MASTER_ADDR=a.master_addr,
               MASTER_PORT=str(a.master_port), FABCOLL_NODE=f"torch-node{a.node_rank}")
    procs.append(subprocess.Popen(cmd, env=env))
sys.exit(max(abs(p.wait()) for p in procs))
"#;

/// The README's "Several machines" block: (Slurm lines, torchrun lines).
fn readme_recipes() -> (String, String) {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    let section = &readme[readme.find("## Several machines").expect("README has 'Several machines'")..];
    let start = section.find("```sh\n").expect("a sh block") + 6;
    let block = &section[start..start + section[start..].find("```").unwrap()];
    let (slurm, torch) = block.split_once("\n\n").expect("the Slurm and torchrun recipes, a blank line apart");
    (slurm.to_owned(), torch.to_owned())
}

/// The commands of a recipe (comments and blank lines left out, continuations joined, spaces
/// squeezed).
fn commands(recipe: &str) -> Vec<String> {
    let joined = recipe.replace("\\\n", " ");
    joined
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A free port whose successor is free too: under torchrun, torchrun's store takes MASTER_PORT and
/// fabcoll's MASTER_PORT + 1 (a CI run failed when another test's socket held the successor).
fn free_port_pair() -> u16 {
    loop {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        if port < u16::MAX && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

/// A directory holding the launcher stand-ins, to put first in `PATH`.
fn stand_ins(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("fabcoll-launchers-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, text) in [("scontrol", SCONTROL), ("srun", SRUN), ("torchrun", TORCHRUN)] {
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn path_with(dir: &Path) -> String {
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default())
}

/// The program every recipe starts: a checked allreduce that prints the job's placement.
fn program() -> String {
    format!("{FABCOLL} bench --op allreduce --min-size 8 --max-size 4096 --iters 20 --warmup 2 --check")
}

/// Runs `script` under bash with the stand-ins first in `PATH` and `env` set.
fn bash(script: &str, dir: &Path, env: &[(&str, String)]) -> child::Output {
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", script]).env("PATH", path_with(dir)).env("FABCOLL_TIMEOUT", "30");
    for var in ["FABCOLL_RANK", "FABCOLL_SIZE", "FABCOLL_STORE", "FABCOLL_FABRIC", "RANK", "SLURM_PROCID"] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    child::run_limited(&mut cmd, LIMIT, |_| {})
}

fn assert_checked(out: &child::Output, ranks: &str) {
    assert!(out.status.success(), "job failed:\n{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains(ranks), "placement {ranks:?} not in:\n{}", out.stdout);
    let rows: Vec<&str> =
        out.stdout.lines().filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok())).collect();
    assert_eq!(rows.len(), 10, "8 B..4 KiB:\n{}", out.stdout);
    assert!(rows.iter().all(|r| r.trim_end().ends_with(" ok")), "a check failed:\n{}", out.stdout);
}

#[test]
fn fabrun_help_gives_the_readme_recipes() {
    let help = Command::new(FABRUN).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let in_help = commands(&help);
    let (slurm, torch) = readme_recipes();
    for cmd in commands(&slurm).into_iter().chain(commands(&torch)) {
        assert!(in_help.iter().any(|h| h.contains(&cmd)), "fabrun --help lacks the README's {cmd:?}");
    }
}

#[test]
fn the_slurm_recipe_runs_as_written() {
    let (slurm, _) = readme_recipes();
    let port = free_port().to_string();
    let script = slurm.replace(":29600", &format!(":{port}")).replace("./myprog", &program());
    assert_ne!(script, slurm, "the recipe names the store port and the program");
    let dir = stand_ins("slurm");
    let env = [
        ("SLURM_JOB_NODELIST", "node[0-1]".to_owned()),
        ("SLURM_JOB_NUM_NODES", "2".to_owned()),
        ("SLURM_NTASKS_PER_NODE", "2".to_owned()),
    ];
    let out = bash(&script, &dir, &env);
    assert_checked(&out, "2 nodes × 2 ranks");
    assert!(out.stdout.contains("fabric tcp"), "{}", out.stdout);
}

#[test]
fn the_torchrun_recipe_runs_as_written_on_two_nodes() {
    let (_, torch) = readme_recipes();
    let port = free_port_pair();
    let script = torch
        .replace("<the same secret on every node>", "0123456789abcdef0123456789abcdef")
        .replace("--master-addr node0", "--master-addr 127.0.0.1")
        .replace("--master-port 29500", &format!("--master-port {port}"))
        .replace("--nproc-per-node 8", "--nproc-per-node 2")
        .replace("./myprog", &program());
    let dir = stand_ins("torchrun");
    let nodes: Vec<_> = (0..2)
        .map(|node| {
            let (script, dir) = (script.clone(), dir.clone());
            std::thread::spawn(move || bash(&script, &dir, &[("NODE_RANK", node.to_string())]))
        })
        .collect();
    let outs: Vec<child::Output> = nodes.into_iter().map(|h| h.join().unwrap()).collect();
    for out in &outs {
        assert!(out.status.success(), "a node failed:\n{}\n{}", out.stdout, out.stderr);
    }
    // Rank 0 (on node 0) prints the results.
    assert_checked(&outs[0], "2 nodes × 2 ranks");
}

/// The stand-in behaves as torchrun where the recipe depends on it: without `--no-python` the
/// program goes to the Python interpreter and the job fails.
#[test]
fn without_no_python_torchrun_hands_the_program_to_python() {
    let dir = stand_ins("nopython");
    let port = free_port();
    let script = format!(
        "torchrun --nnodes 1 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port {port} {FABCOLL} --version"
    );
    let out = bash(&script, &dir, &[]);
    assert!(!out.status.success(), "a binary given to python must fail:\n{}", out.stdout);
}
