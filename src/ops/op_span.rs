//! The `tracing` span of one operation, and the event that ends it.
//!
//! Every operation gets a span at TRACE level — `psm.op` for the psm
//! provider, `mrail.op` for the multi-rail one — with its kind (`send`,
//! `trecv`, `write`, `fetch_atomic`, ...), its peer (the `fi_addr`; for a
//! receive from any source, recorded when it completes), its tag (tagged
//! operations) and its length. The span is opened when the operation is
//! posted, entered while its future is polled, and closed when the
//! operation completes or its future is dropped; completion is one TRACE
//! event in the span: `outcome = "ok"` with the length (and a receive's
//! tag and source), `outcome = "error"` with the error's kind, or
//! `outcome = "dropped"`.
//!
//! When nothing wants TRACE spans (no subscriber, or one filtering them
//! out) an operation pays one relaxed load of tracing's global level and
//! carries `None`: the span lives behind a box ([`OpSpan`], 8 bytes) or in
//! the boxed cold state of the psm futures, never inline in a future.

use crate::fabric::FiAddr;
use crate::Error;
use tracing::field::Empty;
use tracing::Span;

/// Which provider's span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Provider {
    /// `psm.op`.
    Psm,
    /// `mrail.op`.
    Mrail,
}

/// What a span describes at its start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpDesc {
    pub kind: &'static str,
    /// `None` (or [`FiAddr::UNSPEC`]) for a receive from any source.
    pub peer: Option<FiAddr>,
    pub tag: Option<u64>,
    pub len: usize,
}

/// Whether a subscriber may want operation spans: tracing's static and
/// global maximum levels (one relaxed load).
#[inline(always)]
pub(crate) fn wanted() -> bool {
    tracing::level_enabled!(tracing::Level::TRACE)
}

/// Opens the span of an operation; `None` when no subscriber wants it.
/// Call after [`wanted`] said yes.
#[cold]
#[inline(never)]
pub(crate) fn open(provider: Provider, d: OpDesc) -> Option<Span> {
    let span = match provider {
        Provider::Psm => tracing::trace_span!(
            "psm.op",
            kind = d.kind,
            peer = Empty,
            tag = Empty,
            len = d.len as u64
        ),
        Provider::Mrail => tracing::trace_span!(
            "mrail.op",
            kind = d.kind,
            peer = Empty,
            tag = Empty,
            len = d.len as u64
        ),
    };
    if span.is_disabled() {
        return None;
    }
    if let Some(p) = d.peer.filter(|p| !p.is_unspec()) {
        span.record("peer", p.0);
    }
    if let Some(t) = d.tag {
        span.record("tag", t);
    }
    Some(span)
}

/// The success event: `len` bytes, and a receive's tag and source (also
/// recorded as the span's peer when it had none).
#[cold]
#[inline(never)]
pub(crate) fn ok(span: &Span, len: usize, received: Option<(u64, FiAddr)>) {
    match received {
        Some((tag, source)) => {
            if !source.is_unspec() {
                span.record("peer", source.0);
            }
            tracing::trace!(parent: span, outcome = "ok", len = len as u64, tag, source = source.0, "op done");
        }
        None => tracing::trace!(parent: span, outcome = "ok", len = len as u64, "op done"),
    }
}

/// The failure event, with the error's kind and message.
#[cold]
#[inline(never)]
pub(crate) fn err(span: &Span, error: &Error) {
    tracing::trace!(
        parent: span,
        outcome = "error",
        error_kind = %error.kind(),
        error = %error,
        "op done"
    );
}

/// The event of a future dropped before its operation completed.
#[cold]
#[inline(never)]
pub(crate) fn dropped(span: &Span) {
    tracing::trace!(parent: span, outcome = "dropped", "op dropped");
}

/// An operation's span behind a box: 8 bytes, `None` when no subscriber
/// wants it. Dropping it closes the span.
#[derive(Debug, Default)]
pub(crate) struct OpSpan(Option<Box<Span>>);

impl OpSpan {
    /// The span of an operation described by `d`, if wanted.
    #[inline(always)]
    pub(crate) fn new(provider: Provider, d: impl FnOnce() -> OpDesc) -> OpSpan {
        if !wanted() {
            return OpSpan(None);
        }
        OpSpan(open(provider, d()).map(Box::new))
    }

    /// Enters the span (while a future is polled).
    #[inline(always)]
    pub(crate) fn enter(&self) -> Option<tracing::span::Entered<'_>> {
        self.0.as_deref().map(Span::enter)
    }

    /// Ends the span with `result`'s event (`len` on success).
    #[inline(always)]
    pub(crate) fn done<T>(&mut self, result: &crate::Result<T>, len: impl FnOnce(&T) -> usize) {
        if let Some(span) = self.0.take() {
            match result {
                Ok(v) => ok(&span, len(v), None),
                Err(e) => err(&span, e),
            }
        }
    }

    /// Ends the span with a receive's event.
    #[inline(always)]
    pub(crate) fn received(&mut self, result: &crate::Result<crate::ops::Received>) {
        if let Some(span) = self.0.take() {
            match result {
                Ok(r) => ok(&span, r.len, Some((r.tag, r.source))),
                Err(e) => err(&span, e),
            }
        }
    }
}

impl Drop for OpSpan {
    fn drop(&mut self) {
        if let Some(span) = &self.0 {
            dropped(span);
        }
    }
}
