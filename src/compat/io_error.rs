//! `From<psmrail::Error> for std::io::Error`, so that `?` works in code
//! written against `tokio::io` and `tokio_util::codec`.
//!
//! The libfabric kind becomes the closest [`std::io::ErrorKind`]; the
//! psmrail error stays inside as the source, so nothing is lost:
//!
//! ```
//! use psmrail::{Error, ErrorKind};
//!
//! let e = Error::new(ErrorKind::TimedOut, "tsend: the peer did not answer in time");
//! let io: std::io::Error = e.into();
//! assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
//! let back = io.get_ref().and_then(|e| e.downcast_ref::<Error>()).unwrap();
//! assert_eq!(back.kind(), ErrorKind::TimedOut);
//!
//! // `?` in a function returning `std::io::Result`:
//! fn check(r: psmrail::Result<()>) -> std::io::Result<()> {
//!     r?;
//!     Ok(())
//! }
//! let trunc = Error::new(ErrorKind::Trunc, "trecv: message longer than the buffer");
//! assert_eq!(check(Err(trunc)).unwrap_err().kind(), std::io::ErrorKind::InvalidData);
//! ```
//!
//! | psmrail             | `std::io::ErrorKind`  |
//! |---------------------|-----------------------|
//! | `FI_EAGAIN`         | `WouldBlock`          |
//! | `FI_ENOSYS`, `FI_EOPNOTSUPP` | `Unsupported` |
//! | `FI_EINVAL`, `FI_EMSGSIZE`, `FI_ETOOSMALL` | `InvalidInput` |
//! | `FI_ETRUNC`         | `InvalidData`         |
//! | `FI_EACCES`         | `PermissionDenied`    |
//! | `FI_ETIMEDOUT`      | `TimedOut`            |
//! | `FI_EBUSY`          | `ResourceBusy`        |
//! | `FI_ENODATA`, `FI_ENOMSG` | `NotFound`      |
//! | `FI_EIO`            | `ConnectionReset`     |
//! | `FI_ENOMEM`         | `OutOfMemory`         |
//! | `FI_ECONNREFUSED`   | `ConnectionRefused`   |
//! | `FI_EOPBADSTATE`    | `NotConnected`        |
//! | `FI_ECANCELED`, `FI_EAVAIL`, `FI_EOTHER` | `Other` |
//!
//! `FI_ECANCELED` is deliberately not `Interrupted`: `tokio::io` helpers
//! such as `write_all` retry `Interrupted` errors, and a cancelled
//! operation must not be retried behind the caller's back.

use crate::{Error, ErrorKind};
use std::io;

/// The `std::io::ErrorKind` for a libfabric kind (see the module table).
///
/// ```
/// use psmrail::compat::io_error_kind;
/// use psmrail::ErrorKind;
/// assert_eq!(io_error_kind(ErrorKind::Io), std::io::ErrorKind::ConnectionReset);
/// assert_eq!(io_error_kind(ErrorKind::Canceled), std::io::ErrorKind::Other);
/// ```
pub fn io_error_kind(kind: ErrorKind) -> io::ErrorKind {
    match kind {
        ErrorKind::Again => io::ErrorKind::WouldBlock,
        ErrorKind::NoSys | ErrorKind::OpNotSupp => io::ErrorKind::Unsupported,
        ErrorKind::Inval | ErrorKind::MsgSize | ErrorKind::TooSmall => io::ErrorKind::InvalidInput,
        ErrorKind::Trunc => io::ErrorKind::InvalidData,
        ErrorKind::Access => io::ErrorKind::PermissionDenied,
        ErrorKind::TimedOut => io::ErrorKind::TimedOut,
        ErrorKind::Busy => io::ErrorKind::ResourceBusy,
        ErrorKind::NoData | ErrorKind::NoMsg => io::ErrorKind::NotFound,
        ErrorKind::Io => io::ErrorKind::ConnectionReset,
        ErrorKind::NoMem => io::ErrorKind::OutOfMemory,
        ErrorKind::ConnRefused => io::ErrorKind::ConnectionRefused,
        ErrorKind::OpBadState => io::ErrorKind::NotConnected,
        ErrorKind::Canceled | ErrorKind::Avail | ErrorKind::Other => io::ErrorKind::Other,
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(io_error_kind(e.kind()), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_and_keeps_the_source() {
        let kinds = [
            (ErrorKind::Again, io::ErrorKind::WouldBlock),
            (ErrorKind::NoSys, io::ErrorKind::Unsupported),
            (ErrorKind::Inval, io::ErrorKind::InvalidInput),
            (ErrorKind::Trunc, io::ErrorKind::InvalidData),
            (ErrorKind::Canceled, io::ErrorKind::Other),
            (ErrorKind::Access, io::ErrorKind::PermissionDenied),
            (ErrorKind::TimedOut, io::ErrorKind::TimedOut),
            (ErrorKind::Busy, io::ErrorKind::ResourceBusy),
            (ErrorKind::NoData, io::ErrorKind::NotFound),
            (ErrorKind::Io, io::ErrorKind::ConnectionReset),
            (ErrorKind::MsgSize, io::ErrorKind::InvalidInput),
            (ErrorKind::NoMem, io::ErrorKind::OutOfMemory),
            (ErrorKind::ConnRefused, io::ErrorKind::ConnectionRefused),
            (ErrorKind::Avail, io::ErrorKind::Other),
            (ErrorKind::NoMsg, io::ErrorKind::NotFound),
            (ErrorKind::OpNotSupp, io::ErrorKind::Unsupported),
            (ErrorKind::OpBadState, io::ErrorKind::NotConnected),
            (ErrorKind::TooSmall, io::ErrorKind::InvalidInput),
            (ErrorKind::Other, io::ErrorKind::Other),
        ];
        for (kind, want) in kinds {
            let io: io::Error = Error::new(kind, "x").into();
            assert_eq!(io.kind(), want, "{kind}");
            assert_eq!(io.to_string(), format!("{}: x", kind.fi_name()));
            let inner = io.get_ref().and_then(|e| e.downcast_ref::<Error>());
            assert_eq!(inner.map(Error::kind), Some(kind));
        }
    }
}
