//! A machine-wide lock for tests whose processes spin.
//!
//! Two spinning peers fill a 2-core machine; two such tests at once (cargo
//! runs tests on parallel threads, developers may run two cargo commands)
//! time out. Every spinning test holds this lock: a `flock` on a file in the
//! temp directory, so it also orders tests in different test binaries.

use std::fs::File;
use std::os::fd::AsRawFd;

/// Held while a spinning test runs; released on drop (and by the kernel if
/// the process dies).
pub(crate) struct SpinLock {
    file: File,
}

/// Takes the machine-wide spin lock, waiting for it.
pub(crate) fn spin_lock() -> SpinLock {
    let path = std::env::temp_dir().join("psmrail-spinning-tests.lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    // SAFETY: flock on a descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
    SpinLock { file }
}

impl Drop for SpinLock {
    fn drop(&mut self) {
        // SAFETY: as above; closing the file would release it as well.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}
