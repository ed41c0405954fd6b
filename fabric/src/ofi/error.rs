//! The one place where libfabric return codes become typed errors (like mio's `syscall!`).
//! Every `fi_*` call's result goes through [`check`]; completion errors go through [`OfiError::completion`].

use std::borrow::Cow;
use std::ffi::CStr;
use std::fmt;

use super::sys;

/// An error from libfabric, or from the ofi backend's use of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OfiError {
    /// A `fi_*` call returned `-code`; `text` is `fi_strerror(code)`.
    Call {
        /// The libfabric call that failed, e.g. `"fi_mr_reg"`.
        op: &'static str,
        /// The positive libfabric error number (`FI_E*`).
        code: i32,
        /// `fi_strerror(code)`.
        text: Cow<'static, str>,
    },
    /// An operation completed with an error (read with `fi_cq_readerr`).
    Completion {
        /// What the failed operation was (`"write"`, `"send"`, `"recv"`).
        op: &'static str,
        /// The positive libfabric error number of the completion.
        code: i32,
        /// The provider's own error number.
        prov_errno: i32,
        /// `fi_strerror(code)` and the provider's `fi_cq_strerror` text.
        text: String,
    },
    /// The provider cannot do what fabcoll needs.
    Unsupported(String),
    /// A caller's argument is invalid (out of bounds, unknown peer, too long, …).
    Invalid(String),
    /// Queues are full: poll completions and retry; nothing was done.
    Busy(&'static str),
    /// Waited longer than allowed (peer silent or dead).
    Timeout(String),
    /// A peer's process ended without closing its endpoint (seen by the exit watch of `shm`).
    Exited(String),
    /// An operation towards rank `peer` failed (unreachable, dead, connection lost).
    Peer {
        /// The peer's rank.
        peer: usize,
        /// What failed.
        source: Box<OfiError>,
    },
}

impl OfiError {
    /// The `FI_E*` number of a `Call` or `Completion` error.
    pub fn code(&self) -> Option<i32> {
        match self {
            OfiError::Call { code, .. } | OfiError::Completion { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True for `-FI_EAGAIN` (resources busy: drive progress and retry).
    pub fn is_again(&self) -> bool {
        matches!(self, OfiError::Call { code, .. } if *code as u64 == sys::FI_EAGAIN)
    }

    pub(crate) fn completion(op: &'static str, code: i32, prov_errno: i32, prov_text: &str) -> Self {
        let code = code.abs();
        let mut text = strerror(code);
        if !prov_text.is_empty() {
            text = format!("{text} (provider: {prov_text})");
        }
        OfiError::Completion { op, code, prov_errno, text }
    }
}

impl fmt::Display for OfiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OfiError::Call { op, code, text } => write!(f, "{op} failed: {text} (-{code})"),
            OfiError::Completion { op, code, prov_errno, text } => {
                write!(f, "{op} completed with error: {text} (-{code}, provider errno {prov_errno})")
            }
            OfiError::Unsupported(m) => write!(f, "libfabric: {m}"),
            OfiError::Invalid(m) => write!(f, "invalid argument: {m}"),
            OfiError::Busy(m) => write!(f, "resources busy ({m}); poll completions and retry"),
            OfiError::Timeout(m) => write!(f, "libfabric: timed out: {m}"),
            OfiError::Exited(m) => write!(f, "{m}"),
            OfiError::Peer { peer, source } => write!(f, "to rank {peer}: {source}"),
        }
    }
}

impl std::error::Error for OfiError {}

/// `fi_strerror(FI_EAGAIN)`: libfabric's text for its codes below 256 is the C library's.
const EAGAIN_TEXT: &str = "Resource temporarily unavailable";

/// `fi_strerror(code)` as an owned string.
pub(crate) fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror accepts any int and returns a pointer to a static NUL-terminated string.
    let p = unsafe { sys::fi_strerror(code) };
    if p.is_null() {
        return format!("libfabric error {code}");
    }
    // SAFETY: non-null, NUL-terminated, static lifetime per fi_errno(3).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Turns a libfabric return value (`int` or `ssize_t`: `>= 0` success, `-FI_E*` failure) into a `Result`.
pub(crate) fn check<T: Into<i64>>(ret: T, op: &'static str) -> Result<u64, OfiError> {
    let ret: i64 = ret.into();
    if ret >= 0 {
        Ok(ret as u64)
    } else {
        let code = i32::try_from(-ret).unwrap_or(i32::MAX);
        // `-FI_EAGAIN` is no failure but a full queue, met on every retry until it drains (at p = 4
        // on two cores, up to 1.5 per collective call on a rank): its text is fixed, so a retry costs
        // no `fi_strerror` (a gettext lookup) and no allocation.
        let text = if code as u64 == sys::FI_EAGAIN { Cow::Borrowed(EAGAIN_TEXT) } else { Cow::Owned(strerror(code)) };
        Err(OfiError::Call { op, code, text })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_maps_negative_codes_with_strerror_text() {
        assert_eq!(check(0i32, "fi_x"), Ok(0));
        assert_eq!(check(5isize as i64, "fi_x"), Ok(5));
        let e = check(-(sys::FI_EAGAIN as i64), "fi_writedata").unwrap_err();
        assert!(e.is_again());
        assert_eq!(e.code(), Some(sys::FI_EAGAIN as i32));
        let s = e.to_string();
        assert!(s.contains("fi_writedata") && s.contains("-11") && s.contains(EAGAIN_TEXT), "{s}");
        assert_eq!(EAGAIN_TEXT, strerror(sys::FI_EAGAIN as i32), "the fixed text is libfabric's own");
        let k = check(-(sys::FI_ENOKEY as i64), "fi_mr_reg").unwrap_err();
        assert!(k.to_string().to_lowercase().contains("key"), "{k}");
    }
}
