//! Fuzz bodies of the decoders this crate adds to the fabric's (`fabcoll_fabric::fuzz` has the
//! store and the tcp backend): the executor's control messages and immediates, decision files and
//! model files. Each takes any bytes, must not panic, and checks that what decodes encodes back to
//! itself. The cargo-fuzz targets in `fuzz/` and the stable test `tests/fuzz_bodies.rs` share them.
//!
//! Not an API: hidden from the docs and free to change.

use fabcoll_collectives::{CollArgs, Collective};
use fabcoll_fabric::fuzz::Target;
use fabcoll_fabric::{Access, NodeKey, RemoteMr};

use crate::exec::proto::{self, CallSig, GrantEntry, Imm, ImmLayout, Kind, Offer, Setup};
use crate::select::model::{cache, compare, predict};
use crate::select::Decisions;

/// Every target of this crate.
pub const TARGETS: &[Target] = &[
    Target { name: "exec_control", body: exec_control, seeds: control_seeds },
    Target { name: "decision_file", body: decision_file, seeds: decision_seeds },
    Target { name: "model_file", body: model_file, seeds: model_seeds },
];

/// A control message as it arrives: the first 8 bytes are its tag (also read as a write's
/// immediate under every layout), the rest its payload, decoded as the executor does for the
/// tag's kind.
pub fn exec_control(data: &[u8]) {
    let Some((tag, payload)) = data.split_first_chunk::<8>() else { return };
    let word = u64::from_le_bytes(*tag);
    for bits in [64, 61, 48, 32, 31] {
        let l = ImmLayout::new(bits);
        let imm = l.decode(word);
        let again = match imm {
            Imm::Eager { slot, ctx, seq_low, sig, idx } => {
                l.encode_eager(slot, ctx, seq_low, sig.unwrap_or_default(), idx).map(|v| l.decode(v))
            }
            Imm::Zcopy { gid } => Some(l.decode(l.encode_zcopy(gid))),
        };
        // Below 32 bits no eager identity fits: such an immediate is never sent.
        assert!(again.is_none_or(|a| a == imm) && (again.is_some() || !l.eager_possible()), "{imm:?} at {bits}");
    }
    let Ok(t) = proto::untag(word) else { return };
    assert_eq!(proto::untag(proto::tag(t.kind, t.ctx, t.seq_low, t.sig)).ok(), Some(t));
    match t.kind {
        Kind::Setup => {
            if let Ok(s) = Setup::from_bytes(payload) {
                assert_eq!(s.to_bytes(), payload);
            }
        }
        Kind::Credit => {
            let _ = proto::credit_mask(1, payload);
        }
        Kind::Grant => {
            if let Ok(g) = GrantEntry::parse_all(payload) {
                let mut out = Vec::with_capacity(payload.len());
                g.iter().for_each(|e| e.put(&mut out));
                assert_eq!(out, payload);
            }
        }
        Kind::Offer => {
            if let Ok(o) = Offer::from_bytes(payload) {
                assert_eq!(o.to_bytes(), payload);
            }
        }
        Kind::Rts | Kind::Abort | Kind::GaveUp | Kind::Pulled => {
            if let Ok(v) = proto::parse_u32s(payload) {
                assert_eq!(v.len() * 4, payload.len());
            }
        }
        Kind::Check | Kind::AnySource => {}
        Kind::Mismatch => {
            let _ = String::from_utf8_lossy(payload);
        }
    }
}

/// A decision file's text (bytes that are not UTF-8 replaced): a file that loads chooses an
/// algorithm or says why not for every operation at a few sizes, and survives its own round trip.
pub fn decision_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(d) = Decisions::from_json(&text) else { return };
    for coll in Collective::ALL {
        for (p, count) in [(1, 0), (2, 1), (5, 1000), (64, 1 << 20)] {
            let mut args = CollArgs::new(coll, 0, p, count);
            if coll.is_vector() {
                let n = if coll == Collective::Alltoallv { p * p } else { p };
                args.counts = Some(vec![count; n as usize].into());
            }
            let _ = d.choose_for(&args);
        }
    }
    let json = d.to_json().expect("a loaded file serializes");
    let again = Decisions::from_json(&json).expect("a written file loads");
    assert_eq!(again.file(), d.file());
}

/// A model file's, a bare parameter object's or a tuner log's text: parameters that load are
/// usable by the cost model.
pub fn model_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(f) = cache::parse(&text) {
        let json = serde_json::to_string(&f).expect("a loaded file serializes");
        assert_eq!(cache::parse(&json).ok().as_ref(), Some(&f), "a model file does not round-trip");
    }
    if let Ok(m) = cache::parse_params(&text) {
        let _ = predict(&CollArgs::new(Collective::Allreduce, 0, 4, 1000), &m);
    }
    let _ = compare::read_log(&text);
}

fn control_seeds() -> Vec<Vec<u8>> {
    let mr = RemoteMr { addr: 1 << 33, len: 4096, key: 42, access: Access::REMOTE_WRITE, node: None };
    let routed = RemoteMr { node: Some(NodeKey { addr: 64, key: 7 }), ..mr };
    let msg = |kind: Kind, payload: Vec<u8>| {
        let mut b = proto::tag(kind, 3, 17, CallSig(0x5a)).to_le_bytes().to_vec();
        b.extend_from_slice(&payload);
        b
    };
    let mut grants = Vec::new();
    GrantEntry { idx: 1, gid: 9, mr, off: 0, len: 800, seg: 512, whole: false }.put(&mut grants);
    GrantEntry { idx: 2, gid: 10, mr: routed, off: 800, len: 8, seg: 8, whole: true }.put(&mut grants);
    let l = ImmLayout::new(64);
    vec![
        msg(Kind::Setup, Setup { mr: routed, off: 128, slots: 16, slot_size: 8192 }.to_bytes()),
        msg(Kind::Credit, 0xffu64.to_le_bytes().to_vec()),
        msg(Kind::Grant, grants),
        msg(Kind::Rts, [0u32, 1, 2].iter().flat_map(|v| v.to_le_bytes()).collect()),
        msg(Kind::Abort, 3u32.to_le_bytes().to_vec()),
        msg(Kind::GaveUp, [2u32, 3].iter().flat_map(|v| v.to_le_bytes()).collect()),
        msg(Kind::Offer, Offer { idx: 1, from: 1 << 20, mr: routed, off: 64, len: 3 << 20 }.to_bytes()),
        msg(Kind::Pulled, 1u32.to_le_bytes().to_vec()),
        msg(Kind::Check, b"allreduce:ring count=4".to_vec()),
        msg(Kind::AnySource, Vec::new()),
        msg(Kind::Mismatch, b"collective #3: rank 1 made a different call".to_vec()),
        l.encode_eager(5, 1, 7, CallSig(0x5a), 3).expect("fits").to_le_bytes().to_vec(),
        l.encode_zcopy(12345).to_le_bytes().to_vec(),
    ]
}

fn decision_seeds() -> Vec<Vec<u8>> {
    let embedded = Decisions::embedded().expect("the embedded table loads");
    vec![embedded.to_json().expect("serializes").into_bytes()]
}

fn model_seeds() -> Vec<Vec<u8>> {
    use crate::select::model::{ModelParams, Rendezvous};
    use fabcoll_collectives::cost::Machine;
    let m = ModelParams {
        rendezvous: Rendezvous { eager_limit: 65536, alpha: 2e-6 },
        ..ModelParams::new(Machine { alpha: 1e-6, beta: 1e-9, gamma: 1e-10, f_alpha: 0.0, f_beta: 0.0 })
    };
    let mut f = cache::ModelFile::new("host", "tcp", 4, m);
    f.created = "2026-01-01T00:00:00Z".into();
    let log = r#"{"op":"allreduce","p":4,"fabric":"tcp","algorithm":"ring","params":{"segment":4096},"bytes":1024,"median_us":12.5}"#;
    vec![
        serde_json::to_vec_pretty(&f).expect("serializes"),
        serde_json::to_vec(&m).expect("serializes"),
        log.as_bytes().to_vec(),
    ]
}
