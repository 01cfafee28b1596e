//! The link table: ids, where each link sits in `links`, the poller a
//! link's socket is registered with, and which links a step must look at
//! whatever their socket says.

use super::*;

impl Inner {
    pub(crate) fn new_link_id(&mut self) -> LinkId {
        let id = LinkId(self.next_link);
        self.next_link += 1;
        id
    }

    /// Where link `id` is in `links`.
    pub(crate) fn link_index(&self, id: LinkId) -> Option<usize> {
        match self.slots.get(&id) {
            Some(&i) if self.links.get(i).is_some_and(|l| l.id == id) => Some(i),
            _ => self.links.iter().position(|l| l.id == id),
        }
    }

    /// As [`link_index`](Self::link_index), in constant time: every link
    /// is in the map but the loopback halves (made elsewhere), which are
    /// searched once and then remembered. A link that is gone costs no
    /// search.
    pub(super) fn slot(&mut self, id: LinkId) -> Option<usize> {
        if let Some(&i) = self.slots.get(&id) {
            if self.links.get(i).is_some_and(|l| l.id == id) {
                return Some(i);
            }
        }
        if self.loopback.is_none_or(|(a, b)| id != a && id != b) {
            return None;
        }
        let i = self.links.iter().position(|l| l.id == id)?;
        self.slots.insert(id, i);
        Some(i)
    }

    /// The link carrying connection `conn`.
    pub(crate) fn conn_index(&mut self, conn: ConnId) -> Option<usize> {
        if let Some(&id) = self.by_conn.get(&conn) {
            if let Some(i) = self.slot(id) {
                if self.links[i].conn == Some(conn) {
                    return Some(i);
                }
            }
        }
        // A connection the core has forgotten has no link: no search.
        self.core.connection_phase(conn)?;
        let i = self.links.iter().position(|l| l.conn == Some(conn))?;
        self.by_conn.insert(conn, self.links[i].id);
        Some(i)
    }

    /// Adds a link; its index.
    pub(crate) fn push_link(&mut self, mut link: Link) -> usize {
        link.active = self.epoch;
        let i = self.links.len();
        self.slots.insert(link.id, i);
        if let Some(c) = link.conn {
            self.by_conn.insert(c, link.id);
        }
        self.links.push(link);
        i
    }

    /// Marks link `i` dead: it is dropped at the end of the step.
    pub(crate) fn kill(&mut self, i: usize) {
        self.set_polled(i, Polled::No);
        let link = &mut self.links[i];
        if link.phase != LinkPhase::Dead {
            link.phase = LinkPhase::Dead;
            self.dead.push(link.id);
        }
    }

    /// Moves link `i`'s socket to poller set `to`. A socket that no set
    /// can take is lost (nothing would ever read it).
    pub(crate) fn set_polled(&mut self, i: usize, to: Polled) {
        let link = &mut self.links[i];
        let from = link.polled;
        if from == to {
            return;
        }
        let Some(fd) = link.stream().map(Stream::fd) else {
            return;
        };
        let id = link.id;
        link.polled = to;
        match from {
            Polled::Hot => {
                self.hot.delete(fd);
                self.hot_links.remove(&id);
            }
            Polled::Cold => {
                self.cold.delete(fd);
                self.cold_links -= 1;
            }
            Polled::Lifeline => {
                self.lifeline.delete(fd);
                self.lifeline_links -= 1;
            }
            Polled::No => {}
        }
        let added = match to {
            Polled::Hot => self.hot.add(fd, id.0).map(|()| {
                self.hot_links.insert(id);
            }),
            Polled::Cold => self.cold.add(fd, id.0).map(|()| self.cold_links += 1),
            Polled::Lifeline => self
                .lifeline
                .add(fd, id.0)
                .map(|()| self.lifeline_links += 1),
            Polled::No => Ok(()),
        };
        if let Err(e) = added {
            self.links[i].polled = Polled::No;
            self.lose(i, ErrorKind::Io, format!("cannot poll the socket: {e}"));
        }
    }

    /// Lists link `i` for a look every step.
    pub(crate) fn watch(&mut self, i: usize) {
        let link = &mut self.links[i];
        if !link.watched {
            link.watched = true;
            self.watch.push(link.id);
        }
    }

    /// Whether link `i` needs a look next step whatever its socket says:
    /// a connect or a drain in progress, a dial's handshake (its
    /// deadline), output the socket has not taken, a failed transport not
    /// dealt with yet, or frames the core still has for it (a write
    /// budget ran out). Loopback halves are looked at every step anyway.
    pub(super) fn needs_watch(&self, i: usize) -> bool {
        let l = &self.links[i];
        if !matches!(l.pipe, Pipe::Stream(_)) {
            // A loopback half is looked at every step while the pair
            // stands; one left alone must find out.
            return l.is_live() && l.peer_gone;
        }
        match l.phase {
            LinkPhase::Connecting | LinkPhase::Draining => true,
            LinkPhase::Dead => false,
            LinkPhase::Handshaking if l.expect.is_some() => true,
            LinkPhase::Handshaking | LinkPhase::Open => {
                l.broken.is_some()
                    || l.ended.is_some()
                    || l.has_output()
                    || l.conn.is_some_and(|c| self.core.wants_transmit(c))
            }
        }
    }

    /// The peer of `epid` if it is connected and not closing.
    pub(super) fn up_peer(&self, epid: Epid) -> Option<PeerAddr> {
        self.core.peer_of(epid).filter(|p| self.core.is_peer_up(*p))
    }

    pub(crate) fn register_link(&mut self, i: usize) {
        let Some((registry, token)) = &self.registry else {
            return;
        };
        let link = &mut self.links[i];
        if let Pipe::Stream(s) = &mut link.pipe {
            match s.register(registry, *token) {
                Ok(()) => link.registered = true,
                Err(e) => {
                    tracing::warn!(error = %e, "soft engine: cannot register a socket with the reactor")
                }
            }
        }
    }

    // ----- progress ------------------------------------------------------
}
