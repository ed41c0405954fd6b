//! The fabric's fuzz bodies (`fabcoll_fabric::fuzz`) on stable: each over its seeds, the
//! committed corpus and a few thousand seeded mutations (`FABCOLL_FUZZ_SEED`,
//! `FABCOLL_FUZZ_ITERS`). Nightly fuzzing runs the same bodies (`fuzz/`, `docs/fuzzing.md`).

mod mutate;

use std::path::Path;

use fabcoll_fabric::fuzz::TARGETS;

#[test]
fn every_fabric_decoder_survives_mutated_input() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    for t in TARGETS {
        let n = mutate::run(t, &corpus, 4000);
        eprintln!("{}: {n} inputs", t.name);
    }
}
