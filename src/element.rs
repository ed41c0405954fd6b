//! [`with_element!`](crate::with_element): from a runtime datatype to the element type of the typed API (the
//! C ABI and the Python package dispatch on it).

/// Runs `$body` with `$T` bound to the element type of the runtime datatype `$dt` (a
/// [`Datatype`](crate::Datatype)): how a binding that receives a type code calls the typed API.
///
/// ```
/// use fabcoll::{with_element, Datatype};
/// let size = with_element!(Datatype::F64I32, T => std::mem::size_of::<T>());
/// assert_eq!(size, Datatype::F64I32.size());
/// ```
#[macro_export]
macro_rules! with_element {
    ($dt:expr, $T:ident => $body:expr) => {{
        use $crate::half::{bf16, f16};
        use $crate::{Complex, Datatype, ValueIndex};
        match $dt {
            Datatype::I8 => {
                type $T = i8;
                $body
            }
            Datatype::I16 => {
                type $T = i16;
                $body
            }
            Datatype::I32 => {
                type $T = i32;
                $body
            }
            Datatype::I64 => {
                type $T = i64;
                $body
            }
            Datatype::U8 => {
                type $T = u8;
                $body
            }
            Datatype::U16 => {
                type $T = u16;
                $body
            }
            Datatype::U32 => {
                type $T = u32;
                $body
            }
            Datatype::U64 => {
                type $T = u64;
                $body
            }
            Datatype::F16 => {
                type $T = f16;
                $body
            }
            Datatype::BF16 => {
                type $T = bf16;
                $body
            }
            Datatype::F32 => {
                type $T = f32;
                $body
            }
            Datatype::F64 => {
                type $T = f64;
                $body
            }
            Datatype::F32I32 => {
                type $T = ValueIndex<f32, i32>;
                $body
            }
            Datatype::F64I32 => {
                type $T = ValueIndex<f64, i32>;
                $body
            }
            Datatype::I32I32 => {
                type $T = ValueIndex<i32, i32>;
                $body
            }
            Datatype::I64I64 => {
                type $T = ValueIndex<i64, i64>;
                $body
            }
            Datatype::C64 => {
                type $T = Complex<f32>;
                $body
            }
            Datatype::C128 => {
                type $T = Complex<f64>;
                $body
            }
        }
    }};
}
