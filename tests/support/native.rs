//! Whether the native engine's tests run: the PSM library must load, and
//! with `PSMRAIL_REQUIRE_NATIVE=1` (as in CI) a missing one is a failure,
//! not a skip.

/// `PSMRAIL_REQUIRE_NATIVE=1`: the native tests must run.
pub(crate) fn required() -> bool {
    std::env::var("PSMRAIL_REQUIRE_NATIVE").is_ok_and(|v| v == "1")
}

/// Whether the PSM library loads; otherwise says why the test is skipped
/// (or fails when it must run).
pub(crate) fn available() -> bool {
    match psm_sys::PsmLibrary::load() {
        Ok(_) => true,
        Err(e) => {
            assert!(!required(), "PSMRAIL_REQUIRE_NATIVE=1 but {e}");
            eprintln!("SKIPPED: {e}");
            false
        }
    }
}
