//! Links that outlive their transport: the edge's half of resumption.
//!
//! When a connection's socket fails (EOF, a reset, a write error) after
//! its handshake, the core keeps the connection's link
//! ([`SoftCore::detach`](super::SoftCore::detach)): its operations stay
//! pending and new ones queue. The edge then tries to give it a new
//! transport, for up to the endpoint's close timeout (`FI_PSM_TIMEOUT`,
//! counted from the failure):
//!
//! * **The dialer's side** dials the peer again (Unix socket first, then
//!   TCP, as any dial) and, once connected, asks the core to resume the
//!   link on it ([`SoftCore::resume`](super::SoftCore::resume)). A dial
//!   that fails is tried again after a pause that doubles from 5 ms to
//!   250 ms.
//! * **The acceptor's side** waits for the dialer's new connection, which
//!   the core ties to the link by its id (`Event::Resumed`). Meanwhile it
//!   looks, at the same pace, whether anything still listens at the
//!   peer's address: nothing there means the peer's endpoint is gone.
//!
//! The link ends, failing what is pending on it as a lost transport did
//! before, when nothing listens at the peer's address any more (its
//! process or endpoint is gone: found within milliseconds), when the peer
//! refuses the link (it no longer has it), or when the time runs out. A
//! close timeout of zero ends links at their first failure.

use super::endpoint::Inner;
use super::protocol::ConnId;
use super::transport::{dial_epid, Link, LinkId, LinkPhase, Pipe, Polled, Remote};
use crate::engine::Epid;
use crate::ErrorKind;
use std::time::{Duration, Instant};

/// The first pause between two attempts.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
/// The longest pause between two attempts.
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// A detached connection waiting for a new transport.
#[derive(Debug)]
pub(crate) struct Detached {
    epid: Epid,
    /// This side dialed the connection (and dials again).
    dialer: bool,
    /// When the link is given up.
    deadline: Instant,
    /// When the next attempt may start.
    next_try: Instant,
    pause: Duration,
    /// The attempt under way.
    attempt: Option<LinkId>,
}

impl Inner {
    /// Link `i`'s transport failed under connection `conn` (already taken
    /// off the link): whether the link goes on, detached, waiting for a
    /// new transport. `false`: the caller ends the connection.
    pub(crate) fn try_detach(&mut self, i: usize, conn: ConnId) -> bool {
        if self.closed || self.close_timeout.is_zero() {
            return false;
        }
        let dialer = matches!(
            self.core.connection_role(conn),
            Some(super::Role::Dialer { .. })
        );
        let epid = self
            .core
            .connection_peer(conn)
            .and_then(|p| self.core.peer_epid(p));
        let Some(epid) = epid else {
            return false;
        };
        if !self.core.detach(conn) {
            return false;
        }
        self.links[i].superseded = true;
        let now = Instant::now();
        let close_timeout = self.close_timeout;
        let entry = self.detached.entry(conn).or_insert_with(|| Detached {
            epid,
            dialer,
            deadline: now.checked_add(close_timeout).unwrap_or(now),
            next_try: now,
            pause: FIRST_PAUSE,
            attempt: None,
        });
        entry.attempt = None;
        self.stats.detached += 1;
        tracing::debug!(?conn, %epid, dialer, "soft engine: a connection lost its transport; its link waits for a new one");
        true
    }

    /// Starts the reconnection attempts that are due and gives up links
    /// whose time ran out; whether anything happened.
    pub(crate) fn reconnect_due(&mut self) -> bool {
        if self.detached.is_empty() {
            return false;
        }
        let now = Instant::now();
        let mut made = false;
        let conns: Vec<ConnId> = self.detached.keys().copied().collect();
        for conn in conns {
            use super::ConnPhase::{Detached as Waiting, Resuming};
            if !matches!(self.core.connection_phase(conn), Some(Waiting | Resuming)) {
                // Resumed, or ended meanwhile.
                self.detached.remove(&conn);
                continue;
            }
            let d = &self.detached[&conn];
            if now >= d.deadline {
                let t = self.close_timeout;
                self.abandon(
                    conn,
                    format!("no new connection to the peer within {t:?} (FI_PSM_TIMEOUT)"),
                );
                made = true;
                continue;
            }
            let busy = d
                .attempt
                .and_then(|id| self.link_index(id))
                .is_some_and(|i| self.links[i].is_live());
            if busy || now < d.next_try {
                continue;
            }
            let (epid, dialer) = (d.epid, d.dialer);
            made = true;
            match self.reconnect(conn, epid, !dialer) {
                Ok(id) => {
                    if let Some(d) = self.detached.get_mut(&conn) {
                        d.attempt = id;
                    }
                }
                Err((kind, why)) => self.attempt_failed(conn, kind, why),
            }
        }
        made
    }

    /// Dials `epid` for detached `conn`: to resume it, or (`probe`) only
    /// to see whether the peer still listens. `Ok(None)` when the attempt
    /// is over already (a probe answered at once).
    fn reconnect(
        &mut self,
        conn: ConnId,
        epid: Epid,
        probe: bool,
    ) -> Result<Option<LinkId>, (ErrorKind, String)> {
        let (stream, remote, phase) = dial_epid(epid, &self.cfg)?;
        if probe && remote == Remote::Unix {
            // Something listens at the peer's name: it is alive.
            self.probe_answered(conn);
            return Ok(None);
        }
        let id = self.new_link_id();
        let mut link = Link::new(id, Pipe::Stream(stream), remote, phase);
        link.expect = Some(epid);
        link.resumes = Some(conn);
        link.probe = probe;
        let timeout = self.cfg.handshake_timeout.min(MAX_PAUSE * 8);
        link.timeout = timeout;
        link.deadline = Instant::now().checked_add(timeout);
        if phase == LinkPhase::Handshaking {
            self.core
                .resume(conn)
                .map_err(|e| (ErrorKind::Io, e.to_string()))?;
            link.conn = Some(conn);
        }
        self.add_dial_link(link);
        Ok(Some(id))
    }

    /// A TCP connect of a reconnection attempt (link `i`) completed.
    pub(crate) fn reconnected(&mut self, i: usize, conn: ConnId) {
        if self.links[i].probe {
            self.kill(i);
            self.probe_answered(conn);
            return;
        }
        if let Err(e) = self.core.resume(conn) {
            self.lose(i, ErrorKind::Io, e.to_string());
            return;
        }
        let link = &mut self.links[i];
        link.conn = Some(conn);
        link.phase = LinkPhase::Handshaking;
        let id = link.id;
        self.by_conn.insert(conn, id);
        self.set_polled(i, Polled::Hot);
        self.transmit(i);
    }

    /// The peer of detached `conn` still listens: look again later.
    fn probe_answered(&mut self, conn: ConnId) {
        if let Some(d) = self.detached.get_mut(&conn) {
            d.attempt = None;
            d.next_try = Instant::now() + d.pause;
            d.pause = (d.pause * 2).min(MAX_PAUSE);
        }
    }

    /// A reconnection attempt for `conn` failed: nothing listening at
    /// the peer's address ends the link; anything else is tried again
    /// after a pause.
    pub(crate) fn attempt_failed(&mut self, conn: ConnId, kind: ErrorKind, why: String) {
        if kind == ErrorKind::ConnRefused {
            self.abandon(
                conn,
                format!("the peer is gone: nothing listens at its address any more ({why})"),
            );
            return;
        }
        tracing::debug!(?conn, %why, "soft engine: a reconnection attempt failed; trying again");
        self.probe_answered(conn);
    }

    /// Gives up detached `conn`: what is pending on it fails.
    fn abandon(&mut self, conn: ConnId, why: String) {
        if let Some(d) = self.detached.remove(&conn) {
            if let Some(i) = d.attempt.and_then(|id| self.link_index(id)) {
                self.links[i].conn = None;
                self.kill(i);
            }
        }
        self.stats.abandoned += 1;
        tracing::debug!(?conn, %why, "soft engine: gave up a detached link");
        self.by_conn.remove(&conn);
        self.core.connection_lost(conn, why);
        self.drain_events();
    }

    /// Gives up every detached link (the endpoint closes).
    pub(crate) fn abandon_all(&mut self, why: &str) {
        let conns: Vec<ConnId> = self.detached.keys().copied().collect();
        for conn in conns {
            self.abandon(conn, why.to_owned());
        }
    }

    /// The core resumed `conn`'s link; on the acceptor's side its new
    /// transport is the one accepted as `replaced`.
    pub(crate) fn on_resumed(&mut self, conn: ConnId, replaced: Option<ConnId>) {
        let i = match replaced {
            Some(n) => {
                let Some(i) = self
                    .by_conn
                    .remove(&n)
                    .and_then(|id| self.link_index(id))
                    .filter(|&i| self.links[i].conn == Some(n))
                else {
                    // No transport for it after all: it waits again.
                    self.core.detach(conn);
                    return;
                };
                // The link's old transport, if we did not see it break:
                // its bytes are not the peer's any more.
                for j in 0..self.links.len() {
                    if j != i && self.links[j].conn == Some(conn) {
                        let old = &mut self.links[j];
                        old.conn = None;
                        old.superseded = true;
                        old.peer_gone = true;
                        self.kill(j);
                    }
                }
                let id = self.links[i].id;
                self.links[i].conn = Some(conn);
                self.by_conn.insert(conn, id);
                i
            }
            None => {
                let Some(i) = self.conn_index(conn) else {
                    return;
                };
                i
            }
        };
        self.detached.remove(&conn);
        self.stats.resumed += 1;
        let link = &mut self.links[i];
        link.phase = LinkPhase::Open;
        link.deadline = None;
        link.resumes = None;
        if link.polled == Polled::Cold {
            link.read_size = super::transport::FIRST_READ;
        }
        let remote = link.remote;
        tracing::info!(?conn, %remote, "soft engine: a connection's link resumed on a new transport");
        if self.links[i].stream().is_some() {
            self.set_polled(i, Polled::Hot);
        }
        self.transmit(i);
    }
}
