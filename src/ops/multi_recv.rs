//! `FI_MULTI_RECV`: one large buffer receives many untagged messages, each
//! placed right after the previous one.
//!
//! [`Endpoint::multi_recv`] posts a receive over the whole [`MultiRecvBuffer`]
//! and returns a [`MultiRecv`] stream. Each message yields a [`MultiRecvEvent`]
//! with its offset and length, readable at once with [`MultiRecvEvent::data`];
//! the next receive is posted over the space left. When that space drops under
//! the endpoint's minimum (`FI_OPT_MIN_MULTI_RECV`,
//! [`Endpoint::min_multi_recv`], at least 1 byte — C's default of 0 posted
//! 0-byte receives that truncated the next message) the buffer is released: the
//! last event says so ([`MultiRecvEvent::released`]) and the stream ends.
//!
//! Exactly one receive owns the remaining space at a time, as in C;
//! messages arriving between two receives wait in the engine's unexpected
//! queue. Memory safety: an event reads bytes the engine has finished
//! writing, and the engine only ever writes past them.

use super::outcome::{OpName, Received};
use super::recv::RecvOp;
use crate::engine::{OpBuffer, StableRegion};
use crate::fabric::{Caps, Endpoint, FiAddr};
use crate::{Error, ErrorKind, Result};
use futures::Stream;
use std::cell::UnsafeCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Memory for a multi-receive: a fixed block that receives write into
/// while applications read the parts already filled.
///
/// ```
/// use psmrail::ops::MultiRecvBuffer;
/// let buf = MultiRecvBuffer::new(4096);
/// assert_eq!(buf.len(), 4096);
/// assert_eq!(buf.into_vec().unwrap().len(), 4096);
/// ```
pub struct MultiRecvBuffer {
    bytes: Box<[UnsafeCell<u8>]>,
}

// SAFETY: the bytes are only written by the engine, through raw pointers,
// into the window of the one receive posted at a time, and only read
// through `MultiRecvEvent::data` for ranges that receive finished; those
// never overlap (see `MultiRecv`). Sharing the block between threads is
// therefore free of data races.
unsafe impl Sync for MultiRecvBuffer {}

impl std::fmt::Debug for MultiRecvBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiRecvBuffer")
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl MultiRecvBuffer {
    /// A zeroed block of `len` bytes.
    pub fn new(len: usize) -> Self {
        MultiRecvBuffer {
            bytes: (0..len).map(|_| UnsafeCell::new(0)).collect(),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The bytes back as a vector; `None` while a receive or an event
    /// still holds the block (the `Arc` is shared).
    pub fn into_vec(self) -> Option<Vec<u8>> {
        Some(
            self.bytes
                .into_vec()
                .into_iter()
                .map(UnsafeCell::into_inner)
                .collect(),
        )
    }

    /// `len` bytes at `offset`, which no receive writes any more.
    fn finished(&self, offset: usize, len: usize) -> &[u8] {
        let end = offset.saturating_add(len).min(self.bytes.len());
        let cells = &self.bytes[offset.min(end)..end];
        // SAFETY: UnsafeCell<u8> has the layout of u8; the range lies in the
        // block; it was filled by a receive that completed (the completion
        // was observed with Acquire through the reactor's table) and the
        // engine never writes it again (later receives start past it).
        unsafe { std::slice::from_raw_parts(cells.as_ptr() as *const u8, cells.len()) }
    }
}

// SAFETY: the pointer is the boxed slice's, fixed for the block's life and
// valid for `len()` bytes; writes happen only through the posted window as
// the `Sync` impl above explains.
unsafe impl StableRegion for MultiRecvBuffer {
    fn as_ptr(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.bytes.as_ptr())
    }

    fn len(&self) -> usize {
        self.bytes.len()
    }
}

/// One message received into a [`MultiRecvBuffer`].
#[derive(Debug, Clone)]
pub struct MultiRecvEvent {
    block: Arc<MultiRecvBuffer>,
    offset: usize,
    received: Received,
    released: bool,
}

impl MultiRecvEvent {
    /// Where the message starts in the block.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.received.len
    }

    /// Whether it is empty (a 0-byte message).
    pub fn is_empty(&self) -> bool {
        self.received.len == 0
    }

    /// The sender.
    pub fn source(&self) -> FiAddr {
        self.received.source
    }

    /// The message's bytes.
    pub fn data(&self) -> &[u8] {
        self.block.finished(self.offset, self.received.len)
    }

    /// Whether the block was released after this message (libfabric's
    /// `FI_MULTI_RECV` completion flag): the stream ends.
    pub fn released(&self) -> bool {
        self.released
    }
}

/// The stream of a multi-receive ([`Endpoint::multi_recv`]).
///
/// Dropping it cancels the receive posted over the remaining space (if it
/// has not matched); a matched one finishes inside the reactor.
#[must_use = "streams do nothing unless polled"]
#[derive(Debug)]
pub struct MultiRecv<'a> {
    ep: &'a Endpoint,
    block: Arc<MultiRecvBuffer>,
    offset: usize,
    min: usize,
    current: Option<RecvOp<'a>>,
}

impl MultiRecv<'_> {
    /// Bytes of the block not yet filled.
    pub fn remaining(&self) -> usize {
        self.block.len() - self.offset
    }

    /// The block (shared with the events and the receive in flight).
    pub fn buffer(&self) -> &Arc<MultiRecvBuffer> {
        &self.block
    }

    /// Cancels the receive over the remaining space (`fi_cancel`): the
    /// stream then ends with an `FI_ECANCELED` error. `false` when a
    /// message already matched it.
    pub fn cancel(&self) -> bool {
        self.current.as_ref().is_some_and(RecvOp::cancel)
    }

    fn post_rest(&mut self) {
        let region: Arc<dyn StableRegion> = self.block.clone();
        self.current = Some(self.ep.recv(rest_of(&region, self.offset)));
    }
}

impl Stream for MultiRecv<'_> {
    type Item = Result<MultiRecvEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(op) = this.current.as_mut() else {
            return Poll::Ready(None);
        };
        let (result, _window) = std::task::ready!(Pin::new(op).poll(cx));
        this.current = None;
        match result {
            Ok(received) => {
                let offset = this.offset;
                this.offset += received.len;
                let released = released(this.remaining(), this.min);
                if !released {
                    this.post_rest();
                }
                Poll::Ready(Some(Ok(MultiRecvEvent {
                    block: this.block.clone(),
                    offset,
                    received,
                    released,
                })))
            }
            // The stream ends after an error (truncation, cancel, dead peer).
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }
}

impl Endpoint {
    /// Starts a multi-receive of untagged messages into `block`
    /// (`fi_recv` with `FI_MULTI_RECV`). Needs `FI_MSG`, `FI_MULTI_RECV` and
    /// `FI_RECV` (or no direction bits).
    ///
    /// # Errors
    /// `FI_EOPNOTSUPP` without those caps; `FI_EINVAL` for a block smaller
    /// than the endpoint's minimum; the errors of [`recv`](Self::recv).
    pub fn multi_recv(&self, block: MultiRecvBuffer) -> Result<MultiRecv<'_>> {
        let min = check_block(self, block.len())?;
        let mut multi = MultiRecv {
            ep: self,
            block: Arc::new(block),
            offset: 0,
            min,
            current: None,
        };
        multi.post_rest();
        if multi.current.as_ref().is_some_and(RecvOp::is_failed) {
            if let Some(Err(failed)) = multi.current.take().map(RecvOp::into_posted) {
                return Err(failed.error);
            }
        }
        Ok(multi)
    }
}

/// Checks that `ep` may multi-receive into a block of `len` bytes; the
/// endpoint's minimum free space (at least 1 byte) back.
pub(super) fn check_block(ep: &Endpoint, len: usize) -> Result<usize> {
    if !ep.core.caps().contains(Caps::MULTI_RECV) {
        return Err(Error::new(
            ErrorKind::OpNotSupp,
            "multi-recv: the endpoint was opened without FI_MULTI_RECV",
        ));
    }
    super::submit::check_caps(
        &ep.core,
        Caps::MSG,
        super::submit::Dir::Recv,
        OpName::MultiRecv,
    )?;
    let min = ep.core.min_multi_recv().max(1);
    if len < min {
        return Err(Error::new(
            ErrorKind::Inval,
            format!(
                "multi-recv: a {len}-byte block is smaller than the endpoint's minimum of {min} bytes"
            ),
        ));
    }
    Ok(min)
}

/// Whether a block with `remaining` free bytes is released (less than the
/// minimum is left).
pub(super) fn released(remaining: usize, min: usize) -> bool {
    remaining < min
}

/// The part of `block` from `offset` to its end, as the next receive's
/// buffer.
pub(super) fn rest_of(block: &Arc<dyn StableRegion>, offset: usize) -> OpBuffer {
    let len = block.len().saturating_sub(offset);
    OpBuffer::from(block.clone())
        .window(offset, len)
        .expect("the offset never passes the block's end")
}
