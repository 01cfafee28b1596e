//! The provider library under valgrind's memcheck: fabtests'
//! `fi_rdm_tagged_pingpong` (server and client) over psm on the soft
//! engine, every message checked (`-v`), must end with no memcheck error
//! (no invalid read or write, no use of uninitialised memory) and no
//! block definitely lost, on either side.
//!
//! The provider libraries are preloaded (`LD_PRELOAD`), so they stay
//! mapped after libfabric's `dlclose` at exit: what their statics still
//! hold is then counted as reachable, and valgrind can name their
//! functions in its reports. Needs valgrind (`apt-get install valgrind`),
//! fabtests and the debug provider libraries, as the program tests; the
//! native engine is left out (libpsm2's shared-memory device is not
//! valgrind-clean by itself).
// Built without libfabric (see build.rs), the crate has no C face to test.
#![cfg(libfabric)]

mod support;

use std::path::Path;
use std::time::Duration;
use support::{assert_pair, pair_after, Engine, FABTESTS};

#[test]
fn fi_rdm_tagged_pingpong_is_memcheck_clean() {
    let Some(dir) = FABTESTS.provider_dir() else {
        return;
    };
    let Some(valgrind) = FABTESTS.tool("valgrind", "valgrind") else {
        return;
    };
    let Some(fabtests) = std::env::var_os("PSMRAIL_FABTESTS") else {
        FABTESTS.missing("PSMRAIL_FABTESTS is not set (the bin folder of a fabtests 1.17 install)");
        return;
    };
    let prog = Path::new(&fabtests).join("fi_rdm_tagged_pingpong");
    let prog = prog.to_str().expect("a UTF-8 path");
    let preload = ["libpsmrail_psm_fi.so", "libpsmrail_mrail_fi.so"]
        .map(|f| dir.join(f).display().to_string())
        .join(":");
    let args = [
        "--error-exitcode=9",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        "--show-leak-kinds=definite",
        prog,
        "-p",
        "psm",
        "-v",
        "-I",
        "20",
        "-S",
        "4096",
    ];
    let out = assert_pair(
        "fi_rdm_tagged_pingpong under valgrind",
        pair_after(
            Duration::from_secs(4),
            &valgrind,
            &args,
            &[],
            &["127.0.0.1"],
            &dir,
            Engine::Soft,
            &[("LD_PRELOAD", &preload)],
        ),
    );
    assert!(out.contains("4k"), "{out}");
}
