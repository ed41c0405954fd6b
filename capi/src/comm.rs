//! Communicators: `fc_init` joins the job the environment describes (fabrun, torchrun, Slurm,
//! `FABCOLL_*`), `fc_init_store` the one a store address names (settings from code through
//! `fc_set_setting`); then rank, size, split, dup and free, as in MPI. A `fc_comm` owns a shared
//! handle to its [`Communicator`], so requests still in flight keep it alive after
//! `fc_comm_free`.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;

use fabcoll::settings::{self, Settings};
use fabcoll::Communicator;

use crate::error::{guard, Failure, Result};

/// A communicator (opaque).
#[allow(non_camel_case_types)]
pub struct fc_comm {
    pub(crate) comm: Arc<Communicator>,
}

/// The `color` of `fc_comm_split` that takes part but gets no communicator.
pub const FC_UNDEFINED: c_int = -1;

/// The communicator behind a C handle.
///
/// # Safety
/// `comm` is NULL or a live `fc_comm` from this library.
pub(crate) unsafe fn comm_ref<'a>(comm: *const fc_comm) -> Result<&'a Arc<Communicator>> {
    // SAFETY: NULL or live, by the caller's contract.
    match unsafe { comm.as_ref() } {
        Some(c) => Ok(&c.comm),
        None => Err(Failure::arg("comm is NULL")),
    }
}

/// Checks an out-pointer and clears what it points to.
///
/// # Safety
/// `out` is NULL or writable.
pub(crate) unsafe fn clear_out<T>(out: *mut *mut T, what: &str) -> Result<()> {
    if out.is_null() {
        return Err(Failure::arg(format!("{what} is NULL")));
    }
    // SAFETY: checked non-NULL, writable by the caller's contract.
    unsafe { *out = std::ptr::null_mut() };
    Ok(())
}

/// Writes an integer result.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn put(out: *mut c_int, value: u32, what: &str) -> Result<()> {
    if out.is_null() {
        return Err(Failure::arg(format!("{what} is NULL")));
    }
    let v = c_int::try_from(value).map_err(|_| Failure::arg(format!("{what}: {value} does not fit an int")))?;
    // SAFETY: checked non-NULL, writable by the caller's contract.
    unsafe { *out = v };
    Ok(())
}

fn boxed(comm: Communicator) -> *mut fc_comm {
    Box::into_raw(Box::new(fc_comm { comm: Arc::new(comm) }))
}

/// Joins the job the environment describes (`fabrun`, torchrun, Slurm or `FABCOLL_*`): every
/// rank calls it; `*comm` gets the communicator of all ranks (NULL on failure).
///
/// # Safety
/// `comm` points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn fc_init(comm: *mut *mut fc_comm) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { clear_out(comm, "comm")? };
        let c = Communicator::from_env()?;
        // SAFETY: checked by `clear_out`.
        unsafe { *comm = boxed(c) };
        Ok(())
    })
}

/// A C string argument.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str> {
    if s.is_null() {
        return Err(Failure::arg(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_str().map_err(|_| Failure::arg(format!("{what} is not UTF-8")))
}

/// Sets one of fabcoll's settings (`name` as in `docs/settings.md`, e.g. `FABCOLL_FABRIC`) for
/// this process, over the environment's; an empty `value` unsets it. Set them before `fc_init`.
///
/// # Safety
/// `name` and `value` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn fc_set_setting(name: *const c_char, value: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let (name, value) = unsafe { (text(name, "name")?, text(value, "value")?) };
        let mut s = Settings::installed();
        s.set(name, value).map_err(|e| Failure::arg(e.to_string()))?;
        s.install();
        Ok(())
    })
}

/// Joins a job through the store at `store` (`"tcp://host:port"`, `"file:///shared/dir"`, as
/// `FABCOLL_STORE`) as rank `rank` of `size`, instead of the launcher's environment; the other
/// settings still come from the environment and `fc_set_setting`.
///
/// # Safety
/// `store` is a NUL-terminated string; `comm` points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn fc_init_store(
    store: *const c_char,
    rank: c_int,
    size: c_int,
    comm: *mut *mut fc_comm,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { clear_out(comm, "comm")? };
        // SAFETY: the caller's contract.
        let store = unsafe { text(store, "store")? };
        if rank < 0 || size <= 0 || rank >= size {
            return Err(Failure::arg(format!("fc_init_store: rank {rank} of size {size}")));
        }
        let mut s = Settings::installed();
        for (name, value) in [
            (settings::FABCOLL_STORE.name, store.to_owned()),
            (settings::FABCOLL_RANK.name, rank.to_string()),
            (settings::FABCOLL_SIZE.name, size.to_string()),
        ] {
            s.set(name, &value).map_err(|e| Failure::arg(e.to_string()))?;
        }
        s.install();
        let c = Communicator::from_env()?;
        // SAFETY: checked by `clear_out`.
        unsafe { *comm = boxed(c) };
        Ok(())
    })
}

/// This rank's number in `comm` (0 … size − 1).
///
/// # Safety
/// `comm` is a live communicator; `rank` points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn fc_comm_rank(comm: *const fc_comm, rank: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { put(rank, comm_ref(comm)?.rank(), "rank") })
}

/// The number of ranks of `comm`.
///
/// # Safety
/// `comm` is a live communicator; `size` points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn fc_comm_size(comm: *const fc_comm, size: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { put(size, comm_ref(comm)?.size(), "size") })
}

/// MPI_Comm_split (collective): ranks with the same `color` (≥ 0) form a communicator, ordered by
/// (`key`, rank in `comm`); `FC_UNDEFINED` takes part and gets NULL in `*newcomm`.
///
/// # Safety
/// `comm` is a live communicator; `newcomm` points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn fc_comm_split(
    comm: *const fc_comm,
    color: c_int,
    key: c_int,
    newcomm: *mut *mut fc_comm,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(comm)? };
        // SAFETY: the caller's contract.
        unsafe { clear_out(newcomm, "newcomm")? };
        let color = match color {
            FC_UNDEFINED => None,
            c if c >= 0 => Some(c as u32),
            c => return Err(Failure::arg(format!("fc_comm_split: color {c} is negative (FC_UNDEFINED is -1)"))),
        };
        if let Some(n) = c.split(color, key)? {
            // SAFETY: checked by `clear_out`.
            unsafe { *newcomm = boxed(n) };
        }
        Ok(())
    })
}

/// A new communicator with the same ranks and a context of its own (collective).
///
/// # Safety
/// `comm` is a live communicator; `newcomm` points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn fc_comm_dup(comm: *const fc_comm, newcomm: *mut *mut fc_comm) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(comm)? };
        // SAFETY: the caller's contract.
        unsafe { clear_out(newcomm, "newcomm")? };
        let n = c.dup()?;
        // SAFETY: checked by `clear_out`.
        unsafe { *newcomm = boxed(n) };
        Ok(())
    })
}

/// Frees `*comm` and sets it to NULL (a NULL `*comm` is left alone). Requests started on it stay
/// valid until they are freed. Freeing the communicator of `fc_init` ends this rank's part in the
/// job once its dups, splits and requests are freed too.
///
/// # Safety
/// `comm` points to NULL or to a live communicator, not used after this call.
#[no_mangle]
pub unsafe extern "C" fn fc_comm_free(comm: *mut *mut fc_comm) -> c_int {
    guard(|| {
        if comm.is_null() {
            return Err(Failure::arg("fc_comm_free: comm is NULL"));
        }
        // SAFETY: checked non-NULL, readable and writable by the caller's contract.
        let c = unsafe { std::mem::replace(&mut *comm, std::ptr::null_mut()) };
        if !c.is_null() {
            // SAFETY: made by `Box::into_raw` in this module and not freed before (contract).
            drop(unsafe { Box::from_raw(c) });
        }
        Ok(())
    })
}
