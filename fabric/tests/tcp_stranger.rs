//! A stranger that knows the job's store address (so the job hash its hellos carry) and where a
//! rank's registered memory lies, but not the job token: the store refuses it, rank 0's data port
//! refuses it and closes the connection, none of its bytes land in rank 0's memory, and the two
//! ranks then complete a ring exchange of notified writes. Before data connections were
//! authenticated, rank 0 took the stranger for rank 1.

mod local_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use fabcoll_fabric::bootstrap::{exchange, Store, StoreAddr, TcpStore, TcpStoreServer};
use fabcoll_fabric::tcp::SECRET;
use fabcoll_fabric::{job_hash, open, Access, Backend, Config, RemoteMr};

const TOKEN: &str = "the-job-token";
const LIMIT: Duration = Duration::from_secs(90);
const STEP: Duration = Duration::from_secs(20);
/// What the stranger tries to write into rank 0's memory.
const PLANTED: u8 = 0xEE;

#[test]
fn a_stranger_without_the_token_is_refused_and_cannot_write() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(scenario()));
    match rx.recv_timeout(LIMIT) {
        Ok(result) => result.unwrap_or_else(|e| panic!("{e}")),
        Err(_) => panic!("the scenario did not finish within {LIMIT:?}"),
    }
}

/// What rank 0 tells the stranger (as if found by a port scan and a leaked descriptor).
struct Target {
    data_port: String,
    mr: RemoteMr,
}

fn scenario() -> Result<(), String> {
    let server = TcpStoreServer::start("127.0.0.1:0", TOKEN).map_err(|e| e.to_string())?;
    let store_addr = server.local_addr();
    let job = format!("fabcoll-{}", StoreAddr::Tcp(store_addr.to_string()));
    stranger_at_the_store(store_addr)?;

    let (target_tx, target_rx) = mpsc::channel::<Target>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let job0 = job.clone();
    let rank0 = std::thread::spawn(move || {
        rank(0, &job0, store_addr, |ep, mr| {
            let blob = ep.address().map_err(|e| e.to_string())?;
            let data_port = std::str::from_utf8(&blob[32 + SECRET..]).map_err(|e| e.to_string())?.to_string();
            target_tx.send(Target { data_port, mr: mr.remote() }).map_err(|e| e.to_string())
        })
    });
    let job1 = job.clone();
    // Rank 1 publishes its address, then connects only once the stranger has had its go.
    let rank1 = std::thread::spawn(move || {
        rank(1, &job1, store_addr, |_, _| go_rx.recv_timeout(STEP).map_err(|_| "rank 1 was not let go".to_string()))
    });

    let target = target_rx.recv_timeout(STEP).map_err(|_| "rank 0 did not say where it listens")?;
    let stranger = stranger_at_the_data_port(&job, &target);
    let _ = go_tx.send(());
    let results = [rank0.join(), rank1.join()];
    stranger?;
    for (r, res) in results.into_iter().enumerate() {
        res.map_err(|_| format!("rank {r} panicked"))??;
    }
    Ok(())
}

/// Without the token the store refuses the stranger, by the handshake and by the first
/// protocol's (a token in clear), and what it tried to set is not there.
fn stranger_at_the_store(at: std::net::SocketAddr) -> Result<(), String> {
    match TcpStore::connect(at, "a-guessed-token", STEP) {
        Err(e) if e.to_string().contains("does not hold our token") => {}
        Err(e) => return Err(format!("the store refused the stranger, but said {e}")),
        Ok(_) => return Err("the store admitted a client without the token".into()),
    }
    let mut s = TcpStream::connect(at).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(STEP)).map_err(|e| e.to_string())?;
    let mut req = b"FABCOLL1".to_vec();
    req.extend_from_slice(&5u16.to_le_bytes());
    req.extend_from_slice(b"guess");
    req.push(1); // set "planted" = "x"
    req.extend_from_slice(&7u32.to_le_bytes());
    req.extend_from_slice(b"planted");
    req.extend_from_slice(&1u32.to_le_bytes());
    req.push(b'x');
    s.write_all(&req).map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    if answer != [1] {
        return Err(format!("the store answered the stranger {answer:?}, not a refusal and the end"));
    }
    let client = TcpStore::connect(at, TOKEN, STEP).map_err(|e| e.to_string())?;
    match client.get("planted").map_err(|e| e.to_string())? {
        None => Ok(()),
        Some(v) => Err(format!("the stranger's set landed in the store: {v:?}")),
    }
}

/// The stranger sends rank 1's hello (public: the job hash, a rank, the size) and a write of
/// `PLANTED` bytes into rank 0's registration; rank 0 must close the connection.
fn stranger_at_the_data_port(job: &str, target: &Target) -> Result<(), String> {
    let mut s = TcpStream::connect(&target.data_port).map_err(|e| e.to_string())?;
    let mut bytes = b"fabtcph1".to_vec();
    for v in [job_hash(job), 1, 2] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    // A write frame (kind 1): key, absolute address, length, no immediate, ctx; then the payload.
    let mut header = [0u8; 48];
    header[0] = 1;
    header[8..16].copy_from_slice(&target.mr.key.to_le_bytes());
    header[16..24].copy_from_slice(&target.mr.addr.to_le_bytes());
    header[24..32].copy_from_slice(&64u64.to_le_bytes());
    bytes.extend_from_slice(&header);
    bytes.extend_from_slice(&[PLANTED; 64]);
    s.write_all(&bytes).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => continue, // the acceptor's challenge; the stranger cannot answer it
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(format!("rank 0 did not close the stranger's connection: {e}")),
        }
    }
}

/// One rank: joins through the store, allocates a zeroed registration, runs `before_connect`
/// (with its endpoint and that registration), connects, completes a ring exchange, and checks
/// that nothing landed in the registration.
fn rank(
    r: usize,
    job: &str,
    store_addr: std::net::SocketAddr,
    before_connect: impl FnOnce(&dyn fabcoll_fabric::Endpoint, &fabcoll_fabric::Mr) -> Result<(), String>,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| format!("rank {r}: {e}");
    let store = TcpStore::connect(store_addr, TOKEN, STEP).map_err(|x| e(&x))?;
    let mut cfg = Config::new(Backend::Tcp, r, 2, job);
    cfg.token = Some(TOKEN.into());
    cfg.timeout = STEP;
    let mut ep = open(&cfg).map_err(|x| e(&x))?;
    let mr = ep.alloc(4096, Access::REMOTE_WRITE).map_err(|x| e(&x))?;
    let blobs = exchange(&store as &dyn Store, "addr", r as u32, 2, &ep.address().map_err(|x| e(&x))?, STEP)
        .map_err(|x| e(&x))?;
    before_connect(&*ep, &mr)?;
    ep.insert_peers(&blobs).map_err(|x| e(&x))?;
    // The ring polls the endpoint, so any frame that got in has been read by the end of it.
    let mut inbox = local_common::Inbox::new();
    local_common::ring(&mut *ep, &mut inbox, 4096)?;
    let mut got = vec![0u8; 4096];
    mr.read_at(0, &mut got).map_err(|x| e(&x))?;
    if got.iter().any(|&b| b != 0) {
        return Err(e(&"the stranger's bytes landed in registered memory"));
    }
    // Neither rank drops its endpoint while the other may still write to it.
    exchange(&store as &dyn Store, "done", r as u32, 2, b"", STEP).map_err(|x| e(&x))?;
    Ok(())
}
