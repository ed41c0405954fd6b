//! The text form of [`ModelParams`] and [`Rendezvous`]: comma-separated `name=value` pairs, as
//! `fabcoll model --machine` and `--rendezvous` take them and [`ModelParams`]'s `Display` writes
//! them (so a printed model parses back).

use super::params::{model_err, ModelParams, Network, Rendezvous};
use crate::cost::Machine;
use crate::error::Result;

/// The names [`ModelParams::parse_kv`] knows.
const NAMES: &str = "alpha, beta, gamma, f_alpha, f_beta, copy_beta, overhead, step_cost, hot_alpha, hot_beta, gap, \
                     cores, cpu_sends, eager_limit, alpha_rendezvous, net_alpha, net_beta";

/// `(name, value)` of each `name=value` item of `s` (items separated by commas, blanks ignored).
fn items(s: &str) -> impl Iterator<Item = Result<(&str, &str, &str)>> {
    s.split(',').map(str::trim).filter(|i| !i.is_empty()).map(|item| {
        let (k, v) = item.split_once('=').ok_or_else(|| model_err(format!("{item:?} is not name=value")))?;
        Ok((item, k.trim(), v.trim()))
    })
}

/// `v` as a whole number in `0..=max`.
fn whole(item: &str, v: f64, max: f64) -> Result<f64> {
    if v.fract() != 0.0 || !(0.0..=max).contains(&v) {
        return Err(model_err(format!("{item:?}: must be a whole number in 0..={max}")));
    }
    Ok(v)
}

impl ModelParams {
    /// Parses `alpha=1e-6,beta=1e-10,gamma=2e-10[,f_alpha=..,f_beta=..,copy_beta=..,overhead=..]`
    /// (also `step_cost=..`, `hot_alpha=..`, `hot_beta=..`, `gap=..`, `cores=N`, `cpu_sends=0|1`,
    /// `eager_limit=BYTES`, `alpha_rendezvous=..`, `net_alpha=..`, `net_beta=..`). `alpha` and
    /// `beta` are required; missing factors (and the gap) default to 1, missing costs to 0,
    /// `cpu_sends` to 0, the rendezvous switch and the network level to none (each needs both of
    /// its values).
    pub fn parse_kv(s: &str) -> Result<ModelParams> {
        let mut p = ModelParams::new(Machine { alpha: 0.0, beta: 0.0, gamma: 0.0, f_alpha: 1.0, f_beta: 1.0 });
        let mut seen = Vec::new();
        for item in items(s) {
            let (item, k, v) = item?;
            let v: f64 = v.parse().map_err(|_| model_err(format!("{item:?}: {v:?} is not a number")))?;
            match k {
                "alpha" => p.alpha = v,
                "beta" => p.beta = v,
                "gamma" => p.gamma = v,
                "f_alpha" => p.f_alpha = v,
                "f_beta" => p.f_beta = v,
                "copy_beta" => p.copy_beta = v,
                "overhead" => p.overhead = v,
                "step_cost" => p.step_cost = v,
                "hot_alpha" => p.hot_alpha = v,
                "hot_beta" => p.hot_beta = v,
                "gap" => p.gap = v,
                "cores" => p.cores = whole(item, v, f64::from(u32::MAX))? as u32,
                "cpu_sends" if v == 0.0 || v == 1.0 => p.cpu_sends = v == 1.0,
                "cpu_sends" => return Err(model_err(format!("{item:?}: cpu_sends must be 0 or 1"))),
                "eager_limit" => p.rendezvous.eager_limit = whole(item, v, 2f64.powi(53))? as u64,
                "alpha_rendezvous" => p.rendezvous.alpha = v,
                "net_alpha" => p.network.get_or_insert(Network { alpha: 0.0, beta: 0.0 }).alpha = v,
                "net_beta" => p.network.get_or_insert(Network { alpha: 0.0, beta: 0.0 }).beta = v,
                other => return Err(model_err(format!("unknown parameter {other:?} ({NAMES})"))),
            }
            seen.push(k);
        }
        for need in ["alpha", "beta"] {
            if !seen.contains(&need) {
                return Err(model_err(format!("{need} is required")));
            }
        }
        if seen.contains(&"eager_limit") != seen.contains(&"alpha_rendezvous") {
            return Err(model_err("the rendezvous switch needs eager_limit and alpha_rendezvous"));
        }
        if seen.contains(&"net_alpha") != seen.contains(&"net_beta") {
            return Err(model_err("the network level needs net_alpha and net_beta"));
        }
        p.validate()?;
        Ok(p)
    }
}

impl Rendezvous {
    /// Parses `eager_limit=16384,alpha=3e-6` (`fabcoll model --rendezvous`).
    pub fn parse_kv(s: &str) -> Result<Rendezvous> {
        let mut r = Rendezvous { eager_limit: 0, alpha: 0.0 };
        let (mut has_limit, mut has_alpha) = (false, false);
        for item in items(s) {
            let (item, k, v) = item?;
            let bad = || model_err(format!("{item:?}: {v:?} is not a number"));
            match k {
                "eager_limit" => {
                    r.eager_limit = v.parse().map_err(|_| bad())?;
                    has_limit = true;
                }
                "alpha" => {
                    r.alpha = v.parse().map_err(|_| bad())?;
                    has_alpha = true;
                }
                other => return Err(model_err(format!("unknown rendezvous parameter {other:?} (eager_limit, alpha)"))),
            }
        }
        if !(has_limit && has_alpha) {
            return Err(model_err("rendezvous needs eager_limit and alpha"));
        }
        r.validate()?;
        Ok(r)
    }
}

impl std::fmt::Display for ModelParams {
    /// Every parameter, as [`ModelParams::parse_kv`] reads them (the rendezvous switch and the
    /// network level only when there is one).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "alpha={:.3e},beta={:.3e},gamma={:.3e},f_alpha={:.3},f_beta={:.3},copy_beta={:.3e},overhead={:.3e},\
             step_cost={:.3e},hot_alpha={:.3e},hot_beta={:.3e},gap={:.3},cores={},cpu_sends={}",
            self.alpha,
            self.beta,
            self.gamma,
            self.f_alpha,
            self.f_beta,
            self.copy_beta,
            self.overhead,
            self.step_cost,
            self.hot_alpha,
            self.hot_beta,
            self.gap,
            self.cores,
            u8::from(self.cpu_sends)
        )?;
        if !self.rendezvous.is_off() {
            write!(f, ",eager_limit={},alpha_rendezvous={:.3e}", self.rendezvous.eager_limit, self.rendezvous.alpha)?;
        }
        if let Some(n) = self.network {
            write!(f, ",net_alpha={:.3e},net_beta={:.3e}", n.alpha, n.beta)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_parses_and_rejects() {
        let p = ModelParams::parse_kv("alpha=2e-6, beta=1e-10,gamma=3e-10").unwrap();
        assert_eq!((p.alpha, p.beta, p.gamma, p.f_alpha), (2e-6, 1e-10, 3e-10, 1.0));
        assert!(p.rendezvous.is_off());
        assert!(ModelParams::parse_kv("beta=1").unwrap_err().to_string().contains("alpha is required"));
        assert!(ModelParams::parse_kv("alpha=1,beta=x").is_err());
        assert!(ModelParams::parse_kv("alpha=1,beta=1,delta=2").unwrap_err().to_string().contains("delta"));
        assert!(ModelParams::parse_kv("alpha=-1,beta=1").is_err());
        assert!(ModelParams::parse_kv("alpha=1,beta=1,cores=1.5").unwrap_err().to_string().contains("whole"));
        let back = ModelParams::parse_kv(&p.to_string()).unwrap();
        assert!((back.alpha - p.alpha).abs() < 1e-9 && (back.beta - p.beta).abs() < 1e-13);
        // Sends on the CPU: a flag, 0 or 1, printed and parsed back.
        let node = ModelParams::parse_kv("alpha=1e-6,beta=1e-10,cpu_sends=1,gap=0.3").unwrap();
        assert!(node.cpu_sends && !p.cpu_sends);
        let back = ModelParams::parse_kv(&node.to_string()).unwrap();
        assert_eq!((back.cpu_sends, back.gap), (true, 0.3));
        assert!(ModelParams::parse_kv("alpha=1,beta=1,cpu_sends=0.5").unwrap_err().to_string().contains("0 or 1"));
        // The rendezvous switch: both values or neither, printed and parsed back.
        let rdv = ModelParams::parse_kv("alpha=1e-6,beta=1e-10,eager_limit=4096,alpha_rendezvous=3e-6").unwrap();
        assert_eq!(rdv.rendezvous, Rendezvous { eager_limit: 4096, alpha: 3e-6 });
        assert_eq!(ModelParams::parse_kv(&rdv.to_string()).unwrap().rendezvous, rdv.rendezvous);
        assert!(ModelParams::parse_kv("alpha=1,beta=1,eager_limit=4096").is_err());
        // The network level: both values or neither, validated, printed and parsed back.
        assert!(p.network.is_none() && !p.to_string().contains("net_"));
        let two = ModelParams::parse_kv("alpha=5e-7,beta=2e-10,net_alpha=5e-6,net_beta=1e-9").unwrap();
        assert_eq!(two.network, Some(Network { alpha: 5e-6, beta: 1e-9 }));
        assert_eq!(ModelParams::parse_kv(&two.to_string()).unwrap().network, two.network);
        let e = ModelParams::parse_kv("alpha=1,beta=1,net_alpha=1").unwrap_err().to_string();
        assert!(e.contains("net_alpha and net_beta"), "{e}");
        let e = ModelParams::parse_kv("alpha=1,beta=1,net_alpha=1,net_beta=-1").unwrap_err().to_string();
        assert!(e.contains("net_beta"), "{e}");
    }

    #[test]
    fn rendezvous_parses_and_rejects() {
        let r = Rendezvous::parse_kv("eager_limit=16384, alpha=3e-6").unwrap();
        assert_eq!(r, Rendezvous { eager_limit: 16384, alpha: 3e-6 });
        assert!(Rendezvous::parse_kv("alpha=3e-6").is_err());
        assert!(Rendezvous::parse_kv("eager_limit=1,alpha=-1").is_err());
        assert!(Rendezvous::parse_kv("eager_limit=x,alpha=1").is_err());
        assert!(Rendezvous::parse_kv("eager_limit=1,alpha=1,beta=2").is_err());
    }
}
