//! A link's bytes: reading into the core (or straight into a receive
//! buffer), and writing the core's output with one gathered `sendmsg`
//! within a round's budget.

use super::*;
use std::os::fd::AsRawFd;

/// Reads of an accepted Unix link after which a dialer that offered no
/// segment will not offer one (its offer follows the handshake at once).
const OFFER_WITHIN_READS: u64 = 32;

impl Inner {
    /// Reads what link `i` has, up to about `budget` bytes: from its
    /// socket, or from its ring once its input moved to shared memory
    /// (the socket then only says whether the peer is still there).
    pub(super) fn read_link(&mut self, i: usize, budget: usize) -> bool {
        let ring = self.links[i].shm.as_ref().is_some_and(|p| p.reads);
        if !ring {
            return self.read_link_bytes(i, budget, false);
        }
        if self.links[i].readable {
            self.check_lifeline(i);
        }
        let before = self.ring_counts(i);
        let made = self.read_link_bytes(i, budget, true);
        // Room was made: the peer may sleep waiting for it (a fence, so
        // only after bytes were read).
        if i < self.links.len() && self.ring_counts(i).0 != before.0 {
            self.shm_wake(i, false);
        }
        made
    }

    fn read_link_bytes(&mut self, i: usize, mut budget: usize, ring: bool) -> bool {
        let mut made = false;
        loop {
            let link = &mut self.links[i];
            let Some(conn) = link.conn.filter(|_| link.is_live() && link.ended.is_none()) else {
                return made;
            };
            let Pipe::Stream(stream) = &link.pipe else {
                return made;
            };
            if let Some(d) = link.direct {
                // The rest of a Data payload: straight into the receive
                // buffer.
                let dst = self
                    .ops
                    .get_mut(d.op)
                    .and_then(|e| e.buffer.as_mut_slice())
                    .and_then(|b| b.get_mut(d.offset..d.offset + d.len));
                let Some(dst) = dst else {
                    self.lose(
                        i,
                        ErrorKind::Io,
                        format!("the receive buffer of {:?} is gone", d.op),
                    );
                    return true;
                };
                let r = match link.shm.as_mut() {
                    Some(p) if ring => p.read_slice(dst),
                    _ if link.take_fds => stream.read_slice_taking_fds(dst, &mut link.passed_fds),
                    _ => stream.read_slice(dst),
                };
                match r {
                    Ok(0) => {
                        self.end_link(i, None);
                        return true;
                    }
                    Ok(n) => {
                        made = true;
                        if ring {
                            self.stats.shm_bytes_read += n as u64;
                        } else {
                            self.stats.bytes_read += n as u64;
                        }
                        link.active = self.epoch;
                        link.direct = (n < d.len).then(|| crate::engine::soft::DirectData {
                            offset: d.offset + n,
                            len: d.len - n,
                            ..d
                        });
                        if link.direct.is_none() {
                            link.frames += 1;
                        }
                        self.core.direct_data(conn, n);
                        self.drain_events();
                        self.interleave(i);
                        budget = budget.saturating_sub(n);
                        if budget == 0 {
                            self.more = true;
                            return made;
                        }
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        return self.ring_drained(i, ring) || made;
                    }
                    Err(e) => {
                        if ring {
                            self.note_ring_fault(i, &e);
                        }
                        self.end_link(i, Some(e));
                        return true;
                    }
                }
            }
            let want = link.read_size.min(self.cfg.max_read).max(MIN_READ);
            let before = link.input.len();
            let r = match link.shm.as_mut() {
                Some(p) if ring => p.read_buf(&mut link.input, want),
                _ if link.take_fds => {
                    stream.read_buf_taking_fds(&mut link.input, want, &mut link.passed_fds)
                }
                _ => stream.read_buf(&mut link.input, want),
            };
            match r {
                Ok(0) => {
                    self.end_link(i, None);
                    return true;
                }
                Ok(n) => {
                    made = true;
                    if ring {
                        self.stats.shm_bytes_read += n as u64;
                    } else {
                        self.stats.bytes_read += n as u64;
                    }
                    link.active = self.epoch;
                    if n == want {
                        link.read_size = (want * 2).min(self.cfg.max_read);
                    }
                    let ok = self.core.handle_input(conn, &mut link.input).is_ok();
                    if link.input.len() < before + n {
                        // At least one frame went whole to the core.
                        link.frames += 1;
                        if link.take_fds && link.frames > OFFER_WITHIN_READS {
                            // A segment is offered right after the
                            // handshake or not at all: plain reads again.
                            link.take_fds = false;
                            link.passed_fds.clear();
                        }
                    }
                    if ok && !link.input.is_empty() {
                        if let Ok(Some(d)) = self.core.take_direct(conn, &mut link.input) {
                            link.direct = Some(d);
                            // Bulk data flows directly: keep the reads
                            // into the input buffer (which copy) small.
                            link.read_size = MIN_READ;
                        }
                    }
                    self.drain_events();
                    self.interleave(i);
                    budget = budget.saturating_sub(n);
                    if budget == 0 {
                        self.more = true;
                    }
                    if !ok || budget == 0 || (n < want && self.links[i].direct.is_none()) {
                        return made;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return self.ring_drained(i, ring) || made;
                }
                Err(e) => {
                    if ring {
                        self.note_ring_fault(i, &e);
                    }
                    self.end_link(i, Some(e));
                    return true;
                }
            }
        }
    }

    /// Bytes link `i` read from and wrote to its rings so far.
    fn ring_counts(&self, i: usize) -> (u64, u64) {
        self.links[i]
            .shm
            .as_ref()
            .map_or((0, 0), |p| (p.read, p.written))
    }

    /// Link `i`'s input has nothing more for now: a shared-memory link
    /// whose socket reached its end ends here (the ring is empty, so
    /// everything the peer wrote before it went was read).
    fn ring_drained(&mut self, i: usize, ring: bool) -> bool {
        if ring && self.links[i].socket_done {
            self.end_link(i, None);
            return true;
        }
        false
    }

    /// Between two reads of link `i`: write what it has, so a connection
    /// busy in both directions alternates instead of reading its whole
    /// budget while its own output waits (and its peer, symmetrically,
    /// writes while nobody reads).
    pub(super) fn interleave(&mut self, i: usize) {
        let link = &self.links[i];
        if link.is_live()
            && link.broken.is_none()
            && (link.has_output() || link.conn.is_some_and(|c| self.core.wants_transmit(c)))
        {
            self.transmit(i);
        }
    }

    /// Writes link `i`'s pending output; `Ok(true)` once all of it is out.
    /// A link whose output moved to shared memory writes to its ring, and
    /// wakes the peer if it sleeps waiting for bytes.
    pub(super) fn flush(&mut self, i: usize) -> io::Result<bool> {
        let ring = self.links[i].shm.as_ref().is_some_and(|p| p.writes);
        if !ring {
            return self.flush_bytes(i, false);
        }
        let before = self.ring_counts(i);
        let r = self.flush_bytes(i, true);
        if i < self.links.len() && self.ring_counts(i).1 != before.1 {
            self.shm_wake(i, true);
        }
        r
    }

    fn flush_bytes(&mut self, i: usize, ring: bool) -> io::Result<bool> {
        loop {
            let link = &mut self.links[i];
            if !link.has_output() {
                return Ok(true);
            }
            let Pipe::Stream(stream) = &link.pipe else {
                return Ok(true);
            };
            // Output bytes and referred payloads in wire order, as many as
            // one writev takes; the rest goes in the next round.
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let mut n_iov = 0;
            let mut pos = 0;
            let mut all_refs = true;
            for r in &link.refs {
                if n_iov + 2 > MAX_IOV {
                    all_refs = false;
                    break;
                }
                if r.at > pos {
                    iov[n_iov] = IoSlice::new(&link.output[pos..r.at]);
                    n_iov += 1;
                    pos = r.at;
                }
                let Some(payload) = self
                    .ops
                    .get(r.op)
                    .and_then(|e| e.buffer.as_slice().get(r.range.clone()))
                else {
                    return Err(io::Error::other(format!(
                        "the send buffer of {:?} is gone",
                        r.op
                    )));
                };
                iov[n_iov] = IoSlice::new(payload);
                n_iov += 1;
            }
            // The bytes after the last reference, unless references were
            // left out (they come first).
            if all_refs && n_iov < MAX_IOV && pos < link.output.len() {
                iov[n_iov] = IoSlice::new(&link.output[pos..]);
                n_iov += 1;
            }
            let total: usize = iov[..n_iov].iter().map(|s| s.len()).sum();
            let written = match link.shm.as_mut() {
                Some(p) if ring => p.write_vectored(&iov[..n_iov]),
                Some(p) if p.memfd.is_some() => {
                    // The offer's segment goes with the first bytes
                    // written after it was queued.
                    let fd = p.memfd.as_ref().map_or(-1, |f| f.as_raw_fd());
                    let r = stream.write_vectored_passing(&iov[..n_iov], fd);
                    if matches!(r, Ok(n) if n > 0) {
                        p.memfd = None;
                    }
                    r
                }
                _ => stream.write_vectored(&iov[..n_iov]),
            };
            let n = match written {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            };
            if ring {
                self.stats.shm_bytes_written += n as u64;
            } else {
                self.stats.bytes_written += n as u64;
            }
            self.links[i].active = self.epoch;
            let mut released = std::mem::take(&mut self.released);
            self.links[i].consume(n, &mut released);
            for op in released.drain(..) {
                self.release_ref(op, None);
            }
            self.released = released;
            if n < total {
                return Ok(false);
            }
        }
    }

    /// One transmit reference to `op`'s buffer is gone; a parked
    /// completion goes out with the last one. `failed` marks a reference
    /// dropped unwritten: the send then fails.
    pub(super) fn release_ref(&mut self, op: OpId, failed: Option<ErrorKind>) {
        let Some(e) = self.ops.get_mut(op) else {
            return;
        };
        e.refs = e.refs.saturating_sub(1);
        if let (Some(kind), Some(status)) = (failed, e.parked.as_mut()) {
            status.error = Some(kind);
            status.nbytes = 0;
        }
        if e.refs == 0 {
            if let Some(status) = e.parked.take() {
                self.finish(op, status);
            }
        }
    }

    /// Writes what the core has for link `i` while the socket takes it.
    pub(crate) fn transmit(&mut self, i: usize) -> bool {
        let mut made = false;
        if self.links[i].broken.is_some() {
            return false;
        }
        loop {
            match self.flush(i) {
                Ok(true) => {
                    if self.links[i].shm.as_ref().is_some_and(|p| !p.writes) {
                        self.shm_move_writes(i);
                    }
                }
                Ok(false) => {
                    // The socket is full: try again next step.
                    self.watch(i);
                    return true;
                }
                Err(e) => {
                    let link = &mut self.links[i];
                    if link.conn.is_some() && link.is_live() {
                        // The peer may be gone with its last frames
                        // still unread here (a write to a closed Unix
                        // socket fails at once; TCP answers with a
                        // reset): nothing more is written, and the link is
                        // lost only after they were read (`salvage`, at
                        // its next service).
                        link.broken = Some(format!("write failed: {e}"));
                        self.more = true;
                        self.watch(i);
                    } else {
                        self.lose(i, ErrorKind::Io, format!("write failed: {e}"));
                    }
                    return true;
                }
            }
            let link = &mut self.links[i];
            let Some(conn) = link.conn.filter(|_| link.is_live()) else {
                return made;
            };
            if !self.core.wants_transmit(conn) {
                return made;
            }
            if link.round != self.round {
                link.round = self.round;
                link.round_out = 0;
            }
            if link.round_out >= self.cfg.write_budget {
                // More to send, but this link had its share of the round.
                self.more = true;
                self.watch(i);
                return true;
            }
            let before = link.refs.len();
            let n = self.core.poll_transmit_vectored(
                conn,
                &mut link.output,
                &mut link.refs,
                self.cfg.transmit_batch,
                &self.ops,
            );
            link.round_out += n;
            for r in &link.refs[before..] {
                if let Some(e) = self.ops.get_mut(r.op) {
                    e.refs += 1;
                }
            }
            self.drain_events();
            if n == 0 {
                return made;
            }
            made = true;
        }
    }

    /// Starts a round (a progress step, or a post's flush): every link
    /// may compose `write_budget` bytes again.
    pub(crate) fn begin_round(&mut self) {
        self.round = self.round.wrapping_add(1);
    }

    /// Transmits on every connection that may have frames: those the
    /// core lists ([`SoftCore::take_transmit_hints`]), or every one when
    /// it lost count.
    pub(crate) fn transmit_all(&mut self) -> bool {
        let mut made = false;
        let mut hints = std::mem::take(&mut self.hints);
        // Transmitting grants credit, which may list more: a few rounds.
        for _ in 0..4 {
            hints.clear();
            if !self.core.take_transmit_hints(&mut hints) {
                made |= self.transmit_every();
                continue;
            }
            if hints.is_empty() {
                break;
            }
            for &conn in &hints {
                let Some(i) = self.conn_index(conn) else {
                    continue;
                };
                let link = &self.links[i];
                if !link.is_live() {
                    continue;
                }
                made |= match link.pipe {
                    Pipe::Stream(_) => self.transmit(i),
                    Pipe::Loopback { .. } => self.loopback_transmit(i),
                };
            }
        }
        hints.clear();
        self.hints = hints;
        made
    }

    /// Transmits on every link whose connection has output.
    pub(super) fn transmit_every(&mut self) -> bool {
        let mut made = false;
        for i in 0..self.links.len() {
            let link = &self.links[i];
            if !link.is_live() {
                continue;
            }
            let wants = link.conn.is_some_and(|c| self.core.wants_transmit(c));
            if wants || link.has_output() {
                made |= match link.pipe {
                    Pipe::Stream(_) => self.transmit(i),
                    Pipe::Loopback { .. } => self.loopback_transmit(i),
                };
            }
        }
        made
    }

    /// A closed link: flush, shut down the write half (the peer reads
    /// our last frames, then EOF), then drop what the peer still sends
    /// until closing is safe: the peer closed its side, or (TCP) it
    /// acknowledged everything. Bounded by the linger deadline; a socket
    /// still unsafe then goes to the lingerer (`reap`).
    pub(super) fn drain_link(&mut self, i: usize) -> bool {
        let mut made = false;
        match self.flush(i) {
            Ok(true) => {
                let link = &mut self.links[i];
                if !link.shut {
                    if let Some(s) = link.stream() {
                        s.shutdown_write();
                    }
                    link.shut = true;
                    made = true;
                }
            }
            Ok(false) => {}
            Err(_) => {
                self.kill(i);
                return true;
            }
        }
        let link = &mut self.links[i];
        if !link.shut {
            return made;
        }
        if let Pipe::Stream(s) = &link.pipe {
            if linger::safe_to_close(s) {
                self.kill(i);
                made = true;
            }
        }
        made
    }
}
