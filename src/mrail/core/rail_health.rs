//! Which rails are in service: each rail's state from what is observed of
//! it (its link, the application disabling it), the back-off before a rail
//! whose link came back rejoins, and the events that tell the user.
//!
//! [`RailHealth`] is a plain state machine: the endpoint feeds it link
//! observations and the application's requests with the time they
//! happened, and reads the mask of rails in service
//! ([`live_mask`](RailHealth::live_mask)) and the [`RailEvent`]s to report.
//!
//! ```text
//!            link down / disabled
//!   Up ─────────────────────────────▶ Down
//!   ▲                                  │ link up and enabled
//!   │ back-off over                    ▼
//!   └──────────────────────────── Rejoining
//!              (link down again: back to Down, back-off doubled)
//! ```
//!
//! The back-off starts at [`BACKOFF_MIN`] and doubles, up to
//! [`BACKOFF_MAX`], each time a rail goes down again within
//! [`STABLE_AFTER`] of rejoining, so a flapping link is tried less and less
//! often; a rail that stayed up that long starts again from the minimum.
//!
//! Whether a peer is reachable on a rail is a separate, per-peer question
//! (a peer may close or die on one rail): the endpoint keeps that with
//! the peer, not here.

use std::time::{Duration, Instant};

/// The first back-off before a rail whose link came back rejoins.
pub const BACKOFF_MIN: Duration = Duration::from_millis(200);
/// The longest back-off.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long a rail must stay up for its back-off to start over.
pub const STABLE_AFTER: Duration = Duration::from_secs(10);

/// A rail's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RailState {
    /// In service.
    Up,
    /// Out of service: new traffic avoids it; what was in flight on it
    /// goes again on the other rails.
    Down,
    /// Its link is back; it rejoins when the back-off is over.
    Rejoining,
}

impl std::fmt::Display for RailState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RailState::Up => "up",
            RailState::Down => "down",
            RailState::Rejoining => "rejoining",
        })
    }
}

/// Why a rail changed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RailReason {
    /// Its network link went down (the interface lost its carrier or was
    /// set down).
    LinkDown,
    /// Its link is up again.
    LinkUp,
    /// The application took it out of service.
    Disabled,
    /// The application put it back.
    Enabled,
    /// The back-off is over.
    BackoffOver,
    /// The rail's endpoint refused work as a closed one does: it stays out
    /// of service.
    Closed,
}

impl std::fmt::Display for RailReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RailReason::LinkDown => "link down",
            RailReason::LinkUp => "link up",
            RailReason::Disabled => "disabled",
            RailReason::Enabled => "enabled",
            RailReason::BackoffOver => "back-off over",
            RailReason::Closed => "closed",
        })
    }
}

/// A rail's change of state, as reported to the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RailEvent {
    /// The rail.
    pub rail: usize,
    /// Its new state.
    pub state: RailState,
    /// Why.
    pub reason: RailReason,
    /// When it was observed.
    pub at: Instant,
}

#[derive(Clone, Copy, Debug)]
struct Rail {
    state: RailState,
    link_up: bool,
    disabled: bool,
    /// Closed under the endpoint: out for good.
    closed: bool,
    /// When the current back-off ends (state `Rejoining`).
    rejoin_at: Option<Instant>,
    backoff: Duration,
    /// When it last rejoined.
    up_since: Option<Instant>,
    /// How many times it went down.
    downs: u64,
}

/// The rails' states (module docs).
#[derive(Clone, Debug)]
pub struct RailHealth {
    rails: Vec<Rail>,
}

impl RailHealth {
    /// `n` rails, all up.
    pub fn new(n: usize) -> Self {
        RailHealth {
            rails: vec![
                Rail {
                    state: RailState::Up,
                    link_up: true,
                    disabled: false,
                    closed: false,
                    rejoin_at: None,
                    backoff: BACKOFF_MIN,
                    up_since: None,
                    downs: 0,
                };
                n
            ],
        }
    }

    /// The rails in service, as a bit mask.
    pub fn live_mask(&self) -> u64 {
        self.rails
            .iter()
            .enumerate()
            .filter(|(_, r)| r.state == RailState::Up)
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    /// Rail `rail`'s state (`Down` for a rail that does not exist).
    pub fn state(&self, rail: usize) -> RailState {
        self.rails.get(rail).map_or(RailState::Down, |r| r.state)
    }

    /// How many times rail `rail` went out of service.
    pub fn downs(&self, rail: usize) -> u64 {
        self.rails.get(rail).map_or(0, |r| r.downs)
    }

    /// The rail's link was seen up or down at `now`.
    pub fn observe_link(&mut self, rail: usize, up: bool, now: Instant) -> Option<RailEvent> {
        let r = self.rails.get_mut(rail)?;
        if r.link_up == up {
            return None;
        }
        r.link_up = up;
        if up {
            Self::maybe_rejoin(r, rail, RailReason::LinkUp, now)
        } else {
            Self::take_down(r, rail, RailReason::LinkDown, now)
        }
    }

    /// The application takes the rail out of service (`true`) or puts it
    /// back (`false`) at `now`. A rail put back whose link is up rejoins
    /// at once (no back-off: the application asked for it).
    pub fn set_disabled(&mut self, rail: usize, disabled: bool, now: Instant) -> Option<RailEvent> {
        let r = self.rails.get_mut(rail)?;
        if r.disabled == disabled || r.closed {
            return None;
        }
        r.disabled = disabled;
        if disabled {
            return Self::take_down(r, rail, RailReason::Disabled, now);
        }
        if !r.link_up {
            return None;
        }
        r.state = RailState::Up;
        r.rejoin_at = None;
        r.up_since = Some(now);
        Some(RailEvent {
            rail,
            state: RailState::Up,
            reason: RailReason::Enabled,
            at: now,
        })
    }

    /// The rail's endpoint is closed under it at `now`: it goes out of
    /// service and never rejoins.
    pub fn close(&mut self, rail: usize, now: Instant) -> Option<RailEvent> {
        let r = self.rails.get_mut(rail)?;
        r.closed = true;
        Self::take_down(r, rail, RailReason::Closed, now)
    }

    /// Rails whose back-off ended by `now` rejoin.
    pub fn tick(&mut self, now: Instant, out: &mut Vec<RailEvent>) {
        for (i, r) in self.rails.iter_mut().enumerate() {
            if r.state == RailState::Rejoining && r.rejoin_at.is_some_and(|t| t <= now) {
                r.state = RailState::Up;
                r.rejoin_at = None;
                r.up_since = Some(now);
                out.push(RailEvent {
                    rail: i,
                    state: RailState::Up,
                    reason: RailReason::BackoffOver,
                    at: now,
                });
            }
        }
    }

    /// When the next back-off ends, if a rail is rejoining.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.rails.iter().filter_map(|r| r.rejoin_at).min()
    }

    fn take_down(r: &mut Rail, rail: usize, reason: RailReason, now: Instant) -> Option<RailEvent> {
        if r.state == RailState::Down {
            return None;
        }
        if r.state == RailState::Up {
            r.downs += 1;
            // Down again soon after rejoining: wait longer next time.
            let flapped = r
                .up_since
                .is_some_and(|t| now.saturating_duration_since(t) < STABLE_AFTER);
            r.backoff = if flapped {
                (r.backoff * 2).min(BACKOFF_MAX)
            } else {
                BACKOFF_MIN
            };
        }
        r.state = RailState::Down;
        r.rejoin_at = None;
        Some(RailEvent {
            rail,
            state: RailState::Down,
            reason,
            at: now,
        })
    }

    fn maybe_rejoin(
        r: &mut Rail,
        rail: usize,
        reason: RailReason,
        now: Instant,
    ) -> Option<RailEvent> {
        if r.state != RailState::Down || r.disabled || r.closed {
            return None;
        }
        r.state = RailState::Rejoining;
        r.rejoin_at = Some(now + r.backoff);
        Some(RailEvent {
            rail,
            state: RailState::Rejoining,
            reason,
            at: now,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_that_goes_down_and_comes_back_rejoins_after_the_backoff() {
        let t0 = Instant::now();
        let mut h = RailHealth::new(3);
        assert_eq!(h.live_mask(), 0b111);
        let e = h.observe_link(1, false, t0).unwrap();
        assert_eq!(
            (e.rail, e.state, e.reason),
            (1, RailState::Down, RailReason::LinkDown)
        );
        assert_eq!(h.live_mask(), 0b101);
        assert!(h.observe_link(1, false, t0).is_none(), "no news, no event");
        let back = t0 + Duration::from_secs(3);
        let e = h.observe_link(1, true, back).unwrap();
        assert_eq!(e.state, RailState::Rejoining);
        assert_eq!(h.live_mask(), 0b101, "not before the back-off");
        let mut out = Vec::new();
        h.tick(back + BACKOFF_MIN / 2, &mut out);
        assert!(out.is_empty());
        assert_eq!(h.next_deadline(), Some(back + BACKOFF_MIN));
        h.tick(back + BACKOFF_MIN, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].state, out[0].reason),
            (RailState::Up, RailReason::BackoffOver)
        );
        assert_eq!(h.live_mask(), 0b111);
        assert_eq!(h.downs(1), 1);
    }

    #[test]
    fn flapping_doubles_the_backoff_and_stability_resets_it() {
        let mut now = Instant::now();
        let mut h = RailHealth::new(1);
        let mut out = Vec::new();
        let mut waits = Vec::new();
        for _ in 0..7 {
            h.observe_link(0, false, now);
            now += Duration::from_millis(10);
            h.observe_link(0, true, now);
            let until = h.next_deadline().unwrap();
            waits.push(until - now);
            now = until;
            h.tick(now, &mut out);
            assert_eq!(h.state(0), RailState::Up);
        }
        assert_eq!(waits[0], BACKOFF_MIN);
        assert_eq!(waits[1], BACKOFF_MIN * 2);
        assert_eq!(*waits.last().unwrap(), BACKOFF_MAX);
        now += STABLE_AFTER;
        h.observe_link(0, false, now);
        h.observe_link(0, true, now);
        assert_eq!(h.next_deadline().unwrap() - now, BACKOFF_MIN);
    }

    #[test]
    fn disabled_rails_stay_down_until_enabled() {
        let t = Instant::now();
        let mut h = RailHealth::new(2);
        let e = h.set_disabled(0, true, t).unwrap();
        assert_eq!(e.reason, RailReason::Disabled);
        assert_eq!(h.live_mask(), 0b10);
        // Its link flapping changes nothing while it is disabled.
        h.observe_link(0, false, t);
        assert!(h.observe_link(0, true, t).is_none());
        let e = h.set_disabled(0, false, t).unwrap();
        assert_eq!((e.state, e.reason), (RailState::Up, RailReason::Enabled));
        assert_eq!(h.live_mask(), 0b11);
        // Enabled while its link is down: it waits for the link.
        h.observe_link(1, false, t);
        h.set_disabled(1, true, t);
        assert!(h.set_disabled(1, false, t).is_none());
        assert_eq!(
            h.observe_link(1, true, t).unwrap().state,
            RailState::Rejoining
        );
        assert!(h.observe_link(9, false, t).is_none());
        // A closed rail never comes back.
        assert_eq!(h.close(0, t).unwrap().reason, RailReason::Closed);
        assert!(h.set_disabled(0, false, t).is_none());
        h.observe_link(0, false, t);
        assert!(h.observe_link(0, true, t).is_none());
        assert_eq!(h.state(0), RailState::Down);
        assert_eq!(h.state(9), RailState::Down);
    }
}
