//! shm backend vs raw baselines between 2 processes: ping-pong of notified one-sided writes
//! (8 B latency, 1 MiB and 16 MiB bandwidth) into an `alloc`ated destination (memcpy through a
//! mapping) and into `register`ed user memory (`process_vm_writev`), and, in the same run, the raw
//! floors of both paths: memcpy into the peer's mapped buffer / plain `process_vm_writev`, each
//! followed by a spinning atomic flag in shared memory. One-way time = round trip / 2.
//!
//! `cargo bench -p fabcoll-fabric --bench shm` (re-executes itself as rank 1; < 1 min).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fabcoll_fabric::bootstrap::{exchange, FileStore};
use fabcoll_fabric::{open, Access, Backend, Completion, Config, Endpoint, Mapping, Mr, RemoteMr, WaitPolicy};

const CHILD: &str = "FABCOLL_SHM_BENCH_CHILD";
const MAX: usize = 16 << 20;
/// Timed batches per case; the best batch is reported (the machine is shared, so the minimum is
/// the figure least disturbed by other processes).
const BATCHES: u64 = 10;
const CASES: [(usize, u64); 3] = [(8, 20_000), (1 << 20, 400), (16 << 20, 30)];

struct Rig {
    ep: Box<dyn Endpoint>,
    rank: usize,
    peer_pid: u32,
    src: Mr,
    _dst: Mr,
    _user_dst: Mr,
    /// Registered as `_user_dst` (declared after it, so it is dropped after the registration).
    _raw_dst: Vec<u8>,
    peer_dst: RemoteMr,
    peer_user_dst: RemoteMr,
    peer_raw_dst: u64,
    peer_map: Mapping,
    flags: Mapping,
    _flags_owner: Option<Mr>,
    out: Vec<Completion>,
}

fn main() {
    let (rank, dir) = match std::env::var(CHILD) {
        Ok(dir) => (1, std::path::PathBuf::from(dir)),
        Err(_) => {
            let dir = std::env::temp_dir().join(format!("fabcoll-shm-bench-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("rendezvous dir");
            (0, dir)
        }
    };
    let mut child = (rank == 0).then(|| {
        std::process::Command::new(std::env::current_exe().expect("bench binary"))
            .env(CHILD, &dir)
            .spawn()
            .expect("spawning rank 1")
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.clone();
    std::thread::spawn(move || tx.send(run(rank, &d)));
    let res = rx.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|_| Err("timed out after 120 s".into()));
    if let Some(c) = child.as_mut() {
        if res.is_err() {
            let _ = c.kill();
        }
        let status = c.wait().expect("waiting for rank 1");
        let _ = std::fs::remove_dir_all(&dir);
        if !status.success() {
            eprintln!("rank 1 failed: {status}");
            std::process::exit(1);
        }
    }
    if let Err(e) = res {
        eprintln!("rank {rank}: {e}");
        std::process::exit(1);
    }
}

fn run(rank: usize, dir: &std::path::Path) -> Result<(), String> {
    let e = |e: fabcoll_fabric::Error| e.to_string();
    let store = FileStore::new(dir).map_err(|e| e.to_string())?;
    let x = |name: &str, blob: &[u8]| {
        exchange(&store, name, rank as u32, 2, blob, Duration::from_secs(30)).map_err(|e| e.to_string())
    };
    let mut cfg = Config::new(Backend::Shm, rank, 2, format!("bench-{}", dir.display()));
    cfg.wait = WaitPolicy::busy();
    let mut ep = open(&cfg).map_err(e)?;
    let blobs = x("addr", &ep.address().map_err(e)?)?;
    ep.insert_peers(&blobs).map_err(e)?;
    let src = ep.alloc(MAX, Access::LOCAL).map_err(e)?;
    src.write_at(0, &vec![rank as u8 + 1; MAX]).map_err(e)?;
    let dst = ep.alloc(MAX, Access::REMOTE_WRITE).map_err(e)?;
    let flags_owner = if rank == 0 { Some(ep.alloc(4096, Access::REMOTE_RW).map_err(e)?) } else { None };
    let mut raw_dst = vec![0u8; MAX];
    // SAFETY: `raw_dst` moves into the Rig with the registration and is dropped after it; the Vec's
    // heap buffer does not move when the Vec does.
    let user_dst = unsafe { ep.register(raw_dst.as_mut_ptr(), MAX, Access::REMOTE_WRITE) }.map_err(e)?;
    let mut info = dst.remote().to_bytes().to_vec();
    info.extend_from_slice(&user_dst.remote().to_bytes());
    info.extend_from_slice(&std::process::id().to_le_bytes());
    info.extend_from_slice(&(raw_dst.as_ptr() as u64).to_le_bytes());
    info.extend_from_slice(&flags_owner.as_ref().map_or([0; RemoteMr::WIRE_LEN], |m| m.remote().to_bytes()));
    let infos = x("info", &info)?;
    let theirs = &infos[1 - rank];
    let w = RemoteMr::WIRE_LEN;
    let peer_dst = RemoteMr::from_bytes(&theirs[..w]).map_err(e)?;
    let peer_user_dst = RemoteMr::from_bytes(&theirs[w..2 * w]).map_err(e)?;
    let peer_pid = u32::from_le_bytes(theirs[2 * w..2 * w + 4].try_into().unwrap());
    let peer_raw_dst = u64::from_le_bytes(theirs[2 * w + 4..2 * w + 12].try_into().unwrap());
    let flags_desc = RemoteMr::from_bytes(&infos[0][2 * w + 12..]).map_err(e)?;
    let flags = ep.map_remote(0, &flags_desc).map_err(e)?;
    let peer_map = ep.map_remote(1 - rank, &peer_dst).map_err(e)?;
    let mut rig = Rig {
        ep,
        rank,
        peer_pid,
        src,
        _dst: dst,
        _user_dst: user_dst,
        _raw_dst: raw_dst,
        peer_dst,
        peer_user_dst,
        peer_raw_dst,
        peer_map,
        flags,
        _flags_owner: flags_owner,
        out: Vec::new(),
    };
    if rank == 0 {
        println!("one-way µs (GB/s): shm→alloc = notified write into an alloc'ed buffer (mapped memcpy),");
        println!("raw memcpy = memcpy into the mapped peer buffer + flag, shm→register = notified write into");
        println!("registered user memory (process_vm_writev), raw vm_writev = process_vm_writev + flag");
        println!(
            "{:>9} {:>20} {:>20} {:>20} {:>20}",
            "bytes", "shm→alloc", "raw memcpy", "shm→register", "raw vm_writev"
        );
    }
    let mut seq = 0u64;
    for (len, iters) in CASES {
        let warm = (iters / 10).max(2);
        let a = rig.shm_pingpong(len, warm, iters, false)?;
        let b = rig.raw_pingpong(len, warm, iters, &mut seq, true)?;
        let c = rig.shm_pingpong(len, warm, iters, true)?;
        let d = rig.raw_pingpong(len, warm, iters, &mut seq, false)?;
        if rank == 0 {
            let f = |t: Duration| format!("{:.2} ({:.2})", us(t), len as f64 / t.as_secs_f64() / 1e9);
            println!("{len:>9} {:>20} {:>20} {:>20} {:>20}", f(a), f(b), f(c), f(d));
        }
    }
    if rank == 0 {
        // Sender-side cost of one 8-byte write, no peer involvement (immune to scheduling noise):
        // shm `write` (key-slot enter/leave, bounds, completion) vs a bare `process_vm_writev`.
        let (shm, raw) = rig.issue_cost(100_000)?;
        println!("issue cost of an 8 B write: shm {:.0} ns, raw process_vm_writev {:.0} ns", ns(shm), ns(raw));
        let t = Instant::now();
        for _ in 0..100_000 {
            rig.out.clear();
            rig.ep.poll(&mut rig.out).map_err(e)?;
        }
        println!("empty poll: {:.0} ns", ns(t.elapsed() / 100_000));
    }
    x("done", b"")?;
    Ok(())
}

fn ns(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl Rig {
    /// One-way time of notified writes of `len` bytes (best batch).
    fn shm_pingpong(&mut self, len: usize, warm: u64, iters: u64, user: bool) -> Result<Duration, String> {
        let mut batches = Vec::new();
        for b in 0..=BATCHES {
            let n = if b == 0 { warm } else { (iters / BATCHES).max(1) };
            let t = Instant::now();
            for i in 0..n {
                if self.rank == 0 {
                    self.send(len, i, user)?;
                    self.recv(i)?;
                } else {
                    self.recv(i)?;
                    self.send(len, i, user)?;
                }
            }
            if b > 0 {
                batches.push(t.elapsed() / (2 * n as u32));
            }
        }
        Ok(batches.into_iter().min().unwrap_or_default())
    }

    fn send(&mut self, len: usize, imm: u64, user: bool) -> Result<(), String> {
        let src = self.src.slice(0, len).map_err(|e| e.to_string())?;
        let dst = if user { self.peer_user_dst } else { self.peer_dst };
        let dst = dst.slice(0, len).map_err(|e| e.to_string())?;
        self.ep.write(1 - self.rank, src, dst, Some(imm), imm).map_err(|e| e.to_string())
    }

    fn recv(&mut self, imm: u64) -> Result<(), String> {
        let peer = 1 - self.rank;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut spins = 0u32;
        loop {
            self.out.clear();
            self.ep.poll(&mut self.out).map_err(|e| e.to_string())?;
            for c in &self.out {
                if let Completion::WriteArrived { peer: p, imm: i } = c {
                    if *p != peer || *i != imm {
                        return Err(format!("unexpected arrival from {p} imm {i}, wanted {imm}"));
                    }
                    return Ok(());
                }
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                if Instant::now() > deadline {
                    return Err("peer stopped answering".into());
                }
                std::thread::yield_now(); // both sides of both benchmarks yield alike on a busy machine
            }
            std::hint::spin_loop();
        }
    }

    /// Baseline: memcpy into the peer's mapped buffer (`memcpy`) or `process_vm_writev` into its plain
    /// buffer, then an atomic flag store the peer spins on.
    fn raw_pingpong(
        &mut self,
        len: usize,
        warm: u64,
        iters: u64,
        seq: &mut u64,
        memcpy: bool,
    ) -> Result<Duration, String> {
        // SAFETY: the flag mapping is 4096 bytes, 8-aligned; words 0 and 1 are only accessed atomically.
        let flag = |i: usize| unsafe { AtomicU64::from_ptr(self.flags.as_ptr().cast::<u64>().add(i)) };
        let (mine, theirs) = (flag(self.rank), flag(1 - self.rank));
        let mut batches = Vec::new();
        for b in 0..=BATCHES {
            let n = if b == 0 { warm } else { (iters / BATCHES).max(1) };
            let t = Instant::now();
            for _ in 0..n {
                *seq += 1;
                if self.rank == 0 {
                    self.raw_copy(len, memcpy)?;
                    theirs.store(*seq, Ordering::Release);
                    spin_until(mine, *seq)?;
                } else {
                    spin_until(mine, *seq)?;
                    self.raw_copy(len, memcpy)?;
                    theirs.store(*seq, Ordering::Release);
                }
            }
            if b > 0 {
                batches.push(t.elapsed() / (2 * n as u32));
            }
        }
        Ok(batches.into_iter().min().unwrap_or_default())
    }

    /// Best of 5 batches of `n` back-to-back 8 B writes without immediate (shm) / raw copies.
    fn issue_cost(&mut self, n: u32) -> Result<(Duration, Duration), String> {
        let (mut shm, mut raw) = (Duration::MAX, Duration::MAX);
        let src = self.src.slice(0, 8).map_err(|e| e.to_string())?;
        let dst = self.peer_dst.slice(0, 8).map_err(|e| e.to_string())?;
        for _ in 0..5 {
            let t = Instant::now();
            for i in 0..n {
                self.ep.write(1, src, dst, None, u64::from(i)).map_err(|e| e.to_string())?;
                if i % 32 == 31 {
                    self.out.clear();
                    self.ep.poll(&mut self.out).map_err(|e| e.to_string())?;
                }
            }
            shm = shm.min(t.elapsed() / n);
            let t = Instant::now();
            for _ in 0..n {
                self.raw_write(8)?;
            }
            raw = raw.min(t.elapsed() / n);
        }
        Ok((shm, raw))
    }

    fn raw_copy(&self, len: usize, memcpy: bool) -> Result<(), String> {
        if memcpy {
            // SAFETY: both ranges are `len <= MAX` bytes of live buffers; the peer reads its copy only
            // after our flag store (Release) is seen by its Acquire load.
            unsafe { std::ptr::copy_nonoverlapping(self.src.as_ptr(), self.peer_map.as_ptr(), len) };
            return Ok(());
        }
        self.raw_write(len)
    }

    fn raw_write(&self, len: usize) -> Result<(), String> {
        let local = libc::iovec { iov_base: self.src.as_ptr().cast(), iov_len: len };
        let remote = libc::iovec { iov_base: self.peer_raw_dst as *mut libc::c_void, iov_len: len };
        // SAFETY: `src` is a live registration of at least `len` bytes; the kernel checks the remote side.
        let n = unsafe { libc::process_vm_writev(self.peer_pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n != len as isize {
            return Err(format!("process_vm_writev: {n} ({})", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

fn spin_until(flag: &AtomicU64, v: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0u32;
    while flag.load(Ordering::Acquire) < v {
        n = n.wrapping_add(1);
        if n.is_multiple_of(64) {
            if Instant::now() > deadline {
                return Err("peer stopped answering (raw)".into());
            }
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
    Ok(())
}
