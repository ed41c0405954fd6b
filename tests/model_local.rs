//! The cost model over the local backend: `estimate()` lists every eligible algorithm sorted,
//! the probe agrees on every rank and goes through the cache file (a corrupt file is probed
//! over, not a panic), and model selection runs the model's argmin with correct results.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use fabcoll::collectives::registry;
use fabcoll::collectives::{CollArgs, Collective, Machine};
use fabcoll::select::model::{cache, predict, ModelParams, Rendezvous};
use fabcoll::{Collectives, Communicator, Datatype, ReduceOp};

/// Every test's cache directory (set once, before any communicator reads the environment).
fn cache_dir() -> &'static PathBuf {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("fabcoll-model-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::env::set_var("FABCOLL_MODEL_DIR", &d);
        std::env::remove_var("FABCOLL_MODEL");
        d
    })
}

fn job<R: Send>(p: usize, f: impl Fn(&Communicator) -> R + Sync) -> Vec<R> {
    cache_dir();
    common::on_ranks(Communicator::local_with(p, common::cfg()).unwrap(), f)
}

/// Equal up to JSON's decimal round trip (serde_json parses floats to within an ulp or so).
fn same(a: &ModelParams, b: &ModelParams) -> bool {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * x.abs().max(y.abs());
    close(a.alpha, b.alpha)
        && close(a.beta, b.beta)
        && close(a.gamma, b.gamma)
        && close(a.f_alpha, b.f_alpha)
        && close(a.f_beta, b.f_beta)
        && close(a.copy_beta, b.copy_beta)
        && close(a.overhead, b.overhead)
        && a.rendezvous.eager_limit == b.rendezvous.eager_limit
        && close(a.rendezvous.alpha, b.rendezvous.alpha)
}

fn params() -> ModelParams {
    ModelParams {
        copy_beta: 3e-11,
        overhead: 2e-6,
        ..ModelParams::new(Machine { alpha: 3e-6, beta: 2e-10, gamma: 5e-11, f_alpha: 1.2, f_beta: 1.4 })
    }
}

#[test]
fn estimate_lists_every_eligible_algorithm_sorted() {
    cache_dir();
    let comms = Communicator::local_with(6, common::cfg()).unwrap();
    let c = &comms[0];
    assert!(c.model().is_none());
    c.set_model(params()).unwrap();
    assert_eq!(c.model(), Some(params().machine()));
    for (coll, count, commutative) in [
        (Collective::Allreduce, 1usize << 16, true),
        (Collective::Allreduce, 1 << 16, false),
        (Collective::Bcast, 100, true),
        (Collective::Alltoall, 1 << 12, true),
        (Collective::Allgatherv, 1000, true),
        (Collective::ReduceScatter, 77, false),
    ] {
        let est = c.estimate(coll, count, Datatype::F32, commutative).unwrap();
        let mut args = CollArgs::new(coll, 0, 6, count as u64).with_commutative(commutative);
        if coll.is_vector() {
            args = args.with_counts(vec![count as u64; 6]);
        }
        let eligible: Vec<&str> = registry::eligible(&args).map(|a| a.name).collect();
        assert!(!eligible.is_empty());
        for name in &eligible {
            assert!(est.iter().any(|e| e.algorithm == *name), "{coll}: {name} missing from {est:?}");
        }
        assert!(est.iter().all(|e| eligible.contains(&e.algorithm)), "{coll}: an ineligible algorithm");
        // The model's order: within TIE of the fastest by fewest steps, then the rest by time.
        let limit = est.iter().map(|e| e.seconds).fold(f64::INFINITY, f64::min) * (1.0 + predict::TIE) * (1.0 + 1e-9);
        let near = est.iter().take_while(|e| e.seconds <= limit).count();
        assert!(est[near..].iter().all(|e| e.seconds > limit), "{coll}: the near ones come first: {est:?}");
        assert!(est[..near].windows(2).all(|w| w[0].steps <= w[1].steps), "{coll}: near ones by steps");
        assert!(est[near..].windows(2).all(|w| w[0].seconds <= w[1].seconds), "{coll}: not sorted");
        assert!(est.iter().all(|e| e.seconds.is_finite() && e.seconds > 0.0));
    }
    // A bad call is an error, not a panic.
    assert!(c.estimate(Collective::Allreduce, 10, Datatype::F32, true).is_ok());
    assert!(c.set_model(ModelParams { alpha: f64::NAN, ..params() }).is_err());
}

#[test]
fn estimate_without_parameters_says_how_to_get_them() {
    cache_dir();
    let comms = Communicator::local_with(3, common::cfg()).unwrap();
    let e = comms[0].estimate(Collective::Allreduce, 10, Datatype::F32, true).unwrap_err().to_string();
    assert!(e.contains("no model parameters"), "{e}");
}

#[test]
fn probe_agrees_on_every_rank_and_goes_through_the_cache() {
    let dir = cache_dir();
    // p = 2 has its own cache file (p-class 2) that no other test uses.
    let path = cache::path_in(dir, &cache::hostname(), "local", 2);
    let _ = std::fs::remove_file(&path);
    let probed = job(2, |c| {
        assert_eq!(c.fabric_name(), "local");
        c.load_or_probe_model().unwrap()
    });
    assert_eq!(probed[0], probed[1], "every rank ends with rank 0's fit");
    // Timings on a busy 2-core machine may fit β = 0 (the fit drops negative unknowns); what
    // must hold is a valid model, the same on every rank.
    assert!(probed[0].validate().is_ok() && probed[0].beta >= 0.0, "{}", probed[0]);
    let file = cache::load(&path).unwrap().expect("rank 0 wrote the cache");
    assert!(same(&file.model(), &probed[0]), "{} vs {}", file.model(), probed[0]);
    assert_eq!((file.fabric.as_str(), file.p_class), ("local", 2));
    assert!(file.rendezvous.is_some(), "the probe's eager/rendezvous switch is cached");

    // A valid file is loaded as is, its rendezvous switch too, on every rank.
    let mine = ModelParams { alpha: 1.2345e-5, rendezvous: Rendezvous { eager_limit: 4096, alpha: 3e-6 }, ..params() };
    cache::save(&path, &cache::ModelFile::new(&cache::hostname(), "local", 2, mine)).unwrap();
    let loaded = job(2, |c| (c.load_or_probe_model().unwrap(), c.model_params()));
    assert!(loaded.iter().all(|(m, kept)| same(m, &mine) && *kept == Some(*m)), "{loaded:?}");

    // A corrupt file is probed over (and rewritten), never a panic.
    std::fs::write(&path, "{ \"format\": \"fabcoll-model\", trunc").unwrap();
    let again = job(2, |c| c.load_or_probe_model().unwrap());
    assert_eq!(again[0], again[1]);
    assert!(!same(&again[0], &mine));
    assert!(same(&cache::load(&path).unwrap().expect("rewritten").model(), &again[0]));
}

#[test]
fn model_selection_runs_the_argmin() {
    let counts = [1usize, 256, 1 << 12, 1 << 16, 1 << 18];
    let picks = job(4, |c| {
        c.set_model(params()).unwrap();
        c.set_select_model(true);
        let mut out = Vec::new();
        for &n in &counts {
            let want = c.estimate(Collective::Allreduce, n, Datatype::F32, true).unwrap()[0].algorithm;
            let send: Vec<f32> = (0..n).map(|i| (i % 7) as f32 + c.rank() as f32).collect();
            let mut recv = vec![0f32; n];
            let got = c
                .scope(|s| {
                    let r = s.allreduce(&send, &mut recv, &ReduceOp::Sum)?;
                    Ok(s.algorithm_of(&r))
                })
                .unwrap();
            assert_eq!(got, Some(want), "count {n}");
            for (i, v) in recv.iter().enumerate() {
                assert_eq!(*v, 4.0 * (i % 7) as f32 + 6.0, "count {n}, element {i}");
            }
            // Later calls in the same bucket reuse the choice.
            let mut again = vec![0f32; n];
            c.allreduce(&send, &mut again, &ReduceOp::Sum).unwrap();
            assert_eq!(again, recv);
            out.push(want);
        }
        out
    });
    assert!(picks.windows(2).all(|w| w[0] == w[1]), "ranks agree: {picks:?}");
    assert_ne!(picks[0].first(), picks[0].last(), "short and long calls pick differently: {:?}", picks[0]);
}
