//! The C ABI from C: `tests/c/smoke.c` is compiled with `cc` against `include/fabcoll.h` and the
//! cdylib this test build made, and run under `fabrun -n 3` (shm, then tcp) with a wall-clock
//! limit. `fabrun` is the one `cargo test --workspace` builds into the same target directory;
//! when it is not there (this package tested alone), it is built into a directory of its own.
//! Testing this package alone after changing the library: `cargo build -p fabcoll-cli --bin fabrun`
//! (same profile) first, so that the launcher and the library speak the same bootstrap protocol.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(180);

/// The directory of this test profile's artifacts (`target/<profile>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/c_program-<hash>
    exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf()
}

/// The directory holding `libfabcoll_capi.so` of this build.
fn cdylib_dir() -> PathBuf {
    let dir = profile_dir();
    for d in [dir.join("deps"), dir.clone()] {
        if d.join("libfabcoll_capi.so").is_file() {
            return d;
        }
    }
    panic!("libfabcoll_capi.so is not in {} or its deps/", dir.display());
}

/// The `fabrun` launcher: next to this build's artifacts, else built for this test.
fn fabrun() -> PathBuf {
    let dir = profile_dir();
    let here = dir.join("fabrun");
    if here.is_file() {
        return here;
    }
    // target/debug is the dev and test profiles' directory; any other is named after its profile.
    let profile = dir.file_name().and_then(|n| n.to_str()).expect("profile directory name");
    let profile = if profile == "debug" { "dev" } else { profile };
    let target = dir.parent().expect("target dir").join("capi-fabrun");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "fabcoll-cli", "--bin", "fabrun", "--profile", profile, "--target-dir"]).arg(&target);
    let status = cmd.current_dir(env!("CARGO_MANIFEST_DIR")).status().expect("run cargo build");
    assert!(status.success(), "building fabrun failed: {status}");
    target.join(dir.file_name().expect("profile directory")).join("fabrun")
}

/// Runs `cmd` to its end within `limit` (killed and failed after), returning (success, stdout,
/// stderr).
fn run_limited(cmd: &mut Command, limit: Duration) -> (bool, String, String) {
    let t0 = Instant::now();
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.success(), out.join().expect("stdout"), err.join().expect("stderr"))
}

/// Compiles `tests/c/smoke.c` into `out` (warnings are errors).
fn compile_smoke(out: &Path) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = cdylib_dir();
    let mut cc = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()));
    cc.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(manifest.join("include"))
        .arg(manifest.join("tests/c/smoke.c"))
        .arg("-o")
        .arg(out)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lfabcoll_capi");
    let (ok, stdout, stderr) = run_limited(&mut cc, Duration::from_secs(120));
    assert!(ok, "cc failed:\n{stdout}\n{stderr}");
}

#[test]
fn the_c_smoke_program_passes_under_fabrun_on_shm_and_tcp() {
    let exe = profile_dir().join(format!("capi-smoke-{}", std::process::id()));
    compile_smoke(&exe);
    let fabrun = fabrun();
    for fabric in ["shm", "tcp"] {
        let mut cmd = Command::new(&fabrun);
        cmd.args(["-n", "3", "--timeout", "150", "--fabric", fabric]).arg(&exe).env("FABCOLL_TIMEOUT", "60");
        let (ok, stdout, stderr) = run_limited(&mut cmd, LIMIT);
        assert!(ok, "smoke on {fabric} failed:\n{stdout}\n{stderr}");
        for r in 0..3 {
            assert!(stdout.contains(&format!("smoke: rank {r} of 3 ok")), "rank {r} on {fabric}:\n{stdout}\n{stderr}");
        }
    }
    let _ = std::fs::remove_file(&exe);
}
