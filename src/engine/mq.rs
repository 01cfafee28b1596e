//! Tag matching words and what an MQ request reports when it completes.

use super::{OpBuffer, PeerAddr};
use crate::ErrorKind;

/// A 64-bit tag and the mask of bits that must match (PSM's `rtag` and
/// `rtagsel`): an incoming tag `t` matches when `t & select == tag & select`.
///
/// ```
/// use psmrail::engine::TagMatch;
/// let m = TagMatch::new(0x1200, 0xff00); // low byte is a wildcard
/// assert!(m.matches(0x12ab));
/// assert!(!m.matches(0x13ab));
/// assert!(TagMatch::exact(7).matches(7) && TagMatch::ANY.matches(u64::MAX));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TagMatch {
    /// The tag bits to match.
    pub tag: u64,
    /// Which bits of the tag must match.
    pub select: u64,
}

impl TagMatch {
    /// Matches every tag.
    pub const ANY: TagMatch = TagMatch { tag: 0, select: 0 };

    /// `tag` under the mask `select`.
    pub const fn new(tag: u64, select: u64) -> Self {
        TagMatch { tag, select }
    }

    /// Exactly `tag`.
    pub const fn exact(tag: u64) -> Self {
        TagMatch {
            tag,
            select: u64::MAX,
        }
    }

    /// Whether an incoming tag matches.
    pub const fn matches(&self, incoming: u64) -> bool {
        (incoming ^ self.tag) & self.select == 0
    }
}

/// How an MQ request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MqStatus {
    /// The sender's tag (receives; sends report the tag they sent).
    pub tag: u64,
    /// The sender's message length (receives; sends report their length).
    pub msg_len: u64,
    /// Bytes actually placed in the receive buffer (sends: bytes sent).
    pub nbytes: usize,
    /// The sender, where the engine knows it: the soft engine always does;
    /// PSM 1.x's MQ does not report it (the layer above encodes it in the
    /// tag for untagged messages, as the C provider did).
    pub source: Option<PeerAddr>,
    /// `None` on success; `Trunc` when `msg_len > nbytes`; `Canceled` after
    /// a successful cancel; `Io` / `TimedOut` when the peer failed.
    pub error: Option<ErrorKind>,
}

impl MqStatus {
    /// The status of a request that ended with `error` before moving any
    /// byte (a cancelled receive, a send to a dead peer, a closed endpoint).
    ///
    /// ```
    /// use psmrail::engine::MqStatus;
    /// use psmrail::ErrorKind;
    /// let s = MqStatus::failed(7, ErrorKind::Canceled);
    /// assert_eq!((s.tag, s.nbytes, s.error), (7, 0, Some(ErrorKind::Canceled)));
    /// ```
    pub fn failed(tag: u64, error: ErrorKind) -> MqStatus {
        MqStatus {
            tag,
            msg_len: 0,
            nbytes: 0,
            source: None,
            error: Some(error),
        }
    }
}

/// A finished MQ request: its status and the memory it was given.
#[derive(Debug)]
pub struct MqCompletion {
    /// How it ended.
    pub status: MqStatus,
    /// The buffer the request was posted with, handed back.
    pub buffer: OpBuffer,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What crosses a function boundary between a message's arrival and
    /// the reply stays narrow: moving wide structs there is what the API's
    /// 8 B latency paid for (BENCHMARKING.md, "A buffer one pointer wide"). Widening
    /// these is a decision to measure first, not an accident.
    #[test]
    fn completions_and_receive_outputs_stay_narrow() {
        use std::mem::size_of;
        assert_eq!(size_of::<OpBuffer>(), size_of::<usize>());
        assert!(
            size_of::<MqCompletion>() <= 56,
            "{}",
            size_of::<MqCompletion>()
        );
        // The receive output's width is checked with it, one layer up
        // (`ops/outcome.rs`, `receive_outputs_stay_narrow`).
    }
}
