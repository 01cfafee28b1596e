//! The single-copy path's one system call: reading a large message
//! straight from the sender's memory (`process_vm_readv`) into the
//! receive buffer. The sender names the address in its PullRts; the
//! kernel checks that this process may read the other's memory (same
//! user, and what `kernel.yama.ptrace_scope` and the security modules
//! allow), and a refusal or a bad address is an error here, never a
//! fault: the message then comes through the ring.

use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use std::io::{self, IoSliceMut};

#[cfg(test)]
thread_local! {
    /// Tests play a kernel that refuses (as under `ptrace_scope` 2): every
    /// read on this thread fails with `EPERM`.
    pub(crate) static REFUSE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Reads `dst.len()` bytes at `addr` in process `pid` into `dst`.
pub(crate) fn read(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<()> {
    #[cfg(test)]
    if REFUSE.with(|r| r.get()) {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    let base = usize::try_from(addr)
        .ok()
        .filter(|a| a.checked_add(dst.len()).is_some())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the address range wraps"))?;
    let mut done = 0;
    while done < dst.len() {
        let remote = [RemoteIoVec {
            base: base + done,
            len: dst.len() - done,
        }];
        let n = process_vm_readv(
            Pid::from_raw(pid),
            &mut [IoSliceMut::new(&mut dst[done..])],
            &remote,
        )?;
        if n == 0 {
            return Err(io::Error::other("process_vm_readv read nothing"));
        }
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_memory_and_refuses_bad_addresses() {
        let src: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let me = std::process::id() as i32;
        read(me, src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(dst, src);
        // Unmapped, wrapping, and a process that is not there.
        assert!(read(me, 8, &mut dst[..16]).is_err());
        assert!(read(me, u64::MAX - 4, &mut dst[..16]).is_err());
        assert!(read(i32::MAX, src.as_ptr() as u64, &mut dst[..16]).is_err());
    }
}
