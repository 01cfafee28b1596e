//! Accepting connections, and making room for new ones: settling or
//! evicting connections still in their handshake, evicting idle ones
//! when the endpoint is full.

use super::*;

impl Inner {
    /// Accepts waiting connections (the caller saw one waiting), at most
    /// [`MAX_ACCEPTS`] per step, making room for each
    /// ([`make_room`](Self::make_room)).
    pub(super) fn accept_all(&mut self) -> bool {
        let mut made = false;
        let mut settled = false;
        for _ in 0..MAX_ACCEPTS {
            let Some(listeners) = &self.listeners else {
                return made;
            };
            let (stream, remote) = match listeners.accept() {
                Ok(Some(s)) => s,
                Ok(None) => return made,
                Err(e) => {
                    // Out of descriptors and the like: try again next step.
                    tracing::debug!(error = %e, "soft engine: accept failed");
                    return made;
                }
            };
            made = true;
            if !self.make_room(&mut settled) {
                self.stats.rejected += 1;
                continue;
            }
            if let Err(e) = stream.tune(&self.cfg) {
                tracing::debug!(error = %e, "soft engine: cannot set socket options");
            }
            self.stats.accepted += 1;
            let id = self.new_link_id();
            let mut link = Link::new(id, Pipe::Stream(stream), remote, LinkPhase::Handshaking);
            let conn = self.core.open_connection(Role::Acceptor);
            if self.cfg.verify_peers {
                self.core.require_verification(conn);
            }
            link.conn = Some(conn);
            // A same-host dialer may offer a shared segment later.
            link.take_fds = self.cfg.shared_memory && link.remote == Remote::Unix;
            // A Hello is small: no room for more before it is in.
            link.read_size = MIN_READ;
            link.timeout = self.cfg.handshake_timeout;
            link.deadline = Instant::now().checked_add(link.timeout);
            let i = self.push_link(link);
            self.handshakes.push_back(id);
            self.set_polled(i, Polled::Cold);
            self.register_link(i);
        }
        // More may wait: the next step takes them.
        self.more = true;
        made
    }

    /// Makes room for one more accepted connection; whether there is
    /// (`SoftConfig::max_handshaking`, `max_connections`). `settled`: the
    /// connections in their handshake were given their chance to finish
    /// already in this round of accepts.
    pub(super) fn make_room(&mut self, settled: &mut bool) -> bool {
        if self.cold_links >= self.cfg.max_handshaking {
            if !*settled {
                *settled = true;
                self.settle_handshakes();
            }
            if self.cold_links >= self.cfg.max_handshaking {
                self.evict_handshake();
            }
        }
        if self.links.len() < self.cfg.max_connections {
            return true;
        }
        let live = self.links.iter().filter(|l| l.is_live()).count();
        live < self.cfg.max_connections || self.evict_handshake() || self.evict_idle()
    }

    /// Reads what the connections in their handshake have: those whose
    /// Hello is in complete their handshake and leave the set.
    pub(super) fn settle_handshakes(&mut self) {
        let mut ready = Vec::new();
        self.cold_ready(&mut ready);
        for (id, _) in ready {
            let Some(i) = self.slot(id) else {
                continue;
            };
            self.links[i].readable = true;
            self.service(i);
            self.links[i].readable = false;
            if self.needs_watch(i) {
                self.watch(i);
            }
        }
    }

    /// Closes the oldest accepted connection still in its handshake;
    /// whether there was one.
    pub(super) fn evict_handshake(&mut self) -> bool {
        while let Some(id) = self.handshakes.pop_front() {
            let Some(i) = self.slot(id) else {
                continue;
            };
            if self.links[i].polled != Polled::Cold {
                // Finished its handshake, or gone.
                continue;
            }
            self.stats.evicted += 1;
            self.lose(
                i,
                ErrorKind::Io,
                "closed to make room: too many connections in their handshake".to_owned(),
            );
            return true;
        }
        false
    }

    /// Closes gracefully (Bye) the connection idle longest among those
    /// with nothing in flight whose peer nobody named; whether there was
    /// one. Idle: no bytes either way since the last upkeep began.
    pub(super) fn evict_idle(&mut self) -> bool {
        let mut best: Option<(u64, usize)> = None;
        for (i, l) in self.links.iter().enumerate() {
            if l.phase != LinkPhase::Open
                || !matches!(l.pipe, Pipe::Stream(_))
                || l.active >= self.epoch
            {
                continue;
            }
            let Some(c) = l.conn else {
                continue;
            };
            if !self.core.connection_idle(c) {
                continue;
            }
            // Connections of peers the layers above named stay.
            match self.core.connection_peer(c) {
                Some(p) if !self.named.contains(&p) => {}
                _ => continue,
            }
            if best.is_none_or(|(a, _)| l.active < a) {
                best = Some((l.active, i));
            }
        }
        let Some((_, i)) = best else {
            return false;
        };
        let Some(c) = self.links[i].conn else {
            return false;
        };
        self.stats.evicted += 1;
        self.core.close_connection(c);
        self.transmit(i);
        if self.needs_watch(i) {
            self.watch(i);
        }
        true
    }
}
