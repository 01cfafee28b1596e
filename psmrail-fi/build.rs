//! Generates the libfabric ABI (`rdma/fabric.h` and the headers it pulls
//! in, plus `rdma/providers/fi_prov.h` and `fi_log.h`) with bindgen, and
//! links the providers against the distribution's `libfabric.so` (for
//! `fi_dupinfo`, `fi_freeinfo`, `fi_log` and friends, which libfabric
//! itself has loaded by the time it loads a provider).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=PSMRAIL_REQUIRE_FABTESTS");
    println!("cargo::rustc-check-cfg=cfg(libfabric)");
    let required = env::var("PSMRAIL_REQUIRE_FABTESTS").is_ok_and(|v| v == "1");
    match generate() {
        Ok(()) => {
            println!("cargo:rustc-cfg=libfabric");
            println!("cargo:rustc-link-lib=dylib=fabric");
        }
        Err(why) if required => panic!("{why} (PSMRAIL_REQUIRE_FABTESTS=1)"),
        Err(why) => println!(
            "cargo:warning=psmrail-fi: {why}; the provider libraries are built empty \
             (their fi_prov_ini returns NULL): apt-get install -y libfabric-dev libclang-dev"
        ),
    }
}

/// Writes the bindings into `OUT_DIR`, or says why it cannot.
fn generate() -> Result<(), String> {
    if !std::path::Path::new("/usr/include/rdma/fabric.h").exists() {
        return Err("no libfabric headers (/usr/include/rdma/fabric.h)".into());
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // bindgen panics when it cannot load libclang.
    let generated = std::panic::catch_unwind(|| {
        bindgen::Builder::default()
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
    })
    .map_err(|_| "bindgen could not run (no libclang?)".to_string())?
    .map_err(|e| format!("bindgen over the libfabric headers failed ({e})"))?;
    bindings_to(&generated, &out)
}

fn bindings_to(bindings: &bindgen::Bindings, out: &std::path::Path) -> Result<(), String> {
    bindings
        .write_to_file(out.join("libfabric.rs"))
        .map_err(|e| format!("writing the bindings into OUT_DIR: {e}"))
}
