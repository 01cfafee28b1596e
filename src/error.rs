//! psmrail's one error type: a libfabric-style kind plus what was at fault.
//!
//! Every fallible operation in the crate returns [`Result`]. The [`ErrorKind`]
//! mirrors the `FI_E*` codes an application written against libfabric expects
//! (`ARCHITECTURE.md`, principle 5); the message names the variable, argument
//! or peer at fault. Errors never come from panics: malformed input from the
//! environment or the wire is always an `Err`.

use std::fmt;

/// The libfabric error class of an [`Error`].
///
/// ```
/// use psmrail::ErrorKind;
/// assert_eq!(ErrorKind::Trunc.fi_name(), "FI_ETRUNC");
/// assert_eq!(ErrorKind::Trunc.errno(), 265);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `FI_EAGAIN`: resources are temporarily exhausted; retry after progress.
    Again,
    /// `FI_ENOSYS`: the feature or operation is not supported.
    NoSys,
    /// `FI_EINVAL`: an argument or configuration value is invalid.
    Inval,
    /// `FI_ETRUNC`: a message was longer than the receive buffer.
    Trunc,
    /// `FI_ECANCELED`: the operation was cancelled.
    Canceled,
    /// `FI_EACCES`: a key, bound or access right check failed.
    Access,
    /// `FI_ETIMEDOUT`: the peer did not answer in time.
    TimedOut,
    /// `FI_EBUSY`: the resource is in use (e.g. a capability slot is taken).
    Busy,
    /// `FI_ENODATA`: nothing is available (no device, no provider).
    NoData,
    /// `FI_EIO`: the transport failed (peer died, connection lost).
    Io,
    /// `FI_EMSGSIZE`: the message is larger than the operation allows.
    MsgSize,
    /// `FI_ENOMEM`: memory could not be obtained.
    NoMem,
    /// `FI_ECONNREFUSED`: the peer refused the connection (other job, other version).
    ConnRefused,
    /// `FI_EAVAIL`: an error completion is waiting (read it with `readerr`).
    Avail,
    /// `FI_ENOMSG`: no message matched (a peek found nothing).
    NoMsg,
    /// `FI_EOPNOTSUPP`: the operation is not supported in this form or on
    /// this object (as opposed to the whole feature: [`NoSys`](Self::NoSys)).
    OpNotSupp,
    /// `FI_EOPBADSTATE`: the object is not in a state that allows the
    /// operation (e.g. an endpoint not enabled yet).
    OpBadState,
    /// `FI_ETOOSMALL`: the buffer given is too small.
    TooSmall,
    /// `FI_EOTHER`: anything else, with the cause attached.
    Other,
}

impl ErrorKind {
    /// The positive libfabric error number (`FI_EAGAIN` = 11, ...).
    pub const fn errno(self) -> i32 {
        match self {
            ErrorKind::Again => 11,
            ErrorKind::NoSys => 38,
            ErrorKind::Inval => 22,
            ErrorKind::Trunc => 265,
            ErrorKind::Canceled => 125,
            ErrorKind::Access => 13,
            ErrorKind::TimedOut => 110,
            ErrorKind::Busy => 16,
            ErrorKind::NoData => 61,
            ErrorKind::Io => 5,
            ErrorKind::MsgSize => 90,
            ErrorKind::NoMem => 12,
            ErrorKind::ConnRefused => 111,
            ErrorKind::Avail => 259,
            ErrorKind::NoMsg => 42,
            ErrorKind::OpNotSupp => 95,
            ErrorKind::OpBadState => 258,
            ErrorKind::TooSmall => 257,
            ErrorKind::Other => 260,
        }
    }

    /// The libfabric constant name (`"FI_EAGAIN"`, ...).
    pub const fn fi_name(self) -> &'static str {
        match self {
            ErrorKind::Again => "FI_EAGAIN",
            ErrorKind::NoSys => "FI_ENOSYS",
            ErrorKind::Inval => "FI_EINVAL",
            ErrorKind::Trunc => "FI_ETRUNC",
            ErrorKind::Canceled => "FI_ECANCELED",
            ErrorKind::Access => "FI_EACCES",
            ErrorKind::TimedOut => "FI_ETIMEDOUT",
            ErrorKind::Busy => "FI_EBUSY",
            ErrorKind::NoData => "FI_ENODATA",
            ErrorKind::Io => "FI_EIO",
            ErrorKind::MsgSize => "FI_EMSGSIZE",
            ErrorKind::NoMem => "FI_ENOMEM",
            ErrorKind::ConnRefused => "FI_ECONNREFUSED",
            ErrorKind::Avail => "FI_EAVAIL",
            ErrorKind::NoMsg => "FI_ENOMSG",
            ErrorKind::OpNotSupp => "FI_EOPNOTSUPP",
            ErrorKind::OpBadState => "FI_EOPBADSTATE",
            ErrorKind::TooSmall => "FI_ETOOSMALL",
            ErrorKind::Other => "FI_EOTHER",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.fi_name())
    }
}

/// A psmrail error: a kind, a message naming what was at fault, and an
/// optional underlying cause.
///
/// ```
/// use psmrail::{Error, ErrorKind};
/// let e = Error::new(ErrorKind::NoSys, "scalable endpoints are not supported");
/// assert_eq!(e.kind(), ErrorKind::NoSys);
/// assert_eq!(e.to_string(), "FI_ENOSYS: scalable endpoints are not supported");
/// ```
///
/// One pointer wide (the details are boxed), so `Result<T>` stays small on
/// the hot path and in the `Err` of posts that hand a buffer back.
#[derive(Debug)]
pub struct Error {
    inner: Box<Inner>,
}

#[derive(Debug)]
struct Inner {
    kind: ErrorKind,
    message: String,
    truncation: Option<Truncation>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// The two lengths of a truncated receive (`FI_ETRUNC`).
///
/// ```
/// use psmrail::{Error, ErrorKind, Truncation};
/// let e = Error::truncated(Truncation { msg_len: 100, received: 64 }, "tagged receive");
/// assert_eq!(e.kind(), ErrorKind::Trunc);
/// assert_eq!(e.truncation().map(|t| t.overflow()), Some(36));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Truncation {
    /// The length the sender sent. One engine limit: on the native engine
    /// over libpsm2, a rendezvous message (above the eager threshold,
    /// 64 KiB here) that matched a receive posted before it arrived reports
    /// the delivered length instead (libpsm2's status gives no more), so
    /// `msg_len == received` there.
    pub msg_len: u64,
    /// The bytes placed in the receive buffer (its length).
    pub received: usize,
}

impl Truncation {
    /// Bytes that did not fit (libfabric's `olen`).
    pub fn overflow(&self) -> u64 {
        self.msg_len.saturating_sub(self.received as u64)
    }
}

impl Error {
    /// An error of `kind` with a message saying what was at fault.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                truncation: None,
                source: None,
            }),
        }
    }

    /// A truncation error (`FI_ETRUNC`) carrying both lengths; `what` names
    /// the operation.
    pub fn truncated(t: Truncation, what: &str) -> Self {
        Error {
            inner: Box::new(Inner {
                kind: ErrorKind::Trunc,
                message: format!(
                    "{what}: message of {} bytes truncated to the {}-byte buffer",
                    t.msg_len, t.received
                ),
                truncation: Some(t),
                source: None,
            }),
        }
    }

    /// Both lengths, for a truncation error.
    pub fn truncation(&self) -> Option<Truncation> {
        self.inner.truncation
    }

    /// An error of `kind` caused by `source`.
    pub fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                truncation: None,
                source: Some(Box::new(source)),
            }),
        }
    }

    /// The libfabric class of this error.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The message, without the kind prefix.
    pub fn message(&self) -> &str {
        &self.inner.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.inner.kind, self.inner.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// `Result` with psmrail's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
