//! First step: allreduce through the real executor over the local backend, both registered
//! algorithms, eager and zero-copy sizes.

mod common;

use fabcoll::collectives::Collective;
use fabcoll::Communicator;

#[test]
fn allreduce_two_algorithms_local() {
    for p in [1u32, 2, 3, 4, 5, 7, 8] {
        let comms = Communicator::local_with(p as usize, common::cfg()).unwrap();
        common::local_job(comms, |c| {
            for alg in ["recursive_doubling", "ring"] {
                for count in [0usize, 1, p as usize + 1, 1000, 100_003] {
                    common::run_one(c, Collective::Allreduce, Some(alg), count, false)?;
                }
            }
            Ok(())
        })
        .unwrap();
    }
}
