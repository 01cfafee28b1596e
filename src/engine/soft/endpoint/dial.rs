//! Dialing a peer's epid: the link of a dial, and the errors `connect`
//! waits for.

use super::*;

impl Inner {
    /// Starts dialing `epid`; the link's deadline is `deadline`.
    pub(super) fn dial(
        &mut self,
        epid: Epid,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<LinkId> {
        let (stream, remote, phase) = dial_epid(epid, &self.cfg)
            .map_err(|(kind, why)| Error::new(kind, format!("soft engine: {why}")))?;
        let id = self.new_link_id();
        let mut link = Link::new(id, Pipe::Stream(stream), remote, phase);
        link.expect = Some(epid);
        link.awaited = true;
        link.deadline = Some(deadline);
        link.timeout = timeout;
        if phase == LinkPhase::Handshaking {
            link.conn = Some(self.core.open_connection(Role::Dialer { expect: epid }));
        }
        self.add_dial_link(link);
        Ok(id)
    }

    /// Adds a link that dials: watched until it is up, and, once its
    /// socket is connected (a Unix one at once), polled and sending its
    /// handshake.
    pub(crate) fn add_dial_link(&mut self, link: Link) -> usize {
        let connected = link.phase == LinkPhase::Handshaking;
        let i = self.push_link(link);
        if connected {
            self.set_polled(i, Polled::Hot);
        }
        self.watch(i);
        self.register_link(i);
        if connected {
            self.transmit(i);
        }
        i
    }

    pub(super) fn take_dial_error(&mut self, id: LinkId) -> Option<Error> {
        let k = self.dial_errors.iter().position(|(l, _)| *l == id)?;
        Some(self.dial_errors.swap_remove(k).1)
    }

    // ----- closing -------------------------------------------------------
}
