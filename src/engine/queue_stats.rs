//! [`QueueStats`]: what an engine endpoint can tell about its unexpected
//! queue (messages that arrived before a receive matched them), and how
//! many of its links run over shared memory.

/// An engine endpoint's unexpected queue, as far as the engine can tell
/// ([`EngineEndpoint::queue_stats`](super::EngineEndpoint::queue_stats)).
///
/// ```
/// use psmrail::engine::QueueStats;
/// let s = QueueStats::default();
/// assert_eq!((s.unexpected_msgs, s.unexpected_bytes, s.unexpected_total), (None, None, None));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QueueStats {
    /// Messages waiting now; `None` where the engine cannot tell (PSM
    /// reports no depth).
    pub unexpected_msgs: Option<u64>,
    /// Bytes they hold in memory; `None` likewise.
    pub unexpected_bytes: Option<u64>,
    /// Messages that arrived unexpected since the endpoint opened; `None`
    /// where not counted.
    pub unexpected_total: Option<u64>,
    /// Links to peers of this host whose traffic runs over shared memory
    /// now (the soft engine's `SoftConfig::shared_memory`); `None` where
    /// the engine does not say (PSM picks its devices itself).
    pub shm_links: Option<u64>,
}
