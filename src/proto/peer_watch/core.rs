//! [`WatchCore`]: when a peer counts as dead, as a pure state machine (no
//! engine, no clock, no `/proc`: the edge feeds in the time, what arrived
//! and what the kernel said, and carries out the [`Action`]s).
//!
//! # Rules
//! * A peer is *watched* while operations towards it are outstanding (the
//!   edge names them at every [`tick`](WatchCore::tick)); nothing is done
//!   for other peers, so an idle job sends nothing.
//! * **Process.** A watched peer whose identity says it runs on this host
//!   (and is not this process) has its process looked at every
//!   `check_every`; exited, zombie or pid reused means dead. Such a peer
//!   gets no keepalives: its process says more than its silence (a peer
//!   that computes without progressing is not dead), and a closing one
//!   says bye.
//! * **Silence**, for the other watched peers (another host, or an
//!   identity not known yet). A peer not heard from for `ping_every` gets
//!   a hello (a keepalive), then another every `ping_every`; when the
//!   first keepalive since it was last heard has had no answer for
//!   `timeout - ping_every`, it is dead. So a peer that stops answering
//!   right after an answer is dead `timeout` later at most (one interval
//!   to the next keepalive, the rest waiting for it), and a gap in this
//!   side's own progress never kills anyone: silence is only counted from
//!   a keepalive sent. In manual progress a peer that does not progress
//!   for that long cannot answer and is indistinguishable from a dead one.
//!   `timeout == 0` turns this rule off.
//! * **Bye.** A peer that says its endpoint closes is dead.
//! * **Engine.** An engine error that means the peer is gone (the edge
//!   decides which) is dead.
//! * **First contact.** A newly connected peer gets one hello, so both sides
//!   learn each other's identity while both are likely progressing.
//!
//! Dead is final for the core: the peer is never watched or greeted again.

use super::identity::{Identity, ProcState};
use crate::engine::PeerAddr;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

/// Why a peer counts as dead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Evidence {
    /// It said goodbye: its endpoint closed.
    Bye,
    /// Its process (on this host) has exited.
    Exited { pid: u32 },
    /// Its process has exited and is a zombie.
    Zombie { pid: u32 },
    /// Its pid now names a process that started later.
    PidReused { pid: u32 },
    /// It did not answer keepalives for this long.
    Silent { timeout: Duration },
    /// The engine said so.
    Engine(String),
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Evidence::Bye => f.write_str("its endpoint closed (it said goodbye)"),
            Evidence::Exited { pid } => write!(f, "its process {pid} on this host has exited"),
            Evidence::Zombie { pid } => {
                write!(f, "its process {pid} on this host has exited (a zombie)")
            }
            Evidence::PidReused { pid } => write!(
                f,
                "its process {pid} on this host has exited (the pid now names a newer process)"
            ),
            Evidence::Silent { timeout } => write!(
                f,
                "no answer to keepalives for {timeout:?} (FI_PSM_TIMEOUT; in manual progress a \
                 peer that does not progress that long looks the same)"
            ),
            Evidence::Engine(what) => write!(f, "the engine reported: {what}"),
        }
    }
}

/// What the edge must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send a hello request to the peer.
    Hello(PeerAddr),
    /// Look at process `pid` (started at `start`) and report with
    /// [`WatchCore::on_process`].
    Check {
        peer: PeerAddr,
        pid: u32,
        start: u64,
    },
    /// The peer is dead.
    Dead(PeerAddr, Evidence),
}

/// The timing of the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WatchConfig {
    /// Silence allowed (`FI_PSM_TIMEOUT`); zero: no silence rule.
    pub timeout: Duration,
    /// Keepalive interval while watched and not heard from.
    pub ping_every: Duration,
    /// How long the first unanswered keepalive may wait for an answer:
    /// `timeout - ping_every` (at least `ping_every`).
    pub answer_within: Duration,
    /// Interval of process checks for same-host peers.
    pub check_every: Duration,
}

impl WatchConfig {
    /// The rules for `FI_PSM_TIMEOUT` = `timeout`: keepalives every quarter
    /// of it (1 ms to 1 s; none when it is zero), process checks every
    /// 2 ms.
    pub(crate) fn for_timeout(timeout: Duration) -> Self {
        let ping_every = (timeout / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
        WatchConfig {
            timeout,
            ping_every,
            answer_within: timeout.saturating_sub(ping_every).max(ping_every),
            check_every: Duration::from_millis(2),
        }
    }
}

#[derive(Debug, Default)]
struct PeerState {
    identity: Option<Identity>,
    last_heard: Option<Instant>,
    last_ping: Option<Instant>,
    /// The first keepalive sent since it was last heard.
    awaiting: Option<Instant>,
    last_check: Option<Instant>,
    /// The engine's activity count for it when last looked at.
    activity: u64,
    /// We greeted it or heard from it: it gets a bye when we close.
    contact: bool,
    dead: bool,
}

/// The liveness rules for one domain's peers (module docs).
#[derive(Debug)]
pub(crate) struct WatchCore {
    config: WatchConfig,
    me: Option<Identity>,
    peers: HashMap<PeerAddr, PeerState>,
    watched: HashSet<PeerAddr>,
}

fn due(last: Option<Instant>, every: Duration, now: Instant) -> bool {
    last.is_none_or(|t| now.saturating_duration_since(t) >= every)
}

impl WatchCore {
    /// A core for a process with identity `me` (`None`: unknown, no
    /// process checks).
    pub(crate) fn new(config: WatchConfig, me: Option<Identity>) -> Self {
        WatchCore {
            config,
            me,
            peers: HashMap::new(),
            watched: HashSet::new(),
        }
    }

    /// The rules in force.
    pub(crate) fn config(&self) -> WatchConfig {
        self.config
    }

    /// No hello can be sent or answered (the engine has no handler for
    /// them): silence says nothing, so its rule is off.
    pub(crate) fn mark_unanswerable(&mut self) {
        self.config.timeout = Duration::ZERO;
    }

    /// A peer was connected: greet it once (unless it is known already).
    pub(crate) fn greet(&mut self, peer: PeerAddr, now: Instant, out: &mut Vec<Action>) {
        let st = self.peers.entry(peer).or_default();
        if st.dead || st.contact {
            return;
        }
        st.contact = true;
        st.last_ping = Some(now);
        out.push(Action::Hello(peer));
    }

    /// One step at `now`: `outstanding` are the peers with operations
    /// outstanding (duplicates allowed).
    pub(crate) fn tick(&mut self, now: Instant, outstanding: &[PeerAddr], out: &mut Vec<Action>) {
        let before = std::mem::take(&mut self.watched);
        for &peer in outstanding {
            let st = self.peers.entry(peer).or_default();
            if !st.dead {
                self.watched.insert(peer);
            }
        }
        for peer in before.difference(&self.watched) {
            if let Some(st) = self.peers.get_mut(peer) {
                // Silence counts again from the next keepalive.
                st.awaiting = None;
            }
        }
        let me = self.me;
        let c = self.config;
        for &peer in &self.watched {
            let Some(st) = self.peers.get_mut(&peer) else {
                continue;
            };
            // Its process, if this process can look at it.
            let process = match (me, st.identity) {
                (Some(me), Some(id)) if me.same_host(&id) && id != me => Some(id),
                _ => None,
            };
            let this_process = matches!((me, st.identity), (Some(me), Some(id)) if id == me);
            if let Some(id) = process {
                if due(st.last_check, c.check_every, now) {
                    st.last_check = Some(now);
                    out.push(Action::Check {
                        peer,
                        pid: id.pid,
                        start: id.start,
                    });
                }
                continue;
            }
            // Keepalives serve the silence rule only: without it an
            // unanswered peer would collect them forever (and PSM's shared
            // memory waits for room in a full queue). This process is
            // alive by definition.
            if c.timeout.is_zero() || this_process {
                continue;
            }
            if let Some(a) = st.awaiting {
                if now.saturating_duration_since(a) >= c.answer_within {
                    st.dead = true;
                    out.push(Action::Dead(peer, Evidence::Silent { timeout: c.timeout }));
                    continue;
                }
            }
            if due(st.last_ping, c.ping_every, now) && due(st.last_heard, c.ping_every, now) {
                st.last_ping = Some(now);
                st.awaiting.get_or_insert(now);
                st.contact = true;
                out.push(Action::Hello(peer));
            }
        }
        self.watched
            .retain(|p| !self.peers.get(p).is_some_and(|s| s.dead));
    }

    /// A hello (request or reply) from `peer` arrived at `now`, with its
    /// identity if it sent one.
    pub(crate) fn on_hello(&mut self, peer: PeerAddr, identity: Option<Identity>, now: Instant) {
        let st = self.peers.entry(peer).or_default();
        st.last_heard = Some(now);
        st.awaiting = None;
        st.contact = true;
        if identity.is_some() {
            st.identity = identity;
        }
    }

    /// The engine's activity count for `peer` at `now`
    /// ([`EngineEndpoint::peer_activity`](crate::engine::EngineEndpoint::peer_activity)):
    /// a change since the last look is proof of life, as an answer to a
    /// keepalive is (what it sent may be queued behind a long transfer).
    /// 0, an engine that does not count, says nothing.
    pub(crate) fn on_activity(&mut self, peer: PeerAddr, activity: u64, now: Instant) {
        let Some(st) = self.peers.get_mut(&peer) else {
            return;
        };
        if activity != 0 && activity != st.activity {
            st.activity = activity;
            st.last_heard = Some(now);
            st.awaiting = None;
        }
    }

    /// A hello to `peer` could not be sent: try again at the next tick
    /// (silence counts from one that left).
    pub(crate) fn hello_failed(&mut self, peer: PeerAddr) {
        if let Some(st) = self.peers.get_mut(&peer) {
            if st.awaiting.is_some() && st.awaiting == st.last_ping {
                st.awaiting = None;
            }
            st.last_ping = None;
        }
    }

    /// `peer` said its endpoint closes.
    pub(crate) fn on_bye(&mut self, peer: PeerAddr) -> Option<Evidence> {
        self.kill(peer, Evidence::Bye)
    }

    /// The engine reported `peer` gone.
    pub(crate) fn on_engine_error(&mut self, peer: PeerAddr, what: String) -> Option<Evidence> {
        self.kill(peer, Evidence::Engine(what))
    }

    /// What the kernel said of `peer`'s process.
    pub(crate) fn on_process(&mut self, peer: PeerAddr, state: ProcState) -> Option<Evidence> {
        let pid = self.peers.get(&peer)?.identity?.pid;
        let evidence = match state {
            ProcState::Exited => Evidence::Exited { pid },
            ProcState::Zombie => Evidence::Zombie { pid },
            ProcState::Reused => Evidence::PidReused { pid },
            ProcState::Alive | ProcState::Unknown => return None,
        };
        self.kill(peer, evidence)
    }

    /// Records that `peer` is dead (learned elsewhere): it is no longer
    /// watched, greeted or said goodbye to.
    pub(crate) fn mark_dead(&mut self, peer: PeerAddr) {
        let st = self.peers.entry(peer).or_default();
        st.dead = true;
        self.watched.remove(&peer);
    }

    /// `peer`, declared dead, is there again: it is watched afresh, as if
    /// just heard from at `now`.
    pub(crate) fn revive(&mut self, peer: PeerAddr, now: Instant) {
        if let Some(st) = self.peers.get_mut(&peer) {
            st.dead = false;
            st.awaiting = None;
            st.last_heard = Some(now);
        }
    }

    fn kill(&mut self, peer: PeerAddr, evidence: Evidence) -> Option<Evidence> {
        let st = self.peers.entry(peer).or_default();
        if st.dead {
            return None;
        }
        st.dead = true;
        self.watched.remove(&peer);
        Some(evidence)
    }

    /// Whether `peer` is dead.
    #[cfg(test)]
    pub(crate) fn is_dead(&self, peer: PeerAddr) -> bool {
        self.peers.get(&peer).is_some_and(|s| s.dead)
    }

    /// Live peers we greeted or heard from: those to say goodbye to.
    pub(crate) fn contacts(&self) -> Vec<PeerAddr> {
        let mut v: Vec<PeerAddr> = self
            .peers
            .iter()
            .filter(|(_, s)| s.contact && !s.dead)
            .map(|(p, _)| *p)
            .collect();
        v.sort_unstable_by_key(|p| p.0);
        v
    }

    /// Peers watched now.
    pub(crate) fn watched(&self) -> usize {
        self.watched.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: PeerAddr = PeerAddr(1);
    const Q: PeerAddr = PeerAddr(2);
    const MS: Duration = Duration::from_millis(1);

    fn me() -> Identity {
        Identity {
            pid: 100,
            start: 5,
            host: 77,
        }
    }

    fn core(timeout_ms: u64) -> WatchCore {
        WatchCore::new(
            WatchConfig::for_timeout(Duration::from_millis(timeout_ms)),
            Some(me()),
        )
    }

    fn tick(c: &mut WatchCore, now: Instant, peers: &[PeerAddr]) -> Vec<Action> {
        let mut out = Vec::new();
        c.tick(now, peers, &mut out);
        out
    }

    fn deaths(actions: &[Action]) -> Vec<(PeerAddr, Evidence)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Dead(p, e) => Some((*p, e.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn idle_peers_get_nothing() {
        let mut c = core(1000);
        let t0 = Instant::now();
        c.on_hello(P, None, t0);
        for k in 0..100 {
            assert!(tick(&mut c, t0 + MS * k * 100, &[]).is_empty());
        }
        assert_eq!(c.watched(), 0);
    }

    #[test]
    fn a_silent_watched_peer_dies_a_timeout_after_its_last_answer() {
        let mut c = core(1000);
        let t0 = Instant::now();
        let first = tick(&mut c, t0, &[P, P]);
        assert_eq!(first, vec![Action::Hello(P)], "a keepalive at once");
        // Keepalives every 250 ms; the first waits 750 ms for an answer.
        let mut hellos = 0;
        for k in 1..750u32 {
            let out = tick(&mut c, t0 + MS * k, &[P]);
            assert!(deaths(&out).is_empty(), "dead too early at {k} ms");
            hellos += out.iter().filter(|a| **a == Action::Hello(P)).count();
        }
        assert_eq!(hellos, 2);
        let out = tick(&mut c, t0 + MS * 750, &[P]);
        assert_eq!(
            deaths(&out),
            vec![(
                P,
                Evidence::Silent {
                    timeout: Duration::from_secs(1)
                }
            )]
        );
        assert!(c.is_dead(P));
        // Dead is final: never watched or greeted again.
        assert!(tick(&mut c, t0 + MS * 5000, &[P]).is_empty());
        let mut out = Vec::new();
        c.greet(P, t0, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn answers_keep_a_peer_alive() {
        let mut c = core(1000);
        let t0 = Instant::now();
        tick(&mut c, t0, &[P]);
        for k in 1..5800u32 {
            let now = t0 + MS * k;
            if k % 400 == 0 && k <= 4800 {
                c.on_hello(P, None, now);
            }
            let out = tick(&mut c, now, &[P]);
            assert!(deaths(&out).is_empty(), "dead at {k} ms");
        }
        // Last heard at 4800, keepalive at 5050: dead at 5800.
        assert_eq!(deaths(&tick(&mut c, t0 + MS * 5800, &[P])).len(), 1);
    }

    #[test]
    fn engine_activity_keeps_a_peer_alive_and_zero_says_nothing() {
        // No keepalive is ever answered (the answers are stuck behind a
        // long transfer), but the engine keeps reading from the peer.
        let mut c = core(1000);
        let t0 = Instant::now();
        tick(&mut c, t0, &[P, Q]);
        for k in 1..5000u32 {
            let now = t0 + MS * k;
            c.on_activity(P, u64::from(k / 100) + 1, now);
            // An engine that does not count reports 0: not proof of life.
            c.on_activity(Q, 0, now);
            let out = tick(&mut c, now, &[P, Q]);
            let dead = deaths(&out);
            assert!(dead.iter().all(|(p, _)| *p == Q), "P dead at {k} ms");
        }
        assert!(c.is_dead(Q), "Q stayed silent: dead after the timeout");
        assert!(!c.is_dead(P));
        // The transfer ends, the count stops: silence counts from there.
        let last = t0 + MS * 4999;
        let mut died = None;
        for k in 1..2000u32 {
            let now = last + MS * k;
            c.on_activity(P, 50, now);
            if !deaths(&tick(&mut c, now, &[P])).is_empty() {
                died = Some(k);
                break;
            }
        }
        let k = died.expect("P dies once its activity stops");
        assert!(
            (700..=1100).contains(&k),
            "P died {k} ms after its last activity"
        );
    }

    #[test]
    fn silence_counts_from_a_keepalive_sent() {
        let mut c = core(1000);
        let t0 = Instant::now();
        c.on_hello(P, None, t0);
        // Watching starts 10 s later (or this side did not progress):
        // not dead, a keepalive first.
        let t1 = t0 + MS * 10_000;
        assert_eq!(tick(&mut c, t1, &[P]), vec![Action::Hello(P)]);
        assert!(deaths(&tick(&mut c, t1 + MS * 749, &[P])).is_empty());
        // Unwatched and watched again: the wait starts over.
        tick(&mut c, t1 + MS * 750 - MS / 2, &[]);
        let t2 = t1 + MS * 5000;
        assert_eq!(tick(&mut c, t2, &[P]), vec![Action::Hello(P)]);
        assert!(deaths(&tick(&mut c, t2 + MS * 749, &[P])).is_empty());
        assert_eq!(deaths(&tick(&mut c, t2 + MS * 750, &[P])).len(), 1);
    }

    #[test]
    fn same_host_peers_are_checked_not_pinged() {
        let mut c = core(1000);
        let t0 = Instant::now();
        c.on_hello(
            P,
            Some(Identity {
                pid: 200,
                start: 9,
                host: me().host,
            }),
            t0,
        );
        // A peer that never answers again but whose process runs: only
        // process checks, no keepalive, no death.
        for k in 0..10_000u32 {
            for a in tick(&mut c, t0 + MS * k, &[P]) {
                assert!(matches!(a, Action::Check { .. }), "{a:?} at {k} ms");
            }
        }
        assert!(!c.is_dead(P));
    }

    #[test]
    fn zero_timeout_has_no_silence_rule_nor_keepalives() {
        let mut c = core(0);
        let t0 = Instant::now();
        assert!(tick(&mut c, t0, &[P]).is_empty());
        // The greeting still teaches identities, hence process checks.
        let mut out = Vec::new();
        c.greet(P, t0, &mut out);
        assert_eq!(out, vec![Action::Hello(P)]);
        c.on_hello(
            P,
            Some(Identity {
                pid: 3,
                start: 4,
                host: 1,
            }),
            t0,
        );
        for k in 1..100_000u32 {
            let out = tick(&mut c, t0 + MS * k, &[P]);
            assert!(out.is_empty(), "{out:?} at {k} ms");
        }
    }

    #[test]
    fn same_host_processes_are_checked_every_few_ms() {
        let mut c = core(1000);
        let t0 = Instant::now();
        let other = Identity {
            pid: 200,
            start: 9,
            host: me().host,
        };
        c.on_hello(P, Some(other), t0);
        // Another host: never checked.
        c.on_hello(
            Q,
            Some(Identity {
                pid: 200,
                start: 9,
                host: 78,
            }),
            t0,
        );
        let mut checks = 0;
        for k in 0..100u32 {
            for a in tick(&mut c, t0 + MS * k, &[P, Q]) {
                if let Action::Check { peer, pid, start } = a {
                    assert_eq!((peer, pid, start), (P, 200, 9));
                    checks += 1;
                }
            }
        }
        assert_eq!(checks, 50);
        assert_eq!(c.on_process(P, ProcState::Alive), None);
        assert_eq!(c.on_process(P, ProcState::Unknown), None);
        assert_eq!(
            c.on_process(P, ProcState::Exited),
            Some(Evidence::Exited { pid: 200 })
        );
        assert_eq!(c.on_process(P, ProcState::Zombie), None, "dead once");
        assert_eq!(
            c.on_process(Q, ProcState::Reused),
            Some(Evidence::PidReused { pid: 200 })
        );
    }

    #[test]
    fn this_process_is_never_checked() {
        let mut c = core(1000);
        let t0 = Instant::now();
        c.on_hello(P, Some(me()), t0);
        for k in 0..100u32 {
            let out = tick(&mut c, t0 + MS * k, &[P]);
            assert!(!out.iter().any(|a| matches!(a, Action::Check { .. })));
        }
    }

    #[test]
    fn bye_and_engine_errors_kill_once() {
        let mut c = core(1000);
        assert_eq!(c.on_bye(P), Some(Evidence::Bye));
        assert_eq!(c.on_bye(P), None);
        assert_eq!(
            c.on_engine_error(Q, "Io".into()),
            Some(Evidence::Engine("Io".into()))
        );
        assert_eq!(c.on_engine_error(Q, "Io".into()), None);
        assert!(c.contacts().is_empty());
    }

    #[test]
    fn first_contact_greets_once_and_contacts_get_byes() {
        let mut c = core(1000);
        let t0 = Instant::now();
        let mut out = Vec::new();
        c.greet(P, t0, &mut out);
        c.greet(P, t0, &mut out);
        assert_eq!(out, vec![Action::Hello(P)]);
        c.on_hello(Q, None, t0);
        assert_eq!(c.contacts(), vec![P, Q]);
        c.mark_dead(P);
        assert_eq!(c.contacts(), vec![Q]);
        // A greeting is also the first keepalive.
        assert!(tick(&mut c, t0 + MS, &[Q]).is_empty(), "heard 1 ms ago");
    }

    #[test]
    fn a_failed_hello_is_retried_at_the_next_tick() {
        let mut c = core(1000);
        let t0 = Instant::now();
        assert_eq!(tick(&mut c, t0, &[P]), vec![Action::Hello(P)]);
        assert!(tick(&mut c, t0 + MS, &[P]).is_empty());
        c.hello_failed(P);
        assert_eq!(tick(&mut c, t0 + MS * 2, &[P]), vec![Action::Hello(P)]);
    }

    #[test]
    fn evidence_reads_well() {
        let e = Evidence::Exited { pid: 42 }.to_string();
        assert!(e.contains("42") && e.contains("exited"), "{e}");
        assert!(Evidence::Silent {
            timeout: Duration::from_secs(1)
        }
        .to_string()
        .contains("FI_PSM_TIMEOUT"));
    }

    #[derive(Debug, Clone)]
    enum Ev {
        Tick(u16, Vec<u8>),
        Hello(u8),
        Bye(u8),
        Proc(u8, u8),
    }

    fn ev() -> impl Strategy<Value = Ev> {
        prop_oneof![
            (0u16..2000, proptest::collection::vec(0u8..4, 0..4)).prop_map(|(t, p)| Ev::Tick(t, p)),
            (0u8..4).prop_map(Ev::Hello),
            (0u8..4).prop_map(Ev::Bye),
            (0u8..4, 0u8..5).prop_map(|(p, s)| Ev::Proc(p, s)),
        ]
    }

    proptest! {
        /// Whatever happens: a peer dies at most once; a silent death
        /// follows a keepalive unanswered for `answer_within` while
        /// watched; and such a peer does die at the first tick after that.
        #[test]
        fn deaths_are_single_and_timely(events in proptest::collection::vec(ev(), 0..80)) {
            let mut c = core(500);
            let within = c.config().answer_within;
            let t0 = Instant::now();
            let mut now = t0;
            let mut dead = HashSet::new();
            let mut first: HashMap<PeerAddr, Instant> = HashMap::new();
            for e in events {
                match e {
                    Ev::Tick(dt, peers) => {
                        now += MS * u32::from(dt);
                        let peers: Vec<PeerAddr> = peers.iter().map(|&p| PeerAddr(p.into())).collect();
                        first.retain(|p, _| peers.contains(p));
                        let out = tick(&mut c, now, &peers);
                        for a in &out {
                            match a {
                                Action::Dead(p, ev) => {
                                    prop_assert!(dead.insert(*p), "{p:?} died twice");
                                    if matches!(ev, Evidence::Silent { .. }) {
                                        let f = first.get(p).copied();
                                        prop_assert!(
                                            f.is_some_and(|f| now.duration_since(f) >= within),
                                            "{p:?} died of silence too early"
                                        );
                                    }
                                }
                                Action::Hello(p) => {
                                    first.entry(*p).or_insert(now);
                                }
                                Action::Check { .. } => {}
                            }
                        }
                        for p in &peers {
                            if first.get(p).is_some_and(|f| now.duration_since(*f) >= within) {
                                prop_assert!(dead.contains(p), "{p:?} silent yet alive");
                            }
                        }
                    }
                    Ev::Hello(p) => {
                        let p = PeerAddr(p.into());
                        c.on_hello(p, None, now);
                        first.remove(&p);
                    }
                    Ev::Bye(p) => {
                        let p = PeerAddr(p.into());
                        if c.on_bye(p).is_some() {
                            prop_assert!(dead.insert(p), "{p:?} died twice");
                        }
                    }
                    Ev::Proc(p, s) => {
                        let p = PeerAddr(p.into());
                        let state = [ProcState::Alive, ProcState::Exited, ProcState::Zombie,
                                     ProcState::Reused, ProcState::Unknown][s as usize];
                        if c.on_process(p, state).is_some() {
                            prop_assert!(dead.insert(p), "{p:?} died twice");
                        }
                    }
                }
            }
        }
    }
}
