//! How long a send waits for a rail to its peer.
//!
//! A send to a peer that no rail serves at the moment, but that one may
//! serve soon (a first connect under way, a rail rejoining, a connect
//! tried again after a back-off), waits instead of failing. How long
//! depends on what is known of the peer:
//!
//! * a peer no rail has reached yet waits for its first connects as long
//!   as the address vector lets a connect take: a job's first
//!   all-to-all, every rank dialing every other at once, takes seconds on
//!   a loaded host, and a connect cut short there (the peer closed or
//!   reset the connection during its handshake) is simply tried again;
//! * a peer that was reached before and lost its rails, or where a
//!   connect found nothing listening (`FI_ECONNREFUSED`: the peer may be
//!   gone), waits `FI_PSM_TIMEOUT`.
//!
//! Both bounds count from the post. The driver keeps a [`SendWait`] with
//! each waiting send and asks it for the deadline each time it looks at
//! the send.

use crate::ErrorKind;
use std::time::{Duration, Instant};

/// The two bounds of one waiting send (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SendWait {
    /// `FI_PSM_TIMEOUT` after the post.
    until: Instant,
    /// The connect timeout after the post for a peer no rail has reached
    /// (never before `until`), else `until`.
    first_until: Instant,
}

impl SendWait {
    /// The bounds of a send posted at `now` to a peer that `reached`
    /// (some rail connected to it before) or not.
    pub(crate) fn new(
        now: Instant,
        psm_timeout: Duration,
        connect_timeout: Duration,
        reached: bool,
    ) -> SendWait {
        let until = now.checked_add(psm_timeout).unwrap_or(now);
        let first_until = if reached {
            until
        } else {
            until.max(now.checked_add(connect_timeout).unwrap_or(until))
        };
        SendWait { until, first_until }
    }

    /// When the send fails if no rail serves its peer by then; `refused`:
    /// a connect to the peer found nothing listening.
    pub(crate) fn deadline(&self, refused: bool) -> Instant {
        if refused {
            self.until
        } else {
            self.first_until
        }
    }
}

/// Whether a connect that failed with `kind` says the peer may be gone
/// (nothing listens at its address), as opposed to a try cut short that is
/// worth another while the peer's first connects may take.
pub(crate) fn says_gone(kind: ErrorKind) -> bool {
    kind == ErrorKind::ConnRefused
}

#[cfg(test)]
mod tests {
    use super::*;

    const PSM: Duration = Duration::from_secs(5);
    const CONNECT: Duration = Duration::from_secs(30);

    #[test]
    fn a_peer_never_reached_waits_the_connect_timeout() {
        let now = Instant::now();
        let w = SendWait::new(now, PSM, CONNECT, false);
        assert_eq!(w.deadline(false), now + CONNECT);
    }

    #[test]
    fn a_peer_where_nothing_listens_waits_the_psm_timeout() {
        let now = Instant::now();
        let w = SendWait::new(now, PSM, CONNECT, false);
        assert_eq!(w.deadline(true), now + PSM);
    }

    #[test]
    fn a_peer_reached_before_waits_the_psm_timeout() {
        let now = Instant::now();
        let w = SendWait::new(now, PSM, CONNECT, true);
        assert_eq!(w.deadline(false), now + PSM);
        assert_eq!(w.deadline(true), now + PSM);
    }

    #[test]
    fn a_connect_timeout_below_the_psm_timeout_never_shortens_the_wait() {
        let now = Instant::now();
        let w = SendWait::new(now, PSM, Duration::from_secs(1), false);
        assert_eq!(w.deadline(false), now + PSM);
    }

    #[test]
    fn only_nothing_listening_says_the_peer_may_be_gone() {
        assert!(says_gone(ErrorKind::ConnRefused));
        // A handshake the peer cut short, a reset, a handshake that took
        // too long: the peer is there, busy.
        for kind in [ErrorKind::Io, ErrorKind::TimedOut, ErrorKind::Again] {
            assert!(!says_gone(kind), "{kind:?}");
        }
    }
}
