//! The fuzz bodies of this crate (`fabcoll::fuzz`: control messages, decision files, model
//! files) on stable: each over its seeds, the committed corpus and a few thousand seeded
//! mutations (`FABCOLL_FUZZ_SEED`, `FABCOLL_FUZZ_ITERS`). Nightly fuzzing runs the same bodies
//! (`fuzz/`, `docs/fuzzing.md`).

#[path = "../fabric/tests/mutate/mod.rs"]
mod mutate;

use std::path::{Path, PathBuf};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus")
}

#[test]
fn every_decoder_of_this_crate_survives_mutated_input() {
    for t in fabcoll::fuzz::TARGETS {
        let n = mutate::run(t, &corpus(), 3000);
        eprintln!("{}: {n} inputs", t.name);
    }
}

/// Writes every target's seeds (made by the real encoders) into `fuzz/corpus/<target>/seed-<i>`:
/// run it once after a wire format changes (`cargo test --test fuzz_bodies -- --ignored`).
#[test]
#[ignore = "writes the seed corpus into the source tree"]
fn write_seed_corpus() {
    for t in fabcoll::fabric::fuzz::TARGETS.iter().chain(fabcoll::fuzz::TARGETS) {
        let dir = corpus().join(t.name);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, s) in (t.seeds)().iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), s).unwrap();
        }
    }
}
