//! The α–β–γ cost terms of an algorithm (thakur §2): time = a·α + b·β + c·γ, where α is the
//! latency of one message, β the transfer time per byte and γ the reduction time per byte.
//!
//! An algorithm's cost function returns the *terms* (a, b, c), not a time, so the same formula
//! serves every machine: [`Cost::time`] applies a [`Machine`]'s parameters. The simulator
//! (`crate::sim`) reproduces the same terms from the schedule itself, which is how the formulas
//! in the module docs are tested.

/// Terms of the α–β–γ model for one call.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Cost {
    /// Messages on the critical path (multiplies α).
    pub alpha: f64,
    /// Bytes on the critical path through the busiest port (multiplies β).
    pub beta: f64,
    /// Bytes reduced on the critical path (multiplies γ).
    pub gamma: f64,
}

impl Cost {
    pub const fn new(alpha: f64, beta: f64, gamma: f64) -> Cost {
        Cost { alpha, beta, gamma }
    }

    /// Seconds on `m`.
    pub fn time(&self, m: &Machine) -> f64 {
        self.alpha * m.alpha + self.beta * m.beta + self.gamma * m.gamma
    }
}

impl std::ops::Add for Cost {
    type Output = Cost;
    fn add(self, o: Cost) -> Cost {
        Cost::new(self.alpha + o.alpha, self.beta + o.beta, self.gamma + o.gamma)
    }
}

/// Machine parameters of the model (seconds, seconds per byte).
///
/// `f_alpha` and `f_beta` are Rabenseifner's factors (rabenseifner §2) for a node that sends and
/// receives at once: a bidirectional exchange costs `f_alpha·α + f_beta·n·β` instead of `α + nβ`
/// (1 = full duplex at no extra cost, 2 = sending and receiving share the port).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Machine {
    pub alpha: f64,
    pub beta: f64,
    pub gamma: f64,
    pub f_alpha: f64,
    pub f_beta: f64,
}

impl Machine {
    /// Unit model for formula checks: α = β = γ = 1, full duplex (f_α = f_β = 1).
    pub const UNIT: Machine = Machine { alpha: 1.0, beta: 1.0, gamma: 1.0, f_alpha: 1.0, f_beta: 1.0 };
}

/// ⌈lg p⌉ for p ≥ 1.
pub fn ceil_log2(p: u64) -> u32 {
    if p <= 1 {
        0
    } else {
        64 - (p - 1).leading_zeros()
    }
}

/// ⌊lg p⌋ for p ≥ 1.
pub fn floor_log2(p: u64) -> u32 {
    63 - p.max(1).leading_zeros()
}

/// The largest power of two ≤ p (p ≥ 1).
pub fn pow2_floor(p: u64) -> u64 {
    1u64 << floor_log2(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs() {
        assert_eq!(ceil_log2(1), 0);
        assert_eq!(ceil_log2(2), 1);
        assert_eq!(ceil_log2(5), 3);
        assert_eq!(floor_log2(5), 2);
        assert_eq!(pow2_floor(7), 4);
        assert_eq!(pow2_floor(8), 8);
    }
}
