//! Pinned buffers: memory registered once for the life of a handle, used by collectives without
//! going through the registration cache — [`Communicator::alloc`] (registered allocation; on shm it
//! is shared memory that peers write with a plain memcpy) and [`Communicator::register`] (a
//! caller's slice, registered while the guard lives).

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use fabcoll_collectives::datatype::Element;
use fabcoll_fabric::{Access, Mr};

use super::Communicator;
use crate::error::{Error, Result};
use crate::exec::Engine;

/// A registered allocation of `len` elements of `T`, zero-initialised.
pub struct Pinned<T: Element> {
    engine: Arc<Mutex<Engine>>,
    mr: Mr,
    len: usize,
    _t: PhantomData<T>,
}

/// A caller's slice registered for as long as the guard lives.
pub struct Registered<'a, T: Element> {
    engine: Arc<Mutex<Engine>>,
    mr: Mr,
    slice: &'a mut [T],
}

fn bytes_of<T: Element>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::InvalidArgument { coll: "alloc", msg: format!("{len} elements overflow") })
}

impl Communicator {
    /// A zeroed, registered buffer of `len` elements that collectives use without registration
    /// work (it bypasses the registration cache).
    pub fn alloc<T: Element>(&self, len: usize) -> Result<Pinned<T>> {
        let bytes = bytes_of::<T>(len)?;
        let mut eng = self.lock();
        let access = Access::REMOTE_WRITE | eng.core.read_access;
        let mr = eng.core.ep.alloc(bytes.max(1), access)?;
        if !(mr.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Error::Protocol("backend returned a misaligned allocation".into()));
        }
        eng.pin(mr.clone());
        Ok(Pinned { engine: self.engine.clone(), mr, len, _t: PhantomData })
    }

    /// Registers `slice` until the guard drops; collectives on it (through the guard) skip the
    /// registration cache.
    pub fn register<'a, T: Element>(&self, slice: &'a mut [T]) -> Result<Registered<'a, T>> {
        let bytes = std::mem::size_of_val(slice);
        let mut eng = self.lock();
        let ptr = slice.as_mut_ptr() as *mut u8;
        // SAFETY: the guard borrows the slice mutably for 'a and drops the registration (and
        // unpins it) before the borrow ends; peers only write (or read) it inside collectives that
        // borrow the guard, i.e. the slice.
        let access = Access::REMOTE_WRITE | eng.core.read_access;
        let mr = unsafe { eng.core.ep.register(ptr, bytes.max(1), access)? };
        if eng.core.cfg.huge_pages_after > 0 {
            eng.core.ep.hint_reused(&mr);
        }
        eng.pin(mr.clone());
        Ok(Registered { engine: self.engine.clone(), mr, slice })
    }
}

impl<T: Element> Deref for Pinned<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the allocation holds `len` elements (checked size, aligned, zero-initialised —
        // zero bytes are a valid value of every Element type); peers write it only during
        // collectives that borrow `self` mutably, so no write races this shared borrow.
        unsafe { std::slice::from_raw_parts(self.mr.as_ptr() as *const T, self.len) }
    }
}

impl<T: Element> DerefMut for Pinned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.mr.as_ptr() as *mut T, self.len) }
    }
}

impl<T: Element> Drop for Pinned<T> {
    fn drop(&mut self) {
        self.engine.lock().unwrap_or_else(|p| p.into_inner()).unpin(&self.mr);
    }
}

impl<T: Element> Deref for Registered<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

impl<T: Element> DerefMut for Registered<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.slice
    }
}

impl<T: Element> Drop for Registered<'_, T> {
    fn drop(&mut self) {
        self.engine.lock().unwrap_or_else(|p| p.into_inner()).unpin(&self.mr);
    }
}
