//! The rules for moving one link from its Unix socket onto a shared
//! segment: which of the three frames ([`ShmOffer`](Frame::ShmOffer),
//! [`ShmSwitch`](Frame::ShmSwitch), [`ShmDecline`](Frame::ShmDecline))
//! each side may send and accept, and when, as a pure state machine the
//! core keeps per connection ([`ShmSwitch`]).
//!
//! # The exchange
//!
//! ```text
//! dialer (creates the segment)          acceptor
//!   ShmOffer  + memfd, 2 eventfds  --->   maps and checks it
//!                                  <---   ShmSwitch   (its frames now in the ring)
//!   reads from the ring
//!   ShmSwitch                      --->   reads from the ring
//!   (its frames now in the ring)
//! ```
//!
//! or the acceptor answers `ShmDecline` and the link stays on the
//! socket. Each direction moves on its own: a side's frames after its
//! `ShmSwitch` are in the ring, so the receiver decodes nothing more from
//! the socket after that frame (input pauses until the edge reads from
//! the ring), and the sender appends nothing after it to what goes on the
//! socket (output pauses until the edge writes to the ring). The three
//! frames are outside the link's numbered stream, like the handshake: a
//! resumed link (a new transport) starts from [`ShmSwitch::default`]
//! again and is never replayed one of them.

use crate::engine::soft::wire::{Frame, FrameKind};

/// Where a connection stands in the exchange.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Nothing offered.
    #[default]
    Idle,
    /// Dialer: offer sent, answer awaited.
    Offered,
    /// Acceptor: offer received; the edge decides.
    Received,
    /// Acceptor: its ShmSwitch is queued or sent; the dialer's awaited.
    Answered,
    /// Dialer: the acceptor moved; its own ShmSwitch is next.
    PeerMoved,
    /// Both directions moved (or are moving).
    Moved,
    /// The link stays on its socket.
    Declined,
}

/// One connection's side of the exchange (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ShmSwitch {
    /// Where it stands.
    pub stage: Stage,
    /// The peer's ShmSwitch was decoded: nothing more is decoded until
    /// the edge reads from the segment ([`reads_moved`](Self::reads_moved)).
    pub input_paused: bool,
    /// Our ShmSwitch went into the output: nothing more is appended
    /// until the edge writes to the segment
    /// ([`writes_moved`](Self::writes_moved)).
    pub output_paused: bool,
}

/// What a received exchange frame asks of the edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShmNotice {
    /// Acceptor: an offer of a segment of this length came (its
    /// descriptors came with the socket bytes that carried it).
    Offered {
        /// The segment length the frame names.
        segment_len: u64,
    },
    /// The peer's frames now come through the segment.
    PeerMoved,
    /// Dialer: the acceptor declined.
    Declined,
}

impl ShmSwitch {
    /// Dialer: offers a segment of `segment_len` bytes; the frame to
    /// queue, or `None` when this connection cannot offer now (already
    /// offered, or an acceptor).
    pub(crate) fn offer(&mut self, dialer: bool, segment_len: u64) -> Option<Frame> {
        if !dialer || self.stage != Stage::Idle {
            return None;
        }
        self.stage = Stage::Offered;
        Some(Frame::ShmOffer { segment_len })
    }

    /// Acceptor: the edge's answer to an offer; the frame to queue
    /// (`ShmSwitch` when `accept`, `ShmDecline` otherwise), or `None` when
    /// no offer waits for one.
    pub(crate) fn answer(&mut self, accept: bool) -> Option<Frame> {
        if self.stage != Stage::Received {
            return None;
        }
        if accept {
            self.stage = Stage::Answered;
            Some(Frame::ShmSwitch)
        } else {
            self.stage = Stage::Declined;
            Some(Frame::ShmDecline)
        }
    }

    /// Dialer: after the acceptor moved and the edge reads from the
    /// segment, its own move; the frame to queue, or `None` out of turn.
    pub(crate) fn follow(&mut self) -> Option<Frame> {
        if self.stage != Stage::PeerMoved {
            return None;
        }
        self.stage = Stage::Moved;
        Some(Frame::ShmSwitch)
    }

    /// A received exchange frame (`dialer`: this side dialed). `Err` (the
    /// frame's kind) for one out of turn: the connection is closed.
    pub(crate) fn on_frame(&mut self, dialer: bool, frame: &Frame) -> Result<ShmNotice, FrameKind> {
        let unexpected = || frame.kind();
        let notice = match (frame, dialer, self.stage) {
            (Frame::ShmOffer { segment_len }, false, Stage::Idle) => {
                self.stage = Stage::Received;
                ShmNotice::Offered {
                    segment_len: *segment_len,
                }
            }
            (Frame::ShmSwitch, true, Stage::Offered) => {
                self.stage = Stage::PeerMoved;
                self.input_paused = true;
                ShmNotice::PeerMoved
            }
            (Frame::ShmSwitch, false, Stage::Answered) => {
                self.stage = Stage::Moved;
                self.input_paused = true;
                ShmNotice::PeerMoved
            }
            (Frame::ShmDecline, true, Stage::Offered) => {
                self.stage = Stage::Declined;
                ShmNotice::Declined
            }
            _ => return Err(unexpected()),
        };
        Ok(notice)
    }

    /// Our ShmSwitch was encoded into the output.
    pub(crate) fn switch_sent(&mut self) {
        self.output_paused = true;
    }

    /// The edge now writes this connection's frames to the segment.
    pub(crate) fn writes_moved(&mut self) {
        self.output_paused = false;
    }

    /// The edge now reads this connection's input from the segment.
    pub(crate) fn reads_moved(&mut self) {
        self.input_paused = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exchange_moves_both_directions_in_turn() {
        let (mut d, mut a) = (ShmSwitch::default(), ShmSwitch::default());
        let offer = d.offer(true, 4096).unwrap();
        assert_eq!(
            a.on_frame(false, &offer),
            Ok(ShmNotice::Offered { segment_len: 4096 })
        );
        let sw = a.answer(true).unwrap();
        assert_eq!(sw, Frame::ShmSwitch);
        a.switch_sent();
        assert!(a.output_paused);
        a.writes_moved();
        assert_eq!(d.on_frame(true, &sw), Ok(ShmNotice::PeerMoved));
        assert!(d.input_paused);
        d.reads_moved();
        let back = d.follow().unwrap();
        assert_eq!(d.follow(), None, "one move per side");
        assert_eq!(a.on_frame(false, &back), Ok(ShmNotice::PeerMoved));
        assert_eq!((a.stage, d.stage), (Stage::Moved, Stage::Moved));
    }

    #[test]
    fn a_decline_keeps_the_socket() {
        let (mut d, mut a) = (ShmSwitch::default(), ShmSwitch::default());
        let offer = d.offer(true, 1 << 20).unwrap();
        a.on_frame(false, &offer).unwrap();
        let no = a.answer(false).unwrap();
        assert_eq!(d.on_frame(true, &no), Ok(ShmNotice::Declined));
        assert_eq!(d.offer(true, 1 << 20), None, "one offer per transport");
        assert!(!d.input_paused && !a.output_paused);
    }

    #[test]
    fn frames_out_of_turn_are_violations() {
        let offer = Frame::ShmOffer { segment_len: 1 };
        // An acceptor never offers, a dialer never takes an offer.
        assert_eq!(ShmSwitch::default().offer(false, 1), None);
        assert_eq!(
            ShmSwitch::default().on_frame(true, &offer),
            Err(FrameKind::ShmOffer)
        );
        // A switch or decline nobody asked for.
        for f in [Frame::ShmSwitch, Frame::ShmDecline] {
            for dialer in [false, true] {
                assert!(ShmSwitch::default().on_frame(dialer, &f).is_err());
            }
        }
        // A second offer, a switch before the answer, an answer twice.
        let mut a = ShmSwitch::default();
        a.on_frame(false, &offer).unwrap();
        assert!(a.on_frame(false, &offer).is_err());
        assert!(a.on_frame(false, &Frame::ShmSwitch).is_err());
        assert!(a.answer(true).is_some());
        assert_eq!(a.answer(true), None);
        // The acceptor's decline may not come after it switched.
        let mut d = ShmSwitch::default();
        d.offer(true, 1).unwrap();
        d.on_frame(true, &Frame::ShmSwitch).unwrap();
        assert!(d.on_frame(true, &Frame::ShmDecline).is_err());
        assert!(d.on_frame(true, &Frame::ShmSwitch).is_err());
    }
}
