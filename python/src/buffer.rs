//! Python buffers (numpy arrays, bytearray, memoryview, anything with the buffer protocol) as
//! typed regions, checked first: a non-contiguous, read-only (where written), misaligned or
//! unknown-format buffer is an `Error`, never undefined behaviour. The datatype comes from the
//! buffer's struct format (`'f'` → f32, `'e'` → f16, …) or from an explicit name that
//! reinterprets its bytes (`dtype="bfloat16"`, which no buffer format spells).
//!
//! The buffer C API is in the stable ABI only from Python 3.11; the extension targets 3.9
//! (`abi3-py39`), so the two functions are declared here. Both, and `Py_buffer`'s layout, are
//! unchanged since Python 3.3.

use std::ffi::{c_char, c_int, c_void, CStr};

use fabcoll::{Datatype, ReduceOp};
use pyo3::ffi;
use pyo3::prelude::*;

use crate::error::fail;
use crate::tensor::Tensor;

/// CPython's `Py_buffer`.
#[repr(C)]
struct RawView {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut RawView, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut RawView);
}

/// `PyBUF_STRIDES | PyBUF_FORMAT`: shape, strides and format, contiguous or not (checked here).
const PYBUF_STRIDES_FORMAT: c_int = 0x18 | 0x4;

/// The datatypes a Python caller names, as numpy and torch spell them.
pub const NAMES: [(&str, Datatype); 14] = [
    ("int8", Datatype::I8),
    ("int16", Datatype::I16),
    ("int32", Datatype::I32),
    ("int64", Datatype::I64),
    ("uint8", Datatype::U8),
    ("uint16", Datatype::U16),
    ("uint32", Datatype::U32),
    ("uint64", Datatype::U64),
    ("float16", Datatype::F16),
    ("bfloat16", Datatype::BF16),
    ("float32", Datatype::F32),
    ("float64", Datatype::F64),
    ("complex64", Datatype::C64),
    ("complex128", Datatype::C128),
];

/// The datatype named `name` (`"float32"`, …).
pub fn datatype_named(name: &str) -> PyResult<Datatype> {
    NAMES.iter().find(|(n, _)| *n == name).map(|&(_, d)| d).ok_or_else(|| {
        let known: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
        fail(format!("unknown dtype {name:?} (known: {})", known.join(", ")))
    })
}

/// The name of a datatype, as [`datatype_named`] reads it.
pub fn datatype_name(dt: Datatype) -> &'static str {
    NAMES.iter().find(|(_, d)| *d == dt).map_or("?", |(n, _)| n)
}

/// What a buffer's values are beyond the datatype they move as: bools move as bytes and reduce by
/// logical and bitwise ops, min and max.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    Plain,
    Bool,
}

impl Values {
    /// Refuses a reduction these values have no meaning for.
    pub fn check_op(self, op: &ReduceOp, what: &str) -> PyResult<()> {
        use ReduceOp as R;
        match (self, op) {
            (Values::Plain, _) => Ok(()),
            (Values::Bool, R::Land | R::Lor | R::Lxor | R::Band | R::Bor | R::Bxor | R::Min | R::Max) => Ok(()),
            (Values::Bool, _) => Err(fail(format!(
                "{what} holds bools, which reduce by land, lor, lxor, band, bor, bxor, min or max only"
            ))),
        }
    }
}

/// The datatype of a struct-module format with this item size, and what its values are; `None`
/// for formats fabcoll has no datatype for (structs, pointers, big-endian).
fn datatype_of_format(format: &str, itemsize: usize) -> Option<(Datatype, Values)> {
    let code = match format.as_bytes() {
        [b'Z', c] | [b'@' | b'=' | b'<', b'Z', c] => {
            let dt = match (c, itemsize) {
                (b'f', 8) => Datatype::C64,
                (b'd', 16) => Datatype::C128,
                _ => return None,
            };
            return cfg!(target_endian = "little").then_some((dt, Values::Plain));
        }
        [b'?'] | [b'@' | b'=' | b'<', b'?'] if itemsize == 1 => return Some((Datatype::U8, Values::Bool)),
        [c] | [b'@' | b'=' | b'<', c] => *c,
        _ => return None,
    };
    let dt = match (code, itemsize) {
        (b'b' | b'h' | b'i' | b'l' | b'q' | b'n', 1) => Datatype::I8,
        (b'b' | b'h' | b'i' | b'l' | b'q' | b'n', 2) => Datatype::I16,
        (b'b' | b'h' | b'i' | b'l' | b'q' | b'n', 4) => Datatype::I32,
        (b'b' | b'h' | b'i' | b'l' | b'q' | b'n', 8) => Datatype::I64,
        (b'B' | b'H' | b'I' | b'L' | b'Q' | b'N', 1) => Datatype::U8,
        (b'B' | b'H' | b'I' | b'L' | b'Q' | b'N', 2) => Datatype::U16,
        (b'B' | b'H' | b'I' | b'L' | b'Q' | b'N', 4) => Datatype::U32,
        (b'B' | b'H' | b'I' | b'L' | b'Q' | b'N', 8) => Datatype::U64,
        (b'e', 2) => Datatype::F16,
        (b'f', 4) => Datatype::F32,
        (b'd', 8) => Datatype::F64,
        _ => return None,
    };
    // Little-endian machines only: '<' is the native order there, '>' / '!' were rejected above.
    (cfg!(target_endian = "little") || code == b'@').then_some((dt, Values::Plain))
}

/// A buffer exported by a Python object, held until this value drops (the exporter keeps the
/// memory where it is and, for bytearray, refuses to resize meanwhile).
pub struct Buffer {
    view: Box<RawView>,
    what: &'static str,
}

// SAFETY: the view is only read, and released in `Drop` with the interpreter attached; the memory
// it describes belongs to the exporter, which keeps it alive until the release.
unsafe impl Send for Buffer {}
// SAFETY: as above; nothing mutates the view after `Buffer::get`.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Exports `obj`'s buffer and checks it is C-contiguous (and writable when `write`). `what`
    /// names the argument in errors.
    pub fn get(obj: &Bound<'_, PyAny>, what: &'static str, write: bool) -> PyResult<Buffer> {
        let mut view = Box::new(RawView {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        });
        // SAFETY: `obj` is a live object (the GIL is held through `Bound`) and `view` points to
        // writable memory of `Py_buffer`'s layout.
        let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *view, PYBUF_STRIDES_FORMAT) };
        if rc != 0 {
            let cause = PyErr::take(obj.py()).map(|e| e.to_string()).unwrap_or_default();
            let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            return Err(fail(format!("{what}: a {ty} is not a contiguous buffer ({cause})")));
        }
        let b = Buffer { view, what };
        if !b.is_c_contiguous() {
            return Err(fail(format!(
                "{what} is not contiguous (pass a contiguous copy, e.g. numpy.ascontiguousarray)"
            )));
        }
        if write && b.view.readonly != 0 {
            return Err(fail(format!("{what} is read-only, and this call writes it")));
        }
        Ok(b)
    }

    /// C order without gaps (PEP 3118: no strides means C-contiguous).
    fn is_c_contiguous(&self) -> bool {
        let v = &*self.view;
        if !v.suboffsets.is_null() {
            return false;
        }
        if v.strides.is_null() {
            return true;
        }
        let mut want = v.itemsize;
        for d in (0..v.ndim as usize).rev() {
            // SAFETY: with PyBUF_STRIDES the exporter fills `ndim` shape and stride entries.
            let (n, s) = unsafe { (*v.shape.add(d), *v.strides.add(d)) };
            if n == 0 {
                return true;
            }
            if n != 1 && s != want {
                return false;
            }
            want *= n;
        }
        true
    }

    /// The datatype its format says, if fabcoll has one, and what its values are.
    fn format_datatype(&self) -> Option<(Datatype, Values)> {
        let v = &*self.view;
        let format = if v.format.is_null() {
            "B"
        } else {
            // SAFETY: the exporter's format is a NUL-terminated string that lives as long as the view.
            unsafe { CStr::from_ptr(v.format) }.to_str().unwrap_or("?")
        };
        datatype_of_format(format, v.itemsize as usize)
    }

    /// The format string, for error messages.
    fn format(&self) -> String {
        let v = &*self.view;
        if v.format.is_null() {
            return "B".into();
        }
        // SAFETY: as in `format_datatype`.
        unsafe { CStr::from_ptr(v.format) }.to_string_lossy().into_owned()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the view was filled by a successful `PyObject_GetBuffer` and is released once,
        // with the interpreter attached.
        Python::attach(|_| unsafe { PyBuffer_Release(&mut *self.view) });
    }
}

/// The region of `bytes` bytes at `addr` as elements of `dt`: its length must be a whole number
/// of elements and its address aligned for them.
fn region(addr: usize, bytes: usize, dt: Datatype, what: &'static str) -> PyResult<Region> {
    let es = dt.size();
    if !bytes.is_multiple_of(es) {
        return Err(fail(format!("{what}: {bytes} bytes are not a whole number of {} elements", datatype_name(dt))));
    }
    if bytes > 0 && !addr.is_multiple_of(dt.align()) {
        return Err(fail(format!("{what} is not aligned for {}", datatype_name(dt))));
    }
    Ok(Region { addr, bytes, what })
}

/// A call's buffer as the binding holds it until the call has finished: a buffer-protocol
/// export, or a torch tensor read directly (`fabcoll.torch`'s calls, see [`Tensor`]).
pub enum Source {
    Export(Buffer),
    Tensor(Tensor),
}

impl Source {
    /// `obj` as a buffer export, or as a torch tensor when `tensors` (see [`Buffer::get`] and
    /// [`Tensor::get`]).
    pub fn get(obj: &Bound<'_, PyAny>, what: &'static str, write: bool, tensors: bool) -> PyResult<Source> {
        match tensors {
            true => Ok(Source::Tensor(Tensor::get(obj, what)?)),
            false => Ok(Source::Export(Buffer::get(obj, what, write)?)),
        }
    }

    /// The datatype its format or its dtype names, and what its values are.
    pub fn datatype(&self) -> PyResult<(Datatype, Values)> {
        match self {
            Source::Tensor(t) => Ok((t.dt, Values::Plain)),
            Source::Export(b) => b.format_datatype().ok_or_else(|| {
                fail(format!(
                    "{} has buffer format {:?}, which fabcoll has no datatype for (pass dtype=... to reinterpret its bytes)",
                    b.what,
                    b.format()
                ))
            }),
        }
    }

    /// The region it covers, as elements of `dt`.
    pub fn region(&self, dt: Datatype) -> PyResult<Region> {
        match self {
            Source::Tensor(t) => region(t.addr, t.bytes, dt, t.what),
            Source::Export(b) => region(b.view.buf as usize, b.view.len as usize, dt, b.what),
        }
    }

    /// What the argument is called in errors.
    pub fn what(&self) -> &'static str {
        match self {
            Source::Tensor(t) => t.what,
            Source::Export(b) => b.what,
        }
    }
}

/// Where a buffer's bytes are: an address (not a pointer, so a call's arguments cross to the
/// thread that waits without the GIL) and a length.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    pub addr: usize,
    pub bytes: usize,
    pub what: &'static str,
}

impl Region {
    /// No buffer: the argument a rank does not use (gather's receive buffer off the root, …).
    pub const EMPTY: Region = Region { addr: 0, bytes: 0, what: "" };

    /// Fails when the two regions share a byte: in place is the call without an output buffer.
    pub fn disjoint(&self, other: &Region) -> PyResult<()> {
        let (a, b) = (self.addr, other.addr);
        if self.bytes > 0 && other.bytes > 0 && a < b + other.bytes && b < a + self.bytes {
            return Err(fail(format!(
                "{} and {} overlap (for an in-place call, pass one buffer)",
                self.what, other.what
            )));
        }
        Ok(())
    }
}
