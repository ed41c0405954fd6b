//! Error codes: every function returns `FC_SUCCESS` or one of the `FC_ERR_*` codes, mapped from
//! [`fabcoll::Error`]; the message of the last failure on the calling thread is kept for
//! `fc_last_error_message`. `guard` runs a function body with panics caught, so no panic
//! crosses the C boundary.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const FC_SUCCESS: c_int = 0;
/// A bad argument: a NULL pointer, an unknown datatype or op, a buffer length, a root out of
/// range, an op that is not defined on the datatype, an algorithm restriction.
pub const FC_ERR_ARG: c_int = 1;
/// A collective did not finish in time; the message names the ranks still awaited.
pub const FC_ERR_TIMEOUT: c_int = 2;
/// A peer failed or left during a collective; the message names it.
pub const FC_ERR_PEER: c_int = 3;
/// Checked mode (`FABCOLL_CHECK=1`): the ranks called different collectives or arguments.
pub const FC_ERR_MISMATCH: c_int = 4;
/// The fabric (shared memory, tcp, libfabric) failed.
pub const FC_ERR_FABRIC: c_int = 5;
/// Joining the job failed (environment, store).
pub const FC_ERR_BOOTSTRAP: c_int = 6;
/// A peer violated the protocol, or a request that failed is asked again.
pub const FC_ERR_PROTOCOL: c_int = 7;
/// An earlier error left the communicator unusable.
pub const FC_ERR_BROKEN: c_int = 8;
/// A bug in fabcoll (a panic caught at the boundary); the message says where.
pub const FC_ERR_INTERNAL: c_int = 9;

/// A failure on the way to C: its code and its message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: c_int,
    pub msg: String,
}

impl Failure {
    /// A bad argument found by the C layer.
    pub fn arg(msg: impl Into<String>) -> Failure {
        Failure { code: FC_ERR_ARG, msg: msg.into() }
    }
}

impl From<fabcoll::Error> for Failure {
    fn from(e: fabcoll::Error) -> Failure {
        use fabcoll::Error as E;
        let code = match &e {
            E::InvalidArgument { .. } | E::Collectives(_) => FC_ERR_ARG,
            E::Fabric(_) => FC_ERR_FABRIC,
            E::Bootstrap(_) => FC_ERR_BOOTSTRAP,
            E::Timeout { .. } => FC_ERR_TIMEOUT,
            E::PeerLost { .. } => FC_ERR_PEER,
            E::Protocol(_) => FC_ERR_PROTOCOL,
            E::Mismatch(_) => FC_ERR_MISMATCH,
            E::Broken(_) => FC_ERR_BROKEN,
        };
        Failure { code, msg: e.to_string() }
    }
}

pub(crate) type Result<T, E = Failure> = std::result::Result<T, E>;

thread_local! {
    /// The message of the last failure on this thread (empty before any).
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn remember(msg: &str) {
    // A message with a NUL byte keeps what comes before it.
    let text = msg.split('\0').next().unwrap_or_default();
    let c = CString::new(text).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Runs `f`, turning its failure or panic into an error code and remembering its message.
pub(crate) fn guard(f: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => FC_SUCCESS,
        Ok(Err(e)) => {
            remember(&e.msg);
            e.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            remember(&format!("internal error (a panic in fabcoll): {what}"));
            FC_ERR_INTERNAL
        }
    }
}

/// A constant description of an error code (`"unknown error code"` for others). Never NULL.
#[no_mangle]
pub extern "C" fn fc_error_string(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        FC_SUCCESS => c"success",
        FC_ERR_ARG => c"invalid argument",
        FC_ERR_TIMEOUT => c"timed out waiting for a peer",
        FC_ERR_PEER => c"a peer failed or left",
        FC_ERR_MISMATCH => c"ranks called different collectives or arguments",
        FC_ERR_FABRIC => c"fabric error",
        FC_ERR_BOOTSTRAP => c"joining the job failed",
        FC_ERR_PROTOCOL => c"protocol error",
        FC_ERR_BROKEN => c"communicator broken by an earlier error",
        FC_ERR_INTERNAL => c"internal error",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

/// fabcoll's message for the last failed call on the calling thread (`""` before any). Valid
/// until the next failing call on this thread. Never NULL.
#[no_mangle]
pub extern "C" fn fc_last_error_message() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: `fc_last_error_message` never returns NULL and its string lives until the next failure.
        unsafe { CStr::from_ptr(fc_last_error_message()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_is_an_internal_error_with_its_message() {
        let code = guard(|| panic!("boom at the boundary"));
        assert_eq!(code, FC_ERR_INTERNAL);
        assert!(last().contains("boom at the boundary"), "{}", last());
    }

    #[test]
    fn a_failure_keeps_its_code_and_message_and_success_keeps_the_last_message() {
        assert_eq!(guard(|| Err(Failure::arg("count is odd"))), FC_ERR_ARG);
        assert_eq!(guard(|| Ok(())), FC_SUCCESS);
        assert_eq!(last(), "count is odd");
        let timeout = fabcoll::Error::Mismatch("rank 1 called bcast".into());
        assert_eq!(guard(|| Err(timeout.into())), FC_ERR_MISMATCH);
        assert_eq!(last(), "collective mismatch: rank 1 called bcast");
    }

    #[test]
    fn every_code_has_its_own_description() {
        let all: Vec<String> = (FC_SUCCESS..=FC_ERR_INTERNAL + 1)
            // SAFETY: `fc_error_string` returns a static C string.
            .map(|c| unsafe { CStr::from_ptr(fc_error_string(c)) }.to_string_lossy().into_owned())
            .collect();
        let mut distinct = all.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
        assert_eq!(all.last().map(String::as_str), Some("unknown error code"));
    }
}
