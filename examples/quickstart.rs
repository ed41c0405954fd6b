//! The README's quick start (kept compiling by `cargo test`). Run under fabrun:
//! `fabrun -n 4 target/release/examples/quickstart`.

use fabcoll::{Collectives, Communicator, ReduceOp};

fn main() -> fabcoll::Result<()> {
    // Rank, size and the bootstrap store come from the environment (fabrun, torchrun or Slurm).
    let comm = Communicator::from_env()?;
    let grad = vec![comm.rank() as f32; 1 << 20];
    let mut sum = vec![0.0f32; grad.len()];
    comm.allreduce(&grad, &mut sum, &ReduceOp::Sum)?;

    // Nonblocking: several collectives outstanding; each request has test()/wait() and is a Future.
    let mut block = vec![0u8; 4096];
    comm.scope(|s| {
        let a = s.bcast(&mut block, 0)?;
        let b = s.allreduce_in_place(&mut sum, &ReduceOp::Max)?;
        a.wait()?;
        b.wait()
    })?;

    // Force an algorithm and its parameters for one call (names: `fabcoll info`).
    let opts = fabcoll::Options::algorithm("ring").param("segment", 65536);
    comm.with(&opts).allreduce(&grad, &mut sum, &ReduceOp::Sum)?;

    // Tagged point to point (pipeline stages): the n-th send from a to b matches b's n-th recv from a.
    let (next, prev) = ((comm.rank() + 1) % comm.size(), (comm.rank() + comm.size() - 1) % comm.size());
    let mut act = vec![0f32; 1 << 16];
    comm.scope(|s| {
        s.send(&grad[..1 << 16], next, 7)?;
        s.recv(&mut act, prev, 7)?.wait()
    })?;
    Ok(())
}
