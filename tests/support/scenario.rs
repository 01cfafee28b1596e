//! Launching a two-process scenario of the public API from a test: the
//! test process checks the native engine can run, takes the machine-wide
//! spin lock and runs the scenario in a child (role `solo`), which then
//! starts its own remote (role `peer`). Shared by `ops_remote.rs` and
//! `rma_remote.rs` (through `mod support`, beside `peer` and
//! `spin_lock`).

use super::peer::Peer;
use super::spin_lock;
use std::time::Duration;

fn require_native() -> bool {
    std::env::var("PSMRAIL_REQUIRE_NATIVE").is_ok_and(|v| v == "1")
}

/// Whether the native engine can run here; otherwise prints why (a failure
/// with `PSMRAIL_REQUIRE_NATIVE=1`).
pub(crate) fn native_available() -> bool {
    let reason = match psm_sys::PsmLibrary::load() {
        Ok(l) if l.build() == psm_sys::PsmBuild::Psm2Compat => return true,
        Ok(_) => "the default PSM library is not the compat build (libpsm2-2-compat), \
                  which two-process scenarios need for shared memory"
            .to_owned(),
        Err(e) => e.to_string(),
    };
    assert!(!require_native(), "PSMRAIL_REQUIRE_NATIVE=1 but {reason}");
    eprintln!("SKIPPED: {reason}");
    false
}

/// In the test process: runs `test` as a scenario child (role `solo`)
/// under the spin lock and checks it succeeded within `limit`. Skips (or
/// fails, when required) a native scenario where the library cannot run.
/// `extra` variables go into the scenario's environment (its remote
/// inherits them).
pub(crate) fn launch_solo(test: &str, native: bool, limit: Duration, extra: &[(&str, &str)]) {
    if native && !native_available() {
        return;
    }
    let _lock = spin_lock::spin_lock();
    let mut env = extra.to_vec();
    if std::env::var_os("PSM2_DEVICES").is_none() {
        env.push(("PSM2_DEVICES", "self,shm"));
    }
    let status = Peer::spawn(test, "solo", &env).wait(limit);
    assert!(status.success(), "{test}: the scenario failed: {status}");
}

/// Polls `f` until it resolves or `within` passes, calling `idle` (a
/// progress call) between polls.
pub(crate) fn poll_for<F: std::future::Future + Unpin>(
    f: &mut F,
    within: Duration,
    idle: impl Fn(),
) -> Option<F::Output> {
    let deadline = std::time::Instant::now() + within;
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        if let std::task::Poll::Ready(v) = std::pin::Pin::new(&mut *f).poll(&mut cx) {
            return Some(v);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        idle();
    }
}

/// The next error entry of `cq` within `within`, calling `idle` between
/// reads; panics naming `what` if a success entry comes instead or
/// nothing comes in time.
pub(crate) fn error_entry_within(
    cq: &psmrail::fabric::CompletionQueue,
    within: Duration,
    idle: impl Fn(),
    what: &str,
) -> psmrail::fabric::CqErrEntry {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(e) = cq.readerr() {
            return e;
        }
        assert!(
            cq.read().expect("cq").is_none(),
            "{what} towards a dead peer completed successfully"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "no CQ entry for {what} {within:?} after the peer died"
        );
        idle();
    }
}
