//! libfabric backend: `FI_EP_RDM` endpoints of a provider chosen by name, notified one-sided writes
//! (`fi_writedata`) and tagged control messages, over bindings `build.rs` generates from the system headers.
//!
//! Compiled only with cfg `fabcoll_ofi` (set by `build.rs` when libfabric >= 1.17, libclang and a C compiler
//! are found); otherwise [`available`] returns an error naming the missing system package.
//!
//! Provider differences hidden here: the `mr_mode` bits (`FI_MR_LOCAL`: descriptors passed for every local
//! buffer; `FI_MR_VIRT_ADDR`: remote addresses are virtual addresses, else offsets; `FI_MR_PROV_KEY`: the
//! provider's key is used, else unique requested keys; `FI_MR_ENDPOINT`: MRs bound to the endpoint;
//! `FI_MR_ALLOCATED`: satisfied because we only register allocated memory), `FI_CONTEXT`/`FI_CONTEXT2`
//! (every operation carries a boxed `fi_context2`), and manual progress (driven by polling the CQ).

#[cfg(fabcoll_ofi)]
mod endpoint;
#[cfg(fabcoll_ofi)]
mod error;
#[cfg(fabcoll_ofi)]
mod raw;
#[cfg(fabcoll_ofi)]
mod sys;

#[cfg(fabcoll_ofi)]
pub use endpoint::{OfiConfig, OfiEndpoint, OfiEvent, OfiMr, OpId, RemoteRegion};
#[cfg(fabcoll_ofi)]
pub use error::OfiError;
#[cfg(fabcoll_ofi)]
pub use raw::ProviderAttrs;

/// `FI_VERSION(1, 17)`: the oldest libfabric API fabcoll asks for.
#[cfg(fabcoll_ofi)]
const FI_VERSION_1_17: u32 = (1 << 16) | 17;
/// `FI_KEY_NOTAVAIL` (`(uint64_t)-1`, a macro bindgen cannot evaluate).
#[cfg(fabcoll_ofi)]
const FI_KEY_NOTAVAIL: u64 = u64::MAX;

/// `Ok` when the ofi backend is compiled in, else `Err` with what is missing (e.g. the `libfabric-dev` package).
pub fn available() -> Result<(), String> {
    #[cfg(fabcoll_ofi)]
    {
        Ok(())
    }
    #[cfg(not(fabcoll_ofi))]
    {
        Err(format!(
            "the ofi (libfabric) backend is not compiled into fabcoll-fabric: {}",
            option_env!("FABCOLL_OFI_MISSING").unwrap_or("unknown reason")
        ))
    }
}

#[cfg(all(test, fabcoll_ofi))]
mod tests {
    use super::*;

    #[test]
    fn rust_constants_match_the_c_macros() {
        // SAFETY: plain reads of `const` globals defined in the shim.
        unsafe {
            assert_eq!(FI_VERSION_1_17, sys::FABCOLL_FI_VERSION_1_17);
            assert_eq!(FI_KEY_NOTAVAIL, sys::FABCOLL_FI_KEY_NOTAVAIL);
            assert_eq!(u64::MAX, sys::FABCOLL_FI_ADDR_UNSPEC);
        }
        assert!(available().is_ok());
    }
}

#[cfg(all(test, not(fabcoll_ofi)))]
mod tests {
    #[test]
    fn missing_backend_is_an_error_naming_the_cause() {
        let e = super::available().unwrap_err();
        assert!(e.contains("not compiled") && e.len() > 60, "{e}");
    }
}
