#![allow(dead_code)]
//! Runs a command with a wall-clock limit and collects its output (for the CLI tests: a test can
//! never hang on a child that does not end).

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a finished child left.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Runs `cmd` (stdin closed, stdout and stderr captured); kills it and fails the test after
/// `limit`. `during` gets the child's pid once it has started (e.g. to send it a signal).
pub fn run_limited(cmd: &mut Command, limit: Duration, during: impl FnOnce(u32)) -> Output {
    let t0 = Instant::now();
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let ho = drain(child.stdout.take().unwrap());
    let he = drain(child.stderr.take().unwrap());
    during(child.id());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = t0.elapsed();
    Output { status, stdout: ho.join().unwrap(), stderr: he.join().unwrap(), took }
}
