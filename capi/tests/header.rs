//! `include/fabcoll.h` is what cbindgen makes from `src/` with `cbindgen.toml`: the header is
//! checked in (so building the library needs no cbindgen) and this test regenerates it and
//! compares. After changing the C API, `FC_WRITE_HEADER=1 cargo test -p fabcoll-capi
//! --test header` writes the new header.

use std::path::Path;

#[test]
fn the_checked_in_header_is_what_cbindgen_generates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses src/");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = dir.join("include/fabcoll.h");
    if std::env::var_os("FC_WRITE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write include/fabcoll.h");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/fabcoll.h is out of date: run FC_WRITE_HEADER=1 cargo test -p fabcoll-capi --test header"
    );
    // The constants written by hand in cbindgen.toml agree with the library's.
    for (name, value) in [
        ("FC_UNDEFINED", fabcoll_capi::FC_UNDEFINED),
        ("FC_OP_NULL", fabcoll_capi::FC_OP_NULL),
        ("FC_ANY_SOURCE", fabcoll_capi::FC_ANY_SOURCE),
        ("FC_ANY_TAG", fabcoll_capi::FC_ANY_TAG),
    ] {
        let line = format!("#define {name} ({value})");
        assert!(generated.contains(&line), "{line} missing from the header");
    }
    // Every function of the API is in it.
    for f in [
        "fc_init(",
        "fc_comm_split(",
        "fc_allreduce(",
        "fc_ialltoallv(",
        "fc_test(",
        "fc_waitall(",
        "fc_testany(",
        "fc_op_create(",
        "fc_isend(",
        "fc_recv(",
        "fc_probe(",
        "fc_iprobe(",
        "fc_sendrecv(",
    ] {
        assert!(generated.contains(f), "{f} missing from the header");
    }
}
