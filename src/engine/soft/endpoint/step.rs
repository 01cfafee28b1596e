//! One progress step: which links to service (the pollers' readiness,
//! the watched links), and servicing one: a dial that completes, reads,
//! writes.

use super::*;

impl Inner {
    /// One step (see the module docs); whether anything moved.
    pub(crate) fn step(&mut self, accept: bool) -> bool {
        let mut made = false;
        self.begin_round();
        self.more = false;
        self.steps = self.steps.wrapping_add(1);
        let look = accept || self.registry.is_some() || self.steps % ACCEPT_EVERY == 0;
        let mut todo = std::mem::take(&mut self.todo);
        todo.clear();
        if self.readiness(look, &mut todo) {
            made |= self.accept_all();
        }
        if look && self.cold_links > 0 {
            self.cold_ready(&mut todo);
        }
        if look && self.lifeline_links > 0 {
            let lifeline = &mut self.lifeline;
            if lifeline
                .ready(|token| todo.push((LinkId(token), true)))
                .is_err()
            {
                todo.extend(self.shm_links.iter().map(|id| (*id, true)));
            }
        }
        // Shared-memory links: their rings are looked at every step.
        todo.extend(self.shm_links.iter().map(|id| (*id, false)));
        // The listed links come after the ready ones (which are read).
        let mut watch = std::mem::take(&mut self.watch);
        for &id in &watch {
            todo.push((id, false));
            if let Some(i) = self.slot(id) {
                self.links[i].watched = false;
            }
        }
        watch.clear();
        self.watch = watch;
        if let Some((a, b)) = self.loopback {
            todo.push((a, true));
            todo.push((b, true));
        }
        let stamp = self.steps;
        let mut now = None;
        for &(id, readable) in &todo {
            let Some(i) = self.slot(id) else {
                continue;
            };
            let link = &mut self.links[i];
            if link.stamp == stamp {
                continue;
            }
            link.stamp = stamp;
            link.readable = readable;
            made |= self.service(i);
            self.links[i].readable = false;
            self.check_deadline(i, &mut now);
            if self.needs_watch(i) {
                self.watch(i);
            }
        }
        self.todo = todo;
        made |= self.reconnect_due();
        made |= self.transmit_all();
        // The clock is read for the upkeep every few steps of a spinning
        // caller (it costs more than a step that finds nothing), every
        // step of a sleeping one.
        if now.is_some() || look || self.steps % SWEEP_LOOK_EVERY == 0 {
            self.maybe_sweep(now);
        }
        made |= self.reap();
        if let Some((a, b)) = self.loopback {
            let waiting = [a, b].into_iter().any(|id| {
                self.link_index(id)
                    .is_some_and(|i| !self.links[i].input.is_empty())
            });
            if waiting {
                self.more = true;
            }
        }
        made
    }

    /// Lists the links whose sockets have something to read (bytes, EOF
    /// or an error), and says whether a connection waits on the
    /// listeners (asked only when `listeners`).
    ///
    /// With two or more sockets in the hot set this is one look at its
    /// poller (level-triggered epoll), which reports the listeners too at
    /// no extra cost: idle connections cost nothing, however many. With
    /// fewer, reading directly is cheaper, and the listeners get a
    /// `poll(2)` of their own when asked.
    pub(super) fn readiness(&mut self, listeners: bool, todo: &mut Vec<(LinkId, bool)>) -> bool {
        if self.hot_links.len() < 2 {
            todo.extend(self.hot_links.iter().map(|id| (*id, true)));
            return listeners && self.listeners.as_ref().is_some_and(Listeners::pending);
        }
        let mut listener = false;
        let looked = self.hot.ready(|token| {
            if token == LISTENER {
                listener = true;
            } else {
                todo.push((LinkId(token), true));
            }
        });
        if looked.is_err() {
            todo.extend(self.hot_links.iter().map(|id| (*id, true)));
            listener = true;
        }
        listener
    }

    /// Lists the accepted connections in their handshake that have
    /// something to read.
    pub(super) fn cold_ready(&mut self, todo: &mut Vec<(LinkId, bool)>) {
        if self
            .cold
            .ready(|token| todo.push((LinkId(token), true)))
            .is_err()
        {
            todo.extend(self.handshakes.iter().map(|id| (*id, true)));
        }
    }

    /// Services link `i`: connect, read, write, drain.
    pub(super) fn service(&mut self, i: usize) -> bool {
        let loopback = matches!(self.links[i].pipe, Pipe::Loopback { .. });
        match self.links[i].phase {
            LinkPhase::Dead => false,
            LinkPhase::Connecting => self.check_connect(i),
            LinkPhase::Draining => self.drain_link(i),
            LinkPhase::Handshaking | LinkPhase::Open if loopback => {
                self.loopback_input(i) | self.loopback_transmit(i)
            }
            LinkPhase::Handshaking | LinkPhase::Open => {
                if self.links[i].broken.is_some() {
                    // A write failed: read what the peer sent before
                    // (and its other links), then the link is lost.
                    self.salvage(i);
                    return true;
                }
                let link = &self.links[i];
                let ring = link.shm.as_ref().is_some_and(|p| p.reads);
                let read = (link.readable || ring) && self.read_link(i, self.cfg.read_budget);
                read | self.transmit(i)
            }
        }
    }

    pub(super) fn check_connect(&mut self, i: usize) -> bool {
        let Some(stream) = self.links[i].stream() else {
            return false;
        };
        match stream.connect_state() {
            ConnectState::Pending => false,
            ConnectState::Failed(e) => {
                let kind = if e.kind() == io::ErrorKind::ConnectionRefused {
                    ErrorKind::ConnRefused
                } else {
                    ErrorKind::Io
                };
                let why = if kind == ErrorKind::ConnRefused {
                    format!("nothing listens there ({e})")
                } else {
                    format!("TCP connect failed: {e}")
                };
                self.lose(i, kind, why);
                true
            }
            ConnectState::Ready => {
                let link = &mut self.links[i];
                if let Some(s) = link.stream() {
                    if let Err(e) = s.tune(&self.cfg) {
                        tracing::debug!(error = %e, "soft engine: cannot set socket options");
                    }
                }
                if link.challenge.is_some() {
                    self.challenge_connected(i);
                    return true;
                }
                if let Some(conn) = link.resumes {
                    self.reconnected(i, conn);
                    return true;
                }
                let expect = link.expect.expect("dialed links know their epid");
                let conn = self.core.open_connection(Role::Dialer { expect });
                link.conn = Some(conn);
                link.phase = LinkPhase::Handshaking;
                self.by_conn.insert(conn, link.id);
                self.set_polled(i, Polled::Hot);
                self.transmit(i);
                true
            }
        }
    }
}
