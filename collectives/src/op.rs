//! Reduction operators: the twelve MPI built-ins and user-defined ops with a commutative flag,
//! and which (op, datatype) pairs are defined ([`ReduceOp::check`]).
//!
//! Semantics of the built-ins (all exactly commutative; all but float `Sum`/`Prod` also exactly
//! associative, so for those two the result depends on the association the algorithm picks, as in
//! MPI):
//! - `Sum`, `Prod`: integers wrap (two's complement); floats are IEEE; `f16`/`bf16` are widened to
//!   f32, combined, and rounded back to nearest-even once per element per reduction step. That is
//!   the correctly rounded half-precision result (f32 has ≥ 2p + 2 significand bits for both), the
//!   only exception being bf16 products that fall into f32's subnormal range. There is no f32
//!   accumulation across steps: a p-rank reduction rounds p − 1 times, like native half math.
//! - `Min`, `Max` on floats: NaN propagates (any NaN operand gives NaN) and −0 < +0, i.e.
//!   IEEE 754-2019 `minimum`/`maximum`. This makes them order-independent, unlike C's `fmin`.
//! - `Band`, `Bor`, `Bxor`: bitwise, integers only. `Land`, `Lor`, `Lxor`: nonzero is true, result
//!   is 1 or 0, integers only.
//! - `Minloc`, `Maxloc`: pair types only; the smaller (larger) value wins, equal values keep the
//!   lower index (the MPI rule); a NaN value counts as the winner (lower index among NaNs); an
//!   exact tie (same value, same index: ±0, NaN payloads) goes to the smaller bit pattern.

use std::fmt;
use std::sync::Arc;

use crate::datatype::{Class, Datatype, Element};
use crate::error::{Error, Result};
use crate::schedule::Order;

/// The byte-level function a [`UserOp`] wraps: combines `src` into `dst` in the given order.
type ByteFn = dyn Fn(&[u8], &mut [u8], Datatype, Order) -> Result<()> + Send + Sync;

/// A user-defined reduction. Cheap to clone (the function is shared).
#[derive(Clone)]
pub struct UserOp {
    name: Arc<str>,
    commutative: bool,
    datatypes: Option<Arc<[Datatype]>>,
    f: Arc<ByteFn>,
}

impl UserOp {
    /// An MPI-style op on raw bytes: `f(invec, inoutvec, datatype)` must set
    /// `inoutvec[i] ← invec[i] ⊕ inoutvec[i]` for every element. Both slices hold the same whole
    /// number of elements and may be unaligned. For `Order::DstFirst` on a non-commutative op the
    /// kernel calls `f(dst, copy_of_src)` and copies the result back (one allocation).
    pub fn new<F>(name: impl Into<String>, commutative: bool, f: F) -> UserOp
    where
        F: Fn(&[u8], &mut [u8], Datatype) + Send + Sync + 'static,
    {
        let g = move |src: &[u8], dst: &mut [u8], dt: Datatype, order: Order| {
            if commutative || order == Order::SrcFirst {
                f(src, dst, dt);
            } else {
                let mut tmp = src.to_vec();
                f(dst, &mut tmp, dt);
                dst.copy_from_slice(&tmp);
            }
            Ok(())
        };
        UserOp { name: Arc::from(name.into()), commutative, datatypes: None, f: Arc::new(g) }
    }

    /// An element-wise op on one element type: `f(x, y)` is `x ⊕ y` with `x` the operand of the
    /// lower ranks. Only defined on `T::DATATYPE`; handles unaligned bytes and both orders.
    pub fn elementwise<T, F>(name: impl Into<String>, commutative: bool, f: F) -> UserOp
    where
        T: Element,
        F: Fn(T, T) -> T + Send + Sync + 'static,
    {
        let name: Arc<str> = Arc::from(name.into());
        let op_name = Arc::clone(&name);
        let g = move |src: &[u8], dst: &mut [u8], dt: Datatype, order: Order| {
            if dt != T::DATATYPE {
                let msg = format!("element-wise user op on {} called on {dt}", T::DATATYPE);
                return Err(Error::Reduce { op: op_name.to_string(), datatype: dt.name(), msg });
            }
            let combine = |s: &[T], d: &mut [T]| {
                match order {
                    Order::SrcFirst => d.iter_mut().zip(s).for_each(|(d, s)| *d = f(*s, *d)),
                    Order::DstFirst => d.iter_mut().zip(s).for_each(|(d, s)| *d = f(*d, *s)),
                }
                Ok(())
            };
            crate::kernels::on_bytes::<T>(src, dst, combine)
        };
        UserOp { name, commutative, datatypes: Some(Arc::from([T::DATATYPE].as_slice())), f: Arc::new(g) }
    }

    /// Restricts the op to these datatypes ([`ReduceOp::check`] rejects the others). An
    /// element-wise op still runs on its own type only (others are an error at run time).
    pub fn with_datatypes(mut self, datatypes: &[Datatype]) -> UserOp {
        self.datatypes = Some(Arc::from(datatypes));
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_commutative(&self) -> bool {
        self.commutative
    }

    /// The datatypes the op accepts; `None` = any.
    pub fn datatypes(&self) -> Option<&[Datatype]> {
        self.datatypes.as_deref()
    }

    /// Runs the op; the caller has checked the datatype and the lengths.
    pub(crate) fn call(&self, src: &[u8], dst: &mut [u8], dtype: Datatype, order: Order) -> Result<()> {
        (self.f)(src, dst, dtype, order)
    }
}

impl fmt::Debug for UserOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserOp")
            .field("name", &self.name)
            .field("commutative", &self.commutative)
            .field("datatypes", &self.datatypes)
            .finish_non_exhaustive()
    }
}

/// A reduction operator.
#[derive(Clone, Debug)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
    Band,
    Bor,
    Bxor,
    Land,
    Lor,
    Lxor,
    Minloc,
    Maxloc,
    User(UserOp),
}

/// The twelve built-in ops.
pub const BUILTINS: [ReduceOp; 12] = [
    ReduceOp::Sum,
    ReduceOp::Prod,
    ReduceOp::Min,
    ReduceOp::Max,
    ReduceOp::Band,
    ReduceOp::Bor,
    ReduceOp::Bxor,
    ReduceOp::Land,
    ReduceOp::Lor,
    ReduceOp::Lxor,
    ReduceOp::Minloc,
    ReduceOp::Maxloc,
];

impl ReduceOp {
    /// The op's name: `"sum"`, …, `"maxloc"`, or the user op's name.
    pub fn name(&self) -> &str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Band => "band",
            ReduceOp::Bor => "bor",
            ReduceOp::Bxor => "bxor",
            ReduceOp::Land => "land",
            ReduceOp::Lor => "lor",
            ReduceOp::Lxor => "lxor",
            ReduceOp::Minloc => "minloc",
            ReduceOp::Maxloc => "maxloc",
            ReduceOp::User(u) => u.name(),
        }
    }

    /// Parses a built-in op name (case-insensitive, an optional `mpi_` prefix is ignored).
    pub fn from_name(name: &str) -> Result<ReduceOp> {
        let lower = name.trim().to_ascii_lowercase();
        let bare = lower.strip_prefix("mpi_").unwrap_or(&lower);
        BUILTINS.into_iter().find(|op| op.name() == bare).ok_or_else(|| Error::UnknownName {
            kind: "reduction op",
            name: name.to_owned(),
            known: BUILTINS.iter().map(|o| o.name()).collect::<Vec<_>>().join(", "),
        })
    }

    pub fn is_builtin(&self) -> bool {
        !matches!(self, ReduceOp::User(_))
    }

    /// Whether operands may be swapped (all built-ins are; user ops say so themselves).
    pub fn is_commutative(&self) -> bool {
        match self {
            ReduceOp::User(u) => u.is_commutative(),
            _ => true,
        }
    }

    /// Whether the op is defined on `dtype`; the error says why not and what would be.
    #[inline]
    pub fn check(&self, dtype: Datatype) -> Result<()> {
        // Every call of a reduction checks its op (and the executor's kernel again): a built-in
        // op on a type it is defined on answers without the general path below.
        let ok = matches!(
            (self, dtype.class()),
            (ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Min | ReduceOp::Max, Class::Integer | Class::Float)
                | (
                    ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor | ReduceOp::Land | ReduceOp::Lor | ReduceOp::Lxor,
                    Class::Integer,
                )
                | (ReduceOp::Minloc | ReduceOp::Maxloc, Class::Pair)
                | (ReduceOp::Sum | ReduceOp::Prod, Class::Complex)
        );
        if ok {
            return Ok(());
        }
        self.check_slow(dtype)
    }

    /// [`ReduceOp::check`] of user ops and of built-in ones on a type they are not defined on.
    #[cold]
    fn check_slow(&self, dtype: Datatype) -> Result<()> {
        let class = dtype.class();
        let why = match self {
            ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Min | ReduceOp::Max => match class {
                Class::Pair => Some("defined on integer and float types; use minloc/maxloc for pairs"),
                Class::Complex if matches!(self, ReduceOp::Min | ReduceOp::Max) => {
                    Some("complex numbers are not ordered: sum and prod only")
                }
                _ => None,
            },
            ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor => match class {
                Class::Integer => None,
                _ => Some("bitwise ops are defined on integer types only"),
            },
            ReduceOp::Land | ReduceOp::Lor | ReduceOp::Lxor => match class {
                Class::Integer => None,
                _ => Some("logical ops are defined on integer types only"),
            },
            ReduceOp::Minloc | ReduceOp::Maxloc => match class {
                Class::Pair => None,
                _ => Some("defined on (value, index) pair types only: f32_i32, f64_i32, i32_i32, i64_i64"),
            },
            ReduceOp::User(u) => match u.datatypes() {
                Some(list) if !list.contains(&dtype) => {
                    let names: Vec<_> = list.iter().map(|d| d.name()).collect();
                    return Err(self.error(dtype, format!("user op accepts only {}", names.join(", "))));
                }
                _ => None,
            },
        };
        match why {
            Some(msg) => Err(self.error(dtype, msg.to_owned())),
            None => Ok(()),
        }
    }

    pub(crate) fn error(&self, dtype: Datatype, msg: String) -> Error {
        Error::Reduce { op: self.name().to_owned(), datatype: dtype.name(), msg }
    }
}

/// Built-ins compare by variant, user ops by identity (the same shared function).
impl PartialEq for ReduceOp {
    fn eq(&self, other: &ReduceOp) -> bool {
        match (self, other) {
            (ReduceOp::User(a), ReduceOp::User(b)) => Arc::ptr_eq(&a.f, &b.f),
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_are_send_and_sync() {
        fn check<T: Send + Sync + Clone>() {}
        check::<ReduceOp>();
        check::<UserOp>();
    }

    #[test]
    fn names_round_trip() {
        for op in BUILTINS {
            assert_eq!(ReduceOp::from_name(op.name()).unwrap(), op);
            assert!(op.is_builtin() && op.is_commutative());
        }
        assert_eq!(ReduceOp::from_name("MPI_SUM").unwrap(), ReduceOp::Sum);
        let e = ReduceOp::from_name("avg").unwrap_err().to_string();
        assert!(e.contains("avg") && e.contains("maxloc"), "{e}");
    }

    /// The inline answer of `check` agrees with the general one for every built-in op and type.
    #[test]
    fn check_shortcut_agrees_with_the_general_check() {
        for op in BUILTINS {
            for d in Datatype::ALL {
                assert_eq!(op.check(d).is_ok(), op.check_slow(d).is_ok(), "{} on {}", op.name(), d.name());
            }
        }
    }

    #[test]
    fn check_table() {
        use ReduceOp::*;
        for dt in Datatype::ALL {
            let (int, float, pair, complex) = (dt.is_integer(), dt.is_float(), dt.is_pair(), dt.is_complex());
            for (op, ok) in [
                (Sum, int || float || complex),
                (Prod, int || float || complex),
                (Min, int || float),
                (Max, int || float),
                (Band, int),
                (Bor, int),
                (Bxor, int),
                (Land, int),
                (Lor, int),
                (Lxor, int),
                (Minloc, pair),
                (Maxloc, pair),
            ] {
                let r = op.check(dt);
                assert_eq!(r.is_ok(), ok, "{op} on {dt}: {r:?}");
                if let Err(e) = r {
                    let msg = e.to_string();
                    assert!(msg.contains(op.name()) && msg.contains(dt.name()), "{msg}");
                }
            }
        }
    }

    #[test]
    fn user_op_properties_and_datatype_restriction() {
        let cat = UserOp::elementwise::<i64, _>("concat", false, |a, b| a * 10 + b);
        let op = ReduceOp::User(cat.clone());
        assert_eq!(op.name(), "concat");
        assert!(!op.is_commutative() && !op.is_builtin());
        assert!(op.check(Datatype::I64).is_ok());
        let e = op.check(Datatype::I32).unwrap_err().to_string();
        assert!(e.contains("concat") && e.contains("i32") && e.contains("only i64"), "{e}");
        assert_eq!(op, ReduceOp::User(cat));
        let other = ReduceOp::User(UserOp::elementwise::<i64, _>("concat", false, |a, b| a * 10 + b));
        assert_ne!(op, other);
        let any = ReduceOp::User(UserOp::new("xor", true, |s, d, _| d.iter_mut().zip(s).for_each(|(d, s)| *d ^= s)));
        assert!(any.is_commutative());
        // Widening an element-wise op's datatypes does not make it run on the wrong element size.
        let wide = ReduceOp::User(
            UserOp::elementwise::<i64, _>("add", true, |a, b| a + b).with_datatypes(&[Datatype::I64, Datatype::I8]),
        );
        assert!(wide.check(Datatype::I8).is_ok());
        let e = crate::kernels::reduce(&wide, Datatype::I8, &[1; 3], &mut [2; 3], Order::SrcFirst).unwrap_err();
        assert!(e.to_string().contains("add on i8") && e.to_string().contains("called on i8"), "{e}");
        assert!(Datatype::ALL.iter().all(|&d| any.check(d).is_ok()));
    }
}
