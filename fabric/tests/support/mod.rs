//! Multi-process test harness: one `#[test]` function is both the parent and the children.
//!
//! ```ignore
//! #[test]
//! fn ring_of_writes() {
//!     support::ranks("ring_of_writes", 4, Duration::from_secs(60), &[], |job| { /* one rank */ });
//! }
//! ```
//! Run normally, the test starts a TCP store, re-executes its own test binary once per rank with
//! `--exact <name>` and the `FABCOLL_*` environment, and waits. In a child (`FABCOLL_TEST_CHILD`
//! set), it runs the closure with the job's [`Job`] instead. If a rank fails, the others are
//! killed and the test fails with every rank's output; if the job outlives the timeout, all are
//! killed and the test fails naming the ranks still running. Nothing can hang CI. Jobs of one
//! test binary run one at a time.
#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabcoll_fabric::bootstrap::{JobEnv, Store, TcpStore, TcpStoreServer};

/// What a child rank gets.
pub struct Job {
    pub env: JobEnv,
    pub store: Box<dyn Store>,
}

impl Job {
    pub fn rank(&self) -> u32 {
        self.env.rank
    }

    pub fn size(&self) -> u32 {
        self.env.size
    }

    /// Publishes `blob` and returns every rank's blob (see `bootstrap::exchange`).
    pub fn exchange(&self, name: &str, blob: &[u8]) -> Vec<Vec<u8>> {
        fabcoll_fabric::bootstrap::exchange(&*self.store, name, self.rank(), self.size(), blob, Duration::from_secs(30))
            .expect("address exchange")
    }

    /// A job-wide barrier through the store; use each name once.
    pub fn barrier(&self, name: &str) {
        fabcoll_fabric::bootstrap::barrier(&*self.store, name, self.size(), Duration::from_secs(30)).expect("barrier");
    }

    /// Has the parent stop the store (a job started by [`ranks_stoppable_store`]), and returns once
    /// it refuses new clients. The store is gone for every rank from then on.
    pub fn stop_store(&self) {
        self.store.set(STOP_STORE_KEY, b"1").expect("asking the parent to stop the store");
        let t0 = Instant::now();
        while self.env.open_store(Duration::from_millis(200)).is_ok() {
            assert!(t0.elapsed() < Duration::from_secs(10), "the store still answers 10 s after the request");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The key by which a rank asks the parent to stop the store ([`Job::stop_store`]).
const STOP_STORE_KEY: &str = "fabcoll-test/stop-store";

const CHILD_VAR: &str = "FABCOLL_TEST_CHILD";

/// Runs `body` on `n` processes (see the module doc). `env` is added to the children's
/// environment.
pub fn ranks(name: &str, n: u32, timeout: Duration, env: &[(&str, &str)], body: impl FnOnce(Job)) {
    run(name, n, timeout, env, false, body)
}

/// [`ranks`] whose store a rank can stop while the job goes on ([`Job::stop_store`]): the parent
/// watches for the request and drops its store server, as when a launcher's store dies.
pub fn ranks_stoppable_store(name: &str, n: u32, timeout: Duration, env: &[(&str, &str)], body: impl FnOnce(Job)) {
    run(name, n, timeout, env, true, body)
}

fn run(name: &str, n: u32, timeout: Duration, env: &[(&str, &str)], stoppable: bool, body: impl FnOnce(Job)) {
    if std::env::var(CHILD_VAR).as_deref() == Ok(name) {
        let env = JobEnv::from_env().expect("child environment");
        let (store, _server) = env.open_store(Duration::from_secs(30)).expect("child store");
        body(Job { env, store });
        return;
    }
    // One job at a time per test binary: several 4-process jobs on 2 cores starve each other,
    // and the failure tests' grace periods (a few seconds) must not depend on that luck.
    static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let token = format!("test-{}-{}", std::process::id(), name);
    let mut server = Some(TcpStoreServer::start("127.0.0.1:0", &token).expect("test store"));
    let addr = server.as_ref().map(TcpStoreServer::local_addr).expect("started");
    let watcher = stoppable.then(|| TcpStore::connect(addr, &token, Duration::from_secs(5)).expect("store watcher"));
    let exe = std::env::current_exe().expect("test binary path");
    let mut children: Vec<(Child, Arc<Mutex<Vec<u8>>>)> = Vec::new();
    let mut readers = Vec::new();
    for r in 0..n {
        let mut cmd = Command::new(&exe);
        // `--include-ignored`: the parent runs this test, so its ranks must too (an ignored test
        // run by hand with `--ignored` would otherwise pass with children that skipped it).
        cmd.args(["--exact", name, "--nocapture", "--test-threads=1", "--include-ignored"])
            .env(CHILD_VAR, name)
            .env("FABCOLL_RANK", r.to_string())
            .env("FABCOLL_SIZE", n.to_string())
            .env("FABCOLL_LOCAL_RANK", r.to_string())
            .env("FABCOLL_LOCAL_SIZE", n.to_string())
            .env("FABCOLL_STORE", format!("tcp://{addr}"))
            .env("FABCOLL_STORE_SERVER", "launcher")
            .env("FABCOLL_TOKEN", &token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawning a rank");
        let out = Arc::new(Mutex::new(Vec::new()));
        for pipe in [
            child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
            child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let out = out.clone();
            readers.push(std::thread::spawn(move || {
                let mut pipe = pipe;
                let mut buf = [0u8; 4096];
                while let Ok(k) = pipe.read(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    out.lock().unwrap().extend_from_slice(&buf[..k]);
                }
            }));
        }
        children.push((child, out));
    }
    let started = Instant::now();
    let deadline = started + timeout;
    let mut status: Vec<Option<std::process::ExitStatus>> = vec![None; n as usize];
    let failure = loop {
        for (r, (c, _)) in children.iter_mut().enumerate() {
            if status[r].is_none() {
                status[r] = c.try_wait().expect("waiting for a rank");
            }
        }
        if let Some(r) = status.iter().position(|s| s.is_some_and(|s| !s.success())) {
            break Some(format!("rank {r} failed ({})", status[r].unwrap()));
        }
        if status.iter().all(|s| s.is_some()) {
            // Every rank has exited, so its pipes close: read them to the end. A rank that ran no
            // test (`name` is not the test's own name) would pass without running the body.
            readers.drain(..).for_each(|t| drop(t.join()));
            let idle = children
                .iter()
                .position(|(_, out)| String::from_utf8_lossy(&out.lock().unwrap()).contains("running 0 tests"));
            break idle.map(|r| format!("rank {r} ran no test: is {name:?} the name of the test that calls it?"));
        }
        if Instant::now() >= deadline {
            let running: Vec<usize> = (0..n as usize).filter(|&r| status[r].is_none()).collect();
            break Some(format!("timed out after {timeout:?}; ranks still running: {running:?}"));
        }
        if let (Some(w), true) = (&watcher, server.is_some()) {
            if w.get(STOP_STORE_KEY).ok().flatten().is_some() {
                server = None;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Per-job wall time, for the CI budget (shown with --nocapture).
    eprintln!("job {name}: {n} ranks, {:.1} s", started.elapsed().as_secs_f64());
    // FABCOLL_TEST_SHOW=1: every rank's output also when the job succeeded (figures for a note).
    if failure.is_none() && std::env::var_os("FABCOLL_TEST_SHOW").is_some() {
        std::thread::sleep(Duration::from_millis(50));
        for (r, (_, out)) in children.iter().enumerate() {
            let text = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                eprintln!("[{name} rank {r}] {line}");
            }
        }
    }
    if let Some(why) = failure {
        for (c, _) in children.iter_mut() {
            let _ = c.kill();
        }
        for (c, _) in children.iter_mut() {
            let _ = c.wait();
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut report = format!("{name}: {why}\n");
        for (r, (_, out)) in children.iter().enumerate() {
            let text = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                report.push_str(&format!("[rank {r}] {line}\n"));
            }
        }
        panic!("{report}");
    }
}
