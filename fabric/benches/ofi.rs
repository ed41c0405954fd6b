//! ofi backend (through the fabric contract, `fabcoll_fabric::open`) vs raw libfabric between 2 processes on
//! loopback (tcp, shm): 8 B latency (ping-pong of notified writes, half round trip) and streaming bandwidth of
//! 1 MiB / 16 MiB notified writes (window 8, end ack), and the 8 B exchange a 2-rank allreduce needs at least
//! (both ranks write at once; each waits for the peer's write and its own completion), a one-way stream of 8 B
//! writes with a window (`stream_8B_us`, what back-to-back 2-rank broadcasts need at least), and `wake_us`: how long an
//! 8 B write takes to reach a rank that sleeps in the backend's blocking `wait` (the peer writes 1 ms after it began). On tcp the default
//! transmit-complete mode (what the raw program uses) is measured, and delivery-complete
//! (`FABCOLL_OFI_DELIVERY_COMPLETE=1`) as `fabcoll-dc`.
//! The raw baseline runs the same protocol in `benches/ofi_raw.c` (compiled here with `cc -O2 -lfabric`), and
//! `fi_pingpong` (send/recv) from libfabric-bin is printed for reference. `cargo bench -p fabcoll-fabric --bench ofi`;
//! `FABCOLL_BENCH_PROVS="tcp net shm"` picks the providers (default `tcp shm`), `FABCOLL_BENCH_REPS` the runs,
//! `FABCOLL_BENCH_RAW=0` skips the raw C, delivery-complete and fi_pingpong runs.
//! `xchg_512KiB_us` / `xchg_1024KiB_us`: both ranks write that many bytes to each other in 512 KiB writes and wait
//! for the peer's (the one exchange of a 2-rank allgather or alltoall of twice the size, without its grant round
//! trip and local copy), to set fabcoll's large p = 2 cells on ofi:tcp beside the provider's own floor.

#[cfg(not(fabcoll_ofi))]
fn main() {
    let cfg = fabcoll_fabric::Config::new(fabcoll_fabric::Backend::Ofi { provider: "tcp".into() }, 0, 1, "bench");
    match fabcoll_fabric::open(&cfg) {
        Err(e) => eprintln!("ofi bench skipped: {e}"),
        Ok(_) => eprintln!("ofi bench skipped: built without cfg fabcoll_ofi"),
    }
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

    use fabcoll_fabric::{open, Access, Backend, Completion, Config, Endpoint, Mr, RemoteMr};

    const LAT_WARM: usize = 200;
    const LAT_ITERS: usize = 1000;
    const WINDOW: usize = 8;
    /// Rounds of the wake-up measurement (each sleeps 1 ms).
    const WAKE_ITERS: usize = 100;
    const BW_SIZES: [usize; 2] = [1 << 20, 16 << 20];
    const XCHG_SIZES: [usize; 2] = [512 << 10, 1 << 20];
    const XCHG_SEGMENT: usize = 512 << 10;
    const XCHG_WARM: usize = 20;
    const XCHG_ITERS: usize = 200;
    /// Bytes streamed per bandwidth measurement.
    const BW_TOTAL: usize = 128 << 20;

    pub fn main() {
        if let Ok(role) = std::env::var("FABCOLL_BENCH_RANK") {
            let dir = PathBuf::from(std::env::var("FABCOLL_BENCH_DIR").unwrap());
            let prov = std::env::var("FABCOLL_BENCH_PROV").unwrap();
            run_rank(&prov, role.parse().unwrap(), &dir);
            return;
        }
        // FABCOLL_BENCH_RAW=0: fabcoll's default mode only (no raw C, no delivery-complete runs).
        let only_ours = std::env::var("FABCOLL_BENCH_RAW").is_ok_and(|v| v == "0");
        let raw = if only_ours { Err("FABCOLL_BENCH_RAW=0".to_string()) } else { build_raw() };
        if let Err(e) = &raw {
            eprintln!("raw baseline unavailable: {e}");
        }
        let reps: usize = std::env::var("FABCOLL_BENCH_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
        let me = std::env::current_exe().unwrap();
        println!("best of {reps} alternating runs (min latency, max bandwidth); ratio = fabcoll / raw C");
        println!(
            "{:<6} {:<16} {:>12} {:>12} {:>12} {:>8}",
            "prov", "metric", "fabcoll", "fabcoll-dc", "raw C", "ratio"
        );
        let provs = std::env::var("FABCOLL_BENCH_PROVS").unwrap_or_else(|_| "tcp shm".into());
        for prov in provs.split_whitespace() {
            let (mut ours, mut dc, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
            let opened = fabcoll_fabric::ofi::provider_opened(prov);
            if opened != prov {
                println!("{prov}: fabcoll and the raw C program both run libfabric's {opened} provider");
            }
            for _ in 0..reps {
                best(&mut ours, pair(&me, &[], prov, &[]));
                if prov != "shm" && !only_ours {
                    best(&mut dc, pair(&me, &[], prov, &[("FABCOLL_OFI_DELIVERY_COMPLETE", "1")]));
                }
                if let Ok(exe) = &raw {
                    // The provider fabcoll opens for `prov` (`tcp`: net where libfabric has it), so both sides
                    // run the same one.
                    best(&mut theirs, pair(exe, std::slice::from_ref(&opened), prov, &[]));
                }
            }
            let get = |v: &Vec<(String, f64)>, name: &str| v.iter().find(|(n, _)| n == name).map(|(_, x)| *x);
            let show = |x: Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
            for (name, v) in &ours {
                let r = get(&theirs, name);
                let ratio = r.map(|r| format!("{:.2}", v / r)).unwrap_or_else(|| "-".into());
                println!("{prov:<6} {name:<16} {v:>12.2} {:>12} {:>12} {ratio:>8}", show(get(&dc, name)), show(r));
            }
            if !only_ours {
                fi_pingpong(prov);
            }
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
    fn pair(exe: &Path, args: &[String], prov: &str, env: &[(&str, &str)]) -> Vec<(String, f64)> {
        let dir = std::env::temp_dir().join(format!("fabcoll-ofi-bench-{}-{prov}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Bind tcp to loopback; shm takes no node.
        let node: &[(&str, &str)] = if prov == "shm" { &[] } else { &[("FABCOLL_OFI_NODE", "127.0.0.1")] };
        let spawn = |rank: usize| {
            Command::new(exe)
                .args(args)
                .env("FABCOLL_BENCH_RANK", rank.to_string())
                .env("FABCOLL_BENCH_DIR", &dir)
                .env("FABCOLL_BENCH_PROV", prov)
                .env("FI_TCP_IFACE", "lo")
                .envs(node.iter().copied())
                .envs(env.iter().copied())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn bench rank")
        };
        let (mut c0, mut c1) = (spawn(0), spawn(1));
        let start = Instant::now();
        let out = loop {
            if start.elapsed() > Duration::from_secs(60) {
                let _ = c1.kill();
                let _ = c0.kill();
                let _ = c0.wait();
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
            std::thread::sleep(Duration::from_millis(1000));
            let out = Command::new("timeout")
                .arg("20")
                .arg("fi_pingpong")
                .args(args)
                .args(["-P", "47599", "127.0.0.1"])
                .env("FI_TCP_IFACE", "lo")
                .output();
            let _ = server.kill();
            let _ = server.wait();
            if let Ok(o) = &out {
                if !String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim_start().starts_with(char::is_numeric)) {
                    eprintln!("fi_pingpong {prov} {size}: no result ({})", String::from_utf8_lossy(&o.stderr).trim());
                }
            }
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
        ep: Box<dyn Endpoint>,
        peer: usize,
        remote: RemoteMr,
        events: Vec<Completion>,
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
            self.ep.poll(&mut self.events).unwrap();
            self.count_events()
        }

        /// Accounts the events in `events`; returns the remote writes among them.
        fn count_events(&mut self) -> usize {
            let mut remote = 0;
            for e in self.events.drain(..) {
                match e {
                    Completion::WriteArrived { .. } => remote += 1,
                    Completion::WriteDone { .. } => self.writes_out -= 1,
                    other => panic!("unexpected {other:?}"),
                }
            }
            self.arrived += remote;
            remote
        }

        fn write(&mut self, mr: &Mr, len: usize) {
            self.write_from(mr, 0, len);
        }

        /// Writes `len` bytes of `mr` from `off` to the start of the peer's buffer.
        fn write_from(&mut self, mr: &Mr, off: usize, len: usize) {
            let (src, dst) = (mr.slice(off, len).unwrap(), self.remote.slice(0, len).unwrap());
            loop {
                match self.ep.write(self.peer, src, dst, Some(len as u64), 0) {
                    Ok(()) => break,
                    Err(e) if e.is_busy() => {
                        self.poll_once();
                    }
                    Err(e) => panic!("write: {e}"),
                }
            }
            self.writes_out += 1;
        }

        /// The receiving end of a stream: waits until `n` writes arrived, then acks with one 8 B write.
        fn take_and_ack(&mut self, n: usize, src: &Mr) {
            while self.arrived < n {
                self.poll_once();
            }
            self.arrived -= n;
            self.write(src, 8);
        }

        /// Polls until every write of ours completed.
        fn drain(&mut self) {
            while self.writes_out > 0 {
                self.poll_once();
            }
        }
    }

    /// Nanoseconds since the Unix epoch (the same clock in both processes).
    fn wall_ns() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    }

    fn run_rank(prov: &str, rank: usize, dir: &Path) {
        let mut ep = open(&Config::new(Backend::Ofi { provider: prov.into() }, rank, 2, "bench")).unwrap();
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
        let src = ep.alloc(max, Access::LOCAL).unwrap();
        let dst = ep.alloc(max, Access::REMOTE_WRITE).unwrap();
        // Touch every page on both sides, as the raw program does.
        src.write_at(0, &vec![1u8; max]).unwrap();
        dst.write_at(0, &vec![2u8; max]).unwrap();
        ep.send_ctrl(peer, 1, &dst.remote().to_bytes()).unwrap();
        let mut events = Vec::new();
        let remote = loop {
            ep.wait(&mut events, Some(Duration::from_secs(20))).unwrap();
            if let Some(Completion::Ctrl { data, .. }) = events.iter().find(|c| matches!(c, Completion::Ctrl { .. })) {
                break RemoteMr::from_bytes(data).unwrap();
            }
        };
        // The peer may already have started writing: keep arrivals that came with its descriptor.
        let early = events.iter().filter(|c| matches!(c, Completion::WriteArrived { .. })).count();
        let mut r = Rank { ep, peer, remote, events: Vec::new(), writes_out: 0, arrived: early };
        let debug = std::env::var_os("FABCOLL_BENCH_DEBUG").is_some();
        if debug {
            eprintln!("rank {rank}: connected");
        }

        // Latency: 8 B notified-write ping-pong.
        let mut t0 = Instant::now();
        for i in 0..LAT_WARM + LAT_ITERS {
            if i == LAT_WARM {
                t0 = Instant::now();
            }
            if debug && i % 500 == 0 {
                eprintln!("rank {rank}: ping-pong {i}");
            }
            if rank == 0 {
                r.write(&src, 8);
                r.wait_remote();
            } else {
                r.wait_remote();
                r.write(&src, 8);
            }
        }
        let half_rtt_us = t0.elapsed().as_secs_f64() * 1e6 / LAT_ITERS as f64 / 2.0;
        if rank == 0 {
            println!("lat_8B_us {half_rtt_us:.3}");
        }
        // Exchange (what a 2-rank allreduce needs at least): both write 8 B at once, each waits for the peer's
        // write and its own completion.
        let mut t0 = Instant::now();
        for i in 0..LAT_WARM + LAT_ITERS {
            if i == LAT_WARM {
                t0 = Instant::now();
            }
            r.write(&src, 8);
            r.wait_remote();
            r.drain();
        }
        if rank == 0 {
            println!("xchg_8B_us {:.3}", t0.elapsed().as_secs_f64() * 1e6 / LAT_ITERS as f64);
        }
        // Stream (what back-to-back 2-rank broadcasts of 8 B need at least): rank 0 writes 8 B with a window and
        // never waits for rank 1, which acks the last arrival with one 8 B write.
        let n = 20 * LAT_ITERS;
        let t0 = Instant::now();
        if rank == 0 {
            for _ in 0..n {
                while r.writes_out >= WINDOW {
                    r.poll_once();
                }
                r.write(&src, 8);
            }
            r.wait_remote();
            println!("stream_8B_us {:.3}", t0.elapsed().as_secs_f64() * 1e6 / n as f64);
        } else {
            r.take_and_ack(n, &src);
        }
        r.drain();
        // Wake-up: rank 1 writes its send time (wall clock, shared by both processes) 1 ms after rank 0 started a
        // blocking `wait`, so rank 0 sleeps in the backend's wait; rank 0 reports the median delivery latency.
        let mut lat = Vec::new();
        for _ in 0..WAKE_ITERS {
            if rank == 1 {
                std::thread::sleep(Duration::from_millis(1));
                src.write_at(0, &wall_ns().to_le_bytes()).unwrap();
                r.write(&src, 8);
                r.wait_remote();
            } else {
                while r.arrived == 0 {
                    r.ep.wait(&mut r.events, Some(Duration::from_secs(10))).unwrap();
                    r.count_events();
                }
                let now = wall_ns();
                r.arrived -= 1;
                let mut b = [0u8; 8];
                dst.read_at(0, &mut b).unwrap();
                lat.push(now.saturating_sub(u64::from_le_bytes(b)) as f64 / 1e3);
                r.write(&src, 8);
            }
            r.drain();
        }
        if rank == 0 {
            lat.sort_by(f64::total_cmp);
            println!("wake_us {:.3}", lat[lat.len() / 2]);
        }
        src.write_at(0, &[1u8; 8]).unwrap();
        // Bandwidth: rank 0 streams with a window, rank 1 acks after the last arrival with one 8 B write.
        for &size in &BW_SIZES {
            let n = (BW_TOTAL / size).max(8);
            if rank == 0 {
                let t0 = Instant::now();
                let mut posted = 0;
                let mut acked = 0;
                while acked == 0 {
                    while posted < n && r.writes_out < WINDOW {
                        r.write(&src, size);
                        posted += 1;
                    }
                    acked += r.poll_once();
                }
                r.arrived -= 1;
                let secs = t0.elapsed().as_secs_f64();
                println!("bw_{}MiB_MBps {:.1}", size >> 20, (n * size) as f64 / secs / 1e6);
            } else {
                r.take_and_ack(n, &src);
            }
            r.drain();
        }
        // Large exchange (the floor of a 2-rank allgather or alltoall of 2·size bytes: its one exchange, without the
        // grant round trip and the local copy): both ranks write `size` bytes in 512 KiB writes (the executor's
        // segment on socket providers) and wait for the peer's and their own.
        for size in XCHG_SIZES {
            let mut t0 = Instant::now();
            for i in 0..XCHG_WARM + XCHG_ITERS {
                if i == XCHG_WARM {
                    t0 = Instant::now();
                }
                for off in (0..size).step_by(XCHG_SEGMENT) {
                    r.write_from(&src, off, XCHG_SEGMENT);
                }
                for _ in 0..size / XCHG_SEGMENT {
                    r.wait_remote();
                }
                r.drain();
            }
            if rank == 0 {
                println!("xchg_{}KiB_us {:.1}", size >> 10, t0.elapsed().as_secs_f64() * 1e6 / XCHG_ITERS as f64);
            }
        }
        // Let the peer's last completions drain before closing.
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(100) {
            r.poll_once();
        }
        drop(r);
        drop((src, dst));
    }
}
