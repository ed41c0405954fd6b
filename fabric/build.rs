//! Decides, in one place, which fabric backends compile, and sets their cfg flags.
//!
//! `fabcoll_ofi` (libfabric), only with the cargo feature `ofi` (default on): needs libfabric >= 1.17
//! found by pkg-config (Debian: `libfabric-dev`), libclang for bindgen (Debian: `libclang-dev`) and a C
//! compiler for the shim that wraps libfabric's `static inline` calls. When any piece is missing the
//! crate still builds without the backend: a `cargo:warning` says what is missing. Without the
//! feature nothing is probed (pkg-config, bindgen and cc are not even built), and
//! `FABCOLL_DISABLE_OFI=1` at build time leaves the backend out of a default build the same way.
//! Either way `FABCOLL_OFI_MISSING` carries the reason for the run time error.

#[cfg(feature = "ofi")]
use std::env;
#[cfg(feature = "ofi")]
use std::path::PathBuf;

#[cfg(feature = "ofi")]
const LIBFABRIC_MIN: &str = "1.17";

fn main() {
    println!("cargo:rustc-check-cfg=cfg(fabcoll_ofi)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/ofi/shim.h");
    println!("cargo:rerun-if-changed=src/ofi/shim.c");
    println!("cargo:rerun-if-env-changed=FABCOLL_DISABLE_OFI");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");

    match probe_ofi() {
        Ok(()) => println!("cargo:rustc-cfg=fabcoll_ofi"),
        Err(missing) => {
            // Asked for (the feature is on) but not found: say so at build time.
            if cfg!(feature = "ofi") {
                println!("cargo:warning=fabcoll-fabric: the ofi (libfabric) backend is not compiled in: {missing}");
            }
            println!("cargo:rustc-env=FABCOLL_OFI_MISSING={missing}");
        }
    }
}

/// Without the `ofi` feature: nothing to probe.
#[cfg(not(feature = "ofi"))]
fn probe_ofi() -> Result<(), String> {
    Err("the cargo feature `ofi` is off; it is on by default, and `--features ofi` turns it on in fabcoll, \
         fabcoll-fabric and fabcoll-cli"
        .into())
}

/// Finds libfabric, generates the bindings and compiles the shim; `Err` says what is missing.
#[cfg(feature = "ofi")]
fn probe_ofi() -> Result<(), String> {
    if env::var_os("FABCOLL_DISABLE_OFI").is_some_and(|v| v != "0") {
        return Err("disabled by FABCOLL_DISABLE_OFI at build time".into());
    }
    let lib =
        pkg_config::Config::new().atleast_version(LIBFABRIC_MIN).cargo_metadata(false).probe("libfabric").map_err(
            |e| {
                let first = e.to_string().lines().next().unwrap_or_default().to_string();
                format!(
                    "libfabric >= {LIBFABRIC_MIN} not found by pkg-config (install `pkg-config` and the system package \
                 `libfabric-dev`, `libfabric-devel` on Fedora/RHEL): {first}"
                )
            },
        )?;
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);

    let includes: Vec<String> = lib.include_paths.iter().map(|p| format!("-I{}", p.display())).collect();
    let builder = bindgen::Builder::default()
        .header("src/ofi/shim.h")
        .clang_args(&includes)
        .allowlist_function("fi_getinfo|fi_freeinfo|fi_dupinfo|fi_fabric|fi_strerror|fi_version|fabcoll_.*")
        .allowlist_type("fi_.*|fid_.*|fid")
        .allowlist_var("FI_.*|FABCOLL_.*")
        .parse_callbacks(Box::new(FlagWidth))
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false);
    // bindgen (runtime feature) panics when it cannot load libclang: turn that into a message.
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate())).map_err(|p| {
            let why = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("libclang not found for bindgen (install the system package `libclang-dev`): {why}")
        })?;
    let bindings = generated.map_err(|e| format!("bindgen failed on the libfabric headers: {e}"))?;
    bindings
        .write_to_file(out.join("ofi_bindings.rs"))
        .map_err(|e| format!("cannot write the libfabric bindings: {e}"))?;

    let mut cc = cc::Build::new();
    cc.file("src/ofi/shim.c").warnings(true).cargo_metadata(true);
    for p in &lib.include_paths {
        cc.include(p);
    }
    cc.try_compile("fabcoll_ofi_shim")
        .map_err(|e| format!("cannot compile the libfabric shim (a C compiler such as `gcc` is needed): {e}"))?;

    for p in &lib.link_paths {
        println!("cargo:rustc-link-search=native={}", p.display());
    }
    for l in &lib.libs {
        println!("cargo:rustc-link-lib={l}");
    }
    Ok(())
}

/// libfabric's flag macros (`FI_RMA = 1ULL << 2`, `FI_MR_LOCAL = 1 << 2`, …) all land as `u64`, the type of the
/// `caps`/`flags`/`mr_mode` fields they are or'ed into; negative ones (none today) keep `i64`.
#[cfg(feature = "ofi")]
#[derive(Debug)]
struct FlagWidth;

#[cfg(feature = "ofi")]
impl bindgen::callbacks::ParseCallbacks for FlagWidth {
    fn int_macro(&self, name: &str, value: i64) -> Option<bindgen::callbacks::IntKind> {
        if name.starts_with("FI_") {
            Some(if value < 0 { bindgen::callbacks::IntKind::I64 } else { bindgen::callbacks::IntKind::U64 })
        } else {
            None
        }
    }
}
