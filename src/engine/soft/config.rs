//! The soft engine's protocol parameters.

use super::wire::{FrameLimits, ENTRY_OVERHEAD};
use crate::engine::EngineLimits;
use crate::{Error, ErrorKind, Result};

/// Parameters of the soft engine's protocol: sizes of the protocol's
/// pieces and the credit windows that bound a receiver's memory.
///
/// The defaults report the same [`EngineLimits`] as PSM on these machines
/// (10 AM arguments, 8128-byte AM payloads, 256 handlers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolConfig {
    /// Largest message sent eagerly (one Eager frame); larger ones, and
    /// synchronous sends, use rendezvous.
    pub eager_threshold: u32,
    /// Size of the Data chunks of a rendezvous transfer.
    pub chunk_size: u32,
    /// Largest message (PSM: `u32::MAX` bytes).
    pub max_message: u64,
    /// Number of AM handler slots.
    pub max_am_handlers: u16,
    /// Most AM arguments per request or reply (at most 16).
    pub max_am_args: u16,
    /// Largest AM request or reply payload.
    pub max_am_payload: u32,
    /// Bytes the unexpected queue may hold, all peers together (each Eager
    /// message counts its payload plus [`ENTRY_OVERHEAD`]).
    pub unexpected_budget: u64,
    /// Eager credit one peer may hold at a time (a share of the budget).
    pub peer_eager_window: u64,
    /// Rendezvous requests one peer may have waiting unmatched.
    pub peer_rts_window: u32,
    /// AM requests one peer may have in flight (answered or not yet).
    pub peer_am_window: u32,
    /// Sends one connection may hold before they go on the wire; beyond
    /// it `send` answers `Again`.
    pub max_queued_sends: usize,
}

impl ProtocolConfig {
    /// The defaults: 64 KiB eager threshold, 256 KiB chunks, `u32::MAX`
    /// messages, PSM's AM limits, a 64 MiB unexpected budget shared in 4 MiB
    /// windows, 1024 rendezvous entries and 64 AM requests per peer.
    pub const DEFAULT: ProtocolConfig = ProtocolConfig {
        eager_threshold: 64 << 10,
        chunk_size: 256 << 10,
        max_message: u32::MAX as u64,
        max_am_handlers: 256,
        max_am_args: 10,
        max_am_payload: 8128,
        unexpected_budget: 64 << 20,
        peer_eager_window: 4 << 20,
        peer_rts_window: 1024,
        peer_am_window: 64,
        max_queued_sends: 4096,
    };

    /// What this side accepts on the wire (advertised in its Hello).
    pub fn frame_limits(&self) -> FrameLimits {
        FrameLimits {
            max_eager: self.eager_threshold,
            max_chunk: self.chunk_size,
            max_am_payload: self.max_am_payload,
            max_am_args: self.max_am_args,
            max_am_handlers: self.max_am_handlers,
            max_message: self.max_message,
        }
    }

    /// The limits an endpoint reports to the layers above.
    pub fn engine_limits(&self) -> EngineLimits {
        EngineLimits {
            max_message: self.max_message,
            eager_threshold: self.eager_threshold as usize,
            max_am_handlers: usize::from(self.max_am_handlers),
            max_am_args: usize::from(self.max_am_args),
            max_am_request: self.max_am_payload as usize,
            max_am_reply: self.max_am_payload as usize,
        }
    }

    /// Checks every field; the error names the one at fault.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::new(ErrorKind::Inval, what));
        if let Err(e) = self.frame_limits().validate() {
            return bad(format!("soft engine configuration: {e}"));
        }
        if self.peer_eager_window > self.unexpected_budget {
            return bad(format!(
                "soft engine configuration: peer_eager_window ({}) exceeds unexpected_budget ({})",
                self.peer_eager_window, self.unexpected_budget
            ));
        }
        if self.peer_eager_window < ENTRY_OVERHEAD && self.peer_eager_window != 0 {
            return bad(format!(
                "soft engine configuration: peer_eager_window ({}) is below one entry ({ENTRY_OVERHEAD} bytes); use 0 to disable eager sends",
                self.peer_eager_window
            ));
        }
        for (name, v) in [
            ("peer_rts_window", self.peer_rts_window),
            ("peer_am_window", self.peer_am_window),
        ] {
            if v == 0 {
                return bad(format!(
                    "soft engine configuration: {name} must be at least 1"
                ));
            }
        }
        if self.max_queued_sends == 0 {
            return bad("soft engine configuration: max_queued_sends must be at least 1".into());
        }
        Ok(())
    }
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        ProtocolConfig::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_psm_like() {
        let c = ProtocolConfig::default();
        c.validate().unwrap();
        let l = c.engine_limits();
        assert_eq!(
            (l.max_am_args, l.max_am_request, l.max_am_handlers),
            (10, 8128, 256)
        );
        assert_eq!(l.max_message, u64::from(u32::MAX));
    }

    #[test]
    fn invalid_fields_are_named() {
        let cases: [(ProtocolConfig, &str); 6] = [
            (
                ProtocolConfig {
                    chunk_size: 0,
                    ..ProtocolConfig::DEFAULT
                },
                "max_chunk",
            ),
            (
                ProtocolConfig {
                    max_am_args: 17,
                    ..ProtocolConfig::DEFAULT
                },
                "max_am_args",
            ),
            (
                ProtocolConfig {
                    peer_eager_window: 1 << 40,
                    ..ProtocolConfig::DEFAULT
                },
                "peer_eager_window",
            ),
            (
                ProtocolConfig {
                    peer_eager_window: 10,
                    ..ProtocolConfig::DEFAULT
                },
                "peer_eager_window",
            ),
            (
                ProtocolConfig {
                    peer_am_window: 0,
                    ..ProtocolConfig::DEFAULT
                },
                "peer_am_window",
            ),
            (
                ProtocolConfig {
                    max_queued_sends: 0,
                    ..ProtocolConfig::DEFAULT
                },
                "max_queued_sends",
            ),
        ];
        for (c, field) in cases {
            let e = c.validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Inval);
            assert!(e.message().contains(field), "{e}");
        }
    }
}
