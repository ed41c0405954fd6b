//! Invalid calls are errors, never panics, for every algorithm of the registry: root ≥ p, rank
//! ≥ p, p = 0, element counts whose sizes overflow, counts/displacements of the wrong length,
//! unknown parameters and parameters out of range.

use fabcoll_collectives::args::{CollArgs, Collective};
use fabcoll_collectives::{registry, Error};

fn base(alg: &fabcoll_collectives::Algorithm, p: u32) -> CollArgs {
    let mut a = CollArgs::new(alg.coll, 0, p, 3);
    if alg.coll.is_vector() {
        let n = if alg.coll == Collective::Alltoallv { (p * p) as usize } else { p as usize };
        a = a.with_counts(vec![3u64; n]);
    }
    a
}

fn refused(alg: &fabcoll_collectives::Algorithm, a: &CollArgs, what: &str) {
    match alg.schedule(a) {
        Err(_) => {}
        Ok(_) => panic!("{}:{} accepted {what}", alg.coll, alg.name),
    }
}

#[test]
fn invalid_calls_are_errors_for_every_algorithm() {
    for alg in registry::all() {
        let p = 4;
        assert!(alg.schedule(&base(alg, p)).is_ok() || alg.restrictions.violated(&base(alg, p)).is_some());

        let mut a = base(alg, p);
        a.rank = p;
        refused(alg, &a, "rank = p");

        let mut a = base(alg, p);
        a.size = 0;
        a.rank = 0;
        refused(alg, &a, "p = 0");

        if alg.coll.is_rooted() {
            refused(alg, &base(alg, p).with_root(p), "root = p");
        }

        if alg.coll.is_vector() {
            refused(alg, &base(alg, p).with_counts(vec![1u64; 3]), "counts of the wrong length");
            let mut a = base(alg, p);
            a.displs = Some(vec![0u64; 2].into());
            refused(alg, &a, "displs of the wrong length");
            let n = if alg.coll == Collective::Alltoallv { (p * p) as usize } else { p as usize };
            refused(alg, &base(alg, p).with_counts(vec![u64::MAX / 2; n]), "counts whose sum overflows");
        } else if alg.coll != Collective::Barrier {
            let mut a = base(alg, p);
            a.count = u64::MAX;
            refused(alg, &a, "count × p overflowing");
        }

        refused(alg, &base(alg, p).with_param("no_such_parameter", 1), "an unknown parameter");
        for spec in alg.params {
            if spec.min > 0 {
                refused(alg, &base(alg, p).with_param(spec.name, spec.min - 1), "a parameter below its range");
            }
        }
    }
}

#[test]
fn unknown_algorithm_names_the_known_ones() {
    let e = registry::find(Collective::Allreduce, "nope").unwrap_err();
    assert!(matches!(e, Error::UnknownAlgorithm { .. }));
    assert!(e.to_string().contains("ring"), "{e}");
}
