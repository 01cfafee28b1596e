//! Moving a same-host link onto shared memory, and what that changes for
//! its I/O: the offer (dialer), its answer (acceptor), each direction's
//! move when the core says so (`shm::switch` has the exchange), the
//! socket as the link's life line afterwards, wake-ups for a peer that
//! sleeps, and the flags this side raises before it sleeps itself.
//!
//! A link on shared memory is looked at every step (an atomic load of
//! the ring's index when nothing came); its socket only carries the end
//! of the connection and wake-up bytes, and sits in the lifeline poller,
//! looked at as often as the handshakes.

use super::*;
use crate::engine::soft::shm::path::ShmPath;

impl Inner {
    /// Dialer, after the handshake: offers the peer a segment when the
    /// link is a Unix socket (so the peer shares this kernel) and the
    /// configuration allows it. A segment that cannot be made (no memfd
    /// here, a seccomp filter) leaves the link on its socket.
    pub(super) fn offer_shm(&mut self, i: usize, conn: ConnId) {
        let link = &self.links[i];
        if !self.cfg.shared_memory
            || link.remote != Remote::Unix
            || link.expect.is_none()
            || link.shm.is_some()
            || !link.is_live()
        {
            return;
        }
        let path = match ShmPath::create(self.cfg.shm_ring) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "soft engine: no shared segment for a same-host peer; the link stays on its socket");
                return;
            }
        };
        if self.core.offer_shm(conn, path.segment_len()).is_ok() {
            self.links[i].shm = Some(Box::new(path));
        }
    }

    /// Acceptor: the dialer offered a segment of `segment_len` bytes.
    /// Its memfd must have come with the socket bytes that carried the
    /// offer; it is checked and mapped, and the answer queued.
    pub(super) fn on_shm_offered(&mut self, conn: ConnId, segment_len: u64) {
        let Some(i) = self.conn_index(conn) else {
            return;
        };
        let link = &mut self.links[i];
        link.take_fds = false;
        let fds = std::mem::take(&mut link.passed_fds);
        let opened = match fds.as_slice() {
            _ if !self.cfg.shared_memory => Err("shared memory is off here".to_string()),
            [fd] => ShmPath::open(fd, segment_len),
            [] => Err("no descriptor came with the offer".to_string()),
            _ => Err(format!(
                "{} descriptors came with the offer, not one",
                fds.len()
            )),
        };
        let accept = match opened {
            Ok(path) => {
                link.shm = Some(Box::new(path));
                true
            }
            Err(why) => {
                tracing::debug!(%why, "soft engine: declining a same-host peer's shared segment");
                false
            }
        };
        if self.core.answer_shm(conn, accept).is_err() {
            self.links[i].shm = None;
        }
    }

    /// The peer's frames now come through the segment. Input the socket
    /// still held after its switch is a violation.
    pub(super) fn on_shm_peer_moved(&mut self, conn: ConnId) {
        let Some(i) = self.conn_index(conn) else {
            return;
        };
        let link = &mut self.links[i];
        let leftover = !link.input.is_empty() || link.direct.is_some();
        let Some(path) = link.shm.as_mut().filter(|_| !leftover) else {
            let why = if leftover {
                "the peer sent bytes on its socket after moving to shared memory"
            } else {
                "the peer moved to a shared segment it never gave"
            };
            self.lose(i, ErrorKind::Io, why.to_string());
            return;
        };
        path.reads = true;
        let dialer = link.expect.is_some();
        self.core.shm_reads_moved(conn);
        self.set_polled(i, Polled::Lifeline);
        self.shm_links.push(self.links[i].id);
        if dialer {
            let _ = self.core.follow_shm(conn);
        }
        self.on_both_moved(i);
        self.more = true;
    }

    /// Dialer: the peer declined; the link stays on its socket.
    pub(super) fn on_shm_declined(&mut self, conn: ConnId) {
        if let Some(i) = self.conn_index(conn) {
            self.links[i].shm = None;
            tracing::debug!(
                ?conn,
                "soft engine: a same-host peer declined shared memory"
            );
        }
    }

    /// After link `i`'s output went out whole: if the core paused
    /// transmit behind this side's ShmSwitch, the link's frames go to the
    /// ring from now on.
    pub(super) fn shm_move_writes(&mut self, i: usize) {
        let link = &mut self.links[i];
        let Some(conn) = link.conn else {
            return;
        };
        if link.has_output() || !self.core.shm_output_paused(conn) {
            return;
        }
        match link.shm.as_mut() {
            Some(path) => {
                path.writes = true;
                self.core.shm_writes_moved(conn);
                self.on_both_moved(i);
            }
            None => self.lose(
                i,
                ErrorKind::Io,
                "shared memory: a switch without a segment".into(),
            ),
        }
    }

    /// Once both directions of link `i` moved: single copies for large
    /// messages when configured and the peer's process is known, and a
    /// tracing event.
    fn on_both_moved(&mut self, i: usize) {
        let single_copy = self.cfg.shm_single_copy;
        let link = &mut self.links[i];
        let pid = match &link.pipe {
            Pipe::Stream(s) if single_copy => s.peer_pid(),
            _ => None,
        };
        let (Some(p), Some(conn)) = (link.shm.as_mut().filter(|p| p.reads && p.writes), link.conn)
        else {
            return;
        };
        self.stats.shm_moves += 1;
        p.peer_pid = pid;
        if pid.is_some() {
            self.core.set_pull(conn, true);
        }
        let peer = self.core.connection_peer(conn);
        let epid = peer.and_then(|p| self.core.peer_epid(p));
        let p = self.links[i].shm.as_ref().expect("checked above");
        tracing::debug!(
            epid = ?epid,
            segment = p.segment_len(),
            single_copy = p.peer_pid.is_some(),
            "soft engine: link moved to shared memory"
        );
    }

    /// Link `i` closes: when the peer could read this side's buffers
    /// (single copies on), its socket is shut down both ways at once,
    /// before any send on it is handed back, so the peer sees the end
    /// before a buffer it might be reading is reused.
    pub(super) fn revoke_pulls(&mut self, i: usize) {
        let link = &mut self.links[i];
        if link.shm.as_ref().is_some_and(|p| p.peer_pid.is_some()) {
            if let Some(s) = link.stream() {
                s.shutdown_both();
            }
            link.shut = true;
        }
    }

    /// Whether the peer of shared-memory link `i` is still there: its
    /// socket has not reached its end (wake-up bytes are dropped).
    fn peer_alive(&mut self, i: usize) -> bool {
        self.check_lifeline(i);
        !self.links[i].socket_done && self.links[i].is_live()
    }

    /// The core asks for a large message's bytes straight from the
    /// sender's memory (`len` at `addr` in the peer of `conn`) into the
    /// buffer of receive `op`: one copy by the kernel
    /// (`process_vm_readv`). When that fails (the kernel or a security
    /// module refuses, the sender is gone) the receive goes on through
    /// the ring.
    pub(super) fn on_pull(&mut self, conn: ConnId, token: u64, op: OpId, addr: u64, len: usize) {
        let link = self.conn_index(conn);
        let pid = link
            .and_then(|i| self.links[i].shm.as_ref())
            .and_then(|p| p.peer_pid);
        // The sender hands a buffer back only after its end of the link
        // closed (`revoke_pulls`): a read that began before that and ends
        // after it may hold bytes of memory reused meanwhile, so the
        // link must be alive both before and after the copy.
        let alive = link.is_some_and(|i| self.peer_alive(i));
        let dst = self
            .ops
            .get_mut(op)
            .and_then(|e| e.buffer.as_mut_slice())
            .and_then(|b| b.get_mut(..len));
        let mut read = match (pid, dst) {
            _ if !alive => Err(io::Error::other("the sender's link is closing")),
            (Some(pid), Some(dst)) => crate::engine::soft::shm::peer_read::read(pid, addr, dst),
            (None, _) => Err(io::Error::other("the peer's process is not known")),
            (_, None) => Err(io::Error::other("the receive buffer is gone")),
        };
        if read.is_ok() && !link.is_some_and(|i| self.peer_alive(i)) {
            read = Err(io::Error::other("the sender's link closed during the read"));
        }
        match &read {
            Ok(()) => {
                self.stats.shm_pulls += 1;
                self.stats.shm_pull_bytes += len as u64;
            }
            Err(e) => {
                self.stats.shm_pull_fallbacks += 1;
                tracing::debug!(error = %e, "soft engine: cannot read a large message from the sender's memory; it comes through the ring");
            }
        }
        self.core.pull_done(conn, token, read.is_ok());
    }

    /// The peer of link `i` broke its ring's rules (`e` says how): a
    /// warning naming the peer; the link then ends as a failed transport
    /// does (its connection may resume over a new socket).
    pub(super) fn note_ring_fault(&self, i: usize, e: &io::Error) {
        let peer = self.links[i]
            .conn
            .and_then(|c| self.core.connection_peer(c));
        let epid = peer.and_then(|p| self.core.peer_epid(p));
        tracing::warn!(
            epid = ?epid,
            error = %e,
            "soft engine: a same-host peer broke its shared segment; its link ends"
        );
    }

    /// The socket of link `i`, whose input moved to shared memory, is
    /// readable: wake-up bytes are dropped; its end is the peer's.
    pub(super) fn check_lifeline(&mut self, i: usize) {
        let link = &mut self.links[i];
        if link.socket_done {
            return;
        }
        let Some(stream) = link.stream() else {
            return;
        };
        if stream.discard_input(64) == Drained::PeerGone {
            link.socket_done = true;
        }
    }

    /// Wakes the peer of link `i` when it sleeps on what this side just
    /// did (`wrote`: bytes for it; otherwise: room it waits for).
    pub(super) fn shm_wake(&mut self, i: usize, wrote: bool) {
        let link = &self.links[i];
        let (Some(path), Some(stream)) = (link.shm.as_ref(), link.stream()) else {
            return;
        };
        let due = if wrote {
            path.peer_waits_for_bytes()
        } else {
            path.peer_waits_for_room()
        };
        if due {
            self.stats.shm_wakes += 1;
            stream.send_wake();
        }
    }

    /// Before the auto thread sleeps: raises the sleep flags of every
    /// shared-memory link; `false` when one of them has work already.
    pub(crate) fn prepare_sleep(&mut self) -> bool {
        let mut ok = true;
        let mut gone = false;
        for &id in &self.shm_links {
            let Some(&i) = self.slots.get(&id) else {
                gone = true;
                continue;
            };
            let Some(link) = self.links.get_mut(i).filter(|l| l.id == id) else {
                gone = true;
                continue;
            };
            // Only a link a step would read can keep the thread awake
            // (one draining or ended keeps what is left in its ring).
            if !link.is_live() || link.conn.is_none() || link.ended.is_some() {
                continue;
            }
            let blocked = link.has_output();
            if let Some(p) = link.shm.as_mut() {
                ok &= p.prepare_sleep(blocked);
            }
        }
        if gone {
            self.prune_shm_links();
        }
        ok
    }

    /// Forgets the shared-memory links that are gone.
    pub(super) fn prune_shm_links(&mut self) {
        let mut list = std::mem::take(&mut self.shm_links);
        list.retain(|id| {
            self.slots
                .get(id)
                .is_some_and(|&i| self.links.get(i).is_some_and(|l| l.id == *id))
        });
        self.shm_links = list;
    }
}
