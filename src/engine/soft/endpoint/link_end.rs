//! The end of a link: what it had yet to write, saving what the kernel
//! still holds for the core, and losing the connection (its operations
//! fail; other peers are untouched).

use super::*;

impl Inner {
    /// The bytes link `link` has yet to write, in wire order (the output
    /// with the referred payloads in place).
    pub(super) fn pending_output(&self, link: &crate::engine::soft::transport::Link) -> Vec<u8> {
        let total = link.output.len() + link.refs.iter().map(|r| r.range.len()).sum::<usize>();
        let mut out = Vec::with_capacity(total);
        let mut pos = 0;
        for r in &link.refs {
            out.extend_from_slice(&link.output[pos..r.at]);
            pos = r.at;
            match self
                .ops
                .get(r.op)
                .and_then(|e| e.buffer.as_slice().get(r.range.clone()))
            {
                Some(p) => out.extend_from_slice(p),
                // Cannot happen (a referred buffer stays until written);
                // the stream would be garbage after this point.
                None => return out,
            }
        }
        out.extend_from_slice(&link.output[pos..]);
        out
    }

    /// Reading link `i` ended: EOF (`None`) or a read error. The link is
    /// lost after the peer's other links were read (`salvage`).
    pub(super) fn end_link(&mut self, i: usize, error: Option<io::Error>) {
        let why = match (&error, self.links[i].phase) {
            (Some(e), _) => format!("read failed: {e}"),
            (None, LinkPhase::Handshaking) => {
                "the peer closed the connection during the handshake".to_owned()
            }
            (None, _) => "the peer closed the connection".to_owned(),
        };
        self.links[i].ended = Some((ErrorKind::Io, why));
        if !self.salvaging {
            self.salvage(i);
        }
    }

    /// Link `i`'s transport failed (its reading ended, or a write broke).
    /// Before its peer goes down (which fails everything pending towards
    /// it), every byte the kernel still holds from that peer is taken in:
    /// the rest of this link's input after a broken write (the kernel
    /// returns what arrived before the EOF or reset), and the input of the
    /// peer's other links. Frames on different connections are not
    /// ordered, so a message that arrived whole on one of them must not be
    /// lost because another ended first. Then every link found ended or
    /// broken meanwhile is lost; one whose write broke and that was not
    /// read here (another peer's, or a link whose handshake named no peer
    /// yet) is salvaged the same way first.
    pub(super) fn salvage(&mut self, i: usize) {
        self.salvaging = true;
        let mut read = Vec::new();
        let mut next = Some(i);
        while let Some(k) = next {
            self.read_with_siblings(k, &mut read);
            next = (0..self.links.len()).find(|&j| {
                let link = &self.links[j];
                link.is_live()
                    && link.ended.is_none()
                    && link.broken.is_some()
                    && !read.contains(&link.id)
            });
        }
        self.salvaging = false;
        for j in 0..self.links.len() {
            let link = &self.links[j];
            if !link.is_live() {
                continue;
            }
            let failed = link
                .ended
                .clone()
                .or_else(|| link.broken.clone().map(|why| (ErrorKind::Io, why)));
            if let Some((kind, why)) = failed {
                self.lose(j, kind, why);
            }
        }
    }

    /// Reads the rest of link `k` and of every other link to its peer,
    /// noting each in `read`.
    fn read_with_siblings(&mut self, k: usize, read: &mut Vec<LinkId>) {
        let peer = self.links[k]
            .conn
            .and_then(|c| self.core.connection_peer(c));
        read.push(self.links[k].id);
        self.read_rest(k);
        let Some(peer) = peer else { return };
        for j in 0..self.links.len() {
            let same = self.links[j]
                .conn
                .is_some_and(|c| self.core.connection_peer(c) == Some(peer));
            if j != k && same && !read.contains(&self.links[j].id) {
                read.push(self.links[j].id);
                self.read_rest(j);
            }
        }
    }

    /// Reads everything link `j`'s socket holds (bounded, against a peer
    /// that never stops sending), until it would block or ends.
    pub(super) fn read_rest(&mut self, j: usize) {
        let link = &self.links[j];
        if !link.is_live() || link.ended.is_some() || link.stream().is_none() {
            return;
        }
        let mut left = SALVAGE_LIMIT;
        while left > 0 {
            let before = self.stats.bytes_read;
            if !self.read_link(j, left) {
                return;
            }
            let n = (self.stats.bytes_read - before) as usize;
            left = left.saturating_sub(n.max(1));
        }
    }

    /// Link `i`'s transport failed: the core fails everything pending
    /// towards its peer; a dial a `connect` waits for records the error.
    pub(crate) fn lose(&mut self, i: usize, kind: ErrorKind, why: String) {
        let link = &self.links[i];
        let dialing = matches!(link.phase, LinkPhase::Connecting | LinkPhase::Handshaking);
        let record = dialing && link.awaited;
        let attempt = link.resumes;
        let challenged = link.challenge;
        self.kill(i);
        let link = &mut self.links[i];
        link.direct = None;
        let remote = link.remote;
        let expect = link.expect;
        let id = link.id;
        let conn = link.conn.take();
        if let Some(conn) = conn {
            self.by_conn.remove(&conn);
            if self.try_detach(i, conn) {
                if attempt.is_some() {
                    self.attempt_failed(conn, kind, format!("{remote}: {why}"));
                }
                return;
            }
            self.core.connection_lost(conn, format!("{remote}: {why}"));
            self.drain_events();
        } else if let Some(conn) = attempt {
            self.attempt_failed(conn, kind, format!("{remote}: {why}"));
        } else if let Some(conn) = challenged {
            self.core.verified(
                conn,
                Err(format!("the challenge to {remote} failed: {why}")),
            );
            self.drain_events();
        }
        if record {
            let target = expect.map_or_else(|| "?".to_owned(), |e| e.to_string());
            self.dial_errors.push((
                id,
                Error::new(
                    kind,
                    format!("soft engine: connecting to {target} at {remote}: {why}"),
                ),
            ));
        }
    }

    // ----- events --------------------------------------------------------
}
