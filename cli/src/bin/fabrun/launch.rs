//! Starting, watching and stopping the ranks: the store, one process group per rank (so a kill
//! reaches a rank's own children too), line-prefixed output, failure and timeout teardown, and
//! SIGINT/SIGTERM forwarding.
//!
//! After a rank fails, the others are left alone for the grace period first: they are about to
//! notice the failed peer and report it, and a rank stopped at once dies before its error reaches
//! the user. Only those still running then get SIGTERM, and SIGKILL a grace period later. Every
//! rank fabrun stopped is named at the end, so that a missing last line has its reason.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use fabcoll::fabric::bootstrap::TcpStoreServer;
use fabcoll::fabric::settings;
use rustix::process::{kill_process_group, Pid, Signal};

/// What to run.
#[derive(Debug)]
pub struct Plan {
    pub n: u32,
    pub fabric: Option<String>,
    pub timeout: Option<Duration>,
    pub grace: Duration,
    pub prefix: bool,
    pub env: Vec<(String, String)>,
    pub prog: PathBuf,
    pub args: Vec<String>,
    /// The CPU each rank is pinned to (empty: no pinning).
    pub bind: Vec<usize>,
    /// The emulated node each rank is on, passed as `FABCOLL_NODE=node<i>` (empty: none).
    pub node_of: Vec<usize>,
}

/// The emulated node of each of `n` ranks on `nodes` nodes (`nodes <= n`): contiguous blocks,
/// balanced to within one, larger ones first (5 ranks on 2 nodes: 0 1 2 | 3 4).
pub fn node_blocks(n: u32, nodes: u32) -> Vec<usize> {
    blocks(n as usize, &(0..nodes as usize).collect::<Vec<_>>())
}

/// The CPU of each of `n` ranks when `bind` and there are at least 2 of them: the CPUs fabrun may
/// run on, in order; when the ranks outnumber them, in blocks of consecutive ranks (balanced to
/// within one: 4 ranks on 2 CPUs put ranks 0, 1 on the first and 2, 3 on the second); otherwise
/// none (one rank has no peer to share a CPU with).
pub fn placement(n: u32, bind: bool) -> Vec<usize> {
    let Ok(set) = rustix::thread::sched_getaffinity(None) else { return Vec::new() };
    let cpus: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect();
    if !bind || n < 2 || cpus.is_empty() {
        return Vec::new();
    }
    blocks(n as usize, &cpus)
}

/// How many different CPUs `bind` uses.
fn distinct(bind: &[usize]) -> usize {
    let mut v = bind.to_vec();
    v.sort_unstable();
    v.dedup();
    v.len()
}

/// Rank r of `n` on `cpus[r]` if there are enough, else on `cpus[r * cpus.len() / n]`.
fn blocks(n: usize, cpus: &[usize]) -> Vec<usize> {
    if n <= cpus.len() {
        return cpus[..n].to_vec();
    }
    (0..n).map(|r| cpus[r * cpus.len() / n]).collect()
}

/// Pins the rank that `cmd` starts to `cpu` before it runs anything (threads it starts later
/// inherit the mask).
///
/// Before `exec`, not after `spawn`: library constructors that run when the program loads may
/// read the mask, move the thread and put the mask they read back. Debian's libfabric links
/// libpsm2 and libinfinipath, whose constructors pin the loading thread to CPU 0 for a while
/// and then restore the mask they found; a pin that landed in that window was undone, the rank
/// ran unpinned and now and then shared a CPU with another rank (`docs/measurements/2026-11-27-cli.md`).
fn pin_at_exec(cmd: &mut Command, cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    // SAFETY: the closure runs in the child between fork and exec, where only async-signal-safe
    // calls are allowed: it makes one system call (rustix calls the kernel directly) on a set
    // built before the fork, and allocates nothing. A failure is reported by `pin` after spawn.
    unsafe {
        cmd.pre_exec(move || {
            let _ = rustix::thread::sched_setaffinity(None, &set);
            Ok(())
        });
    }
}

/// Pins a started rank to `cpu` again (a no-op once [`pin_at_exec`] worked) and says so if that
/// fails: a failure only costs speed, so it is a warning.
fn pin(child: &Child, rank: usize, cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if let Err(e) = rustix::thread::sched_setaffinity(Some(rustix::process::Pid::from_child(child)), &set) {
        eprintln!("fabrun: cannot pin rank {rank} to CPU {cpu}: {e}");
    }
}

/// Longest sleep of the supervising loop between checks of the ranks, the signals and the
/// timeout. It wakes at once when an output stream ends; otherwise it only reacts to signals,
/// timeouts and ranks that exit without closing their output (their children hold it) this much
/// later. Polling every few milliseconds, this loop and the store's accept loop preempted the
/// pinned ranks (docs/measurements/2026-11-27-cli.md).
const TICK: Duration = Duration::from_millis(50);

/// Exit code when the job outlived `--timeout` (as timeout(1)).
const TIMEOUT_CODE: u8 = 124;
/// Exit code when the program could not be started (as a shell).
const NOT_STARTED_CODE: u8 = 127;

/// A secret for the store, fresh per job.
fn token() -> Result<String, String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| format!("reading /dev/urandom for the job token: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Copies `pipe` to stdout or stderr line by line, each line written whole under the stream's lock.
fn forward(pipe: Box<dyn Read + Send>, prefix: Vec<u8>, to_stderr: bool, done: mpsc::Sender<()>) {
    std::thread::spawn(move || {
        let mut r = BufReader::with_capacity(1 << 16, pipe);
        let mut line = Vec::new();
        let mut out = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            out.clear();
            out.extend_from_slice(&prefix);
            out.extend_from_slice(&line);
            if out.last() != Some(&b'\n') {
                out.push(b'\n');
            }
            // A closed stdout (e.g. `| head`) must not stop the rank: keep draining its pipe.
            let _ = if to_stderr {
                let mut e = std::io::stderr().lock();
                e.write_all(&out).and_then(|_| e.flush())
            } else {
                let mut o = std::io::stdout().lock();
                o.write_all(&out).and_then(|_| o.flush())
            };
        }
        let _ = done.send(());
    });
}

/// Signals the process group of `child` (the rank and anything it started).
fn signal(child: &Child, sig: Signal) {
    let _ = kill_process_group(Pid::from_child(child), sig);
}

fn describe(s: ExitStatus) -> (String, u8) {
    match (s.code(), s.signal()) {
        (Some(c), _) => (format!("exited with code {c}"), u8::try_from(c).unwrap_or(1).max(1)),
        (None, Some(sig)) => (format!("was killed by signal {sig}"), u8::try_from(128 + sig).unwrap_or(255)),
        _ => ("ended abnormally".into(), 1),
    }
}

fn list(ranks: &[usize]) -> String {
    ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
}

/// Runs the job; returns fabrun's exit code.
pub fn run(plan: &Plan) -> Result<u8, String> {
    let token = token()?;
    let server = TcpStoreServer::start("127.0.0.1:0", &token).map_err(|e| format!("starting the store: {e}"))?;
    let store = format!("tcp://{}", server.local_addr());

    let sigint = Arc::new(AtomicBool::new(false));
    let sigterm = Arc::new(AtomicBool::new(false));
    for (sig, flag) in [(signal_hook::consts::SIGINT, &sigint), (signal_hook::consts::SIGTERM, &sigterm)] {
        signal_hook::flag::register(sig, flag.clone()).map_err(|e| format!("installing a signal handler: {e}"))?;
    }

    let n = plan.n as usize;
    let (done_tx, done_rx) = mpsc::channel();
    let mut children: Vec<Child> = Vec::with_capacity(n);
    for r in 0..n {
        let mut cmd = Command::new(&plan.prog);
        cmd.args(&plan.args)
            .env(settings::FABCOLL_RANK.name, r.to_string())
            .env(settings::FABCOLL_SIZE.name, n.to_string())
            .env(settings::FABCOLL_LOCAL_RANK.name, r.to_string())
            .env(settings::FABCOLL_LOCAL_SIZE.name, n.to_string())
            .env(settings::FABCOLL_STORE.name, &store)
            .env(settings::FABCOLL_STORE_SERVER.name, "launcher")
            .env(settings::FABCOLL_TOKEN.name, &token)
            .envs(plan.env.iter().map(|(k, v)| (k, v)))
            // Each rank leads its own process group (signals reach its children too); a process
            // outside the terminal's foreground group must not read the terminal, so no stdin.
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(f) = &plan.fabric {
            cmd.env(settings::FABCOLL_FABRIC.name, f);
        }
        if let Some(node) = plan.node_of.get(r) {
            cmd.env(settings::FABCOLL_NODE.name, format!("node{node}"));
        }
        if !plan.bind.is_empty() {
            // A pinned rank's own CPU set is one CPU: tell it how many the job shares, so that
            // only ranks really outnumbering their CPUs take the oversubscribed wait policy.
            cmd.env(settings::FABCOLL_LOCAL_CPUS.name, distinct(&plan.bind).to_string());
        }
        if let Some(&cpu) = plan.bind.get(r) {
            pin_at_exec(&mut cmd, cpu);
        }
        match cmd.spawn() {
            Ok(mut c) => {
                if let Some(&cpu) = plan.bind.get(r) {
                    pin(&c, r, cpu);
                }
                let prefix = if plan.prefix { format!("[{r}] ").into_bytes() } else { Vec::new() };
                if let Some(p) = c.stdout.take() {
                    forward(Box::new(p), prefix.clone(), false, done_tx.clone());
                }
                if let Some(p) = c.stderr.take() {
                    forward(Box::new(p), prefix, true, done_tx.clone());
                }
                children.push(c);
            }
            Err(e) => {
                eprintln!("fabrun: cannot start {} (rank {r}): {e}", plan.prog.display());
                for c in &mut children {
                    signal(c, Signal::KILL);
                    let _ = c.wait();
                }
                return Ok(NOT_STARTED_CODE);
            }
        }
    }
    drop(done_tx);
    let streams = 2 * n;

    let start = Instant::now();
    let mut status: Vec<Option<ExitStatus>> = vec![None; n];
    let mut code: Option<u8> = None;
    let mut term_at: Option<Instant> = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    // The ranks fabrun signalled after a failure, and with what.
    let mut stopped: Vec<(usize, &str)> = Vec::new();
    let mut received = 0u32;
    let mut ended = 0usize;
    loop {
        for (r, c) in children.iter_mut().enumerate() {
            if status[r].is_some() {
                continue;
            }
            let s = match c.try_wait() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("fabrun: waiting for rank {r}: {e}");
                    signal(c, Signal::KILL);
                    c.wait().ok()
                }
            };
            let Some(s) = s else { continue };
            status[r] = Some(s);
            if !s.success() && code.is_none() {
                let (what, c) = describe(s);
                code = Some(c);
                let others: Vec<usize> = (0..n).filter(|&q| q != r && status[q].is_none()).collect();
                if others.is_empty() {
                    eprintln!("fabrun: rank {r} {what}");
                } else {
                    eprintln!(
                        "fabrun: rank {r} {what}; rank(s) {} get {:.1} s to report and end before they are stopped",
                        list(&others),
                        plan.grace.as_secs_f64()
                    );
                }
                term_at = Some(Instant::now() + plan.grace);
            }
        }
        let running: Vec<usize> = (0..n).filter(|&r| status[r].is_none()).collect();
        if running.is_empty() {
            break;
        }
        if term_at.is_some_and(|at| Instant::now() >= at) {
            // The grace period after a failure is over: ask the others to stop, kill them at `kill_at`.
            for &r in &running {
                signal(&children[r], Signal::TERM);
                stopped.push((r, "SIGTERM"));
            }
            term_at = None;
            kill_at.get_or_insert(Instant::now() + plan.grace);
        }
        for (flag, sig, name) in [(&sigint, Signal::INT, "SIGINT"), (&sigterm, Signal::TERM, "SIGTERM")] {
            if flag.swap(false, Ordering::SeqCst) {
                received += 1;
                // A second signal means "now": kill.
                let (sig, how) = if received > 1 { (Signal::KILL, "killing") } else { (sig, "forwarding to") };
                eprintln!("fabrun: {name} received; {how} rank(s) {}", list(&running));
                for &r in &running {
                    signal(&children[r], sig);
                }
                kill_at.get_or_insert(Instant::now() + plan.grace);
            }
        }
        if let Some(t) = plan.timeout {
            if !killed && start.elapsed() >= t {
                eprintln!(
                    "fabrun: timed out after {:.1} s; rank(s) still running: {}; killing them",
                    t.as_secs_f64(),
                    list(&running)
                );
                // A rank that failed first keeps its exit code.
                code.get_or_insert(TIMEOUT_CODE);
                for &r in &running {
                    signal(&children[r], Signal::KILL);
                }
                killed = true;
            }
        }
        if let Some(at) = kill_at {
            if !killed && Instant::now() >= at {
                for &r in &running {
                    signal(&children[r], Signal::KILL);
                    stopped.retain(|&(q, _)| q != r);
                    stopped.push((r, "SIGKILL"));
                }
                killed = true;
            }
        }
        // Sleep until an output stream ends (a rank exiting closes its pipes) or `TICK` passes:
        // not a fixed short poll, whose wake-ups preempt the pinned ranks on their CPUs.
        if done_rx.recv_timeout(TICK).is_ok() {
            ended += 1;
        }
    }
    if code.is_some() {
        // Leftovers of failed jobs (a rank's own children) must not keep the output pipes open.
        for c in &children {
            signal(c, Signal::KILL);
        }
    }
    // Let the output threads drain what the ranks wrote; don't wait forever on pipes that a
    // rank's detached children may hold open.
    let drain_until = Instant::now() + Duration::from_secs(5);
    for _ in ended..streams {
        let left = drain_until.saturating_duration_since(Instant::now());
        if done_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    drop(server);
    for (r, sig) in stopped {
        if status[r].is_some_and(|s| !s.success()) {
            eprintln!("fabrun: rank {r} was stopped by fabrun ({sig}) after the failure above");
        }
    }
    Ok(code.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::{blocks, node_blocks};

    #[test]
    fn emulated_nodes_are_balanced_contiguous_blocks() {
        assert_eq!(node_blocks(4, 2), [0, 0, 1, 1]);
        assert_eq!(node_blocks(5, 2), [0, 0, 0, 1, 1]);
        assert_eq!(node_blocks(3, 3), [0, 1, 2]);
        assert_eq!(node_blocks(3, 1), [0, 0, 0]);
    }

    #[test]
    fn oversubscribed_ranks_go_in_balanced_blocks() {
        assert_eq!(blocks(4, &[0, 1]), [0, 0, 1, 1]);
        assert_eq!(blocks(3, &[0, 1]), [0, 0, 1]);
        assert_eq!(blocks(5, &[2, 5]), [2, 2, 2, 5, 5]);
        assert_eq!(blocks(8, &[0, 1, 2]), [0, 0, 0, 1, 1, 1, 2, 2]);
        assert_eq!(blocks(2, &[0, 1, 2, 3]), [0, 1]);
        for (n, k) in [(7usize, 3usize), (9, 2), (16, 5)] {
            let cpus: Vec<usize> = (0..k).collect();
            let b = blocks(n, &cpus);
            let per: Vec<usize> = cpus.iter().map(|c| b.iter().filter(|&&x| x == *c).count()).collect();
            assert!(per.iter().max().unwrap() - per.iter().min().unwrap() <= 1, "{n} on {k}: {per:?}");
            assert!(b.windows(2).all(|w| w[0] <= w[1]), "{n} on {k}: not in blocks: {b:?}");
        }
    }
}
