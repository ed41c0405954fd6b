//! libfabric backend: `FI_EP_RDM` endpoints of a provider chosen by name, notified one-sided writes
//! (`fi_writedata`) and tagged control messages, over bindings `build.rs` generates from the system headers.
//!
//! Compiled only with cfg `fabcoll_ofi` (set by `build.rs` when libfabric >= 1.17, libclang and a C compiler
//! are found); otherwise `crate::open` returns `Error::Unavailable` naming the missing system package.
//!
//! Provider differences hidden here: the `mr_mode` bits (`FI_MR_LOCAL`: descriptors passed for every local
//! buffer; `FI_MR_VIRT_ADDR`: remote addresses are virtual addresses, else offsets; `FI_MR_PROV_KEY`: the
//! provider's key is used, else unique requested keys; `FI_MR_ENDPOINT`: MRs bound to the endpoint;
//! `FI_MR_ALLOCATED`: satisfied because we only register allocated memory), `FI_CONTEXT`/`FI_CONTEXT2`
//! (every operation carries a boxed `fi_context2`), and manual progress (driven by polling the CQ).

mod backend;
mod endpoint;
mod error;
mod raw;
mod shm_leftovers;
mod shm_locks;
mod sys;

pub use backend::{open, provider_opened, OfiBackend};
pub use endpoint::{OfiConfig, OfiEndpoint, OfiEvent, OfiMr, OpId, RemoteRegion};
pub use error::OfiError;
pub use raw::ProviderAttrs;

/// `FI_VERSION(1, 17)`: the oldest libfabric API fabcoll asks for.
const FI_VERSION_1_17: u32 = (1 << 16) | 17;
/// `FI_KEY_NOTAVAIL` (`(uint64_t)-1`, a macro bindgen cannot evaluate).
const FI_KEY_NOTAVAIL: u64 = u64::MAX;

#[cfg(test)]
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
    }
}
