//! The endpoint reaching itself: two core connections piped together.
//!
//! Connecting to the endpoint's own epid makes no socket. The edge opens a
//! dialer and an acceptor connection in the core (as after a TCP connect
//! and accept) and gives each a [`Link`] whose "socket" is the other one:
//! transmitting on one appends frames to its partner's input buffer, which
//! the partner's next service hands to the core. Both halves belong to the
//! same peer (the endpoint's own epid), so the core's matching, credit and
//! rendezvous logic is exactly what remote peers get; only the bytes never
//! leave the process.
//!
//! The partner's input holds at most one transmit batch beyond what it has
//! not consumed yet, so memory stays bounded like a socket's would.

use super::endpoint::Inner;
use super::transport::{Link, LinkPhase, Pipe, Remote};
use super::Role;
use crate::ErrorKind;

impl Inner {
    /// Opens the loopback pair unless it exists.
    pub(crate) fn ensure_loopback(&mut self) {
        if self.loopback.is_some() {
            return;
        }
        let own = self.core.epid();
        let (dialer, acceptor) = (self.new_link_id(), self.new_link_id());
        let mut d = Link::new(
            dialer,
            Pipe::Loopback { partner: acceptor },
            Remote::Loopback,
            LinkPhase::Handshaking,
        );
        d.conn = Some(self.core.open_pipe_connection(Role::Dialer { expect: own }));
        let mut a = Link::new(
            acceptor,
            Pipe::Loopback { partner: dialer },
            Remote::Loopback,
            LinkPhase::Handshaking,
        );
        a.conn = Some(self.core.open_pipe_connection(Role::Acceptor));
        self.links.push(d);
        self.links.push(a);
        self.loopback = Some((dialer, acceptor));
    }

    /// Feeds what the partner wrote to link `i` into the core.
    pub(crate) fn loopback_input(&mut self, i: usize) -> bool {
        let link = &mut self.links[i];
        let Some(conn) = link.conn else {
            return false;
        };
        if link.input.is_empty() {
            if link.peer_gone {
                self.lose(i, ErrorKind::Io, "the loopback partner closed".to_owned());
                return true;
            }
            return false;
        }
        // An error closes the connection; the events say so.
        let _ = self.core.handle_input(conn, &mut link.input);
        self.drain_events();
        true
    }

    /// Moves link `i`'s output into its partner's input.
    pub(crate) fn loopback_transmit(&mut self, i: usize) -> bool {
        let Pipe::Loopback { partner } = self.links[i].pipe else {
            return false;
        };
        let Some(conn) = self.links[i].conn.filter(|_| self.links[i].is_live()) else {
            return false;
        };
        let Some(j) = self.link_index(partner) else {
            self.lose(i, ErrorKind::Io, "the loopback partner is gone".to_owned());
            return true;
        };
        let batch = self.cfg.transmit_batch;
        let mut made = false;
        while self.core.wants_transmit(conn) && self.links[j].input.len() < batch {
            let mut input = std::mem::take(&mut self.links[j].input);
            let limit = input.len() + batch;
            let n = self.core.poll_transmit(conn, &mut input, limit, &self.ops);
            self.links[j].input = input;
            self.drain_events();
            if n == 0 {
                break;
            }
            made = true;
            if self.links[i].conn != Some(conn) {
                break;
            }
        }
        made
    }
}
