//! What a finished operation reports, and how an engine status becomes a
//! `Result`.

use crate::engine::{MqStatus, OpBuffer, PostError};
use crate::fabric::{Counter, FiAddr};
use crate::{Error, ErrorKind, Result, Truncation};

/// The output of every operation future: the result and the buffer it was
/// given, handed back whatever happened (owned-buffer style, as tokio-uring
/// and monoio do), so a failure never loses memory.
pub type OpOutput<T> = (Result<T>, OpBuffer);

/// Turns an operation's `(Result, buffer)` output into one `Result`, so
/// that `?` works and the buffer stays reachable on error too (inside the
/// [`PostError`]).
///
/// ```
/// use psmrail::engine::OpBuffer;
/// use psmrail::ops::{OpOutputExt, Sent};
/// use psmrail::{Error, ErrorKind};
///
/// let ok: (psmrail::Result<Sent>, OpBuffer) = (Ok(Sent { len: 3 }), vec![1u8, 2, 3].into());
/// let (sent, buf) = ok.into_result()?;
/// assert_eq!((sent.len, buf.as_slice()), (3, &[1u8, 2, 3][..]));
///
/// let failed: (psmrail::Result<Sent>, OpBuffer) =
///     (Err(Error::new(ErrorKind::Io, "peer gone")), vec![9u8].into());
/// let e = failed.into_result().unwrap_err();
/// assert_eq!(e.error.kind(), ErrorKind::Io);
/// assert_eq!(e.buffer.as_slice(), &[9]); // the buffer is not lost
/// # Ok::<(), psmrail::engine::PostError>(())
/// ```
pub trait OpOutputExt<T> {
    /// The value and the buffer, or the error with the buffer.
    ///
    /// # Errors
    /// The operation's error, as a [`PostError`] holding the buffer.
    fn into_result(self) -> std::result::Result<(T, OpBuffer), PostError>;
}

impl<T> OpOutputExt<T> for OpOutput<T> {
    fn into_result(self) -> std::result::Result<(T, OpBuffer), PostError> {
        match self {
            (Ok(value), buffer) => Ok((value, buffer)),
            (Err(error), buffer) => Err(PostError { error, buffer }),
        }
    }
}

/// A completed send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// Bytes sent.
    pub len: usize,
}

/// A completed receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// Bytes placed at the start of the buffer.
    pub len: usize,
    /// The message's tag (the user bits; 0 for untagged messages).
    pub tag: u64,
    /// The sender, as an address of the endpoint's address vector;
    /// [`FiAddr::UNSPEC`] when it is not in the AV (or, for tagged messages
    /// on the TrueScale build of PSM, not reported by the engine).
    pub source: FiAddr,
}

/// The operation names used in error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpName {
    Send,
    Recv,
    TSend,
    TRecv,
    MultiRecv,
}

impl OpName {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OpName::Send => "send",
            OpName::Recv => "recv",
            OpName::TSend => "tsend",
            OpName::TRecv => "trecv",
            OpName::MultiRecv => "multi-recv",
        }
    }
}

/// The error of a failed status; `None` on success.
#[inline]
pub(crate) fn status_error(status: &MqStatus, op: OpName) -> Option<Error> {
    let kind = status.error?;
    Some(error_of(kind, status, op))
}

/// The error of a status that failed (`status.error` is set).
#[cold]
pub(crate) fn failed_status_error(status: &MqStatus, op: OpName) -> Error {
    error_of(status.error.unwrap_or(ErrorKind::Other), status, op)
}

#[cold]
#[inline(never)]
fn error_of(kind: ErrorKind, status: &MqStatus, op: OpName) -> Error {
    match kind {
        ErrorKind::Trunc => Error::truncated(
            Truncation {
                msg_len: status.msg_len,
                received: status.nbytes,
            },
            op.as_str(),
        ),
        ErrorKind::Canceled => Error::new(kind, format!("{}: cancelled", op.as_str())),
        ErrorKind::Io => Error::new(kind, format!("{}: the peer is gone", op.as_str())),
        ErrorKind::TimedOut => Error::new(
            kind,
            format!("{}: the peer did not answer in time", op.as_str()),
        ),
        other => Error::new(other, format!("{}: failed", op.as_str())),
    }
}

/// Counts a finished operation on the endpoint's counter, if one is bound:
/// a success or an error.
#[inline]
pub(crate) fn count(counter: Option<&Counter>, ok: bool) {
    match counter {
        Some(c) if ok => c.inc(),
        Some(c) => c.inc_err(),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The receive output stays narrow, as the engine's completions do
    /// (`engine/mq.rs`, `completions_and_receive_outputs_stay_narrow`;
    /// BENCHMARKING.md, "A buffer one pointer wide"). Widening it is a
    /// decision to measure first, not an accident.
    #[test]
    fn receive_outputs_stay_narrow() {
        let output = std::mem::size_of::<OpOutput<Received>>();
        assert!(output <= 40, "{output}");
    }
}
