//! C buffers as typed slices, checked first: NULL with a nonzero count, a pointer not aligned for
//! the datatype, a byte length past `isize::MAX`, `FC_IN_PLACE` where it has no meaning and a send
//! buffer that overlaps the receive buffer are errors, not undefined behaviour. Count arrays of
//! the v-variants, and the extent (in elements) of the buffer they describe.

use std::ffi::c_void;

use fabcoll::Element;

use crate::error::{Failure, Result};

/// `FC_IN_PLACE`: `(void *) -1`, as the send buffer of a call with an in-place form.
pub(crate) fn is_in_place(p: *const c_void) -> bool {
    p as usize == usize::MAX
}

/// A C buffer: where and how many bytes.
#[derive(Clone, Copy)]
pub(crate) struct Region {
    ptr: *mut c_void,
    bytes: usize,
    what: &'static str,
}

impl Region {
    /// `count` elements of `T` at `ptr`, checked (see the module doc); `what` names the
    /// argument in errors. A zero count accepts any pointer, NULL included.
    pub fn new<T: Element>(ptr: *const c_void, count: usize, what: &'static str) -> Result<Region> {
        let Some(bytes) = count.checked_mul(std::mem::size_of::<T>()).filter(|&b| b <= isize::MAX as usize) else {
            return Err(Failure::arg(format!("{what}: {count} elements overflow the address space")));
        };
        if count == 0 {
            return Ok(Region { ptr: std::ptr::null_mut(), bytes: 0, what });
        }
        if is_in_place(ptr) {
            return Err(Failure::arg(format!("{what}: FC_IN_PLACE is not allowed here")));
        }
        if ptr.is_null() {
            return Err(Failure::arg(format!("{what} is NULL with {count} elements")));
        }
        if !(ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Failure::arg(format!("{what} is not aligned for its datatype")));
        }
        Ok(Region { ptr: ptr.cast_mut(), bytes, what })
    }

    /// Fails when the two regions share a byte (MPI forbids aliased buffers: in place is
    /// `FC_IN_PLACE`).
    pub fn disjoint(&self, other: &Region) -> Result<()> {
        let (a, b) = (self.ptr as usize, other.ptr as usize);
        if self.bytes > 0 && other.bytes > 0 && a < b.saturating_add(other.bytes) && b < a.saturating_add(self.bytes) {
            return Err(Failure::arg(format!(
                "{} and {} overlap (use FC_IN_PLACE for an in-place call)",
                self.what, other.what
            )));
        }
        Ok(())
    }

    /// The region as a shared slice.
    ///
    /// # Safety
    /// The region was made for `T` and holds initialised elements that stay valid, and unwritten
    /// by others than fabcoll, for `'a`.
    pub unsafe fn input<'a, T: Element>(&self) -> &'a [T] {
        if self.bytes == 0 {
            return &[];
        }
        // SAFETY: non-NULL, aligned, `bytes / size_of::<T>()` elements within one allocation
        // (checked in `new` and by the caller's contract).
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<T>(), self.bytes / std::mem::size_of::<T>()) }
    }

    /// The region as an exclusive slice.
    ///
    /// # Safety
    /// As [`Region::input`], and nothing else reads or writes the region for `'a`.
    pub unsafe fn output<'a, T: Element>(&self) -> &'a mut [T] {
        if self.bytes == 0 {
            return &mut [];
        }
        // SAFETY: as in `input`, and exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<T>(), self.bytes / std::mem::size_of::<T>()) }
    }
}

/// `n` entries of a `size_t` array argument.
///
/// # Safety
/// `ptr` is NULL or points to `n` readable entries that stay valid for `'a`.
pub(crate) unsafe fn array<'a>(ptr: *const usize, n: usize, what: &str) -> Result<&'a [usize]> {
    if ptr.is_null() {
        return Err(Failure::arg(format!("{what} is NULL")));
    }
    if !(ptr as usize).is_multiple_of(std::mem::align_of::<usize>()) {
        return Err(Failure::arg(format!("{what} is not aligned")));
    }
    // SAFETY: non-NULL, aligned, `n` entries by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) })
}

/// [`array()`] where NULL means "none" (packed displacements).
///
/// # Safety
/// As [`array()`].
pub(crate) unsafe fn optional_array<'a>(ptr: *const usize, n: usize, what: &str) -> Result<Option<&'a [usize]>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    unsafe { array(ptr, n, what) }.map(Some)
}

/// Elements a buffer of blocks `counts` at `displs` (packed when `None`) spans.
pub(crate) fn extent(counts: &[usize], displs: Option<&[usize]>, what: &str) -> Result<usize> {
    let overflow = || Failure::arg(format!("{what}: displacements + counts overflow"));
    match displs {
        None => counts.iter().try_fold(0usize, |a, &c| a.checked_add(c)).ok_or_else(overflow),
        Some(d) => {
            let mut end = 0usize;
            for (c, d) in counts.iter().zip(d) {
                end = end.max(d.checked_add(*c).ok_or_else(overflow)?);
            }
            Ok(end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: Result<Region>) -> String {
        r.err().expect("an error").msg
    }

    #[test]
    fn bad_buffers_are_errors() {
        let x = [0.0f64; 4];
        let p = x.as_ptr().cast::<c_void>();
        assert!(err(Region::new::<f64>(std::ptr::null(), 3, "sendbuf")).contains("sendbuf is NULL"));
        assert!(Region::new::<f64>(std::ptr::null(), 0, "sendbuf").is_ok());
        let odd = p.cast::<u8>().wrapping_add(1).cast::<c_void>();
        assert!(err(Region::new::<f64>(odd, 1, "recvbuf")).contains("not aligned"));
        assert!(err(Region::new::<f64>(usize::MAX as *const c_void, 1, "recvbuf")).contains("FC_IN_PLACE"));
        assert!(err(Region::new::<f64>(p, usize::MAX / 4, "sendbuf")).contains("overflow"));
        let (a, b) = (
            Region::new::<f64>(p, 2, "sendbuf").unwrap(),
            Region::new::<f64>(p.wrapping_byte_add(8), 2, "recvbuf").unwrap(),
        );
        assert!(a.disjoint(&b).expect_err("overlap").msg.contains("overlap"));
        let c = Region::new::<f64>(p.wrapping_byte_add(16), 2, "recvbuf").unwrap();
        assert!(a.disjoint(&c).is_ok());
    }

    #[test]
    fn extents_of_packed_and_displaced_blocks() {
        assert_eq!(extent(&[1, 2, 3], None, "x").unwrap(), 6);
        assert_eq!(extent(&[1, 2, 3], Some(&[10, 0, 3]), "x").unwrap(), 11);
        assert!(extent(&[usize::MAX, 1], None, "x").is_err());
    }
}
