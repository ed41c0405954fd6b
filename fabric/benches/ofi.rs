//! ofi backend vs raw libfabric between 2 processes on loopback (tcp, shm): 8 B latency (ping-pong of notified
//! writes, half round trip) and streaming bandwidth of 1 MiB / 16 MiB notified writes (window 8, end ack).
//! The raw baseline runs the same protocol in `benches/ofi_raw.c` (compiled here with `cc -O2 -lfabric`), and
//! `fi_pingpong` (send/recv) from libfabric-bin is printed for reference. `cargo bench -p fabcoll-fabric --bench ofi`.

#[cfg(not(fabcoll_ofi))]
fn main() {
    eprintln!("ofi bench skipped: {}", fabcoll_fabric::ofi::available().unwrap_err());
}

#[cfg(fabcoll_ofi)]
fn main() {
    bench::main()
}

#[cfg(fabcoll_ofi)]
mod bench {
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use fabcoll_fabric::ofi::{OfiConfig, OfiEndpoint, OfiEvent, OfiMr, RemoteRegion};

    const LAT_WARM: usize = 200;
    const LAT_ITERS: usize = 2000;
    const WINDOW: usize = 8;
    const BW_SIZES: [usize; 2] = [1 << 20, 16 << 20];
    /// Bytes streamed per bandwidth measurement.
    const BW_TOTAL: usize = 256 << 20;

    pub fn main() {
        if let Ok(role) = std::env::var("FABCOLL_BENCH_RANK") {
            let dir = PathBuf::from(std::env::var("FABCOLL_BENCH_DIR").unwrap());
            let prov = std::env::var("FABCOLL_BENCH_PROV").unwrap();
            run_rank(&prov, role.parse().unwrap(), &dir);
            return;
        }
        let raw = build_raw();
        if let Err(e) = &raw {
            eprintln!("raw baseline unavailable: {e}");
        }
        let reps: usize = std::env::var("FABCOLL_BENCH_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
        let me = std::env::current_exe().unwrap();
        println!("best of {reps} alternating runs (min latency, max bandwidth)");
        println!("{:<6} {:<16} {:>12} {:>12} {:>10}", "prov", "metric", "fabcoll", "raw C", "ratio");
        for prov in ["tcp", "shm"] {
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                best(&mut ours, pair(&me, &[], prov));
                if let Ok(exe) = &raw {
                    best(&mut theirs, pair(exe, &[prov.to_string()], prov));
                }
            }
            for (name, v) in &ours {
                let r = theirs.iter().find(|(n, _)| n == name).map(|(_, r)| *r);
                let (rs, ratio) = match r {
                    Some(r) => (format!("{r:.2}"), format!("{:.2}", v / r)),
                    None => ("-".into(), "-".into()),
                };
                println!("{prov:<6} {name:<16} {v:>12.2} {rs:>12} {ratio:>10}");
            }
            fi_pingpong(prov);
        }
    }

    /// Keeps the best value per metric: the minimum for latencies (`*_us`), the maximum otherwise.
    fn best(acc: &mut Vec<(String, f64)>, run: Vec<(String, f64)>) {
        for (name, v) in run {
            match acc.iter_mut().find(|(n, _)| *n == name) {
                Some((_, b)) => *b = if name.ends_with("_us") { b.min(v) } else { b.max(v) },
                None => acc.push((name, v)),
            }
        }
    }

    /// Runs ranks 0 and 1 of `exe` (this bench or the raw C program) and parses rank 0's `name value` lines.
    fn pair(exe: &Path, args: &[String], prov: &str) -> Vec<(String, f64)> {
        let dir = std::env::temp_dir().join(format!("fabcoll-ofi-bench-{}-{prov}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let spawn = |rank: usize| {
            Command::new(exe)
                .args(args)
                .env("FABCOLL_BENCH_RANK", rank.to_string())
                .env("FABCOLL_BENCH_DIR", &dir)
                .env("FABCOLL_BENCH_PROV", prov)
                .env("FI_TCP_IFACE", "lo")
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn bench rank")
        };
        let (c0, mut c1) = (spawn(0), spawn(1));
        let start = Instant::now();
        let out = loop {
            if start.elapsed() > Duration::from_secs(60) {
                let _ = c1.kill();
                eprintln!("{} {prov}: timed out", exe.display());
                break None;
            }
            if c1.try_wait().unwrap().is_some() {
                break Some(c0.wait_with_output().unwrap());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let _ = c1.wait();
        let _ = std::fs::remove_dir_all(&dir);
        let Some(out) = out else { return Vec::new() };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                Some((it.next()?.to_string(), it.next()?.parse().ok()?))
            })
            .collect()
    }

    fn build_raw() -> Result<PathBuf, String> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/ofi_raw.c");
        let exe = std::env::temp_dir().join(format!("fabcoll-ofi-raw-{}", std::process::id()));
        let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(&src)
            .arg("-lfabric")
            .status()
            .map_err(|e| format!("cannot run cc: {e}"))?;
        if st.success() {
            Ok(exe)
        } else {
            Err(format!("cc failed on {}", src.display()))
        }
    }

    /// `fi_pingpong` (send/recv ping-pong, its own timing) for 8 B and 1 MiB, for reference.
    fn fi_pingpong(prov: &str) {
        for size in ["8", "1048576"] {
            let args = ["-p", prov, "-e", "rdm", "-I", "1000", "-S", size];
            let server = Command::new("fi_pingpong")
                .args(args)
                .args(["-B", "47599"])
                .env("FI_TCP_IFACE", "lo")
                .stdout(Stdio::null())
                .spawn();
            let Ok(mut server) = server else {
                eprintln!("fi_pingpong not found (libfabric-bin)");
                return;
            };
            std::thread::sleep(Duration::from_millis(300));
            let out = Command::new("timeout")
                .arg("20")
                .arg("fi_pingpong")
                .args(args)
                .arg("127.0.0.1")
                .env("FI_TCP_IFACE", "lo")
                .output();
            let _ = server.kill();
            let _ = server.wait();
            if let Ok(o) = out {
                for l in
                    String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.trim_start().starts_with(char::is_numeric))
                {
                    println!("{prov:<6} fi_pingpong send/recv: {}", l.split_whitespace().collect::<Vec<_>>().join(" "));
                }
            }
        }
    }

    struct Rank {
        ep: OfiEndpoint,
        peer: usize,
        remote: RemoteRegion,
        events: Vec<OfiEvent>,
        writes_out: usize,
        arrived: usize,
    }

    impl Rank {
        /// Polls until one remote write has arrived (counting our own completions on the way).
        fn wait_remote(&mut self) {
            while self.arrived == 0 {
                self.poll_once();
            }
            self.arrived -= 1;
        }

        /// One poll; returns the remote writes that arrived (also added to `arrived`).
        fn poll_once(&mut self) -> usize {
            let mut remote = 0;
            self.ep.poll(&mut self.events).unwrap();
            for e in self.events.drain(..) {
                match e {
                    OfiEvent::RemoteWrite { .. } => remote += 1,
                    OfiEvent::WriteDone(_) => self.writes_out -= 1,
                    other => panic!("unexpected {other:?}"),
                }
            }
            self.arrived += remote;
            remote
        }

        fn write(&mut self, mr: &OfiMr, len: usize) {
            // SAFETY: the bench's buffers live until the end of run_rank and are never modified meanwhile.
            unsafe { self.ep.write(mr, 0, len, self.peer, &self.remote, 0, Some(len as u64)).unwrap() };
            self.writes_out += 1;
        }
    }

    fn run_rank(prov: &str, rank: usize, dir: &Path) {
        let mut cfg = OfiConfig::default().provider(prov);
        if prov != "shm" {
            cfg.node = Some("127.0.0.1".into());
        }
        let mut ep = OfiEndpoint::open(&cfg, rank as u64, 2).unwrap();
        std::fs::write(dir.join(format!("addr.{rank}.tmp")), ep.address().unwrap()).unwrap();
        std::fs::rename(dir.join(format!("addr.{rank}.tmp")), dir.join(format!("addr.{rank}"))).unwrap();
        let peer = 1 - rank;
        let mut addrs = vec![Vec::new(), Vec::new()];
        addrs[rank] = ep.address().unwrap();
        let t = Instant::now();
        addrs[peer] = loop {
            if let Ok(a) = std::fs::read(dir.join(format!("addr.{peer}"))) {
                break a;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "peer address missing");
            std::thread::sleep(Duration::from_millis(2));
        };
        ep.insert_peers(&addrs).unwrap();
        let max = *BW_SIZES.iter().max().unwrap();
        let src = vec![1u8; max];
        let dst = vec![2u8; max];
        // SAFETY: src and dst outlive the MRs (declared before them, dropped after).
        let (smr, dmr) = unsafe { (ep.register(src.as_ptr(), max).unwrap(), ep.register(dst.as_ptr(), max).unwrap()) };
        ep.send_ctrl(peer, 0, &dmr.remote().to_bytes()).unwrap();
        let remote = match ep.wait_for(Duration::from_secs(20), |e| matches!(e, OfiEvent::Ctrl { .. })).unwrap() {
            OfiEvent::Ctrl { data, .. } => RemoteRegion::from_bytes(&data).unwrap(),
            _ => unreachable!("wait_for returns a matching event"),
        };
        let mut r = Rank { ep, peer, remote, events: Vec::new(), writes_out: 0, arrived: 0 };

        // Latency: 8 B notified-write ping-pong.
        let mut t0 = Instant::now();
        for i in 0..LAT_WARM + LAT_ITERS {
            if i == LAT_WARM {
                t0 = Instant::now();
            }
            if rank == 0 {
                r.write(&smr, 8);
                r.wait_remote();
            } else {
                r.wait_remote();
                r.write(&smr, 8);
            }
        }
        let half_rtt_us = t0.elapsed().as_secs_f64() * 1e6 / LAT_ITERS as f64 / 2.0;
        if rank == 0 {
            println!("lat_8B_us {half_rtt_us:.3}");
        }
        // Bandwidth: rank 0 streams with a window, rank 1 acks after the last arrival with one 8 B write.
        for &size in &BW_SIZES {
            let n = (BW_TOTAL / size).max(8);
            if rank == 0 {
                let t0 = Instant::now();
                let mut posted = 0;
                let mut acked = 0;
                while acked == 0 {
                    while posted < n && r.writes_out < WINDOW {
                        r.write(&smr, size);
                        posted += 1;
                    }
                    acked += r.poll_once();
                }
                r.arrived -= 1;
                let secs = t0.elapsed().as_secs_f64();
                println!("bw_{}MiB_MBps {:.1}", size >> 20, (n * size) as f64 / secs / 1e6);
            } else {
                while r.arrived < n {
                    r.poll_once();
                }
                r.arrived -= n;
                r.write(&smr, 8);
            }
            while r.writes_out > 0 {
                r.poll_once();
            }
        }
        // Let the peer's last completions drain before closing.
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(100) {
            r.poll_once();
        }
        drop((smr, dmr));
    }
}
