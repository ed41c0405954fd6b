//! Datatypes and reduction ops as C integer handles: `fc_datatype` codes name fabcoll's
//! [`Datatype`]s (MPI's names), `fc_op` codes name the built-in [`ReduceOp`]s, and user ops made
//! by `fc_op_create` from a C callback get codes of their own in a process-wide table.
//! `with_element!` turns a datatype into the Rust element type the typed API takes.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};

use fabcoll::{Datatype, ReduceOp, UserOp};

use crate::error::{guard, Failure, Result};

/// The element type of a buffer (`FC_INT8` … `FC_C_DOUBLE_COMPLEX`).
#[allow(non_camel_case_types)]
pub type fc_datatype = i32;

pub const FC_INT8: fc_datatype = 0;
pub const FC_INT16: fc_datatype = 1;
pub const FC_INT32: fc_datatype = 2;
pub const FC_INT64: fc_datatype = 3;
pub const FC_UINT8: fc_datatype = 4;
pub const FC_UINT16: fc_datatype = 5;
pub const FC_UINT32: fc_datatype = 6;
pub const FC_UINT64: fc_datatype = 7;
/// IEEE 754 binary16 (`_Float16`), 2 bytes.
pub const FC_FLOAT16: fc_datatype = 8;
/// bfloat16: the upper half of a `float`, 2 bytes.
pub const FC_BFLOAT16: fc_datatype = 9;
pub const FC_FLOAT: fc_datatype = 10;
pub const FC_DOUBLE: fc_datatype = 11;
/// `struct { float value; int32_t index; }` (MPI_FLOAT_INT), for `FC_MINLOC`/`FC_MAXLOC`.
pub const FC_FLOAT_INT: fc_datatype = 12;
/// `struct { double value; int32_t index; }` (MPI_DOUBLE_INT), 16 bytes with padding.
pub const FC_DOUBLE_INT: fc_datatype = 13;
/// `struct { int32_t value; int32_t index; }` (MPI_2INT).
pub const FC_2INT: fc_datatype = 14;
/// `struct { int64_t value; int64_t index; }`.
pub const FC_LONG_INT: fc_datatype = 15;
/// Raw bytes (reductions treat them as `FC_UINT8`).
pub const FC_BYTE: fc_datatype = 16;
/// `float _Complex` (MPI_C_FLOAT_COMPLEX), 8 bytes; reduces by `FC_SUM` and `FC_PROD`.
pub const FC_C_FLOAT_COMPLEX: fc_datatype = 17;
/// `double _Complex` (MPI_C_DOUBLE_COMPLEX), 16 bytes; reduces by `FC_SUM` and `FC_PROD`.
pub const FC_C_DOUBLE_COMPLEX: fc_datatype = 18;

/// A reduction op: a built-in (`FC_SUM` …) or one made by `fc_op_create`.
#[allow(non_camel_case_types)]
pub type fc_op = i32;

/// No op: what `fc_op_free` leaves behind.
pub const FC_OP_NULL: fc_op = -1;
pub const FC_SUM: fc_op = 0;
pub const FC_PROD: fc_op = 1;
/// IEEE 754-2019 `minimum` on floats (NaN propagates, −0 < +0).
pub const FC_MIN: fc_op = 2;
/// IEEE 754-2019 `maximum` on floats (NaN propagates, −0 < +0).
pub const FC_MAX: fc_op = 3;
pub const FC_BAND: fc_op = 4;
pub const FC_BOR: fc_op = 5;
pub const FC_BXOR: fc_op = 6;
pub const FC_LAND: fc_op = 7;
pub const FC_LOR: fc_op = 8;
pub const FC_LXOR: fc_op = 9;
pub const FC_MINLOC: fc_op = 10;
pub const FC_MAXLOC: fc_op = 11;

/// The first code `fc_op_create` hands out.
const FIRST_USER_OP: fc_op = 64;

/// A user reduction: must set `inout[i] = in[i] ⊕ inout[i]` for `count` elements of the
/// datatype of the call; `ctx` is the pointer given to `fc_op_create`. The pointers are aligned
/// for the datatype. It may run on any thread (the progress thread moves nonblocking calls).
#[allow(non_camel_case_types)]
pub type fc_user_function =
    Option<unsafe extern "C" fn(input: *const c_void, inout: *mut c_void, count: usize, ctx: *mut c_void)>;

/// The datatype a code names.
pub(crate) fn datatype(code: fc_datatype) -> Result<Datatype> {
    match code {
        FC_BYTE => Ok(Datatype::U8),
        FC_C_FLOAT_COMPLEX => Ok(Datatype::C64),
        FC_C_DOUBLE_COMPLEX => Ok(Datatype::C128),
        // The codes below FC_BYTE follow `Datatype::ALL`'s order (FC_INT8 … FC_LONG_INT).
        c if (0..FC_BYTE).contains(&c) => Ok(Datatype::ALL[c as usize]),
        c => Err(Failure::arg(format!(
            "unknown datatype code {c} (FC_INT8 = 0 … FC_C_DOUBLE_COMPLEX = {FC_C_DOUBLE_COMPLEX})"
        ))),
    }
}

/// The user ops made by `fc_op_create`, by code, and the next code to hand out.
struct UserOps {
    ops: HashMap<fc_op, ReduceOp>,
    next: fc_op,
}

fn user_ops() -> &'static Mutex<UserOps> {
    static OPS: OnceLock<Mutex<UserOps>> = OnceLock::new();
    OPS.get_or_init(|| Mutex::new(UserOps { ops: HashMap::new(), next: FIRST_USER_OP }))
}

/// The op a code names.
pub(crate) fn reduce_op(code: fc_op) -> Result<ReduceOp> {
    Ok(match code {
        FC_SUM => ReduceOp::Sum,
        FC_PROD => ReduceOp::Prod,
        FC_MIN => ReduceOp::Min,
        FC_MAX => ReduceOp::Max,
        FC_BAND => ReduceOp::Band,
        FC_BOR => ReduceOp::Bor,
        FC_BXOR => ReduceOp::Bxor,
        FC_LAND => ReduceOp::Land,
        FC_LOR => ReduceOp::Lor,
        FC_LXOR => ReduceOp::Lxor,
        FC_MINLOC => ReduceOp::Minloc,
        FC_MAXLOC => ReduceOp::Maxloc,
        c => {
            let table = user_ops().lock().unwrap_or_else(|p| p.into_inner());
            match table.ops.get(&c) {
                Some(op) => op.clone(),
                None => {
                    return Err(Failure::arg(format!("unknown op code {c} (not built in, not made or already freed)")))
                }
            }
        }
    })
}

/// The C callback and its context, callable from any thread (the contract of `fc_op_create`).
struct Callback {
    f: unsafe extern "C" fn(*const c_void, *mut c_void, usize, *mut c_void),
    ctx: *mut c_void,
}

// SAFETY: `fc_op_create`'s contract: the function and its context may be used from any thread.
unsafe impl Send for Callback {}
// SAFETY: as above.
unsafe impl Sync for Callback {}

impl Callback {
    /// `inout ← input ⊕ inout` through the callback, on aligned copies where the bytes are not
    /// aligned for `dt` (the executor may hand over unaligned regions).
    fn combine(&self, input: &[u8], inout: &mut [u8], dt: Datatype) {
        let count = inout.len() / dt.size();
        let align = dt.align();
        let aligned = |p: *const u8| (p as usize).is_multiple_of(align);
        if aligned(input.as_ptr()) && aligned(inout.as_ptr()) {
            // SAFETY: both regions hold `count` elements of `dt`, aligned, and do not overlap
            // (one is shared, the other exclusive); the callback reads one and writes the other.
            unsafe { (self.f)(input.as_ptr().cast(), inout.as_mut_ptr().cast(), count, self.ctx) };
            return;
        }
        // u64 words are aligned for every datatype.
        let words = inout.len().div_ceil(8);
        let (mut a, mut b) = (vec![0u64; words], vec![0u64; words]);
        let (ab, bb) = (bytes_of(&mut a, input.len()), bytes_of(&mut b, inout.len()));
        ab.copy_from_slice(input);
        bb.copy_from_slice(inout);
        // SAFETY: as above, on the aligned copies.
        unsafe { (self.f)(ab.as_ptr().cast(), bb.as_mut_ptr().cast(), count, self.ctx) };
        inout.copy_from_slice(bytes_of(&mut b, inout.len()));
    }
}

/// The first `len` bytes of `words`.
fn bytes_of(words: &mut [u64], len: usize) -> &mut [u8] {
    // SAFETY: the words own at least `len` bytes (callers size them), and any byte pattern is a
    // valid u8.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

/// Makes a user reduction from a C function: `commute` nonzero when the op is commutative
/// (fabcoll then may combine in any order); `ctx` is passed to every call of `function`, which
/// may run on any thread. The op applies to every datatype. `*op` gets its code.
///
/// # Safety
/// `op` points to writable memory; `function` and `ctx` stay valid until the op is freed and
/// every call that uses it has finished.
#[no_mangle]
pub unsafe extern "C" fn fc_op_create(
    function: fc_user_function,
    commute: c_int,
    ctx: *mut c_void,
    op: *mut fc_op,
) -> c_int {
    guard(|| {
        if op.is_null() {
            return Err(Failure::arg("fc_op_create: op is NULL"));
        }
        let Some(f) = function else {
            return Err(Failure::arg("fc_op_create: function is NULL"));
        };
        let cb = Callback { f, ctx };
        let mut table = user_ops().lock().unwrap_or_else(|p| p.into_inner());
        let code = table.next;
        let Some(next) = code.checked_add(1) else {
            return Err(Failure::arg("fc_op_create: no op codes left"));
        };
        table.next = next;
        let user = UserOp::new(format!("c_op_{code}"), commute != 0, move |i, io, dt| cb.combine(i, io, dt));
        table.ops.insert(code, ReduceOp::User(user));
        // SAFETY: checked non-NULL; the caller's contract makes it writable.
        unsafe { *op = code };
        Ok(())
    })
}

/// Frees a user op made by `fc_op_create` and sets `*op` to `FC_OP_NULL`. Calls already started
/// with it keep it until they finish.
///
/// # Safety
/// `op` points to a readable and writable `fc_op`.
#[no_mangle]
pub unsafe extern "C" fn fc_op_free(op: *mut fc_op) -> c_int {
    guard(|| {
        if op.is_null() {
            return Err(Failure::arg("fc_op_free: op is NULL"));
        }
        // SAFETY: checked non-NULL; readable by the caller's contract.
        let code = unsafe { *op };
        let mut table = user_ops().lock().unwrap_or_else(|p| p.into_inner());
        if table.ops.remove(&code).is_none() {
            return Err(Failure::arg(format!("fc_op_free: {code} is not a user op (built in, or freed already)")));
        }
        // SAFETY: as above, writable.
        unsafe { *op = FC_OP_NULL };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code names the datatype the header says; codes past the last are refused.
    #[test]
    fn datatype_codes_name_their_types() {
        let want = [
            (FC_INT8, Datatype::I8),
            (FC_INT16, Datatype::I16),
            (FC_INT32, Datatype::I32),
            (FC_INT64, Datatype::I64),
            (FC_UINT8, Datatype::U8),
            (FC_UINT16, Datatype::U16),
            (FC_UINT32, Datatype::U32),
            (FC_UINT64, Datatype::U64),
            (FC_FLOAT16, Datatype::F16),
            (FC_BFLOAT16, Datatype::BF16),
            (FC_FLOAT, Datatype::F32),
            (FC_DOUBLE, Datatype::F64),
            (FC_FLOAT_INT, Datatype::F32I32),
            (FC_DOUBLE_INT, Datatype::F64I32),
            (FC_2INT, Datatype::I32I32),
            (FC_LONG_INT, Datatype::I64I64),
            (FC_BYTE, Datatype::U8),
            (FC_C_FLOAT_COMPLEX, Datatype::C64),
            (FC_C_DOUBLE_COMPLEX, Datatype::C128),
        ];
        for (code, dt) in want {
            assert_eq!(datatype(code).unwrap(), dt, "code {code}");
        }
        for code in [-1, FC_C_DOUBLE_COMPLEX + 1, i32::MAX] {
            assert!(datatype(code).is_err(), "code {code}");
        }
    }
}
