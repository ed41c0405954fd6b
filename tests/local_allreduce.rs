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

/// Complex numbers multiply as complex numbers under every allreduce and reduce_scatter_block
/// algorithm (a split between an element's two parts would multiply parts): rank r holds
/// (r + 1) + (i mod 3)·i, so every product is an exact small integer; odd counts, eager and
/// zero-copy sizes, both complex types.
#[test]
fn complex_products_under_every_algorithm() {
    use fabcoll::{Collectives, Complex, Options, ReduceOp};
    fn want(p: u32, i: usize) -> Complex<f64> {
        (0..p).fold(Complex::new(1.0, 0.0), |a, r| {
            let b = Complex::new(f64::from(r + 1), (i % 3) as f64);
            Complex::new(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re)
        })
    }
    for p in [2u32, 3, 5] {
        let comms = Communicator::local_with(p as usize, common::cfg()).unwrap();
        common::local_job(comms, |c| {
            let r = c.rank();
            for (coll, count) in [(Collective::Allreduce, 7usize), (Collective::Allreduce, 20_001)] {
                let args = common::args_for(coll, p, count, true);
                for alg in common::algorithms(&args) {
                    let opts = Options::algorithm(alg);
                    let w = c.with(&opts);
                    let mine: Vec<Complex<f64>> =
                        (0..count).map(|i| Complex::new(f64::from(r + 1), (i % 3) as f64)).collect();
                    let mut out = vec![Complex::new(0.0, 0.0); count];
                    w.allreduce(&mine, &mut out, &ReduceOp::Prod).map_err(|e| format!("{alg}: {e}"))?;
                    if let Some(i) = (0..count).find(|&i| out[i] != want(p, i)) {
                        return Err(format!("{alg} p={p} count={count}: [{i}] = {:?}, want {:?}", out[i], want(p, i)));
                    }
                    let small: Vec<Complex<f32>> =
                        mine.iter().map(|z| Complex::new(z.re as f32, z.im as f32)).collect();
                    let mut sum = small.clone();
                    w.allreduce_in_place(&mut sum, &ReduceOp::Sum).map_err(|e| format!("{alg}: {e}"))?;
                    let total = (p * (p + 1) / 2) as f32;
                    if let Some(i) = (0..count).find(|&i| sum[i] != Complex::new(total, (p as usize * (i % 3)) as f32))
                    {
                        return Err(format!("{alg} p={p} count={count} c64 sum: [{i}] = {:?}", sum[i]));
                    }
                }
            }
            let block = 1001;
            let args = common::args_for(Collective::ReduceScatterBlock, p, block, true);
            for alg in common::algorithms(&args) {
                let opts = Options::algorithm(alg);
                let w = c.with(&opts);
                let mine: Vec<Complex<f64>> =
                    (0..block * p as usize).map(|i| Complex::new(f64::from(r + 1), (i % 3) as f64)).collect();
                let mut out = vec![Complex::new(0.0, 0.0); block];
                w.reduce_scatter_block(&mine, &mut out, &ReduceOp::Prod).map_err(|e| format!("{alg}: {e}"))?;
                let at = r as usize * block;
                if let Some(i) = (0..block).find(|&i| out[i] != want(p, at + i)) {
                    return Err(format!("reduce_scatter_block {alg} p={p}: [{i}] = {:?}", out[i]));
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
}
