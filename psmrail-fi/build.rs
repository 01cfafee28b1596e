//! Generates the libfabric ABI (`rdma/fabric.h` and the headers it pulls
//! in, plus `rdma/providers/fi_prov.h` and `fi_log.h`) with bindgen, and
//! links the providers against the distribution's `libfabric.so` (for
//! `fi_dupinfo`, `fi_freeinfo`, `fi_log` and friends, which libfabric
//! itself has loaded by the time it loads a provider).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rustc-link-lib=dylib=fabric");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_type("fi_.*|fid.*")
        .allowlist_function(
            "fi_dupinfo|fi_freeinfo|fi_strerror|fi_log|fi_log_enabled|fi_tostr|fi_version",
        )
        .allowlist_var("FI_.*|FID_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "bindgen over the libfabric headers failed ({e}): \
                 apt-get install -y libfabric-dev libclang-dev"
            )
        });
    bindings
        .write_to_file(out.join("libfabric.rs"))
        .expect("writing the bindings into OUT_DIR");
}
