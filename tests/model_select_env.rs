//! `FABCOLL_SELECT=model` and `FABCOLL_MODEL=<file>` from the environment (one test: the
//! variables are read once per process).

mod common;

use fabcoll::collectives::{Collective, Machine};
use fabcoll::select::model::ModelParams;
use fabcoll::{Collectives, Communicator, Datatype, ReduceOp};

#[test]
fn env_model_selection_and_explicit_parameters() {
    let params = ModelParams::new(Machine { alpha: 4e-6, beta: 3e-10, gamma: 6e-11, f_alpha: 1.0, f_beta: 1.0 });
    let file = std::env::temp_dir().join(format!("fabcoll-model-env-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_string(&params).unwrap()).unwrap();
    std::env::set_var("FABCOLL_SELECT", "model");
    std::env::set_var("FABCOLL_MODEL", &file);

    let comms = Communicator::local_with(3, common::cfg()).unwrap();
    // Without parameters of its own the communicator estimates from FABCOLL_MODEL …
    let from_file = comms[0].estimate(Collective::Bcast, 1 << 20, Datatype::U8, true).unwrap();
    assert!(comms[0].model().is_none(), "estimate() does not install parameters");
    comms[0].set_model(params).unwrap();
    let mine = comms[0].estimate(Collective::Bcast, 1 << 20, Datatype::U8, true).unwrap();
    assert_eq!(mine.len(), from_file.len());
    for (a, b) in mine.iter().zip(&from_file) {
        assert_eq!((a.algorithm, &a.params), (b.algorithm, &b.params));
        assert!((a.seconds - b.seconds).abs() <= 1e-9 * a.seconds);
    }

    // … and selection follows the model once every rank has parameters.
    let algs: Vec<(Option<&str>, &str)> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                s.spawn(move || {
                    c.set_model(params).unwrap();
                    let want = c.estimate(Collective::Bcast, 1 << 20, Datatype::U8, true).unwrap()[0].algorithm;
                    let mut buf = vec![if c.rank() == 1 { 7u8 } else { 0 }; 1 << 20];
                    let got = c
                        .scope(|s| {
                            let r = s.bcast(&mut buf, 1)?;
                            Ok(s.algorithm_of(&r))
                        })
                        .unwrap();
                    assert!(buf.iter().all(|&b| b == 7));
                    let mut x = [c.rank() as f64];
                    c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
                    assert_eq!(x[0], 3.0);
                    (got, want)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank panicked")).collect()
    });
    for (got, want) in algs {
        assert_eq!(got, Some(want));
    }
    let _ = std::fs::remove_file(&file);
}
