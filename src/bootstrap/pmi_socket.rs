//! The socket a PMI process manager hands over in `PMI_FD`, shared by the
//! PMI-1 and PMI-2 clients: taking the descriptor (checked to be an open
//! socket), writing a request, and reading until the client's decoder
//! has a message, within a timeout.

use crate::{Error, ErrorKind, Result};
use std::io::{ErrorKind as IoKind, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A connection to the process manager with the client's timeout.
#[derive(Debug)]
pub(crate) struct PmiSocket {
    socket: UnixStream,
    timeout: Duration,
}

/// The socket numbered by `raw` (the text of `PMI_FD`): `FI_EINVAL`
/// naming `PMI_FD` when it is no descriptor number or no open socket.
/// Takes ownership of the descriptor.
pub(crate) fn socket_from_fd_text(raw: &str) -> Result<UnixStream> {
    let fd: RawFd = raw
        .trim()
        .parse()
        .ok()
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Inval,
                format!("PMI_FD={raw:?}: expected the number of an open descriptor"),
            )
        })?;
    // libc, not nix: nix's fstat wants a descriptor already known open,
    // and whether it is open is what this asks.
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes only into `st` and fails with EBADF for a
    // number that is no open descriptor.
    let is_socket = unsafe { libc::fstat(fd, st.as_mut_ptr()) } == 0 && {
        // SAFETY: fstat succeeded, so it filled `st`.
        let st = unsafe { st.assume_init() };
        st.st_mode & libc::S_IFMT == libc::S_IFSOCK
    };
    if !is_socket {
        return Err(Error::new(
            ErrorKind::Inval,
            format!("PMI_FD={fd}: not an open socket (no process manager started this process?)"),
        ));
    }
    // SAFETY: the descriptor is an open socket (checked above) that the
    // launcher handed to this process for PMI alone; the clients'
    // `from_env` contract makes this the one owner.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(UnixStream::from(owned))
}

impl PmiSocket {
    pub(crate) fn new(socket: UnixStream, timeout: Duration) -> PmiSocket {
        PmiSocket { socket, timeout }
    }

    /// Writes one request.
    pub(crate) fn send(&mut self, bytes: &[u8]) -> Result<()> {
        self.socket
            .write_all(bytes)
            .map_err(|e| io_error("cannot write to the process manager", e))
    }

    /// Feeds what the manager sends to `step` (first with no bytes, for
    /// what the decoder already holds) until it yields a message, within
    /// the timeout: `FI_ETIMEDOUT` when none comes, `FI_EIO` when the
    /// manager closes the connection.
    pub(crate) fn receive<T>(&mut self, mut step: impl FnMut(&[u8]) -> Option<T>) -> Result<T> {
        let end = Instant::now() + self.timeout;
        let mut buf = [0u8; 1024];
        let mut got: &[u8] = &[];
        loop {
            if let Some(m) = step(got) {
                return Ok(m);
            }
            got = &[];
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::new(
                    ErrorKind::TimedOut,
                    format!(
                        "PMI: no answer from the process manager within {:?}",
                        self.timeout
                    ),
                ));
            }
            self.socket
                .set_read_timeout(Some(left))
                .map_err(|e| io_error("cannot set a read timeout", e))?;
            match self.socket.read(&mut buf) {
                Ok(0) => {
                    return Err(Error::new(
                        ErrorKind::Io,
                        "PMI: the process manager closed the connection",
                    ))
                }
                Ok(n) => got = &buf[..n],
                Err(e)
                    if matches!(
                        e.kind(),
                        IoKind::WouldBlock | IoKind::TimedOut | IoKind::Interrupted
                    ) => {}
                Err(e) => return Err(io_error("cannot read from the process manager", e)),
            }
        }
    }
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Io, format!("PMI: {what}: {e}"))
}
